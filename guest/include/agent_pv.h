/*
 * The perf agent's side of the paravirtual PMU page (perfvm_pv.h): one page for the vCPU
 * the agent and the scheduler's tasks run on (vCPU 0), registered at agent start.
 * See guest/README.md ("The perf agent", PV page).
 */
#ifndef KIT_AGENT_PV_H
#define KIT_AGENT_PV_H
#include <stdint.h>
#include "x86.h"
#include "perfvm_pv.h"

/* The page (v5, or its v3 or v2 part with an older VMM). Fill batch[0..n) and call
 * agent_pv_submit(n). */
extern struct pv_page_v5 agent_pv_page5;
#define agent_pv_page3 (agent_pv_page5.v3)
#define agent_pv_page (agent_pv_page5.v3.v2)
/* The VMM reloads sampling counters and reports overflows in agent_pv_page3.sampling
 * (PV_F_AUTO_RELOAD): the PMI handler needs no MSR. Lost with the page. */
extern int agent_pv_sampling;
/* The VMM can take the samples itself at the exits where it reloads (PV_F_VMM_SAMPLES, a
 * version-5 page); while recording the agent asks it to (agent_pv_page5.vmm) and programs
 * its counters without INT: no PMI per sample. Lost with the page. */
extern int agent_pv_vmm_samples;
/* What the page gives: nothing (not registered: MSRs), batched writes, or batched writes and
 * exitless reads of the published counters (the VMM's PV_F_EXITLESS_READS). */
enum { AGENT_PV_OFF, AGENT_PV_BATCH, AGENT_PV_READS };
extern int agent_pv_mode;

/* Offer the page (version 5, or the newest the VMM speaks down to 2): one OUT each. Returns
 * the flags the VMM answered (PV_F_ACCEPTED clear: refused, use MSRs). */
uint32_t agent_pv_register(void);
/* Take the page back (one OUT); later submits go through MSRs. */
void agent_pv_unregister(void);

/* Apply batch[0..n) with one doorbell OUT, as n WRMSRs in order. Returns the number
 * applied; fewer than n: batch[return value] would #GP (agent_pv_page.v1.batch_fault is
 * 1 + its index) and it and the rest were not applied. If the VMM did not answer (the page
 * is no longer ours: the workload registered its own), the entries are applied with
 * WRMSRs here, and agent_pv_mode drops to AGENT_PV_OFF for good. */
uint32_t agent_pv_submit(uint32_t n);
/* The WRMSR fallback alone, for a ring that went unanswered. */
uint32_t agent_pv_lost(uint32_t n);

/* Written to batch_done before each doorbell; the VMM replaces it with the writes done. */
#define AGENT_PV_NO_ANSWER 0xffffffffu
typedef uint64_t __attribute__((may_alias)) agent_pv_u64;

/* The doorbell inline, for the context-switch paths (every instruction on the way to a
 * stop is single-stepped on the exact backend): batch_count = n and batch_done =
 * AGENT_PV_NO_ANSWER side by side in one store, then the OUT. agent_pv_answered(n) tells
 * whether the VMM applied all n. */
static inline void agent_pv_ring(uint32_t n)
{
	*(volatile agent_pv_u64 *)&agent_pv_page.v1.batch_count = n | (uint64_t)AGENT_PV_NO_ANSWER << 32;
	asm volatile("outb %0, %1" : : "a"((uint8_t)1), "Nd"((uint16_t)PERFVM_PORT_PV_DOORBELL) : "memory");
}

static inline int agent_pv_answered(uint32_t n)
{
	return *(volatile uint32_t *)&agent_pv_page.v1.batch_done == n;
}

/* A consistent (base, flags) pair of one counter under its seqlock: *v = base; returns flags. */
static inline uint32_t agent_pv_snapshot(const struct pv_counter *c, uint64_t *v)
{
	/* seq and flags side by side: one 64-bit load (memory accesses are what costs here). */
	const volatile agent_pv_u64 *seq_flags = (const volatile agent_pv_u64 *)&c->seq;
	uint64_t sf, base;
	do {
		sf = *seq_flags;
		barrier();
		base = c->base;
		barrier();
	} while ((sf & 1) || (uint32_t)sf != c->seq);
	*v = base;
	return (uint32_t)(sf >> 32);
}

/* The same with the publish's TSC stamp (*tsc; PV_C_TSC_AT_READ: when base was read). */
static inline uint32_t agent_pv_snapshot_stamp(const struct pv_counter *c, uint64_t *v, uint64_t *tsc)
{
	const volatile agent_pv_u64 *seq_flags = (const volatile agent_pv_u64 *)&c->seq;
	uint64_t sf, base, t;
	do {
		sf = *seq_flags;
		barrier();
		base = c->base;
		t = c->tsc;
		barrier();
	} while ((sf & 1) || (uint32_t)sf != c->seq);
	*v = base;
	*tsc = t;
	return (uint32_t)(sf >> 32);
}

/*
 * Exitless read of a stopped counter: c = &agent_pv_page.counters[slot], slot 0-7 for
 * PMC0-7, 8-10 for FIXED_CTR0-2. The VMM republishes after every PMU MSR write and every
 * doorbell, so the value published while the counter does not count (flags neither
 * RUNNING nor NEEDS_EXIT) is exactly what RDMSR would return. Returns 0 with *v set; -1 if the counter is published
 * running or readable only with an exit: read it with RDMSR. Only in mode AGENT_PV_READS.
 */
static inline int agent_pv_read_stopped(const struct pv_counter *c, uint64_t *v)
{
	return agent_pv_snapshot(c, v) & (PV_C_RUNNING | PV_C_NEEDS_EXIT) ? -1 : 0;
}

#endif
