//! Boot structures in guest memory (GDT, identity page tables, boot info, multiboot info)
//! and the initial register state of each vCPU for both boot protocols.

use crate::arch::x86_64::layout::*;
use crate::loader::{BootProtocol, KernelImage, MULTIBOOT_BOOTLOADER_MAGIC};
use kvm_bindings::{kvm_regs, kvm_segment, kvm_sregs};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

pub(crate) const CR0_PE: u64 = 1 << 0;
const CR0_ET: u64 = 1 << 4;
pub(crate) const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
pub(crate) const EFER_LMA: u64 = 1 << 10;
const EFER_NXE: u64 = 1 << 11;
const PTE_PRESENT: u64 = 1 << 0;
const PTE_RW: u64 = 1 << 1;
/// U/S: set at every level in both modes; native mode runs the guest at hardware CPL3,
/// where a supervisor-only entry page-faults forever inside KVM_RUN.
const PTE_US: u64 = 1 << 2;
const PTE_PWT: u64 = 1 << 3;
const PTE_PCD: u64 = 1 << 4;
const PTE_PS: u64 = 1 << 7;

/// Flat descriptors: null, 64-bit code, data, 32-bit code.
const GDT: [u64; 4] = [0, 0x00af_9a00_0000_ffff, 0x00cf_9200_0000_ffff, 0x00cf_9a00_0000_ffff];
/// Linux's 64-bit boot protocol wants __BOOT_CS at 0x10 and __BOOT_DS at 0x18.
const LINUX_GDT: [u64; 4] = [0, 0, 0x00af_9a00_0000_ffff, 0x00cf_9200_0000_ffff];

/// Copy the kernel image into guest memory, zeroing bss.
pub fn load_image(mem: &GuestMemoryMmap, image: &KernelImage, bytes: &[u8]) -> vm_memory::GuestMemoryResult<()> {
    for s in &image.segments {
        let file = &bytes[s.file_offset..s.file_offset + s.filesz as usize];
        mem.write_slice(file, GuestAddress(s.paddr))?;
        let bss = vec![0u8; (s.memsz - s.filesz) as usize];
        mem.write_slice(&bss, GuestAddress(s.paddr + s.filesz))?;
    }
    Ok(())
}

/// What the boot info describes.
#[derive(Debug, Clone)]
pub struct BootParams {
    /// Guest RAM, bytes.
    pub mem_size: u64,
    /// The full kernel command line (truncated to `layout::CMDLINE_MAX` with its NUL).
    pub cmdline: String,
    /// Number of vCPUs.
    pub nr_vcpus: u32,
    /// The guest TSC frequency, kHz (0: unknown).
    pub tsc_khz: u64,
    /// Native mode: the vCPUs' VIF pages start here (`layout::VIF_BASE`); None when emulated.
    pub vif_base: Option<u64>,
    /// Entries in each vCPU's CPUID table at `layout::CPUID_TABLE_BASE` (0: none).
    pub cpuid_entries: u32,
    /// The exact backend counts (`layout::BOOT_F_STEPPED`).
    pub stepped: bool,
    /// ... by blocks (`layout::BOOT_F_BLOCKS`).
    pub blocks: bool,
    /// Guest code runs in hardware (`layout::BOOT_F_HARDWARE`).
    pub hardware: bool,
}

/// Write GDT, page tables, command line and the protocol's info struct.
pub fn write_boot_data(
    mem: &GuestMemoryMmap,
    protocol: BootProtocol,
    p: &BootParams,
) -> vm_memory::GuestMemoryResult<()> {
    let descriptors = if protocol == BootProtocol::Linux64 { LINUX_GDT } else { GDT };
    let gdt: Vec<u8> = descriptors.iter().flat_map(|d| d.to_le_bytes()).collect();
    mem.write_slice(&gdt, GuestAddress(GDT_ADDR))?;
    write_identity_map(mem)?;
    if protocol == BootProtocol::Linux64 {
        // boot_params and its command line are written by `loader::linux::params`.
        return Ok(());
    }
    let mut cmdline = p.cmdline.as_bytes().to_vec();
    cmdline.truncate(CMDLINE_MAX - 1);
    let cmdline_len = cmdline.len() as u32;
    cmdline.push(0);
    mem.write_slice(&cmdline, GuestAddress(CMDLINE_ADDR))?;
    match protocol {
        BootProtocol::Direct64 => write_perfvm_boot_info(mem, p, cmdline_len),
        BootProtocol::Multiboot => write_multiboot_info(mem, p.mem_size),
        BootProtocol::Linux64 => Ok(()),
    }
}

/// 4 GiB identity map with 2 MiB pages; the top GiB (LAPIC/IOAPIC) is uncached. Every
/// entry is user-accessible (see [`PTE_US`]).
fn write_identity_map(mem: &GuestMemoryMmap) -> vm_memory::GuestMemoryResult<()> {
    let pdpt = PML4_ADDR + 0x1000;
    let pd_base = pdpt + 0x1000;
    mem.write_obj(pdpt | PTE_PRESENT | PTE_RW | PTE_US, GuestAddress(PML4_ADDR))?;
    let gibs = IDENTITY_MAP_SIZE >> 30;
    for g in 0..gibs {
        let pd = pd_base + g * 0x1000;
        mem.write_obj(pd | PTE_PRESENT | PTE_RW | PTE_US, GuestAddress(pdpt + g * 8))?;
        let uncached = if g == gibs - 1 { PTE_PCD | PTE_PWT } else { 0 };
        let entries: Vec<u8> = (0..512u64)
            .map(|i| ((g << 30) + (i << 21)) | PTE_PRESENT | PTE_RW | PTE_US | PTE_PS | uncached)
            .flat_map(u64::to_le_bytes)
            .collect();
        mem.write_slice(&entries, GuestAddress(pd))?;
    }
    Ok(())
}

/// `struct perfvm_boot_info` of guest/include/abi/perfvm_boot.h.
fn write_perfvm_boot_info(mem: &GuestMemoryMmap, p: &BootParams, cmdline_len: u32) -> vm_memory::GuestMemoryResult<()> {
    let native = if p.vif_base.is_some() { BOOT_F_NATIVE } else { 0 };
    let info = crate::guest_abi::BootInfo {
        magic: BOOT_MAGIC,
        version: BOOT_VERSION,
        mem_size: p.mem_size,
        cmdline: CMDLINE_ADDR,
        cmdline_len,
        nr_vcpus: p.nr_vcpus,
        tsc_khz: p.tsc_khz,
        flags: native
            | if p.stepped { BOOT_F_STEPPED } else { 0 }
            | if p.blocks { BOOT_F_BLOCKS } else { 0 }
            | if p.hardware { BOOT_F_HARDWARE } else { 0 },
        vif_base: p.vif_base.unwrap_or(0),
        cpuid_table: if p.cpuid_entries > 0 { CPUID_TABLE_BASE } else { 0 },
        cpuid_entries: p.cpuid_entries,
        ..Default::default()
    };
    mem.write_obj(info, GuestAddress(BOOT_INFO_ADDR))
}

/// Multiboot v1 info: memory sizes, command line, and a memory map.
fn write_multiboot_info(mem: &GuestMemoryMmap, mem_size: u64) -> vm_memory::GuestMemoryResult<()> {
    const FLAG_MEM: u32 = 1 << 0;
    const FLAG_CMDLINE: u32 = 1 << 2;
    const FLAG_MMAP: u32 = 1 << 6;
    let regions = [(0u64, 640u64 << 10), (1 << 20, mem_size - (1 << 20))];
    let mut mmap = Vec::new();
    for (base, len) in regions {
        mmap.extend_from_slice(&20u32.to_le_bytes()); // entry size, excluding this field
        mmap.extend_from_slice(&base.to_le_bytes());
        mmap.extend_from_slice(&len.to_le_bytes());
        mmap.extend_from_slice(&1u32.to_le_bytes()); // available RAM
    }
    mem.write_slice(&mmap, GuestAddress(MB_MMAP_ADDR))?;
    let mut info = [0u32; 13];
    info[0] = FLAG_MEM | FLAG_CMDLINE | FLAG_MMAP;
    info[1] = 640; // mem_lower, KiB
    info[2] = ((mem_size - (1 << 20)) >> 10) as u32; // mem_upper, KiB above 1 MiB
    info[4] = CMDLINE_ADDR as u32;
    info[11] = mmap.len() as u32;
    info[12] = MB_MMAP_ADDR as u32;
    let bytes: Vec<u8> = info.iter().flat_map(|w| w.to_le_bytes()).collect();
    mem.write_slice(&bytes, GuestAddress(BOOT_INFO_ADDR))
}

fn segment(selector: u16, code: bool, long: bool) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: if code { 0xb } else { 0x3 },
        present: 1,
        dpl: 0,
        db: u8::from(!long),
        s: 1,
        l: u8::from(long),
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Special registers for the protocol's entry mode, on top of KVM's reset state.
pub fn setup_sregs(sregs: &mut kvm_sregs, protocol: BootProtocol) {
    let long = protocol != BootProtocol::Multiboot;
    let (code_sel, data_sel) = match protocol {
        BootProtocol::Direct64 => (SEL_CODE64, SEL_DATA),
        BootProtocol::Multiboot => (SEL_CODE32, SEL_DATA),
        BootProtocol::Linux64 => (SEL_LINUX_CODE, SEL_LINUX_DATA),
    };
    sregs.cs = segment(code_sel, true, long);
    let data = segment(data_sel, false, false);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.gdt.base = GDT_ADDR;
    sregs.gdt.limit = (GDT.len() * 8 - 1) as u16;
    if long {
        sregs.cr3 = PML4_ADDR;
        sregs.cr4 |= CR4_PAE;
        sregs.cr0 |= CR0_PE | CR0_ET | CR0_PG;
        sregs.efer |= EFER_LME | EFER_LMA | EFER_NXE;
    } else {
        sregs.cr0 = (sregs.cr0 | CR0_PE | CR0_ET) & !CR0_PG;
        sregs.cr4 = 0;
        sregs.efer = 0;
    }
}

/// General registers at the entry point for vCPU `index`.
pub fn entry_regs(protocol: BootProtocol, entry: u64, index: u32) -> kvm_regs {
    let mut regs = kvm_regs { rip: entry, rflags: 0x2, ..Default::default() };
    match protocol {
        BootProtocol::Direct64 => {
            regs.rdi = u64::from(index);
            regs.rsi = BOOT_INFO_ADDR;
        }
        BootProtocol::Multiboot => {
            regs.rax = u64::from(MULTIBOOT_BOOTLOADER_MAGIC);
            regs.rbx = BOOT_INFO_ADDR;
        }
        BootProtocol::Linux64 => regs.rsi = LINUX_ZERO_PAGE,
    }
    regs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 16 << 20)]).unwrap()
    }

    fn params() -> BootParams {
        BootParams {
            mem_size: 16 << 20,
            cmdline: "hello a b".into(),
            nr_vcpus: 2,
            tsc_khz: 1000,
            vif_base: None,
            cpuid_entries: 0,
            stepped: false,
            blocks: false,
            hardware: false,
        }
    }

    #[test]
    fn identity_map_covers_ram_and_lapic() {
        let m = mem();
        write_boot_data(&m, BootProtocol::Direct64, &params()).unwrap();
        let pml4: u64 = m.read_obj(GuestAddress(PML4_ADDR)).unwrap();
        let pdpt = pml4 & !0xfff;
        let walk = |va: u64| -> u64 {
            let pdpte: u64 = m.read_obj(GuestAddress(pdpt + ((va >> 30) & 511) * 8)).unwrap();
            let pde: u64 = m.read_obj(GuestAddress((pdpte & !0xfff) + ((va >> 21) & 511) * 8)).unwrap();
            assert_ne!(pde & PTE_PS, 0);
            assert_ne!(pml4 & pdpte & pde & PTE_US, 0, "U bit at every level");
            (pde & !0x1f_ffff & !(1 << 63) & 0xf_ffff_ffff_f000) | (va & 0x1f_ffff)
        };
        assert_eq!(walk(0x100123), 0x100123);
        assert_eq!(walk(0x3fff_ffff), 0x3fff_ffff);
        assert_eq!(walk(LAPIC_BASE + 0x340), LAPIC_BASE + 0x340);
    }

    #[test]
    fn boot_info_matches_header() {
        let m = mem();
        write_boot_data(&m, BootProtocol::Direct64, &params()).unwrap();
        let magic: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR)).unwrap();
        let size: u64 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 8)).unwrap();
        let cmd: u64 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 16)).unwrap();
        let len: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 24)).unwrap();
        let cpus: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 28)).unwrap();
        assert_eq!((magic, size, cmd, len, cpus), (BOOT_MAGIC, 16 << 20, CMDLINE_ADDR, 9, 2));
        let mut text = [0u8; 10];
        m.read_slice(&mut text, GuestAddress(CMDLINE_ADDR)).unwrap();
        assert_eq!(&text, b"hello a b\0");
        let (flags, vif): (u32, u64) = (
            m.read_obj(GuestAddress(BOOT_INFO_ADDR + 40)).unwrap(),
            m.read_obj(GuestAddress(BOOT_INFO_ADDR + 48)).unwrap(),
        );
        assert_eq!((flags, vif), (0, 0), "emulated");
        write_boot_data(&m, BootProtocol::Direct64, &BootParams { vif_base: Some(VIF_BASE), ..params() }).unwrap();
        let (flags, vif): (u32, u64) = (
            m.read_obj(GuestAddress(BOOT_INFO_ADDR + 40)).unwrap(),
            m.read_obj(GuestAddress(BOOT_INFO_ADDR + 48)).unwrap(),
        );
        assert_eq!((flags, vif), (BOOT_F_NATIVE, VIF_BASE), "native");
        write_boot_data(&m, BootProtocol::Direct64, &BootParams { stepped: true, ..params() }).unwrap();
        let flags: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 40)).unwrap();
        assert_eq!(flags, BOOT_F_STEPPED, "exact backend");
        write_boot_data(&m, BootProtocol::Direct64, &BootParams { stepped: true, blocks: true, ..params() }).unwrap();
        let flags: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 40)).unwrap();
        assert_eq!(flags, BOOT_F_STEPPED | BOOT_F_BLOCKS, "exact backend by blocks");
        write_boot_data(&m, BootProtocol::Direct64, &BootParams { cpuid_entries: 9, ..params() }).unwrap();
        let (table, n): (u64, u32) = (
            m.read_obj(GuestAddress(BOOT_INFO_ADDR + 56)).unwrap(),
            m.read_obj(GuestAddress(BOOT_INFO_ADDR + 64)).unwrap(),
        );
        assert_eq!((table, n), (CPUID_TABLE_BASE, 9));
    }

    #[test]
    fn multiboot_info_reports_memory_and_cmdline() {
        let m = mem();
        write_boot_data(&m, BootProtocol::Multiboot, &params()).unwrap();
        let flags: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR)).unwrap();
        let lower: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 4)).unwrap();
        let upper: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 8)).unwrap();
        let cmd: u32 = m.read_obj(GuestAddress(BOOT_INFO_ADDR + 16)).unwrap();
        assert_eq!(flags & 0b101, 0b101);
        assert_eq!((lower, upper, cmd as u64), (640, 15 * 1024, CMDLINE_ADDR));
    }

    #[test]
    fn entry_registers_follow_protocol() {
        let r = entry_regs(BootProtocol::Direct64, 0x100000, 1);
        assert_eq!((r.rip, r.rdi, r.rsi, r.rflags), (0x100000, 1, BOOT_INFO_ADDR, 2));
        let r = entry_regs(BootProtocol::Multiboot, 0x100000, 0);
        assert_eq!((r.rax, r.rbx), (0x2bad_b002, BOOT_INFO_ADDR));
        let mut s = kvm_sregs::default();
        setup_sregs(&mut s, BootProtocol::Direct64);
        assert_eq!((s.cs.l, s.cs.selector, s.cr3), (1, SEL_CODE64, PML4_ADDR));
        assert_ne!(s.efer & EFER_LMA, 0);
        setup_sregs(&mut s, BootProtocol::Multiboot);
        assert_eq!((s.cs.l, s.cs.db, s.cr0 & CR0_PG, s.efer), (0, 1, 0, 0));
        let r = entry_regs(BootProtocol::Linux64, 0x100_0000, 0);
        assert_eq!((r.rip, r.rsi), (0x100_0000, LINUX_ZERO_PAGE), "boot_params in RSI");
        let mut s = kvm_sregs::default();
        setup_sregs(&mut s, BootProtocol::Linux64);
        assert_eq!((s.cs.l, s.cs.selector, s.ds.selector, s.ss.selector), (1, 0x10, 0x18, 0x18), "__BOOT_CS/DS");
        assert_ne!(s.efer & EFER_LMA, 0);
    }
}
