/*
 * The perf agent's per-task counting (-p): the scheduler's context-switch hooks save the
 * outgoing context's counts and load the incoming one's (with its own sampling countdown).
 * Counting with the PV page's exitless reads, a switch is one doorbell: the counters keep
 * running and the outgoing context is charged at the VMM's publish (agent_charge_published).
 */
#include "agent_internal.h"

/* The last sched-out charged at a publish and left the counters running. */
static int running_across;

void agent_sched_out(uint32_t prev)
{
	if (!agent_per_task || !agent_enabled_mask)
		return;
	agent_begin_critical();
	running_across = agent_charge_published();
	if (!running_across)
		agent_stop_and_update();
	agent_end_critical();
	if (agent_sampling_mask && prev < AGENT_MAX_IDS)
		agent_save_period_left(prev);
}

void agent_sched_in(uint32_t next)
{
	if (next > agent_max_id && next < AGENT_MAX_IDS)
		agent_max_id = next;
	if (!agent_per_task || !agent_enabled_mask)
		return;
	agent_begin_critical();
	agent_ctx = next < AGENT_MAX_IDS ? next : 0;
	if (!agent_task_started[agent_ctx]) {
		agent_task_started[agent_ctx] = 1;
		for (unsigned i = 0; i < agent_nev; i++)
			agent_task_left[agent_ctx][i] = agent_period;
	}
	if (running_across && agent_pmu_on) {
		running_across = 0;
		agent_end_critical();
		return;
	}
	running_across = 0;
	if (agent_pv_mode && !agent_sampling_mask) {
		/* Counting: every counter restarts from 0, which the start batch holds already. */
		for (unsigned i = 0; i < agent_nev; i++)
			agent_evs[i].prev = 0;
	} else {
		for (unsigned i = 0; i < agent_nev; i++)
			if (agent_evs[i].hw >= 0)
				agent_load_counter(i, agent_sampling_mask ? -agent_task_left[agent_ctx][i] : 0);
	}
	agent_pmu_start();
	agent_end_critical();
}
