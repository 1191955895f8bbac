/*
 * pmu_amd: conformance of the virtual PMU to AMD64 PerfMonV2 (perfvm --cpu-vendor amd),
 * checked from inside the guest, in the shape of pmu_arch (its Intel counterpart). AMD
 * Programmer's Manual Vol. 2, "Performance Monitoring Counters", and KVM svm/pmu.c where the
 * manual leaves a choice to the implementation.
 *
 * The common body (pmu_conf.c) runs over AMD's MSRs, with AMD's own checks. Counts are
 * exact when the VMM's CPUID leaf says the exact backend counts; elsewhere they are ranges.
 * AMD has no CPUID list of countable events, so what a backend counts is found by
 * programming each event over a known loop and seeing whether a count appears: what does
 * not count there is skipped with a reason (on the exact backend every event must count).
 */
#include "kit.h"
#include "pmu_conf.h"

/* measure_en: mov, n x (dec, jnz), mov, and the disabling wrmsr. */
#define LOOP_EN_INSNS(n) (2ull * (n) + 3)

static struct amd_pmu_caps caps;

/* The pre-PerfMonV2 way: GLOBAL_CTL left enabled, the counter started and stopped by its EN
 * bit (`sel` has EN; the stop writes `sel` without it): LOOP_EN_INSNS(n) instructions. */
static void measure_en(uint32_t ctl_msr, uint64_t sel, uint32_t n)
{
	uint32_t ecx = ctl_msr, eax = (uint32_t)sel, edx = (uint32_t)(sel >> 32);
	uint32_t off = (uint32_t)(sel & ~EVTSEL_EN);
	asm volatile("wrmsr\n\t"
		     "mov %[n], %%esi\n\t"
		     "1: dec %%esi\n\t"
		     "jnz 1b\n\t"
		     "mov %[off], %%eax\n\t"
		     "wrmsr\n\t"
		     : "+c"(ecx), "+a"(eax), "+d"(edx)
		     : [n] "r"(n), [off] "r"(off)
		     : "esi", "memory");
}

static uint32_t ctl(unsigned i) { return MSR_F15H_PERF_CTL(i); }
static uint32_t ctr(unsigned i) { return MSR_F15H_PERF_CTR(i); }

static void reset(void)
{
	amd_pmu_reset(&caps);
}

static void check_identity(void)
{
	struct cpuid_regs v = cpuid(0), sig = cpuid(1), a = cpuid(0xa);
	char vendor[13];
	memcpy(vendor, &v.ebx, 4);
	memcpy(vendor + 4, &v.edx, 4);
	memcpy(vendor + 8, &v.ecx, 4);
	vendor[12] = 0;
	unsigned family = (sig.eax >> 8) & 0xf;
	if (family == 0xf)
		family += (sig.eax >> 20) & 0xff;
	report_prefix_push("identity");
	report(!strcmp(vendor, "AuthenticAMD") && caps.amd, "vendor %s", vendor);
	report(family == 0x19, "family %#x", family);
	report(caps.ext_max >= 0x80000022, "extended leaves up to %#x", caps.ext_max);
	report(caps.perfctr_core, "PerfCtrExtCore (CPUID 0x80000001 ECX[23])");
	report(caps.perfmon_v2, "PerfMonV2 (CPUID 0x80000022 EAX[0])");
	report(caps.counters >= 1 && caps.counters <= AMD_MAX_COUNTERS, "CPUID 0x80000022 EBX[3:0] = %u core counters",
	       caps.counters);
	report(!a.eax && !a.ebx && !a.ecx && !a.edx, "no Intel perfmon leaf (CPUID 0xA = %#x %#x %#x %#x)", a.eax, a.ebx,
	       a.ecx, a.edx);
	report(!(sig.ecx & CPUID_1_ECX_PDCM), "no Intel PDCM (CPUID 1 ECX[15])");
	report_prefix_pop();
}

/* Before anything is written: PerfMonV2's global enables come out of reset set for every
 * counter (AMD's PPRs; KVM), so software that knows only EN still counts. */
static void check_reset_state(void)
{
	uint64_t g = 0, s = 0;
	report_prefix_push("reset");
	int gok = rdmsr_safe(MSR_AMD64_PERF_CNTR_GLOBAL_CTL, &g) == 0;
	int sok = rdmsr_safe(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS, &s) == 0;
	report(gok && g == conf.all_gp, "GLOBAL_CTL = %#llx (every counter enabled)", (unsigned long long)g);
	report(sok && s == 0, "GLOBAL_STATUS = %#llx", (unsigned long long)s);
	report_prefix_pop();
}

/* EBX[3:0] is the number of counters the MSRs have: counter n-1 is there, counter n is not. */
static void check_counter_count(void)
{
	uint64_t v;
	unsigned n = caps.counters;
	report_prefix_push("identity");
	int last = rdmsr_safe(ctl(n - 1), &v) == 0 && rdmsr_safe(ctr(n - 1), &v) == 0 &&
		   wrmsr_safe(ctr(n - 1), 0) == 0;
	int beyond = n >= AMD_MAX_COUNTERS || (rdmsr_safe(ctl(n), &v) < 0 && rdmsr_safe(ctr(n), &v) < 0);
	report(last && beyond, "EBX counter count matches the MSRs (counter %u present, %u absent)", n - 1, n);
	report_prefix_pop();
}

/* Program each event on counter 0 over the loop: whatever shows a count, this backend counts. */
static void probe_events(void)
{
	static enum arch_event const measured_events[] = { EV_INSTRUCTIONS, EV_BRANCHES, EV_CYCLES };
	report_prefix_push("events");
	for (unsigned k = 0; k < sizeof(measured_events) / sizeof(measured_events[0]); k++) {
		enum arch_event ev = measured_events[k];
		reset();
		wrmsr(ctl(0), amd_evtsel(ev, EVTSEL_OS | EVTSEL_EN));
		pmu_measure_loop(MSR_AMD64_PERF_CNTR_GLOBAL_CTL, 1, LOOP_N);
		uint64_t got = rdmsr(ctr(0));
		conf.countable[ev] = got != 0;
		if (conf.exact)
			report(conf.countable[ev], "%s (%#llx) counts on the exact backend (%llu)", arch_events[ev].name,
			       (unsigned long long)amd_evtsel(ev, 0), (unsigned long long)got);
		else
			report_info("%s (%#llx): %s", arch_events[ev].name, (unsigned long long)amd_evtsel(ev, 0),
				    conf.countable[ev] ? "counts" : "no count appeared");
	}
	reset();
	report_prefix_pop();
}

/* PERF_CTL0-3 / PERF_CTR0-3 (0xC0010000-7) are the same registers as the interleaved pairs. */
static void check_legacy_aliases(void)
{
	unsigned n = caps.counters < AMD_LEGACY_COUNTERS ? caps.counters : AMD_LEGACY_COUNTERS;
	int ctl_ok = 1, ctr_ok = 1;
	enum arch_event ev;
	report_prefix_push("legacy");
	reset();
	for (unsigned i = 0; i < n; i++) {
		uint64_t a = amd_encode(0x100 + i, 0x10 + i, EVTSEL_OS), b = amd_encode(0x200 + i, 0x20 + i, EVTSEL_USR);
		wrmsr(MSR_K7_PERF_CTL0 + i, a);
		ctl_ok &= rdmsr(ctl(i)) == a;
		wrmsr(ctl(i), b);
		ctl_ok &= rdmsr(MSR_K7_PERF_CTL0 + i) == b;
		uint64_t c = 0x123456789a00ull + i, d = 0xfedcba987600ull + i;
		wrmsr(MSR_K7_PERF_CTR0 + i, c);
		ctr_ok &= rdmsr(ctr(i)) == c;
		wrmsr(ctr(i), d);
		ctr_ok &= rdmsr(MSR_K7_PERF_CTR0 + i) == d;
	}
	report(ctl_ok, "PERF_CTL0-%u (0xc0010000) and PERF_CTL (0xc0010200 + 2i) are one register", n - 1);
	report(ctr_ok, "PERF_CTR0-%u (0xc0010004) and PERF_CTR (0xc0010201 + 2i) are one register", n - 1);
	reset();
	if (conf_generic_event(&ev)) {
		int ok = 1;
		for (unsigned i = 0; i < n; i++) {
			reset();
			wrmsr(MSR_K7_PERF_CTL0 + i, amd_evtsel(ev, EVTSEL_OS | EVTSEL_EN));
			pmu_measure_loop(MSR_AMD64_PERF_CNTR_GLOBAL_CTL, 1ull << i, LOOP_N);
			uint64_t legacy = rdmsr(MSR_K7_PERF_CTR0 + i), ext = rdmsr(ctr(i));
			ok &= legacy == ext && (conf.exact ? legacy == LOOP_INSNS(LOOP_N) : legacy > 0);
		}
		report(ok, "counters 0-%u programmed through the legacy MSRs count %s", n - 1, arch_events[ev].name);
	} else {
		report_skip("counting through the legacy MSRs: neither instructions nor cycles count here");
	}
	reset();
	report_prefix_pop();
}

/*
 * Count on the last counter with GLOBAL_CTL at all ones, started and stopped by EN alone
 * (measure_en). `other`: counter 0 is programmed (EN, USR only: it counts nothing at CPL0)
 * all along, so the PMU is already in use when EN is set; else nothing else is programmed.
 */
static void check_en_gating(enum arch_event ev, int other)
{
	uint32_t last = caps.counters - 1;
	const char *how = other ? "another counter programmed" : "no other counter programmed";
	if (other && last == 0)
		return;
	reset();
	wrmsr(MSR_AMD64_PERF_CNTR_GLOBAL_CTL, conf.all_gp);
	if (other)
		wrmsr(ctl(0), amd_evtsel(ev, EVTSEL_USR | EVTSEL_EN));
	measure_en(ctl(last), amd_evtsel(ev, EVTSEL_OS | EVTSEL_EN), LOOP_N);
	uint64_t v = rdmsr(ctr(last)), want = LOOP_EN_INSNS(LOOP_N);
	if (!conf.exact)
		report(v > 0, "EN alone starts and stops PMC%u (%s): %s = %llu", last, how, arch_events[ev].name,
		       (unsigned long long)v);
	else if (v == want + 1 && !other && kit_native)
		/* The enabling WRMSR must not count (as with GLOBAL_CTL, and as emulated). */
		report_skip("VMM DISAGREES: EN alone starts and stops PMC%u (%s): %s = %llu, expect %llu: natively the "
			    "exact backend counts the enabling WRMSR when it is the write that starts single-stepping",
			    last, how, arch_events[ev].name, (unsigned long long)v, (unsigned long long)want);
	else
		report(v == want, "EN alone starts and stops PMC%u (%s): %s = %llu (expect %llu)", last, how,
		       arch_events[ev].name, (unsigned long long)v, (unsigned long long)want);
	reset();
}

/* AMD counters are 48 bits and written whole: no sign extension from bit 31 (Intel's legacy
 * PMC write), and bits 63:48 of a write are dropped, not #GP (KVM). */
static void check_write_width(void)
{
	uint64_t v;
	report_prefix_push("width");
	reset();
	wrmsr(ctr(0), 0x80000000ull);
	report(rdmsr(ctr(0)) == 0x80000000ull, "write of 0x80000000 is not sign-extended (%#llx)",
	       (unsigned long long)rdmsr(ctr(0)));
	wrmsr(ctr(0), 0xfff123456789ull);
	report(rdmsr(ctr(0)) == 0xfff123456789ull, "write keeps 48 bits");
	v = 0;
	int rc = wrmsr_safe(ctr(0), 0xabcd000012345678ull);
	rc |= rdmsr_safe(ctr(0), &v);
	report(rc == 0 && v == 0x12345678ull, "write past 48 bits: accepted, bits 63:48 dropped (%#llx)",
	       (unsigned long long)v);
	reset();
	report_prefix_pop();
}

/* Reserved bits are cleared, not #GP (KVM amd_pmu_set_msr; EPYC parts never #GP a PERF_CTL
 * write, and Linux guests set HostOnly); guest writes to GLOBAL_STATUS are ignored. */
static void check_reserved(void)
{
	static const struct { uint64_t bits; const char *what; } ctl_bits[] = {
		{ AMD_EVTSEL_HOST_ONLY, "HostOnly (41)" },
		{ AMD_EVTSEL_GUEST_ONLY, "GuestOnly (40)" },
		{ 1ull << 19, "bit 19" },
		{ 1ull << 21, "bit 21" },
		{ 0xfull << 36, "bits 39:36" },
		{ 1ull << 63, "bit 63" },
	};
	uint64_t v, base = amd_encode(0x0c0, 0, EVTSEL_OS | EVTSEL_USR | EVTSEL_INT);
	report_prefix_push("reserved");
	reset();
	for (unsigned k = 0; k < sizeof(ctl_bits) / sizeof(ctl_bits[0]); k++) {
		int rc = wrmsr_safe(ctl(0), base | ctl_bits[k].bits);
		v = rdmsr(ctl(0));
		report(rc == 0 && v == base, "PERF_CTL0 with %s: accepted, bit(s) dropped (%#llx)", ctl_bits[k].what,
		       (unsigned long long)v);
	}
	wrmsr(ctl(0), 0);
	unsigned li = (caps.counters < AMD_LEGACY_COUNTERS ? caps.counters : AMD_LEGACY_COUNTERS) - 1;
	int rc = wrmsr_safe(MSR_K7_PERF_CTL0 + li, base | AMD_EVTSEL_HOST_ONLY);
	report(rc == 0 && rdmsr(ctl(li)) == base, "legacy PERF_CTL%u with HostOnly: accepted, bit dropped", li);
	wrmsr(MSR_K7_PERF_CTL0 + li, 0);
	/* All ones: event select 0xfff and every defined field kept, the reserved bits gone. EN is
	 * set but GLOBAL_CTL is 0, and event 0xfff counts nothing here anyway. */
	rc = wrmsr_safe(ctl(0), ~0ull);
	v = rdmsr(ctl(0));
	report(rc == 0 && v == ~AMD_EVTSEL_RESERVED, "PERF_CTL0 all ones reads %#llx (expect %#llx)",
	       (unsigned long long)v, (unsigned long long)~AMD_EVTSEL_RESERVED);
	wrmsr(ctl(0), amd_encode(0x120, 0x5a, 0));
	report(rdmsr(ctl(0)) == 0x100005a20ull, "event select bits 35:32 kept (%#llx)", (unsigned long long)rdmsr(ctl(0)));
	wrmsr(ctl(0), 0);

	rc = wrmsr_safe(MSR_AMD64_PERF_CNTR_GLOBAL_CTL, ~0ull);
	v = rdmsr(MSR_AMD64_PERF_CNTR_GLOBAL_CTL);
	report(rc == 0 && v == conf.all_gp, "GLOBAL_CTL all ones: accepted, reads %#llx (the %u counters)",
	       (unsigned long long)v, caps.counters);
	wrmsr(MSR_AMD64_PERF_CNTR_GLOBAL_CTL, 0);

	/* STATUS_SET / STATUS_CLR: only existing counters' bits; nothing counts meanwhile. */
	rc = wrmsr_safe(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_SET, ~0ull);
	v = rdmsr(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS);
	report(rc == 0 && v == conf.all_gp, "STATUS_SET all ones: accepted, GLOBAL_STATUS = %#llx",
	       (unsigned long long)v);
	rc = wrmsr_safe(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS, 0);
	v = rdmsr(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS);
	report(rc == 0 && v == conf.all_gp, "GLOBAL_STATUS write of 0: accepted and ignored (%#llx)",
	       (unsigned long long)v);
	rc = wrmsr_safe(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR, ~0ull);
	v = rdmsr(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS);
	report(rc == 0 && v == 0, "STATUS_CLR all ones: accepted, GLOBAL_STATUS = %#llx", (unsigned long long)v);
	rc = wrmsr_safe(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS, conf.all_gp);
	v = rdmsr(MSR_AMD64_PERF_CNTR_GLOBAL_STATUS);
	report(rc == 0 && v == 0, "GLOBAL_STATUS write of %#llx: accepted and ignored (%#llx)",
	       (unsigned long long)conf.all_gp, (unsigned long long)v);
	reset();
	report_prefix_pop();
}

/*
 * With fewer than four counters, the legacy PERF_CTL/PERF_CTR of the missing ones do not
 * exist either (the model #GPs them). The VMM routes only the legacy MSRs of counters that
 * exist to the model; KVM's common MSR code answers the others itself (reads 0, drops
 * writes). Whatever they do, they must not reach the counters that exist.
 */
static void check_absent_legacy(unsigned n)
{
	uint64_t v;
	int gp = 1, inert = 1;
	reset();
	for (unsigned i = n; i < AMD_LEGACY_COUNTERS; i++) {
		uint32_t msrs[2] = { MSR_K7_PERF_CTL0 + i, MSR_K7_PERF_CTR0 + i };
		for (unsigned k = 0; k < 2; k++) {
			uint64_t val = k ? 0x1234 : amd_evtsel(EV_INSTRUCTIONS, EVTSEL_OS | EVTSEL_EN);
			int rd = rdmsr_safe(msrs[k], &v), wr = wrmsr_safe(msrs[k], val);
			uint64_t after = 0;
			int rd2 = rdmsr_safe(msrs[k], &after);
			if (rd == 0 || wr == 0) {
				gp = 0;
				report_info("legacy %s%u (%#x): read %s, write %s, reads %#llx after", k ? "PERF_CTR" : "PERF_CTL",
					    i, msrs[k], rd ? "#GP" : "ok", wr ? "#GP" : "ok", (unsigned long long)after);
			}
			inert &= rd2 < 0 || after == 0;
		}
	}
	for (unsigned i = 0; i < n; i++)
		inert &= rdmsr(ctl(i)) == 0 && rdmsr(ctr(i)) == 0;
	report(inert, "legacy PERF_CTL/PERF_CTR%u-3 of %u counters do not reach the counters that exist", n, n);
	if (gp)
		report(1, "legacy PERF_CTL/PERF_CTR%u-3 of %u counters #GP", n, n);
	else
		report_skip("VMM DISAGREES: legacy PERF_CTL/PERF_CTR%u-3 of %u counters do not #GP (the VMM routes only "
			    "the legacy MSRs of existing counters to the model, which #GPs these; KVM reads them 0)", n, n);
	reset();
}

/* MSRs this PMU does not have #GP, read or write. */
static void check_absent(void)
{
	static const struct { uint32_t msr; const char *what; } intel[] = {
		{ 0x309, "IA32_FIXED_CTR0" },
		{ 0x345, "IA32_PERF_CAPABILITIES" },
		{ 0x38d, "IA32_FIXED_CTR_CTRL" },
		{ 0x38e, "IA32_PERF_GLOBAL_STATUS" },
		{ 0x38f, "IA32_PERF_GLOBAL_CTRL" },
		{ 0x390, "IA32_PERF_GLOBAL_OVF_CTRL" },
	};
	/* Intel's P6 PMU MSRs, which KVM answers itself for any guest without them in its vPMU. */
	static const struct { uint32_t msr; const char *what; } p6[] = {
		{ 0x0c1, "IA32_PMC0" },
		{ 0x0c2, "IA32_PMC1" },
		{ 0x186, "IA32_PERFEVTSEL0" },
		{ 0x187, "IA32_PERFEVTSEL1" },
	};
	uint64_t v;
	unsigned n = caps.counters;
	report_prefix_push("#GP");
	if (n < AMD_MAX_COUNTERS) {
		report(rdmsr_safe(ctl(n), &v) < 0 && wrmsr_safe(ctl(n), 0) < 0, "PERF_CTL%u (%#x) of %u counters", n, ctl(n), n);
		report(rdmsr_safe(ctr(n), &v) < 0 && wrmsr_safe(ctr(n), 0) < 0, "PERF_CTR%u (%#x) of %u counters", n, ctr(n), n);
	}
	report(rdmsr_safe(ctl(AMD_MAX_COUNTERS), &v) < 0 && wrmsr_safe(ctl(AMD_MAX_COUNTERS), 0) < 0 &&
		       rdmsr_safe(ctr(AMD_MAX_COUNTERS), &v) < 0 && wrmsr_safe(ctr(AMD_MAX_COUNTERS), 0) < 0,
	       "PERF_CTL6/PERF_CTR6 (%#x, %#x): past PerfCtrExtCore's six", ctl(AMD_MAX_COUNTERS), ctr(AMD_MAX_COUNTERS));
	if (n < AMD_LEGACY_COUNTERS)
		check_absent_legacy(n);
	report(rdmsr_safe(0xc0000304, &v) < 0 && wrmsr_safe(0xc0000304, 0) < 0, "0xc0000304, past STATUS_SET");
	int ok = 1;
	for (unsigned k = 0; k < sizeof(intel) / sizeof(intel[0]); k++) {
		int r = rdmsr_safe(intel[k].msr, &v) < 0 && wrmsr_safe(intel[k].msr, 0) < 0;
		if (!r)
			report_info("%s (%#x) did not #GP", intel[k].what, intel[k].msr);
		ok &= r;
	}
	report(ok, "Intel PMU MSRs (FIXED_CTR0, PERF_CAPABILITIES, FIXED_CTR_CTRL, GLOBAL_STATUS/CTRL/OVF_CTRL)");
	/*
	 * An AMD part has no 0xc1/0xc2/0x186/0x187 and #GPs them. KVM's common MSR code reads them
	 * as 0 and drops writes for any guest whose vPMU lacks them ("for the sake of cross vendor
	 * migration"), and the VMM leaves MSRs outside the AMD PMU to KVM. Whatever they do, they
	 * must not reach the AMD counters.
	 */
	reset();
	int gp = 1, inert = 1;
	for (unsigned k = 0; k < sizeof(p6) / sizeof(p6[0]); k++) {
		uint64_t val = p6[k].msr >= 0x186 ? amd_evtsel(EV_INSTRUCTIONS, EVTSEL_OS | EVTSEL_EN) : 0x1234;
		int rd = rdmsr_safe(p6[k].msr, &v), wr = wrmsr_safe(p6[k].msr, val);
		uint64_t after = ~0ull;
		int rd2 = rdmsr_safe(p6[k].msr, &after);
		if (rd == 0 || wr == 0) {
			gp = 0;
			report_info("%s (%#x): read %s, write %s, reads %#llx after", p6[k].what, p6[k].msr,
				    rd ? "#GP" : "ok", wr ? "#GP" : "ok", rd2 ? 0ull : (unsigned long long)after);
		}
		inert &= rd2 < 0 || after == 0;
	}
	for (unsigned i = 0; i < caps.counters; i++)
		inert &= rdmsr(ctl(i)) == 0 && rdmsr(ctr(i)) == 0;
	report(inert, "Intel P6 PMU MSRs (0xc1, 0xc2, 0x186, 0x187) do not reach the AMD counters");
	if (gp)
		report(1, "Intel P6 PMU MSRs (0xc1, 0xc2, 0x186, 0x187) #GP");
	else
		report_skip("VMM DISAGREES: Intel P6 PMU MSRs 0xc1/0xc2/0x186/0x187 do not #GP (KVM's cross-vendor "
			    "fallback reads 0, drops writes; the VMM does not route them under --cpu-vendor amd); "
			    "an AMD part #GPs them");
	reset();
	report_prefix_pop();
}

/*
 * RDPMC ECX is the counter number, 0..n-1, with no flag bits (no Intel fixed or fast forms):
 * anything else #GPs. After the common RDPMC checks, counter 0 programmed.
 */
static void check_rdpmc_forms(void)
{
	static const uint32_t bad[] = { AMD_MAX_COUNTERS, 1u << 30, 1u << 31, (1u << 31) | 1, (1u << 30) | 1, 0x100, ~0u };
	uint64_t v;
	unsigned n = caps.counters;
	if (conf.exact || !kit_native) { /* RDPMC runs on the vPMU (see check_rdpmc) */
		int ok = 1;
		for (unsigned i = 1; i < n; i++) {
			uint64_t want = 0xa00000000000ull | (uint64_t)i << 36 | 0x12345678u;
			wrmsr(ctr(i), want);
			ok &= rdpmc_safe(i, &v) == 0 && v == want;
		}
		report(ok, "RDPMC 1..%u read all 48 bits of each counter", n - 1);
	}
	int ok = 1;
	for (unsigned k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
		ok &= rdpmc_safe(bad[k], &v) < 0;
	report(ok, "RDPMC 6, 1<<30 (Intel fixed), 1<<31 and 1<<31|1 (Intel fast), 1<<30|1, 0x100, ~0 #GP");
}

/* Before anything is written: the reset state, then the identity and what counts here. */
static void check_first(void)
{
	check_reset_state();
	check_identity();
	check_counter_count();
	probe_events();
}

/* Software that knows only EN: GLOBAL_CTL enables every counter, EN starts and stops. */
static void check_gating_by_en(enum arch_event ev)
{
	check_en_gating(ev, 1);
	check_en_gating(ev, 0);
}

static void check_registers(void)
{
	check_write_width();
	check_reserved();
	check_absent();
}

static int probe(void)
{
	amd_pmu_probe(&caps);
	/* The checks use the interleaved MSRs and the global registers. */
	if (!caps.amd || !caps.perfctr_core || !caps.perfmon_v2 || !caps.counters) {
		report_skip("no AMD PerfMonV2 PMU (vendor %s, PerfCtrExtCore %d, PerfMonV2 %d, %u counters; run with "
			    "--cpu-vendor amd)",
			    caps.amd ? "AMD" : "not AMD", caps.perfctr_core, caps.perfmon_v2, caps.counters);
		return 0;
	}
	conf.gp_counters = caps.counters;
	return 1;
}

static const struct pmu_vendor amd = {
	.name = "pmu_amd",
	.global_ctrl = MSR_AMD64_PERF_CNTR_GLOBAL_CTL,
	.global_name = "GLOBAL_CTL",
	.global_status = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS,
	.status_clr = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR,
	.status_clr_name = "STATUS_CLR",
	.status_set = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_SET,
	.uncountable = "no count appeared: this backend cannot count it here",
	.ctl = ctl,
	.ctr = ctr,
	.evtsel = amd_evtsel,
	.reset = reset,
	.probe = probe,
	.identity = check_first,
	.aliases = check_legacy_aliases,
	.gating = check_gating_by_en,
	.registers = check_registers,
	.rdpmc = check_rdpmc_forms,
};

int main(int argc, char **argv)
{
	return conformance_run(&amd);
}
