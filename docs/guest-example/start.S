/* Entry: perfvm starts every vCPU in 64-bit mode here with RDI = vCPU index, RSI = boot
 * info and no stack. vCPU 0 takes a stack and runs main(); the others wait. */
	.section .text.entry, "ax"
	.globl _start
	.type _start, @function
_start:
	test %edi, %edi
	jnz 2f
	lea stack_top(%rip), %rsp
	call main
2:	pause
	jmp 2b

	.section .bss
	.balign 16
	.space 16384
stack_top:

/* The perfvm VIF note (guest/include/abi/perfvm_boot.h): this guest never touches the interrupt
 * flag, so it follows the native-mode convention as it is, and `--native auto` may run it
 * natively. Owner "perfvm", type 0x100, version 1. */
	.section .note.perfvm, "a", @note
	.balign 4
	.long 7, 4, 0x100
	.asciz "perfvm"
	.balign 4
	.long 1

	.section .note.GNU-stack, "", @progbits
