/*
 * syscall_probe: how a host enters SYSCALL from (native) user mode, and perfvm's repair
 * (crates/vmm/src/syscall_entry.rs). Booted as a "Linux" kernel (wrapped in a bzImage by
 * crates/perfvm/tests/syscall_probe.rs) so perfvm treats it as one. It sets up a TSS, an
 * IDT with a #PF handler, STAR/LSTAR/FMASK like Linux, makes the entry's 2 MiB page
 * supervisor-only (as Linux's entry_SYSCALL_64 is), drops to user mode and makes a SYSCALL.
 * Exit status (isa-debug-exit, (v << 1) | 1): 17 = the entry ran with CS 0x08 (a correct
 * SYSCALL, or perfvm's repair); 199 = the #PF handler ran instead (this host without the
 * repair: it enters LSTAR at CPL 3 and the fetch faults).
 * Built with: gcc -c; ld -static -Ttext=0x100000 -Tdata=0x101000 --section-start=.entry=0x200000
 */
    .code64
    .globl _start
    .section .text
_start:
    lea kstack_top(%rip), %rsp
    /* TSS descriptor (64-bit available TSS) at GDT 0x30 */
    lea tss(%rip), %rax
    lea gdt(%rip), %rdi
    movw $103, 0x30(%rdi)          /* limit */
    mov %ax, 0x32(%rdi)            /* base 15:0 */
    mov %rax, %rcx
    shr $16, %rcx
    mov %cl, 0x34(%rdi)            /* base 23:16 */
    movb $0x89, 0x35(%rdi)         /* present, type 9 */
    movb $0, 0x36(%rdi)
    mov %rax, %rcx
    shr $24, %rcx
    mov %cl, 0x37(%rdi)            /* base 31:24 */
    shr $32, %rax
    mov %eax, 0x38(%rdi)           /* base 63:32 */
    lea kstack2_top(%rip), %rax
    mov %rax, tss+4(%rip)          /* RSP0 */
    lgdt gdt_desc(%rip)
    mov $0x30, %ax
    ltr %ax
    /* IDT gate 14 -> pf_handler */
    lea pf_handler(%rip), %rax
    lea idt(%rip), %rdi
    add $14*16, %rdi
    mov %ax, (%rdi)
    movw $0x08, 2(%rdi)
    movw $0x8e00, 4(%rdi)
    shr $16, %rax
    mov %ax, 6(%rdi)
    shr $16, %rax
    mov %eax, 8(%rdi)
    lidt idt_desc(%rip)
    /* the entry's 2 MiB page (0x200000) supervisor-only: clear U in PD[1] of the identity map */
    andq $~4, 0x4008
    mov $0xC0000081, %ecx          /* STAR */
    xor %eax, %eax
    mov $0x00180008, %edx
    wrmsr
    mov $0xC0000084, %ecx          /* FMASK */
    mov $0x200, %eax
    xor %edx, %edx
    wrmsr
    mov $0xC0000080, %ecx          /* EFER.SCE */
    rdmsr
    or $1, %eax
    wrmsr
    mov $0xC0000082, %ecx          /* LSTAR = 0x200000 (the VMM arms its breakpoint) */
    mov $0x200000, %eax
    xor %edx, %edx
    wrmsr
    lea ustack_top(%rip), %rbx
    pushq $0x23
    pushq %rbx
    pushq $0x2
    pushq $0x2b
    lea user_code(%rip), %rax
    pushq %rax
    iretq
user_code:
    mov $42, %eax
    syscall
    ud2
pf_handler:
    mov $99, %al                   /* a fault the VMM did not turn into the SYSCALL */
    out %al, $0xf4
    hlt
    .section .entry, "ax"
entry:
    mov %cs, %ax                   /* expect 0x08 */
    out %al, $0xf4
    hlt
    .section .data
    .align 16
gdt:
    .quad 0
    .quad 0x00af9a000000ffff    /* 0x08 kernel code64 */
    .quad 0x00cf92000000ffff    /* 0x10 kernel data */
    .quad 0x00cffa000000ffff    /* 0x18 user code32 */
    .quad 0x00cff2000000ffff    /* 0x20 user data */
    .quad 0x00affa000000ffff    /* 0x28 user code64 */
    .quad 0, 0                  /* 0x30 TSS */
gdt_end:
gdt_desc:
    .word gdt_end - gdt - 1
    .quad gdt
    .align 16
idt:
    .space 16*16
idt_end:
idt_desc:
    .word idt_end - idt - 1
    .quad idt
    .align 16
tss:
    .space 104
    .align 16
ustack:
    .space 512
ustack_top:
kstack:
    .space 512
kstack_top:
kstack2:
    .space 512
kstack2_top:
