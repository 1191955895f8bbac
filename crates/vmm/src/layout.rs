//! Guest-physical memory layout of the boot structures. Mirrors
//! `guest/include/perfvm_boot.h`; keep both in step.

/// GDT used by both boot paths.
pub const GDT_ADDR: u64 = 0x1000;
/// PML4 of the identity map (PDPT follows at +0x1000, four PDs after it).
pub const PML4_ADDR: u64 = 0x2000;
/// Multiboot memory map entries.
pub const MB_MMAP_ADDR: u64 = 0x9400;
/// perfvm boot info (direct boot) or multiboot info (multiboot).
pub const BOOT_INFO_ADDR: u64 = 0x9000;
/// NUL-terminated kernel command line.
pub const CMDLINE_ADDR: u64 = 0x9800;
/// Longest command line, NUL included.
pub const CMDLINE_MAX: usize = 2048;
/// Everything the VMM writes lives in `[BOOT_AREA_START, BOOT_AREA_END)`; images may not.
pub const BOOT_AREA_START: u64 = 0x1000;
/// End of the VMM's boot area.
pub const BOOT_AREA_END: u64 = 0x20000;
/// Native mode: vCPU i's VIF page is at `VIF_BASE + i * 0x1000` (inside the boot area).
pub const VIF_BASE: u64 = 0x10000;
/// vCPU i's CPUID table (`struct perfvm_cpuid_entry[]`) is at `CPUID_TABLE_BASE + i * 0x1000`.
pub const CPUID_TABLE_BASE: u64 = 0x18000;
/// The identity map covers this much guest-physical space (RAM plus the LAPIC page).
pub const IDENTITY_MAP_SIZE: u64 = 4 << 30;
/// Local APIC MMIO base.
pub const LAPIC_BASE: u64 = 0xfee0_0000;
/// Largest guest RAM we accept: RAM must stay below the 32-bit MMIO hole.
pub const MAX_MEM_MIB: u64 = 3072;
/// Smallest guest RAM we accept.
pub const MIN_MEM_MIB: u64 = 16;

/// GDT selectors (see `boot::gdt`).
pub const SEL_CODE64: u16 = 0x08;
/// Flat data selector.
pub const SEL_DATA: u16 = 0x10;
/// Flat 32-bit code selector (multiboot entry).
pub const SEL_CODE32: u16 = 0x18;

/// "PFVM" little-endian.
pub const BOOT_MAGIC: u32 = 0x4d56_4650;
/// Version of `struct perfvm_boot_info`.
pub const BOOT_VERSION: u32 = 2;
/// Boot info flag: the vCPUs run natively (VIF pages registered).
pub const BOOT_F_NATIVE: u32 = 1 << 0;
/// Boot info flag: the exact backend single-steps counted code (~7 us per instruction), so
/// workloads keep their emulated sizes even when native.
pub const BOOT_F_STEPPED: u32 = 1 << 1;
/// Most vCPUs a VM may have (the guest kit has this many stacks).
pub const MAX_VCPUS: u32 = 8;
