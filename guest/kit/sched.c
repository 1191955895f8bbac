/*
 * A tiny preemptive round-robin scheduler on vCPU 0.
 *
 * Context 0 is the code that calls sched_run (main): it is the idle loop, and where
 * sched_run returns once every task has returned. Tasks 1..SCHED_MAX_TASKS each own an
 * 8 KiB stack. Switches go straight from task to task (like Linux's schedule(): the
 * outgoing task's perf state is saved before the register switch, the incoming one's
 * loaded right after it, on the incoming stack), always with interrupts off:
 *   - sched_yield / sched_block / a task's return call schedule() themselves;
 *   - the periodic LAPIC timer's handler calls it on the preempted task's stack, below the
 *     interrupt frame, so the preempted task resumes by returning through the handler and
 *     the kit's trap path (iretq restores its RFLAGS.IF, natively its vif.if_).
 * The handler sends its EOI before switching: the kit's own EOI comes only when the
 * preempted task resumes, and by then no interrupt is in service (the extra EOI is ignored).
 */
#include "kit.h"
#include "sched.h"
#include "agent.h"

enum task_state { T_FREE, T_RUNNABLE, T_BLOCKED, T_DEAD };

struct task {
	uint64_t rsp;          /* saved by sched_switch while the task is off the CPU */
	uint32_t id;
	int state;
	volatile int wake_pending;
	void (*fn)(void *);
	void *arg;
};

/* [0] is the scheduler's own context; [id] task id. */
static struct task tasks[SCHED_MAX_TASKS + 1];
/* Task stacks. (No symbol may contain "stac": the build greps objdump for it.) */
static uint8_t task_stk[SCHED_MAX_TASKS][SCHED_STACK_SIZE] __attribute__((aligned(16)));
static struct task *cur = &tasks[0];
static unsigned ntasks, nlive;
static uint32_t rr_last;          /* id of the task that ran last, for round robin */
static uint32_t slice_us = SCHED_DEFAULT_SLICE_US;
static struct sched_stats st;
static uint64_t sw_start;         /* rdtsc at the start of the switch in flight */

/* void sched_switch(uint64_t *save_rsp, uint64_t load_rsp): push the callee-saved
 * registers, park RSP in *save_rsp, load load_rsp, pop the incoming task's registers and
 * return on its stack. A new task's stack is built to "return" into sched_task_entry. */
void sched_switch(uint64_t *save_rsp, uint64_t load_rsp);
void sched_task_entry(void);
void sched_task_main(void) __attribute__((noreturn, used));
asm(".text\n"
    ".globl sched_switch\n"
    ".type sched_switch, @function\n"
    "sched_switch:\n\t"
    "push %rbp\n\t"
    "push %rbx\n\t"
    "push %r12\n\t"
    "push %r13\n\t"
    "push %r14\n\t"
    "push %r15\n\t"
    "mov %rsp, (%rdi)\n\t"
    "mov %rsi, %rsp\n\t"
    "pop %r15\n\t"
    "pop %r14\n\t"
    "pop %r13\n\t"
    "pop %r12\n\t"
    "pop %rbx\n\t"
    "pop %rbp\n\t"
    "ret\n"
    ".size sched_switch, . - sched_switch\n"
    /* Entered by sched_switch's ret with RSP 16-byte aligned: call keeps the ABI. */
    ".globl sched_task_entry\n"
    ".type sched_task_entry, @function\n"
    "sched_task_entry:\n\t"
    "call sched_task_main\n\t"
    "ud2\n"
    ".size sched_task_entry, . - sched_task_entry\n");

/* Second half of every switch, in the incoming context right after the register switch. */
static void finish_switch(void)
{
	uint64_t t = rdtsc();
	agent_sched_in(cur->id);
	uint64_t e = rdtsc();
	st.in_cycles += e - t;
	st.total_cycles += e - sw_start;
	st.switches++;
}

/* The next runnable task after the last one that ran, round robin; NULL if none. */
static struct task *pick_next(void)
{
	uint32_t id = rr_last;
	for (unsigned k = 0; k < ntasks; k++) {
		id = id >= ntasks ? 1 : id + 1;
		if (tasks[id].state == T_RUNNABLE)
			return &tasks[id];
	}
	return 0;
}

/* Interrupts off. Returns 1 if the CPU went elsewhere (and has come back). */
static int schedule(void)
{
	uint64_t t0 = rdtsc();
	struct task *prev = cur, *next = pick_next();
	if (!next) {
		if (prev != &tasks[0] && prev->state == T_RUNNABLE)
			return 0; /* the only runnable task keeps the CPU */
		next = &tasks[0]; /* all returned or all blocked: back to sched_run */
	}
	if (next == prev)
		return 0;
	sw_start = t0;
	uint64_t t = rdtsc();
	agent_sched_out(prev->id);
	st.out_cycles += rdtsc() - t;
	if (next != &tasks[0])
		rr_last = next->id;
	cur = next;
	agent_task_switch(next->id);
	sched_switch(&prev->rsp, next->rsp);
	finish_switch(); /* back in prev, switched to by someone else */
	return 1;
}

void sched_task_main(void)
{
	finish_switch();
	irq_enable();
	cur->fn(cur->arg);
	irq_disable();
	cur->state = T_DEAD;
	nlive--;
	schedule(); /* a dead task is never picked again */
	cpu_park();
}

static void sched_tick(struct trap_frame *f)
{
	(void)f;
	st.ticks++;
	agent_tick(); /* the agent's multiplexing rotation rides on the slices meanwhile */
	if (cur == &tasks[0])
		return; /* idle: sched_run's loop looks for work itself */
	lapic_eoi();
	if (schedule())
		st.preemptions++;
}

int task_create(void (*fn)(void *), void *arg, const char *name)
{
	uint64_t fl = irq_save();
	if (ntasks >= SCHED_MAX_TASKS) {
		irq_restore(fl);
		return -1;
	}
	uint32_t id = ++ntasks;
	struct task *t = &tasks[id];
	t->id = id;
	t->fn = fn;
	t->arg = arg;
	t->wake_pending = 0;
	/* What sched_switch pops: six callee-saved registers (zero), then the return address. */
	uint64_t *sp = (uint64_t *)(task_stk[id - 1] + SCHED_STACK_SIZE);
	*--sp = (uint64_t)(uintptr_t)sched_task_entry;
	for (int i = 0; i < 6; i++)
		*--sp = 0;
	t->rsp = (uint64_t)(uintptr_t)sp;
	t->state = T_RUNNABLE;
	nlive++;
	irq_restore(fl);
	agent_name_task(id, name);
	return (int)id;
}

void sched_yield(void)
{
	uint64_t fl = irq_save();
	if (cur != &tasks[0])
		schedule();
	irq_restore(fl);
}

void sched_block(void)
{
	uint64_t fl = irq_save();
	if (cur != &tasks[0]) {
		while (!cur->wake_pending) {
			cur->state = T_BLOCKED;
			schedule();
		}
		cur->wake_pending = 0;
	}
	irq_restore(fl);
}

void sched_wake(uint32_t id)
{
	if (id == 0 || id > ntasks)
		return;
	uint64_t fl = irq_save();
	struct task *t = &tasks[id];
	if (t->state == T_BLOCKED || t->state == T_RUNNABLE) {
		t->wake_pending = 1;
		t->state = T_RUNNABLE;
	}
	irq_restore(fl);
}

uint32_t current_task_id(void) { return cur->id; }

void sched_set_slice_us(uint32_t us) { slice_us = us; }

void sched_get_stats(struct sched_stats *s) { *s = st; }

int sched_task_stk_bounds(uintptr_t sp, uintptr_t *lo, uintptr_t *hi)
{
	uintptr_t base = (uintptr_t)task_stk;
	if (sp < base || sp >= base + sizeof(task_stk))
		return 0;
	*lo = base + (sp - base) / SCHED_STACK_SIZE * SCHED_STACK_SIZE;
	*hi = *lo + SCHED_STACK_SIZE;
	return 1;
}

void sched_run(void)
{
	uint64_t fl = irq_save();
	memset(&st, 0, sizeof(st));
	if (!nlive) {
		irq_restore(fl);
		return;
	}
	uint64_t count = 0;
	struct lapic_timer_state saved;
	if (slice_us) {
		lapic_timer_save(&saved); /* e.g. the agent's multiplexing tick: put back at the end */
		count = lapic_timer_counts_per_ms() * slice_us / 1000;
		if (count > 0xffffffffu)
			count = 0xffffffffu;
		if (!count)
			count = 1;
		lapic_enable();
		set_irq_handler(SCHED_TIMER_VECTOR, sched_tick);
		lapic_timer_start(SCHED_TIMER_VECTOR, (uint32_t)count, 1);
	}
	st.timer_count = count;
	cur = &tasks[0];
	agent_task_switch(0);
	while (nlive) {
		schedule();
		if (nlive) { /* every live task is blocked: wait for an interrupt to wake one */
			cpu_idle();
			irq_disable();
		}
	}
	if (slice_us)
		lapic_timer_restore(&saved);
	irq_restore(fl);
}
