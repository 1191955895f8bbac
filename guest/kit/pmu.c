/* Architectural PMU helpers shared by the conformance suite and the perf agent. */
#include "kit.h"
#include "pmu.h"

const struct arch_event_desc arch_events[NR_ARCH_EVENTS] = {
	[EV_CYCLES] = { "cycles", 0x3c, 0x00 },
	[EV_INSTRUCTIONS] = { "instructions", 0xc0, 0x00 },
	[EV_REF_CYCLES] = { "ref-cycles", 0x3c, 0x01 },
	[EV_LLC_REFS] = { "cache-references", 0x2e, 0x4f },
	[EV_LLC_MISSES] = { "cache-misses", 0x2e, 0x41 },
	[EV_BRANCHES] = { "branches", 0xc4, 0x00 },
	[EV_BRANCH_MISSES] = { "branch-misses", 0xc5, 0x00 },
};

void pmu_probe(struct pmu_caps *caps)
{
	struct cpuid_regs r = cpuid(0xa);
	caps->version = r.eax & 0xff;
	caps->gp_counters = (r.eax >> 8) & 0xff;
	caps->gp_width = (r.eax >> 16) & 0xff;
	caps->ebx_len = r.eax >> 24;
	caps->unavailable = r.ebx;
	caps->fixed_counters = r.edx & 0x1f;
	caps->fixed_width = (r.edx >> 5) & 0xff;
	caps->perf_capabilities = 0;
	if (cpuid(1).ecx & CPUID_1_ECX_PDCM)
		caps->perf_capabilities = rdmsr(MSR_IA32_PERF_CAPABILITIES);
}

int pmu_event_available(const struct pmu_caps *caps, enum arch_event ev)
{
	return (unsigned)ev < caps->ebx_len && !(caps->unavailable & (1u << ev));
}

void pmu_reset(const struct pmu_caps *caps)
{
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	for (unsigned i = 0; i < caps->gp_counters; i++) {
		wrmsr(MSR_IA32_PERFEVTSEL0 + i, 0);
		wrmsr(MSR_IA32_PMC0 + i, 0);
	}
	if (caps->fixed_counters)
		wrmsr(MSR_IA32_FIXED_CTR_CTRL, 0);
	for (unsigned j = 0; j < caps->fixed_counters; j++)
		wrmsr(MSR_IA32_FIXED_CTR0 + j, 0);
	wrmsr(MSR_IA32_PERF_GLOBAL_OVF_CTRL, rdmsr(MSR_IA32_PERF_GLOBAL_STATUS));
}
