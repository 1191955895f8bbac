/* kittest: self-test of the guest kit (formatting, expected faults, hooks, the interrupt
 * flag in the current execution mode, LAPIC timer interrupt, self-NMI, #PF address),
 * reported through the harness. Exit 0 iff everything passed. */
#include "kit.h"

static int ud_hook(struct trap_frame *f)
{
	f->rip += 2; /* skip the ud2 */
	return 1;
}

static volatile int timer_ticks;
static volatile int irq_saw_enabled = -1, irq_frame_if = -1;
static void timer_irq(struct trap_frame *f)
{
	irq_saw_enabled = irq_enabled();
	irq_frame_if = irq_flags_enabled(f->rflags);
	timer_ticks++;
}

static volatile uint64_t pf_cr2, pf_count;
static int pf_hook(struct trap_frame *f)
{
	pf_cr2 = fault_cr2();
	pf_count++;
	f->rip += 3; /* mov (%rax), %rax */
	return 1;
}

static void test_format(void)
{
	char buf[64];
	report_prefix_push("printf");
	snprintf(buf, sizeof(buf), "%d|%5u|%-4x|%08lx|%s|%c|%%|%lld", -42, 7u, 0xabu, 0x1234ul, "s", 'c', -5ll);
	report(!strcmp(buf, "-42|    7|ab  |00001234|s|c|%|-5"), "format: %s", buf);
	snprintf(buf, sizeof(buf), "%p %llx %lu", (void *)0x1000, 0xfedcba9876543210ull, 18446744073709551615ul);
	report(!strcmp(buf, "0x1000 fedcba9876543210 18446744073709551615"), "64-bit: %s", buf);
	report(snprintf(buf, 4, "abcdef") == 6 && !strcmp(buf, "abc"), "truncation");
	report(strtoul("0x1f", 0, 0) == 31 && strtoul("017", 0, 0) == 15 && strtoul("42", 0, 10) == 42, "strtoul");
	report_prefix_pop();
}

static void test_faults(void)
{
	uint64_t v;
	report_prefix_push("faults");
	int r = rdmsr_safe(0x10, &v); /* before report(): argument order is unspecified */
	report(r == 0 && v != 0, "rdmsr_safe(IA32_TSC) = 0x%lx", v);
	report(rdmsr_safe(0xdeadbeef, &v) == -1 && exception_vector() == GP_VECTOR, "rdmsr_safe(bogus) -> #GP");
	report(wrmsr_safe(0xdeadbeef, 1) == -1 && exception_vector() == GP_VECTOR, "wrmsr_safe(bogus) -> #GP");
	report(rdpmc_safe(0x7fffffff, &v) == -1 && exception_vector() == GP_VECTOR, "rdpmc_safe(bad index) -> #GP");
	set_exception_hook(UD_VECTOR, ud_hook);
	asm volatile("ud2");
	set_exception_hook(UD_VECTOR, 0);
	report(1, "ud2 skipped by a #UD hook");
	report_prefix_pop();
}

/* Wait (bounded by the TSC, ~50 ms; polls without one) until the LAPIC timer reads 0. */
static void wait_timer_expired(void)
{
	uint64_t t0 = rdtsc(), limit = tsc_khz ? tsc_khz * 50 : 0;
	for (unsigned long i = 0; lapic_timer_current(); i++)
		if (limit ? rdtsc() - t0 > limit : i > 100000)
			break;
}

/* The interrupt flag in the current execution mode (irq.h): state round trips, faults and
 * NMIs leave it alone, an interrupt held while disabled arrives at irq_enable. */
static void test_irq(void)
{
	report_prefix_push("irq");
	report_info("execution mode: %s", kit_native ? "native (VIF)" : "emulated");
	report(!irq_enabled(), "interrupts start disabled");
	uint64_t f = irq_save();
	report(!(f & X86_EFLAGS_IF) && !irq_enabled(), "irq_save with interrupts off");
	irq_restore(f);
	report(!irq_enabled(), "irq_restore keeps them off");
	irq_enable();
	int on = irq_enabled();
	f = irq_save();
	int off = !irq_enabled();
	uint64_t f2 = irq_save(); /* nested */
	irq_restore(f2);
	int still_off = !irq_enabled();
	irq_restore(f);
	report(on && (f & X86_EFLAGS_IF) && off && !(f2 & X86_EFLAGS_IF) && still_off && irq_enabled(),
	       "irq_enable, nested irq_save/irq_restore round trip");

	/* Exceptions and NMIs return to the interrupted state, on or off. */
	uint64_t v;
	(void)rdmsr_safe(0xdeadbeef, &v);
	int on_after_gp = irq_enabled();
	irq_disable();
	(void)rdmsr_safe(0xdeadbeef, &v);
	report(on_after_gp && !irq_enabled(), "a #GP keeps the interrupt state (on and off)");
	unsigned long before = nmi_count;
	lapic_send_ipi(lapic_id(), APIC_DM_NMI);
	for (int i = 0; i < 1000 && nmi_count == before; i++)
		pause();
	int off_after_nmi = !irq_enabled();
	irq_enable();
	lapic_send_ipi(lapic_id(), APIC_DM_NMI);
	for (int i = 0; i < 1000 && nmi_count == before + 1; i++)
		pause();
	int on_after_nmi = irq_enabled();
	irq_disable();
	report(nmi_count == before + 2 && off_after_nmi && on_after_nmi,
	       "an NMI keeps the interrupt state (on and off; %lu NMIs)", nmi_count - before);

	/* A timer interrupt that falls due while interrupts are off waits for irq_enable. */
	timer_ticks = 0;
	lapic_timer_start(0x40, 10000, 0);
	wait_timer_expired();
	int held = timer_ticks;
	int pending = kit_native ? this_vif()->pending : -1;
	irq_enable();
	for (int i = 0; i < 1000 && !timer_ticks; i++)
		pause();
	irq_disable();
	report(held == 0 && timer_ticks == 1, "timer held while disabled, delivered by irq_enable (%d, %d)",
	       held, timer_ticks);
	if (kit_native)
		report(pending == 1, "vif.pending set while it waited");
	report(irq_saw_enabled == 0 && irq_frame_if == 1,
	       "handler runs disabled, its frame says enabled (%d, %d)", irq_saw_enabled, irq_frame_if);

	/* cpu_idle: enable, halt, return after the handler, interrupts on. */
	timer_ticks = 0;
	lapic_timer_start(0x40, 100000, 0);
	for (int i = 0; i < 1000 && !timer_ticks; i++)
		cpu_idle();
	int idle_on = irq_enabled();
	irq_disable();
	report(timer_ticks == 1 && idle_on, "cpu_idle wakes on the timer (%d), returns enabled", timer_ticks);

	/* #PF: the fault address from fault_cr2 (above the 4 GiB identity map). */
	set_exception_hook(PF_VECTOR, pf_hook);
	uint64_t addr = 0x123456789ull << 4;
	asm volatile("mov (%%rax), %%rax" : "+a"(addr) : : "memory");
	set_exception_hook(PF_VECTOR, 0);
	report(pf_count == 1 && pf_cr2 == 0x123456789ull << 4, "#PF hook sees fault_cr2() = %#lx",
	       (unsigned long)pf_cr2);
	report_prefix_pop();
}

static void test_lapic(void)
{
	report_prefix_push("lapic");
	report(lapic_id() == smp_processor_id(), "apic id %u == vcpu index", lapic_id());
	lapic_enable();
	set_irq_handler(0x40, timer_irq);
	timer_ticks = 0;
	lapic_timer_start(0x40, 100000, 0);
	for (int i = 0; i < 1000 && !timer_ticks; i++)
		cpu_idle();
	irq_disable();
	report(timer_ticks == 1, "one-shot timer interrupt (%d)", timer_ticks);

	unsigned long before = nmi_count;
	lapic_send_ipi(lapic_id(), APIC_DM_NMI); /* self NMI */
	for (int i = 0; i < 1000 && nmi_count == before; i++)
		pause();
	report(nmi_count == before + 1, "self NMI counted");

	uint32_t old = lapic_get_lvtpc();
	lapic_set_lvtpc(APIC_DM_NMI);
	report((lapic_get_lvtpc() & 0x1ffff) == APIC_DM_NMI, "LVTPC reads back (was 0x%x)", old);
	lapic_set_lvtpc(old);
	report_prefix_pop();
}

int main(int argc, char **argv)
{
	test_format();
	test_faults();
	test_lapic();
	test_irq();
	return report_summary();
}
