/*
 * The perf agent's sampling (`record`): the PMI handler (MSRs, or the PV page's reported
 * overflows with paravirtual sampling), the reload of wrapped counters, and the samples
 * message (AGENT_MSG_SAMPLES2) with its call chains (agent_chain.c).
 */
#include "agent_internal.h"

#define SAMPLE_BYTES (48 * 1024) /* the samples message's records; the VMM takes up to 64 KiB */
#define SAMPLE_MAX_REC (sizeof(struct agent_sample2) + AGENT_CHAIN_MAX * sizeof(uint64_t))

/* Samples (AGENT_MSG_SAMPLES2): the message is built in place and sent when it may not
 * hold one more record (from the PMI) or at the end. */
static uint8_t sample_msg[sizeof(struct agent_msg_header) + sizeof(struct agent_samples2) + SAMPLE_BYTES]
	__attribute__((aligned(16)));
static uint32_t sample_used; /* record bytes in sample_msg */
static volatile int flushing;
uint64_t agent_samples_total, agent_late_drops, agent_nr_pmis, agent_sample_msgs, agent_nr_deferred;
uint64_t agent_vmm_samples;

static struct agent_samples2 *sample_buf(void)
{
	return (struct agent_samples2 *)(sample_msg + sizeof(struct agent_msg_header));
}

static void add_sample(const struct trap_frame *f, uint64_t tsc, uint32_t task, uint16_t code)
{
	struct agent_samples2 *s = sample_buf();
	if (flushing) { /* the final flush is using the buffer */
		agent_late_drops++;
		return;
	}
	struct agent_sample2 *x = (struct agent_sample2 *)((uint8_t *)(s + 1) + sample_used);
	x->rip = f->rip;
	x->tsc = tsc;
	x->task = task;
	x->event = code;
	x->nr = (uint8_t)(agent_call_graph ? agent_callchain(f, x->chain, AGENT_CHAIN_MAX) : 0);
	x->vcpu = (uint8_t)smp_processor_id();
	sample_used += sizeof(*x) + x->nr * sizeof(uint64_t);
	s->n++;
	agent_samples_total++;
	if (sample_used + SAMPLE_MAX_REC > SAMPLE_BYTES) { /* full: send from NMI context and reuse */
		agent_send_msg(sample_msg, AGENT_MSG_SAMPLES2, sizeof(*s) + sample_used);
		agent_sample_msgs++;
		s->n = 0;
		s->dropped = 0;
		sample_used = 0;
	}
}

/* The PMI with paravirtual sampling: the VMM reloaded the counters and left their bits in
 * the page (taken atomically: it writes there between two entries of this vCPU). */
static int pv_pmi(struct trap_frame *f)
{
	uint64_t mine = __atomic_exchange_n(&agent_pv_page3.sampling.status, 0, __ATOMIC_RELAXED) &
			agent_sampling_mask;
	if (!mine)
		return 0;
	uint64_t tsc = rdtsc();
	uint32_t task = current_task_id();
	agent_nr_pmis++;
	for (unsigned i = 0; i < agent_nev; i++)
		if (agent_evs[i].hw >= 0 && (mine & (1ull << agent_evs[i].hw)))
			add_sample(f, tsc, task, agent_evs[i].code);
	return 1;
}

/* The PMI (an NMI, via the kit's exception hook for vector 2). */
static int agent_nmi(struct trap_frame *f)
{
	if (!agent_sampling_mask)
		return 0;
	if (agent_pv_sampling)
		return pv_pmi(f);
	wrmsr(agent_vt.global_ctrl, 0);
	uint64_t tsc = rdtsc();
	uint64_t status = rdmsr(agent_vt.global_status);
	uint64_t mine = status & agent_sampling_mask;
	if (mine) {
		uint32_t task = current_task_id();
		agent_nr_pmis++;
		for (unsigned i = 0; i < agent_nev; i++) {
			if (agent_evs[i].hw < 0 || !(mine & (1ull << agent_evs[i].hw)))
				continue;
			add_sample(f, tsc, task, agent_evs[i].code);
			if (agent_busy) {
				agent_deferred |= 1ull << agent_evs[i].hw;
				agent_nr_deferred++;
			} else {
				agent_update(i);
				agent_reload_if_wrapped(i);
			}
		}
	}
	if (status)
		wrmsr(agent_vt.status_clear, status);
	if (agent_vt.pmi_masks_lvtpc)
		lapic_set_lvtpc(LVT_NMI); /* the PMI masked it */
	if (agent_pmu_on)
		wrmsr(agent_vt.global_ctrl, agent_enabled_mask);
	return mine != 0; /* else: not ours, let nmi_handler see it */
}

void agent_flush_samples(void)
{
	struct agent_samples2 *s = sample_buf();
	flushing = 1;
	barrier();
	agent_send_msg(sample_msg, AGENT_MSG_SAMPLES2, sizeof(*s) + sample_used);
	agent_sample_msgs++;
	s->n = 0;
	s->dropped = 0;
	sample_used = 0;
	barrier();
	flushing = 0;
}

/* Name the buffer to the VMM (it reads the unsent samples if it stops the run) and take
 * the PMI: LVTPC in NMI mode, the handler on the kit's vector-2 hook. */
void agent_sampling_start(void)
{
	struct agent_buffer b = { (uint64_t)(uintptr_t)sample_msg, AGENT_MSG_SAMPLES2, 0 };
	agent_send(AGENT_MSG_BUFFER, &b, sizeof(b));
	lapic_enable();
	set_exception_hook(NMI_VECTOR, agent_nmi);
	lapic_set_lvtpc(LVT_NMI);
}
