/*
 * ctxsw: the context-switch benchmark (Intel vPMU proposal, table 5). Two tasks yield to
 * each other N times each (`ctxsw N`; default 200 emulated, 5000 natively: each switch
 * under `stat -p` costs ~90 us of exits natively, so ~1 s); the scheduler times every switch with
 * rdtsc: the agent's sched-out part (agent_sched_out), its sched-in part (agent_sched_in)
 * and the whole switch (from the scheduling decision to the end of the sched-in part).
 * Compare `ctxsw stat -e 0x003c,0x00c0 -p -- 200` (per-task counting: the save/restore MSR
 * traffic at every switch) with `ctxsw 200` (the hooks return at once).
 */
#include "kit.h"
#include "sched.h"
#include "agent.h"

static unsigned long rounds;

static void pingpong(void *arg)
{
	(void)arg;
	for (unsigned long i = 0; i < rounds; i++)
		sched_yield();
}

int main(int argc, char **argv)
{
	rounds = size_arg(argc, argv, 1, 200, 5000);
	task_create(pingpong, 0, "ping");
	task_create(pingpong, 0, "pong");
	sched_run();
	struct sched_stats st;
	sched_get_stats(&st);
	agent_send_value("ctxsw.switches", st.switches);
	agent_send_value("ctxsw.total_cycles", st.total_cycles);
	agent_send_value("ctxsw.sched_out_cycles", st.out_cycles);
	agent_send_value("ctxsw.sched_in_cycles", st.in_cycles);
	uint64_t n = st.switches ? st.switches : 1;
	printf("ctxsw: rounds=%lu switches=%lu (preempted %lu) total_cycles=%lu sched_out_cycles=%lu "
	       "sched_in_cycles=%lu\n", rounds, (unsigned long)st.switches, (unsigned long)st.preemptions,
	       (unsigned long)st.total_cycles, (unsigned long)st.out_cycles, (unsigned long)st.in_cycles);
	printf("ctxsw: per switch: total %lu, sched_out %lu, sched_in %lu cycles (tsc_khz %lu)\n",
	       (unsigned long)(st.total_cycles / n), (unsigned long)(st.out_cycles / n),
	       (unsigned long)(st.in_cycles / n), (unsigned long)tsc_khz);
	return 0;
}
