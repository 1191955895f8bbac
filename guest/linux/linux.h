/* Raw Linux x86-64 syscalls and a tiny number printer for the kit's static programs. */
#ifndef PERFVM_LINUX_H
#define PERFVM_LINUX_H

static inline long sys3(long nr, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return ret;
}

static inline void __attribute__((noreturn)) sys_exit(int status)
{
    for (;;)
        sys3(60, status, 0, 0);
}

static inline void put(const char *s)
{
    long n = 0;
    while (s[n])
        n++;
    sys3(1, 1, (long)s, n);
}

static inline void put_u64(unsigned long v)
{
    char buf[24];
    int i = sizeof(buf) - 1;
    buf[i] = 0;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i > 0);
    put(&buf[i]);
}

static inline unsigned long parse_u64(const char *s, unsigned long fallback)
{
    unsigned long v = 0;
    if (!s || *s < '0' || *s > '9')
        return fallback;
    while (*s >= '0' && *s <= '9')
        v = v * 10 + (unsigned long)(*s++ - '0');
    return v;
}

#endif
