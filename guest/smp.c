/* smp: every vCPU checks in; vCPU 0 waits (bounded) until all nr_vcpus have. */
#include "kit.h"

static unsigned checked_in;

static void check_in(unsigned idx)
{
	printf("vcpu %u up (apic id %u)\n", idx, lapic_id());
	__atomic_fetch_add(&checked_in, 1, __ATOMIC_RELEASE);
}

void ap_main(unsigned idx)
{
	check_in(idx);
	cpu_park();
}

/* Wait up to ~5 s by the TSC; without tsc_khz, a fixed number of polls instead. */
static int wait_for_all(void)
{
	uint64_t start = rdtsc(), limit = tsc_khz * 5000;
	for (unsigned long polls = 0;; polls++) {
		if (__atomic_load_n(&checked_in, __ATOMIC_ACQUIRE) >= nr_vcpus)
			return 1;
		if (limit ? rdtsc() - start > limit : polls > 2000000)
			return 0;
		pause();
	}
}

int main(int argc, char **argv)
{
	check_in(smp_processor_id());
	if (!wait_for_all()) {
		printf("smp: only %u of %u vcpus up\n", checked_in, nr_vcpus);
		return 1;
	}
	printf("all %u vcpus up\n", nr_vcpus);
	return 0;
}
