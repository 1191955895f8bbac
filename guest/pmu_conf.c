/*
 * The conformance body every vendor's PMU runs (pmu_conf.h): counting, gating, privilege
 * filters, RDPMC, overflow and PMI placement, written once over the vendor's table.
 * Counts are exact when the VMM's CPUID leaf says the exact backend counts; elsewhere
 * they are ranges.
 */
#include "kit.h"
#include "pmu_conf.h"

struct pmu_conf conf;
static const struct pmu_vendor *V;

/* Expected count of `ev` over the measured loop in exact mode (cycles are a
 * 1-per-instruction clock; ref-cycles follow the TSC and are checked against it). */
static uint64_t exact_count(enum arch_event ev, uint32_t n)
{
	return ev == EV_BRANCHES ? n : LOOP_INSNS(n);
}

void conf_check_count(const char *what, enum arch_event ev, uint64_t got)
{
	if (conf.exact && ev != EV_REF_CYCLES)
		report(got == exact_count(ev, LOOP_N), "%s %s = %llu (expect %llu)", what, arch_events[ev].name,
		       (unsigned long long)got, (unsigned long long)exact_count(ev, LOOP_N));
	else
		report(got > 0 && got < (1ull << 47), "%s %s = %llu (in range)", what, arch_events[ev].name,
		       (unsigned long long)got);
}

int conf_generic_event(enum arch_event *ev)
{
	if (conf.countable[EV_INSTRUCTIONS])
		*ev = EV_INSTRUCTIONS;
	else if (conf.countable[EV_CYCLES])
		*ev = EV_CYCLES;
	else
		return 0;
	return 1;
}

static enum arch_event const measured_events[] = { EV_INSTRUCTIONS, EV_BRANCHES, EV_CYCLES };

static void check_gp_counters(void)
{
	report_prefix_push("gp");
	for (unsigned k = 0; k < sizeof(measured_events) / sizeof(measured_events[0]); k++) {
		enum arch_event ev = measured_events[k];
		if (!conf.countable[ev]) {
			report_skip("%s: %s", arch_events[ev].name, V->uncountable);
			continue;
		}
		for (unsigned i = 0; i < conf.gp_counters; i++) {
			char what[16];
			V->reset();
			wrmsr(V->ctl(i), V->evtsel(ev, EVTSEL_OS | EVTSEL_EN));
			pmu_measure_loop(V->global_ctrl, 1ull << i, LOOP_N);
			snprintf(what, sizeof(what), "PMC%u", i);
			conf_check_count(what, ev, rdmsr(V->ctr(i)));
		}
	}
	V->reset();
	report_prefix_pop();
}

/* Intel's fixed counters count instructions, cycles and ref-cycles, in that order. */
static void check_fixed_counters(void)
{
	static enum arch_event const fixed_event[] = { EV_INSTRUCTIONS, EV_CYCLES, EV_REF_CYCLES };
	if (!V->fixed_ctr_ctrl)
		return;
	report_prefix_push("fixed");
	if (!conf.fixed_counters)
		report_skip("no fixed counters advertised (backend cannot count instructions)");
	for (unsigned j = 0; j < conf.fixed_counters; j++) {
		char what[16];
		V->reset();
		wrmsr(V->fixed_ctr_ctrl, FIXED_CTRL(j, FIXED_OS));
		pmu_measure_loop(V->global_ctrl, GLOBAL_FIXED(j), LOOP_N);
		snprintf(what, sizeof(what), "FIXED%u", j);
		conf_check_count(what, fixed_event[j], rdmsr(V->fixed_ctr0 + j));
	}
	V->reset();
	report_prefix_pop();
}

static void check_all_at_once(void)
{
	enum arch_event ev;
	uint64_t mask = conf.all_gp, ctrl = 0;
	int ok = 1;
	report_prefix_push("all-at-once");
	if (!conf_generic_event(&ev)) {
		report_skip("neither instructions nor cycles count here");
		report_prefix_pop();
		return;
	}
	V->reset();
	for (unsigned i = 0; i < conf.gp_counters; i++)
		wrmsr(V->ctl(i), V->evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	for (unsigned j = 0; j < conf.fixed_counters; j++) {
		ctrl |= FIXED_CTRL(j, FIXED_OS);
		mask |= GLOBAL_FIXED(j);
	}
	if (conf.fixed_counters)
		wrmsr(V->fixed_ctr_ctrl, ctrl);
	pmu_measure_loop(V->global_ctrl, mask, LOOP_N);
	for (unsigned i = 0; i < conf.gp_counters; i++) {
		uint64_t v = rdmsr(V->ctr(i));
		ok &= conf.exact ? v == exact_count(ev, LOOP_N) : v > 0;
	}
	for (unsigned j = 0; j < conf.fixed_counters; j++) {
		uint64_t v = rdmsr(V->fixed_ctr0 + j);
		ok &= conf.exact && j != 2 ? v == LOOP_INSNS(LOOP_N) : v > 0; /* FIXED2: ref-cycles */
	}
	report(ok, "%u GP + %u fixed counters together count %s", conf.gp_counters, conf.fixed_counters,
	       arch_events[ev].name);
	V->reset();
	report_prefix_pop();
}

static void check_gating(void)
{
	enum arch_event ev;
	const char *g = V->global_name;
	report_prefix_push("gating");
	if (!conf_generic_event(&ev)) {
		report_skip("neither instructions nor cycles count here");
		report_prefix_pop();
		return;
	}
	V->reset();
	wrmsr(V->ctl(0), V->evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	pmu_measure_loop(V->global_ctrl, 0, LOOP_N);
	report(rdmsr(V->ctr(0)) == 0, "EN set, %s clear: no count", g);
	if (conf.gp_counters > 1) {
		pmu_measure_loop(V->global_ctrl, conf.all_gp & ~1ull, LOOP_N);
		report(rdmsr(V->ctr(0)) == 0, "EN set, only other counters' %s bits set: no count", g);
	}
	wrmsr(V->ctl(0), V->evtsel(ev, EVTSEL_OS));
	pmu_measure_loop(V->global_ctrl, 1, LOOP_N);
	report(rdmsr(V->ctr(0)) == 0, "%s set, EN clear: no count", g);
	if (conf.fixed_counters) {
		wrmsr(V->fixed_ctr_ctrl, 0);
		pmu_measure_loop(V->global_ctrl, GLOBAL_FIXED(0), LOOP_N);
		report(rdmsr(V->fixed_ctr0) == 0, "fixed ctrl clear: no count");
	}
	/* A running counter stops when its global bit clears, and keeps its value. */
	wrmsr(V->ctl(0), V->evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	pmu_measure_loop(V->global_ctrl, 1, LOOP_N);
	uint64_t a = rdmsr(V->ctr(0));
	pmu_measure_loop(V->global_ctrl, 0, LOOP_N);
	report(a > 0 && rdmsr(V->ctr(0)) == a, "value kept while stopped (%llu)", (unsigned long long)a);
	if (V->gating)
		V->gating(ev);
	V->reset();
	report_prefix_pop();
}

static void check_os_usr(void)
{
	enum arch_event ev;
	report_prefix_push("os/usr");
	if (!conf_generic_event(&ev)) {
		report_skip("nothing to count");
		report_prefix_pop();
		return;
	}
	V->reset();
	wrmsr(V->ctl(0), V->evtsel(ev, EVTSEL_USR | EVTSEL_EN));
	pmu_measure_loop(V->global_ctrl, 1, LOOP_N);
	report(rdmsr(V->ctr(0)) == 0, "USR only: nothing counted at CPL0");
	wrmsr(V->ctl(0), V->evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	pmu_measure_loop(V->global_ctrl, 1, LOOP_N);
	report(rdmsr(V->ctr(0)) > 0, "OS only: counted at CPL0");
	V->reset();
	report_prefix_pop();
}

/*
 * RDPMC is handled inside KVM on this host and #GPs. The VMM traps a guest's RDPMC
 * instructions (found from its symbols) where the guest runs emulated, and the exact backend
 * emulates RDPMC while any counter is programmed (it single-steps then), running or not; only
 * a native guest on the perf backend is left with KVM's #GP.
 */
static void check_rdpmc(void)
{
	uint64_t v;
	report_prefix_push("rdpmc");
	V->reset();
	/* Counter 0 programmed (EN, not counting): the exact backend single-steps and emulates. */
	wrmsr(V->ctl(0), V->evtsel(EV_INSTRUCTIONS, EVTSEL_OS | EVTSEL_EN));
	wrmsr(V->ctr(0), 0x12345);
	if (conf.exact) {
		v = rdpmc_after_enable(V->global_ctrl, 1, 0);
		report(v == 0x12346, "RDPMC 0 of a running counter = %#llx (expect 0x12346)", (unsigned long long)v);
	} else if (!kit_native) {
		v = rdpmc_after_enable(V->global_ctrl, 1, 0);
		uint64_t after = rdmsr(V->ctr(0));
		report(v >= 0x12345 && v <= after, "RDPMC 0 of a running counter = %#llx (0x12345..RDMSR after %#llx)",
		       (unsigned long long)v, (unsigned long long)after);
	} else {
		report(rdpmc_safe(0, &v) < 0, "RDPMC 0 #GPs natively outside exact mode (KVM handles it; read counters with RDMSR)");
	}
	if (conf.exact || !kit_native) {
		/* Still programmed (EN), no longer counting: RDPMC reads what RDMSR reads. */
		uint64_t pmc0 = rdmsr(V->ctr(0)), counted = conf.exact ? 0x12348 : 0x12345;
		int rc = rdpmc_safe(0, &v);
		report(rc == 0 && v == pmc0 && pmc0 >= counted, "RDPMC 0 after disable = %#llx (RDMSR %#llx)",
		       (unsigned long long)v, (unsigned long long)pmc0);
	}
	report(rdpmc_safe(conf.gp_counters, &v) < 0, "RDPMC %u (no such counter) #GPs", conf.gp_counters);
	if (V->rdpmc)
		V->rdpmc();
	V->reset();
	report_prefix_pop();
}

/* What the PMI handlers saw. */
static volatile unsigned pmis;
static volatile uint64_t pmi_status, pmi_lvtpc, pmi_rip;

void nmi_handler(struct trap_frame *f)
{
	pmi_status = rdmsr(V->global_status);
	pmi_lvtpc = lapic_get_lvtpc();
	pmi_rip = f->rip;
	pmis++;
}

static void pmi_vector_handler(struct trap_frame *f)
{
	nmi_handler(f);
}

/* PMIs that left LVTPC masked where the vendor's LAPIC does not mask it. */
static unsigned lvtpc_masked_by_pmi;

/* Preset counter `i` to -period with INT, enable, and spin until a PMI arrives (bounded). */
static void check_overflow(const char *how, uint32_t lvtpc, unsigned i)
{
	enum arch_event ev;
	report_prefix_push(how);
	if (!conf_generic_event(&ev)) {
		report_skip("nothing to count");
		report_prefix_pop();
		return;
	}
	uint64_t period = ev == EV_INSTRUCTIONS ? 500 : (tsc_khz ? tsc_khz : 1000000); /* ~1 ms of cycles */
	uint64_t bit = 1ull << i, s;
	V->reset();
	lapic_set_lvtpc(lvtpc);
	pmis = 0;
	pmi_status = 0;
	wrmsr(V->ctr(i), -period & PRESET_MASK);
	wrmsr(V->ctl(i), V->evtsel(ev, EVTSEL_OS | EVTSEL_INT | EVTSEL_EN));
	wrmsr(V->global_ctrl, bit);
	for (unsigned long spin = 0, n = spin_iterations(2000000); spin < n && !pmis; spin++)
		barrier();
	wrmsr(V->global_ctrl, 0);
	uint64_t lvt_after = lapic_get_lvtpc();
	lapic_set_lvtpc(LVT_MASKED);
	report(pmis == 1, "one PMI delivered (%u; PMC%u %s, period %llu)", pmis, i, arch_events[ev].name,
	       (unsigned long long)period);
	report(pmi_status == bit, "GLOBAL_STATUS = %#llx in the handler (bit %u)", (unsigned long long)pmi_status, i);
	if (V->pmi_masks_lvtpc)
		report(pmi_lvtpc & LVT_MASKED, "LVTPC masked when the PMI arrived (%#llx)", (unsigned long long)pmi_lvtpc);
	else if (pmis && (pmi_lvtpc & LVT_MASKED || lvt_after & LVT_MASKED))
		lvtpc_masked_by_pmi++;
	uint64_t c = rdmsr(V->ctr(i));
	report(c < period * 1000, "counter wrapped (%llu)", (unsigned long long)c);
	s = rdmsr(V->global_status);
	report(s == bit, "GLOBAL_STATUS bit %u stays set after the handler (%#llx)", i, (unsigned long long)s);
	wrmsr(V->status_clr, bit);
	s = rdmsr(V->global_status);
	report(s == 0, "%s clears it (%#llx)", V->status_clr_name, (unsigned long long)s);
	if (V->status_set) {
		wrmsr(V->status_set, bit);
		s = rdmsr(V->global_status);
		report(s == bit, "STATUS_SET sets it again (%#llx)", (unsigned long long)s);
		wrmsr(V->status_clr, bit);
	}
	V->reset();
	report_prefix_pop();
}

/* AMD's local APIC leaves LVTPC unmasked when it delivers a PMI (APM; KVM 49ff3b4aec51
 * keeps the mask for Intel-compatible guests only). Said once, after both overflow checks. */
static void check_lvtpc_unmasked(void)
{
	if (V->pmi_masks_lvtpc)
		return;
	report_prefix_push("lvtpc");
	if (lvtpc_masked_by_pmi)
		report_skip("VMM DISAGREES: LVTPC was masked by %u PMI(s); AMD does not set the LVTPC mask on a PMI "
			    "(KVM 49ff3b4aec51 masks for Intel-compatible guests only)",
			    lvtpc_masked_by_pmi);
	else
		report(1, "LVTPC left unmasked by the PMIs (AMD does not set the mask)");
	report_prefix_pop();
}

extern char pmi_loop_top[], pmi_loop_jnz[];

/* Enable counter 0 and run a short loop with labelled instructions (emitted once: noinline). */
static __attribute__((noinline)) void pmi_rip_region(void)
{
	uint32_t ecx = V->global_ctrl, eax = 1, edx = 0;
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
	if (!conf.exact) {
		report_skip("exact PMI placement needs the exact backend");
		report_prefix_pop();
		return;
	}
	for (unsigned c = 0; c < 2; c++) {
		V->reset();
		lapic_set_lvtpc(LVT_NMI);
		pmis = 0;
		wrmsr(V->ctr(0), -cases[c].k & PRESET_MASK);
		wrmsr(V->ctl(0), V->evtsel(EV_INSTRUCTIONS, EVTSEL_OS | EVTSEL_INT | EVTSEL_EN));
		pmi_rip_region();
		const char *expect = c == 0 ? pmi_loop_top : pmi_loop_jnz;
		report(pmis == 1 && pmi_rip == (uint64_t)expect, "PMI after %llu instructions at %s (rip %#llx, expect %p)",
		       (unsigned long long)cases[c].k, cases[c].where, (unsigned long long)pmi_rip, expect);
	}
	lapic_set_lvtpc(LVT_MASKED);
	V->reset();
	report_prefix_pop();
}

static void check_running_write(void)
{
	enum arch_event ev;
	report_prefix_push("running-write");
	if (!conf_generic_event(&ev)) {
		report_skip("nothing to count");
		report_prefix_pop();
		return;
	}
	V->reset();
	wrmsr(V->ctl(0), V->evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	wrmsr(V->global_ctrl, 1);
	wrmsr(V->ctr(0), 1000000);
	pmu_measure_loop(V->global_ctrl, 1, LOOP_N);
	uint64_t v = rdmsr(V->ctr(0));
	if (conf.exact)
		/* A few instructions after the write (the enabling wrmsr's setup) precede the loop. */
		report(v >= 1000000 + LOOP_INSNS(LOOP_N) && v < 1000000 + LOOP_INSNS(LOOP_N) + 64,
		       "counting continues from the written value (%llu)", (unsigned long long)v);
	else
		report(v > 1000000, "counting continues from the written value (%llu)", (unsigned long long)v);
	V->reset();
	report_prefix_pop();
}

int conformance_run(const struct pmu_vendor *v)
{
	V = v;
	conf.exact = vpmu_backend() == PERFVM_BACKEND_EXACT;
	if (!v->probe())
		return report_summary();
	conf.all_gp = (1ull << conf.gp_counters) - 1;
	lapic_enable();
	lapic_set_lvtpc(LVT_MASKED);
	set_irq_handler(0xf0, pmi_vector_handler);
	printf("%s: %s counts, %u counters\n", v->name, conf.exact ? "exact" : "ranged", conf.gp_counters);
	if (v->identity)
		v->identity();
	check_gp_counters();
	check_fixed_counters();
	check_all_at_once();
	if (v->aliases)
		v->aliases();
	check_gating();
	check_os_usr();
	if (v->registers)
		v->registers();
	check_rdpmc();
	check_overflow("overflow-nmi", LVT_NMI, 0);
	irq_enable();
	check_overflow("overflow-vector", 0xf0, conf.gp_counters - 1);
	irq_disable();
	check_lvtpc_unmasked();
	check_pmi_exact_rip();
	check_running_write();
	if (v->last)
		v->last();
	return report_summary();
}
