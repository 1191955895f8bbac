/*
 * The perf agent's counter placement and programming: which events the PMU can count,
 * which counter each gets (perf's constraints, in round-robin order for multiplexing), and
 * the EVENTSEL / FIXED_CTR_CTRL writes and presets, with MSRs or in one PV batch.
 */
#include "agent_internal.h"


/* Events the PMU cannot count at all are unsupported for good; the others go in
 * agent_mux_order. */
static void classify_events(void)
{
	agent_mux_n = 0;
	for (unsigned i = 0; i < agent_nev; i++) {
		struct agent_event *e = &agent_evs[i];
		int a = agent_arch_index(e->code);
		e->hw = NO_COUNTER;
		if (!agent_vt.ok)
			e->why = agent_vt.no_pmu;
		else if (!agent_vt.amd && a >= 0 && !pmu_event_available(&agent_caps, a))
			e->why = "not supported";
		else if (agent_vendor_select(e) < 0)
			e->why = "no AMD encoding";
		else
			agent_mux_order[agent_mux_n++] = i;
		if (e->why)
			e->flags |= AGENT_COUNT_UNSUPPORTED;
	}
}

/* Counters for the countable events, perf's way, taken in round-robin order from
 * agent_mux_first (perf's rotation of its flexible events): the event's fixed counter when
 * it has one and it is free, else the first free GP counter. Returns how many events got none. */
unsigned agent_assign_counters(void)
{
	uint32_t gp_used = 0, fixed_used = 0;
	unsigned left = 0;
	agent_mux_counters = 0;
	for (unsigned k = 0; k < agent_mux_n; k++) {
		struct agent_event *e = &agent_evs[agent_mux_order[(agent_mux_first + k) % agent_mux_n]];
		int j = agent_fixed_index(e->code);
		e->hw = NO_COUNTER;
		if (e->flags & AGENT_COUNT_UNSUPPORTED)
			continue; /* its EVENTSEL write was refused */
		if (j >= 0 && (unsigned)j < agent_vt.fixed_counters && !(fixed_used & (1u << j))) {
			fixed_used |= 1u << j;
			e->hw = 32 + j;
			e->flags |= AGENT_COUNT_FIXED;
			e->rd_msr = e->wr_msr = MSR_IA32_FIXED_CTR0 + j;
			e->width_mask = (1ull << agent_vt.fixed_width) - 1;
		} else {
			unsigned g = 0;
			while (g < agent_vt.gp_counters && (gp_used & (1u << g)))
				g++;
			if (g >= agent_vt.gp_counters) {
				left++;
				continue;
			}
			gp_used |= 1u << g;
			e->hw = (int)g;
			e->rd_msr = agent_vt.ctr0 + agent_vt.stride * g;
			e->wr_msr = agent_vt.wr_ctr0 + agent_vt.stride * g;
			e->width_mask = (1ull << agent_vt.gp_width) - 1;
		}
		e->top_bit = (e->width_mask >> 1) + 1;
		e->pv_slot = (uint8_t)(is_gp(e) ? e->hw : 8 + (e->hw - 32));
		e->pv_counter = &agent_pv_page.counters[e->pv_slot];
		agent_mux_counters++;
	}
	return left;
}

/* First assignment. Events left without a counter are multiplexed, counting or sampling:
 * a sampling event keeps the period it has left across its turns (agent_save_period_left). */
void agent_assign_first(void)
{
	classify_events();
	if (agent_assign_counters())
		agent_mux = 1;
}

/* Whether the sampling period fits a counter of `width` bits (GP: `gp`): below its top bit,
 * and below 2^31 where GP writes sign-extend bit 31. */
static int period_fits(unsigned width, int gp)
{
	if (agent_period >= 1ull << (width - 1)) {
		printf("agent: period %lu too large for a %u-bit counter\n", (unsigned long)agent_period, width);
		return 0;
	}
	if (gp && !agent_vt.full_width_writes && agent_period >= (1ull << 31)) {
		printf("agent: period %lu needs full-width counter writes (legacy writes sign-extend "
		       "bit 31): use a period < 2^31\n", (unsigned long)agent_period);
		return 0;
	}
	return 1;
}

/* The period must fit every counter an event may get: the one it has, and, for an event
 * waiting for its turn, a GP counter (the rotation may give any event one). */
int agent_check_period(void)
{
	if (!agent_recording)
		return 0;
	for (unsigned k = 0; k < agent_mux_n; k++) {
		const struct agent_event *e = &agent_evs[agent_mux_order[k]];
		int fits = e->hw >= 32 ? period_fits(agent_vt.fixed_width, 0) : period_fits(agent_vt.gp_width, 1);
		if (!fits)
			return -1;
	}
	return 0;
}

/* USR and OS as the event's modifiers say (AMD's PERF_CTL has them at the same bits). */
static uint64_t event_select(const struct agent_event *e)
{
	uint64_t levels = (e->levels & AGENT_LEVEL_USR ? EVTSEL_USR : 0) | (e->levels & AGENT_LEVEL_OS ? EVTSEL_OS : 0);
	return e->sel | levels | EVTSEL_EN | (agent_wants_pmis() ? EVTSEL_INT : 0);
}

static uint64_t fixed_control(void)
{
	uint64_t ctrl = 0;
	for (unsigned i = 0; i < agent_nev; i++)
		if (agent_evs[i].hw >= 32) {
			const struct agent_event *e = &agent_evs[i];
			uint64_t levels = (e->levels & AGENT_LEVEL_USR ? FIXED_USR : 0) | (e->levels & AGENT_LEVEL_OS ? FIXED_OS : 0);
			ctrl |= FIXED_CTRL(e->hw - 32, levels | (agent_wants_pmis() ? FIXED_PMI : 0));
		}
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
	wrmsr(agent_vt.global_ctrl, 0);
	for (unsigned i = 0; i < agent_nev; i++) {
		struct agent_event *e = &agent_evs[i];
		if (is_gp(e) && wrmsr_safe(agent_vt.ctl0 + agent_vt.stride * e->hw, event_select(e)) < 0)
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
	b[n] = (struct pv_batch_entry){ agent_vt.global_ctrl, 0, 0 };
	owner[n++] = -1;
	for (unsigned i = 0; i < agent_nev; i++) {
		if (is_gp(&agent_evs[i])) {
			b[n] = (struct pv_batch_entry){ agent_vt.ctl0 + agent_vt.stride * agent_evs[i].hw, 0,
							event_select(&agent_evs[i]) };
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
			refuse(&agent_evs[owner[done]], "EVENTSEL write refused");
		} else if (owner[done] == -2) {
			for (unsigned i = 0; i < agent_nev; i++)
				if (agent_evs[i].hw >= 32)
					refuse(&agent_evs[i], "FIXED_CTR_CTRL write refused");
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
 * PMI leaves LVTPC unmasked; with a version-5 page the VMM takes each sample at the wrap
 * instead (the slot's event code, the current task, a chain with -g), and no PMI comes.
 * Read by the VMM at the next doorbell. */
static void setup_pv_sampling(void)
{
	struct pv_sampling *s = &agent_pv_page3.sampling;
	struct pv_vmm_sampling *v = &agent_pv_page5.vmm;
	for (unsigned i = 0; i < agent_nev; i++)
		if (agent_evs[i].hw >= 0) {
			s->reload[agent_evs[i].pv_slot] = -agent_period & agent_evs[i].width_mask;
			v->code[agent_evs[i].pv_slot] = agent_evs[i].code;
		}
	s->flags = PV_S_RELOAD | PV_S_PMI_NO_MASK;
	if (agent_pv_vmm_samples) {
		v->task = current_task_id();
		v->flags = PV_V_SAMPLE | (agent_call_graph ? PV_V_CHAIN : 0);
	}
}

/* Program the counters stopped; agent_pmu_start() enables them. */
void agent_program(void)
{
	if (agent_pv_sampling && agent_recording)
		setup_pv_sampling();
	else
		agent_pv_sampling = agent_pv_vmm_samples = 0; /* counting only: no reloads to account for */
	if (agent_pv_mode)
		program_controls_pv();
	else
		program_controls_msr();
	/* With the PV page the presets go into the start batch (agent_pmu_start applies them with
	 * the enable), laid out once: {GLOBAL_CTRL=0, counter writes, GLOBAL_CTRL=mask}; each
	 * sched-in only fills in the values, each sched-out submits the first entry alone. */
	struct pv_batch_entry *b = agent_pv_page.v1.batch;
	unsigned n = 0;
	if (agent_pv_mode)
		b[n++] = (struct pv_batch_entry){ agent_vt.global_ctrl, 0, 0 };
	agent_enabled_mask = 0;
	for (unsigned i = 0; i < agent_nev; i++) {
		struct agent_event *e = &agent_evs[i];
		if (e->hw < 0)
			continue;
		if (agent_pv_mode) {
			e->pv_entry = (uint8_t)n;
			b[n++] = (struct pv_batch_entry){ e->wr_msr, 0, 0 };
		}
		agent_load_counter(i, agent_recording ? -agent_task_left[agent_ctx][i] : 0);
		agent_enabled_mask |= 1ull << e->hw;
	}
	if (agent_pv_mode)
		b[n++] = (struct pv_batch_entry){ agent_vt.global_ctrl, 0, agent_enabled_mask };
	agent_pv_start_n = n;
	agent_sampling_mask = agent_recording ? agent_enabled_mask : 0;
}
