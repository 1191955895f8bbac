/*
 * pmuops: guest PMU operations in the pattern Linux perf's x86 driver issues them, for
 * `perfvm bench pmu-ops` (seed 000, "basic operations latency"). Each round, over every GP
 * counter: GLOBAL_CTRL off, EVENTSEL EN off/on, FIXED_CTR_CTRL off/on, counter read,
 * GLOBAL_CTRL on; then a sampling phase that takes PMIs. Every vCPU runs the rounds (for
 * scaling with vCPUs); vCPU 0 also samples. The VMM times each operation on its side.
 * Intel's architectural PMU or AMD's PerfMonV2, as CPUID says (the same operations; AMD has
 * no fixed counters, and its LAPIC leaves LVTPC unmasked on a PMI).
 */
#include "kit.h"
#include "pmu.h"

/* The vendor's registers for the operations above. */
static struct {
	int amd;
	unsigned counters, fixed;
	uint32_t global_ctrl, global_status, status_clear, ctl0, ctr0, stride;
	uint64_t cycles; /* event select of core cycles, OS only */
} v;

static struct pmu_caps caps;
static volatile unsigned pmis;
/* Set while main samples: a PMI that lands after main's final GLOBAL_CTRL=0 (its overflow
 * was already pending) must not restart the counters, or sampling would go on for the rest
 * of the run (measured: 20,000 PMIs instead of 20, through the final printf's exits). */
static volatile int sampling;
static uint64_t handler_cycles, handler_max;

static uint32_t ctl(unsigned i) { return v.ctl0 + v.stride * i; }
static uint32_t ctr(unsigned i) { return v.ctr0 + v.stride * i; }

/* Which PMU the guest has: 0 if none that counts cycles. */
static int probe(void)
{
	struct amd_pmu_caps amd;
	amd_pmu_probe(&amd);
	if (amd.amd && amd.perfmon_v2) {
		v.amd = 1;
		v.counters = amd.counters;
		v.global_ctrl = MSR_AMD64_PERF_CNTR_GLOBAL_CTL;
		v.global_status = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS;
		v.status_clear = MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR;
		v.ctl0 = amd_ctl_msr(&amd, 0);
		v.ctr0 = amd_ctr_msr(&amd, 0);
		v.stride = amd_ctl_msr(&amd, 1) - v.ctl0;
		v.cycles = amd_evtsel(EV_CYCLES, EVTSEL_OS);
		return 1;
	}
	pmu_probe(&caps);
	if (caps.version < 2 || !pmu_event_available(&caps, EV_CYCLES))
		return 0;
	v.counters = caps.gp_counters;
	v.fixed = caps.fixed_counters;
	v.global_ctrl = MSR_IA32_PERF_GLOBAL_CTRL;
	v.global_status = MSR_IA32_PERF_GLOBAL_STATUS;
	v.status_clear = MSR_IA32_PERF_GLOBAL_OVF_CTRL;
	v.ctl0 = MSR_IA32_PERFEVTSEL0;
	v.ctr0 = MSR_IA32_PMC0;
	v.stride = 1;
	v.cycles = evtsel(EV_CYCLES, EVTSEL_OS);
	return 1;
}

static void reset(void)
{
	wrmsr(v.global_ctrl, 0);
	for (unsigned i = 0; i < v.counters; i++) {
		wrmsr(ctl(i), 0);
		wrmsr(ctr(i), 0);
	}
	if (v.fixed)
		wrmsr(MSR_IA32_FIXED_CTR_CTRL, 0);
	wrmsr(v.status_clear, rdmsr(v.global_status));
}

void nmi_handler(struct trap_frame *f)
{
	uint64_t t0 = rdtsc();
	/* perf's PMI handler: stop, ack, reload, unmask, restart. */
	wrmsr(v.global_ctrl, 0);
	uint64_t status = rdmsr(v.global_status);
	wrmsr(ctr(0), v.amd ? (-200000ull & ((1ull << 48) - 1)) : (uint32_t)-200000);
	wrmsr(v.status_clear, status);
	if (!v.amd)
		lapic_set_lvtpc(LVT_NMI);
	if (sampling)
		wrmsr(v.global_ctrl, 1);
	pmis++;
	uint64_t dt = rdtsc() - t0;
	handler_cycles += dt;
	if (dt > handler_max)
		handler_max = dt;
}

static unsigned rounds = 200;
static volatile unsigned aps_done;

/* The programming rounds, on whichever vCPU calls it. */
static void program_rounds(void)
{
	uint64_t mask = (1ull << v.counters) - 1;
	if (v.fixed)
		mask |= GLOBAL_FIXED(0);
	reset();
	for (unsigned r = 0; r < rounds; r++) {
		wrmsr(v.global_ctrl, 0);
		for (unsigned i = 0; i < v.counters; i++) {
			wrmsr(ctl(i), v.cycles);
			wrmsr(ctl(i), v.cycles | EVTSEL_EN);
		}
		if (v.fixed) {
			wrmsr(MSR_IA32_FIXED_CTR_CTRL, 0);
			wrmsr(MSR_IA32_FIXED_CTR_CTRL, FIXED_CTRL(0, FIXED_OS));
		}
		for (unsigned i = 0; i < v.counters; i++)
			(void)rdmsr(ctr(i));
		wrmsr(v.global_ctrl, mask);
	}
	wrmsr(v.global_ctrl, 0);
}

void ap_main(unsigned idx)
{
	probe(); /* each vCPU finds the same PMU: it may start before vCPU 0 has looked */
	program_rounds();
	__atomic_add_fetch(&aps_done, 1, __ATOMIC_SEQ_CST);
	cpu_park();
}

int main(int argc, char **argv)
{
	rounds = argc > 1 ? strtoul(argv[1], 0, 0) : 200;
	unsigned want_pmis = argc > 2 ? strtoul(argv[2], 0, 0) : 50;
	if (!probe()) {
		printf("pmuops: needs a PMU that counts cycles\n");
		return 1;
	}
	program_rounds();
	unsigned aps = boot_info ? boot_info->nr_vcpus - 1 : 0;
	for (unsigned long spin = 0; spin < 100000000ul && aps_done < aps; spin++)
		pause();
	/* Sampling: PMIs every ~200k cycles until enough arrived (bounded). */
	reset();
	lapic_enable();
	lapic_set_lvtpc(LVT_NMI);
	wrmsr(ctr(0), v.amd ? (-200000ull & ((1ull << 48) - 1)) : (uint32_t)-200000);
	wrmsr(ctl(0), v.cycles | EVTSEL_EN | EVTSEL_INT);
	sampling = 1;
	wrmsr(v.global_ctrl, 1);
	for (unsigned long spin = 0, n = spin_iterations(20000000ul); spin < n && pmis < want_pmis; spin++)
		barrier();
	sampling = 0;
	wrmsr(v.global_ctrl, 0);
	printf("pmuops: %s PMU, %u rounds, %u PMIs\n", v.amd ? "AMD" : "Intel", rounds, pmis);
	/* The guest's view of a PMI: its whole handler, including the exits it causes. */
	if (pmis && tsc_khz)
		printf("pmuops: pmi handler mean_ns=%llu max_ns=%llu\n",
		       (unsigned long long)(handler_cycles * 1000000 / tsc_khz / pmis),
		       (unsigned long long)(handler_max * 1000000 / tsc_khz));
	return 0;
}
