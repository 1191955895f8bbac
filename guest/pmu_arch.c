/*
 * pmu_arch: conformance of the virtual PMU to Intel architectural perfmon v2, checked from
 * inside the guest (in the manner of kvm-unit-tests x86/pmu.c): the common body
 * (pmu_conf.c) over Intel's MSRs, and Intel's own checks. Counts are exact when the VMM's
 * CPUID leaf says the exact backend counts; elsewhere they are ranges. Events the PMU does
 * not advertise (CPUID.0AH:EBX) are skipped with a reason.
 */
#include "kit.h"
#include "pmu_conf.h"
#include "pmu_kinds.h"

static struct pmu_caps caps;

/* An Intel arch PMU goes with an Intel identity: vendor, family 6, and no AMD PMU leaf. */
static void check_identity(void)
{
	struct cpuid_regs v = cpuid(0), sig = cpuid(1);
	char vendor[13];
	memcpy(vendor, &v.ebx, 4);
	memcpy(vendor + 4, &v.edx, 4);
	memcpy(vendor + 8, &v.ecx, 4);
	vendor[12] = 0;
	unsigned family = (sig.eax >> 8) & 0xf;
	report_prefix_push("identity");
	report(!strcmp(vendor, "GenuineIntel"), "vendor %s", vendor);
	report(family == 6, "family %u", family);
	uint32_t ext_max = cpuid(0x80000000).eax;
	report(ext_max < 0x80000001 || !(cpuid(0x80000001).ecx & (1u << 23)), "no AMD core counter extension");
	report(ext_max < 0x80000022 || cpuid(0x80000022).eax == 0, "no AMD PerfMonV2 leaf");
	report(!(cpuid(0x40000001).eax), "no KVM paravirtual feature advertised (%#x)", cpuid(0x40000001).eax);
	/* Not advertised (CPUID.7.0:EDX), so not there: SPEC_CTRL, PRED_CMD, FLUSH_CMD #GP. */
	uint64_t val;
	report(wrmsr_safe(0x48, 0) < 0 && rdmsr_safe(0x48, &val) < 0 && wrmsr_safe(0x49, 1) < 0 && wrmsr_safe(0x10b, 1) < 0,
	       "SPEC_CTRL, PRED_CMD, FLUSH_CMD #GP (not in CPUID)");
	report_prefix_pop();
}

static void check_cpuid(void)
{
	report_prefix_push("cpuid");
	report(caps.version == 2, "architectural perfmon version %u", caps.version);
	report(caps.gp_counters >= 1 && caps.gp_counters <= 8, "%u GP counters", caps.gp_counters);
	report(caps.gp_width == 48, "GP counter width %u", caps.gp_width);
	report(caps.ebx_len == 7, "event vector length %u", caps.ebx_len);
	report(caps.fixed_counters == 0 || caps.fixed_width == 48, "%u fixed counters, width %u",
	       caps.fixed_counters, caps.fixed_width);
	for (int ev = 0; ev < NR_ARCH_EVENTS; ev++)
		report_info("%-16s %s", arch_events[ev].name, conf.countable[ev] ? "available" : "not available");
	report(!!(cpuid(1).ecx & CPUID_1_ECX_PDCM) == !!caps.perf_capabilities,
	       "PDCM consistent with PERF_CAPABILITIES %#llx", (unsigned long long)caps.perf_capabilities);
	report_prefix_pop();
	check_identity();
}

static void check_write_width(void)
{
	report_prefix_push("width");
	pmu_reset(&caps);
	wrmsr(MSR_IA32_PMC0, 0x80000000ull);
	report(rdmsr(MSR_IA32_PMC0) == 0xffff80000000ull, "legacy write sign-extends bit 31");
	wrmsr(MSR_IA32_PMC0, 0x123456789ull);
	report(rdmsr(MSR_IA32_PMC0) == 0x23456789ull, "legacy write keeps 32 bits");
	if (caps.perf_capabilities & PERF_CAP_FW_WRITE) {
		wrmsr(MSR_IA32_A_PMC0, 0x123456789ull);
		report(rdmsr(MSR_IA32_PMC0) == 0x123456789ull, "full-width write keeps 48 bits");
		report(rdmsr(MSR_IA32_A_PMC0) == 0x123456789ull, "full-width alias reads the same");
		report(wrmsr_safe(MSR_IA32_A_PMC0, 1ull << 48) < 0, "full-width write past 48 bits: #GP");
	} else {
		report_skip("full-width writes not advertised");
	}
	if (caps.fixed_counters) {
		wrmsr(MSR_IA32_FIXED_CTR0, 0xfff123456789ull);
		report(rdmsr(MSR_IA32_FIXED_CTR0) == 0xfff123456789ull, "fixed counter write keeps 48 bits");
		wrmsr(MSR_IA32_FIXED_CTR0, 0x1fff123456789ull);
		report(rdmsr(MSR_IA32_FIXED_CTR0) == 0xfff123456789ull, "fixed counter write drops bits above 48");
	}
	pmu_reset(&caps);
	report_prefix_pop();
}

static void check_reserved(void)
{
	uint64_t v;
	report_prefix_push("#GP");
	report(wrmsr_safe(MSR_IA32_PERFEVTSEL0, EVTSEL_ANY) < 0, "EVENTSEL ANY bit (reserved in v2)");
	report(wrmsr_safe(MSR_IA32_PERFEVTSEL0, 1ull << 32) < 0, "EVENTSEL bit 32");
	report(wrmsr_safe(MSR_IA32_PERF_GLOBAL_STATUS, 1) < 0, "GLOBAL_STATUS write");
	report(wrmsr_safe(MSR_IA32_PERF_GLOBAL_OVF_CTRL, 1ull << 31) < 0, "OVF_CTRL bit 31");
	report(wrmsr_safe(MSR_IA32_PERF_GLOBAL_CTRL, 1ull << (32 + caps.fixed_counters)) < 0,
	       "GLOBAL_CTRL bit of an absent fixed counter");
	if (caps.gp_counters < 8) {
		report(wrmsr_safe(MSR_IA32_PERF_GLOBAL_CTRL, 1ull << caps.gp_counters) < 0,
		       "GLOBAL_CTRL bit of an absent GP counter");
		report(rdmsr_safe(MSR_IA32_PMC0 + caps.gp_counters, &v) < 0, "read of absent PMC%u", caps.gp_counters);
		report(wrmsr_safe(MSR_IA32_PERFEVTSEL0 + caps.gp_counters, 0) < 0, "write of absent EVENTSEL%u",
		       caps.gp_counters);
	}
	report(rdmsr_safe(MSR_IA32_FIXED_CTR0 + caps.fixed_counters, &v) < 0, "read of absent FIXED_CTR%u",
	       caps.fixed_counters);
	if (caps.fixed_counters) {
		report(wrmsr_safe(MSR_IA32_FIXED_CTR_CTRL, FIXED_ANY) < 0, "FIXED_CTR_CTRL ANY bit");
		if (caps.fixed_counters < 3)
			report(wrmsr_safe(MSR_IA32_FIXED_CTR_CTRL, FIXED_CTRL(caps.fixed_counters, FIXED_OS)) < 0,
			       "FIXED_CTR_CTRL field of an absent counter");
	} else {
		report(wrmsr_safe(MSR_IA32_FIXED_CTR_CTRL, FIXED_CTRL(0, FIXED_OS)) < 0,
		       "FIXED_CTR_CTRL with no fixed counters");
	}
	report(wrmsr_safe(MSR_IA32_PERF_CAPABILITIES, 0) < 0, "PERF_CAPABILITIES is read-only");
	report(rdpmc_safe(caps.gp_counters, &v) < 0, "RDPMC of an absent counter");
	report_prefix_pop();
}

/*
 * ref-cycles tick with the TSC on hardware: over a window of ~20 ms, ref-cycles / RDTSC must
 * lie in [0.5, 2] on every backend (both count the TSC while the counter runs).
 */
static void check_ref_cycles(void)
{
	uint64_t window = (tsc_khz ? tsc_khz : 2000000) * 20;
	report_prefix_push("ref-cycles");
	if (!conf.countable[EV_REF_CYCLES]) {
		report_skip("ref-cycles not available on this backend");
		report_prefix_pop();
		return;
	}
	pmu_reset(&caps);
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(EV_REF_CYCLES, EVTSEL_OS | EVTSEL_EN));
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
	uint64_t t0 = rdtsc(), t1;
	do
		t1 = rdtsc();
	while (t1 - t0 < window);
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	uint64_t got = rdmsr(MSR_IA32_PMC0), x100 = got * 100 / (t1 - t0);
	report(x100 >= 50 && x100 <= 200, "ref-cycles / RDTSC delta = %llu / %llu = %llu.%02llu (in [0.5, 2])",
	       (unsigned long long)got, (unsigned long long)(t1 - t0), (unsigned long long)(x100 / 100),
	       (unsigned long long)(x100 % 100));
	pmu_reset(&caps);
	report_prefix_pop();
}


/* Intel's RDPMC forms where RDPMC runs on the vPMU (not natively on the perf backend, where
 * KVM #GPs it): the fixed counters (ECX bit 30) and the fast read of the low 32 bits (bit 31).
 * The exact backend counts the instruction between the enable and the RDPMC. */
static void check_rdpmc_forms(void)
{
	uint64_t v;
	if (!conf.exact && kit_native)
		return;
	report(rdpmc_safe((1u << 30) | caps.fixed_counters, &v) < 0, "RDPMC fixed %u (no such counter) #GPs",
	       caps.fixed_counters);
	wrmsr(MSR_IA32_A_PMC0, 0x123400000005ull);
	v = rdpmc_after_enable(MSR_IA32_PERF_GLOBAL_CTRL, 1, 0x80000000u);
	/* Elsewhere what the counter held between its write and its read by RDMSR after. */
	uint64_t low = conf.exact ? 0x6 : 0x5, high = conf.exact ? 0x6 : rdmsr(MSR_IA32_A_PMC0) & 0xffffffffu;
	report(v >= low && v <= high, "fast RDPMC 0 returns the low 32 bits = %#llx (expect %#llx..%#llx)",
	       (unsigned long long)v, (unsigned long long)low, (unsigned long long)high);
	if (caps.fixed_counters) {
		wrmsr(MSR_IA32_FIXED_CTR_CTRL, FIXED_CTRL(0, FIXED_OS));
		wrmsr(MSR_IA32_FIXED_CTR0, 0xabcdef123ull);
		v = rdpmc_after_enable(MSR_IA32_PERF_GLOBAL_CTRL, GLOBAL_FIXED(0), 1u << 30);
		low = conf.exact ? 0xabcdef124ull : 0xabcdef123ull;
		high = conf.exact ? 0xabcdef124ull : rdmsr(MSR_IA32_FIXED_CTR0);
		report(v >= low && v <= high, "RDPMC fixed 0 = %#llx (expect %#llx..%#llx)", (unsigned long long)v,
		       (unsigned long long)low, (unsigned long long)high);
	}
}

static void check_registers(void)
{
	check_write_width();
	check_reserved();
}

static void check_last(void)
{
	check_ref_cycles();
	check_instruction_kinds(&caps, conf.exact);
}

static uint32_t ctl(unsigned i) { return MSR_IA32_PERFEVTSEL0 + i; }
static uint32_t ctr(unsigned i) { return MSR_IA32_PMC0 + i; }
static void reset(void) { pmu_reset(&caps); }

static int probe(void)
{
	pmu_probe(&caps);
	if (caps.version < 2) {
		report_skip("no architectural PMU (CPUID.0AH version %u)", caps.version);
		return 0;
	}
	conf.gp_counters = caps.gp_counters;
	conf.fixed_counters = caps.fixed_counters;
	for (int ev = 0; ev < NR_ARCH_EVENTS; ev++)
		conf.countable[ev] = pmu_event_available(&caps, ev);
	return 1;
}

static const struct pmu_vendor intel = {
	.name = "pmu_arch",
	.global_ctrl = MSR_IA32_PERF_GLOBAL_CTRL,
	.global_name = "GLOBAL_CTRL",
	.global_status = MSR_IA32_PERF_GLOBAL_STATUS,
	.status_clr = MSR_IA32_PERF_GLOBAL_OVF_CTRL,
	.status_clr_name = "OVF_CTRL",
	.fixed_ctr_ctrl = MSR_IA32_FIXED_CTR_CTRL,
	.fixed_ctr0 = MSR_IA32_FIXED_CTR0,
	.pmi_masks_lvtpc = 1,
	.uncountable = "not available on this backend",
	.ctl = ctl,
	.ctr = ctr,
	.evtsel = evtsel,
	.reset = reset,
	.probe = probe,
	.identity = check_cpuid,
	.registers = check_registers,
	.rdpmc = check_rdpmc_forms,
	.last = check_last,
};

int main(int argc, char **argv)
{
	return conformance_run(&intel);
}
