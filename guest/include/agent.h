/*
 * The guest-side perf agent: `<guest> stat|record ... -- <args>` on the command line makes
 * kit_start run the guest's main() under the agent, which programs the virtual PMU the way
 * Linux perf's x86 driver does and reports through the agent port (perfvm_agent.h).
 * See guest/README.md ("The perf agent") for the options and the message sequence.
 */
#ifndef KIT_AGENT_H
#define KIT_AGENT_H
#include <stdint.h>
#include "perfvm_agent.h"

/* Nonzero if argv[1] asks for the agent ("stat" or "record"). */
int agent_wanted(int argc, char **argv);
/* Parse the agent's options, program the PMU, run main_fn(argc', argv') with argv'[0] =
 * argv[0] and the words after "--", report, and return main_fn's value. */
int agent_run(int argc, char **argv, int (*main_fn)(int, char **));

/* Messages (agent_msg.c). Each builds the message in a static buffer and sends it with one
 * OUT to PERFVM_PORT_AGENT; safe to call from any task (interrupts are held off while the
 * buffer is in use) whether or not the agent runs. */
void agent_send(uint16_t type, const void *payload, uint32_t len);
/* Send a message built in place: msg is a struct agent_msg_header (filled in here) followed
 * by payload_len bytes. No copy, no interrupt masking (the caller owns the buffer). */
void agent_send_msg(void *msg, uint16_t type, uint32_t payload_len);
void agent_send_value(const char *key, uint64_t v);   /* AGENT_MSG_VALUE */
void agent_name_task(uint32_t id, const char *name);  /* AGENT_MSG_TASK */
void agent_mark(uint32_t kind);                       /* AGENT_MSG_MARK, tsc = rdtsc() */
/* The name last given to task `id` with agent_name_task ("" if none). */
const char *agent_task_name(uint32_t id);

/* Context-switch hooks, called by the scheduler (sched.c) with interrupts off: id 0 is the
 * scheduler's own context (the code that called sched_run, and its idle loop). With -p they
 * save the outgoing context's counts and load the incoming one's; otherwise they return. */
void agent_sched_out(uint32_t prev);
void agent_sched_in(uint32_t next);
/* The scheduler's current task becomes `next` (for the samples the VMM takes: PV v5). */
void agent_task_switch(uint32_t next);
/* The scheduler's timer tick (interrupts off): the agent rotates multiplexed events on it
 * while sched_run has the LAPIC timer. Returns at once unless the agent multiplexes. */
void agent_tick(void);

struct trap_frame;
/* Frame-pointer call chain of the interrupted context f (agent_chain.c): up to max return
 * addresses, innermost caller first, read only inside the interrupted stack. */
unsigned agent_callchain(const struct trap_frame *f, uint64_t *out, unsigned max);

#endif
