/* kvm-unit-tests style reporting: PASS/FAIL/SKIP lines and a final summary line. */
#include "kit.h"

#define MAX_PREFIXES 8
static const char *prefixes[MAX_PREFIXES];
static int nr_prefixes;
static unsigned passed, failed, skipped;

void report_prefix_push(const char *prefix)
{
	if (nr_prefixes < MAX_PREFIXES)
		prefixes[nr_prefixes] = prefix;
	nr_prefixes++;
}

void report_prefix_pop(void)
{
	if (nr_prefixes > 0)
		nr_prefixes--;
}

static void vreport(const char *tag, const char *fmt, va_list ap)
{
	console_lock();
	printf("%s: ", tag);
	for (int i = 0; i < nr_prefixes && i < MAX_PREFIXES; i++)
		printf("%s: ", prefixes[i]);
	vprintf(fmt, ap);
	putchar('\n');
	console_unlock();
}

int report(int pass, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport(pass ? "PASS" : "FAIL", fmt, ap);
	va_end(ap);
	__atomic_fetch_add(pass ? &passed : &failed, 1, __ATOMIC_RELAXED);
	return pass;
}

void report_skip(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport("SKIP", fmt, ap);
	va_end(ap);
	__atomic_fetch_add(&skipped, 1, __ATOMIC_RELAXED);
}

void report_info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vreport("INFO", fmt, ap);
	va_end(ap);
}

int report_summary(void)
{
	if (skipped)
		printf("%u passed, %u failed, %u skipped\n", passed, failed, skipped);
	else
		printf("%u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
