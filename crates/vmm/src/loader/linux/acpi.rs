//! Minimal ACPI tables for Linux: RSDP, XSDT, a hardware-reduced FADT, a DSDT naming the
//! UART and a MADT listing the LAPICs and the I/O APIC. Debian's cloud kernel has no MP-table parser
//! (CONFIG_X86_MPPARSE unset), so without ACPI it sees no local APIC (no TSC-deadline
//! timer, PIC mode) and one CPU. `boot_params.acpi_rsdp_addr` points Linux at the RSDP, so
//! it needs no scan. The tables live in the legacy BIOS area, outside the e820 RAM.

use crate::arch::x86_64::layout::{ACPI_TABLES_ADDR, IOAPIC_BASE, LAPIC_BASE};
use crate::devices::{RTC_INDEX_PORT, SERIAL_IRQ, SERIAL_PORTS};
use acpi_tables::{aml, Aml};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const OEM_ID: &[u8; 6] = b"PERFVM";
const OEM_TABLE_ID: &[u8; 8] = b"PERFVMAC";
/// FADT flags: HW_REDUCED_ACPI (no PM timer, SCI, fixed hardware).
const FADT_HW_REDUCED: u32 = 1 << 20;
/// MADT flags: PC-AT compatible dual 8259 (Linux masks it).
const MADT_PCAT_COMPAT: u32 = 1;

fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |sum, b| sum.wrapping_sub(*b))
}

/// A table: the 36-byte header with `signature`, `revision`, then `body`; checksummed.
fn table(signature: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(36 + body.len());
    t.extend_from_slice(signature);
    t.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
    t.push(revision);
    t.push(0);
    t.extend_from_slice(OEM_ID);
    t.extend_from_slice(OEM_TABLE_ID);
    t.extend_from_slice(&1u32.to_le_bytes()); // OEM revision
    t.extend_from_slice(b"PFVM"); // creator
    t.extend_from_slice(&1u32.to_le_bytes());
    t.extend_from_slice(body);
    t[9] = checksum(&t);
    t
}

fn madt(cpus: u8) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&(LAPIC_BASE as u32).to_le_bytes());
    body.extend_from_slice(&MADT_PCAT_COMPAT.to_le_bytes());
    for cpu in 0..cpus {
        body.extend_from_slice(&[0, 8, cpu, cpu]); // processor local APIC: UID, APIC ID
        body.extend_from_slice(&1u32.to_le_bytes()); // enabled
    }
    body.extend_from_slice(&[1, 12, cpus, 0]); // I/O APIC: ID after the CPUs'
    body.extend_from_slice(&(IOAPIC_BASE as u32).to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes()); // GSI base
    body.extend_from_slice(&[4, 6, 0xff, 0, 0, 1]); // LAPIC NMI: all processors, LINT1
    table(b"APIC", 4, &body)
}

/// The DSDT's body: COM1 as an ACPI device (PNP0501) with its I/O ports and GSI. A
/// hardware-reduced machine has no legacy PIC, so Linux maps no ISA IRQ by number: the 8250
/// driver's built-in "port 0x3f8, IRQ 4" cannot request its interrupt, every tty write then
/// fails (only the polled printk console works), and user space prints nothing. Named here,
/// the UART gets its interrupt through the I/O APIC (as Cloud Hypervisor describes it).
/// And the CMOS RTC (PNP0B00, ports 0x70-0x71, no alarm interrupt): on a hardware-reduced
/// machine Linux's rtc_cmos finds the clock only through ACPI, and sets the system time from
/// it at boot.
fn dsdt_body() -> Vec<u8> {
    let (base, last) = (*SERIAL_PORTS.start(), *SERIAL_PORTS.end());
    let mut body = Vec::new();
    aml::Device::new(
        "_SB_.COM1".into(),
        vec![
            &aml::Name::new("_HID".into(), &aml::EISAName::new("PNP0501")),
            &aml::Name::new("_UID".into(), &aml::ZERO),
            &aml::Name::new(
                "_CRS".into(),
                &aml::ResourceTemplate::new(vec![
                    // Consumer, edge-triggered, active high, exclusive.
                    &aml::Interrupt::new(true, true, false, false, SERIAL_IRQ),
                    &aml::IO::new(base, base, 0, (last - base + 1) as u8),
                ]),
            ),
        ],
    )
    .to_aml_bytes(&mut body);
    aml::Device::new(
        "_SB_.RTC_".into(),
        vec![
            &aml::Name::new("_HID".into(), &aml::EISAName::new("PNP0B00")),
            &aml::Name::new(
                "_CRS".into(),
                &aml::ResourceTemplate::new(vec![&aml::IO::new(RTC_INDEX_PORT, RTC_INDEX_PORT, 0, 2)]),
            ),
        ],
    )
    .to_aml_bytes(&mut body);
    body
}

fn fadt(dsdt: u64) -> Vec<u8> {
    // ACPI 6.0 FADT: 276 bytes, so the body is 240.
    let mut body = vec![0u8; 240];
    body[40 - 36..44 - 36].copy_from_slice(&(dsdt as u32).to_le_bytes()); // DSDT
    body[112 - 36..116 - 36].copy_from_slice(&FADT_HW_REDUCED.to_le_bytes()); // flags
    body[140 - 36..148 - 36].copy_from_slice(&dsdt.to_le_bytes()); // X_DSDT
                                                                   // IAPC_BOOT_ARCH (offset 109) stays 0: no 8042 (Linux leaves the i8042 alone), CMOS RTC present.
    table(b"FACP", 6, &body)
}

/// Every table at `base`, and the address of the RSDP (the first).
pub fn build(cpus: u8, base: u64) -> (Vec<u8>, u64) {
    let rsdp_addr = base;
    let dsdt_addr = base + 64;
    let dsdt = table(b"DSDT", 2, &dsdt_body());
    let fadt_addr = (dsdt_addr + dsdt.len() as u64).next_multiple_of(16);
    let fadt = fadt(dsdt_addr);
    let madt_addr = (fadt_addr + fadt.len() as u64).next_multiple_of(16);
    let madt = madt(cpus);
    let xsdt_addr = (madt_addr + madt.len() as u64).next_multiple_of(16);
    let entries: Vec<u8> = [fadt_addr, madt_addr].iter().flat_map(|a| a.to_le_bytes()).collect();
    let xsdt = table(b"XSDT", 1, &entries);

    let mut rsdp = Vec::with_capacity(36);
    rsdp.extend_from_slice(b"RSD PTR ");
    rsdp.push(0);
    rsdp.extend_from_slice(OEM_ID);
    rsdp.push(2); // ACPI 2.0+
    rsdp.extend_from_slice(&0u32.to_le_bytes()); // no RSDT
    rsdp.extend_from_slice(&36u32.to_le_bytes());
    rsdp.extend_from_slice(&xsdt_addr.to_le_bytes());
    rsdp.extend_from_slice(&[0; 4]);
    rsdp[8] = checksum(&rsdp[..20]);
    rsdp[32] = checksum(&rsdp);

    let mut out = vec![0u8; (xsdt_addr - base) as usize + xsdt.len()];
    for (addr, bytes) in
        [(rsdp_addr, &rsdp), (dsdt_addr, &dsdt), (fadt_addr, &fadt), (madt_addr, &madt), (xsdt_addr, &xsdt)]
    {
        let at = (addr - base) as usize;
        out[at..at + bytes.len()].copy_from_slice(bytes);
    }
    (out, rsdp_addr)
}

/// Write the tables for `cpus` processors; returns the RSDP's address.
pub fn write(mem: &GuestMemoryMmap, cpus: u8) -> vm_memory::GuestMemoryResult<u64> {
    let (bytes, rsdp) = build(cpus, ACPI_TABLES_ADDR);
    mem.write_slice(&bytes, GuestAddress(ACPI_TABLES_ADDR))?;
    Ok(rsdp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(bytes: &[u8]) -> u8 {
        bytes.iter().fold(0u8, |s, b| s.wrapping_add(*b))
    }

    fn at(all: &[u8], base: u64, addr: u64) -> &[u8] {
        let start = (addr - base) as usize;
        let len = u32::from_le_bytes(all[start + 4..start + 8].try_into().unwrap()) as usize;
        &all[start..start + len]
    }

    #[test]
    fn tables_chain_and_checksum() {
        let base = ACPI_TABLES_ADDR;
        let (all, rsdp) = build(2, base);
        let r = &all[(rsdp - base) as usize..][..36];
        assert_eq!(&r[..8], b"RSD PTR ");
        assert_eq!((sum(&r[..20]), sum(r)), (0, 0));
        let xsdt = at(&all, base, u64::from_le_bytes(r[24..32].try_into().unwrap()));
        assert_eq!((&xsdt[..4], sum(xsdt)), (&b"XSDT"[..], 0));
        let fadt = at(&all, base, u64::from_le_bytes(xsdt[36..44].try_into().unwrap()));
        assert_eq!((&fadt[..4], fadt.len(), sum(fadt)), (&b"FACP"[..], 276, 0));
        assert_ne!(u32::from_le_bytes(fadt[112..116].try_into().unwrap()) & FADT_HW_REDUCED, 0);
        let dsdt = at(&all, base, u64::from_le_bytes(fadt[140..148].try_into().unwrap()));
        assert_eq!((&dsdt[..4], sum(dsdt)), (&b"DSDT"[..], 0));
        let com1 = &dsdt[36..];
        assert_eq!(&com1[..2], &[0x5b, 0x82], "a Device");
        assert!(com1.windows(4).any(|w| w == b"COM1") && com1.windows(4).any(|w| w == b"_CRS"));
        // The I/O port descriptor: 16-bit decode, 0x3f8..0x3f8, alignment 0, 8 ports.
        assert!(com1.windows(8).any(|w| w == [0x47, 0x01, 0xf8, 0x03, 0xf8, 0x03, 0x00, 0x08]), "{com1:x?}");
        // The RTC: its device and 2 ports at 0x70.
        assert!(com1.windows(4).any(|w| w == b"RTC_"));
        assert!(com1.windows(8).any(|w| w == [0x47, 0x01, 0x70, 0x00, 0x70, 0x00, 0x00, 0x02]), "{com1:x?}");
        let madt = at(&all, base, u64::from_le_bytes(xsdt[44..52].try_into().unwrap()));
        assert_eq!((&madt[..4], sum(madt)), (&b"APIC"[..], 0));
        assert_eq!(madt.len(), 44 + 2 * 8 + 12 + 6, "2 LAPICs, the I/O APIC, LINT1 NMI");
        assert_eq!(&madt[44..48], &[0, 8, 0, 0]);
        assert_eq!(&madt[52..56], &[0, 8, 1, 1]);
        assert!(all.len() < 0x1000);
    }
}
