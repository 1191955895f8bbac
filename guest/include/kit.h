/* Everything a guest needs: include this one header. */
#ifndef KIT_H
#define KIT_H
#include <stdint.h>
#include <stddef.h>
#include "perfvm_boot.h"
#include "x86.h"
#include "smp.h"
#include "serial.h"
#include "trap.h"
#include "lapic.h"
#include "harness.h"
#include "libc.h"
#include "fw_cfg.h"

/* The guest's program; its return value goes to exit(). Runs on vCPU 0. */
int main(int argc, char **argv);
/* What the other vCPUs run (weak; the default halts with interrupts off). */
void ap_main(unsigned idx);

/* 0: "Shutdown" to port 0x8900 (VM status 0); else outb(0xf4, code): status (code<<1)|1. */
void exit(int code) __attribute__((noreturn));

/* Boot info from the VMM (NULL if its magic was wrong) and the values taken from it. */
extern struct perfvm_boot_info *boot_info;
extern uint64_t mem_size;
extern uint64_t tsc_khz;

#endif
