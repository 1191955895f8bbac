/* portio: the cost of one port-IO exit as the guest sees it, by the TSC: the median of
 * 1001 timed writes to an unclaimed port (0x2f0, dropped by the VMM) and of 1001 reads of
 * the UART line-status register (0x3fd). `portio count` keeps a cycles counter running
 * meanwhile, `portio count pebs` also makes it a PEBS counter (seed 001: the cheapest exit
 * with the vPMU off, on, counting, and with PEBS). */
#include "kit.h"
#include "pmu.h"

#define N 1001
#define UNCLAIMED_PORT 0x2f0
#define LSR_PORT 0x3fd

static uint64_t deltas[N];

/* Shell sort: O(n^1.3) compares keeps this fast under emulation, unlike insertion sort. */
static void sort(uint64_t *a, int n)
{
	for (int gap = n / 2; gap > 0; gap = gap == 2 ? 1 : gap * 5 / 11) {
		for (int i = gap; i < n; i++) {
			uint64_t v = a[i];
			int j = i;
			for (; j >= gap && a[j - gap] > v; j -= gap)
				a[j] = a[j - gap];
			a[j] = v;
		}
	}
}

static void show(const char *what, uint64_t cycles)
{
	if (tsc_khz)
		printf("portio: %smedian %lu cycles, %lu ns (tsc_khz %lu)\n", what, cycles,
		       cycles * 1000000 / tsc_khz, tsc_khz);
	else
		printf("portio: %smedian %lu cycles (tsc_khz unknown)\n", what, cycles);
}

/* A DS save area (IA-32e layout) with a small PEBS buffer; the period is long enough that
 * no record is written during the measurement: only PEBS being enabled matters. */
static uint64_t ds[16] __attribute__((aligned(64)));
static uint8_t pebs_buffer[4096] __attribute__((aligned(64)));

static void enable_pebs(void)
{
	ds[4] = (uint64_t)(uintptr_t)pebs_buffer;                      /* PEBS buffer base */
	ds[5] = ds[4];                                                  /* PEBS index */
	ds[6] = ds[4] + sizeof(pebs_buffer);                            /* absolute maximum */
	ds[7] = ds[6];                                                  /* interrupt threshold */
	wrmsr(MSR_IA32_DS_AREA, (uint64_t)(uintptr_t)ds);
	wrmsr(MSR_IA32_PEBS_ENABLE, 1);
	printf("portio: PEBS enabled on PMC0\n");
}

/* Keep GP counter 0 counting cycles (or instructions) through the measurement. */
static void start_counting(int pebs)
{
	struct pmu_caps caps;
	pmu_probe(&caps);
	enum arch_event ev = pmu_event_available(&caps, EV_CYCLES) ? EV_CYCLES : EV_INSTRUCTIONS;
	if (caps.version < 2 || !pmu_event_available(&caps, ev)) {
		printf("portio: no counter available, measuring without one\n");
		return;
	}
	wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(ev, EVTSEL_OS | EVTSEL_EN));
	if (pebs && (caps.perf_capabilities & (1ull << 7)))
		enable_pebs();
	wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, 1);
	printf("portio: counting %s on PMC0\n", arch_events[ev].name);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "count"))
		start_counting(argc > 2 && !strcmp(argv[2], "pebs"));
	for (int i = 0; i < N; i++) {
		uint64_t t0 = rdtsc();
		outb(UNCLAIMED_PORT, 0);
		deltas[i] = rdtsc() - t0;
	}
	sort(deltas, N);
	show("", deltas[N / 2]);

	for (int i = 0; i < N; i++) {
		uint64_t t0 = rdtsc();
		(void)inb(LSR_PORT);
		deltas[i] = rdtsc() - t0;
	}
	sort(deltas, N);
	show("inb 0x3fd ", deltas[N / 2]);
	return 0;
}
