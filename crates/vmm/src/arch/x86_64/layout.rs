//! Guest-physical memory layout of the boot structures. Mirrors
//! `guest/include/abi/perfvm_boot.h`; keep both in step.

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
/// The three pages KVM_SET_TSS_ADDR needs on Intel (real-mode TSS and identity page table),
/// below the BIOS area at the top of 4 GiB and above the LAPIC, where no guest RAM reaches.
pub const KVM_TSS_ADDR: u64 = 0xfffb_d000;
/// Largest guest RAM we accept: RAM must stay below the 32-bit MMIO hole.
pub const MAX_MEM_MIB: u64 = 3072;
/// Smallest guest RAM we accept.
pub const MIN_MEM_MIB: u64 = 16;

/// Linux boot protocol: `boot_params` (the zero page), inside the boot area.
pub const LINUX_ZERO_PAGE: u64 = 0xa000;
/// Linux boot protocol: the kernel command line.
pub const LINUX_CMDLINE_ADDR: u64 = 0xb000;
/// Linux's x86 COMMAND_LINE_SIZE, NUL included.
pub const LINUX_CMDLINE_MAX: usize = 2048;
/// Start of the EBDA: conventional memory ends here in the e820 map, and the MP table lives here.
pub const EBDA_START: u64 = 0x9fc00;
/// ACPI tables for Linux (RSDP first), in the legacy BIOS area outside e820 RAM.
pub const ACPI_TABLES_ADDR: u64 = 0xe0000;
/// Where RAM above the legacy hole starts.
pub const HIMEM_START: u64 = 0x10_0000;
/// The in-kernel I/O APIC's MMIO base.
pub const IOAPIC_BASE: u64 = 0xfec0_0000;
/// Linux boot protocol selectors: __BOOT_CS and __BOOT_DS (boot.rst, 64-bit protocol).
pub const SEL_LINUX_CODE: u16 = 0x10;
/// Linux's __BOOT_DS.
pub const SEL_LINUX_DATA: u16 = 0x18;

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
/// Boot info flag: the exact backend counts (it steps counted code, ~7 us per instruction,
/// or runs it by blocks), so workloads do not take their full-speed sizes.
pub const BOOT_F_STEPPED: u32 = 1 << 1;
/// `perfvm_boot_info.flags`: guest code runs in hardware (VMX/SVM), at full speed without a
/// VIF page.
pub const BOOT_F_HARDWARE: u32 = 1 << 2;
/// `perfvm_boot_info.flags`, with `BOOT_F_STEPPED`: the exact backend runs counted code by
/// blocks (~10x stepping's rate), so a workload that would run at full speed takes ten
/// times its emulated size.
pub const BOOT_F_BLOCKS: u32 = 1 << 3;
/// Most vCPUs a VM may have (the guest kit has this many stacks).
pub const MAX_VCPUS: u32 = 8;
