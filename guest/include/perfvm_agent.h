/*
 * The perf agent channel: how the guest's perf agent hands counts, samples and benchmark
 * values to the VMM (crates/vmm/src/devices/agent.rs). Not the serial console.
 *
 * The guest builds a message in its own memory (identity-mapped: virtual == physical) and
 * writes the message's guest-physical address with one 32-bit OUT to PERFVM_PORT_AGENT
 * (one VM exit per message). The VMM copies the message out before the OUT completes, so
 * the buffer may be reused at once. Messages the VMM cannot parse are counted and dropped.
 *
 * Orders come on the guest command line, before the workload's own arguments:
 *   <guest> stat   -e <ev>[,<ev>...] [-p] -- <args>
 *   <guest> record -e <ev> -c <period> [-p] -- <args>
 * where <ev> is a raw event "0xUUEE" (EE = event select, UU = umask, as in EVENTSEL[15:0]),
 * and -p asks for per-task counting (save/restore on every guest context switch).
 */
#ifndef PERFVM_AGENT_H
#define PERFVM_AGENT_H
#include <stdint.h>

#define PERFVM_PORT_AGENT   0x500
#define PERFVM_AGENT_MAGIC  0x54474150u /* "PAGT" */
#define PERFVM_AGENT_MAX_MSG (64 * 1024) /* the VMM rejects longer messages */

enum perfvm_agent_msg_type {
	AGENT_MSG_COUNTS  = 1, /* payload: struct agent_counts */
	AGENT_MSG_SAMPLES = 2, /* payload: struct agent_samples */
	AGENT_MSG_MARK    = 3, /* payload: struct agent_mark */
	AGENT_MSG_VALUE   = 4, /* payload: struct agent_value */
	AGENT_MSG_TASK    = 5, /* payload: struct agent_task (names a task id) */
	AGENT_MSG_BUFFER  = 6, /* payload: struct agent_buffer */
};

struct agent_msg_header {
	uint32_t magic; /* PERFVM_AGENT_MAGIC */
	uint16_t type;  /* enum perfvm_agent_msg_type */
	uint16_t vcpu;
	uint32_t len;   /* payload bytes after this header */
	uint32_t reserved;
};

/* Event identity: the raw EVENTSEL[15:0]; flags say how it was counted. */
#define AGENT_COUNT_FIXED       (1u << 0) /* counted on a fixed counter */
#define AGENT_COUNT_UNSUPPORTED (1u << 1) /* the PMU does not advertise it: <not supported> */

struct agent_count {
	uint16_t event;   /* EVENTSEL[15:0] */
	uint16_t flags;   /* AGENT_COUNT_* */
	uint32_t task;    /* 0 = the whole run, else a task id (per-task counting) */
	uint64_t value;
};

struct agent_counts {
	uint32_t n;
	uint32_t reserved;
	struct agent_count c[]; /* n entries */
};

struct agent_sample {
	uint64_t rip;   /* interrupted instruction pointer (from the PMI's NMI frame) */
	uint32_t task;  /* current task id (0 before tasks start) */
	uint16_t event; /* EVENTSEL[15:0] of the sampling counter */
	uint16_t reserved;
};

struct agent_samples {
	uint32_t n;
	uint32_t dropped; /* samples the guest could not buffer since the last message */
	struct agent_sample s[];
};

/* Workload phases, for timing in the VMM (e.g. sampling overhead). */
enum agent_mark_kind { AGENT_MARK_START = 1, AGENT_MARK_END = 2 };
struct agent_mark {
	uint32_t kind;
	uint32_t reserved;
	uint64_t tsc;
};

/* A named value from a guest-side benchmark, e.g. "ctxsw.sched_in_cycles". */
struct agent_value {
	char key[48]; /* NUL-terminated */
	uint64_t value;
};

/*
 * Where the agent accumulates samples before sending them: the guest-physical address of a
 * message buffer (header + struct agent_samples). If the run is stopped from outside
 * (SIGINT/SIGTERM, timeout) the VMM reads the samples not yet sent from it.
 */
struct agent_buffer {
	uint64_t samples_msg;
};

struct agent_task {
	uint32_t id;
	char name[28]; /* NUL-terminated */
};

#endif
