/*
 * syscall_probe: how a host enters SYSCALL from (native) user mode, and perfvm's repair
 * (crates/vmm/src/host/pvm/syscall_entry.rs). Booted as a "Linux" kernel (wrapped in a bzImage by
 * crates/perfvm/tests/syscall_probe.rs) so perfvm treats it as one. Shaped like Linux: its
 * GDT (kernel CS 0x10, user CS 0x33), STAR/LSTAR/FMASK, a TSS, an IDT with a #PF handler, a
 * supervisor-only entry page, and an entry that does SWAPGS, switches to a per-CPU stack
 * and returns with SYSRETQ. User mode makes system calls until the entry has run three
 * times. Exit status (isa-debug-exit, (v << 1) | 1): 7 = three SYSCALLs entered at CS 0x10
 * and returned (a correct host, or perfvm's repair); 101 = the entry ran with another CS;
 * 199 = the #PF handler ran instead (this host without the repair: it enters LSTAR at CPL 3
 * and the fetch faults).
 * Built with: gcc -c; ld -static -Ttext=0x100000 -Tdata=0x101000 --section-start=.entry=0x200000
 */
    .code64
    .globl _start
    .section .text
_start:
    lea kstack_top(%rip), %rsp
    lea tss(%rip), %rax
    lea gdt(%rip), %rdi
    movw $103, 0x40(%rdi)
    mov %ax, 0x42(%rdi)
    mov %rax, %rcx
    shr $16, %rcx
    mov %cl, 0x44(%rdi)
    movb $0x89, 0x45(%rdi)
    movb $0, 0x46(%rdi)
    mov %rax, %rcx
    shr $24, %rcx
    mov %cl, 0x47(%rdi)
    shr $32, %rax
    mov %eax, 0x48(%rdi)
    lea kstack2_top(%rip), %rax
    mov %rax, tss+4(%rip)
    lgdt gdt_desc(%rip)
    /* reload CS=0x10, SS/DS=0x18 */
    mov $0x18, %ax
    mov %ax, %ss
    mov %ax, %ds
    mov %ax, %es
    lea 1f(%rip), %rax
    pushq $0x10
    pushq %rax
    lretq
1:
    mov $0x40, %ax
    ltr %ax
    lea pf_handler(%rip), %rax
    lea idt(%rip), %rdi
    add $14*16, %rdi
    mov %ax, (%rdi)
    movw $0x10, 2(%rdi)
    movw $0x8e00, 4(%rdi)
    shr $16, %rax
    mov %ax, 6(%rdi)
    shr $16, %rax
    mov %eax, 8(%rdi)
    lidt idt_desc(%rip)
    andq $~4, 0x4008
    /* KERNEL_GS_BASE = percpu */
    mov $0xC0000102, %ecx
    lea percpu(%rip), %rax
    mov %rax, %rdx
    shr $32, %rdx
    wrmsr
    lea kstack3_top(%rip), %rax
    mov %rax, percpu+16(%rip)
    mov $0xC0000081, %ecx
    xor %eax, %eax
    mov $0x00230010, %edx
    wrmsr
    mov $0xC0000084, %ecx
    mov $0x47700, %eax
    xor %edx, %edx
    wrmsr
    mov $0xC0000080, %ecx
    rdmsr
    or $1, %eax
    wrmsr
    mov $0xC0000082, %ecx
    mov $0x200000, %eax
    xor %edx, %edx
    wrmsr
    lea ustack_top(%rip), %rbx
    pushq $0x2b
    pushq %rbx
    pushq $0x202
    pushq $0x33
    lea user_code(%rip), %rax
    pushq %rax
    iretq
user_code:
    mov $42, %eax
    syscall
    jmp user_code
pf_handler:
    mov $99, %al
    out %al, $0xf4
    hlt
    .section .entry, "ax"
entry:
    swapgs
    mov %rsp, %gs:8
    mov %gs:16, %rsp
    push %rcx
    push %r11
    mov %cs, %ax
    cmp $0x10, %ax
    jne bad
    mov %gs:24, %eax
    inc %eax
    mov %eax, %gs:24
    cmp $3, %eax
    jae done
    pop %r11
    pop %rcx
    mov %gs:8, %rsp
    swapgs
    sysretq
done:
    out %al, $0xf4
    hlt
bad:
    mov $50, %al
    out %al, $0xf4
    hlt
    .section .data
    .align 16
gdt:
    .quad 0
    .quad 0x00cf9a000000ffff    /* 0x08 kernel code32 */
    .quad 0x00af9a000000ffff    /* 0x10 kernel code64 */
    .quad 0x00cf92000000ffff    /* 0x18 kernel data */
    .quad 0x00cffa000000ffff    /* 0x20 user code32 */
    .quad 0x00cff2000000ffff    /* 0x28 user data */
    .quad 0x00affa000000ffff    /* 0x30 user code64 */
    .quad 0                     /* 0x38 */
    .quad 0, 0                  /* 0x40 TSS */
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
percpu:
    .space 64
ustack:
    .space 512
ustack_top:
kstack:
    .space 512
kstack_top:
kstack2:
    .space 512
kstack2_top:
kstack3:
    .space 512
kstack3_top:
