/*
 * pvtest: the paravirtual PMU page. Version negotiation (same version, older guest, newer
 * guest, bad size), batched programming equals MSR programming, and exitless counter reads
 * agree with RDMSR within the bound the VMM publishes.
 */
#include "kit.h"
#include "pmu.h"
#include "perfvm_pv.h"

/* Room for every version's page; the checks below mostly use the v2 part. */
static struct pv_page_v5 page_v5 __attribute__((aligned(4096)));
#define page_v3 (page_v5.v3)
#define page (page_v5.v3.v2)
static struct pmu_caps caps;

static void offer(uint32_t version, uint32_t size)
{
	memset(&page, 0, sizeof(page));
	page.v1.guest_version = version;
	page.v1.size = size;
	outl(PERFVM_PORT_PV_REGISTER, (uint32_t)(uintptr_t)&page);
}

static void check_negotiation(void)
{
	report_prefix_push("negotiate");
	offer(2, sizeof(struct pv_page_v2));
	report(page.v1.flags & PV_F_ACCEPTED, "v2 accepted (flags %#x)", page.v1.flags);
	report(page.v1.host_version == PV_HOST_VERSION, "host version %u", page.v1.host_version);
	report(page.v1.flags & PV_F_EXITLESS_READS, "v2 gets exitless reads");
	report(!(page.v1.flags & PV_F_AUTO_RELOAD), "v2 gets no sampling section");
	offer(3, sizeof(struct pv_page_v3));
	report((page.v1.flags & PV_F_ACCEPTED) && (page.v1.flags & PV_F_AUTO_RELOAD),
	       "v3 accepted with paravirtual sampling (flags %#x)", page.v1.flags);
	offer(4, sizeof(struct pv_page_v3));
	report((page.v1.flags & PV_F_ACCEPTED) && (page.v1.flags & PV_F_AUTO_RELOAD) &&
	       !(page.v1.flags & PV_F_VMM_SAMPLES),
	       "v4 accepted with version 3's layout (flags %#x)", page.v1.flags);
	offer(5, sizeof(struct pv_page_v5));
	report((page.v1.flags & PV_F_ACCEPTED) && (page.v1.flags & PV_F_AUTO_RELOAD) &&
	       (page.v1.flags & PV_F_VMM_SAMPLES),
	       "v5 accepted with samples taken by the VMM (flags %#x)", page.v1.flags);
	offer(1, sizeof(struct pv_page_v1));
	report((page.v1.flags & PV_F_ACCEPTED) && !(page.v1.flags & PV_F_EXITLESS_READS),
	       "older guest (v1) accepted without v2 features (flags %#x)", page.v1.flags);
	offer(PV_HOST_VERSION + 1, sizeof(struct pv_page_v2) + 64);
	report(!(page.v1.flags & PV_F_ACCEPTED) && page.v1.host_version == PV_HOST_VERSION,
	       "newer guest refused, learns host version %u: falls back to MSRs", page.v1.host_version);
	offer(PV_HOST_VERSION, sizeof(struct pv_page_v1));
	report(!(page.v1.flags & PV_F_ACCEPTED), "bad size refused");
	report_prefix_pop();
}

/* Program every GP counter for cycles with distinct presets, via the page or via MSRs. */
static unsigned program(int batched)
{
	unsigned n = 0;
	if (batched) {
		struct pv_batch_entry *b = page.v1.batch;
		b[n++] = (struct pv_batch_entry){ MSR_IA32_PERF_GLOBAL_CTRL, 0, 0 };
		for (unsigned i = 0; i < caps.gp_counters; i++) {
			b[n++] = (struct pv_batch_entry){ MSR_IA32_PERFEVTSEL0 + i, 0, evtsel(EV_CYCLES, EVTSEL_OS | EVTSEL_EN) };
			b[n++] = (struct pv_batch_entry){ MSR_IA32_PMC0 + i, 0, 1000u * (i + 1) };
		}
		page.v1.batch_count = n;
		outb(PERFVM_PORT_PV_DOORBELL, 1);
		return page.v1.batch_done;
	}
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	for (unsigned i = 0; i < caps.gp_counters; i++) {
		wrmsr(MSR_IA32_PERFEVTSEL0 + i, evtsel(EV_CYCLES, EVTSEL_OS | EVTSEL_EN));
		wrmsr(MSR_IA32_PMC0 + i, 1000u * (i + 1));
	}
	return 1 + 2 * caps.gp_counters;
}

static void check_batch(void)
{
	uint64_t msr_state[16], pv_state[16];
	report_prefix_push("batch");
	offer(2, sizeof(struct pv_page_v2));
	pmu_reset(&caps);
	program(0);
	for (unsigned i = 0; i < caps.gp_counters; i++) {
		msr_state[2 * i] = rdmsr(MSR_IA32_PERFEVTSEL0 + i);
		msr_state[2 * i + 1] = rdmsr(MSR_IA32_PMC0 + i);
	}
	pmu_reset(&caps);
	unsigned done = program(1);
	report(done == 1 + 2 * caps.gp_counters && page.v1.batch_fault == 0, "%u writes applied in one exit", done);
	for (unsigned i = 0; i < caps.gp_counters; i++) {
		pv_state[2 * i] = rdmsr(MSR_IA32_PERFEVTSEL0 + i);
		pv_state[2 * i + 1] = rdmsr(MSR_IA32_PMC0 + i);
	}
	report(!memcmp(msr_state, pv_state, 16 * caps.gp_counters), "same EVENTSELs and counters as MSR programming");
	/* A faulting entry stops the batch: nothing after it is applied. */
	page.v1.batch[0] = (struct pv_batch_entry){ MSR_IA32_PMC0, 0, 7 };
	page.v1.batch[1] = (struct pv_batch_entry){ MSR_IA32_PERFEVTSEL0, 0, EVTSEL_ANY };
	page.v1.batch[2] = (struct pv_batch_entry){ MSR_IA32_PMC0, 0, 9 };
	page.v1.batch_count = 3;
	outb(PERFVM_PORT_PV_DOORBELL, 1);
	report(page.v1.batch_done == 1 && page.v1.batch_fault == 2 && rdmsr(MSR_IA32_PMC0) == 7,
	       "a reserved-bit entry stops the batch (done %u, fault %u)", page.v1.batch_done, page.v1.batch_fault);
	pmu_reset(&caps);
	report_prefix_pop();
}

/* pvclock-style read: retry while the VMM updates. */
static int pv_read(unsigned idx, uint64_t *value, uint32_t *err_ppm, uint64_t *since)
{
	struct pv_counter *c = &page.counters[idx];
	uint32_t seq, flags;
	uint64_t v, tsc, now;
	do {
		seq = c->seq;
		barrier();
		flags = c->flags;
		v = c->base;
		tsc = c->tsc;
		*err_ppm = c->err_ppm;
		now = rdtsc();
		if (flags & PV_C_RUNNING)
			v += (uint64_t)(((unsigned __int128)(now - tsc) * c->mult) >> c->shift);
		barrier();
	} while ((seq & 1) || seq != c->seq);
	*value = v;
	*since = now - tsc;
	return flags & PV_C_NEEDS_EXIT ? -1 : 0;
}

/* A page of `version`, then PMC0 counting cycles from a reset PMU. */
static void count_cycles_on_pmc0(uint32_t version, uint32_t size)
{
	offer(version, size);
	pmu_reset(&caps);
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(EV_CYCLES, EVTSEL_OS | EVTSEL_EN));
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
}

static void check_exitless_reads(void)
{
	report_prefix_push("exitless");
	count_cycles_on_pmc0(2, sizeof(struct pv_page_v2));
	for (volatile int spin = 0; spin < 20000; spin++)
		;
	uint64_t pv, since;
	uint32_t err_ppm;
	int exitless = pv_read(0, &pv, &err_ppm, &since) == 0;
	uint64_t msr = rdmsr(MSR_IA32_PMC0);
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	if (!exitless) {
		report(1, "the backend needs an exit to read (PV_C_NEEDS_EXIT): read with RDMSR");
	} else {
		/* The RDMSR comes a few instructions (and one exit) later than the PV read. */
		uint64_t bound = since * err_ppm / 1000000 + 200000; /* no truncation of since */
		int64_t diff = (int64_t)(msr - pv);
		report(pv > 0 && diff >= -(int64_t)bound && diff <= (int64_t)bound,
		       "PV read %llu vs RDMSR %llu (diff %lld, bound %llu)", (unsigned long long)pv,
		       (unsigned long long)msr, (long long)diff, (unsigned long long)bound);
	}
	pmu_reset(&caps);
	report_prefix_pop();
}

/* An empty doorbell between two RDTSCs: counter 0's flags, base and stamp. */
static uint32_t stamped_publish(uint64_t *base, uint64_t *tsc, uint64_t *before, uint64_t *after)
{
	struct pv_counter *c = &page.counters[0];
	page.v1.batch_count = 0;
	*before = rdtsc();
	outb(PERFVM_PORT_PV_DOORBELL, 1);
	*after = rdtsc();
	*base = c->base; /* no update can be under way: the VMM writes the page only in exits */
	*tsc = c->tsc;
	return c->flags;
}

/*
 * Version 4: a publish stamps a running counter with the TSC at which its count was read,
 * inside the doorbell's window; two publishes' counts differ by no more than the ticks
 * between their stamps (the clock counts thread time at most at the TSC's rate); a stop is
 * stamped too, with the count RDMSR reads.
 */
static void check_stamps(void)
{
	report_prefix_push("stamps");
	count_cycles_on_pmc0(4, sizeof(struct pv_page_v3));
	uint64_t b1, t1, lo1, hi1, b2, t2, lo2, hi2;
	uint32_t f1 = stamped_publish(&b1, &t1, &lo1, &hi1);
	for (volatile int spin = 0; spin < 20000; spin++)
		;
	uint32_t f2 = stamped_publish(&b2, &t2, &lo2, &hi2);
	if (f1 & PV_C_NEEDS_EXIT) {
		report(!(f1 & PV_C_TSC_AT_READ), "the backend needs an exit to read: no stamp (flags %#x)", f1);
	} else {
		report((f1 & f2 & PV_C_TSC_AT_READ) && (f1 & f2 & PV_C_RUNNING), "running and stamped (flags %#x %#x)", f1, f2);
		report(t1 >= lo1 && t1 <= hi1 && t2 >= lo2 && t2 <= hi2,
		       "stamps inside their doorbells (%llu in [%llu, %llu])", (unsigned long long)t1,
		       (unsigned long long)lo1, (unsigned long long)hi1);
		/* 1000 ppm of slack for the TSC rate the VMM converts thread time with */
		uint64_t ticks = t2 - t1, counted = b2 - b1;
		report(t2 > t1 && counted <= ticks + ticks / 1000,
		       "%llu counted in %llu ticks between two stamps", (unsigned long long)counted,
		       (unsigned long long)ticks);
		page.v1.batch[0] = (struct pv_batch_entry){ MSR_IA32_PERF_GLOBAL_CTRL, 0, 0 };
		page.v1.batch_count = 1;
		uint64_t lo = rdtsc();
		outb(PERFVM_PORT_PV_DOORBELL, 1);
		uint64_t hi = rdtsc();
		struct pv_counter *c = &page.counters[0];
		uint32_t f = c->flags;
		report((f & PV_C_TSC_AT_READ) && !(f & PV_C_RUNNING) && c->tsc >= lo && c->tsc <= hi &&
		       c->base == rdmsr(MSR_IA32_PMC0), "a stop is stamped inside its doorbell (flags %#x)", f);
	}
	/* An older guest's page never sees the flag. */
	offer(3, sizeof(struct pv_page_v3));
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
	uint32_t f3 = stamped_publish(&b1, &t1, &lo1, &hi1);
	report(!(f3 & PV_C_TSC_AT_READ), "not on a v3 page (flags %#x)", f3);
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	pmu_reset(&caps);
	report_prefix_pop();
}

/* `pvtest prog msr|pv N`: program every GP counter N times, for counting exits. */
static int program_rounds(const char *how, unsigned long rounds)
{
	int pv = !strcmp(how, "pv");
	if (pv) {
		offer(2, sizeof(struct pv_page_v2));
		if (!(page.v1.flags & PV_F_ACCEPTED))
			return 1;
	}
	for (unsigned long r = 0; r < rounds; r++)
		program(pv);
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	printf("pvtest: programmed %u counters %lu times via %s\n", caps.gp_counters, rounds, pv ? "the PV page" : "MSRs");
	return 0;
}

int main(int argc, char **argv)
{
	pmu_probe(&caps);
	if (argc > 3 && !strcmp(argv[1], "prog"))
		return program_rounds(argv[2], strtoul(argv[3], 0, 0));
	if (caps.version < 2) {
		report_skip("no architectural PMU");
		return report_summary();
	}
	check_negotiation();
	if (pmu_event_available(&caps, EV_CYCLES)) {
		check_batch();
		check_exitless_reads();
		check_stamps();
	} else {
		report_skip("cycles not available");
	}
	outl(PERFVM_PORT_PV_REGISTER, 0);
	return report_summary();
}
