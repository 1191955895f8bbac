/*
 * ftest: the workload of the Intel vPMU paper's profiling experiment. main loops calling
 * foo, bar, qux and random() -> random_r(), with retired-instruction shares tuned to about
 * qux 37%, foo 15%, bar 15%, main 12%, random 10%, random_r 10% (measure with
 * `make ftest-profile`; the numbers are in README.md). `ftest N` runs N units of 4500
 * iterations (~10^6 instructions each); a bare `ftest` runs 1 unit emulated or
 * single-stepped (exact backend), 10 counted by blocks natively or in hardware (kit_size),
 * and FTEST_NATIVE_UNITS natively (~1.5 x 10^10 instructions, ~1.3 s at host speed: a
 * thousand samples at record's native 1 kHz).
 *
 * The same source builds as a host program (FTEST_HOST) so callgrind can count it.
 */
#ifndef FTEST_HOST
#include "kit.h"
#define FTEST_DEFAULT_UNITS kit_size(1, FTEST_NATIVE_UNITS)
#else
#define FTEST_DEFAULT_UNITS 1 /* the emulated size, which the shares below are measured at */
#endif
#define FTEST_NATIVE_UNITS 15000
#include <stdint.h>

#define NOINLINE __attribute__((noinline))
/* The generator's state sits in .data beside the other globals, in the guest as in the host
 * build. Left in .bss it began a page after .data's start in the guest image (the kit's
 * sections are page-aligned), so the lock word and the state array aliased the table qux
 * stores to modulo 4 KiB: loads waited on unrelated stores (4K aliasing), and the guest ran
 * ftest ~10% slower than its host build on an Intel host (bench rate). */
#define PACKED_DATA __attribute__((section(".data")))

/* Round counts live in writable globals so gcc cannot fold or unroll the loops. */
unsigned foo_rounds = 2, bar_rounds = 4, qux_rounds = 6;
unsigned long base_iterations = 4500;

/* glibc's TYPE_3 additive feedback generator: x[i] = x[i-3] + x[i-31], output >> 1. */
#define DEG 31
#define SEP 3
struct random_data {
	int32_t *fptr, *rptr, *state, *end_ptr;
	int rand_type;
};
static int32_t rand_state[DEG] PACKED_DATA;
static struct random_data unsafe_state = {
	&rand_state[SEP], &rand_state[0], rand_state, &rand_state[DEG], 3,
};
static int random_lock PACKED_DATA;
unsigned long random_waiters PACKED_DATA;

NOINLINE int random_r(struct random_data *buf, int32_t *result)
{
	if (buf == 0 || result == 0)
		return -1;
	int32_t *state = buf->state;
	if (buf->rand_type == 0) { /* TYPE_0: plain LCG, as in glibc */
		int32_t val = ((state[0] * 1103515245U) + 12345U) & 0x7fffffff;
		state[0] = val;
		*result = val;
		return 0;
	}
	int32_t *fptr = buf->fptr, *rptr = buf->rptr, *end_ptr = buf->end_ptr;
	uint32_t val = *fptr += (uint32_t)*rptr;
	*result = val >> 1; /* drop the least random bit */
	++fptr;
	if (fptr >= end_ptr) {
		fptr = state;
		++rptr;
	} else {
		++rptr;
		if (rptr >= end_ptr)
			rptr = state;
	}
	buf->fptr = fptr;
	buf->rptr = rptr;
	return 0;
}

/* Like glibc's random(): take the generator lock (lock cmpxchg), step the shared state,
 * release the lock and check for waiters (glibc would futex-wake them; we have none). */
NOINLINE long random(void)
{
	int32_t retval;
	int unlocked = 0;
	while (!__atomic_compare_exchange_n(&random_lock, &unlocked, 1, 0, __ATOMIC_ACQUIRE,
					    __ATOMIC_RELAXED))
		unlocked = 0;
	random_r(&unsafe_state, &retval);
	if (__atomic_exchange_n(&random_lock, 0, __ATOMIC_RELEASE) > 1)
		random_waiters++;
	return retval;
}

/* glibc's srandom_r: Park-Miller fill, then discard 10*DEG outputs. */
static NOINLINE void srandom_seed(uint32_t seed)
{
	int32_t word = seed ? (int32_t)seed : 1;
	rand_state[0] = word;
	for (int i = 1; i < DEG; i++) {
		long hi = word / 127773, lo = word % 127773;
		word = (int32_t)(16807 * lo - 2836 * hi);
		if (word < 0)
			word += 2147483647;
		rand_state[i] = word;
	}
	unsafe_state.fptr = &rand_state[SEP];
	unsafe_state.rptr = &rand_state[0];
	for (int i = 0; i < 10 * DEG; i++) {
		int32_t discard;
		random_r(&unsafe_state, &discard);
	}
}

/* xorshift rounds */
NOINLINE uint32_t foo(uint32_t x)
{
	for (unsigned i = 0; i < foo_rounds; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
	}
	return x ^ (x >> 9);
}

/* multiply-rotate hash rounds */
NOINLINE uint32_t bar(uint32_t x)
{
	for (unsigned i = 0; i < bar_rounds; i++) {
		x *= 0x9e3779b1u;
		x = (x << 15) | (x >> 17);
		x += i;
	}
	return x + (x >> 11);
}

/* the hot spot: a small table-driven mixing loop */
static uint32_t qux_table[16] = {
	0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
	0x082efa98, 0xec4e6c89, 0x452821e6, 0x38d01377, 0xbe5466cf, 0x34e90c6c,
	0xc0ac29b7, 0xc97c50dd, 0x3f84d5b5, 0xb5470917,
};

NOINLINE uint32_t qux(uint32_t x)
{
	uint32_t acc = x;
	for (unsigned i = 0; i < qux_rounds; i++) {
		uint32_t t = qux_table[(acc + i) & 15];
		acc = (acc ^ t) + (t >> 3);
		qux_table[i & 15] ^= acc & 0xff;
	}
	return acc;
}

/* `v` as 20 decimal digits, zero-padded: the same instructions whatever its value, so the
 * exact backend's count of ftest does not depend on how long the run took (with %lu, a slow
 * run's one more TSC digit retired 26 more instructions, 5 more branches). */
static void fixed_decimal(char out[21], uint64_t v)
{
	for (int i = 19; i >= 0; i--) {
		out[i] = (char)('0' + v % 10);
		v /= 10;
	}
	out[20] = 0;
}

int main(int argc, char **argv)
{
	unsigned long n = base_iterations;
	n *= argc > 1 ? strtoul(argv[1], 0, 0) : FTEST_DEFAULT_UNITS;
	srandom_seed(1);
	uint64_t t0 = rdtsc();
	uint32_t sum = 0x811c9dc5u;
	for (unsigned long i = 0; i < n; i++) {
		uint32_t r = (uint32_t)random();
		uint32_t a = foo(r);
		uint32_t b = bar(r ^ a);
		uint32_t c = qux(a + b);
		/* main's own share: FNV-style folding of the results */
		sum = (sum ^ a) * 0x01000193u;
		sum = (sum ^ (b >> 3)) * 0x01000193u;
		sum += c ^ (uint32_t)i;
		sum ^= (sum >> 11) + (r & 0xffff);
	}
	/* The loop's TSC ticks: the bench compares the guest with the host build (tools/). */
	char ticks[21];
	fixed_decimal(ticks, rdtsc() - t0);
	printf("ftest: iterations=%lu checksum=%08x tsc=%s\n", n, sum, ticks);
	return 0;
}
