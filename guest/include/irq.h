/*
 * The interrupt flag, in both execution modes (perfvm_boot.h, "Native mode"):
 *   - emulated: the real RFLAGS.IF (cli/sti/pushf, sti; hlt);
 *   - native (kvm_pvm's VIF mode): hardware IF is always 1 at hardware CPL3 and popf does
 *     not trap, so the virtual IF lives in this vCPU's VIF page (vif.if_). Enabling sets
 *     if_ = 1 and, if the host left an interrupt pending, kicks it with an OUT to port
 *     PERFVM_PORT_VIF_PENDING; the host clears if_ on IRQ/NMI entry and iretq restores it.
 * Nothing in the kit or the guests may use cli/sti/pushf/popf/hlt for IF: only this.
 * The hot paths (irq_disable/enable/save/restore) are a load of kit_native, the VIF
 * address from the stack pointer (smp_processor_id) and one store: no MSR, no LAPIC, no exit
 * unless an interrupt was held back.
 */
#ifndef KIT_IRQ_H
#define KIT_IRQ_H
#include <stdint.h>
#include "perfvm_boot.h"
#include "smp.h"

#define X86_EFLAGS_IF (1ul << 9)

/* Nonzero when the VMM runs the vCPUs natively (boot info version >= 2 with
 * PERFVM_BOOT_F_NATIVE); set by kit_start before any vCPU can enable interrupts. */
extern int kit_native;
/* Guest-physical (= virtual) address of vCPU 0's VIF page when native, else 0. */
extern uintptr_t kit_vif_base;

/* This vCPU's VIF page (native mode only). */
static inline struct perfvm_vif *this_vif(void)
{
	return (struct perfvm_vif *)(kit_vif_base + ((uintptr_t)smp_processor_id() << 12));
}

/* The raw instructions, for this header and kit/irq.c only (emulated mode). */
static inline void __irq_raw_cli(void) { asm volatile("cli" : : : "memory"); }
static inline void __irq_raw_sti(void) { asm volatile("sti" : : : "memory"); }
static inline uint64_t __irq_raw_flags(void)
{
	uint64_t f;
	asm volatile("pushfq; popq %0" : "=r"(f) : : "memory");
	return f;
}

/* Interrupts off on this vCPU. */
static inline void irq_disable(void)
{
	if (kit_native) {
		this_vif()->if_ = 0;
		barrier();
	} else {
		__irq_raw_cli();
	}
}

/* Interrupts on; what was held back while they were off is delivered now. */
static inline void irq_enable(void)
{
	if (kit_native) {
		struct perfvm_vif *v = this_vif();
		barrier();
		v->if_ = 1;
		barrier();
		if (v->pending)
			outb(PERFVM_PORT_VIF_PENDING, 0);
	} else {
		__irq_raw_sti();
	}
}

/* Whether interrupts are on on this vCPU. */
static inline int irq_enabled(void)
{
	if (kit_native)
		return this_vif()->if_ != 0;
	return (__irq_raw_flags() & X86_EFLAGS_IF) != 0;
}

/* Interrupts off; returns the previous state for irq_restore (X86_EFLAGS_IF or 0). */
static inline uint64_t irq_save(void)
{
	uint64_t f = irq_enabled() ? X86_EFLAGS_IF : 0;
	irq_disable();
	return f;
}

/* Back to the state irq_save returned. */
static inline void irq_restore(uint64_t flags)
{
	if (flags & X86_EFLAGS_IF)
		irq_enable();
	else
		irq_disable();
}

/* Whether an interrupted context (a trap frame's RFLAGS) had interrupts on. Natively the
 * frame's IF is what iretq gives back to vif.if_, so it means the same in both modes. */
static inline int irq_flags_enabled(uint64_t rflags) { return (rflags & X86_EFLAGS_IF) != 0; }

/* Enable interrupts and halt until the next one ("sti; hlt"); returns after its handler
 * ran, with interrupts on. Natively: if_ = 1, the pending kick, then the host's halt
 * hypercall (int $0x1b, eax = 0x1009: not IDT vector 0x1b). */
void cpu_idle(void);
/* Halt forever with interrupts off (an NMI's handler runs, then it halts again). */
void cpu_park(void) __attribute__((noreturn));
/* CR2 of the #PF being handled, in both modes (natively vif.cr2 where the host set it). */
uint64_t fault_cr2(void);

#endif
