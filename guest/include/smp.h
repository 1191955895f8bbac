/* Spinlocks and the current vCPU index. */
#ifndef KIT_SMP_H
#define KIT_SMP_H
#include <stdint.h>
#include "perfvm_boot.h"
#include "x86.h"

/* Each vCPU runs on its own 16 KiB stack in kit_cpu_stk (entry.S), and only the scheduler
 * switches stacks (no IST), so the stack pointer alone tells which vCPU we are: no MSR, no
 * MMIO. Scheduler tasks (sched.c) run on their own stacks, on vCPU 0 only: an RSP outside
 * kit_cpu_stk means vCPU 0. */
#define KIT_STACK_SHIFT 14
#define KIT_STACK_SIZE  (1 << KIT_STACK_SHIFT)
extern char kit_cpu_stk[PERFVM_MAX_VCPUS][KIT_STACK_SIZE];

static inline unsigned smp_processor_id(void)
{
	uintptr_t sp;
	asm volatile("mov %%rsp, %0" : "=r"(sp));
	uintptr_t idx = (sp - (uintptr_t)kit_cpu_stk) >> KIT_STACK_SHIFT;
	return idx < PERFVM_MAX_VCPUS ? (unsigned)idx : 0;
}

/* Number of vCPUs the VMM started (boot info), valid once main/ap_main runs. */
extern unsigned nr_vcpus;

struct spinlock { volatile int locked; };

/* xchg with a memory operand is implicitly locked; cmpxchg16b is not used anywhere. */
static inline void spin_lock(struct spinlock *l)
{
	while (__atomic_exchange_n(&l->locked, 1, __ATOMIC_ACQUIRE))
		while (l->locked)
			pause();
}

static inline int spin_trylock(struct spinlock *l)
{
	return !__atomic_exchange_n(&l->locked, 1, __ATOMIC_ACQUIRE);
}

static inline void spin_unlock(struct spinlock *l)
{
	__atomic_store_n(&l->locked, 0, __ATOMIC_RELEASE);
}

#endif
