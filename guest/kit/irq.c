/* The interrupt flag in both execution modes: the parts of include/irq.h not inlined. */
#include "kit.h"

int kit_native;
uintptr_t kit_vif_base;

/* kvm_pvm's halt hypercall: sleeps until the next interrupt. The registers beyond the
 * arguments are declared clobbered, as a hypercall may use them. */
#define PVM_HC_HALT 0x1009

void cpu_idle(void)
{
	if (kit_native) {
		irq_enable();
		uint64_t a = PVM_HC_HALT, c = 0, d = 0;
		asm volatile("int $0x1b" : "+a"(a), "+c"(c), "+d"(d) : : "r11", "memory", "cc");
	} else {
		/* sti takes effect after the next instruction: nothing slips in before hlt. */
		asm volatile("sti; hlt" : : : "memory");
	}
}

void cpu_park(void)
{
	irq_disable();
	for (;;)
		asm volatile("hlt" : : : "memory"); /* natively: with if_ = 0 only an NMI wakes it */
}

/* Natively the host's convention is vif.cr2, but this host leaves it 0 for a #PF that its
 * shadow MMU reflects into the guest (a not-present guest mapping), while MOV from CR2
 * (emulated at hardware CPL3) gives the right address. So: vif.cr2 when the host wrote it
 * (cleared once taken, so it never goes stale), else CR2. */
uint64_t fault_cr2(void)
{
	if (kit_native) {
		struct perfvm_vif *v = this_vif();
		uint64_t c = v->cr2;
		if (c) {
			v->cr2 = 0;
			return c;
		}
	}
	uint64_t c;
	asm volatile("mov %%cr2, %0" : "=r"(c));
	return c;
}
