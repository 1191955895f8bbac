/*
 * The perf agent's multiplexing (`stat` or `record` with more events than counters): on a
 * periodic tick, stop and charge, give the counters to the next events in round-robin
 * order, program them and start, as perf rotates its flexible events (a sampling event
 * resumes with the period it had left).
 */
#include "agent_internal.h"

#define AGENT_TIMER_VECTOR 0xed
#define MUX_US_FULL_SPEED 4000 /* perf's default multiplexing interval */
#define MUX_US_EMULATED 20000  /* a rotation costs ~0.5 ms of emulated CPL0 code: keep it ~2% */

/* Multiplexing: the countable events in -e order, scheduled from agent_mux_first;
 * agent_counters.c places them in that order. */
int agent_mux;
unsigned agent_mux_order[AGENT_MAX_EVENTS], agent_mux_n, agent_mux_first, agent_mux_counters;
uint64_t agent_mux_rotations;
uint32_t agent_mux_us;

/* One rotation: stop and charge (and the time), hand the counters to the events after the
 * first one that had one, program them stopped, start. Interrupts off. */
static void mux_rotate(void)
{
	agent_begin_critical();
	agent_stop_and_update();
	if (agent_sampling_mask)
		agent_save_period_left(agent_ctx);
	agent_mux_first = (agent_mux_first + 1) % agent_mux_n;
	agent_assign_counters();
	agent_program();
	agent_pmu_start();
	agent_mux_rotations++;
	agent_end_critical();
}

/* The multiplexing tick: the agent's own timer, or the scheduler's while it owns the LAPIC
 * timer (sched_tick). Counting stopped (between a sched-out and a sched-in): nothing to do. */
void agent_tick(void)
{
	if (agent_mux && agent_pmu_on)
		mux_rotate();
}

static void agent_timer_irq(struct trap_frame *f)
{
	(void)f;
	agent_tick();
}

/* The periodic rotation timer (vector AGENT_TIMER_VECTOR). sched_run puts it back when it
 * has used the LAPIC timer for its own slices. */
void agent_mux_timer_start(void)
{
	agent_mux_us = kit_full_speed ? MUX_US_FULL_SPEED : MUX_US_EMULATED;
	uint64_t count = lapic_timer_counts_per_ms() * agent_mux_us / 1000;
	if (count > 0xffffffffu)
		count = 0xffffffffu;
	lapic_enable();
	set_irq_handler(AGENT_TIMER_VECTOR, agent_timer_irq);
	lapic_timer_start(AGENT_TIMER_VECTOR, count ? (uint32_t)count : 1, 1);
}
