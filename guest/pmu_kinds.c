/*
 * pmu_arch's table of instruction kinds: what instructions and branches retire inside one
 * counting window, kind by kind, the way hardware counts them (docs/DESIGN.md, "Counting
 * as hardware counts"): the enabling WRMSR does not count, the disabling one does; every
 * instruction retires once (a REP string instruction too, whatever its iterations; one that
 * exits to the VMM too); exception and interrupt delivery are not instructions.
 *
 * Each window is: enable (not counted), the body, then `mov $GLOBAL_CTRL, %ecx; xor %eax,
 * %eax; xor %edx, %edx; wrmsr` (4 counted, 0 branches). PMC0 counts instructions, PMC1
 * branches. Exact backend: the counts must match; host hardware events: narrow ranges (a
 * software clock counts neither, and the table is skipped there).
 */
#include "kit.h"
#include "pmu.h"
#include "pmu_kinds.h"

#define TAIL_INSNS 4

/* A window whose body is the asm text `body`, clobbering what `clob` names. */
#define WINDOW(name, body, ...)                                                                   \
	static void name(void)                                                                    \
	{                                                                                         \
		uint32_t ecx = MSR_IA32_PERF_GLOBAL_CTRL, eax = 3, edx = 0;                       \
		asm volatile("wrmsr\n\t" body "\n\t"                                              \
			     "mov $0x38f, %%ecx\n\t"                                              \
			     "xor %%eax, %%eax\n\t"                                               \
			     "xor %%edx, %%edx\n\t"                                               \
			     "wrmsr\n\t"                                                          \
			     : "+c"(ecx), "+a"(eax), "+d"(edx)                                    \
			     :                                                                    \
			     : "memory", "cc", ##__VA_ARGS__);                                    \
	}

/* An unclaimed port: reads float high, writes are dropped (one exit each). */
#define IDLE_PORT "0xe0"

uint8_t kinds_copy_src[64], kinds_copy_dst[64];
volatile uint64_t kinds_scratch;

WINDOW(w_empty, "")
WINDOW(w_nop, "nop; nop; nop; nop; nop")
WINDOW(w_fences, "mfence; lfence; sfence")
WINDOW(w_issue12, "nop; nop; nop; nop; nop; mfence; lfence; sfence")
WINDOW(w_movxor, "mov %%rsp, %%rsi; xor %%esi, %%esi; mov $7, %%edi", "rsi", "rdi")
WINDOW(w_wrmsr, "mov $0xc4, %%ecx; xor %%eax, %%eax; xor %%edx, %%edx; wrmsr") /* PMC3 := 0 */
WINDOW(w_rdmsr, "mov $0xc4, %%ecx; rdmsr")
WINDOW(w_rep_movs, "lea kinds_copy_src(%%rip), %%rsi; lea kinds_copy_dst(%%rip), %%rdi; mov $64, %%ecx; "
		   ".byte 0xf3, 0xa4" /* rep movsb */, "rsi", "rdi")
WINDOW(w_rep_zero, "xor %%ecx, %%ecx; .byte 0xf3, 0xaa" /* rep stosb, no iteration */, "rdi")
WINDOW(w_cpuid, "xor %%eax, %%eax; cpuid", "rbx")
WINDOW(w_out, "out %%al, $" IDLE_PORT)
WINDOW(w_in, "in $" IDLE_PORT ", %%al")
WINDOW(w_int, "int $0xf1")
WINDOW(w_ud, "ud2")
WINDOW(w_call, "call 1f; jmp 2f; 1: ret; 2:")
WINDOW(w_jcc_taken, "xor %%esi, %%esi; jz 1f; nop; 1:", "rsi")
WINDOW(w_jcc_not_taken, "xor %%esi, %%esi; jnz 1f; nop; 1:", "rsi")
WINDOW(w_load_store, "mov kinds_scratch(%%rip), %%rsi; mov %%rsi, kinds_scratch(%%rip)", "rsi")

/* The raw handlers of the int and #UD windows: iretq alone, and skip ud2 then iretq. */
extern char kinds_iret[], kinds_skip_ud[];
asm(".pushsection .text\n"
    "kinds_iret: iretq\n"
    "kinds_skip_ud: addq $2, (%rsp)\n\tiretq\n"
    ".popsection");

static const struct kind {
	const char *name;
	void (*window)(void);
	unsigned insns, branches; /* the body's; the tail adds TAIL_INSNS instructions */
} kinds[] = {
	{ "empty window", w_empty, 0, 0 },
	{ "5 nop", w_nop, 5, 0 },
	{ "mfence, lfence, sfence", w_fences, 3, 0 },
	{ "5 nop, 3 fences", w_issue12, 8, 0 },
	{ "mov, xor, mov", w_movxor, 3, 0 },
	{ "load, store", w_load_store, 2, 0 },
	{ "wrmsr (exits)", w_wrmsr, 4, 0 },
	{ "rdmsr (exits)", w_rdmsr, 2, 0 },
	{ "rep movsb x64", w_rep_movs, 4, 0 },
	{ "rep stosb x0", w_rep_zero, 2, 0 },
	{ "cpuid", w_cpuid, 2, 0 },
	{ "out (exits)", w_out, 1, 0 },
	{ "in (exits)", w_in, 1, 0 },
	{ "int + iretq", w_int, 2, 2 },
	{ "#UD: handler add + iretq", w_ud, 2, 1 },
	{ "call, ret, jmp", w_call, 3, 3 },
	{ "jcc taken", w_jcc_taken, 2, 1 },
	{ "jcc not taken", w_jcc_not_taken, 3, 1 },
};

void check_instruction_kinds(const struct pmu_caps *caps, int exact)
{
	int insns = pmu_event_available(caps, EV_INSTRUCTIONS), branches = pmu_event_available(caps, EV_BRANCHES);
	report_prefix_push("kinds");
	if (!insns || !branches || caps->gp_counters < 2) {
		report_skip("instructions and branches on PMC0/PMC1 needed (not on this backend)");
		report_prefix_pop();
		return;
	}
	set_raw_gate(0xf1, kinds_iret);
	set_raw_gate(UD_VECTOR, kinds_skip_ud);
	for (unsigned k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		const struct kind *t = &kinds[k];
		uint64_t want_i = t->insns + TAIL_INSNS, want_b = t->branches;
		pmu_reset(caps);
		wrmsr(MSR_IA32_PERFEVTSEL0, evtsel(EV_INSTRUCTIONS, EVTSEL_OS | EVTSEL_EN));
		wrmsr(MSR_IA32_PERFEVTSEL0 + 1, evtsel(EV_BRANCHES, EVTSEL_OS | EVTSEL_EN));
		t->window();
		uint64_t got_i = rdmsr(MSR_IA32_PMC0), got_b = rdmsr(MSR_IA32_PMC0 + 1);
		if (exact)
			report(got_i == want_i && got_b == want_b, "%s: %llu instructions, %llu branches (expect %llu, %llu)",
			       t->name, (unsigned long long)got_i, (unsigned long long)got_b,
			       (unsigned long long)want_i, (unsigned long long)want_b);
		else
			/* Host hardware events (a host PMU): the WRMSR exits bound the window, so only
			 * a few instructions either side may differ from the rules. */
			report(got_i + 2 >= want_i && got_i <= want_i + 16 && got_b + 1 >= want_b && got_b <= want_b + 4,
			       "%s: %llu instructions, %llu branches (expect %llu, %llu, within the ranges)", t->name,
			       (unsigned long long)got_i, (unsigned long long)got_b, (unsigned long long)want_i,
			       (unsigned long long)want_b);
	}
	set_raw_gate(UD_VECTOR, 0);
	pmu_reset(caps);
	report_prefix_pop();
}
