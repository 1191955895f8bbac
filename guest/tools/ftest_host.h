/* Host shim for build/host/ftest (`make ftest-profile`, `perfvm bench rate`): ftest.c is built as an ordinary Linux program, so
 * it takes printf/strtoul from the host libc instead of the kit. Declared by hand because
 * the libc headers would also declare random()/random_r(), which ftest defines itself. */
int printf(const char *fmt, ...);
unsigned long strtoul(const char *s, char **end, int base);
static inline unsigned long long rdtsc(void)
{
	unsigned lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return (unsigned long long)hi << 32 | lo;
}
