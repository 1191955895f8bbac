/* Console output on the 16550 at 0x3f8, serialized across vCPUs. */
#ifndef KIT_SERIAL_H
#define KIT_SERIAL_H
#include <stdarg.h>
#include <stddef.h>

#define KIT_PRINTF(f, a) __attribute__((format(printf, f, a)))

void serial_init(void);
int putchar(int c);
int puts(const char *s); /* appends '\n', as in C */
int printf(const char *fmt, ...) KIT_PRINTF(1, 2);
int vprintf(const char *fmt, va_list ap);
int snprintf(char *buf, size_t size, const char *fmt, ...) KIT_PRINTF(3, 4);
int vsnprintf(char *buf, size_t size, const char *fmt, va_list ap);

/* Hold the console across several printf calls so lines of different vCPUs do not
 * interleave. Recursive on one vCPU, so a fault inside printf can still print. */
void console_lock(void);
void console_unlock(void);

/* The formatter behind printf/snprintf: calls out(c, ctx) per character. */
int vformat(void (*out)(char c, void *ctx), void *ctx, const char *fmt, va_list ap);

#endif
