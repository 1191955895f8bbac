/* printf-style formatting: %d %i %u %x %X %o %p %s %c %%, flags '-' '0' '#', width,
 * precision for %s, and the h/l/ll/z length modifiers. No floating point. */
#include <stdarg.h>
#include <stdint.h>
#include "serial.h"

struct spec { int left, zero, alt, width, prec; };

static int emit_pad(void (*out)(char, void *), void *ctx, char c, int n)
{
	for (int i = 0; i < n; i++)
		out(c, ctx);
	return n > 0 ? n : 0;
}

static int emit_str(void (*out)(char, void *), void *ctx, const char *s, int len,
		    const struct spec *sp)
{
	int n = 0, pad = sp->width - len;
	if (!sp->left)
		n += emit_pad(out, ctx, ' ', pad);
	for (int i = 0; i < len; i++)
		out(s[i], ctx);
	n += len;
	if (sp->left)
		n += emit_pad(out, ctx, ' ', pad);
	return n;
}

static int emit_num(void (*out)(char, void *), void *ctx, uint64_t v, int neg, unsigned base,
		    int upper, const char *prefix, const struct spec *sp)
{
	const char *digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
	char buf[24];
	int len = 0, n = 0, plen = 0;
	do {
		buf[len++] = digits[v % base];
		v /= base;
	} while (v);
	if (neg)
		prefix = "-";
	while (prefix && prefix[plen])
		plen++;
	int pad = sp->width - len - plen;
	if (!sp->left && !sp->zero)
		n += emit_pad(out, ctx, ' ', pad);
	for (int i = 0; i < plen; i++)
		out(prefix[i], ctx);
	n += plen;
	if (!sp->left && sp->zero)
		n += emit_pad(out, ctx, '0', pad);
	for (int i = len - 1; i >= 0; i--)
		out(buf[i], ctx);
	n += len;
	if (sp->left)
		n += emit_pad(out, ctx, ' ', pad);
	return n;
}

int vformat(void (*out)(char c, void *ctx), void *ctx, const char *fmt, va_list ap)
{
	int n = 0;
	for (; *fmt; fmt++) {
		if (*fmt != '%') {
			out(*fmt, ctx);
			n++;
			continue;
		}
		struct spec sp = { 0, 0, 0, 0, -1 };
		for (;; fmt++) {
			if (fmt[1] == '-')
				sp.left = 1;
			else if (fmt[1] == '#')
				sp.alt = 1;
			else if (fmt[1] == '0')
				sp.zero = 1;
			else
				break;
		}
		if (fmt[1] == '*') {
			sp.width = va_arg(ap, int);
			fmt++;
		}
		while (fmt[1] >= '0' && fmt[1] <= '9')
			sp.width = sp.width * 10 + (*++fmt - '0');
		if (fmt[1] == '.') {
			fmt++;
			sp.prec = 0;
			while (fmt[1] >= '0' && fmt[1] <= '9')
				sp.prec = sp.prec * 10 + (*++fmt - '0');
		}
		int lng = 0; /* 0 int, 1 long, 2 long long; longs are 64-bit, as is size_t */
		while (fmt[1] == 'l' || fmt[1] == 'z' || fmt[1] == 'h') {
			if (fmt[1] != 'h')
				lng++;
			fmt++;
		}
		fmt++;
		if (!*fmt)
			break;
		uint64_t u;
		int64_t s;
		switch (*fmt) {
		case 'd':
		case 'i':
			s = lng ? va_arg(ap, long long) : va_arg(ap, int);
			u = s < 0 ? -(uint64_t)s : (uint64_t)s;
			n += emit_num(out, ctx, u, s < 0, 10, 0, 0, &sp);
			break;
		case 'u':
		case 'x':
		case 'X':
		case 'o':
			u = lng ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned int);
			/* '#': 0x / 0X / 0 prefix for nonzero hex and octal, as in C. */
			n += emit_num(out, ctx, u, 0, *fmt == 'u' ? 10 : *fmt == 'o' ? 8 : 16,
				      *fmt == 'X', sp.alt && u && *fmt != 'u' ? (*fmt == 'x' ? "0x" : *fmt == 'X' ? "0X" : "0") : 0, &sp);
			break;
		case 'p':
			u = (uintptr_t)va_arg(ap, void *);
			n += emit_num(out, ctx, u, 0, 16, 0, "0x", &sp);
			break;
		case 'c': {
			char c = (char)va_arg(ap, int);
			n += emit_str(out, ctx, &c, 1, &sp);
			break;
		}
		case 's': {
			const char *str = va_arg(ap, const char *);
			int len = 0;
			if (!str)
				str = "(null)";
			while (str[len] && (sp.prec < 0 || len < sp.prec))
				len++;
			n += emit_str(out, ctx, str, len, &sp);
			break;
		}
		case '%':
			out('%', ctx);
			n++;
			break;
		default: /* unknown conversion: show it as written */
			out('%', ctx);
			out(*fmt, ctx);
			n += 2;
		}
	}
	return n;
}

struct sbuf { char *p; size_t left; };

static void sbuf_out(char c, void *ctx)
{
	struct sbuf *b = ctx;
	if (b->left > 1) {
		*b->p++ = c;
		b->left--;
	}
}

int vsnprintf(char *buf, size_t size, const char *fmt, va_list ap)
{
	struct sbuf b = { buf, size };
	int n = vformat(sbuf_out, &b, fmt, ap);
	if (size)
		*b.p = 0;
	return n;
}

int snprintf(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	return n;
}
