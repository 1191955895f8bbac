/*
 * pebs: software PEBS (perfvm --pebs) checked from inside the guest, in the manner of
 * pmu_arch. With PEBS advertised: the capability bits, the PEBS MSRs' rules, gating by
 * EN and GLOBAL_CTRL, the records (format 1, 176 bytes), the buffer bounds and the PMI at
 * the interrupt threshold. Without: that CPUID, PERF_CAPABILITIES and MISC_ENABLE say
 * PEBS is unavailable and IA32_PEBS_ENABLE / IA32_DS_AREA #GP.
 *
 * What a record means here (format 1, trap-like, as the SDM describes that generation):
 * a PEBS counter's overflow (max -> 0) arms PEBS, the next event triggers the assist
 * after its instruction completes, the record holds the registers at that point (RIP =
 * the next instruction) and the counter is reloaded from the DS area's reset value. So
 * with a reset value of -P, records come every P + 1 events. On the exact backend (the
 * VMM's CPUID leaf says which) every record's RIP and registers are checked exactly;
 * elsewhere they are checked to lie in the measured loop.
 */
#include "kit.h"
#include "pmu.h"

#define MSR_IA32_MISC_ENABLE 0x1a0

#define MISC_ENABLE_FAST_STRING  (1ull << 0)
#define MISC_ENABLE_EMON         (1ull << 7)
#define MISC_ENABLE_BTS_UNAVAIL  (1ull << 11)
#define MISC_ENABLE_PEBS_UNAVAIL (1ull << 12)
#define PERF_CAP_PEBS_TRAP       (1ull << 6)
#define PERF_CAP_PEBS_ARCH_REG   (1ull << 7)
#define PERF_CAP_PEBS_FORMAT(c)  (((c) >> 8) & 0xf)
#define CPUID_1_EDX_DS           (1u << 21)
#define CPUID_1_ECX_DTES64       (1u << 2)
#define GLOBAL_STATUS_OVF_BUFFER (1ull << 62)
#define COUNTER_MASK             ((1ull << 48) - 1)

/* The 64-bit DS save area (SDM "DS Save Area", IA-32e layout). */
struct ds_area {
	uint64_t bts_base, bts_index, bts_max, bts_threshold;
	uint64_t pebs_base, pebs_index, pebs_max, pebs_threshold;
	uint64_t pebs_reset[8];
};

/* PEBS record format 1. */
struct pebs_record {
	uint64_t rflags, rip;
	uint64_t rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp;
	uint64_t r8, r9, r10, r11, r12, r13, r14, r15;
	uint64_t status, dla, dse, lat;
};
_Static_assert(sizeof(struct pebs_record) == 0xb0, "PEBS record format 1 is 176 bytes");

#define NREC 16
#define CANARY 0x5a5a5a5a5a5a5a5aull

static struct ds_area ds __attribute__((aligned(64)));
/* One record more than any buffer uses: whatever lies past the maximum must stay intact. */
static struct pebs_record buf[NREC + 1] __attribute__((aligned(64)));

static struct pmu_caps caps;
static int exact, pebs;
static enum arch_event ev;

/* What the PMI handler saw. */
static volatile unsigned pmis;
static volatile uint64_t pmi_status, pmi_lvtpc, pmi_rip;

void nmi_handler(struct trap_frame *f)
{
	pmi_status = rdmsr(MSR_IA32_PERF_GLOBAL_STATUS);
	pmi_lvtpc = lapic_get_lvtpc();
	pmi_rip = f->rip;
	pmis++;
}

static uint64_t ds_index(void)
{
	return *(volatile uint64_t *)&ds.pebs_index;
}

static unsigned records(void)
{
	return (unsigned)((ds_index() - ds.pebs_base) / sizeof(struct pebs_record));
}

static void fill(void *p, uint64_t v, size_t bytes)
{
	for (size_t i = 0; i < bytes / 8; i++)
		((volatile uint64_t *)p)[i] = v;
}

static int canary_intact(const struct pebs_record *r)
{
	const volatile uint64_t *q = (const volatile uint64_t *)r;
	for (size_t i = 0; i < sizeof(*r) / 8; i++)
		if (q[i] != CANARY)
			return 0;
	return 1;
}

/* A PEBS buffer of `max` records with the threshold after `threshold` records, PMC0 reset to -period. */
static void ds_setup(unsigned max, unsigned threshold, uint64_t period)
{
	fill(&ds, 0, sizeof(ds));
	fill(buf, CANARY, sizeof(buf));
	ds.pebs_base = ds.pebs_index = (uint64_t)buf;
	ds.pebs_max = (uint64_t)&buf[max];
	ds.pebs_threshold = (uint64_t)&buf[threshold];
	ds.pebs_reset[0] = -period & COUNTER_MASK;
	barrier();
	wrmsr(MSR_IA32_DS_AREA, (uint64_t)&ds);
}

/* Everything off and clear: counters, PEBS, status, LVTPC masked. */
static void pebs_reset(void)
{
	wrmsr(MSR_IA32_PEBS_ENABLE, 0);
	pmu_reset(&caps);
	lapic_set_lvtpc(LVT_MASKED);
	pmis = 0;
	pmi_status = pmi_lvtpc = pmi_rip = 0;
}

/* PMC0 counting `ev` from -period (INT set: a PEBS counter must ignore it). */
static void program_pmc0(uint64_t period, uint64_t flags)
{
	wrmsr(MSR_IA32_PMC0, -period & 0xffffffffull); /* sign-extends to 48 bits */
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_INT | flags));
}

/*
 * The exactly known region: GLOBAL_CTRL = global_ctrl by its first WRMSR, then counted instructions
 * 1 (mov), 2k (dec) and 2k+1 (jnz) for k = 1..N, 2N+2 (xor); its last WRMSR (GLOBAL_CTRL = 0)
 * is not counted. Emitted once (noinline) so the labels are unique.
 */
#define REGION_N 20
extern char region_top[], region_jnz[], region_end[], region_exit[];

static __attribute__((noinline)) void pebs_region(uint32_t global_ctrl)
{
	uint32_t ecx = MSR_IA32_PERF_GLOBAL_CTRL, eax = global_ctrl, edx = 0;
	asm volatile("wrmsr\n\t"
		     "mov $20, %%esi\n\t"
		     ".globl region_top\n"
		     "region_top: dec %%esi\n\t"
		     ".globl region_jnz\n"
		     "region_jnz: jnz region_top\n\t"
		     ".globl region_end\n"
		     "region_end: xor %%eax, %%eax\n\t"
		     ".globl region_exit\n"
		     "region_exit: wrmsr\n\t"
		     : "+c"(ecx), "+a"(eax), "+d"(edx) : : "esi", "memory");
}

/* RIP after counted instruction c of the region (trap-like: the next instruction). */
static uint64_t region_rip_after(unsigned c)
{
	if (c == 2 * REGION_N + 2)
		return (uint64_t)region_exit;
	if (c == 2 * REGION_N + 1)
		return (uint64_t)region_end;
	return c % 2 ? (uint64_t)region_top : (uint64_t)region_jnz;
}

/* ESI after counted instruction c of the region. */
static uint64_t region_rsi_after(unsigned c)
{
	unsigned decs = c / 2 < REGION_N ? c / 2 : REGION_N;
	return REGION_N - decs;
}

/*
 * A loop for the ranged checks: GLOBAL_CTRL = 1, spin until `n` runs out or a PMI arrives,
 * GLOBAL_CTRL = 0. Every counted instruction lies in [spin_start, spin_end).
 */
extern char spin_start[], spin_end[];

static __attribute__((noinline)) void pebs_spin(uint64_t n)
{
	uint32_t ecx = MSR_IA32_PERF_GLOBAL_CTRL, eax = 1, edx = 0;
	asm volatile("wrmsr\n\t"
		     ".globl spin_start\n"
		     "spin_start:\n\t"
		     "1: cmpl $0, %[stop]\n\t"
		     "jne 2f\n\t"
		     "dec %[n]\n\t"
		     "jnz 1b\n\t"
		     "2: xor %%eax, %%eax\n\t"
		     ".globl spin_end\n"
		     "spin_end: wrmsr\n\t"
		     : "+c"(ecx), "+a"(eax), "+d"(edx), [n] "+r"(n)
		     : [stop] "m"(pmis)
		     : "memory");
}

/*
 * In the loop or at its closing WRMSR (2 bytes): a ranged backend may find an overflow only
 * when that WRMSR stops the counter, and the assist then runs at the WRMSR's exit, with RIP
 * on the WRMSR or, once KVM has completed it, just past it.
 */
static int in_spin(uint64_t rip)
{
	return rip >= (uint64_t)spin_start && rip <= (uint64_t)spin_end + 2;
}

/* A PEBS period of about `us` microseconds of whatever PMC0 counts. */
static uint64_t period_us(uint64_t us)
{
	if (ev == EV_INSTRUCTIONS)
		return us; /* ~1 us per instruction here */
	return (tsc_khz ? tsc_khz : 1000000) * us / 1000;
}

static void detect(void)
{
	struct cpuid_regs r = cpuid(1);
	uint64_t misc;
	/* Not CPUID.1:EDX.DS: this host's KVM clears it whatever the VMM sets (see check_caps). */
	pebs = (r.ecx & CPUID_1_ECX_PDCM) && PERF_CAP_PEBS_FORMAT(caps.perf_capabilities) != 0 &&
	       rdmsr_safe(MSR_IA32_MISC_ENABLE, &misc) == 0 && !(misc & MISC_ENABLE_PEBS_UNAVAIL);
}

static void check_caps(void)
{
	struct cpuid_regs r = cpuid(1);
	uint64_t pcap = caps.perf_capabilities, misc = 0, v;
	int misc_ok = rdmsr_safe(MSR_IA32_MISC_ENABLE, &misc) == 0;
	report_prefix_push("caps");
	if (!pebs) {
		report(!(r.edx & CPUID_1_EDX_DS), "CPUID.1:EDX.DS clear");
		report(!(r.ecx & CPUID_1_ECX_DTES64), "CPUID.1:ECX.DTES64 clear");
		report(PERF_CAP_PEBS_FORMAT(pcap) == 0 && !(pcap & (PERF_CAP_PEBS_TRAP | PERF_CAP_PEBS_ARCH_REG)),
		       "PERF_CAPABILITIES advertises no PEBS (%#llx)", (unsigned long long)pcap);
		report(!misc_ok || (misc & MISC_ENABLE_PEBS_UNAVAIL), "MISC_ENABLE says PEBS unavailable (%#llx)",
		       (unsigned long long)misc);
		report(rdmsr_safe(MSR_IA32_PEBS_ENABLE, &v) < 0, "PEBS_ENABLE read: #GP");
		report(wrmsr_safe(MSR_IA32_PEBS_ENABLE, 1) < 0, "PEBS_ENABLE write: #GP");
		report(rdmsr_safe(MSR_IA32_DS_AREA, &v) < 0, "DS_AREA read: #GP");
		report(wrmsr_safe(MSR_IA32_DS_AREA, (uint64_t)&ds) < 0, "DS_AREA write: #GP");
		report_prefix_pop();
		return;
	}
	report(!!(r.ecx & CPUID_1_ECX_DTES64), "CPUID.1:ECX.DTES64 (64-bit DS save area)");
	/* The VMM sets DS too, but some hosts' KVM rewrites CPUID leaf 1 and drops it. */
	if (r.edx & CPUID_1_EDX_DS)
		report(1, "CPUID.1:EDX.DS");
	else
		report_skip("CPUID.1:EDX.DS: the host's KVM does not pass it through (the VMM sets it)");
	report(!!(r.ecx & CPUID_1_ECX_PDCM), "CPUID.1: PDCM");
	report(PERF_CAP_PEBS_FORMAT(pcap) == 1, "PEBS record format %llu", (unsigned long long)PERF_CAP_PEBS_FORMAT(pcap));
	report(!!(pcap & PERF_CAP_PEBS_TRAP), "trap-like PEBS");
	report(!!(pcap & PERF_CAP_PEBS_ARCH_REG), "records hold the registers");
	report(misc == (MISC_ENABLE_EMON | MISC_ENABLE_BTS_UNAVAIL), "MISC_ENABLE = %#llx (EMON, BTS unavailable, PEBS available)",
	       (unsigned long long)misc);
	report(wrmsr_safe(MSR_IA32_MISC_ENABLE, misc | MISC_ENABLE_PEBS_UNAVAIL) < 0, "MISC_ENABLE.PEBS_UNAVAIL is read-only");
	report(wrmsr_safe(MSR_IA32_MISC_ENABLE, misc & ~MISC_ENABLE_BTS_UNAVAIL) < 0, "MISC_ENABLE.BTS_UNAVAIL is read-only");
	report(wrmsr_safe(MSR_IA32_MISC_ENABLE, misc & ~MISC_ENABLE_EMON) == 0 && rdmsr(MSR_IA32_MISC_ENABLE) == misc,
	       "MISC_ENABLE.EMON: write ignored");
	report(wrmsr_safe(MSR_IA32_MISC_ENABLE, misc | MISC_ENABLE_FAST_STRING) == 0 &&
	       rdmsr(MSR_IA32_MISC_ENABLE) == (misc | MISC_ENABLE_FAST_STRING), "MISC_ENABLE: other bits keep what is written");
	wrmsr(MSR_IA32_MISC_ENABLE, misc);
	report_prefix_pop();
}

static void check_msrs(void)
{
	uint64_t all = (1ull << caps.gp_counters) - 1;
	report_prefix_push("msr");
	report(rdmsr(MSR_IA32_PEBS_ENABLE) == 0 && rdmsr(MSR_IA32_DS_AREA) == 0, "PEBS_ENABLE and DS_AREA start at 0");
	report(wrmsr_safe(MSR_IA32_PEBS_ENABLE, all) == 0 && rdmsr(MSR_IA32_PEBS_ENABLE) == all,
	       "PEBS_ENABLE: one bit per GP counter (%#llx)", (unsigned long long)all);
	report(wrmsr_safe(MSR_IA32_PEBS_ENABLE, 1ull << caps.gp_counters) < 0, "PEBS_ENABLE bit %u (no such counter): #GP",
	       caps.gp_counters);
	report(wrmsr_safe(MSR_IA32_PEBS_ENABLE, 1ull << 32) < 0, "PEBS_ENABLE bit 32 (no fixed-counter PEBS in format 1): #GP");
	report(wrmsr_safe(MSR_IA32_PEBS_ENABLE, 1ull << 63) < 0, "PEBS_ENABLE bit 63: #GP");
	report(rdmsr(MSR_IA32_PEBS_ENABLE) == all, "a faulting write changes nothing");
	wrmsr(MSR_IA32_PEBS_ENABLE, 0);
	report(wrmsr_safe(MSR_IA32_DS_AREA, (uint64_t)&ds) == 0 && rdmsr(MSR_IA32_DS_AREA) == (uint64_t)&ds,
	       "DS_AREA holds a linear address");
	report(wrmsr_safe(MSR_IA32_DS_AREA, 0xffff800000000000ull) == 0, "DS_AREA: canonical upper half accepted");
	report(wrmsr_safe(MSR_IA32_DS_AREA, 0x0000800000000000ull) < 0, "DS_AREA: non-canonical #GP");
	report(wrmsr_safe(MSR_IA32_DS_AREA, 0x8000000000001000ull) < 0, "DS_AREA: non-canonical (bit 63 only) #GP");
	report(rdmsr(MSR_IA32_DS_AREA) == 0xffff800000000000ull, "DS_AREA keeps the last good value");
	wrmsr(MSR_IA32_DS_AREA, 0);
	report_prefix_pop();
}

/* PEBS_ENABLE set for PMC0 but PMC0 not fully enabled: no records, no counting. */
static void check_gating(void)
{
	uint64_t p = 6, start = -p & COUNTER_MASK;
	report_prefix_push("gating");
	pebs_reset();
	ds_setup(NREC, NREC + 1, p);
	wrmsr(MSR_IA32_PEBS_ENABLE, 1);
	program_pmc0(p, 0); /* EN clear */
	pebs_region(1);
	report(records() == 0 && rdmsr(MSR_IA32_PMC0) == start, "PEBS bit, GLOBAL_CTRL set, EN clear: no record (%u)",
	       records());
	if (caps.gp_counters >= 2) {
		/* EN set, but the region enables only PMC1 in GLOBAL_CTRL. */
		program_pmc0(p, EVTSEL_EN);
		wrmsr(MSR_IA32_PERFEVTSEL0 + 1, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
		pebs_region(2);
		report(records() == 0 && rdmsr(MSR_IA32_PMC0) == start, "PEBS bit, EN set, GLOBAL_CTRL clear: no record (%u)",
		       records());
		/* PEBS for PMC1 only: PMC0's overflow is an ordinary one (status bit 0, no record). */
		pebs_reset();
		ds_setup(NREC, NREC + 1, p);
		wrmsr(MSR_IA32_PEBS_ENABLE, 2);
		wrmsr(MSR_IA32_PMC0, -p & 0xffffffffull);
		wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_EN)); /* no INT */
		pebs_region(1);
		uint64_t status = rdmsr(MSR_IA32_PERF_GLOBAL_STATUS);
		report(records() == 0 && status == 1, "PEBS on another counter: PMC0 overflows the ordinary way (status %#llx, %u records)",
		       (unsigned long long)status, records());
	} else {
		report_skip("one GP counter: no GLOBAL_CTRL-only case");
	}
	pebs_reset();
	report_prefix_pop();
}

/* Exact backend: every record of the known region, with reset -P, is checked field by field. */
static void check_exact_records(void)
{
	const uint64_t p = 6;                    /* a record every P + 1 = 7 instructions */
	const unsigned expect = (2 * REGION_N + 2) / (p + 1);
	int rips = 1, regs = 1, status = 1;
	report_prefix_push("exact-records");
	if (!exact) {
		report_skip("exact record contents need the exact backend");
		report_prefix_pop();
		return;
	}
	pebs_reset();
	lapic_set_lvtpc(LVT_NMI); /* unmasked: below the threshold no PMI may come, INT or not */
	ds_setup(NREC, NREC, p);
	wrmsr(MSR_IA32_PEBS_ENABLE, 1);
	program_pmc0(p, EVTSEL_EN);
	pebs_region(1);
	report(records() == expect && ds_index() == ds.pebs_base + expect * sizeof(struct pebs_record),
	       "%u records, index advanced by %u x %u bytes", records(), expect, (unsigned)sizeof(struct pebs_record));
	for (unsigned k = 0; k < records() && k < NREC; k++) {
		unsigned c = (k + 1) * (p + 1);
		volatile struct pebs_record *r = &buf[k];
		if (r->rip != region_rip_after(c)) {
			rips = 0;
			report_info("record %u: rip %#llx, expect %#llx (after instruction %u)", k, (unsigned long long)r->rip,
				    (unsigned long long)region_rip_after(c), c);
		}
		if (r->rsi != region_rsi_after(c) || r->rcx != MSR_IA32_PERF_GLOBAL_CTRL || r->rdx != 0 ||
		    r->rax != (c < 2 * REGION_N + 2 ? 1u : 0u) || !(r->rflags & 2)) {
			regs = 0;
			report_info("record %u: rsi %llu rax %llu rcx %#llx rflags %#llx", k, (unsigned long long)r->rsi,
				    (unsigned long long)r->rax, (unsigned long long)r->rcx, (unsigned long long)r->rflags);
		}
		if (r->status != 1 || r->dla || r->dse || r->lat)
			status = 0;
	}
	report(rips, "every record's RIP is the instruction after the triggering one (7, 14, ..., 42)");
	report(regs, "every record's RSI, RAX, RCX, RDX and RFLAGS are the registers at that point");
	report(status, "every record's GLOBAL_STATUS is PMC0's overflow bit; DLA, source, latency 0");
	report(canary_intact(&buf[expect]), "nothing written past the last record");
	/* The last record came at instruction 42; the disabling WRMSR (43) counts after the reload. */
	report(rdmsr(MSR_IA32_PMC0) == ((-p + 1) & COUNTER_MASK), "PMC0 reloaded from the reset value, plus the disabling WRMSR (%#llx)",
	       (unsigned long long)rdmsr(MSR_IA32_PMC0));
	report(rdmsr(MSR_IA32_PERF_GLOBAL_STATUS) == 0, "the assists cleared PMC0's status bit");
	report(pmis == 0, "no PMI below the threshold, even with EVENTSEL.INT (%u)", pmis);
	/* Counter reset -P, initial value -Q: the first record after Q + 1, then every P + 1. */
	pebs_reset();
	ds_setup(NREC, NREC, p);
	wrmsr(MSR_IA32_PEBS_ENABLE, 1);
	program_pmc0(10, EVTSEL_EN);
	pebs_region(1);
	report(records() == 5 && buf[0].rip == region_rip_after(11) && buf[1].rip == region_rip_after(18) &&
	       buf[4].rip == region_rip_after(39), "PMC0 from -10: first record after 11, then every 7 (%u records)",
	       records());
	pebs_reset();
	report_prefix_pop();
}

/* Both backends: records land in the loop that ran, and stop at the absolute maximum. */
static void check_records(void)
{
	const unsigned max = 4;
	uint64_t p = period_us(200);
	int in = 1, st = 1;
	report_prefix_push("records");
	pebs_reset();
	lapic_set_lvtpc(LVT_NMI);
	ds_setup(max, NREC, p); /* the threshold lies past the maximum: no PMI */
	wrmsr(MSR_IA32_PEBS_ENABLE, 1);
	program_pmc0(p, EVTSEL_EN);
	pebs_spin(exact ? 2000 : spin_iterations(20000));
	unsigned n = records();
	report(n >= 1 && n <= max && ds_index() == ds.pebs_base + n * sizeof(struct pebs_record),
	       "%u records (period %llu), index a whole number of records", n, (unsigned long long)p);
	for (unsigned k = 0; k < n; k++) {
		in &= in_spin(buf[k].rip);
		st &= (buf[k].status & 1) != 0;
	}
	report(in, "every record's RIP lies in the loop [%p, %p]", spin_start, spin_end);
	report(st, "every record's GLOBAL_STATUS has PMC0's bit");
	report(canary_intact(&buf[max]), "nothing written past the absolute maximum");
	if (exact)
		report(n == max, "the buffer filled (%u of %u)", n, max);
	report(pmis == 0, "no PMI: the threshold was never reached (%u)", pmis);
	pebs_reset();
	report_prefix_pop();
}

/* Both backends: the record that reaches the threshold raises the PMI, GLOBAL_STATUS.OvfBuffer set. */
static void check_threshold_pmi(void)
{
	const unsigned max = 8, threshold = 3;
	uint64_t p = period_us(exact ? 60 : 500);
	int in = 1;
	report_prefix_push("threshold-pmi");
	pebs_reset();
	lapic_set_lvtpc(LVT_NMI);
	ds_setup(max, threshold, p);
	wrmsr(MSR_IA32_PEBS_ENABLE, 1);
	program_pmc0(p, EVTSEL_EN);
	pebs_spin(exact ? 5000 : spin_iterations(2000000));
	unsigned n = records();
	report(pmis == 1, "one PMI (%u)", pmis);
	report(!!(pmi_status & GLOBAL_STATUS_OVF_BUFFER), "GLOBAL_STATUS.OvfBuffer set in the handler (%#llx)",
	       (unsigned long long)pmi_status);
	report(!!(pmi_lvtpc & LVT_MASKED), "LVTPC masked when the PMI arrived");
	report(n >= threshold && n <= max, "%u records (threshold %u, maximum %u)", n, threshold, max);
	for (unsigned k = 0; k < threshold && k < n; k++)
		in &= in_spin(buf[k].rip);
	report(in, "records up to the threshold lie in the loop");
	if (exact)
		report(n >= threshold && pmi_rip == buf[threshold - 1].rip,
		       "the PMI lands where the threshold record was taken (%#llx)", (unsigned long long)pmi_rip);
	report(canary_intact(&buf[max]), "nothing written past the absolute maximum");
	report(!!(rdmsr(MSR_IA32_PERF_GLOBAL_STATUS) & GLOBAL_STATUS_OVF_BUFFER), "OvfBuffer stays set until cleared");
	wrmsr(MSR_IA32_PERF_GLOBAL_OVF_CTRL, GLOBAL_STATUS_OVF_BUFFER);
	report(!(rdmsr(MSR_IA32_PERF_GLOBAL_STATUS) & GLOBAL_STATUS_OVF_BUFFER), "OVF_CTRL bit 62 clears it");
	pebs_reset();
	report_prefix_pop();
}

int main(int argc, char **argv)
{
	exact = vpmu_backend() == PERFVM_BACKEND_EXACT;
	pmu_probe(&caps);
	if (caps.version < 2) {
		report_skip("no architectural PMU (CPUID.0AH version %u)", caps.version);
		return report_summary();
	}
	lapic_enable();
	detect();
	ev = pmu_event_available(&caps, EV_INSTRUCTIONS) ? EV_INSTRUCTIONS : EV_CYCLES;
	printf("pebs: PEBS %s, PMC0 counts %s (%s)\n", pebs ? "available" : "not available", arch_events[ev].name,
	       exact ? "exact" : "ranged");
	report_info("CPUID.1: ecx %#x edx %#x, PERF_CAPABILITIES %#llx", cpuid(1).ecx, cpuid(1).edx,
		    (unsigned long long)caps.perf_capabilities);
	check_caps();
	if (!pebs)
		return report_summary();
	if (!pmu_event_available(&caps, ev)) {
		report_skip("nothing to count");
		return report_summary();
	}
	check_msrs();
	check_gating();
	check_exact_records();
	check_records();
	check_threshold_pmi();
	return report_summary();
}
