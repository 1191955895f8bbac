/* IDT, exception hooks, interrupt handlers and fault-tolerant MSR/PMC access. */
#ifndef KIT_TRAP_H
#define KIT_TRAP_H
#include <stdint.h>

/* What the vector stubs (kit/vectors.S) push, lowest address first. */
struct trap_frame {
	uint64_t r15, r14, r13, r12, r11, r10, r9, r8;
	uint64_t rbp, rdi, rsi, rdx, rcx, rbx, rax;
	uint64_t vector, error_code; /* error_code is 0 for vectors without one */
	uint64_t rip, cs, rflags, rsp, ss;
};

enum {
	DE_VECTOR = 0, DB_VECTOR = 1, NMI_VECTOR = 2, BP_VECTOR = 3, UD_VECTOR = 6,
	DF_VECTOR = 8, GP_VECTOR = 13, PF_VECTOR = 14, SPURIOUS_VECTOR = 0xff,
};

typedef int (*exception_hook_t)(struct trap_frame *f);
typedef void (*irq_handler_t)(struct trap_frame *f);

/* Vectors 0-31: the hook runs before the "unexpected exception" path; it returns nonzero
 * if it handled the exception (it may advance f->rip past the faulting instruction). */
void set_exception_hook(int vector, exception_hook_t hook);
/* Vectors 32-255: installs the IDT gate too. The kit sends the LAPIC EOI after fn returns. */
void set_irq_handler(int vector, irq_handler_t fn);
/* Point `vector`'s gate at raw code that ends in iretq (no kit stub, no EOI); NULL restores
 * the kit's stub. For tests that count the instructions of a handler. */
void set_raw_gate(int vector, const void *entry);

/* NMI (vector 2) without a hook goes here; the default just counts into nmi_count. */
void nmi_handler(struct trap_frame *f);
extern volatile unsigned long nmi_count;

void idt_init(void);  /* build the shared IDT (vCPU 0, once) */
void idt_load(void);  /* lidt on this vCPU */

/*
 * kvm-unit-tests style expected faults: an instruction listed in .ex_table that faults
 * resumes at its fixup address and the vector is recorded for this vCPU instead of
 * killing the guest. Use as:  asm("1: insn\n2:\n" EX_TABLE("1b", "2b") ...)
 * after clearing the record with exception_clear().
 */
#define EX_TABLE(insn, fixup) \
	".pushsection .ex_table, \"a\"\n\t.balign 8\n\t.quad " insn ", " fixup "\n\t.popsection\n\t"

void exception_clear(void);
int exception_vector(void);          /* -1 if nothing faulted since exception_clear */
uint64_t exception_error_code(void);
uint64_t exception_rip(void);        /* rip of the faulting instruction */

int rdmsr_safe(uint32_t msr, uint64_t *val); /* 0, or -1 if rdmsr faulted */
int wrmsr_safe(uint32_t msr, uint64_t val);
int rdpmc_safe(uint32_t counter, uint64_t *val);

#endif
