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

#endif
