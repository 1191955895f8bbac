/*
 * The perf agent: runs the guest's main() under `stat` or `record` and programs the virtual
 * PMU the way Linux perf's x86 driver (arch/x86/events/core.c, intel/core.c) does:
 *
 *   setup    GLOBAL_CTRL=0; EVENTSELx = event|OS|EN (|INT when sampling) or
 *            FIXED_CTR_CTRL = OS (|PMI when sampling) per fixed counter; counters preset
 *            (0, or -period for sampling: full-width alias 0x4C1+i when PERF_CAPABILITIES
 *            has FW_WRITE, else the legacy MSR, which sign-extends from bit 31);
 *            GLOBAL_CTRL = enabled mask.
 *   PMI      (LVTPC in NMI mode) GLOBAL_CTRL=0; read GLOBAL_STATUS; per overflowed counter
 *            a sample {rip, task, event} and a reload with -period; GLOBAL_OVF_CTRL=status;
 *            LVTPC unmasked (NMI mode); GLOBAL_CTRL = mask (if counting is on).
 *   switch   (-p) out: GLOBAL_CTRL=0, RDMSR each counter, charge the delta to the outgoing
 *            context; in: write each counter (0, or -(period left) when sampling),
 *            GLOBAL_CTRL = mask.
 *   rotate   (stat with more events than counters) on a periodic timer tick, as perf's
 *            multiplexing: stop and charge, give the counters to the next events in
 *            round-robin order, program them, start; each event's time enabled and time
 *            running (TSC) go with its count so that the VMM can scale it.
 *
 * AMD (CPUID vendor AuthenticAMD with PerfMonV2, amd/core.c): the same logic through the
 * vendor table `vt` below: PERF_CTLi/PERF_CTRi (interleaved with PerfCtrExtCore, else the
 * K7 MSRs), GLOBAL_CTL/GLOBAL_STATUS/GLOBAL_STATUS_CLR for Intel's GLOBAL_CTRL/STATUS/
 * OVF_CTRL, 48-bit counters written at full width, no fixed counters (every event takes a
 * GP counter), AMD's event selects (the host's `0xUUEE=0xUUEEE` or amd_evtsel()), and no
 * LVTPC unmasking after a PMI (an AMD LAPIC does not mask it). Events keep perfvm's code
 * (Intel's architectural 0xUUEE) in counts and samples.
 *
 * When the VMM accepts the paravirtual PMU page (agent_pv.c, perfvm_pv.h), the same writes
 * go through its batch and doorbell: setup in one exit, each start (the enable, a sched-in)
 * in one, each stop in one, after which the stopped counters are read from the page
 * without exits. With a version-3 page the VMM also reloads sampling counters at the wrap
 * and reports the overflows in the page (paravirtual sampling): the PMI handler then
 * touches no MSR and no LAPIC register, and a sample costs no exit of its own.
 *
 * Counts are kept in software as in perf's x86_perf_event_update: each counter's last raw
 * value, and deltas modulo the counter width, so a sampling counter's wrap adds up.
 *
 * NMIs can land inside the agent's own critical sections (a context switch, the final
 * read): those set `busy`, and a PMI that finds it set only records its sample, acks, and
 * leaves the counter update to the interrupted code (`deferred`), which re-checks before
 * leaving. A sampling counter whose top bit is clear has wrapped and waits for its reload:
 * the period left is then a full period whoever notices first.
 */
#include "kit.h"
#include "pmu.h"
#include "agent.h"
#include "agent_pv.h"
#include "sched.h"

#define AGENT_MAX_EVENTS 16
#define AGENT_MAX_IDS (SCHED_MAX_TASKS + 1)
#define DEFAULT_PERIOD 10000
#define MIN_PERIOD 64 /* below ~20 the PMI handler's own counted exit path would livelock */
#define NO_COUNTER (-1)
#define MAX_WORDS 64
#define SAMPLE_BYTES (48 * 1024) /* the samples message's records; the VMM takes up to 64 KiB */
#define SAMPLE_MAX_REC (sizeof(struct agent_sample2) + AGENT_CHAIN_MAX * sizeof(uint64_t))
#define AGENT_TIMER_VECTOR 0xed
#define MUX_US_FULL_SPEED 4000 /* perf's default multiplexing interval */
#define MUX_US_EMULATED 20000  /* a rotation costs ~0.5 ms of emulated CPL0 code: keep it ~2% */

struct agent_event {
	uint16_t code;       /* perfvm's code: Intel's EVENTSEL[15:0] (what counts and samples carry) */
	uint8_t has_sel;     /* the host gave the vendor's select (`code=select`) */
	uint32_t given_sel;  /* that select, in the vendor's -e form (AMD: 0xUUEEE) */
	uint64_t sel;        /* event select bits of EVENTSEL / PERF_CTL (no flags) */
	uint16_t flags;      /* AGENT_COUNT_* */
	int hw;              /* GLOBAL_CTRL bit: 0-7 = PMCi, 32-34 = FIXED_CTRj; NO_COUNTER */
	const char *why;     /* why it is not counted */
	uint32_t rd_msr, wr_msr;
	uint64_t width_mask, top_bit;
	const struct pv_counter *pv_counter; /* the counter in the PV page */
	uint8_t pv_slot;     /* its slot in the PV page: 0-7 PMC, 8-10 fixed */
	uint8_t pv_entry;    /* its write in the PV start batch (pv_start_n) */
	uint64_t seen_reloads; /* paravirtual sampling: the VMM's reloads at prev */
	uint64_t prev;       /* raw counter value at the last update */
	uint64_t total;      /* everything counted: the task 0 entry */
	uint64_t enabled, running; /* TSC ticks counting was on / the event was on a counter */
};

static struct pmu_caps caps;

/* The vendor's PMU registers and counters: Intel's architectural PMU or AMD's PerfMonV2. */
static struct {
	int amd;
	int ok;            /* a PMU the agent drives (Intel version >= 2; AMD with PerfMonV2) */
	const char *no_pmu;
	unsigned gp_counters, gp_width, fixed_counters, fixed_width;
	int full_width_writes; /* counter writes take every bit (else sign-extended from 31) */
	uint32_t global_ctrl, global_status, status_clear;
	uint32_t ctl0, ctr0, wr_ctr0, stride; /* counter g: ctl0 + stride * g, ... */
	int pmi_masks_lvtpc;
} vt;
static struct agent_event evs[AGENT_MAX_EVENTS];
static unsigned nev;
static int recording, per_task, call_graph;
static uint64_t period = DEFAULT_PERIOD;
static uint64_t enabled_mask, sampling_mask;
static volatile int pmu_on;            /* GLOBAL_CTRL should hold enabled_mask */
static volatile int busy;              /* in a critical section of the agent */
static volatile uint64_t deferred;     /* counters a PMI left to the critical section */
static uint32_t ctx;                   /* context the counts are charged to (-p) */
static uint32_t max_id;
static uint64_t task_count[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
static uint64_t task_left[AGENT_MAX_IDS][AGENT_MAX_EVENTS]; /* sampling: period left */
static uint64_t task_enabled[AGENT_MAX_IDS][AGENT_MAX_EVENTS], task_running[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
static uint64_t t_on;                  /* TSC when the counters were last enabled */
static uint8_t task_started[AGENT_MAX_IDS];
static char *wargv[MAX_WORDS + 1];
static uint32_t pv_flags;              /* what the VMM answered to the PV page */
static uint32_t pv_start_n;            /* PV: batch = {GLOBAL_CTRL=0, counters, GLOBAL_CTRL=mask} */
static int pv_sampling_used;           /* the run sampled with the VMM's reloads */

/* Multiplexing (stat only): the countable events in -e order, scheduled from mux_first. */
static int mux;
static unsigned mux_order[AGENT_MAX_EVENTS], mux_n, mux_first, mux_counters;
static uint64_t mux_rotations;
static uint32_t mux_us;

/* Samples (AGENT_MSG_SAMPLES2): the message is built in place and sent when it may not
 * hold one more record (from the PMI) or at the end. */
static uint8_t sample_msg[sizeof(struct agent_msg_header) + sizeof(struct agent_samples2) + SAMPLE_BYTES]
	__attribute__((aligned(16)));
static uint32_t sample_used; /* record bytes in sample_msg */
static volatile int flushing;
static uint64_t samples_total, late_drops, nr_pmis, sample_msgs, nr_deferred;

/* COUNTS: one entry per event for the whole run, plus one per event per task with -p. */
static uint8_t counts_msg[sizeof(struct agent_msg_header) + sizeof(struct agent_counts) +
			  AGENT_MAX_IDS * AGENT_MAX_EVENTS * sizeof(struct agent_count)]
	__attribute__((aligned(16)));

static struct agent_samples2 *sample_buf(void)
{
	return (struct agent_samples2 *)(sample_msg + sizeof(struct agent_msg_header));
}

static int is_gp(const struct agent_event *e) { return e->hw >= 0 && e->hw < 32; }

/* ---- counter bookkeeping ------------------------------------------------------------- */

/* Whether the VMM reloads counter i at each wrap (paravirtual sampling). */
static int pv_reloaded(const struct agent_event *e)
{
	return agent_pv_sampling && e->hw >= 0 && (sampling_mask & (1ull << e->hw));
}

/* Charge the counter's advance to `raw` to the whole run and the current context. A
 * counter the VMM reloads advanced by a whole period per reload (perfvm_pv.h). */
static void charge(unsigned i, uint64_t raw)
{
	struct agent_event *e = &evs[i];
	uint64_t delta;
	if (pv_reloaded(e)) {
		uint64_t k = agent_pv_page3.sampling.reloads[e->pv_slot];
		delta = raw - e->prev + (k - e->seen_reloads) * period;
		e->seen_reloads = k;
	} else {
		delta = (raw - e->prev) & e->width_mask;
	}
	e->prev = raw;
	e->total += delta;
	if (per_task)
		task_count[ctx][i] += delta;
}

static void update(unsigned i)
{
	charge(i, rdmsr(evs[i].rd_msr));
}

static void write_counter(unsigned i, uint64_t v)
{
	struct agent_event *e = &evs[i];
	v &= e->width_mask;
	wrmsr(e->wr_msr, v);
	e->prev = v;
	e->seen_reloads = agent_pv_page3.sampling.reloads[e->pv_slot];
}

/* Set a stopped counter for the next pmu_start(): with the PV page the write goes into
 * the start batch, else straight to the MSR. */
static void load_counter(unsigned i, uint64_t v)
{
	struct agent_event *e = &evs[i];
	v &= e->width_mask;
	e->prev = v;
	e->seen_reloads = agent_pv_page3.sampling.reloads[e->pv_slot]; /* stopped: no reload before the write */
	if (agent_pv_mode)
		agent_pv_page.v1.batch[e->pv_entry].value = v;
	else
		wrmsr(e->wr_msr, v);
}

/* After update(): a sampling counter with its top bit clear has wrapped; restart it. */
static void reload_if_wrapped(unsigned i)
{
	if (!pv_reloaded(&evs[i]) && !(evs[i].prev & evs[i].top_bit))
		write_counter(i, -period);
}

static void handle_deferred(void)
{
	uint64_t d = __atomic_exchange_n(&deferred, 0, __ATOMIC_RELAXED);
	if (!d)
		return;
	for (unsigned i = 0; i < nev; i++) {
		if (evs[i].hw >= 0 && (d & (1ull << evs[i].hw))) {
			update(i);
			reload_if_wrapped(i);
		}
	}
}

static void begin_critical(void)
{
	busy = 1;
	barrier();
}

static void end_critical(void)
{
	for (;;) {
		handle_deferred();
		barrier();
		busy = 0;
		barrier();
		if (!deferred) /* a PMI between the check above and busy = 0 */
			return;
		busy = 1;
		barrier();
	}
}

/* The time since the counters were enabled: to every countable event's time enabled, and
 * to the time running of those on a counter (the whole run and the current context). */
static void account_time(void)
{
	uint64_t d = rdtsc() - t_on;
	for (unsigned i = 0; i < nev; i++) {
		struct agent_event *e = &evs[i];
		if (e->flags & AGENT_COUNT_UNSUPPORTED)
			continue;
		uint64_t r = e->hw >= 0 ? d : 0;
		e->enabled += d;
		e->running += r;
		if (per_task) {
			task_enabled[ctx][i] += d;
			task_running[ctx][i] += r;
		}
	}
}

/*
 * GLOBAL_CTRL = 0 and charge every counter's advance (a sched-out, a rotation, the final
 * read), and the time since the start.
 * MSRs: WRMSR, then one RDMSR per counter. PV page: the start batch's first entry alone
 * {GLOBAL_CTRL = 0}, one doorbell, after which the VMM has republished every counter
 * stopped: the page holds exactly what RDMSR would return, read without exits (a counter
 * published running or NEEDS_EXIT, which a stopped one is not, would be read by RDMSR).
 */
static void stop_and_update(void)
{
	pmu_on = 0;
	barrier();
	int pv = agent_pv_mode; /* one load, kept in a register across the doorbell */
	if (pv) {
		agent_pv_ring(1);
		if (!agent_pv_answered(1)) {
			agent_pv_lost(1);
			pv = AGENT_PV_OFF;
		}
		if (pv == AGENT_PV_READS) {
			for (unsigned i = 0; i < nev; i++) {
				uint64_t v;
				if (evs[i].hw < 0)
					continue;
				if (agent_pv_read_stopped(evs[i].pv_counter, &v) < 0)
					v = rdmsr(evs[i].rd_msr);
				charge(i, v);
			}
			account_time();
			return;
		}
	} else {
		wrmsr(vt.global_ctrl, 0);
	}
	for (unsigned i = 0; i < nev; i++)
		if (evs[i].hw >= 0)
			update(i);
	account_time();
}

/*
 * GLOBAL_CTRL = mask. With the PV page: the whole start batch, i.e. the counter values
 * load_counter() staged and the enable, one doorbell. Its answer is not checked (the
 * instructions after the enable are counted, and single-stepped on the exact backend): the
 * page can only be lost to the workload's own registration, and no workload code runs
 * between the stop or the registration that preceded this start and the start itself, so
 * a start follows an answered doorbell and is answered too; the next stop finds out.
 */
static void pmu_start(void)
{
	pmu_on = 1;
	t_on = rdtsc();
	barrier();
	if (agent_pv_mode)
		agent_pv_ring(pv_start_n);
	else
		wrmsr(vt.global_ctrl, enabled_mask);
}

/* ---- samples and the PMI ------------------------------------------------------------- */

static void add_sample(const struct trap_frame *f, uint64_t tsc, uint32_t task, uint16_t code)
{
	struct agent_samples2 *s = sample_buf();
	if (flushing) { /* the final flush is using the buffer */
		late_drops++;
		return;
	}
	struct agent_sample2 *x = (struct agent_sample2 *)((uint8_t *)(s + 1) + sample_used);
	x->rip = f->rip;
	x->tsc = tsc;
	x->task = task;
	x->event = code;
	x->nr = (uint16_t)(call_graph ? agent_callchain(f, x->chain, AGENT_CHAIN_MAX) : 0);
	sample_used += sizeof(*x) + x->nr * sizeof(uint64_t);
	s->n++;
	samples_total++;
	if (sample_used + SAMPLE_MAX_REC > SAMPLE_BYTES) { /* full: send from NMI context and reuse */
		agent_send_msg(sample_msg, AGENT_MSG_SAMPLES2, sizeof(*s) + sample_used);
		sample_msgs++;
		s->n = 0;
		s->dropped = 0;
		sample_used = 0;
	}
}

/* The PMI with paravirtual sampling: the VMM reloaded the counters and left their bits in
 * the page (taken atomically: it writes there between two entries of this vCPU). */
static int pv_pmi(struct trap_frame *f)
{
	uint64_t mine = __atomic_exchange_n(&agent_pv_page3.sampling.status, 0, __ATOMIC_RELAXED) & sampling_mask;
	if (!mine)
		return 0;
	uint64_t tsc = rdtsc();
	uint32_t task = current_task_id();
	nr_pmis++;
	for (unsigned i = 0; i < nev; i++)
		if (evs[i].hw >= 0 && (mine & (1ull << evs[i].hw)))
			add_sample(f, tsc, task, evs[i].code);
	return 1;
}

/* The PMI (an NMI, via the kit's exception hook for vector 2). */
static int agent_nmi(struct trap_frame *f)
{
	if (!sampling_mask)
		return 0;
	if (agent_pv_sampling)
		return pv_pmi(f);
	wrmsr(vt.global_ctrl, 0);
	uint64_t tsc = rdtsc();
	uint64_t status = rdmsr(vt.global_status);
	uint64_t mine = status & sampling_mask;
	if (mine) {
		uint32_t task = current_task_id();
		nr_pmis++;
		for (unsigned i = 0; i < nev; i++) {
			if (evs[i].hw < 0 || !(mine & (1ull << evs[i].hw)))
				continue;
			add_sample(f, tsc, task, evs[i].code);
			if (busy) {
				deferred |= 1ull << evs[i].hw;
				nr_deferred++;
			} else {
				update(i);
				reload_if_wrapped(i);
			}
		}
	}
	if (status)
		wrmsr(vt.status_clear, status);
	if (vt.pmi_masks_lvtpc)
		lapic_set_lvtpc(LVT_NMI); /* the PMI masked it */
	if (pmu_on)
		wrmsr(vt.global_ctrl, enabled_mask);
	return mine != 0; /* else: not ours, let nmi_handler see it */
}

/* ---- per-task counting hooks ----------------------------------------------------------- */

void agent_sched_out(uint32_t prev)
{
	if (!per_task || !enabled_mask)
		return;
	begin_critical();
	stop_and_update();
	end_critical();
	if (sampling_mask && prev < AGENT_MAX_IDS) {
		for (unsigned i = 0; i < nev; i++) {
			const struct agent_event *e = &evs[i];
			if (e->hw >= 0)
				task_left[prev][i] = (e->prev & e->top_bit) ? (-e->prev & e->width_mask) : period;
		}
	}
}

void agent_sched_in(uint32_t next)
{
	if (next > max_id && next < AGENT_MAX_IDS)
		max_id = next;
	if (!per_task || !enabled_mask)
		return;
	begin_critical();
	ctx = next < AGENT_MAX_IDS ? next : 0;
	if (!task_started[ctx]) {
		task_started[ctx] = 1;
		for (unsigned i = 0; i < nev; i++)
			task_left[ctx][i] = period;
	}
	if (agent_pv_mode && !sampling_mask) {
		/* Counting: every counter restarts from 0, which the start batch holds already. */
		for (unsigned i = 0; i < nev; i++)
			evs[i].prev = 0;
	} else {
		for (unsigned i = 0; i < nev; i++)
			if (evs[i].hw >= 0)
				load_counter(i, sampling_mask ? -task_left[ctx][i] : 0);
	}
	pmu_start();
	end_critical();
}

/* ---- options --------------------------------------------------------------------------- */

static void usage(void)
{
	printf("agent: usage: <guest> stat -e <ev>[,<ev>...] [-p] -- <args>\n"
	       "agent:        <guest> record -e <ev>[,<ev>...] -c <period> [-p] [-g] -- <args>\n"
	       "agent:   <ev> = 0xUUEE (umask, event select) or an architectural event name,\n"
	       "agent:          optionally =<the vendor's select> (AMD: 0xUUEEE, 12-bit event select)\n");
}

static int parse_events(const char *list)
{
	while (*list) {
		char word[32];
		unsigned n = 0;
		while (*list && *list != ',') {
			if (n + 1 < sizeof(word))
				word[n++] = *list;
			list++;
		}
		word[n] = 0;
		if (*list == ',')
			list++;
		if (!n)
			continue;
		if (nev >= AGENT_MAX_EVENTS) {
			printf("agent: at most %u events\n", AGENT_MAX_EVENTS);
			return -1;
		}
		int has_sel = 0;
		unsigned long sel = 0;
		char *eq = strchr(word, '=');
		if (eq) {
			char *end;
			*eq = 0;
			sel = strtoul(eq + 1, &end, 0);
			if (*end || eq[1] == 0 || sel > 0xfffff) {
				printf("agent: bad event select '%s'\n", eq + 1);
				return -1;
			}
			has_sel = 1;
		}
		int code = -1;
		for (int a = 0; a < NR_ARCH_EVENTS; a++)
			if (!strcmp(word, arch_events[a].name))
				code = arch_events[a].select | arch_events[a].umask << 8;
		if (code < 0) {
			char *end;
			unsigned long v = strtoul(word, &end, 0);
			if (*end || v > 0xffff) {
				printf("agent: bad event '%s'\n", word);
				return -1;
			}
			code = (int)v;
		}
		evs[nev].code = (uint16_t)code;
		evs[nev].has_sel = (uint8_t)has_sel;
		evs[nev].given_sel = (uint32_t)sel;
		evs[nev].hw = NO_COUNTER;
		nev++;
	}
	return 0;
}

/* Returns the index of the first workload word, or -1. */
static int parse_options(int argc, char **argv)
{
	int i = 2;
	recording = !strcmp(argv[1], "record");
	for (; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			return i + 1;
		if (!strcmp(a, "-p")) {
			per_task = 1;
		} else if (!strcmp(a, "-g") && recording) {
			call_graph = 1;
		} else if (!strcmp(a, "-e") && i + 1 < argc) {
			if (parse_events(argv[++i]) < 0)
				return -1;
		} else if (!strcmp(a, "-c") && i + 1 < argc && recording) {
			char *end;
			period = strtoul(argv[++i], &end, 0);
			if (*end || period < MIN_PERIOD) {
				printf("agent: bad period '%s' (at least %u)\n", argv[i], MIN_PERIOD);
				return -1;
			}
		} else {
			printf("agent: unknown option '%s'\n", a);
			return -1;
		}
	}
	return i; /* no "--": the workload gets no arguments */
}

/* ---- counter assignment and programming ----------------------------------------------- */

/* Fill the vendor table from CPUID (the kit's cpuid(): the VMM's table, natively too). */
static void probe_vendor(void)
{
	struct amd_pmu_caps amd;
	amd_pmu_probe(&amd);
	if (amd.amd) {
		vt.amd = 1;
		vt.ok = amd.perfmon_v2 && amd.counters > 0;
		vt.no_pmu = "no AMD PerfMonV2 PMU";
		vt.gp_counters = amd.counters > AMD_MAX_COUNTERS ? AMD_MAX_COUNTERS : amd.counters;
		vt.gp_width = 48;
		vt.full_width_writes = 1;
		vt.global_ctrl = MSR_AMD64_PERF_CNTR_GLOBAL_CTL;
		vt.global_status = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS;
		vt.status_clear = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR;
		vt.ctl0 = amd_ctl_msr(&amd, 0);
		vt.ctr0 = vt.wr_ctr0 = amd_ctr_msr(&amd, 0);
		vt.stride = amd_ctl_msr(&amd, 1) - vt.ctl0;
		vt.pmi_masks_lvtpc = 0;
		return;
	}
	pmu_probe(&caps);
	vt.ok = caps.version >= 2;
	vt.no_pmu = "no architectural PMU";
	vt.gp_counters = caps.gp_counters;
	vt.gp_width = caps.gp_width;
	vt.fixed_counters = caps.fixed_counters;
	vt.fixed_width = caps.fixed_width;
	vt.full_width_writes = !!(caps.perf_capabilities & PERF_CAP_FW_WRITE);
	vt.global_ctrl = MSR_IA32_PERF_GLOBAL_CTRL;
	vt.global_status = MSR_IA32_PERF_GLOBAL_STATUS;
	vt.status_clear = MSR_IA32_PERF_GLOBAL_OVF_CTRL;
	vt.ctl0 = MSR_IA32_PERFEVTSEL0;
	vt.ctr0 = MSR_IA32_PMC0;
	vt.wr_ctr0 = vt.full_width_writes ? MSR_IA32_A_PMC0 : MSR_IA32_PMC0;
	vt.stride = 1;
	vt.pmi_masks_lvtpc = 1;
}

static int arch_index(uint16_t code)
{
	for (int a = 0; a < NR_ARCH_EVENTS; a++)
		if ((arch_events[a].select | arch_events[a].umask << 8) == code)
			return a;
	return -1;
}

/* Fixed counter that counts `code` (perf's fixed-counter constraints), or -1. */
static int fixed_index(uint16_t code)
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
static int vendor_select(struct agent_event *e)
{
	if (!vt.amd) {
		e->sel = e->has_sel ? e->given_sel & 0xffff : e->code;
		return 0;
	}
	if (e->has_sel) {
		e->sel = amd_encode(e->given_sel & 0xfff, (uint8_t)(e->given_sel >> 12), 0);
		return 0;
	}
	int a = arch_index(e->code);
	if (a < 0)
		return -1;
	e->sel = amd_evtsel(a, 0);
	return 0;
}

/* Events the PMU cannot count at all are unsupported for good; the others go in mux_order. */
static void classify_events(void)
{
	mux_n = 0;
	for (unsigned i = 0; i < nev; i++) {
		struct agent_event *e = &evs[i];
		int a = arch_index(e->code);
		e->hw = NO_COUNTER;
		if (!vt.ok)
			e->why = vt.no_pmu;
		else if (!vt.amd && a >= 0 && !pmu_event_available(&caps, a))
			e->why = "not supported";
		else if (vendor_select(e) < 0)
			e->why = "no AMD encoding";
		else
			mux_order[mux_n++] = i;
		if (e->why)
			e->flags |= AGENT_COUNT_UNSUPPORTED;
	}
}

/* Counters for the countable events, perf's way, taken in round-robin order from mux_first
 * (perf's rotation of its flexible events): the event's fixed counter when it has one and
 * it is free, else the first free GP counter. Returns how many events got none. */
static unsigned assign_counters(void)
{
	uint32_t gp_used = 0, fixed_used = 0;
	unsigned left = 0;
	mux_counters = 0;
	for (unsigned k = 0; k < mux_n; k++) {
		struct agent_event *e = &evs[mux_order[(mux_first + k) % mux_n]];
		int j = fixed_index(e->code);
		e->hw = NO_COUNTER;
		if (e->flags & AGENT_COUNT_UNSUPPORTED)
			continue; /* its EVENTSEL write was refused */
		if (j >= 0 && (unsigned)j < vt.fixed_counters && !(fixed_used & (1u << j))) {
			fixed_used |= 1u << j;
			e->hw = 32 + j;
			e->flags |= AGENT_COUNT_FIXED;
			e->rd_msr = e->wr_msr = MSR_IA32_FIXED_CTR0 + j;
			e->width_mask = (1ull << vt.fixed_width) - 1;
		} else {
			unsigned g = 0;
			while (g < vt.gp_counters && (gp_used & (1u << g)))
				g++;
			if (g >= vt.gp_counters) {
				left++;
				continue;
			}
			gp_used |= 1u << g;
			e->hw = (int)g;
			e->rd_msr = vt.ctr0 + vt.stride * g;
			e->wr_msr = vt.wr_ctr0 + vt.stride * g;
			e->width_mask = (1ull << vt.gp_width) - 1;
		}
		e->top_bit = (e->width_mask >> 1) + 1;
		e->pv_slot = (uint8_t)(is_gp(e) ? e->hw : 8 + (e->hw - 32));
		e->pv_counter = &agent_pv_page.counters[e->pv_slot];
		mux_counters++;
	}
	return left;
}

/* First assignment. Events left without a counter are multiplexed when counting; when
 * sampling they are not counted (no multiplexing in record). */
static void assign_first(void)
{
	classify_events();
	if (!assign_counters())
		return;
	if (!recording) {
		mux = 1;
		return;
	}
	for (unsigned i = 0; i < nev; i++)
		if (evs[i].hw < 0 && !evs[i].why) {
			evs[i].why = "no free counter (no multiplexing in record)";
			evs[i].flags |= AGENT_COUNT_UNSUPPORTED;
		}
}

static int check_period(void)
{
	if (!recording)
		return 0;
	for (unsigned i = 0; i < nev; i++) {
		const struct agent_event *e = &evs[i];
		if (e->hw < 0)
			continue;
		if (period >= e->top_bit) {
			printf("agent: period %lu too large for a %u-bit counter\n", (unsigned long)period,
			       is_gp(e) ? vt.gp_width : vt.fixed_width);
			return -1;
		}
		if (is_gp(e) && !vt.full_width_writes && period >= (1ull << 31)) {
			printf("agent: period %lu needs full-width counter writes (legacy writes sign-extend "
			       "bit 31): use a period < 2^31\n", (unsigned long)period);
			return -1;
		}
	}
	return 0;
}

static uint64_t event_select(const struct agent_event *e)
{
	return e->sel | EVTSEL_OS | EVTSEL_EN | (recording ? EVTSEL_INT : 0);
}

static uint64_t fixed_control(void)
{
	uint64_t ctrl = 0;
	for (unsigned i = 0; i < nev; i++)
		if (evs[i].hw >= 32)
			ctrl |= FIXED_CTRL(evs[i].hw - 32, FIXED_OS | (recording ? FIXED_PMI : 0));
	return ctrl;
}

static void refuse(struct agent_event *e, const char *why)
{
	e->why = why;
	e->flags |= AGENT_COUNT_UNSUPPORTED;
	e->hw = NO_COUNTER;
}

/* GLOBAL_CTRL = 0, EVENTSELs, FIXED_CTR_CTRL with WRMSRs. */
static void program_controls_msr(void)
{
	wrmsr(vt.global_ctrl, 0);
	for (unsigned i = 0; i < nev; i++) {
		struct agent_event *e = &evs[i];
		if (is_gp(e) && wrmsr_safe(vt.ctl0 + vt.stride * e->hw, event_select(e)) < 0)
			refuse(e, "EVENTSEL write refused");
	}
	uint64_t fixed = fixed_control();
	if (fixed)
		wrmsr(MSR_IA32_FIXED_CTR_CTRL, fixed);
}

/* The same in one PV batch. A refused EVENTSEL (or FIXED_CTR_CTRL) stops the batch there:
 * its events become unsupported and the rest is submitted again. */
static void program_controls_pv(void)
{
	struct pv_batch_entry *b = agent_pv_page.v1.batch;
	int8_t owner[PV_BATCH_MAX]; /* event of each entry; -1: GLOBAL_CTRL, -2: FIXED_CTR_CTRL */
	unsigned n = 0;
	b[n] = (struct pv_batch_entry){ vt.global_ctrl, 0, 0 };
	owner[n++] = -1;
	for (unsigned i = 0; i < nev; i++) {
		if (is_gp(&evs[i])) {
			b[n] = (struct pv_batch_entry){ vt.ctl0 + vt.stride * evs[i].hw, 0, event_select(&evs[i]) };
			owner[n++] = (int8_t)i;
		}
	}
	uint64_t fixed = fixed_control();
	if (fixed) {
		b[n] = (struct pv_batch_entry){ MSR_IA32_FIXED_CTR_CTRL, 0, fixed };
		owner[n++] = -2;
	}
	while (n) {
		uint32_t done = agent_pv_submit(n);
		if (done >= n)
			break;
		if (owner[done] >= 0) {
			refuse(&evs[owner[done]], "EVENTSEL write refused");
		} else if (owner[done] == -2) {
			for (unsigned i = 0; i < nev; i++)
				if (evs[i].hw >= 32)
					refuse(&evs[i], "FIXED_CTR_CTRL write refused");
		}
		/* Submit what follows the refused entry. */
		unsigned k = 0;
		for (unsigned j = done + 1; j < n; j++, k++) {
			b[k] = b[j];
			owner[k] = owner[j];
		}
		n = k;
	}
}

/* Paravirtual sampling: every sampling counter reloads with -period at its wrap, and its
 * PMI leaves LVTPC unmasked. Read by the VMM at the next doorbell. */
static void setup_pv_sampling(void)
{
	struct pv_sampling *s = &agent_pv_page3.sampling;
	for (unsigned i = 0; i < nev; i++)
		if (evs[i].hw >= 0)
			s->reload[evs[i].pv_slot] = -period & evs[i].width_mask;
	s->flags = PV_S_RELOAD | PV_S_PMI_NO_MASK;
}

/* Program the counters stopped; pmu_start() enables them. */
static void program(void)
{
	if (agent_pv_sampling && recording)
		setup_pv_sampling();
	else
		agent_pv_sampling = 0; /* counting only: no reloads to account for */
	if (agent_pv_mode)
		program_controls_pv();
	else
		program_controls_msr();
	/* With the PV page the presets go into the start batch (pmu_start applies them with
	 * the enable), laid out once: {GLOBAL_CTRL=0, counter writes, GLOBAL_CTRL=mask}; each
	 * sched-in only fills in the values, each sched-out submits the first entry alone. */
	struct pv_batch_entry *b = agent_pv_page.v1.batch;
	unsigned n = 0;
	if (agent_pv_mode)
		b[n++] = (struct pv_batch_entry){ vt.global_ctrl, 0, 0 };
	enabled_mask = 0;
	for (unsigned i = 0; i < nev; i++) {
		struct agent_event *e = &evs[i];
		if (e->hw < 0)
			continue;
		if (agent_pv_mode) {
			e->pv_entry = (uint8_t)n;
			b[n++] = (struct pv_batch_entry){ e->wr_msr, 0, 0 };
		}
		load_counter(i, recording ? -period : 0);
		enabled_mask |= 1ull << e->hw;
	}
	if (agent_pv_mode)
		b[n++] = (struct pv_batch_entry){ vt.global_ctrl, 0, enabled_mask };
	pv_start_n = n;
	sampling_mask = recording ? enabled_mask : 0;
}

/* ---- multiplexing ------------------------------------------------------------------------ */

/* One rotation: stop and charge (and the time), hand the counters to the events after the
 * first one that had one, program them stopped, start. Interrupts off. */
static void mux_rotate(void)
{
	begin_critical();
	stop_and_update();
	mux_first = (mux_first + 1) % mux_n;
	assign_counters();
	program();
	pmu_start();
	mux_rotations++;
	end_critical();
}

/* The multiplexing tick: the agent's own timer, or the scheduler's while it owns the LAPIC
 * timer (sched_tick). Counting stopped (between a sched-out and a sched-in): nothing to do. */
void agent_tick(void)
{
	if (mux && pmu_on)
		mux_rotate();
}

static void agent_timer_irq(struct trap_frame *f)
{
	(void)f;
	agent_tick();
}

/* The periodic rotation timer (vector AGENT_TIMER_VECTOR). sched_run puts it back when it
 * has used the LAPIC timer for its own slices. */
static void mux_timer_start(void)
{
	mux_us = kit_full_speed ? MUX_US_FULL_SPEED : MUX_US_EMULATED;
	uint64_t count = lapic_timer_counts_per_ms() * mux_us / 1000;
	if (count > 0xffffffffu)
		count = 0xffffffffu;
	lapic_enable();
	set_irq_handler(AGENT_TIMER_VECTOR, agent_timer_irq);
	lapic_timer_start(AGENT_TIMER_VECTOR, count ? (uint32_t)count : 1, 1);
}

/* ---- the end ----------------------------------------------------------------------------- */

static void send_counts(void)
{
	struct agent_counts *c = (struct agent_counts *)(counts_msg + sizeof(struct agent_msg_header));
	unsigned n = 0;
	for (unsigned i = 0; i < nev; i++)
		c->c[n++] = (struct agent_count){ evs[i].code, evs[i].flags, 0, evs[i].total, evs[i].enabled,
						  evs[i].running };
	if (per_task)
		for (uint32_t id = 1; id <= max_id; id++)
			for (unsigned i = 0; i < nev; i++)
				c->c[n++] = (struct agent_count){ evs[i].code, evs[i].flags, id, task_count[id][i],
								  task_enabled[id][i], task_running[id][i] };
	c->n = n;
	c->entry_size = sizeof(struct agent_count);
	agent_send_msg(counts_msg, AGENT_MSG_COUNTS, sizeof(*c) + n * sizeof(struct agent_count));
}

static void flush_samples(void)
{
	struct agent_samples2 *s = sample_buf();
	flushing = 1;
	barrier();
	agent_send_msg(sample_msg, AGENT_MSG_SAMPLES2, sizeof(*s) + sample_used);
	sample_msgs++;
	s->n = 0;
	s->dropped = 0;
	sample_used = 0;
	barrier();
	flushing = 0;
}

static const char *event_name(uint16_t code)
{
	int a = arch_index(code);
	return a >= 0 ? arch_events[a].name : "raw";
}

static void print_summary(int pv_kept)
{
	console_lock();
	if (!(pv_flags & PV_F_ACCEPTED))
		printf("agent: msr programming (pv refused)\n");
	else if (!pv_kept)
		printf("agent: pv page v%u lost (the workload took it): msr programming from then on\n",
		       agent_pv_page.v1.guest_version);
	else
		printf("agent: pv page v%u (%s%s)\n", agent_pv_page.v1.guest_version,
		       pv_flags & PV_F_EXITLESS_READS ? "exitless reads" : "batched writes, reads by RDMSR",
		       pv_sampling_used ? ", paravirtual sampling" : "");
	if (mux)
		printf("agent: multiplexing %u events on %u counters, %lu rotations (every %u us)\n", mux_n,
		       mux_counters, (unsigned long)mux_rotations, mux_us);
	for (unsigned i = 0; i < nev; i++) {
		const struct agent_event *e = &evs[i];
		if (e->flags & AGENT_COUNT_UNSUPPORTED)
			printf("agent: 0x%04x %s <not supported> (%s)\n", e->code, event_name(e->code), e->why);
		else if (mux)
			printf("agent: 0x%04x %s %lu (running %lu%% of %lu ticks)\n", e->code, event_name(e->code),
			       (unsigned long)e->total,
			       (unsigned long)(e->enabled ? e->running * 100 / e->enabled : 0), (unsigned long)e->enabled);
		else
			printf("agent: 0x%04x %s %lu (%s %d)\n", e->code, event_name(e->code),
			       (unsigned long)e->total, is_gp(e) ? "pmc" : "fixed", is_gp(e) ? e->hw : e->hw - 32);
	}
	if (per_task) {
		for (uint32_t id = 1; id <= max_id; id++)
			for (unsigned i = 0; i < nev; i++)
				if (!(evs[i].flags & AGENT_COUNT_UNSUPPORTED))
					printf("agent: task %u %s 0x%04x %lu\n", id, agent_task_name(id), evs[i].code,
					       (unsigned long)task_count[id][i]);
		for (unsigned i = 0; i < nev; i++)
			if (!(evs[i].flags & AGENT_COUNT_UNSUPPORTED))
				printf("agent: outside tasks 0x%04x %lu\n", evs[i].code, (unsigned long)task_count[0][i]);
	}
	if (recording)
		printf("agent: samples %lu in %lu messages, pmis %lu (%lu in the agent's critical sections), "
		       "dropped %lu, period %lu\n", (unsigned long)samples_total, (unsigned long)sample_msgs,
		       (unsigned long)nr_pmis, (unsigned long)nr_deferred, (unsigned long)late_drops,
		       (unsigned long)period);
	console_unlock();
}

/* ---- entry from kit_start --------------------------------------------------------------- */

int agent_wanted(int argc, char **argv)
{
	return argc >= 2 && (!strcmp(argv[1], "stat") || !strcmp(argv[1], "record"));
}

int agent_run(int argc, char **argv, int (*main_fn)(int, char **))
{
	int first = parse_options(argc, argv);
	if (first < 0) {
		usage();
		return 2;
	}
	if (!nev) /* perf stat's core: instructions and cycles */
		parse_events("0x00c0,0x003c");
	int wargc = 0;
	wargv[wargc++] = argv[0];
	for (int i = first; i < argc && wargc < MAX_WORDS; i++)
		wargv[wargc++] = argv[i];
	wargv[wargc] = 0;

	begin_critical();
	probe_vendor();
	assign_first();
	if (check_period() < 0)
		return 2;
	pv_flags = agent_pv_register();
	if (vt.ok)
		program();
	if (sampling_mask) {
		struct agent_buffer b = { (uint64_t)(uintptr_t)sample_msg, AGENT_MSG_SAMPLES2, 0 };
		agent_send(AGENT_MSG_BUFFER, &b, sizeof(b));
		lapic_enable();
		set_exception_hook(NMI_VECTOR, agent_nmi);
		lapic_set_lvtpc(LVT_NMI);
	}
	task_started[0] = 1;
	for (unsigned i = 0; i < nev; i++)
		task_left[0][i] = period;
	ctx = 0;
	end_critical();

	if (mux && enabled_mask)
		mux_timer_start(); /* calibrates the timer (1 ms): before the START mark */
	agent_send_value("agent.pv", agent_pv_mode != AGENT_PV_OFF);
	agent_mark(AGENT_MARK_START);
	if (enabled_mask)
		pmu_start();
	if (mux && enabled_mask)
		irq_enable(); /* the rotation tick is an interrupt: main runs with them on */
	int rc = main_fn(wargc, wargv);
	if (mux && enabled_mask) {
		irq_disable();
		lapic_timer_stop();
	}
	begin_critical();
	if (enabled_mask)
		stop_and_update();
	end_critical();
	agent_mark(AGENT_MARK_END);
	int pv_kept = agent_pv_mode;
	pv_sampling_used = agent_pv_sampling;
	agent_pv_unregister();

	if (sampling_mask)
		lapic_set_lvtpc(LVT_MASKED | LVT_NMI);
	send_counts();
	if (recording)
		flush_samples();
	print_summary(pv_kept);
	return rc;
}
