/* Entry of every vCPU (perfvm_boot.h): long mode, RDI = vCPU index, RSI = boot info,
 * RSP = 0. Give each vCPU its own stack, then run kit_start(idx, boot_info) in C. */
#include "perfvm_boot.h"

#define STACK_SHIFT 14 /* 16 KiB per vCPU; must match KIT_STACK_SHIFT in smp.h */

	.section .text.entry, "ax"
	.globl _start
	.type _start, @function
_start:
	/* No cli: the VMM starts every vCPU with IF = 0 (and natively vif.if_ = 0); a real cli
	 * would be a privileged instruction the host emulates in native mode. */
	cmp $PERFVM_MAX_VCPUS, %edi
	jae 2f                       /* no stack for this vCPU: park it */
	mov %edi, %eax               /* zero-extends */
	inc %rax
	shl $STACK_SHIFT, %rax
	lea kit_cpu_stk(%rax), %rsp  /* top of stack idx */
	xor %ebp, %ebp               /* ends frame-pointer backtraces */
	call kit_start               /* does not return */
2:	hlt                          /* interrupts are off (IF = 0, vif.if_ = 0) */
	jmp 2b
	.size _start, . - _start

	.bss
	.balign 4096
	.globl kit_cpu_stk
kit_cpu_stk:
	.skip PERFVM_MAX_VCPUS << STACK_SHIFT
	.size kit_cpu_stk, . - kit_cpu_stk

	.section .note.GNU-stack, "", @progbits /* no executable stack */
