//! An Intel MultiProcessor Specification 1.4 table, as Firecracker writes one
//! (src/vmm/src/arch/x86_64/mptable.rs): without ACPI, Linux finds its CPUs, the I/O APIC
//! and the ISA interrupt routing here. The floating pointer sits at the start of the EBDA,
//! in the last KiB of base memory that Linux scans; the table follows it.

use crate::arch::x86_64::layout::{EBDA_START, IOAPIC_BASE, LAPIC_BASE};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Entry types (MP spec, table 4-3).
const MP_PROCESSOR: u8 = 0;
const MP_BUS: u8 = 1;
const MP_IOAPIC: u8 = 2;
const MP_INTSRC: u8 = 3;
const MP_LINTSRC: u8 = 4;
/// Interrupt types.
const MP_INT: u8 = 0;
const MP_NMI: u8 = 1;
const MP_EXTINT: u8 = 3;
/// The LAPIC version KVM's in-kernel LAPIC reports, and the I/O APIC's.
const APIC_VERSION: u8 = 0x14;
const IOAPIC_VERSION: u8 = 0x11;
/// ISA IRQs routed to the I/O APIC's pins one to one (KVM's default GSI routing).
const ISA_IRQS: u8 = 16;

fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |sum, b| sum.wrapping_sub(*b))
}

/// The table for `cpus` processors, to be written at `base` (floating pointer first).
pub fn build(cpus: u8, base: u64) -> Vec<u8> {
    let ioapic_id = cpus + 1;
    let mut entries: Vec<u8> = Vec::new();
    let mut count = 0u16;
    for cpu in 0..cpus {
        let flags = 1 | if cpu == 0 { 2 } else { 0 }; // enabled, BSP
        entries.extend_from_slice(&[MP_PROCESSOR, cpu, APIC_VERSION, flags]);
        entries.extend_from_slice(&0x600u32.to_le_bytes()); // signature: family 6
        entries.extend_from_slice(&0x201u32.to_le_bytes()); // features: FPU, APIC
        entries.extend_from_slice(&[0; 8]);
        count += 1;
    }
    entries.extend_from_slice(&[MP_BUS, 0]);
    entries.extend_from_slice(b"ISA   ");
    entries.extend_from_slice(&[MP_IOAPIC, ioapic_id, IOAPIC_VERSION, 1]);
    entries.extend_from_slice(&(IOAPIC_BASE as u32).to_le_bytes());
    count += 2;
    for irq in 0..ISA_IRQS {
        entries.extend_from_slice(&[MP_INTSRC, MP_INT, 0, 0, 0, irq, ioapic_id, irq]);
        count += 1;
    }
    // LINT0 ExtINT (the PIC's virtual wire) on the BSP, LINT1 NMI on every LAPIC.
    entries.extend_from_slice(&[MP_LINTSRC, MP_EXTINT, 0, 0, 0, 0, 0, 0]);
    entries.extend_from_slice(&[MP_LINTSRC, MP_NMI, 0, 0, 0, 0, 0xff, 1]);
    count += 2;

    let table_addr = base + 16;
    let mut table = Vec::with_capacity(44 + entries.len());
    table.extend_from_slice(b"PCMP");
    table.extend_from_slice(&((44 + entries.len()) as u16).to_le_bytes());
    table.push(4); // spec revision 1.4
    table.push(0); // checksum, below
    table.extend_from_slice(b"PERFVM  ");
    table.extend_from_slice(b"000000000000");
    table.extend_from_slice(&0u32.to_le_bytes()); // OEM table
    table.extend_from_slice(&0u16.to_le_bytes());
    table.extend_from_slice(&count.to_le_bytes());
    table.extend_from_slice(&(LAPIC_BASE as u32).to_le_bytes());
    table.extend_from_slice(&[0; 4]); // extended table length and checksum, reserved
    table.extend_from_slice(&entries);
    table[7] = checksum(&table);

    let mut out = Vec::with_capacity(16 + table.len());
    out.extend_from_slice(b"_MP_");
    out.extend_from_slice(&(table_addr as u32).to_le_bytes());
    out.extend_from_slice(&[1, 4, 0, 0, 0, 0, 0, 0]); // length 16 bytes, rev 1.4, checksum, features
    out[10] = checksum(&out);
    out.extend_from_slice(&table);
    out
}

/// Write the table for `cpus` processors at the start of the EBDA.
pub fn write(mem: &GuestMemoryMmap, cpus: u8) -> vm_memory::GuestMemoryResult<()> {
    mem.write_slice(&build(cpus, EBDA_START), GuestAddress(EBDA_START))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_and_counts_hold() {
        let t = build(2, EBDA_START);
        assert_eq!(&t[..4], b"_MP_");
        assert_eq!(t[..16].iter().fold(0u8, |s, b| s.wrapping_add(*b)), 0, "pointer checksum");
        assert_eq!(u32::from_le_bytes(t[4..8].try_into().unwrap()) as u64, EBDA_START + 16);
        let table = &t[16..];
        assert_eq!(&table[..4], b"PCMP");
        let len = u16::from_le_bytes([table[4], table[5]]) as usize;
        assert_eq!(len, table.len());
        assert_eq!(table.iter().fold(0u8, |s, b| s.wrapping_add(*b)), 0, "table checksum");
        let count = u16::from_le_bytes([table[34], table[35]]);
        assert_eq!(count, 2 + 2 + 16 + 2, "2 CPUs, bus, I/O APIC, 16 IRQs, 2 LINTs");
        assert_eq!(table[44], MP_PROCESSOR);
        assert_eq!(table[44 + 3], 3, "CPU 0 is the enabled BSP");
        assert_eq!(table[64 + 3], 1, "CPU 1 is enabled");
        assert!(EBDA_START + t.len() as u64 <= 0xa0000, "inside the EBDA's KiB");
    }
}
