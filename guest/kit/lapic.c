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

/* 1 ms of TSC against the timer's current count (KVM's APIC bus runs at 1 GHz, the
 * fallback without a TSC frequency). Measured once; it uses the timer, stopped after. */
uint64_t lapic_timer_counts_per_ms(void)
{
	static uint64_t cached;
	if (cached)
		return cached;
	if (!tsc_khz)
		return cached = 1000000;
	lapic_write(APIC_TDCR, 0xb); /* divide by 1, as lapic_timer_start */
	lapic_write(APIC_LVTT, APIC_LVT_MASKED);
	lapic_write(APIC_TMICT, 0xffffffffu);
	uint32_t c0 = lapic_timer_current();
	uint64_t t0 = rdtsc(), t1;
	while ((t1 = rdtsc()) - t0 < tsc_khz)
		pause();
	uint32_t c1 = lapic_timer_current();
	lapic_write(APIC_TMICT, 0);
	cached = (uint64_t)(c0 - c1) * tsc_khz / (t1 - t0);
	if (!cached)
		cached = 1000000;
	return cached;
}

void lapic_timer_save(struct lapic_timer_state *s)
{
	s->lvtt = lapic_read(APIC_LVTT);
	s->tdcr = lapic_read(APIC_TDCR);
	s->tmict = lapic_read(APIC_TMICT);
}

/* A periodic timer restarts with a full period; a one-shot one that had fired stays off
 * (TMICT keeps its initial count, so it would fire again: not restored). */
void lapic_timer_restore(const struct lapic_timer_state *s)
{
	lapic_write(APIC_TMICT, 0);
	lapic_write(APIC_TDCR, s->tdcr);
	lapic_write(APIC_LVTT, s->lvtt);
	if (s->lvtt & APIC_LVT_TIMER_PERIODIC)
		lapic_write(APIC_TMICT, s->tmict);
}

uint32_t lapic_get_lvtpc(void) { return lapic_read(APIC_LVTPC); }
void lapic_set_lvtpc(uint32_t v) { lapic_write(APIC_LVTPC, v); }

void lapic_send_ipi(uint32_t apic_id, uint32_t icr_lo)
{
	lapic_write(APIC_ICR_HI, apic_id << 24);
	lapic_write(APIC_ICR_LO, icr_lo); /* writing the low half sends it */
}
