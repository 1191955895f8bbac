/* Real-mode AP start code for mbsmp. mbsmp copies [mb_tramp_start, mb_tramp_end) to
 * TRAMP_ADDR and sends SIPI vector TRAMP_ADDR >> 12, so the AP starts here with
 * CS:IP = 0x0700:0000. It loads its own flat GDT, enters 32-bit protected mode and calls
 * mb_ap_main on mb_ap_stack_top. Addresses are absolute: ds = 0 and the code is copied. */
#define TRAMP_ADDR 0x7000
#define ABS(sym) (TRAMP_ADDR + ((sym) - mb_tramp_start))

	.section .rodata, "a"
	.globl mb_tramp_start, mb_tramp_end
	.code16
mb_tramp_start:
	cli
	xor %ax, %ax
	mov %ax, %ds
	lgdtl ABS(tramp_gdtr)
	mov %cr0, %eax
	or $1, %eax                  /* CR0.PE */
	mov %eax, %cr0
	ljmpl $0x08, $ABS(tramp_pm)

	.code32
tramp_pm:
	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	mov %ax, %fs
	mov %ax, %gs
	mov $mb_ap_stack_top, %esp
	mov $mb_ap_main, %eax        /* absolute: this code runs away from where it was linked */
	call *%eax
1:	cli
	hlt
	jmp 1b

	.balign 8
tramp_gdt:
	.quad 0
	.quad 0x00cf9a000000ffff     /* 0x08: flat 32-bit code */
	.quad 0x00cf92000000ffff     /* 0x10: flat data */
tramp_gdtr:
	.word tramp_gdtr - tramp_gdt - 1
	.long ABS(tramp_gdt)
mb_tramp_end:

	.bss
	.balign 16
	.skip 4096
	.globl mb_ap_stack_top
mb_ap_stack_top:

	.section .note.GNU-stack, "", @progbits /* no executable stack */
