/* The perf agent's results: the COUNTS message (agent_msg.c sends it) and the serial summary. */
#include "agent_internal.h"

/* COUNTS: one entry per event for the whole run, plus one per event per task with -p. */
static uint8_t counts_msg[sizeof(struct agent_msg_header) + sizeof(struct agent_counts) +
			  AGENT_MAX_IDS * AGENT_MAX_EVENTS * sizeof(struct agent_count)]
	__attribute__((aligned(16)));

void agent_send_counts(void)
{
	struct agent_counts *c = (struct agent_counts *)(counts_msg + sizeof(struct agent_msg_header));
	unsigned n = 0;
	for (unsigned i = 0; i < agent_nev; i++)
		c->c[n++] = (struct agent_count){ agent_evs[i].code, agent_evs[i].flags, 0, agent_evs[i].total,
						  agent_evs[i].enabled, agent_evs[i].running };
	if (agent_per_task)
		for (uint32_t id = 1; id <= agent_max_id; id++)
			for (unsigned i = 0; i < agent_nev; i++)
				c->c[n++] = (struct agent_count){ agent_evs[i].code, agent_evs[i].flags, id, agent_task_count[id][i],
								  agent_task_enabled[id][i], agent_task_running[id][i] };
	c->n = n;
	c->entry_size = sizeof(struct agent_count);
	agent_send_msg(counts_msg, AGENT_MSG_COUNTS, sizeof(*c) + n * sizeof(struct agent_count));
}

void agent_print_summary(int pv_kept)
{
	console_lock();
	if (!(agent_pv_flags & PV_F_ACCEPTED))
		printf("agent: msr programming (pv refused)\n");
	else if (!pv_kept)
		printf("agent: pv page v%u lost (the workload took it): msr programming from then on\n",
		       agent_pv_page.v1.guest_version);
	else
		printf("agent: pv page v%u (%s%s)\n", agent_pv_page.v1.guest_version,
		       agent_pv_flags & PV_F_EXITLESS_READS ? "exitless reads" : "batched writes, reads by RDMSR",
		       agent_pv_vmm_samples_used ? ", samples taken by the VMM" :
		       agent_pv_sampling_used ? ", paravirtual sampling" : "");
	if (agent_mux)
		printf("agent: multiplexing %u events on %u counters, %lu rotations (every %u us)\n", agent_mux_n,
		       agent_mux_counters, (unsigned long)agent_mux_rotations, agent_mux_us);
	for (unsigned i = 0; i < agent_nev; i++) {
		const struct agent_event *e = &agent_evs[i];
		if (e->flags & AGENT_COUNT_UNSUPPORTED)
			printf("agent: 0x%04x %s <not supported> (%s)\n", e->code, agent_event_name(e->code), e->why);
		else if (agent_mux)
			printf("agent: 0x%04x %s %lu (running %lu%% of %lu ticks)\n", e->code, agent_event_name(e->code),
			       (unsigned long)e->total,
			       (unsigned long)(e->enabled ? e->running * 100 / e->enabled : 0), (unsigned long)e->enabled);
		else
			printf("agent: 0x%04x %s %lu (%s %d)\n", e->code, agent_event_name(e->code),
			       (unsigned long)e->total, is_gp(e) ? "pmc" : "fixed", is_gp(e) ? e->hw : e->hw - 32);
	}
	if (agent_per_task) {
		for (uint32_t id = 1; id <= agent_max_id; id++)
			for (unsigned i = 0; i < agent_nev; i++)
				if (!(agent_evs[i].flags & AGENT_COUNT_UNSUPPORTED))
					printf("agent: task %u %s 0x%04x %lu\n", id, agent_task_name(id), agent_evs[i].code,
					       (unsigned long)agent_task_count[id][i]);
		for (unsigned i = 0; i < agent_nev; i++)
			if (!(agent_evs[i].flags & AGENT_COUNT_UNSUPPORTED))
				printf("agent: outside tasks 0x%04x %lu\n", agent_evs[i].code, (unsigned long)agent_task_count[0][i]);
	}
	if (agent_recording && agent_pv_vmm_samples_used)
		printf("agent: samples %lu taken by the VMM at the wraps (no PMI), period %lu\n",
		       (unsigned long)agent_vmm_samples, (unsigned long)agent_period);
	else if (agent_recording)
		printf("agent: samples %lu in %lu messages, pmis %lu (%lu in the agent's critical sections), "
		       "dropped %lu, period %lu\n", (unsigned long)agent_samples_total, (unsigned long)agent_sample_msgs,
		       (unsigned long)agent_nr_pmis, (unsigned long)agent_nr_deferred, (unsigned long)agent_late_drops,
		       (unsigned long)agent_period);
	console_unlock();
}
