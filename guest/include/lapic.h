/* Local APIC in xAPIC mode, MMIO at 0xFEE00000. */
#ifndef KIT_LAPIC_H
#define KIT_LAPIC_H
#include <stdint.h>

#define LAPIC_BASE      0xfee00000ul
#define APIC_ID         0x020
#define APIC_VERSION    0x030
#define APIC_TPR        0x080
#define APIC_EOI        0x0b0
#define APIC_SVR        0x0f0
#define APIC_ICR_LO     0x300
#define APIC_ICR_HI     0x310
#define APIC_LVTT       0x320 /* timer */
#define APIC_LVTPC      0x340 /* performance counter overflow */
#define APIC_LVT0       0x350
#define APIC_LVT1       0x360
#define APIC_LVTERR     0x370
#define APIC_TMICT      0x380 /* timer initial count */
#define APIC_TMCCT      0x390 /* timer current count */
#define APIC_TDCR       0x3e0 /* timer divide configuration */

#define APIC_LVT_MASKED     (1u << 16)
#define APIC_LVT_TIMER_PERIODIC (1u << 17)
#define APIC_DM_NMI         (4u << 8)  /* LVT/ICR delivery mode NMI */
#define APIC_SVR_ENABLE     (1u << 8)

static inline uint32_t lapic_read(uint32_t reg) { return *(volatile uint32_t *)(LAPIC_BASE + reg); }
static inline void lapic_write(uint32_t reg, uint32_t v) { *(volatile uint32_t *)(LAPIC_BASE + reg) = v; }

uint32_t lapic_id(void);
void lapic_eoi(void);
void lapic_enable(void); /* software-enable via SVR, spurious vector 0xff */

/* One-shot (periodic=0) or periodic timer on `vector`, divide by 1. count 0 stops it. */
void lapic_timer_start(int vector, uint32_t count, int periodic);
void lapic_timer_stop(void);
uint32_t lapic_timer_current(void);
/* Timer counts per millisecond at divide by 1 (measured once, ~1 ms busy wait). */
uint64_t lapic_timer_counts_per_ms(void);

/* The timer's programming, to lend it and take it back (sched_run does). */
struct lapic_timer_state { uint32_t lvtt, tdcr, tmict; };
void lapic_timer_save(struct lapic_timer_state *s);
void lapic_timer_restore(const struct lapic_timer_state *s);

uint32_t lapic_get_lvtpc(void);
void lapic_set_lvtpc(uint32_t v);

/* Send an IPI: icr_lo holds vector, delivery mode, level, trigger. */
void lapic_send_ipi(uint32_t apic_id, uint32_t icr_lo);

#endif
