/*
 * twofunc [K]: a two-function profile target. hot() runs 3*K iterations and cold() K
 * iterations of the same 3-instruction loop, each in its own body, so of the instructions
 * in the two functions hot has 75% and cold 25% (each call adds a few instructions of its
 * own). Both are noinline with frame pointers, for `perf record [-g]` and `perf report`.
 * Default K: 20,000,000 (2.4e8 loop instructions, tens of ms natively).
 */
#include "linux.h"

/* add, dec, jnz: 3 instructions per iteration, n >= 1 */
#define LOOP3(x, n) __asm__ volatile("1: add %1, %0\n\tdec %1\n\tjnz 1b" : "+r"(x), "+r"(n) : : "cc")

unsigned long __attribute__((noinline)) hot(unsigned long k)
{
    unsigned long x = 1, n = 3 * k;
    LOOP3(x, n);
    return x;
}

unsigned long __attribute__((noinline)) cold(unsigned long k)
{
    unsigned long x = 2, n = k;
    LOOP3(x, n);
    return x;
}

static int main(long argc, char **argv)
{
    unsigned long k = parse_u64(argc > 1 ? argv[1] : 0, 20000000);
    if (k == 0)
        k = 1;
    unsigned long sum = hot(k) + cold(k);
    put("twofunc: hot ");
    put_u64(3 * k);
    put(" iterations, cold ");
    put_u64(k);
    put(" iterations (3 instructions each), checksum ");
    put_u64(sum);
    put("\n");
    return 0;
}

void __attribute__((noreturn, used)) start_c(long *sp)
{
    sys_exit(main(sp[0], (char **)(sp + 1)));
}

__asm__(
    "    .text\n"
    "    .globl _start\n"
    "_start:\n"
    "    xor %ebp, %ebp\n"
    "    mov %rsp, %rdi\n"
    "    and $-16, %rsp\n"
    "    call start_c\n");
