/*
 * One conformance body for every vendor's PMU (pmu_conf.c), over a table of the vendor's
 * MSRs and checks, as kvm-unit-tests' x86/pmu.c runs one body over per-vendor MSR bases.
 * pmu_arch.c fills it in for Intel, pmu_amd.c for AMD.
 */
#ifndef PMU_CONF_H
#define PMU_CONF_H
#include "pmu.h"

#define LOOP_N 1000u
/* What pmu_measure_loop() retires (pmu.h). */
#define LOOP_INSNS(n) PMU_LOOP_INSNS(n)
/* A counter preset: 48 bits on AMD; Intel's legacy PMC write takes the low 32 and
 * sign-extends, the same value for the small negative presets here. */
#define PRESET_MASK ((1ull << 48) - 1)

struct pmu_vendor {
	const char *name;            /* the guest, on its first line */
	uint32_t global_ctrl;        /* the global enables */
	const char *global_name;     /* as the vendor's manual names it */
	uint32_t global_status;
	uint32_t status_clr;         /* writing a bit clears that status bit */
	const char *status_clr_name;
	uint32_t status_set;         /* writing a bit sets it; 0: none (Intel v2) */
	uint32_t fixed_ctr_ctrl;     /* Intel's fixed counters; 0: the vendor has none */
	uint32_t fixed_ctr0;
	int pmi_masks_lvtpc;         /* Intel's LAPIC masks LVTPC on a PMI, AMD's does not */
	const char *uncountable;     /* why an event that does not count is skipped */
	uint32_t (*ctl)(unsigned i); /* the event selector of GP counter i */
	uint32_t (*ctr)(unsigned i); /* GP counter i */
	uint64_t (*evtsel)(enum arch_event ev, uint64_t flags);
	void (*reset)(void);         /* every counter stopped and cleared, status clear */
	/* Read the PMU's CPUID and fill in `conf`; 0: no such PMU here (the reason said). */
	int (*probe)(void);
	/* The vendor's own checks, each at its place in the body; NULL: none. */
	void (*identity)(void);      /* first, before anything is written */
	void (*aliases)(void);       /* after the counting checks */
	void (*gating)(enum arch_event ev); /* at the end of the gating checks */
	void (*registers)(void);     /* write widths, reserved bits, absent MSRs */
	void (*rdpmc)(void);         /* after the common RDPMC checks, counter 0 programmed */
	void (*last)(void);
};

/* What the body and the vendor's checks share. */
struct pmu_conf {
	int exact;                   /* the VMM's CPUID leaf says the exact backend counts */
	unsigned gp_counters, fixed_counters;
	uint64_t all_gp;             /* (1 << gp_counters) - 1 */
	int countable[NR_ARCH_EVENTS];
};
extern struct pmu_conf conf;

/* Run the whole suite for `v`; returns report_summary(). */
int conformance_run(const struct pmu_vendor *v);
/* A count of `ev` over pmu_measure_loop(LOOP_N): exact on the exact backend, else a range. */
void conf_check_count(const char *what, enum arch_event ev, uint64_t got);
/* The event the generic checks count with: instructions where they count, else cycles. */
int conf_generic_event(enum arch_event *ev);

#endif
