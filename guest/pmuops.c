/*
 * pmuops: guest PMU operations in the pattern Linux perf's x86 driver issues them, for
 * `perfvm bench pmu-ops` (seed 000, "basic operations latency"). Each round, over every GP
 * counter: GLOBAL_CTRL off, EVENTSEL EN off/on, FIXED_CTR_CTRL off/on, counter read,
 * GLOBAL_CTRL on; then a sampling phase that takes PMIs. Every vCPU runs the rounds (for
 * scaling with vCPUs); vCPU 0 also samples. The VMM times each operation on its side.
 */
#include "kit.h"
#include "pmu.h"

static struct pmu_caps caps;
static volatile unsigned pmis;
static uint64_t handler_cycles, handler_max;

void nmi_handler(struct trap_frame *f)
{
	uint64_t t0 = rdtsc();
	/* perf's PMI handler: stop, ack, reload, unmask, restart. */
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	uint64_t status = rdmsr(MSR_IA32_PERF_GLOBAL_STATUS);
	wrmsr(MSR_IA32_PMC0, (uint32_t)-200000);
	wrmsr(MSR_IA32_PERF_GLOBAL_OVF_CTRL, status);
	lapic_set_lvtpc(LVT_NMI);
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
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
	uint64_t sel = evtsel(EV_CYCLES, EVTSEL_OS);
	uint64_t mask = (1ull << caps.gp_counters) - 1;
	if (caps.fixed_counters)
		mask |= GLOBAL_FIXED(0);
	pmu_reset(&caps);
	for (unsigned r = 0; r < rounds; r++) {
		wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
		for (unsigned i = 0; i < caps.gp_counters; i++) {
			wrmsr(MSR_IA32_PERFEVTSEL0 + i, sel);
			wrmsr(MSR_IA32_PERFEVTSEL0 + i, sel | EVTSEL_EN);
		}
		if (caps.fixed_counters) {
			wrmsr(MSR_IA32_FIXED_CTR_CTRL, 0);
			wrmsr(MSR_IA32_FIXED_CTR_CTRL, FIXED_CTRL(0, FIXED_OS));
		}
		for (unsigned i = 0; i < caps.gp_counters; i++)
			(void)rdmsr(MSR_IA32_PMC0 + i);
		wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, mask);
	}
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
}

void ap_main(unsigned idx)
{
	program_rounds();
	__atomic_add_fetch(&aps_done, 1, __ATOMIC_SEQ_CST);
	cpu_park();
}

int main(int argc, char **argv)
{
	rounds = argc > 1 ? strtoul(argv[1], 0, 0) : 200;
	unsigned want_pmis = argc > 2 ? strtoul(argv[2], 0, 0) : 50;
	pmu_probe(&caps);
	if (caps.version < 2 || !pmu_event_available(&caps, EV_CYCLES)) {
		printf("pmuops: needs a PMU that counts cycles\n");
		return 1;
	}
	uint64_t sel = evtsel(EV_CYCLES, EVTSEL_OS);
	program_rounds();
	unsigned aps = boot_info ? boot_info->nr_vcpus - 1 : 0;
	for (unsigned long spin = 0; spin < 100000000ul && aps_done < aps; spin++)
		pause();
	/* Sampling: PMIs every ~200k cycles until enough arrived (bounded). */
	pmu_reset(&caps);
	lapic_enable();
	lapic_set_lvtpc(LVT_NMI);
	wrmsr(MSR_IA32_PMC0, (uint32_t)-200000);
	wrmsr(MSR_IA32_PERFEVTSEL0, sel | EVTSEL_EN | EVTSEL_INT);
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
	for (unsigned long spin = 0, n = spin_iterations(20000000ul); spin < n && pmis < want_pmis; spin++)
		barrier();
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 0);
	printf("pmuops: %u rounds, %u PMIs\n", rounds, pmis);
	/* The guest's view of a PMI: its whole handler, including the exits it causes. */
	if (pmis && tsc_khz)
		printf("pmuops: pmi handler mean_ns=%llu max_ns=%llu\n",
		       (unsigned long long)(handler_cycles * 1000000 / tsc_khz / pmis),
		       (unsigned long long)(handler_max * 1000000 / tsc_khz));
	return 0;
}
