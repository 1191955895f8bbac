/* Serial output, fw_cfg and exit for the 32-bit multiboot guests. */
#include <stdarg.h>
#include "mbkit.h"

static volatile int console_locked;

static void putc_serial(char c)
{
	while (!(inb(PERFVM_PORT_SERIAL + 5) & 0x20)) /* LSR: transmitter empty */
		pause();
	outb(PERFVM_PORT_SERIAL, (uint8_t)c);
}

static void put_num(uint32_t v, unsigned base, int width, char pad)
{
	char buf[12];
	int n = 0;
	do {
		buf[n++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	while (width-- > n)
		putc_serial(pad);
	while (n)
		putc_serial(buf[--n]);
}

void mb_printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	while (__atomic_exchange_n(&console_locked, 1, __ATOMIC_ACQUIRE)) /* APs print too */
		pause();
	for (; *fmt; fmt++) {
		if (*fmt != '%') {
			putc_serial(*fmt);
			continue;
		}
		char pad = ' ';
		int width = 0;
		if (fmt[1] == '0')
			pad = '0', fmt++;
		while (fmt[1] >= '0' && fmt[1] <= '9')
			width = width * 10 + (*++fmt - '0');
		switch (*++fmt) {
		case 's':
			for (const char *s = va_arg(ap, const char *); s && *s; s++)
				putc_serial(*s);
			break;
		case 'c':
			putc_serial((char)va_arg(ap, int));
			break;
		case 'd': {
			int v = va_arg(ap, int);
			if (v < 0)
				putc_serial('-'), v = -v;
			put_num((uint32_t)v, 10, width, pad);
			break;
		}
		case 'u':
			put_num(va_arg(ap, uint32_t), 10, width, pad);
			break;
		case 'x':
			put_num(va_arg(ap, uint32_t), 16, width, pad);
			break;
		case 0:
			fmt--;
			break;
		default:
			putc_serial(*fmt);
		}
	}
	__atomic_store_n(&console_locked, 0, __ATOMIC_RELEASE);
	va_end(ap);
}

void fw_cfg_read(uint16_t key, void *buf, unsigned len)
{
	uint8_t *p = buf;
	outw(PERFVM_PORT_FW_CFG_SEL, key);
	for (unsigned i = 0; i < len; i++)
		p[i] = inb(PERFVM_PORT_FW_CFG_DAT);
}

void mb_exit(int code)
{
	if (code == 0) {
		for (const char *s = "Shutdown"; *s; s++)
			outb(PERFVM_PORT_SHUTDOWN, *s);
	} else {
		outb(PERFVM_PORT_DEBUG_EXIT, code);
	}
	for (;;)
		asm volatile("cli; hlt");
}
