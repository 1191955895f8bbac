/* A guest that knows nothing of perfvm's kit: it prints on the serial port, counts its own
 * work with the virtual PMU's first counter, and powers off. docs/GUEST.md explains it. */
#include <stdint.h>

static inline void outb(uint16_t port, uint8_t v)
{
	__asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

static inline void wrmsr(uint32_t msr, uint64_t v)
{
	__asm__ volatile("wrmsr" : : "c"(msr), "a"((uint32_t)v), "d"((uint32_t)(v >> 32)) : "memory");
}

static inline uint64_t rdmsr(uint32_t msr)
{
	uint32_t lo, hi;
	__asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
	return (uint64_t)hi << 32 | lo;
}

static void print(const char *s)
{
	while (*s)
		outb(0x3f8, (uint8_t)*s++); /* 16550 UART: perfvm prints it on stdout */
}

static void print_dec(uint64_t v)
{
	char b[21];
	int i = 20;
	b[i] = 0;
	do
		b[--i] = (char)('0' + v % 10);
	while (v /= 10);
	print(b + i);
}

/* The work to measure; noinline so that profiles show it as a function of its own. */
__attribute__((noinline)) static uint64_t work(uint64_t n)
{
	uint64_t x = 1;
	for (uint64_t i = 0; i < n; i++)
		x = x * 6364136223846793005ull + i;
	return x;
}

void main(void)
{
	print("hello from my own guest\n");
	/* Intel architectural PMU (perfvm's default identity): count instructions retired
	 * (event 0xc0) at CPL0 on PMC0, around work() only. */
	wrmsr(0x38f, 0);                               /* IA32_PERF_GLOBAL_CTRL: all off */
	wrmsr(0x186, 0xc0 | 1ull << 17 | 1ull << 22); /* IA32_PERFEVTSEL0: event, OS, EN */
	wrmsr(0xc1, 0);                                /* IA32_PMC0 */
	wrmsr(0x38f, 1);                               /* PMC0 counts from here */
	uint64_t x = work(100000);
	wrmsr(0x38f, 0);
	print("work: ");
	print_dec(rdmsr(0xc1));
	print(x ? " instructions\n" : " instructions (x == 0)\n");
	for (const char *p = "Shutdown"; *p; p++)
		outb(0x8900, (uint8_t)*p); /* the Bochs shutdown port: perfvm exits 0 */
}
