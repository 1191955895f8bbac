/* Intel architectural performance monitoring (v2) registers and helpers for guests. */
#ifndef KIT_PMU_H
#define KIT_PMU_H
#include <stdint.h>
#include "x86.h"

#define MSR_IA32_PMC0               0x0c1
#define MSR_IA32_PERFEVTSEL0        0x186
#define MSR_IA32_PERF_CAPABILITIES  0x345
#define MSR_IA32_FIXED_CTR0         0x309
#define MSR_IA32_FIXED_CTR_CTRL     0x38d
#define MSR_IA32_PERF_GLOBAL_STATUS 0x38e
#define MSR_IA32_PERF_GLOBAL_CTRL   0x38f
#define MSR_IA32_PERF_GLOBAL_OVF_CTRL 0x390
#define MSR_IA32_A_PMC0             0x4c1
#define MSR_IA32_PEBS_ENABLE        0x3f1
#define MSR_IA32_DS_AREA            0x600

#define EVTSEL_USR   (1ull << 16)
#define EVTSEL_OS    (1ull << 17)
#define EVTSEL_EDGE  (1ull << 18)
#define EVTSEL_INT   (1ull << 20)
#define EVTSEL_ANY   (1ull << 21)
#define EVTSEL_EN    (1ull << 22)
#define EVTSEL_INV   (1ull << 23)
#define EVTSEL_CMASK(n) ((uint64_t)(n) << 24)

#define FIXED_OS  0x1
#define FIXED_USR 0x2
#define FIXED_ANY 0x4
#define FIXED_PMI 0x8
#define FIXED_CTRL(j, bits) ((uint64_t)(bits) << (4 * (j)))
#define GLOBAL_FIXED(j) (1ull << (32 + (j)))

#define PERF_CAP_FW_WRITE (1ull << 13)
#define CPUID_1_ECX_PDCM (1u << 15)

#define LVT_MASKED (1u << 16)
#define LVT_NMI    (4u << 8)

/* Architectural events in CPUID.0AH:EBX bit order. */
enum arch_event { EV_CYCLES, EV_INSTRUCTIONS, EV_REF_CYCLES, EV_LLC_REFS, EV_LLC_MISSES, EV_BRANCHES, EV_BRANCH_MISSES, NR_ARCH_EVENTS };

struct arch_event_desc {
	const char *name;
	uint8_t select, umask;
};
extern const struct arch_event_desc arch_events[NR_ARCH_EVENTS];

struct pmu_caps {
	unsigned version, gp_counters, gp_width, fixed_counters, fixed_width, ebx_len;
	uint32_t unavailable; /* CPUID.0AH:EBX */
	uint64_t perf_capabilities;
};

/* Read CPUID leaf 0xA (and PERF_CAPABILITIES when CPUID.1:ECX.PDCM says it exists). */
void pmu_probe(struct pmu_caps *caps);
int pmu_event_available(const struct pmu_caps *caps, enum arch_event ev);
static inline uint64_t evtsel(enum arch_event ev, uint64_t flags)
{
	return arch_events[ev].select | (uint64_t)arch_events[ev].umask << 8 | flags;
}
/* Stop every counter and clear every counter, selector and status bit. */
void pmu_reset(const struct pmu_caps *caps);

/*
 * AMD64 performance monitoring (AMD APM Vol. 2 "Performance Monitoring Counters"; Linux
 * names): the legacy K7 MSRs of counters 0-3, PerfCtrExtCore's interleaved CTL/CTR pairs of
 * up to six counters, PerfMonV2's global control and status. Counters are 48 bits wide.
 */
#define MSR_K7_PERF_CTL0                      0xc0010000 /* PERF_CTLi = + i, i < 4 */
#define MSR_K7_PERF_CTR0                      0xc0010004 /* PERF_CTRi = + i, i < 4 */
#define MSR_F15H_PERF_CTL0                    0xc0010200
#define MSR_F15H_PERF_CTR0                    0xc0010201
#define MSR_F15H_PERF_CTL(i)                  (MSR_F15H_PERF_CTL0 + 2u * (i))
#define MSR_F15H_PERF_CTR(i)                  (MSR_F15H_PERF_CTR0 + 2u * (i))
#define MSR_AMD64_PERF_CNTR_GLOBAL_STATUS     0xc0000300
#define MSR_AMD64_PERF_CNTR_GLOBAL_CTL        0xc0000301
#define MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR 0xc0000302
#define MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_SET 0xc0000303

#define AMD_LEGACY_COUNTERS 4
#define AMD_MAX_COUNTERS    6
#define AMD_COUNTER_MASK    ((1ull << 48) - 1)

/* PERF_CTL: USR/OS/EDGE/INT/EN/INV/CMASK as EVTSEL_*; event select 7:0 and 35:32. */
#define AMD_EVTSEL_GUEST_ONLY (1ull << 40)
#define AMD_EVTSEL_HOST_ONLY  (1ull << 41)
/* Reserved for a guest: 19, 21, 63:36 (HostOnly/GuestOnly included; KVM's reserved_bits). */
#define AMD_EVTSEL_RESERVED   0xfffffff000280000ull

#define CPUID_80000001_ECX_PERFCTR_CORE (1u << 23)
#define CPUID_80000022_EAX_PERFMON_V2   (1u << 0)

/* The PERF_CTL value of a 12-bit event select and unit mask, with `flags`. */
static inline uint64_t amd_encode(uint16_t event, uint8_t umask, uint64_t flags)
{
	return (event & 0xffull) | (uint64_t)umask << 8 | (uint64_t)(event >> 8 & 0xf) << 32 | flags;
}
/* Linux's AMD (Zen) encoding of an architectural event: cycles 0x76, instructions 0xc0,
 * branches 0xc2, ... (arch_events' names). */
uint64_t amd_evtsel(enum arch_event ev, uint64_t flags);

struct amd_pmu_caps {
	int amd;           /* CPUID vendor AuthenticAMD */
	int perfctr_core;  /* CPUID 0x80000001:ECX[23], the interleaved MSRs */
	int perfmon_v2;    /* CPUID 0x80000022:EAX[0], global control and status */
	unsigned counters; /* 0x80000022:EBX[3:0] with PerfMonV2, else 6 or 4 (as Linux) */
	uint32_t ext_max;  /* CPUID 0x80000000:EAX */
};
/* Read the AMD PMU's CPUID (through the kit's cpuid(), so also natively). */
void amd_pmu_probe(struct amd_pmu_caps *caps);
/* The event selector / counter MSR of counter i: the interleaved one with PerfCtrExtCore. */
uint32_t amd_ctl_msr(const struct amd_pmu_caps *caps, unsigned i);
uint32_t amd_ctr_msr(const struct amd_pmu_caps *caps, unsigned i);
/* Stop every counter (GLOBAL_CTL = 0 with PerfMonV2) and clear every counter, selector and
 * status bit. Leaves GLOBAL_CTL 0. */
void amd_pmu_reset(const struct amd_pmu_caps *caps);

/* Write `mask` to the global enable MSR `global_ctrl` and RDPMC `counter` right after (one
 * instruction between), then disable everything; returns what RDPMC read. */
uint64_t rdpmc_after_enable(uint32_t global_ctrl, uint64_t mask, uint32_t counter);

/* Enable `mask` in the global enable MSR `global_ctrl`, run a known loop of `n` iterations,
 * disable: PMU_LOOP_INSNS(n) instructions counted (mov, n x (dec, jnz), mov, xor, xor and
 * the disabling wrmsr, which retires while the counters count; the enabling one does not),
 * n branches. */
void pmu_measure_loop(uint32_t global_ctrl, uint64_t mask, uint32_t n);
#define PMU_LOOP_INSNS(n) (2ull * (n) + 5)

#endif
