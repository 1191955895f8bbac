/*
 * hostile: a guest that attacks the virtual PMU. For N iterations (argv[1], default 2000,
 * about 10^6 instructions) it writes random values, biased toward interesting bit patterns
 * and toward values that really program counters, to every PMU MSR (IA32_PMCx,
 * IA32_A_PMCx, IA32_PERFEVTSELx, IA32_FIXED_CTRx, FIXED_CTR_CTRL, GLOBAL_CTRL/STATUS/
 * OVF_CTRL, PERF_CAPABILITIES, for all 8 GP and 3 fixed counters whether they exist or
 * not) and to MSRs just outside those ranges, reads them back, toggles INT/PMI bits and
 * unmasks LVTPC (NMI delivery) at random, so counters count, overflow and raise PMIs
 * while it does.
 *
 * For every access it computes from CPUID.0AH, CPUID.1:ECX.PDCM and PERF_CAPABILITIES
 * whether the SDM says it must #GP, and checks that #GP happened exactly then; it also
 * checks that control registers read back what was written and that counters and
 * GLOBAL_STATUS never hold bits the PMU does not have. Mismatches are counted and
 * reported once per MSR class (first mismatch shown), so the output stays short.
 * Afterwards the PMU must still count and still deliver exactly one PMI per overflow.
 *
 * Where KVM (and so perfvm) is laxer than the SDM, KVM's rule is expected: bits above the
 * counter width in a FIXED_CTRx write are dropped, not a #GP.
 */
#include "kit.h"
#include "pmu.h"

enum msr_class {
	C_PMC, C_APMC, C_EVTSEL, C_FIXED, C_FIXED_CTRL, C_GCTRL, C_GSTATUS, C_OVF, C_PERFCAP,
	C_OUTSIDE, NR_CLASSES
};

static const char *const class_name[NR_CLASSES] = {
	[C_PMC] = "IA32_PMCx", [C_APMC] = "IA32_A_PMCx", [C_EVTSEL] = "IA32_PERFEVTSELx",
	[C_FIXED] = "IA32_FIXED_CTRx", [C_FIXED_CTRL] = "FIXED_CTR_CTRL",
	[C_GCTRL] = "GLOBAL_CTRL", [C_GSTATUS] = "GLOBAL_STATUS", [C_OVF] = "GLOBAL_OVF_CTRL",
	[C_PERFCAP] = "PERF_CAPABILITIES", [C_OUTSIDE] = "outside the PMU ranges",
};

/* What happened to one class of MSRs; the first mismatch is kept for the report. */
struct class_stats {
	unsigned writes, write_gps, reads, read_gps, bad;
	char first[96];
};
static struct class_stats stats[NR_CLASSES];

/* MSRs just outside the ranges (the 9th GP counter's, the 4th fixed counter, etc.). */
static const uint32_t outside_msrs[] = {
	0xc0, 0xc1 + 8, 0x185, 0x186 + 8, 0x308, 0x30c, 0x344, 0x346, 0x38c, 0x391,
	0x4c0, 0x4c1 + 8,
};

static struct pmu_caps caps;
static int pdcm, fw_write;
static uint64_t gp_mask, fixed_mask, counter_bits, fixed_ctrl_ok, evtsel_reserved;

/* Every MSR attacked, in sweep order. */
static uint32_t pool[64];
static unsigned pool_len;

/* Shadows of the control registers, for read-back checks. */
static uint64_t sh_evtsel[8], sh_fixed_ctrl, sh_gctrl;

static volatile unsigned long nmis, nmis_lvtpc_unmasked;

void nmi_handler(struct trap_frame *f)
{
	/* SDM: delivering a PMI sets the LVTPC mask bit. */
	if (!(lapic_get_lvtpc() & LVT_MASKED))
		nmis_lvtpc_unmasked++;
	nmis++;
}

/* xorshift64*: the PRNG (64-bit multiply only, nothing the hypervisor rejects). */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static unsigned rnd_below(unsigned n)
{
	return (unsigned)(rnd() % n);
}

static enum msr_class classify(uint32_t msr)
{
	if (msr >= MSR_IA32_PMC0 && msr < MSR_IA32_PMC0 + 8)
		return C_PMC;
	if (msr >= MSR_IA32_A_PMC0 && msr < MSR_IA32_A_PMC0 + 8)
		return C_APMC;
	if (msr >= MSR_IA32_PERFEVTSEL0 && msr < MSR_IA32_PERFEVTSEL0 + 8)
		return C_EVTSEL;
	if (msr >= MSR_IA32_FIXED_CTR0 && msr < MSR_IA32_FIXED_CTR0 + 3)
		return C_FIXED;
	switch (msr) {
	case MSR_IA32_FIXED_CTR_CTRL: return C_FIXED_CTRL;
	case MSR_IA32_PERF_GLOBAL_CTRL: return C_GCTRL;
	case MSR_IA32_PERF_GLOBAL_STATUS: return C_GSTATUS;
	case MSR_IA32_PERF_GLOBAL_OVF_CTRL: return C_OVF;
	case MSR_IA32_PERF_CAPABILITIES: return C_PERFCAP;
	default: return C_OUTSIDE;
	}
}

/* Index of a counter MSR within its range. */
static unsigned msr_index(uint32_t msr)
{
	switch (classify(msr)) {
	case C_PMC: return msr - MSR_IA32_PMC0;
	case C_APMC: return msr - MSR_IA32_A_PMC0;
	case C_EVTSEL: return msr - MSR_IA32_PERFEVTSEL0;
	case C_FIXED: return msr - MSR_IA32_FIXED_CTR0;
	default: return 0;
	}
}

/* Does the MSR exist for this guest (SDM, from CPUID)? */
static int msr_exists(uint32_t msr)
{
	unsigned i = msr_index(msr);
	switch (classify(msr)) {
	case C_PMC:
	case C_EVTSEL: return i < caps.gp_counters;
	case C_APMC: return i < caps.gp_counters && fw_write;
	case C_FIXED: return i < caps.fixed_counters;
	case C_FIXED_CTRL:
	case C_GCTRL:
	case C_GSTATUS:
	case C_OVF: return caps.version >= 2;
	case C_PERFCAP: return pdcm;
	default: return 0;
	}
}

/* Must WRMSR of `v` to `msr` #GP? */
static int write_must_gp(uint32_t msr, uint64_t v)
{
	if (!msr_exists(msr))
		return 1;
	switch (classify(msr)) {
	case C_PMC: return 0;                            /* low 32 bits, sign-extended */
	case C_APMC: return (v >> caps.gp_width) != 0;   /* must fit the counter width */
	case C_EVTSEL: return (v & evtsel_reserved) != 0;
	case C_FIXED: return 0;                          /* KVM masks to the width */
	case C_FIXED_CTRL: return (v & ~fixed_ctrl_ok) != 0;
	case C_GCTRL: return (v & ~counter_bits) != 0;
	case C_OVF: return (v & ~(counter_bits | 3ull << 62)) != 0;
	case C_GSTATUS:                                  /* read-only in version 2 */
	case C_PERFCAP: return 1;                        /* read-only */
	default: return 1;
	}
}

static void note_mismatch(struct class_stats *s, const char *fmt, ...) KIT_PRINTF(2, 3);
static void note_mismatch(struct class_stats *s, const char *fmt, ...)
{
	if (!s->bad++) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(s->first, sizeof(s->first), fmt, ap);
		va_end(ap);
	}
}

static const char *outcome(int gp, int vector)
{
	if (!gp)
		return "no fault";
	return vector == GP_VECTOR ? "#GP" : "another exception";
}

static void attack_write(uint32_t msr, uint64_t v)
{
	enum msr_class c = classify(msr);
	struct class_stats *s = &stats[c];
	int expect = write_must_gp(msr, v);
	int faulted = wrmsr_safe(msr, v) < 0;
	int vector = faulted ? exception_vector() : -1;
	s->writes++;
	s->write_gps += faulted;
	if (faulted != expect || (faulted && vector != GP_VECTOR)) {
		note_mismatch(s, "WRMSR %#x <- %#llx: %s, expected %s", msr, (unsigned long long)v,
			      outcome(faulted, vector), outcome(expect, GP_VECTOR));
		return;
	}
	if (faulted)
		return;
	switch (c) {
	case C_EVTSEL: sh_evtsel[msr_index(msr)] = v; break;
	case C_FIXED_CTRL: sh_fixed_ctrl = v; break;
	case C_GCTRL: sh_gctrl = v; break;
	default: break;
	}
}

static void attack_read(uint32_t msr)
{
	enum msr_class c = classify(msr);
	struct class_stats *s = &stats[c];
	int expect = !msr_exists(msr);
	uint64_t v = 0;
	int faulted = rdmsr_safe(msr, &v) < 0;
	int vector = faulted ? exception_vector() : -1;
	uint64_t want;
	s->reads++;
	s->read_gps += faulted;
	if (faulted != expect || (faulted && vector != GP_VECTOR)) {
		note_mismatch(s, "RDMSR %#x: %s, expected %s", msr, outcome(faulted, vector),
			      outcome(expect, GP_VECTOR));
		return;
	}
	if (faulted)
		return;
	switch (c) {
	case C_PMC:
	case C_APMC:
		if (v >> caps.gp_width)
			note_mismatch(s, "RDMSR %#x = %#llx: wider than %u bits", msr, (unsigned long long)v,
				      caps.gp_width);
		return;
	case C_FIXED:
		if (v >> caps.fixed_width)
			note_mismatch(s, "RDMSR %#x = %#llx: wider than %u bits", msr, (unsigned long long)v,
				      caps.fixed_width);
		return;
	case C_GSTATUS:
		if (v & ~(counter_bits | 3ull << 62))
			note_mismatch(s, "GLOBAL_STATUS = %#llx: bits of absent counters", (unsigned long long)v);
		return;
	case C_EVTSEL: want = sh_evtsel[msr_index(msr)]; break;
	case C_FIXED_CTRL: want = sh_fixed_ctrl; break;
	case C_GCTRL: want = sh_gctrl; break;
	case C_PERFCAP: want = caps.perf_capabilities; break;
	default: return;
	}
	if (v != want)
		note_mismatch(s, "RDMSR %#x = %#llx, last written %#llx", msr, (unsigned long long)v,
			      (unsigned long long)want);
}

/* A value that programs `msr` for real (counters near the top overflow soon). */
static uint64_t valid_value(uint32_t msr)
{
	uint64_t v;
	switch (classify(msr)) {
	case C_EVTSEL:
		if (rnd_below(8) == 0) /* not an architectural event: accepted, counts nothing */
			v = 0xd1 | 0x01 << 8;
		else
			v = evtsel(rnd_below(NR_ARCH_EVENTS), 0);
		v |= rnd() & (EVTSEL_USR | EVTSEL_OS | EVTSEL_EDGE | EVTSEL_INT | EVTSEL_EN | EVTSEL_INV);
		if (rnd_below(2))
			v |= EVTSEL_OS | EVTSEL_EN;
		if (rnd_below(8) == 0)
			v |= EVTSEL_CMASK(rnd_below(4));
		return v;
	case C_FIXED_CTRL:
		v = rnd() & fixed_ctrl_ok;
		return rnd_below(2) ? v | (0x111 & fixed_ctrl_ok) : v;
	case C_GCTRL: return rnd_below(2) ? counter_bits : rnd() & counter_bits;
	case C_GSTATUS:
	case C_OVF: return rnd() & (counter_bits | 3ull << 62);
	case C_PERFCAP: return caps.perf_capabilities;
	case C_PMC:
	case C_APMC:
	case C_FIXED:
		switch (rnd_below(3)) {
		case 0: return ((1ull << 48) - 1 - rnd_below(64));
		case 1: return rnd() & 0xffff;
		default: return rnd() & ((1ull << 48) - 1);
		}
	default: return rnd();
	}
}

static uint64_t random_value(uint32_t msr)
{
	static const uint64_t patterns[] = {
		0, ~0ull, (1ull << 48) - 1, 1ull << 48, 0x7fffffff, 0x80000000, 0xffffffff,
		0x100000000ull, 1ull << 47, 1ull << 62, 1ull << 63, 3ull << 62, 0xffffffff00200000ull,
	};
	switch (rnd_below(10)) {
	case 0: return rnd();
	case 1: return 1ull << rnd_below(64);
	case 2: return patterns[rnd_below(sizeof(patterns) / sizeof(patterns[0]))];
	case 3: return valid_value(msr) ^ 1ull << rnd_below(64); /* often one reserved bit */
	default: return valid_value(msr);
	}
}

static void build_pool(void)
{
	for (unsigned i = 0; i < 8; i++) {
		pool[pool_len++] = MSR_IA32_PMC0 + i;
		pool[pool_len++] = MSR_IA32_A_PMC0 + i;
		pool[pool_len++] = MSR_IA32_PERFEVTSEL0 + i;
	}
	for (unsigned j = 0; j < 3; j++)
		pool[pool_len++] = MSR_IA32_FIXED_CTR0 + j;
	pool[pool_len++] = MSR_IA32_FIXED_CTR_CTRL;
	pool[pool_len++] = MSR_IA32_PERF_GLOBAL_CTRL;
	pool[pool_len++] = MSR_IA32_PERF_GLOBAL_STATUS;
	pool[pool_len++] = MSR_IA32_PERF_GLOBAL_OVF_CTRL;
	pool[pool_len++] = MSR_IA32_PERF_CAPABILITIES;
	for (unsigned k = 0; k < sizeof(outside_msrs) / sizeof(outside_msrs[0]); k++)
		pool[pool_len++] = outside_msrs[k];
}

static void storm(unsigned iterations)
{
	for (unsigned k = 0; k < iterations; k++) {
		/* A sweep hits every MSR of the pool about 3 * iterations / pool_len times. */
		for (unsigned w = 0; w < 3; w++) {
			uint32_t msr = pool[(k * 3 + w) % pool_len];
			attack_write(msr, random_value(msr));
		}
		uint32_t msr = pool[rnd_below(pool_len)];
		attack_write(msr, random_value(msr));
		attack_read(pool[rnd_below(pool_len)]);
		switch (rnd_below(8)) {
		case 0: { /* flip INT on a GP counter */
			unsigned i = rnd_below(8);
			attack_write(MSR_IA32_PERFEVTSEL0 + i, sh_evtsel[i] ^ EVTSEL_INT);
			break;
		}
		case 1: /* flip PMI on a fixed counter */
			attack_write(MSR_IA32_FIXED_CTR_CTRL, sh_fixed_ctrl ^ FIXED_CTRL(rnd_below(3), FIXED_PMI));
			break;
		case 2:
			lapic_set_lvtpc(LVT_NMI);
			break;
		case 3:
			lapic_set_lvtpc(LVT_NMI | LVT_MASKED);
			break;
		default:
			break;
		}
	}
}

static void report_classes(void)
{
	for (int c = 0; c < NR_CLASSES; c++) {
		struct class_stats *s = &stats[c];
		report(s->bad == 0 && s->writes > 0 && s->reads > 0,
		       "%s: %u writes (%u #GP), %u reads (%u #GP), %u mismatches%s%s", class_name[c],
		       s->writes, s->write_gps, s->reads, s->read_gps, s->bad, s->bad ? "; first: " : "",
		       s->first);
	}
}

/* After the storm the PMU must still count, and deliver exactly one PMI per overflow. */
static void aftermath(void)
{
	enum arch_event ev = pmu_event_available(&caps, EV_INSTRUCTIONS) ? EV_INSTRUCTIONS : EV_CYCLES;
	uint64_t period = ev == EV_INSTRUCTIONS ? 500 : (tsc_khz ? tsc_khz : 1000000);
	unsigned long before;
	report_prefix_push("after");
	if (!pmu_event_available(&caps, ev)) {
		report(1, "nothing countable: no counting checks");
		report_prefix_pop();
		return;
	}
	pmu_reset(&caps);
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
	for (volatile unsigned spin = 0; spin < 1000; spin++)
		;
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	report(rdmsr(MSR_IA32_PMC0) > 0, "PMC0 still counts %s (%llu)", arch_events[ev].name,
	       (unsigned long long)rdmsr(MSR_IA32_PMC0));

	pmu_reset(&caps);
	before = nmis;
	lapic_set_lvtpc(LVT_NMI);
	wrmsr(MSR_IA32_PMC0, (-period) & 0xffffffffull);
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_INT | EVTSEL_EN));
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
	for (unsigned long spin = 0, n = spin_iterations(2000000); spin < n && nmis == before; spin++)
		barrier();
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	report(nmis - before == 1 && (rdmsr(MSR_IA32_PERF_GLOBAL_STATUS) & 1),
	       "one PMI for one overflow (%lu), GLOBAL_STATUS %#llx", nmis - before,
	       (unsigned long long)rdmsr(MSR_IA32_PERF_GLOBAL_STATUS));
	report(nmis_lvtpc_unmasked == 0, "LVTPC masked at every PMI (%lu of %lu unmasked)",
	       nmis_lvtpc_unmasked, nmis);
	pmu_reset(&caps);
	lapic_set_lvtpc(LVT_MASKED);
	report_prefix_pop();
}

int main(int argc, char **argv)
{
	unsigned iterations = argc > 1 ? (unsigned)strtoul(argv[1], 0, 0) : 2000;
	unsigned long storm_nmis;

	pmu_probe(&caps);
	if (caps.version < 2) {
		report_skip("no architectural PMU v2 (CPUID.0AH version %u)", caps.version);
		return report_summary();
	}
	pdcm = !!(cpuid(1).ecx & CPUID_1_ECX_PDCM);
	fw_write = !!(caps.perf_capabilities & PERF_CAP_FW_WRITE);
	gp_mask = (1ull << caps.gp_counters) - 1;
	fixed_mask = ((1ull << caps.fixed_counters) - 1) << 32;
	counter_bits = gp_mask | fixed_mask;
	for (unsigned j = 0; j < caps.fixed_counters; j++)
		fixed_ctrl_ok |= FIXED_CTRL(j, FIXED_OS | FIXED_USR | FIXED_PMI | (caps.version >= 3 ? FIXED_ANY : 0));
	/* Bits 63:32 are reserved; ANY (21) is architectural only from version 3. */
	evtsel_reserved = 0xffffffff00000000ull | (caps.version >= 3 ? 0 : EVTSEL_ANY);
	sh_gctrl = rdmsr(MSR_IA32_PERF_GLOBAL_CTRL);
	sh_fixed_ctrl = rdmsr(MSR_IA32_FIXED_CTR_CTRL);
	for (unsigned i = 0; i < caps.gp_counters; i++)
		sh_evtsel[i] = rdmsr(MSR_IA32_PERFEVTSEL0 + i);
	build_pool();
	lapic_enable();
	printf("hostile: %u iterations over %u MSRs; %u GP + %u fixed counters, width %u, PDCM %d, "
	       "FW_WRITE %d\n", iterations, pool_len, caps.gp_counters, caps.fixed_counters, caps.gp_width,
	       pdcm, fw_write);

	storm(iterations);

	/* Quiesce before reporting: nothing counts, no PMI pending delivery. */
	lapic_set_lvtpc(LVT_MASKED);
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	storm_nmis = nmis;
	report_classes();
	report_info("%lu PMIs (NMI) during the storm", storm_nmis);
	aftermath();
	return report_summary();
}
