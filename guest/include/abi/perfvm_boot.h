/*
 * The perfvm direct-boot protocol: the contract between the VMM (crates/vmm/src/arch/x86_64/boot.rs)
 * and guest kernels built from guest/. Keep both sides in step.
 *
 * Every vCPU starts in 64-bit long mode at the ELF entry point with:
 *   RDI = vCPU index (0 = bootstrap processor, APIC ID == index)
 *   RSI = guest-physical address of struct perfvm_boot_info (PERFVM_BOOT_INFO_ADDR)
 *   RSP = 0 (the guest picks its own per-vCPU stack), RFLAGS = 0x2 (interrupts off)
 *   CS = 0x08 (64-bit code), DS/ES/SS/FS/GS = 0x10 (flat data), GDT at PERFVM_GDT_ADDR.
 * Paging: identity map of the first 4 GiB with 2 MiB pages (covers RAM and the LAPIC
 * at 0xFEE00000). CR0.PE|PG, CR4.PAE, EFER.LME|LMA|NXE set.
 * Low memory below 0x100000 is RAM; the kernel image must not use 0x1000-0x1FFFF.
 *
 * Native mode (docs/DESIGN.md, "Native mode"): when boot_info.flags has PERFVM_BOOT_F_NATIVE,
 * every vCPU runs at host speed on this host's kvm_pvm VIF convention. vCPU i's VIF page
 * (struct perfvm_vif) is at vif_base + i * 4096, registered by the VMM before the first
 * instruction. The guest must then keep its interrupt flag in vif.if_ (never cli/sti or
 * pushf/popf for IF), read CR2 from vif.cr2, and after setting if_ = 1 with pending != 0 do
 * `out %al, $PERFVM_PORT_VIF_PENDING` so the host delivers what waited, and take CPUID
 * leaves from the table at cpuid_table (struct perfvm_cpuid_entry). A guest declares
 * that it follows the convention with the ELF note below; `--native auto` runs only such
 * guests natively.
 */
#ifndef PERFVM_BOOT_H
#define PERFVM_BOOT_H

#define PERFVM_GDT_ADDR        0x1000
#define PERFVM_PML4_ADDR       0x2000
#define PERFVM_BOOT_INFO_ADDR  0x9000
#define PERFVM_CMDLINE_ADDR    0x9800
#define PERFVM_CMDLINE_MAX     2048
#define PERFVM_BOOT_MAGIC      0x4d564650u /* "PFVM" little-endian */
#define PERFVM_BOOT_VERSION    2
#define PERFVM_MAX_VCPUS       8
#define PERFVM_VIF_BASE        0x10000 /* vCPU i's VIF page: PERFVM_VIF_BASE + i * 0x1000 */
#define PERFVM_BOOT_F_NATIVE   (1u << 0)
#define PERFVM_BOOT_F_STEPPED  (1u << 1) /* exact backend: counted code is stepped (or run by blocks) */
#define PERFVM_BOOT_F_HARDWARE (1u << 2) /* guest code runs in hardware (VMX/SVM): full speed, no VIF */
#define PERFVM_BOOT_F_BLOCKS   (1u << 3) /* with F_STEPPED: by blocks, ~10x stepping's rate */
#define PERFVM_CPUID_TABLE     0x18000 /* vCPU i's CPUID table: PERFVM_CPUID_TABLE + i * 0x1000 */

/* ELF note of a guest that follows the VIF convention: owner "perfvm", this type, and a
 * 4-byte descriptor holding PERFVM_NOTE_VIF_VERSION. */
#define PERFVM_NOTE_NAME        "perfvm"
#define PERFVM_NOTE_VIF         0x100
#define PERFVM_NOTE_VIF_VERSION 1

#ifndef __ASSEMBLER__
#include <stdint.h>
struct perfvm_boot_info {
	uint32_t magic;       /* PERFVM_BOOT_MAGIC */
	uint32_t version;     /* PERFVM_BOOT_VERSION */
	uint64_t mem_size;    /* bytes of RAM from guest-physical 0 */
	uint64_t cmdline;     /* guest-physical address of the NUL-terminated command line */
	uint32_t cmdline_len; /* bytes, without the NUL */
	uint32_t nr_vcpus;    /* vCPUs started at the entry point */
	uint64_t tsc_khz;     /* guest TSC frequency, 0 if unknown */
	/* version >= 2 */
	uint32_t flags;       /* PERFVM_BOOT_F_* */
	uint32_t reserved;
	uint64_t vif_base;    /* guest-physical address of vCPU 0's VIF page, 0 when emulated */
	uint64_t cpuid_table; /* vCPU 0's struct perfvm_cpuid_entry[]; vCPU i's at + i * 4096 */
	uint32_t cpuid_entries;
	uint32_t reserved2;
};

/* The CPUID the VMM gave each vCPU (KVM_SET_CPUID2), in memory: in native mode this host's
 * CPUID instruction does not follow it (e.g. leaf 0xA, the vPMU, reads 0), so a native guest
 * looks leaves up here. A leaf absent from the table reads as zeros. */
struct perfvm_cpuid_entry {
	uint32_t leaf, subleaf;
	uint32_t flags;       /* PERFVM_CPUID_F_SUBLEAF: subleaf must match */
	uint32_t eax, ebx, ecx, edx;
	uint32_t reserved;
};
#define PERFVM_CPUID_F_SUBLEAF 1u

/* The per-vCPU VIF page of this host's native mode (../shared/pvm-native/README.md). */
struct perfvm_vif {
	volatile uint8_t if_;     /* virtual RFLAGS.IF */
	volatile uint8_t pending; /* an interrupt waits for if_ = 1 */
	uint8_t pad[6];
	volatile uint64_t cr2;    /* CR2 of the last #PF */
};
#endif

/* Ports the VMM implements (QEMU-compatible where QEMU has one). */
#define PERFVM_PORT_SERIAL     0x3f8  /* 16550 UART, 0x3f8-0x3ff */
#define PERFVM_PORT_DEBUG_EXIT 0xf4   /* write v: VM ends with status (v << 1) | 1 */
#define PERFVM_PORT_FW_CFG_SEL 0x510  /* 16-bit selector */
#define PERFVM_PORT_FW_CFG_DAT 0x511  /* data bytes, little-endian */
#define PERFVM_PORT_SHUTDOWN   0x8900 /* "Shutdown" byte by byte: VM ends with status 0 */
#define PERFVM_PORT_VIF_PENDING 0x80  /* native mode: deliver what waited for vif.if_ = 1 */

#endif
