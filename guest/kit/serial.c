/* Console on the 16550 UART at 0x3f8: polled output, one lock for all vCPUs. */
#include "kit.h"

#define COM1 PERFVM_PORT_SERIAL
#define LSR_THRE 0x20 /* transmit holding register empty */

/* Recursive so that a fault while printing can still report itself. */
static struct spinlock lock;
static volatile int owner = -1;
static int depth;

void console_lock(void)
{
	int me = (int)smp_processor_id();
	if (owner == me) {
		depth++;
		return;
	}
	spin_lock(&lock);
	owner = me;
	depth = 1;
}

void console_unlock(void)
{
	if (--depth == 0) {
		owner = -1;
		spin_unlock(&lock);
	}
}

void serial_init(void)
{
	outb(COM1 + 1, 0x00); /* no UART interrupts: we poll */
	outb(COM1 + 3, 0x03); /* 8N1, DLAB off */
}

static void serial_putc(char c)
{
	while (!(inb(COM1 + 5) & LSR_THRE))
		pause();
	outb(COM1, (uint8_t)c);
}

static void out_serial(char c, void *ctx)
{
	(void)ctx;
	serial_putc(c);
}

int putchar(int c)
{
	console_lock();
	serial_putc((char)c);
	console_unlock();
	return (unsigned char)c;
}

int puts(const char *s)
{
	console_lock();
	while (*s)
		serial_putc(*s++);
	serial_putc('\n');
	console_unlock();
	return 0;
}

int vprintf(const char *fmt, va_list ap)
{
	console_lock();
	int n = vformat(out_serial, 0, fmt, ap);
	console_unlock();
	return n;
}

int printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vprintf(fmt, ap);
	va_end(ap);
	return n;
}
