/* Multiboot v1 header and 32-bit entry: EAX = 0x2BADB002, EBX = multiboot info. */
#define MB_MAGIC 0x1badb002
#define MB_FLAGS 0x3 /* bit 0: page-align modules, bit 1: provide memory info */

	.section .multiboot, "a"
	.balign 4
	.long MB_MAGIC, MB_FLAGS, -(MB_MAGIC + MB_FLAGS)

	.text
	.globl mb_start
	.type mb_start, @function
mb_start:
	cli
	mov $mb_stack_top, %esp
	xor %ebp, %ebp
	push %ebx
	push %eax
	call mb_main
	push %eax
	call mb_exit
1:	hlt
	jmp 1b
	.size mb_start, . - mb_start

	.bss
	.balign 16
	.skip 16384
mb_stack_top:

	.section .note.GNU-stack, "", @progbits /* no executable stack */
