/* Everything a guest needs: include this one header. */
#ifndef KIT_H
#define KIT_H
#include <stdint.h>
#include <stddef.h>
#include "perfvm_boot.h"
#include "perfvm_cpuid.h"
#include "x86.h"
#include "smp.h"
#include "irq.h"
#include "serial.h"
#include "trap.h"
#include "lapic.h"
#include "harness.h"
#include "libc.h"
#include "fw_cfg.h"

/* The guest's program; its return value goes to exit(). Runs on vCPU 0. */
int main(int argc, char **argv);
/* What the other vCPUs run (weak; the default parks: cpu_park). */
void ap_main(unsigned idx);

/* 0: "Shutdown" to port 0x8900 (VM status 0); else outb(0xf4, code): status (code<<1)|1. */
void exit(int code) __attribute__((noreturn));

/* Nonzero when the workload runs at host speed: native mode, and no exact backend that
 * single-steps counted code (boot info PERFVM_BOOT_F_STEPPED). Set by kit_start. */
extern int kit_full_speed;

/* A workload's default size for its speed: `emulated` (~1 us per instruction, or counted
 * exactly), `native` (host speed, natively or in hardware; docs/BACKENDS.md, "Native speed,
 * measured"), or KIT_BLOCKS_SCALE x `emulated` where the guest would run at full speed but
 * the exact backend counts it by blocks (boot info PERFVM_BOOT_F_BLOCKS: ~10x stepping's
 * rate, so a run lasts as long as the stepped emulated size did). */
#define KIT_BLOCKS_SCALE 10
extern unsigned long kit_blocks_scale; /* KIT_BLOCKS_SCALE there, else 1 (set by kit_start) */
static inline unsigned long kit_size(unsigned long emulated, unsigned long native)
{
	return (kit_full_speed ? native : emulated) * kit_blocks_scale; /* 1 at full speed */
}

/* A workload's size: argv[i] (strtoul base 0) when given, else kit_size(emulated, native). */
unsigned long size_arg(int argc, char **argv, int i, unsigned long emulated, unsigned long native);

/* Iterations of a busy-wait sized for the emulator (~10^6 instructions/s), scaled by 1000
 * when the vCPUs run at full speed (~10^9/s and more), so that it lasts about as long in real
 * time: for waits that end early on an event (a PMI) or must cover some real time. */
static inline unsigned long spin_iterations(unsigned long emulated)
{
	return kit_full_speed ? emulated * 1000 : emulated;
}

/* Boot info from the VMM (NULL if its magic was wrong) and the values taken from it. */
extern struct perfvm_boot_info *boot_info;
extern uint64_t mem_size;
extern uint64_t tsc_khz;

#endif
