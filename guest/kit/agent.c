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
 *   rotate   (more events than counters) on a periodic timer tick, as perf's
 *            multiplexing: stop and charge, give the counters to the next events in
 *            round-robin order, program them, start; each event's time enabled and time
 *            running (TSC) go with its count so that the VMM can scale it. A sampling
 *            event resumes with the period it had left, and its samples carry its code.
 *
 * AMD (CPUID vendor AuthenticAMD with PerfMonV2, amd/core.c): the same logic through the
 * vendor table `agent_vt` (agent_vendor.c): PERF_CTLi/PERF_CTRi (interleaved with
 * PerfCtrExtCore, else the K7 MSRs), GLOBAL_CTL/GLOBAL_STATUS/GLOBAL_STATUS_CLR for Intel's
 * GLOBAL_CTRL/STATUS/OVF_CTRL, 48-bit counters written at full width, no fixed counters (every event takes a
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
 * read): those set `agent_busy`, and a PMI that finds it set only records its sample, acks,
 * and leaves the counter update to the interrupted code (`agent_deferred`), which re-checks
 * before leaving. A sampling counter whose top bit is clear has wrapped and waits for its reload:
 * the period left is then a full period whoever notices first.
 *
 * This file is the core: the run (agent_run), the counters' bookkeeping, starting and
 * stopping them, and the critical sections; the other agent_*.c files do one job each
 * (agent_internal.h lists them and what they share).
 */
#include "agent_internal.h"

#define DEFAULT_PERIOD 10000
#define MAX_WORDS 64

struct agent_event agent_evs[AGENT_MAX_EVENTS];
unsigned agent_nev;
int agent_recording, agent_per_task, agent_call_graph;
uint64_t agent_period = DEFAULT_PERIOD;
uint64_t agent_enabled_mask, agent_sampling_mask;
volatile int agent_pmu_on;
volatile int agent_busy;
volatile uint64_t agent_deferred;
uint32_t agent_ctx;
uint32_t agent_max_id;
uint64_t agent_task_count[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
uint64_t agent_task_left[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
uint64_t agent_task_enabled[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
uint64_t agent_task_running[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
static uint64_t t_on; /* TSC when the counters were last enabled */
/* Switches since the last publish are in agent_attr (agent_charge_published). */
static int agent_attr_active;
/* The last start's instant (its publish's stamp, or rdtsc before it with its window). */
static uint64_t start_at, start_win;
uint8_t agent_task_started[AGENT_MAX_IDS];
static char *wargv[MAX_WORDS + 1];
uint32_t agent_pv_flags;
uint32_t agent_pv_start_n;
int agent_pv_sampling_used;
int agent_pv_vmm_samples_used;

/* ---- counter bookkeeping ------------------------------------------------------------- */

/* Whether the VMM reloads counter i at each wrap (paravirtual sampling). */
static int pv_reloaded(const struct agent_event *e)
{
	return agent_pv_sampling && e->hw >= 0 && (agent_sampling_mask & (1ull << e->hw));
}

/* Charge the counter's advance to `raw` to the whole run and the current context. A
 * counter the VMM reloads advanced by a whole period per reload (perfvm_pv.h). */
void agent_charge(unsigned i, uint64_t raw)
{
	struct agent_event *e = &agent_evs[i];
	uint64_t delta;
	if (pv_reloaded(e)) {
		uint64_t k = agent_pv_page3.sampling.reloads[e->pv_slot];
		delta = raw - e->prev + (k - e->seen_reloads) * agent_period;
		e->seen_reloads = k;
	} else {
		delta = (raw - e->prev) & e->width_mask;
	}
	e->prev = raw;
	e->total += delta;
	if (agent_per_task)
		agent_task_count[agent_ctx][i] += delta;
}

static void write_counter(unsigned i, uint64_t v)
{
	struct agent_event *e = &agent_evs[i];
	v &= e->width_mask;
	wrmsr(e->wr_msr, v);
	e->prev = v;
	e->seen_reloads = agent_pv_page3.sampling.reloads[e->pv_slot];
}

/* Set a stopped counter for the next agent_pmu_start(): with the PV page the write goes into
 * the start batch, else straight to the MSR. */
void agent_load_counter(unsigned i, uint64_t v)
{
	struct agent_event *e = &agent_evs[i];
	v &= e->width_mask;
	e->prev = v;
	e->seen_reloads = agent_pv_page3.sampling.reloads[e->pv_slot]; /* stopped: no reload before the write */
	if (agent_pv_mode)
		agent_pv_page.v1.batch[e->pv_entry].value = v;
	else
		wrmsr(e->wr_msr, v);
}

/* Sampling: after a stop, what each event on a counter has left of its period, kept in
 * context `ctx` for its next turn (a sched-in, a rotation): perf's period_left. A counter
 * with its top bit clear has wrapped and waits for its reload: a full period. */
void agent_save_period_left(uint32_t ctx)
{
	for (unsigned i = 0; i < agent_nev; i++) {
		const struct agent_event *e = &agent_evs[i];
		if (e->hw >= 0)
			agent_task_left[ctx][i] = (e->prev & e->top_bit) ? (-e->prev & e->width_mask) : agent_period;
	}
}

/* After agent_update(): a sampling counter with its top bit clear has wrapped; restart it. */
void agent_reload_if_wrapped(unsigned i)
{
	if (!pv_reloaded(&agent_evs[i]) && !(agent_evs[i].prev & agent_evs[i].top_bit))
		write_counter(i, -agent_period);
}

static void handle_deferred(void)
{
	uint64_t d = __atomic_exchange_n(&agent_deferred, 0, __ATOMIC_RELAXED);
	if (!d)
		return;
	for (unsigned i = 0; i < agent_nev; i++) {
		if (agent_evs[i].hw >= 0 && (d & (1ull << agent_evs[i].hw))) {
			agent_update(i);
			agent_reload_if_wrapped(i);
		}
	}
}

void agent_end_critical(void)
{
	for (;;) {
		handle_deferred();
		barrier();
		agent_busy = 0;
		barrier();
		if (!agent_deferred) /* a PMI between the check above and agent_busy = 0 */
			return;
		agent_busy = 1;
		barrier();
	}
}

/* The time since the counters were enabled: to every countable event's time enabled, and
 * to the time running of those on a counter (the whole run and the current context). */
static void account_time(void)
{
	uint64_t d = rdtsc() - t_on;
	for (unsigned i = 0; i < agent_nev; i++) {
		struct agent_event *e = &agent_evs[i];
		if (e->flags & AGENT_COUNT_UNSUPPORTED)
			continue;
		uint64_t r = e->hw >= 0 ? d : 0;
		e->enabled += d;
		e->running += r;
		if (agent_per_task) {
			agent_task_enabled[agent_ctx][i] += d;
			agent_task_running[agent_ctx][i] += r;
		}
	}
}

/*
 * Every counter's published value into raw[] and its flags into flags[]; returns the
 * publish's stamp where every counter has the same one (PV_C_TSC_AT_READ: when the VMM read
 * the counts), else 0.
 */
static uint64_t published_stamp(uint64_t *raw, uint32_t *flags)
{
	uint64_t at = 0;
	int stamped = 1;
	for (unsigned i = 0; i < agent_nev; i++) {
		if (agent_evs[i].hw < 0)
			continue;
		uint64_t tsc = 0;
		flags[i] = agent_pv_snapshot_stamp(agent_evs[i].pv_counter, &raw[i], &tsc);
		if (!(flags[i] & PV_C_TSC_AT_READ) || (flags[i] & PV_C_NEEDS_EXIT) || (at && tsc != at))
			stamped = 0;
		at = tsc;
	}
	return stamped ? at : 0;
}

/*
 * After a doorbell (or WRMSR) between rdtsc `before` and `*after`: every counter's raw value
 * into raw[] (the page's with PV reads where it allows, `stopped`: only counters published
 * stopped; else RDMSR), and the instant they were read, returned: the publish's stamp
 * (published_stamp) inside the window, which then closes (*after = the stamp), else `before`.
 */
static uint64_t read_raw(uint64_t *raw, int pv_reads, int stopped, uint64_t before, uint64_t *after)
{
	uint32_t flags[AGENT_MAX_EVENTS];
	uint64_t at = pv_reads ? published_stamp(raw, flags) : 0;
	for (unsigned i = 0; i < agent_nev; i++) {
		if (agent_evs[i].hw < 0)
			continue;
		if (!pv_reads || (flags[i] & PV_C_NEEDS_EXIT) || (stopped && (flags[i] & PV_C_RUNNING)))
			raw[i] = rdmsr(agent_evs[i].rd_msr);
	}
	if (!at || at < before || at > *after)
		return before;
	*after = at;
	return at;
}

/* Charge every counter's advance to raw[] (agent_charge). */
static void charge_all(const uint64_t *raw)
{
	for (unsigned i = 0; i < agent_nev; i++)
		if (agent_evs[i].hw >= 0)
			agent_charge(i, raw[i]);
}

/*
 * GLOBAL_CTRL = 0 and charge every counter's advance (a sched-out, a rotation, the final
 * read), and the time since the start.
 * MSRs: WRMSR, then one RDMSR per counter. PV page: the start batch's first entry alone
 * {GLOBAL_CTRL = 0}, one doorbell, after which the VMM has republished every counter
 * stopped: the page holds exactly what RDMSR would return, read without exits (a counter
 * published running or NEEDS_EXIT, which a stopped one is not, would be read by RDMSR).
 */
void agent_stop_and_update(void)
{
	agent_pmu_on = 0;
	barrier();
	uint64_t raw[AGENT_MAX_EVENTS], before = rdtsc();
	int pv = agent_pv_mode; /* one load, kept in a register across the doorbell */
	if (pv) {
		agent_pv_ring(1);
		if (!agent_pv_answered(1)) {
			agent_pv_lost(1);
			pv = AGENT_PV_OFF;
		}
	} else {
		wrmsr(agent_vt.global_ctrl, 0);
	}
	uint64_t after = rdtsc();
	/* PV reads: the VMM has republished every counter stopped, exactly what RDMSR would
	 * return (a counter published running or NEEDS_EXIT is read by RDMSR). */
	uint64_t at = read_raw(raw, pv == AGENT_PV_READS, 1, before, &after);
	if (agent_attr_active) { /* contexts that ran since the last publish share this advance */
		agent_attr_run(&agent_attr, agent_ctx, at);
		if (agent_pv_check) {
			agent_attr_run(&agent_attr_shadow, agent_ctx, at);
			agent_attr_settle(&agent_attr_shadow, raw, at, after);
		}
		agent_attr_settle(&agent_attr, raw, at, after);
		agent_attr_active = 0;
	} else {
		charge_all(raw);
	}
	account_time();
}

/*
 * Per-task counting through the published counters, one exit per switch (-p with the PV
 * page's exitless reads, counting only): the counters keep running across the switch. An
 * empty doorbell makes the VMM publish every counter's value at that exit (`base`, exact:
 * the backend's count at the exit, no extrapolation), and the advance since the previous
 * publish is charged to the current context. The next context's counts start at that
 * publish. A counter the VMM publishes NEEDS_EXIT (the exact backend) cannot be read this
 * way: returns 0 before any exit, and the caller stops and restarts the counters (two
 * doorbells, exact). Returns 1 if it charged.
 */
int agent_charge_published(void)
{
	if (agent_pv_mode != AGENT_PV_READS || agent_sampling_mask || !agent_pmu_on || agent_mux)
		return 0;
	for (unsigned i = 0; i < agent_nev; i++)
		if (agent_evs[i].hw >= 0 && (agent_evs[i].pv_counter->flags & PV_C_NEEDS_EXIT))
			return 0;
	uint64_t before = rdtsc();
	if (!agent_attr_active) {
		agent_attr_begin(&agent_attr, start_at, start_win);
		agent_attr_begin(&agent_attr_shadow, start_at, start_win);
		agent_attr_active = 1;
	}
	/* No exit: the switch is remembered, the next publish shares the advance out. */
	if (!agent_pv_check && before - agent_attr.start < agent_pv_publish_ticks) {
		agent_attr_run(&agent_attr, agent_ctx, before);
		account_time();
		t_on = rdtsc();
		return 1;
	}
	agent_pv_ring(0);
	uint64_t after = rdtsc();
	if (!agent_pv_answered(0)) {
		agent_pv_lost(0);
		return 0; /* the page is gone: the caller stops with a WRMSR (and shares out) */
	}
	uint64_t raw[AGENT_MAX_EVENTS];
	uint64_t at = read_raw(raw, 1, 0, before, &after);
	if (!agent_attr.n && !agent_pv_check) {
		/* The last switch published too (switches >= the interval apart, e.g. emulated):
		 * the whole advance is the current context's, as agent_attr_settle would find. */
		charge_all(raw);
		agent_attr.start = agent_attr.t0 = at;
		agent_attr.win = after - at;
		account_time();
		t_on = rdtsc();
		return 1;
	}
	agent_attr_run(&agent_attr, agent_ctx, at);
	/* --pv-check: the live counts are charged at every switch's publish (exact), the shadow
	 * shares out over its intervals as the default does, from the same publishes. */
	if (agent_pv_check) {
		agent_attr_run(&agent_attr_shadow, agent_ctx, at);
		if (at - agent_attr_shadow.start >= agent_pv_publish_ticks) {
			agent_attr_settle(&agent_attr_shadow, raw, at, after);
		} else {
			/* where the exact charges split the counts: a count's rounding, and an
			 * unstamped read's window (read_raw closes a stamped one at its stamp) */
			agent_attr_shadow.slop += 1 + (after - at);
			agent_attr_shadow.unstamped += after != at;
		}
	}
	agent_attr_settle(&agent_attr, raw, at, after);
	account_time();
	t_on = rdtsc();
	return 1;
}

/*
 * GLOBAL_CTRL = mask. With the PV page: the whole start batch, i.e. the counter values
 * agent_load_counter() staged and the enable, one doorbell. Its answer is not checked (the
 * instructions after the enable are counted, and single-stepped on the exact backend): the
 * page can only be lost to the workload's own registration, and no workload code runs
 * between the stop or the registration that preceded this start and the start itself, so
 * a start follows an answered doorbell and is answered too; the next stop finds out.
 */
void agent_pmu_start(void)
{
	agent_pmu_on = 1;
	t_on = rdtsc();
	barrier();
	if (agent_pv_mode)
		agent_pv_ring(agent_pv_start_n);
	else
		wrmsr(agent_vt.global_ctrl, agent_enabled_mask);
	/* Where the tasks' shares will start (agent_charge_published): the start's stamp. */
	start_at = t_on;
	start_win = 0;
	if (agent_pv_mode == AGENT_PV_READS && agent_per_task && !agent_sampling_mask && !agent_mux) {
		uint64_t after = rdtsc(), raw[AGENT_MAX_EVENTS];
		uint32_t flags[AGENT_MAX_EVENTS];
		uint64_t at = published_stamp(raw, flags);
		if (at && at >= t_on && at <= after)
			start_at = at;
		else
			start_win = after - t_on;
	}
}

/* ---- entry from kit_start --------------------------------------------------------------- */

int agent_wanted(int argc, char **argv)
{
	return argc >= 2 && (!strcmp(argv[1], "stat") || !strcmp(argv[1], "record"));
}

int agent_run(int argc, char **argv, int (*main_fn)(int, char **))
{
	int first = agent_parse_options(argc, argv);
	if (first < 0) {
		agent_usage();
		return 2;
	}
	if (!agent_nev) /* perf stat's core: instructions and cycles */
		agent_parse_events("0x00c0,0x003c");
	int wargc = 0;
	wargv[wargc++] = argv[0];
	for (int i = first; i < argc && wargc < MAX_WORDS; i++)
		wargv[wargc++] = argv[i];
	wargv[wargc] = 0;

	agent_begin_critical();
	agent_probe_vendor();
	agent_assign_first();
	if (agent_check_period() < 0)
		return 2;
	agent_pv_flags = agent_pv_register();
	agent_task_started[0] = 1;
	for (unsigned i = 0; i < agent_nev; i++)
		agent_task_left[0][i] = agent_period;
	agent_ctx = 0;
	if (agent_vt.ok)
		agent_program();
	if (agent_sampling_mask)
		agent_sampling_start();
	agent_end_critical();

	if (agent_mux && agent_enabled_mask)
		agent_mux_timer_start(); /* calibrates the timer (1 ms): before the START mark */
	agent_send_value("agent.pv", agent_pv_mode != AGENT_PV_OFF);
	agent_mark(AGENT_MARK_START);
	if (agent_enabled_mask)
		agent_pmu_start();
	if (agent_mux && agent_enabled_mask)
		irq_enable(); /* the rotation tick is an interrupt: main runs with them on */
	int rc = main_fn(wargc, wargv);
	if (agent_mux && agent_enabled_mask) {
		irq_disable();
		lapic_timer_stop();
	}
	agent_begin_critical();
	if (agent_enabled_mask)
		agent_stop_and_update();
	agent_end_critical();
	agent_mark(AGENT_MARK_END);
	int pv_kept = agent_pv_mode;
	agent_pv_sampling_used = agent_pv_sampling;
	agent_pv_vmm_samples_used = agent_pv_vmm_samples;
	if (agent_pv_vmm_samples)
		agent_vmm_samples = agent_pv_page5.vmm.samples;
	agent_pv_unregister();

	if (agent_sampling_mask)
		lapic_set_lvtpc(LVT_MASKED | LVT_NMI);
	agent_send_counts();
	agent_attr_report();
	if (agent_recording)
		agent_flush_samples();
	agent_print_summary(pv_kept);
	return rc;
}
