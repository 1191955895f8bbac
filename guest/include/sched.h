/*
 * A tiny preemptive round-robin scheduler for vCPU 0 (kit/sched.c): up to SCHED_MAX_TASKS
 * tasks with 8 KiB stacks, preempted by the periodic LAPIC timer, switched by a few lines
 * of asm that save the callee-saved general registers and RSP.
 */
#ifndef KIT_SCHED_H
#define KIT_SCHED_H
#include <stdint.h>

#define SCHED_MAX_TASKS   64
#define SCHED_STACK_SIZE  8192
#define SCHED_TIMER_VECTOR 0xec
#define SCHED_DEFAULT_SLICE_US 20000 /* 20 ms: a 10^6-instruction workload (~1 s) sees ~50 */

/* New runnable task; ids start at 1 and are never reused. Names the task to the VMM
 * (AGENT_MSG_TASK). Returns the id, or -1 when all SCHED_MAX_TASKS slots were used. */
int task_create(void (*fn)(void *), void *arg, const char *name);

/* Run every created task until all have returned (round robin, time slices from the
 * LAPIC timer), then return to the caller with the LAPIC timer as it found it. Call with
 * no task running (from main). */
void sched_run(void);

void sched_yield(void);          /* give up the CPU to the next runnable task */
void sched_block(void);          /* sleep until sched_wake(current id) (a pending wake counts) */
void sched_wake(uint32_t id);    /* make task id runnable (or remember the wake) */
uint32_t current_task_id(void);  /* 0 outside tasks */

/* Time slice for the next sched_run, in microseconds of real time (0 = no preemption). */
void sched_set_slice_us(uint32_t us);

/* What sched_run measured (reset when it starts), TSC cycles. A switch is timed from the
 * start of the scheduling decision to the end of agent_sched_in in the incoming task. */
struct sched_stats {
	uint64_t switches;       /* context switches, including the first and the last */
	uint64_t preemptions;    /* of them, forced by the timer */
	uint64_t ticks;          /* timer interrupts */
	uint64_t total_cycles;   /* sum over switches of the whole switch */
	uint64_t out_cycles;     /* sum of agent_sched_out calls */
	uint64_t in_cycles;      /* sum of agent_sched_in calls */
	uint64_t timer_count;    /* LAPIC timer initial count used for the slice */
};
void sched_get_stats(struct sched_stats *s);

/* The task stack holding `sp`: [*lo, *hi), returns 1; 0 if sp is on no task's stack. */
int sched_task_stk_bounds(uintptr_t sp, uintptr_t *lo, uintptr_t *hi);

#endif
