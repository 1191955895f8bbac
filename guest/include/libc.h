/* The few libc string functions the kit provides (plain loops, no rep prefixes). */
#ifndef KIT_LIBC_H
#define KIT_LIBC_H
#include <stddef.h>

void *memset(void *s, int c, size_t n);
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);
int strncmp(const char *a, const char *b, size_t n);
char *strchr(const char *s, int c);
/* base 0 accepts 0x.. hex, 0.. octal and decimal, as in C. */
unsigned long strtoul(const char *s, char **end, int base);
/* Whether one of argv[1..argc) is exactly `word`. */
int has_arg(int argc, char **argv, const char *word);
long strtol(const char *s, char **end, int base);

#endif
