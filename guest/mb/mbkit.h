/* The 32-bit mini kit for multiboot guests (entered in protected mode, paging off).
 * Deliberately separate from the 64-bit kit: just serial output, fw_cfg and exit. */
#ifndef MBKIT_H
#define MBKIT_H
#include <stdint.h>
#include "perfvm_boot.h"

#define MULTIBOOT_BOOTLOADER_MAGIC 0x2badb002u
#define MB_INFO_MEMORY  (1u << 0)
#define MB_INFO_CMDLINE (1u << 2)

/* The start of the multiboot v1 information structure. */
struct multiboot_info {
	uint32_t flags;
	uint32_t mem_lower, mem_upper; /* KiB below 1 MiB / above 1 MiB */
	uint32_t boot_device;
	uint32_t cmdline;              /* physical address of a C string */
};

static inline void outb(uint16_t port, uint8_t v) { asm volatile("outb %0, %1" : : "a"(v), "Nd"(port)); }
static inline void outw(uint16_t port, uint16_t v) { asm volatile("outw %0, %1" : : "a"(v), "Nd"(port)); }
static inline uint8_t inb(uint16_t port)
{
	uint8_t v;
	asm volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
	return v;
}
static inline void pause(void) { asm volatile("pause" : : : "memory"); }

/* printf subset: %s %c %d %u %x %% with optional zero-padded width, 32-bit values only. */
void mb_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fw_cfg_read(uint16_t key, void *buf, unsigned len);
/* Same convention as the 64-bit kit: 0 = shutdown port, else isa-debug-exit. */
void mb_exit(int code) __attribute__((noreturn));

/* Provided by the guest: the multiboot entry after the stack is set. Returns the exit code. */
int mb_main(uint32_t magic, struct multiboot_info *mbi);

#endif
