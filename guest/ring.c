/*
 * ring: a hackbench-like ring of N tasks (`ring N M`, N default 8, at most 64) passing a
 * token around M rounds (default 100 emulated, 1000 natively, where a pass under `stat -p`
 * costs ~90 us of exits): the holder hands it on with sched_wake(next) and
 * sleeps in sched_block() until it comes back, so every pass is one context switch.
 * Sends ring.tasks, ring.rounds, ring.switches and ring.total_cycles (TSC cycles of the
 * whole sched_run).
 */
#include "kit.h"
#include "sched.h"
#include "agent.h"

static unsigned ntasks = 8;
static unsigned long rounds;
static volatile unsigned holder;
static unsigned long passes;
static int ids[SCHED_MAX_TASKS];

static void member(void *arg)
{
	unsigned me = (unsigned)(uintptr_t)arg, next = (me + 1) % ntasks;
	for (unsigned long r = 0; r < rounds; r++) {
		while (holder != me)
			sched_block();
		passes++;
		holder = next;
		sched_wake((uint32_t)ids[next]);
	}
}

int main(int argc, char **argv)
{
	static char names[SCHED_MAX_TASKS][16];
	if (argc > 1)
		ntasks = strtoul(argv[1], 0, 0);
	rounds = size_arg(argc, argv, 2, 100, 1000);
	if (ntasks < 2 || ntasks > SCHED_MAX_TASKS) {
		printf("ring: 2 to %u tasks\n", SCHED_MAX_TASKS);
		return 1;
	}
	for (unsigned i = 0; i < ntasks; i++) {
		snprintf(names[i], sizeof(names[i]), "ring-%u", i);
		ids[i] = task_create(member, (void *)(uintptr_t)i, names[i]);
	}
	uint64_t t0 = rdtsc();
	sched_run();
	uint64_t cycles = rdtsc() - t0;
	struct sched_stats st;
	sched_get_stats(&st);
	agent_send_value("ring.tasks", ntasks);
	agent_send_value("ring.rounds", rounds);
	agent_send_value("ring.switches", st.switches);
	agent_send_value("ring.total_cycles", cycles);
	printf("ring: tasks=%u rounds=%lu passes=%lu switches=%lu (preempted %lu) total_cycles=%lu\n",
	       ntasks, rounds, passes, (unsigned long)st.switches, (unsigned long)st.preemptions,
	       (unsigned long)cycles);
	return passes == ntasks * rounds ? 0 : 1;
}
