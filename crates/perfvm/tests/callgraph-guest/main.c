/* A guest that knows nothing of perfvm's kit or agent, built with frame pointers, for
 * `perfvm record -a -g`: main -> cmain -> work -> heavy (70% of the iterations) and light
 * (30%). The command line's last word is the number of millions of iterations. It boots
 * with docs/guest-example's start.S and link.ld (main gets the vCPU index and boot info). */
#include <stdint.h>
#include "perfvm_boot.h"

static inline void outb(uint16_t port, uint8_t v)
{
	__asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

/* The same loop in both, so that samples split as the iterations do. */
static inline __attribute__((always_inline)) uint64_t spin(uint64_t x, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ull + i;
		__asm__ volatile("" : "+r"(x)); /* keep the loop a loop */
	}
	return x;
}

/* A call after the loop keeps heavy and light from being leaves: GCC before 13 gives a leaf
 * no frame whatever -mno-omit-leaf-frame-pointer says, and its caller would vanish from the
 * chain. */
__attribute__((noinline)) uint64_t mix(uint64_t x) { return x ^ (x >> 29); }
__attribute__((noinline)) uint64_t heavy(uint64_t x, uint64_t n) { return mix(spin(x, 7 * n)); }
__attribute__((noinline)) uint64_t light(uint64_t x, uint64_t n) { return mix(spin(x, 3 * n)); }

__attribute__((noinline)) uint64_t work(uint64_t n)
{
	uint64_t x = 1;
	for (int round = 0; round < 100; round++)
		x = light(heavy(x, n / 100), n / 100);
	return x;
}

__attribute__((noinline)) uint64_t cmain(const char *cmdline)
{
	const char *last = cmdline;
	for (const char *p = cmdline; *p; p++)
		if (p[0] == ' ' && p[1] != ' ' && p[1])
			last = p + 1;
	uint64_t millions = 0;
	for (; *last >= '0' && *last <= '9'; last++)
		millions = millions * 10 + (uint64_t)(*last - '0');
	return work((millions ? millions : 1) * 1000000 / 10);
}

void main(uint32_t vcpu, const struct perfvm_boot_info *boot)
{
	(void)vcpu;
	uint64_t x = cmain((const char *)(uintptr_t)boot->cmdline);
	const char *msg = x ? "callgraph: done\n" : "callgraph: done (x == 0)\n";
	while (*msg)
		outb(0x3f8, (uint8_t)*msg++);
	for (const char *p = "Shutdown"; *p; p++)
		outb(0x8900, (uint8_t)*p);
}
