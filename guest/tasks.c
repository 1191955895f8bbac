/*
 * tasks: two tasks, "task-a" and "task-b", run an ftest-like loop (xorshift, multiply-
 * rotate and table mixing, ~200 instructions an iteration) under the preemptive scheduler;
 * task-a does twice task-b's iterations. `tasks N` runs N times as long; a bare `tasks`
 * is N = 1 emulated (~7.7*10^5 instructions) and N = 7000 natively (~5*10^9, ~1 s).
 *
 * Under `tasks stat -p -e ... --` the agent reports each task's counts and the whole run:
 * task-a ~ 2 x task-b, and task-a + task-b + "outside tasks" (main, sched_run's loop) = the
 * whole (task 0 entry); see README.md.
 */
#include "kit.h"
#include "sched.h"

#define NOINLINE __attribute__((noinline))

struct work {
	unsigned long iterations;
	uint32_t seed, checksum;
};

unsigned mix_rounds = 6, shift_rounds = 2, mul_rounds = 4;

static NOINLINE uint32_t shift_mix(uint32_t x)
{
	for (unsigned i = 0; i < shift_rounds; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
	}
	return x;
}

static NOINLINE uint32_t mul_mix(uint32_t x)
{
	for (unsigned i = 0; i < mul_rounds; i++) {
		x *= 0x9e3779b1u;
		x = (x << 15) | (x >> 17);
		x += i;
	}
	return x;
}

static NOINLINE uint32_t table_mix(uint32_t *table, uint32_t x)
{
	uint32_t acc = x;
	for (unsigned i = 0; i < mix_rounds; i++) {
		uint32_t t = table[(acc + i) & 15];
		acc = (acc ^ t) + (t >> 3);
		table[i & 15] ^= acc & 0xff;
	}
	return acc;
}

static void worker(void *arg)
{
	struct work *w = arg;
	uint32_t table[16];
	uint32_t x = w->seed, sum = 0x811c9dc5u;
	for (unsigned i = 0; i < 16; i++)
		table[i] = x = shift_mix(x + i);
	for (unsigned long i = 0; i < w->iterations; i++) {
		uint32_t a = shift_mix(x);
		uint32_t b = mul_mix(a ^ x);
		x = table_mix(table, a + b);
		sum = (sum ^ a) * 0x01000193u;
		sum += b ^ (uint32_t)i;
	}
	w->checksum = sum;
}

int main(int argc, char **argv)
{
	unsigned long scale = size_arg(argc, argv, 1, 1, 7000);
	static struct work a, b;
	a.iterations = 3000 * scale;
	b.iterations = 1500 * scale;
	a.seed = 1;
	b.seed = 2;
	task_create(worker, &a, "task-a");
	task_create(worker, &b, "task-b");
	sched_run();
	struct sched_stats st;
	sched_get_stats(&st);
	printf("tasks: task-a iterations=%lu checksum=%08x, task-b iterations=%lu checksum=%08x\n",
	       a.iterations, a.checksum, b.iterations, b.checksum);
	printf("tasks: switches=%lu preemptions=%lu ticks=%lu\n", (unsigned long)st.switches,
	       (unsigned long)st.preemptions, (unsigned long)st.ticks);
	return 0;
}
