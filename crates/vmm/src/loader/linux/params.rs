//! `boot_params` (the "zero page"), the e820 map and the command line, written with
//! rust-vmm's linux-loader as Firecracker does (arch/x86_64/mod.rs, configure_system).

use super::LinuxBoot;
use crate::arch::x86_64::layout::{EBDA_START, HIMEM_START, LINUX_CMDLINE_ADDR, LINUX_CMDLINE_MAX, LINUX_ZERO_PAGE};
use linux_loader::cmdline::Cmdline;
use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, CAN_USE_HEAP, LOADED_HIGH};
use thiserror::Error;
use vm_memory::{ByteValued, GuestAddress, GuestMemoryMmap};

/// What every Linux guest gets on its command line, before the user's `--cmdline`: the
/// console on the UART (and early printk there), and what perfvm's machine needs (no PCI,
/// no timer but the TSC and LAPIC to check it against; docs/LINUX.md, "The command line").
/// No `nokaslr`: KASLR is the decompressor's work, which perfvm skips (the kernel runs at
/// its link address), and the kernel proper would hand the unknown word to init: every word
/// here is one the kernel itself knows. `panic=-1 reboot=panic_warm` make a panic reboot at once with the
/// BIOS warm-reset flag set, which is how the VMM tells a panic from `reboot -f`.
pub const DEFAULT_CMDLINE: &str = concat!(
    "console=ttyS0 earlyprintk=serial,ttyS0 panic=-1 reboot=panic_warm ",
    "io_delay=none tsc=reliable no_timer_check pci=off"
);

/// The kernel command line: perfvm's defaults, then the machine's own words (the host's,
/// `HostCaps::linux_cmdline`; the TSC rate, `tsc_early_khz`), then the user's text.
pub fn compose_cmdline(machine: &[String], user: &str) -> String {
    std::iter::once(DEFAULT_CMDLINE)
        .chain(machine.iter().map(String::as_str))
        .chain(Some(user.trim()).filter(|t| !t.is_empty()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The TSC's rate as the guest is to take it, without calibrating (which fails under this
/// host's emulator: "tsc: Unable to calibrate against PIT", and with no HPET or PM timer
/// Linux marks the TSC unstable and hangs in its early boot).
pub fn tsc_early_khz(khz: u64) -> String {
    format!("tsc_early_khz={}", khz.min(u64::from(u32::MAX)))
}

/// Why the boot parameters could not be written.
#[derive(Debug, Error)]
pub enum ParamsError {
    /// The command line is too long or holds a NUL.
    #[error("kernel command line: {0}")]
    Cmdline(String),
    /// Writing into guest memory failed.
    #[error("writing {what}: {reason}")]
    Memory {
        /// What was being written.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
}

/// `boot_params` as guest memory can take it.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct ZeroPage(boot_params);

// SAFETY: boot_params is repr(C, packed) plain old data: any bytes are a valid value.
unsafe impl ByteValued for ZeroPage {}

/// `hdr.boot_flag` and `hdr.header` of a header we make up for a vmlinux.
const BOOT_FLAG_MAGIC: u16 = 0xaa55;
const HDRS_MAGIC: u32 = 0x5372_6448;
/// "Undefined" boot loader id (boot.rst: 0xff).
const LOADER_OTHER: u8 = 0xff;
/// e820 types.
const E820_RAM: u32 = 1;

/// The e820 map: conventional memory below the EBDA (the MP table sits at its start), and
/// RAM from 1 MiB to the end. The hole between them is the legacy VGA/ROM area.
pub fn e820(mem_size: u64) -> Vec<boot_e820_entry> {
    vec![
        boot_e820_entry { addr: 0, size: EBDA_START, r#type: E820_RAM },
        boot_e820_entry { addr: HIMEM_START, size: mem_size - HIMEM_START, r#type: E820_RAM },
    ]
}

/// Build `boot_params` for `linux` in a guest of `mem_size` bytes whose ACPI RSDP is at
/// `rsdp` (0: none).
pub fn build(linux: &LinuxBoot, mem_size: u64, rsdp: u64) -> boot_params {
    let mut params = boot_params { acpi_rsdp_addr: rsdp, ..Default::default() };
    match linux.header {
        // Keep the bzImage's own header (boot.rst: the loader copies it and fills its fields).
        Some(header) => params.hdr = header,
        None => {
            params.hdr.boot_flag = BOOT_FLAG_MAGIC;
            params.hdr.header = HDRS_MAGIC;
            params.hdr.kernel_alignment = 0x100_0000;
            params.hdr.cmdline_size = (LINUX_CMDLINE_MAX - 1) as u32;
        }
    }
    params.hdr.type_of_loader = LOADER_OTHER;
    params.hdr.loadflags |= LOADED_HIGH | CAN_USE_HEAP;
    params.hdr.heap_end_ptr = 0xfe00;
    // cmdline_size is the kernel's limit (read-only for a loader); the line is NUL-terminated.
    params.hdr.cmd_line_ptr = LINUX_CMDLINE_ADDR as u32;
    if let Some(initrd) = &linux.initrd {
        params.hdr.ramdisk_image = initrd.addr as u32;
        params.hdr.ramdisk_size = initrd.bytes.len() as u32;
    }
    let map = e820(mem_size);
    for (slot, entry) in params.e820_table.iter_mut().zip(&map) {
        *slot = *entry;
    }
    params.e820_entries = map.len() as u8;
    params
}

/// Write the command line, `boot_params` and the initrd into guest memory.
pub fn write(
    mem: &GuestMemoryMmap,
    linux: &LinuxBoot,
    mem_size: u64,
    cmdline: &str,
    rsdp: u64,
) -> Result<(), ParamsError> {
    let mut line = Cmdline::new(LINUX_CMDLINE_MAX).map_err(|e| ParamsError::Cmdline(e.to_string()))?;
    line.insert_str(cmdline).map_err(|e| ParamsError::Cmdline(e.to_string()))?;
    linux_loader::loader::load_cmdline(mem, GuestAddress(LINUX_CMDLINE_ADDR), &line)
        .map_err(|e| ParamsError::Memory { what: "the command line", reason: e.to_string() })?;
    let params = ZeroPage(build(linux, mem_size, rsdp));
    let zero_page = BootParams::new(&params, GuestAddress(LINUX_ZERO_PAGE));
    LinuxBootConfigurator::write_bootparams(&zero_page, mem)
        .map_err(|e| ParamsError::Memory { what: "boot_params", reason: e.to_string() })?;
    if let Some(initrd) = &linux.initrd {
        vm_memory::Bytes::write_slice(mem, &initrd.bytes, GuestAddress(initrd.addr))
            .map_err(|e| ParamsError::Memory { what: "the initrd", reason: e.to_string() })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Initrd;
    use super::*;
    use vm_memory::Bytes;

    #[test]
    fn the_users_text_follows_the_defaults() {
        assert_eq!(compose_cmdline(&[], ""), DEFAULT_CMDLINE);
        let clear = "clearcpuid=cx16".to_owned();
        assert_eq!(compose_cmdline(std::slice::from_ref(&clear), ""), format!("{DEFAULT_CMDLINE} clearcpuid=cx16"));
        let tsc = tsc_early_khz(2_500_000 * 128);
        assert_eq!(compose_cmdline(&[tsc], ""), format!("{DEFAULT_CMDLINE} tsc_early_khz=320000000"));
        let line = compose_cmdline(&[clear], " nmi_watchdog=0 -- \"echo hi\" ");
        assert!(line.starts_with("console=ttyS0 "), "{line}");
        assert!(line.ends_with(" clearcpuid=cx16 nmi_watchdog=0 -- \"echo hi\""), "{line}");
        assert!(DEFAULT_CMDLINE.len() < LINUX_CMDLINE_MAX / 2, "room for the user's text");
        assert!(!DEFAULT_CMDLINE.contains("--"), "init's arguments are the user's");
    }

    #[test]
    fn boot_params_carry_header_cmdline_initrd_and_e820() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap();
        let header = linux_loader::loader::bootparam::setup_header {
            version: 0x020f,
            initrd_addr_max: 0x7fff_ffff,
            setup_sects: 27,
            cmdline_size: 2047,
            ..Default::default()
        };
        let linux = LinuxBoot {
            header: Some(header),
            compression: None,
            initrd: Some(Initrd { addr: 0x300_0000, bytes: b"070701".to_vec() }),
        };
        write(&mem, &linux, 64 << 20, "console=ttyS0 x", 0xe0000).unwrap();
        let page: ZeroPage = mem.read_obj(GuestAddress(LINUX_ZERO_PAGE)).unwrap();
        let p = page.0;
        let (version, sects, loader) = (p.hdr.version, p.hdr.setup_sects, p.hdr.type_of_loader);
        assert_eq!((version, sects, loader), (0x020f, 27, 0xff), "the image's header, loader filled in");
        let (cmd, size) = (p.hdr.cmd_line_ptr, p.hdr.cmdline_size);
        assert_eq!((u64::from(cmd), size), (LINUX_CMDLINE_ADDR, 2047), "the kernel's limit, kept");
        let (rd, rd_size) = (p.hdr.ramdisk_image, p.hdr.ramdisk_size);
        assert_eq!((rd, rd_size), (0x300_0000, 6));
        let mut text = [0u8; 16];
        mem.read_slice(&mut text, GuestAddress(LINUX_CMDLINE_ADDR)).unwrap();
        assert_eq!(&text, b"console=ttyS0 x\0");
        let mut rd_bytes = [0u8; 6];
        mem.read_slice(&mut rd_bytes, GuestAddress(0x300_0000)).unwrap();
        assert_eq!(&rd_bytes, b"070701");
        assert_eq!(p.e820_entries, 2);
        let rsdp = p.acpi_rsdp_addr;
        assert_eq!(rsdp, 0xe0000);
        let [low, high] = [p.e820_table[0], p.e820_table[1]];
        let (la, ls, ha, hs) = (low.addr, low.size, high.addr, high.size);
        assert_eq!((la, ls, ha, hs), (0, EBDA_START, HIMEM_START, (64 << 20) - HIMEM_START));
    }

    #[test]
    fn a_vmlinux_gets_a_minimal_header() {
        let linux = LinuxBoot { header: None, compression: None, initrd: None };
        let p = build(&linux, 32 << 20, 0);
        let (flag, magic, align) = (p.hdr.boot_flag, p.hdr.header, p.hdr.kernel_alignment);
        assert_eq!((flag, magic, align), (BOOT_FLAG_MAGIC, HDRS_MAGIC, 0x100_0000));
        let rd = p.hdr.ramdisk_image;
        assert_eq!(rd, 0);
    }
}
