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

/* AMD: Linux's amd_zen2/zen4 event map (and PMCx120 for ref-cycles, as the VMM's model). */
static const uint16_t amd_events[NR_ARCH_EVENTS] = {
	[EV_CYCLES] = 0x0076,
	[EV_INSTRUCTIONS] = 0x00c0,
	[EV_REF_CYCLES] = 0x0120,
	[EV_LLC_REFS] = 0xff60, /* umask << 8 | event, event < 0x100 */
	[EV_LLC_MISSES] = 0x0964,
	[EV_BRANCHES] = 0x00c2,
	[EV_BRANCH_MISSES] = 0x00c3,
};

uint64_t amd_evtsel(enum arch_event ev, uint64_t flags)
{
	uint16_t e = amd_events[ev];
	if (ev == EV_REF_CYCLES)
		return amd_encode(e, 0, flags);
	return amd_encode(e & 0xff, e >> 8, flags);
}

void amd_pmu_probe(struct amd_pmu_caps *caps)
{
	struct cpuid_regs v = cpuid(0);
	caps->amd = v.ebx == 0x68747541 && v.edx == 0x69746e65 && v.ecx == 0x444d4163; /* AuthenticAMD */
	caps->ext_max = cpuid(0x80000000).eax;
	caps->perfctr_core = caps->ext_max >= 0x80000001 && (cpuid(0x80000001).ecx & CPUID_80000001_ECX_PERFCTR_CORE);
	caps->perfmon_v2 = caps->ext_max >= 0x80000022 && (cpuid(0x80000022).eax & CPUID_80000022_EAX_PERFMON_V2);
	if (caps->perfmon_v2)
		caps->counters = cpuid(0x80000022).ebx & 0xf;
	else
		caps->counters = caps->perfctr_core ? AMD_MAX_COUNTERS : AMD_LEGACY_COUNTERS;
}

uint32_t amd_ctl_msr(const struct amd_pmu_caps *caps, unsigned i)
{
	return caps->perfctr_core ? MSR_F15H_PERF_CTL(i) : MSR_K7_PERF_CTL0 + i;
}

uint32_t amd_ctr_msr(const struct amd_pmu_caps *caps, unsigned i)
{
	return caps->perfctr_core ? MSR_F15H_PERF_CTR(i) : MSR_K7_PERF_CTR0 + i;
}

void amd_pmu_reset(const struct amd_pmu_caps *caps)
{
	if (caps->perfmon_v2)
		wrmsr(MSR_AMD64_PERF_CNTR_GLOBAL_CTL, 0);
	for (unsigned i = 0; i < caps->counters; i++) {
		wrmsr(amd_ctl_msr(caps, i), 0);
		wrmsr(amd_ctr_msr(caps, i), 0);
	}
	if (caps->perfmon_v2)
		wrmsr(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR, rdmsr(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS));
}

uint64_t rdpmc_after_enable(uint32_t global_ctrl, uint64_t mask, uint32_t counter)
{
	uint32_t ecx = global_ctrl, eax = (uint32_t)mask, edx = (uint32_t)(mask >> 32);
	asm volatile("wrmsr\n\t"
		     "mov %[ctr], %%ecx\n\t"
		     "rdpmc\n\t"
		     : "+c"(ecx), "+a"(eax), "+d"(edx)
		     : [ctr] "r"(counter)
		     : "memory");
	wrmsr(global_ctrl, 0);
	return (uint64_t)edx << 32 | eax;
}

void pmu_measure_loop(uint32_t global_ctrl, uint64_t mask, uint32_t n)
{
	uint32_t ecx = global_ctrl, eax = (uint32_t)mask, edx = (uint32_t)(mask >> 32);
	asm volatile("wrmsr\n\t"
		     "mov %[n], %%esi\n\t"
		     "1: dec %%esi\n\t"
		     "jnz 1b\n\t"
		     "mov %[g], %%ecx\n\t"
		     "xor %%eax, %%eax\n\t"
		     "xor %%edx, %%edx\n\t"
		     "wrmsr\n\t"
		     : "+c"(ecx), "+a"(eax), "+d"(edx)
		     : [n] "r"(n), [g] "r"(global_ctrl)
		     : "esi", "memory");
}
