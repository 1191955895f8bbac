/*
 * The perf agent's per-task counting (-p): the scheduler's context-switch hooks save the
 * outgoing context's counts and load the incoming one's (with its own sampling countdown).
 * Counting with the PV page's exitless reads, a switch is one doorbell: the counters keep
 * running and the outgoing context is charged at the VMM's publish (agent_charge_published).
 */
#include "agent_internal.h"

void agent_task_switch(uint32_t next)
{
	if (agent_pv_vmm_samples)
		agent_pv_page5.vmm.task = next;
}

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

/* ---- attributing a publish's advance over the contexts that ran since the previous one ---- */

struct agent_attr agent_attr = { .count = agent_task_count };
struct agent_attr agent_attr_shadow = { .count = agent_shadow_count };
uint64_t agent_shadow_count[AGENT_MAX_IDS][AGENT_MAX_EVENTS];
uint64_t agent_pv_publish_ticks;
int agent_pv_check;

/* The counters start (or restart) at `now` (within `win` ticks after it), from agent_evs[].prev. */
void agent_attr_begin(struct agent_attr *a, uint64_t now, uint64_t win)
{
	for (unsigned k = 0; k < a->n; k++)
		a->ticks[a->ids[k]] = 0;
	a->n = 0;
	for (unsigned i = 0; i < agent_nev; i++)
		a->prev[i] = agent_evs[i].prev;
	a->start = a->t0 = now;
	a->win = win;
	a->slop = 0;
	a->used = 1;
}

/* Context `ctx` ran from a->t0 to `now`. */
void agent_attr_run(struct agent_attr *a, uint32_t ctx, uint64_t now)
{
	if (ctx >= AGENT_MAX_IDS)
		ctx = 0;
	if (!a->ticks[ctx]) {
		unsigned k = 0;
		while (k < a->n && a->ids[k] != ctx)
			k++;
		if (k == a->n)
			a->ids[a->n++] = (uint8_t)ctx;
	}
	a->ticks[ctx] += (now - a->t0) | !a->ticks[ctx]; /* a context that ran has ticks, at least 1 */
	a->t0 = now;
}

/* x * y / z for y <= z (the quotient fits), z > 0. */
static uint64_t mul_div(uint64_t x, uint64_t y, uint64_t z)
{
	uint64_t hi, lo, q, r;
	asm("mulq %3" : "=a"(lo), "=d"(hi) : "a"(x), "rm"(y));
	asm("divq %4" : "=a"(q), "=d"(r) : "a"(lo), "d"(hi), "rm"(z));
	(void)r;
	return q;
}

/*
 * A publish: the counters read `raw` at a doorbell rung between rdtsc `before` and `after`,
 * the current context (agent_ctx) ran up to `before` (agent_attr_run). Share every
 * counter's advance over the interval's contexts by their ticks and start the next
 * interval at `before`.
 */
void agent_attr_settle(struct agent_attr *a, const uint64_t *raw, uint64_t before, uint64_t after)
{
	uint32_t cur = agent_ctx < AGENT_MAX_IDS ? agent_ctx : 0;
	uint64_t t = 0;
	for (unsigned k = 0; k < a->n; k++)
		t += a->ticks[a->ids[k]];
	int shared = a->n > 1 || (a->n == 1 && a->ids[0] != cur);
	for (unsigned i = 0; i < agent_nev; i++) {
		const struct agent_event *e = &agent_evs[i];
		if (e->hw < 0)
			continue;
		uint64_t d = (raw[i] - a->prev[i]) & e->width_mask, left = d;
		a->prev[i] = raw[i];
		if (a == &agent_attr) { /* the live one: the counters' own bookkeeping */
			agent_evs[i].prev = raw[i];
			agent_evs[i].total += d;
		}
		if (shared && t) {
			for (unsigned k = 0; k < a->n; k++) {
				uint32_t id = a->ids[k];
				if (id == cur)
					continue;
				uint64_t s = mul_div(d, a->ticks[id], t);
				a->count[id][i] += s;
				left -= s;
			}
			/* n + 1: the shares' rounding down (the running context takes the rest) and D's
			 * (a count published from a clock that runs in ns) */
			a->bound[i] += (t > d ? t - d : d - t) + a->win + (after - before) + a->slop + a->n + 1;
		}
		a->count[cur][i] += left;
	}
	if (shared)
		a->settles++;
	for (unsigned k = 0; k < a->n; k++)
		a->ticks[a->ids[k]] = 0;
	a->n = 0;
	a->start = a->t0 = before;
	a->win = after - before;
	a->slop = 0;
}

/* The bound per event as values and on the console, and with --pv-check the shadow's
 * counts beside the exact ones (console: "agent: pv check ..."). */
void agent_attr_report(void)
{
	char key[48];
	if (!agent_attr.used)
		return;
	agent_send_value("agent.attr_settles", agent_attr.settles);
	for (unsigned i = 0; i < agent_nev; i++) {
		snprintf(key, sizeof(key), "agent.attr_bound.%u", i);
		agent_send_value(key, agent_attr.bound[i]);
	}
	console_lock();
	for (unsigned i = 0; i < agent_nev; i++)
		if (agent_evs[i].hw >= 0)
			printf("agent: per-task 0x%04x shared out at %lu publishes, bound %lu\n", agent_evs[i].code,
			       (unsigned long)agent_attr.settles, (unsigned long)agent_attr.bound[i]);
	if (agent_pv_check)
		for (unsigned i = 0; i < agent_nev; i++)
			for (uint32_t id = 0; id <= agent_max_id && agent_evs[i].hw >= 0; id++)
				printf("agent: pv check 0x%04x task %u exact %lu shared %lu bound %lu settles %lu unstamped %lu\n",
				       agent_evs[i].code, id, (unsigned long)agent_task_count[id][i],
				       (unsigned long)agent_shadow_count[id][i], (unsigned long)agent_attr_shadow.bound[i],
				       (unsigned long)agent_attr_shadow.settles, (unsigned long)agent_attr_shadow.unstamped);
	console_unlock();
}
