/*
 * What the perf agent's files share (private to kit/agent*.c; the kit's interface is
 * include/agent.h). agent.c is the core: the run, the counter bookkeeping, starting and
 * stopping the counters and the critical sections; the others do one job each:
 *
 *   agent_options.c   the `stat`/`record` options and -e event lists
 *   agent_vendor.c    the vendor table (Intel architectural PMU or AMD PerfMonV2), event codes
 *   agent_counters.c  placing events on counters and programming them (MSRs or PV batch)
 *   agent_mux.c       multiplexing: rotating the events over the counters on a timer tick
 *   agent_sample.c    sampling: the PMI handler and the samples message
 *   agent_task.c      per-task counting: the scheduler's switch hooks
 *   agent_report.c    the COUNTS message and the serial summary
 */
#ifndef KIT_AGENT_INTERNAL_H
#define KIT_AGENT_INTERNAL_H
#include "kit.h"
#include "pmu.h"
#include "agent.h"
#include "agent_pv.h"
#include "sched.h"

#define AGENT_MAX_EVENTS 16
#define AGENT_MAX_IDS (SCHED_MAX_TASKS + 1)
#define NO_COUNTER (-1)

/* Privilege levels an event counts at: user mode (USR, CPL > 0), the kernel (OS, CPL 0). */
#define AGENT_LEVEL_USR 1u
#define AGENT_LEVEL_OS  2u

struct agent_event {
	uint16_t code;       /* perfvm's code: Intel's EVENTSEL[15:0] (what counts and samples carry) */
	uint8_t has_sel;     /* the host gave the vendor's select (`code=select`) */
	uint32_t given_sel;  /* that select, in the vendor's -e form (AMD: 0xUUEEE) */
	uint64_t sel;        /* event select bits of EVENTSEL / PERF_CTL (no flags) */
	uint16_t flags;      /* AGENT_COUNT_* */
	uint8_t levels;      /* AGENT_LEVEL_*: the privilege levels it counts at (`:u`, `:k`) */
	int hw;              /* GLOBAL_CTRL bit: 0-7 = PMCi, 32-34 = FIXED_CTRj; NO_COUNTER */
	const char *why;     /* why it is not counted */
	uint32_t rd_msr, wr_msr;
	uint64_t width_mask, top_bit;
	const struct pv_counter *pv_counter; /* the counter in the PV page */
	uint8_t pv_slot;     /* its slot in the PV page: 0-7 PMC, 8-10 fixed */
	uint8_t pv_entry;    /* its write in the PV start batch (agent_pv_start_n) */
	uint64_t seen_reloads; /* paravirtual sampling: the VMM's reloads at prev */
	uint64_t prev;       /* raw counter value at the last update */
	uint64_t total;      /* everything counted: the task 0 entry */
	uint64_t enabled, running; /* TSC ticks counting was on / the event was on a counter */
};

/* ---- agent.c: the run's state and the counters' bookkeeping ---- */

extern struct agent_event agent_evs[AGENT_MAX_EVENTS];
extern unsigned agent_nev;
extern int agent_recording, agent_per_task, agent_call_graph;
extern uint64_t agent_period;
extern uint64_t agent_enabled_mask, agent_sampling_mask;
extern volatile int agent_pmu_on;        /* GLOBAL_CTRL should hold agent_enabled_mask */
extern volatile int agent_busy;          /* in a critical section of the agent */
extern volatile uint64_t agent_deferred; /* counters a PMI left to the critical section */
extern uint32_t agent_ctx;               /* context the counts are charged to (-p) */
extern uint32_t agent_max_id;
extern uint64_t agent_task_count[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
extern uint64_t agent_task_left[AGENT_MAX_IDS][AGENT_MAX_EVENTS]; /* sampling: period left */
extern uint64_t agent_task_enabled[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
extern uint64_t agent_task_running[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
extern uint8_t agent_task_started[AGENT_MAX_IDS];
extern uint32_t agent_pv_flags;          /* what the VMM answered to the PV page */
extern uint32_t agent_pv_start_n;        /* PV: batch = {GLOBAL_CTRL=0, counters, GLOBAL_CTRL=mask} */
extern int agent_pv_sampling_used;       /* the run sampled with the VMM's reloads */
extern int agent_pv_vmm_samples_used;    /* ... and the VMM took the samples (PV v5) */

static inline int is_gp(const struct agent_event *e) { return e->hw >= 0 && e->hw < 32; }
/* Sampling counters raise a PMI at the wrap, unless the VMM takes their samples (PV v5). */
static inline int agent_wants_pmis(void) { return agent_recording && !agent_pv_vmm_samples; }

void agent_charge(unsigned i, uint64_t raw);
/* Read counter i and charge its advance. */
static inline void agent_update(unsigned i)
{
	agent_charge(i, rdmsr(agent_evs[i].rd_msr));
}
void agent_load_counter(unsigned i, uint64_t v);
void agent_reload_if_wrapped(unsigned i);
void agent_save_period_left(uint32_t ctx);
static inline void agent_begin_critical(void)
{
	agent_busy = 1;
	barrier();
}
void agent_end_critical(void);
void agent_stop_and_update(void);
int agent_charge_published(void); /* -p, PV reads: charge at one publish, counters left running */
void agent_pmu_start(void);

/* ---- agent_task.c: attributing published counts over the contexts that ran ---- */

/*
 * Per-task counting without an exit per switch (-p, PV reads, counting): between two
 * publishes the contexts that ran are remembered with their TSC ticks, and at the publish
 * the counters' exact advance D since the previous one is shared out in proportion to
 * those ticks (the rounding to the context running at the publish). The run's totals stay
 * exact; a context's share is off by at most what the thread did not run at the TSC's
 * rate in the interval, |T - D| for T ticks, plus the two doorbells' windows (the VMM's
 * read lies somewhere inside each): that sum, over the intervals with more than one
 * context, is the published bound (agent.attr_bound.<event>), with a count per context for
 * rounding. With --pv-check the shadow's intervals also hold the switches' own publishes,
 * where the exact charges split the counts: each adds a count's rounding and, where the
 * VMM could not stamp its read, its doorbell's window to the shadow's bound (`slop`), since
 * the exact counts are only that exact.
 */
struct agent_attr {
	uint64_t (*count)[AGENT_MAX_EVENTS]; /* per context: what it was charged */
	uint64_t prev[AGENT_MAX_EVENTS];     /* raw value at the last publish */
	uint64_t ticks[AGENT_MAX_IDS];       /* TSC ticks each context ran since that publish */
	uint8_t ids[AGENT_MAX_IDS];          /* the contexts with ticks, in order */
	unsigned n;
	uint64_t start;                      /* rdtsc just before the last publish's doorbell */
	uint64_t win;                        /* that doorbell's window, rdtsc to rdtsc */
	uint64_t t0;                         /* rdtsc when the current context's ticks began */
	uint64_t bound[AGENT_MAX_EVENTS];    /* the published bound, per event */
	uint64_t settles;                    /* publishes shared out over two or more contexts */
	uint64_t slop;                       /* --pv-check: the switch publishes' part of the bound */
	uint64_t unstamped;                  /* --pv-check: switch publishes without a stamp */
	int used;                            /* some switch went through it */
};
extern struct agent_attr agent_attr, agent_attr_shadow;
extern uint64_t agent_pv_publish_ticks;   /* the most TSC ticks between two publishes */
extern int agent_pv_check;                /* --pv-check: exact charge at every switch and the shadow */
extern uint64_t agent_shadow_count[AGENT_MAX_IDS][AGENT_MAX_EVENTS];

void agent_attr_begin(struct agent_attr *a, uint64_t now, uint64_t win);
void agent_attr_run(struct agent_attr *a, uint32_t ctx, uint64_t now);
void agent_attr_settle(struct agent_attr *a, const uint64_t *raw, uint64_t before, uint64_t after);
void agent_attr_report(void);

/* ---- agent_vendor.c ---- */

/* The vendor's PMU registers and counters: Intel's architectural PMU or AMD's PerfMonV2. */
struct agent_vendor {
	int amd;
	int ok;            /* a PMU the agent drives (Intel version >= 2; AMD with PerfMonV2) */
	const char *no_pmu;
	unsigned gp_counters, gp_width, fixed_counters, fixed_width;
	int full_width_writes; /* counter writes take every bit (else sign-extended from 31) */
	uint32_t global_ctrl, global_status, status_clear;
	uint32_t ctl0, ctr0, wr_ctr0, stride; /* counter g: ctl0 + stride * g, ... */
	int pmi_masks_lvtpc;
};
extern struct agent_vendor agent_vt;
extern struct pmu_caps agent_caps; /* Intel's (CPUID.0AH), for the events it marks unavailable */

void agent_probe_vendor(void);
int agent_arch_index(uint16_t code);
int agent_fixed_index(uint16_t code);
int agent_vendor_select(struct agent_event *e);
const char *agent_event_name(uint16_t code);

/* ---- agent_options.c ---- */

void agent_usage(void);
int agent_parse_events(const char *list);
int agent_parse_options(int argc, char **argv);

/* ---- agent_counters.c ---- */

unsigned agent_assign_counters(void);
void agent_assign_first(void);
int agent_check_period(void);
void agent_program(void);

/* ---- agent_mux.c ---- */

/* Multiplexing: the countable events in -e order, scheduled from agent_mux_first. */
extern int agent_mux;
extern unsigned agent_mux_order[AGENT_MAX_EVENTS], agent_mux_n, agent_mux_first, agent_mux_counters;
extern uint64_t agent_mux_rotations;
extern uint32_t agent_mux_us;

void agent_mux_timer_start(void);

/* ---- agent_sample.c ---- */

extern uint64_t agent_samples_total, agent_late_drops, agent_nr_pmis, agent_sample_msgs, agent_nr_deferred;
extern uint64_t agent_vmm_samples; /* the VMM's samples at the run's end (PV v5) */

void agent_sampling_start(void);
void agent_flush_samples(void);

/* ---- agent_report.c ---- */

void agent_send_counts(void);
void agent_print_summary(int pv_kept);

#endif
