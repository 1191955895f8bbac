/* rate: the instruction rate of a dec/jnz loop (2 instructions per iteration), timed with
 * the TSC. `rate N` runs N iterations and prints
 *   rate: loop instructions=<2N> tsc=<ticks> tsc_khz=<kHz>
 * `rate N msr` then also times a filtered-MSR exit (needs the vPMU, whose MSRs the VMM
 * takes from KVM's MSR filter): the median of 101 RDMSRs of IA32_PERF_GLOBAL_CTRL,
 *   rate: rdmsr median_tsc=<ticks> ns=<ns>
 * `rate N lock` then also times N locked read-modify-writes (lock xadd on an aligned word,
 * 3 instructions per iteration), the loop the bench runs on a host thread beside it,
 *   rate: lock instructions=<3N> tsc=<ticks> tsc_khz=<kHz>
 * `rate N gaps` then also reads the TSC N times in a row: any step between two reads over
 * 1 us is time the guest lost to something outside it (an exit, the host's interrupts); the
 * steps under 1 ms (a host preemption is longer) are summed, and their median taken,
 *   rate: gaps n=<count> tsc=<sum of steps> median_tsc=<median step> tsc_khz=<kHz>
 * The bench's host column runs the identical loop (crates/perfvm/src/bench/rate.rs).
 * Interrupts stay off: nothing but the loop runs. */
#include "kit.h"
#include "pmu.h"

#define SAMPLES 101

static uint64_t rdmsr_median(void)
{
	uint64_t d[SAMPLES];
	for (int i = 0; i < SAMPLES; i++) {
		uint64_t t0 = rdtsc();
		(void)rdmsr(MSR_IA32_PERF_GLOBAL_CTRL);
		uint64_t v = rdtsc() - t0;
		/* Insertion sort as we go: 101 samples stay cheap even emulated. */
		int j = i;
		for (; j > 0 && d[j - 1] > v; j--)
			d[j] = d[j - 1];
		d[j] = v;
	}
	return d[SAMPLES / 2];
}

static uint64_t lock_word __attribute__((aligned(64)));

static uint64_t locked_loop(uint64_t n)
{
	uint64_t one = 1, t0 = rdtsc();
	asm volatile("1: lock xaddq %1, %2\n\tdec %0\n\tjnz 1b" : "+r"(n), "+r"(one), "+m"(lock_word) : : "cc");
	return rdtsc() - t0;
}

/* Steps of the TSC between 1 us and 1 ms, in 1 us buckets. */
#define GAP_BUCKETS 1000
static uint32_t gap_hist[GAP_BUCKETS];

static void gaps(uint64_t n)
{
	uint64_t us = tsc_khz ? tsc_khz / 1000 : 2500, count = 0, sum = 0, prev = rdtsc();
	for (uint64_t i = 0; i < n; i++) {
		uint64_t t = rdtsc(), d = t - prev;
		prev = t;
		if (d > us && d < GAP_BUCKETS * us) {
			gap_hist[d / us]++;
			count++;
			sum += d;
		}
	}
	uint64_t seen = 0, median = 0;
	for (int b = 0; b < GAP_BUCKETS && count; b++) {
		seen += gap_hist[b];
		if (2 * seen >= count) {
			median = b * us + us / 2;
			break;
		}
	}
	printf("rate: gaps n=%lu tsc=%lu median_tsc=%lu tsc_khz=%lu\n", count, sum, median, tsc_khz);
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoul(argv[1], 0, 0) : 1000000;
	if (n == 0)
		n = 1; /* dec would wrap and loop 2^64 times */
	uint64_t iterations = n;
	uint64_t t0 = rdtsc();
	asm volatile("1: dec %0\n\tjnz 1b" : "+r"(n) : : "cc");
	uint64_t ticks = rdtsc() - t0;
	printf("rate: loop instructions=%lu tsc=%lu tsc_khz=%lu\n", 2 * iterations, ticks, tsc_khz);
	if (has_arg(argc, argv, "lock")) {
		uint64_t t = locked_loop(iterations);
		printf("rate: lock instructions=%lu tsc=%lu tsc_khz=%lu\n", 3 * iterations, t, tsc_khz);
	}
	if (has_arg(argc, argv, "gaps"))
		gaps(iterations);
	if (has_arg(argc, argv, "msr")) {
		uint64_t m = rdmsr_median();
		printf("rate: rdmsr median_tsc=%lu ns=%lu\n", m, tsc_khz ? m * 1000000 / tsc_khz : 0);
	}
	return 0;
}
