/* kittest: self-test of the guest kit (formatting, expected faults, hooks, LAPIC timer
 * interrupt, self-NMI), reported through the harness. Exit 0 iff everything passed. */
#include "kit.h"

static int ud_hook(struct trap_frame *f)
{
	f->rip += 2; /* skip the ud2 */
	return 1;
}

static volatile int timer_ticks;
static void timer_irq(struct trap_frame *f) { timer_ticks++; }

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

static void test_lapic(void)
{
	report_prefix_push("lapic");
	report(lapic_id() == smp_processor_id(), "apic id %u == vcpu index", lapic_id());
	lapic_enable();
	set_irq_handler(0x40, timer_irq);
	lapic_timer_start(0x40, 100000, 0);
	for (int i = 0; i < 1000 && !timer_ticks; i++)
		safe_halt();
	cli();
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
	return report_summary();
}
