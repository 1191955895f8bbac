/*
 * pmu_arch: conformance of the virtual PMU to Intel architectural perfmon v2, checked from
 * inside the guest (in the manner of kvm-unit-tests x86/pmu.c). Counts are exact only when
 * the command line says "exact" (perfvm --backend exact); elsewhere they are ranges.
 * Events the PMU does not advertise (CPUID.0AH:EBX) are skipped with a reason.
 */
#include "kit.h"
#include "pmu.h"
#include "pmu_kinds.h"

#define LOOP_N 1000u
/* What pmu_measure_loop() retires (pmu.h). */
#define LOOP_INSNS(n) PMU_LOOP_INSNS(n)

static struct pmu_caps caps;
static int exact;

static int counts(enum arch_event ev)
{
	return pmu_event_available(&caps, ev);
}

/* Expected count of `ev` over pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, n) in exact mode (cycles are a 1-per-instruction clock;
 * ref-cycles follow the TSC and are checked against it in check_ref_cycles). */
static uint64_t exact_count(enum arch_event ev, uint32_t n)
{
	return ev == EV_BRANCHES ? n : LOOP_INSNS(n);
}

static void check_count(const char *what, enum arch_event ev, uint64_t got)
{
	if (exact && ev != EV_REF_CYCLES)
		report(got == exact_count(ev, LOOP_N), "%s %s = %llu (expect %llu)", what, arch_events[ev].name,
		       (unsigned long long)got, (unsigned long long)exact_count(ev, LOOP_N));
	else
		report(got > 0 && got < (1ull << 47), "%s %s = %llu (in range)", what, arch_events[ev].name,
		       (unsigned long long)got);
}

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
		report_info("%-16s %s", arch_events[ev].name, counts(ev) ? "available" : "not available");
	report(!!(cpuid(1).ecx & CPUID_1_ECX_PDCM) == !!caps.perf_capabilities,
	       "PDCM consistent with PERF_CAPABILITIES %#llx", (unsigned long long)caps.perf_capabilities);
	report_prefix_pop();
	check_identity();
}

static enum arch_event const measured_events[] = { EV_INSTRUCTIONS, EV_BRANCHES, EV_CYCLES };

static void check_gp_counters(void)
{
	report_prefix_push("gp");
	for (unsigned k = 0; k < sizeof(measured_events) / sizeof(measured_events[0]); k++) {
		enum arch_event ev = measured_events[k];
		if (!counts(ev)) {
			report_skip("%s: not available on this backend", arch_events[ev].name);
			continue;
		}
		for (unsigned i = 0; i < caps.gp_counters; i++) {
			char what[16];
			pmu_reset(&caps);
			wrmsr(MSR_IA32_PERFEVTSEL0 + i, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
			pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, 1ull << i, LOOP_N);
			snprintf(what, sizeof(what), "PMC%u", i);
			check_count(what, ev, rdmsr(MSR_IA32_PMC0 + i));
		}
	}
	report_prefix_pop();
}

static void check_fixed_counters(void)
{
	static enum arch_event const fixed_event[] = { EV_INSTRUCTIONS, EV_CYCLES, EV_REF_CYCLES };
	report_prefix_push("fixed");
	if (!caps.fixed_counters)
		report_skip("no fixed counters advertised (backend cannot count instructions)");
	for (unsigned j = 0; j < caps.fixed_counters; j++) {
		char what[16];
		pmu_reset(&caps);
		wrmsr(MSR_IA32_FIXED_CTR_CTRL, FIXED_CTRL(j, FIXED_OS));
		pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, GLOBAL_FIXED(j), LOOP_N);
		snprintf(what, sizeof(what), "FIXED%u", j);
		check_count(what, fixed_event[j], rdmsr(MSR_IA32_FIXED_CTR0 + j));
	}
	report_prefix_pop();
}

static void check_all_at_once(void)
{
	enum arch_event ev = counts(EV_INSTRUCTIONS) ? EV_INSTRUCTIONS : EV_CYCLES;
	uint64_t mask = 0, ctrl = 0;
	int ok = 1;
	report_prefix_push("all-at-once");
	if (!counts(ev)) {
		report_skip("neither instructions nor cycles available");
		report_prefix_pop();
		return;
	}
	pmu_reset(&caps);
	for (unsigned i = 0; i < caps.gp_counters; i++) {
		wrmsr(MSR_IA32_PERFEVTSEL0 + i, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
		mask |= 1ull << i;
	}
	for (unsigned j = 0; j < caps.fixed_counters; j++) {
		ctrl |= FIXED_CTRL(j, FIXED_OS);
		mask |= GLOBAL_FIXED(j);
	}
	if (caps.fixed_counters)
		wrmsr(MSR_IA32_FIXED_CTR_CTRL, ctrl);
	pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, mask, LOOP_N);
	for (unsigned i = 0; i < caps.gp_counters; i++) {
		uint64_t v = rdmsr(MSR_IA32_PMC0 + i);
		ok &= exact ? v == exact_count(ev, LOOP_N) : v > 0;
	}
	for (unsigned j = 0; j < caps.fixed_counters; j++) {
		uint64_t v = rdmsr(MSR_IA32_FIXED_CTR0 + j);
		ok &= exact && j != 2 ? v == LOOP_INSNS(LOOP_N) : v > 0; /* FIXED2: ref-cycles */
	}
	report(ok, "%u GP + %u fixed counters together", caps.gp_counters, caps.fixed_counters);
	report_prefix_pop();
}

static void check_gating(void)
{
	enum arch_event ev = counts(EV_INSTRUCTIONS) ? EV_INSTRUCTIONS : EV_CYCLES;
	report_prefix_push("gating");
	pmu_reset(&caps);
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, 0, LOOP_N);
	report(rdmsr(MSR_IA32_PMC0) == 0, "EN set, GLOBAL_CTRL clear: no count");
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS));
	pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, 1, LOOP_N);
	report(rdmsr(MSR_IA32_PMC0) == 0, "GLOBAL_CTRL set, EN clear: no count");
	if (caps.fixed_counters) {
		wrmsr(MSR_IA32_FIXED_CTR_CTRL, 0);
		pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, GLOBAL_FIXED(0), LOOP_N);
		report(rdmsr(MSR_IA32_FIXED_CTR0) == 0, "fixed ctrl clear: no count");
	}
	/* A running counter stops when its GLOBAL_CTRL bit clears, and keeps its value. */
	if (counts(ev)) {
		wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
		pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, 1, LOOP_N);
		uint64_t a = rdmsr(MSR_IA32_PMC0);
		pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, 0, LOOP_N);
		report(a > 0 && rdmsr(MSR_IA32_PMC0) == a, "value kept while stopped (%llu)", (unsigned long long)a);
	}
	report_prefix_pop();
}

static void check_os_usr(void)
{
	enum arch_event ev = counts(EV_INSTRUCTIONS) ? EV_INSTRUCTIONS : EV_CYCLES;
	report_prefix_push("os/usr");
	if (!counts(ev)) {
		report_skip("nothing to count");
		report_prefix_pop();
		return;
	}
	pmu_reset(&caps);
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_USR | EVTSEL_EN));
	pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, 1, LOOP_N);
	report(rdmsr(MSR_IA32_PMC0) == 0, "USR only: nothing counted at CPL0");
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, 1, LOOP_N);
	report(rdmsr(MSR_IA32_PMC0) > 0, "OS only: counted at CPL0");
	report_prefix_pop();
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
 * RDPMC is handled inside KVM on this host and #GPs; the exact backend emulates it while any
 * counter is programmed (it single-steps then), running or not.
 */
static void check_rdpmc(void)
{
	uint64_t v;
	report_prefix_push("rdpmc");
	pmu_reset(&caps);
	if (!exact) {
		wrmsr(MSR_IA32_PMC0, 0x12345);
		report(rdpmc_safe(0, &v) < 0, "RDPMC #GPs outside exact mode (KVM handles it; read counters with RDMSR)");
		pmu_reset(&caps);
		report_prefix_pop();
		return;
	}
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(EV_INSTRUCTIONS, EVTSEL_OS | EVTSEL_EN));
	wrmsr(MSR_IA32_PMC0, 0x12345);
	v = rdpmc_after_enable(MSR_IA32_PERF_GLOBAL_CTRL, 1, 0);
	report(v == 0x12346, "RDPMC 0 of a running counter = %#llx (expect 0x12346)", (unsigned long long)v);
	/* Still programmed (EN), no longer counting: RDPMC works and reads what RDMSR reads. */
	uint64_t pmc0 = rdmsr(MSR_IA32_PMC0);
	int rc = rdpmc_safe(0, &v);
	report(rc == 0 && v == pmc0 && pmc0 > 0x12347, "RDPMC 0 after disable = %#llx (RDMSR %#llx)",
	       (unsigned long long)v, (unsigned long long)pmc0);
	report(rdpmc_safe(caps.gp_counters, &v) < 0, "RDPMC %u (no such GP counter) #GPs", caps.gp_counters);
	report(rdpmc_safe((1u << 30) | caps.fixed_counters, &v) < 0, "RDPMC fixed %u (no such counter) #GPs",
	       caps.fixed_counters);
	wrmsr(MSR_IA32_A_PMC0, 0x123400000005ull);
	v = rdpmc_after_enable(MSR_IA32_PERF_GLOBAL_CTRL, 1, 0x80000000u);
	report(v == 0x6, "fast RDPMC 0 returns the low 32 bits = %#llx", (unsigned long long)v);
	if (caps.fixed_counters) {
		wrmsr(MSR_IA32_FIXED_CTR_CTRL, FIXED_CTRL(0, FIXED_OS));
		wrmsr(MSR_IA32_FIXED_CTR0, 0xabcdef123ull);
		v = rdpmc_after_enable(MSR_IA32_PERF_GLOBAL_CTRL, GLOBAL_FIXED(0), 1u << 30);
		report(v == 0xabcdef124ull, "RDPMC fixed 0 = %#llx (expect 0xabcdef124)", (unsigned long long)v);
	}
	pmu_reset(&caps);
	report_prefix_pop();
}

/* What the PMI handlers saw. */
static volatile unsigned pmis;
static volatile uint64_t pmi_status, pmi_lvtpc, pmi_rip;

void nmi_handler(struct trap_frame *f)
{
	pmi_status = rdmsr(MSR_IA32_PERF_GLOBAL_STATUS);
	pmi_lvtpc = lapic_get_lvtpc();
	pmi_rip = f->rip;
	pmis++;
}

static void pmi_vector_handler(struct trap_frame *f)
{
	nmi_handler(f);
}

/* Preset PMC0 to -period with INT, enable, and spin until a PMI arrives (bounded). */
static void check_overflow(const char *how, uint32_t lvtpc)
{
	enum arch_event ev = counts(EV_INSTRUCTIONS) ? EV_INSTRUCTIONS : EV_CYCLES;
	uint64_t period = ev == EV_INSTRUCTIONS ? 500 : (tsc_khz ? tsc_khz : 1000000); /* ~1 ms of cycles */
	report_prefix_push(how);
	if (!counts(ev)) {
		report_skip("nothing to count");
		report_prefix_pop();
		return;
	}
	pmu_reset(&caps);
	lapic_set_lvtpc(lvtpc);
	pmis = 0;
	pmi_status = 0;
	wrmsr(MSR_IA32_PMC0, (-period) & 0xffffffffull); /* sign-extends to 48 bits */
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_INT | EVTSEL_EN));
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
	for (unsigned long spin = 0, n = spin_iterations(2000000); spin < n && !pmis; spin++)
		barrier();
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	report(pmis == 1, "one PMI delivered (%u)", pmis);
	report(pmi_status & 1, "GLOBAL_STATUS bit 0 set in the handler (%#llx)", (unsigned long long)pmi_status);
	report(pmi_lvtpc & LVT_MASKED, "LVTPC masked when the PMI arrived (%#llx)", (unsigned long long)pmi_lvtpc);
	report(rdmsr(MSR_IA32_PMC0) < period * 1000, "counter wrapped (%llu)", (unsigned long long)rdmsr(MSR_IA32_PMC0));
	wrmsr(MSR_IA32_PERF_GLOBAL_OVF_CTRL, 1);
	report(!(rdmsr(MSR_IA32_PERF_GLOBAL_STATUS) & 1), "OVF_CTRL clears the status bit");
	pmu_reset(&caps);
	lapic_set_lvtpc(LVT_MASKED);
	report_prefix_pop();
}

extern char pmi_loop_top[], pmi_loop_jnz[];

/* Enable PMC0 and run a short loop with labelled instructions (emitted once: noinline). */
static __attribute__((noinline)) void pmi_rip_region(void)
{
	uint32_t ecx = MSR_IA32_PERF_GLOBAL_CTRL, eax = 1, edx = 0;
	/* Instructions after the enabling WRMSR: mov(1) dec(2) jnz(3) dec(4) ... */
	asm volatile("wrmsr\n\t"
		     "mov $20, %%esi\n\t"
		     ".globl pmi_loop_top\n"
		     "pmi_loop_top: dec %%esi\n\t"
		     ".globl pmi_loop_jnz\n"
		     "pmi_loop_jnz: jnz pmi_loop_top\n\t"
		     "xor %%eax, %%eax\n\t"
		     "wrmsr\n\t"
		     : "+c"(ecx), "+a"(eax), "+d"(edx) : : "esi", "memory");
}

/* Exact mode: a PMI after k instructions lands on the next instruction boundary exactly. */
static void check_pmi_exact_rip(void)
{
	static const struct { uint64_t k; const char *where; } cases[] = { { 7, "loop top" }, { 8, "jnz" } };
	report_prefix_push("pmi-rip");
	if (!exact) {
		report_skip("exact PMI placement needs the exact backend");
		report_prefix_pop();
		return;
	}
	for (unsigned c = 0; c < 2; c++) {
		pmu_reset(&caps);
		lapic_set_lvtpc(LVT_NMI);
		pmis = 0;
		wrmsr(MSR_IA32_PMC0, (-cases[c].k) & 0xffffffffull);
		wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(EV_INSTRUCTIONS, EVTSEL_OS | EVTSEL_INT | EVTSEL_EN));
		pmi_rip_region();
		const char *expect = c == 0 ? pmi_loop_top : pmi_loop_jnz;
		report(pmis == 1 && pmi_rip == (uint64_t)expect, "PMI after %llu instructions at %s (rip %#llx, expect %p)",
		       (unsigned long long)cases[c].k, cases[c].where, (unsigned long long)pmi_rip, expect);
	}
	pmu_reset(&caps);
	lapic_set_lvtpc(LVT_MASKED);
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
	if (!counts(EV_REF_CYCLES)) {
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

static void check_running_write(void)
{
	enum arch_event ev = counts(EV_INSTRUCTIONS) ? EV_INSTRUCTIONS : EV_CYCLES;
	report_prefix_push("running-write");
	if (!counts(ev)) {
		report_skip("nothing to count");
		report_prefix_pop();
		return;
	}
	pmu_reset(&caps);
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
	wrmsr(MSR_IA32_PMC0, 1000000);
	pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, 1, LOOP_N);
	uint64_t v = rdmsr(MSR_IA32_PMC0);
	if (exact)
		/* 2 instructions after the write (the GLOBAL_CTRL wrmsr's setup) precede pmu_measure_loop(MSR_IA32_PERF_GLOBAL_CTRL, ). */
		report(v >= 1000000 + LOOP_INSNS(LOOP_N) && v < 1000000 + LOOP_INSNS(LOOP_N) + 64,
		       "counting continues from the written value (%llu)", (unsigned long long)v);
	else
		report(v > 1000000, "counting continues from the written value (%llu)", (unsigned long long)v);
	pmu_reset(&caps);
	report_prefix_pop();
}

int main(int argc, char **argv)
{
	exact = has_arg(argc, argv, "exact");
	pmu_probe(&caps);
	if (caps.version < 2) {
		report_skip("no architectural PMU (CPUID.0AH version %u)", caps.version);
		return report_summary();
	}
	lapic_enable();
	set_irq_handler(0xf0, pmi_vector_handler);
	printf("pmu_arch: %s counts\n", exact ? "exact" : "ranged");
	check_cpuid();
	check_gp_counters();
	check_fixed_counters();
	check_all_at_once();
	check_gating();
	check_os_usr();
	check_write_width();
	check_reserved();
	check_rdpmc();
	check_overflow("overflow-nmi", LVT_NMI);
	irq_enable();
	check_overflow("overflow-vector", 0xf0);
	irq_disable();
	check_pmi_exact_rip();
	check_running_write();
	check_ref_cycles();
	check_instruction_kinds(&caps, exact);
	return report_summary();
}
