/* Inline wrappers for the privileged and port-IO instructions the kit and guests use
 * (the interrupt flag: irq.h). */
#ifndef KIT_X86_H
#define KIT_X86_H
#include <stdint.h>

static inline uint64_t rdmsr(uint32_t msr)
{
	uint32_t lo, hi;
	asm volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
	return lo | (uint64_t)hi << 32;
}

static inline void wrmsr(uint32_t msr, uint64_t val)
{
	asm volatile("wrmsr" : : "c"(msr), "a"((uint32_t)val), "d"((uint32_t)(val >> 32)) : "memory");
}

/* Raw rdpmc: #GP if the counter index is bad or CR4.PCE/CPL forbid it (see rdpmc_safe). */
static inline uint64_t rdpmc(uint32_t counter)
{
	uint32_t lo, hi;
	asm volatile("rdpmc" : "=a"(lo), "=d"(hi) : "c"(counter));
	return lo | (uint64_t)hi << 32;
}

struct cpuid_regs { uint32_t eax, ebx, ecx, edx; };

/* The CPUID instruction itself. Guests use cpuid_count()/cpuid(): in native mode this host's
 * CPUID instruction does not answer what the VMM configured (kit/cpuid.c). */
static inline struct cpuid_regs hw_cpuid_count(uint32_t leaf, uint32_t subleaf)
{
	struct cpuid_regs r;
	asm volatile("cpuid" : "=a"(r.eax), "=b"(r.ebx), "=c"(r.ecx), "=d"(r.edx) : "a"(leaf), "c"(subleaf));
	return r;
}

/* CPUID as the VMM configured it for this vCPU, in both execution modes (kit/cpuid.c). */
struct cpuid_regs cpuid_count(uint32_t leaf, uint32_t subleaf);

static inline struct cpuid_regs cpuid(uint32_t leaf) { return cpuid_count(leaf, 0); }
/* How the vPMU counts, as the VMM's own CPUID leaf says (PERFVM_BACKEND_*, perfvm_cpuid.h);
 * PERFVM_BACKEND_NONE without the leaf (another hypervisor). */
unsigned vpmu_backend(void);

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;
	asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return lo | (uint64_t)hi << 32;
}

static inline void outb(uint16_t port, uint8_t v) { asm volatile("outb %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outw(uint16_t port, uint16_t v) { asm volatile("outw %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outl(uint16_t port, uint32_t v) { asm volatile("outl %0, %1" : : "a"(v), "Nd"(port)); }

static inline uint8_t inb(uint16_t port)
{
	uint8_t v;
	asm volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}

static inline uint16_t inw(uint16_t port)
{
	uint16_t v;
	asm volatile("inw %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}

static inline uint32_t inl(uint16_t port)
{
	uint32_t v;
	asm volatile("inl %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}

static inline void pause(void) { asm volatile("pause" : : : "memory"); }
static inline void barrier(void) { asm volatile("" : : : "memory"); }

/* No cli/sti/hlt/pushf here: the interrupt flag and halting depend on the execution mode,
 * see irq.h (irq_disable, irq_enable, irq_save, irq_restore, cpu_idle, cpu_park). CR2 is
 * fault_cr2() there too. */

#define DEFINE_READ_CR(n) \
	static inline uint64_t read_cr##n(void) { uint64_t v; asm volatile("mov %%cr" #n ", %0" : "=r"(v)); return v; }
DEFINE_READ_CR(0)
DEFINE_READ_CR(3)
DEFINE_READ_CR(4)
#undef DEFINE_READ_CR

static inline void write_cr4(uint64_t v) { asm volatile("mov %0, %%cr4" : : "r"(v) : "memory"); }

#endif
