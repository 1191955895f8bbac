/*
 * The perfvm paravirtual PMU page: one 4 KiB page per vCPU, shared by guest and VMM
 * (crates/vmm/src/vpmu/pv/mod.rs). Modelled on KVM's first paravirt interface (kvm_vcpu_para_state):
 * versioned, and "new host + old guest and new host + new guest" both work; a guest newer
 * than the host, or a size the host does not expect, is refused and the guest falls back to
 * plain MSRs.
 *
 * Registration: the guest fills guest_version and size, then writes the page's
 * guest-physical address (4 KiB aligned) with a 32-bit OUT to PERFVM_PORT_PV_REGISTER. The
 * VMM answers in the page before the OUT completes: host_version (always), and flags with
 * PV_F_ACCEPTED set if it accepted the page. Writing 0 unregisters.
 *
 * Batched programming (the hypercall): the guest writes batch_count entries {msr, value}
 * and does one OUT to PERFVM_PORT_PV_DOORBELL. The VMM applies them in order as WRMSRs,
 * sets batch_done to the number applied and batch_fault to 1 + the index of the first
 * entry that would #GP (0: none) — that entry and the rest are not applied.
 *
 * Exitless reads (version >= 2, flag PV_F_EXITLESS_READS): for each counter the VMM
 * publishes, under a seqlock, value = base + ((rdtsc() - tsc) * mult >> shift) (a 128-bit
 * product) while the counter runs (PV_C_RUNNING), or base when stopped; mult/shift is the
 * counts-per-TSC-tick rate the VMM observed. PV_C_NEEDS_EXIT means the backend cannot be
 * read without an exit (exact backend): use RDMSR. err_ppm bounds the error of an
 * extrapolated value in parts per million of the elapsed TSC ticks; it grows when the host
 * preempts the vCPU thread unevenly (the software clock counts thread time).
 *
 * Paravirtual sampling (version >= 3, flag PV_F_AUTO_RELOAD): the guest sets
 * sampling.flags and, per counter slot, reload[slot] (0: that counter follows the SDM). The
 * VMM reads them at registration and at every doorbell. A counter with a reload value is
 * reloaded by the VMM at the wrap (reload + the events counted past the wrap), its overflow
 * is acknowledged there (its GLOBAL_STATUS bit never set), and the VMM ORs its bit
 * (GLOBAL_STATUS layout) into sampling.status and bumps sampling.reloads[slot] before the
 * guest runs again. The PMI (an NMI) follows if the counter asks for one; with
 * PV_S_PMI_NO_MASK LVTPC is not masked by it. The PMI handler reads and clears status: no
 * MSR, no LAPIC access. A counter's events since it was written with value v are
 * reloads_since * (2^width - reload) + (raw - v), raw and reloads read between the same
 * two entries (an RDMSR, or the page after a doorbell).
 *
 * Stamped reads (version >= 4, same layout as version 3): a counter flagged
 * PV_C_TSC_AT_READ has `tsc` = the guest TSC at which `base` was read (within a read(2),
 * ~1 us), stopped counters too (the instant of the stop's read), where a version-3 page's
 * `tsc` is a later instant of the same exit. The counts of two stamped publishes then
 * differ by exactly what was counted between their two `tsc`s, which lets the guest share
 * one publish's advance over the tasks that ran since the previous one without an exit per
 * switch (the kit's agent: agent_task.c).
 *
 * Samples taken by the VMM (version >= 5, flag PV_F_VMM_SAMPLES): the guest sets
 * vmm.flags = PV_V_SAMPLE (| PV_V_CHAIN) and, per counter slot, vmm.code[slot] = the event
 * code its samples carry (perfvm's code: Intel's EVENTSEL[15:0]), read at registration and
 * at every doorbell; it keeps vmm.task = the task running now (0: none). At the exit where
 * the VMM reloads a sampling counter (PV_S_RELOAD) it takes the sample itself, as `record
 * -a` does: the guest's RIP at that exit (what an NMI frame would have held), the vCPU, the
 * slot's code, vmm.task, and with PV_V_CHAIN the return addresses by the frame pointers
 * (at most AGENT_CHAIN_MAX); they reach the VMM's agent samples (no message, no guest
 * buffer) and vmm.samples counts them. That counter's bit is not ORed into
 * sampling.status (its reloads[] still counts): the guest programs it without INT/PMI and
 * takes no PMI per sample.
 */
#ifndef PERFVM_PV_H
#define PERFVM_PV_H
#include <stdint.h>

#define PERFVM_PORT_PV_REGISTER 0x504
#define PERFVM_PORT_PV_DOORBELL 0x508
#define PV_HOST_VERSION 5          /* what this kit's VMM speaks */
#define PV_F_ACCEPTED       (1u << 0)
#define PV_F_EXITLESS_READS (1u << 1)
#define PV_F_AUTO_RELOAD    (1u << 2)
#define PV_F_VMM_SAMPLES    (1u << 3) /* version 5: the VMM takes the samples (vmm section) */
#define PV_S_RELOAD      (1u << 0) /* sampling.flags: reload counters with reload[] */
#define PV_S_PMI_NO_MASK (1u << 1) /* sampling.flags: PMIs leave LVTPC unmasked */
#define PV_V_SAMPLE (1u << 0)      /* vmm.flags: the VMM samples each reloaded counter, no PMI */
#define PV_V_CHAIN  (1u << 1)      /* vmm.flags: with call chains, by frame pointers */
#define PV_BATCH_MAX 32
#define PV_COUNTERS 11             /* GP 0-7, then fixed 0-2 */
#define PV_C_RUNNING    (1u << 0)
#define PV_C_NEEDS_EXIT (1u << 1)
#define PV_C_TSC_AT_READ (1u << 2) /* version 4: tsc is when base was read */

struct pv_batch_entry {
	uint32_t msr;
	uint32_t reserved;
	uint64_t value;
};

struct pv_counter {
	volatile uint32_t seq;   /* odd while the VMM updates */
	volatile uint32_t flags; /* PV_C_* */
	volatile uint64_t base;
	volatile uint64_t tsc;
	volatile uint32_t mult, shift;
	volatile uint32_t err_ppm, reserved;
};

struct pv_page_v1 {
	uint32_t guest_version;
	uint32_t host_version;
	uint32_t size;           /* sizeof the guest's struct for its version */
	uint32_t flags;
	uint32_t batch_count;
	uint32_t batch_done;
	uint32_t batch_fault;
	uint32_t reserved;
	struct pv_batch_entry batch[PV_BATCH_MAX];
};

struct pv_page_v2 {
	struct pv_page_v1 v1;
	struct pv_counter counters[PV_COUNTERS];
};

struct pv_sampling {
	uint32_t flags;                          /* PV_S_* */
	uint32_t reserved;
	uint64_t reload[PV_COUNTERS];            /* guest: value loaded at each wrap, 0 = none */
	volatile uint64_t status;                /* VMM ORs reloaded counters; guest clears */
	volatile uint64_t reloads[PV_COUNTERS];  /* VMM: reloads so far, per counter */
};

struct pv_page_v3 {
	struct pv_page_v2 v2;
	struct pv_sampling sampling;
};
/* Version 4 is version 3's layout (sizeof(struct pv_page_v3)), with PV_C_TSC_AT_READ. */

struct pv_vmm_sampling {
	uint32_t flags;                  /* PV_V_* */
	volatile uint32_t task;          /* guest: the task running now (0: none) */
	uint16_t code[PV_COUNTERS];      /* guest: each counter slot's event code */
	uint16_t reserved[5];
	volatile uint64_t samples;       /* VMM: samples it took so far */
};

struct pv_page_v5 {
	struct pv_page_v3 v3;
	struct pv_vmm_sampling vmm;
};

#endif
