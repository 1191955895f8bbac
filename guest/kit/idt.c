/* The shared IDT and the C side of every trap: expected-fault fixups, exception hooks,
 * NMI, interrupt handlers, and the "unexpected exception" report. */
#include "kit.h"

struct idt_gate {
	uint16_t off_lo, selector;
	uint8_t ist, type;
	uint16_t off_mid;
	uint32_t off_hi, reserved;
} __attribute__((packed));

struct ex_entry { uint64_t insn, fixup; };

/* What an expected fault left for its vCPU (see exception_vector()). */
struct ex_record { int vector; uint64_t error_code, rip; };

extern char trap_stubs[];
extern const struct ex_entry __ex_table_start[], __ex_table_end[];

static struct idt_gate idt[256] __attribute__((aligned(16)));
static exception_hook_t hooks[32];
static irq_handler_t irq_handlers[256];
static struct ex_record ex_records[PERFVM_MAX_VCPUS];
volatile unsigned long nmi_count;

/* Interrupt gate (type 0xE, present, DPL 0) to `a`: IF is cleared on entry. */
static void set_gate_to(int vector, uint64_t a)
{
	struct idt_gate g = {
		.off_lo = a & 0xffff, .selector = 0x08, .ist = 0, .type = 0x8e,
		.off_mid = (a >> 16) & 0xffff, .off_hi = a >> 32, .reserved = 0,
	};
	idt[vector] = g;
}

static void set_gate(int vector)
{
	set_gate_to(vector, (uint64_t)(uintptr_t)trap_stubs + 16 * (uint64_t)vector);
}

void set_raw_gate(int vector, const void *entry)
{
	if (entry)
		set_gate_to(vector, (uint64_t)(uintptr_t)entry);
	else
		set_gate(vector);
}

/* Only the exception gates; gates 32-255 appear with set_irq_handler, so a stray
 * interrupt on an unclaimed vector faults (#GP) visibly instead of vanishing. */
void idt_init(void)
{
	for (int v = 0; v < 32; v++)
		set_gate(v);
}

void idt_load(void)
{
	struct { uint16_t limit; uint64_t base; } __attribute__((packed)) d = {
		sizeof(idt) - 1, (uint64_t)(uintptr_t)idt,
	};
	asm volatile("lidt %0" : : "m"(d) : "memory");
}

void set_exception_hook(int vector, exception_hook_t hook)
{
	if (vector >= 0 && vector < 32)
		hooks[vector] = hook;
}

void set_irq_handler(int vector, irq_handler_t fn)
{
	if (vector < 32 || vector > 255)
		return;
	irq_handlers[vector] = fn;
	set_gate(vector);
}

__attribute__((weak)) void nmi_handler(struct trap_frame *f)
{
	(void)f;
	__atomic_fetch_add(&nmi_count, 1, __ATOMIC_RELAXED);
}

void exception_clear(void) { ex_records[smp_processor_id()].vector = -1; }
int exception_vector(void) { return ((volatile struct ex_record *)&ex_records[smp_processor_id()])->vector; }
uint64_t exception_error_code(void) { return ex_records[smp_processor_id()].error_code; }
uint64_t exception_rip(void) { return ex_records[smp_processor_id()].rip; }

/* A fault on an instruction listed in .ex_table resumes at its fixup. */
static int ex_fixup(struct trap_frame *f)
{
	for (const struct ex_entry *e = __ex_table_start; e < __ex_table_end; e++) {
		if (e->insn == f->rip) {
			struct ex_record *r = &ex_records[smp_processor_id()];
			r->vector = (int)f->vector;
			r->error_code = f->error_code;
			r->rip = f->rip;
			f->rip = e->fixup;
			return 1;
		}
	}
	return 0;
}

static void __attribute__((noreturn)) unexpected(struct trap_frame *f, const char *what)
{
	console_lock();
	printf("unexpected %s: vector=%lu error=0x%lx rip=0x%lx\n", what, f->vector, f->error_code, f->rip);
	printf("  vcpu=%u cs=0x%lx rflags=0x%lx rsp=0x%lx cr2=0x%lx\n", smp_processor_id(), f->cs,
	       f->rflags, f->rsp, fault_cr2());
	printf("  rax=0x%lx rbx=0x%lx rcx=0x%lx rdx=0x%lx rsi=0x%lx rdi=0x%lx rbp=0x%lx\n", f->rax,
	       f->rbx, f->rcx, f->rdx, f->rsi, f->rdi, f->rbp);
	exit(3);
}

void trap_dispatch(struct trap_frame *f);
void trap_dispatch(struct trap_frame *f)
{
	unsigned v = (unsigned)f->vector;
	/* An NMI (e.g. a PMI) is not a fault of the instruction at f->rip: no .ex_table fixup,
	 * or one landing just before an rdmsr_safe would skip it. */
	if (v == NMI_VECTOR) {
		if (!hooks[v] || !hooks[v](f))
			nmi_handler(f);
		return;
	}
	if (v < 32) {
		if (ex_fixup(f))
			return;
		if (hooks[v] && hooks[v](f))
			return;
		unexpected(f, "exception");
	}
	if (irq_handlers[v]) {
		irq_handlers[v](f);
		lapic_eoi();
		return;
	}
	if (v == SPURIOUS_VECTOR) /* spurious LAPIC interrupts take no EOI */
		return;
	unexpected(f, "interrupt");
}
