/* portio: the cost of one port-IO exit as the guest sees it, by the TSC: the median of
 * 1001 timed writes to an unclaimed port (0x2f0, dropped by the VMM) and of 1001 reads of
 * the UART line-status register (0x3fd). */
#include "kit.h"

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

int main(int argc, char **argv)
{
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
