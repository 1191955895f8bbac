/* Local APIC helpers (xAPIC MMIO; the VMM's in-kernel LAPIC handles the accesses). */
#include "kit.h"

uint32_t lapic_id(void) { return lapic_read(APIC_ID) >> 24; }

void lapic_eoi(void) { lapic_write(APIC_EOI, 0); }

void lapic_enable(void)
{
	set_irq_handler(SPURIOUS_VECTOR, 0); /* gate only: spurious interrupts are ignored */
	lapic_write(APIC_SVR, APIC_SVR_ENABLE | SPURIOUS_VECTOR);
}

void lapic_timer_start(int vector, uint32_t count, int periodic)
{
	lapic_write(APIC_TDCR, 0xb); /* divide by 1 */
	lapic_write(APIC_LVTT, (uint32_t)vector | (periodic ? APIC_LVT_TIMER_PERIODIC : 0));
	lapic_write(APIC_TMICT, count);
}

void lapic_timer_stop(void)
{
	lapic_write(APIC_TMICT, 0);
	lapic_write(APIC_LVTT, APIC_LVT_MASKED);
}

uint32_t lapic_timer_current(void) { return lapic_read(APIC_TMCCT); }

uint32_t lapic_get_lvtpc(void) { return lapic_read(APIC_LVTPC); }
void lapic_set_lvtpc(uint32_t v) { lapic_write(APIC_LVTPC, v); }

void lapic_send_ipi(uint32_t apic_id, uint32_t icr_lo)
{
	lapic_write(APIC_ICR_HI, apic_id << 24);
	lapic_write(APIC_ICR_LO, icr_lo); /* writing the low half sends it */
}
