/*
 * loop N: a user-mode loop with an exactly known count, for `perf stat -e
 * instructions:u,branches:u /bin/loop N` inside a Linux guest. Prints nothing.
 *
 * The whole program is the assembly below (no libc, no compiler-generated code on the
 * path), so for N >= 1 given with d decimal digits (N = 0 runs as 1):
 *
 *   instructions:u = 2*N + 8*d + 14
 *   branches:u     = N + 2*d + 2   (+1 where SYSCALL counts as a branch, as in Intel's
 *                                   "all branches" event; see guest/linux/README.md)
 *
 * _start: 4 instructions (1 branch, jz not taken); each digit 8 (ja not taken, jmp taken:
 * 2 branches); the first non-digit 4 (ja taken: 1 branch); the clamp 3; the loop 2 per
 * iteration (dec, jnz: 1 branch); exit 3 (mov, xor, syscall). Checked with valgrind's
 * instruction count (guest/linux/README.md).
 */
__asm__(
    "    .text\n"
    "    .globl _start\n"
    "_start:\n"
    "    xor %eax, %eax\n"            /* n = 0 */
    "    mov 16(%rsp), %rsi\n"        /* argv[1], NULL when argc == 1 */
    "    test %rsi, %rsi\n"
    "    jz 3f\n"
    "1:  movzbl (%rsi), %edx\n"
    "    sub $48, %edx\n"
    "    cmp $9, %edx\n"
    "    ja 3f\n"                     /* not a digit: done */
    "    imul $10, %rax, %rax\n"
    "    add %rdx, %rax\n"
    "    inc %rsi\n"
    "    jmp 1b\n"
    "3:  cmp $1, %rax\n"              /* n = max(n, 1) without a branch */
    "    adc $0, %rax\n"
    "    mov %rax, %rcx\n"
    "2:  dec %rcx\n"
    "    jnz 2b\n"
    "    mov $60, %eax\n"             /* exit(0) */
    "    xor %edi, %edi\n"
    "    syscall\n");
