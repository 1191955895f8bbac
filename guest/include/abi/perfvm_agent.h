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
 *   <guest> record -e <ev> -c <period> | -F <hz> [-p] [-g] -- <args>
 * where <ev> is a raw event "0xUUEE" (EE = event select, UU = umask, as in EVENTSEL[15:0]),
 * -F asks for <hz> samples per second of the boot info's TSC rate instead of a period,
 * -p asks for per-task counting (save/restore on every guest context switch) and -g for
 * frame-pointer call chains with every sample.
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
	AGENT_MSG_SAMPLES2 = 7, /* payload: struct agent_samples2 (what the kit's agent sends) */
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

/*
 * The first 16 bytes are the original entry; an agent that sends only those says
 * entry_size 0 (read as 16), and its events count the whole time. With multiplexing an
 * event is on a counter only part of the time: value is what it counted then, and
 * value * time_enabled / time_running estimates the whole (perf's scaling). Both times are
 * guest TSC ticks; time_enabled 0 = the event was never enabled.
 */
struct agent_count {
	uint16_t event;   /* EVENTSEL[15:0] */
	uint16_t flags;   /* AGENT_COUNT_* */
	uint32_t task;    /* 0 = the whole run, else a task id (per-task counting) */
	uint64_t value;
	uint64_t time_enabled; /* TSC ticks counting was on (for this task) */
	uint64_t time_running; /* of them, ticks the event was on a counter */
};

struct agent_counts {
	uint32_t n;
	uint32_t entry_size; /* bytes per entry: sizeof(struct agent_count); 0 = 16 (no times) */
	struct agent_count c[]; /* n entries */
};

/* AGENT_MSG_SAMPLES (the original format; the kit's agent now sends AGENT_MSG_SAMPLES2). */
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

/*
 * AGENT_MSG_SAMPLES2: n variable-length records back to back, each a struct agent_sample2
 * followed by its nr call-chain entries: return addresses, innermost caller first (the
 * function that called the one interrupted at rip, then its caller, ...), walked from the
 * interrupted RBP (frame pointers) only when the record order has -g; nr is 0 otherwise.
 */
#define AGENT_CHAIN_MAX 32
struct agent_sample2 {
	uint64_t rip;   /* interrupted instruction pointer */
	uint64_t tsc;   /* guest TSC in the PMI handler */
	uint32_t task;  /* current task id (0 outside tasks) */
	uint16_t event; /* EVENTSEL[15:0] of the sampling counter */
	uint8_t nr;     /* call-chain entries that follow (at most AGENT_CHAIN_MAX) */
	uint8_t vcpu;   /* the vCPU whose PMI took the sample (was nr's high byte, always 0) */
	uint64_t chain[];
};

struct agent_samples2 {
	uint32_t n;       /* records */
	uint32_t dropped; /* samples the guest could not buffer since the last message */
	/* n records (struct agent_sample2 + chain) */
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
 * message buffer (header + payload of message type `type`). If the run is stopped from
 * outside (SIGINT/SIGTERM, timeout) the VMM reads the samples not yet sent from it. An
 * 8-byte payload (no type) means AGENT_MSG_SAMPLES.
 */
struct agent_buffer {
	uint64_t samples_msg;
	uint32_t type;     /* AGENT_MSG_SAMPLES or AGENT_MSG_SAMPLES2 */
	uint32_t reserved;
};

struct agent_task {
	uint32_t id;
	char name[28]; /* NUL-terminated */
};

#endif
