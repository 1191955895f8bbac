/* One 16-byte stub per IDT vector, so the gate for vector v is trap_stubs + 16*v.
 * Each stub pushes a dummy error code when the CPU does not push one, then the vector,
 * and joins trap_common, which saves the GPRs as a struct trap_frame (trap.h). */

	.text
	.balign 16
	.globl trap_stubs
	.type trap_stubs, @function
trap_stubs:
	.set vec, 0
	.rept 256
	.balign 16
	/* Exceptions that push an error code: #DF #TS #NP #SS #GP #PF #AC #CP #VC #SX. */
	.if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
	.else
	pushq $0
	.endif
	pushq $vec
	jmp trap_common
	.set vec, vec + 1
	.endr
	.size trap_stubs, . - trap_stubs

/* The CPU aligned RSP to 16 before its 5-6 word frame; with error code, vector and 15
 * GPRs the frame is 22 words, so RSP is 16-byte aligned at the call as the ABI wants. */
	.type trap_common, @function
trap_common:
	push %rax
	push %rbx
	push %rcx
	push %rdx
	push %rsi
	push %rdi
	push %rbp
	push %r8
	push %r9
	push %r10
	push %r11
	push %r12
	push %r13
	push %r14
	push %r15
	mov %rsp, %rdi
	call trap_dispatch
	pop %r15
	pop %r14
	pop %r13
	pop %r12
	pop %r11
	pop %r10
	pop %r9
	pop %r8
	pop %rbp
	pop %rdi
	pop %rsi
	pop %rdx
	pop %rcx
	pop %rbx
	pop %rax
	add $16, %rsp                /* vector and error code */
	iretq
	.size trap_common, . - trap_common

	.section .note.GNU-stack, "", @progbits /* no executable stack */
