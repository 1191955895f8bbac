/*
 * nmiorder: a PMI and another NMI fall due on the same instruction (exact backend): PMC0
 * overflows after 8 instructions and the NMI request port (0x50c) is told to inject an NMI
 * 5 instructions after its OUT, which is instruction 3. Both NMIs must arrive; the VMM's
 * statistics say in which order they were injected and whether an entry was cancelled.
 */
#include "kit.h"
#include "pmu.h"

#define NMI_REQUEST_PORT 0x50c

static volatile unsigned nmis;
static volatile uint64_t status_seen[4];

void nmi_handler(struct trap_frame *f)
{
	uint64_t status = rdmsr(MSR_IA32_PERF_GLOBAL_STATUS);
	if (nmis < 4)
		status_seen[nmis] = status;
	nmis++;
	if (status)
		wrmsr(MSR_IA32_PERF_GLOBAL_OVF_CTRL, status);
}

/* After the enabling WRMSR: mov(1) mov(2) out(3) nop(4) ... nop(10). */
static __attribute__((noinline)) void region(void)
{
	uint32_t ecx = MSR_IA32_PERF_GLOBAL_CTRL, eax = 1, edx = 0;
	asm volatile("wrmsr\n\t"
		     "mov $0x50c, %%dx\n\t"
		     "mov $5, %%al\n\t"
		     "outb %%al, %%dx\n\t"
		     "nop\n\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n\tnop\n\t"
		     : "+c"(ecx), "+a"(eax), "+d"(edx) : : "memory");
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
}

int main(int argc, char **argv)
{
	struct pmu_caps caps;
	pmu_probe(&caps);
	if (caps.version < 2 || !pmu_event_available(&caps, EV_INSTRUCTIONS)) {
		report_skip("needs an exact instructions counter (--backend exact)");
		return report_summary();
	}
	pmu_reset(&caps);
	lapic_enable();
	lapic_set_lvtpc(LVT_NMI);
	wrmsr(MSR_IA32_PMC0, (uint32_t)-8);
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(EV_INSTRUCTIONS, EVTSEL_OS | EVTSEL_INT | EVTSEL_EN));
	region();
	for (int spin = 0; spin < 1000 && nmis < 2; spin++)
		barrier();
	report(nmis == 2, "a PMI and an NMI due together: both delivered (%u NMIs)", nmis);
	report(status_seen[0] & 1, "the first NMI handler sees the overflow status (%#llx)",
	       (unsigned long long)status_seen[0]);
	report(status_seen[1] == 0, "the second finds it already handled (%#llx)", (unsigned long long)status_seen[1]);
	return report_summary();
}
