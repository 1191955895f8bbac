/*
 * The perf agent's vendor table: Intel's architectural PMU or AMD's PerfMonV2, filled from
 * CPUID, and the events' encodings (perfvm's Intel codes, the vendor's event selects).
 */
#include "agent_internal.h"

struct pmu_caps agent_caps;

struct agent_vendor agent_vt;

/* Fill the vendor table from CPUID (the kit's cpuid(): the VMM's table, natively too). */
void agent_probe_vendor(void)
{
	struct amd_pmu_caps amd;
	amd_pmu_probe(&amd);
	if (amd.amd) {
		agent_vt.amd = 1;
		agent_vt.ok = amd.perfmon_v2 && amd.counters > 0;
		agent_vt.no_pmu = "no AMD PerfMonV2 PMU";
		agent_vt.gp_counters = amd.counters > AMD_MAX_COUNTERS ? AMD_MAX_COUNTERS : amd.counters;
		agent_vt.gp_width = 48;
		agent_vt.full_width_writes = 1;
		agent_vt.global_ctrl = MSR_AMD64_PERF_CNTR_GLOBAL_CTL;
		agent_vt.global_status = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS;
		agent_vt.status_clear = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR;
		agent_vt.ctl0 = amd_ctl_msr(&amd, 0);
		agent_vt.ctr0 = agent_vt.wr_ctr0 = amd_ctr_msr(&amd, 0);
		agent_vt.stride = amd_ctl_msr(&amd, 1) - agent_vt.ctl0;
		agent_vt.pmi_masks_lvtpc = 0;
		return;
	}
	pmu_probe(&agent_caps);
	agent_vt.ok = agent_caps.version >= 2;
	agent_vt.no_pmu = "no architectural PMU";
	agent_vt.gp_counters = agent_caps.gp_counters;
	agent_vt.gp_width = agent_caps.gp_width;
	agent_vt.fixed_counters = agent_caps.fixed_counters;
	agent_vt.fixed_width = agent_caps.fixed_width;
	agent_vt.full_width_writes = !!(agent_caps.perf_capabilities & PERF_CAP_FW_WRITE);
	agent_vt.global_ctrl = MSR_IA32_PERF_GLOBAL_CTRL;
	agent_vt.global_status = MSR_IA32_PERF_GLOBAL_STATUS;
	agent_vt.status_clear = MSR_IA32_PERF_GLOBAL_OVF_CTRL;
	agent_vt.ctl0 = MSR_IA32_PERFEVTSEL0;
	agent_vt.ctr0 = MSR_IA32_PMC0;
	agent_vt.wr_ctr0 = agent_vt.full_width_writes ? MSR_IA32_A_PMC0 : MSR_IA32_PMC0;
	agent_vt.stride = 1;
	agent_vt.pmi_masks_lvtpc = 1;
}

int agent_arch_index(uint16_t code)
{
	for (int a = 0; a < NR_ARCH_EVENTS; a++)
		if ((arch_events[a].select | arch_events[a].umask << 8) == code)
			return a;
	return -1;
}

/* Fixed counter that counts `code` (perf's fixed-counter constraints), or -1. */
int agent_fixed_index(uint16_t code)
{
	switch (code) {
	case 0x00c0: return 0; /* INST_RETIRED.ANY */
	case 0x003c: return 1; /* CPU_CLK_UNHALTED.CORE */
	case 0x013c: return 2; /* CPU_CLK_UNHALTED.REF */
	default: return -1;
	}
}

/* The vendor's event select of e (e->sel): the host's when it gave one, else Intel's code
 * as is, or on AMD the architectural event's AMD encoding. -1: none. */
int agent_vendor_select(struct agent_event *e)
{
	if (!agent_vt.amd) {
		e->sel = e->has_sel ? e->given_sel & 0xffff : e->code;
		return 0;
	}
	if (e->has_sel) {
		e->sel = amd_encode(e->given_sel & 0xfff, (uint8_t)(e->given_sel >> 12), 0);
		return 0;
	}
	int a = agent_arch_index(e->code);
	if (a < 0)
		return -1;
	e->sel = amd_evtsel(a, 0);
	return 0;
}

const char *agent_event_name(uint16_t code)
{
	int a = agent_arch_index(code);
	return a >= 0 ? arch_events[a].name : "raw";
}
