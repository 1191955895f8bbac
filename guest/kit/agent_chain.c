/*
 * Frame-pointer call chains for the agent's samples (`record -g`), walked in the PMI
 * handler from the interrupted frame's RBP. Everything is built with
 * -fno-omit-frame-pointer, so each frame is {saved RBP, return address} at RBP, and the
 * chain ends at RBP 0 (entry.S and task_create start every stack with it).
 *
 * NMI context, on a possibly half-built frame: only read memory inside the interrupted
 * stack (a vCPU stack or a task stack, known from the interrupted RSP), and stop at the
 * first frame pointer that is 0, unaligned, not above the previous one, or outside
 * [interrupted RSP, top of that stack). An RSP on no stack the kit knows gives no chain.
 */
#include "kit.h"
#include "agent.h"
#include "sched.h"

/* The stack holding `sp`: [*lo, *hi). 0 if the kit owns no such stack. */
static int stk_bounds(uintptr_t sp, uintptr_t *lo, uintptr_t *hi)
{
	uintptr_t base = (uintptr_t)kit_cpu_stk;
	if (sp >= base && sp < base + sizeof(kit_cpu_stk)) {
		*lo = base + ((sp - base) & ~(uintptr_t)(KIT_STACK_SIZE - 1));
		*hi = *lo + KIT_STACK_SIZE;
		return 1;
	}
	return sched_task_stk_bounds(sp, lo, hi);
}

unsigned agent_callchain(const struct trap_frame *f, uint64_t *out, unsigned max)
{
	uintptr_t lo, hi;
	if (!stk_bounds(f->rsp, &lo, &hi))
		return 0;
	uintptr_t fp = f->rbp, floor = f->rsp;
	unsigned n = 0;
	while (n < max) {
		if (!fp || (fp & 7) || fp < floor || fp > hi - 16)
			break;
		const uint64_t *frame = (const uint64_t *)fp;
		uint64_t ret = frame[1];
		if (!ret)
			break;
		out[n++] = ret;
		floor = fp + 16; /* the caller's frame lies strictly above this one */
		fp = (uintptr_t)frame[0];
	}
	(void)lo;
	return n;
}
