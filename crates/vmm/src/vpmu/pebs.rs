//! Software PEBS, the VMM's half: when the model says a PEBS assist is due
//! ([`pmu::Pmu::take_pebs_overflows`]), write the record into the guest's DS buffer the way
//! the processor would (Intel SDM Vol. 3B, "Debug Store (DS) Mechanism", 64-bit DS save
//! area, and "PEBS Record Format", format 1) and tell the model what happened.
//!
//! An assist for GP counter `i`, with the DS save area at IA32_DS_AREA (guest-linear):
//! 1. read the PEBS buffer base, index, absolute maximum, interrupt threshold and counter
//!    `i`'s reset value from the DS save area;
//! 2. if a record fits (`index + 176 <= absolute maximum`), write it at `index`, advance
//!    the index by the record size, reload the counter from the reset value and, if the
//!    index reached the interrupt threshold (`index >= threshold`), set
//!    GLOBAL_STATUS.OvfBuffer and raise the PMI through LVTPC;
//! 3. otherwise (buffer full, or the DS area / buffer not mapped) skip the assist entirely
//!    and count it dropped.
//!
//! The record (format 1, [`PEBS_RECORD_SIZE`] = 0xB0 bytes, little-endian quadwords):
//! RFLAGS, RIP, RAX, RBX, RCX, RDX, RSI, RDI, RBP, RSP, R8-R15, IA32_PERF_GLOBAL_STATUS,
//! then data linear address, data source and latency, which are 0 (no load-latency
//! facility). The registers are the vCPU's when the assist runs: after the instruction
//! that triggered it (trap-like PEBS, PERF_CAPABILITIES.PEBS_TRAP), so RIP is the *next*
//! instruction. On the exact backend that is exact: the trigger is the counter's first
//! event after its overflow, and the VMM sees it on that instruction's single-step. On
//! the perf backend it is wherever the vCPU was when the overflow signal stopped it.
//! GLOBAL_STATUS is the model's at the assist, including the counter's own overflow bit.
//!
//! Nothing here runs unless an assist is due: no work on VM transitions.

use crate::vstate::linear::{LinearMemory, VcpuLinear};
use kvm_bindings::kvm_regs;
use kvm_ioctls::VcpuFd;
use pmu::{CountSource, PmcIdx, Pmu, PEBS_RECORD_SIZE};
use vm_memory::GuestMemoryMmap;

/// DS save area, 64-bit layout: offset of the PEBS buffer base.
pub const DS_PEBS_BUFFER_BASE: u64 = 0x20;
/// Offset of the PEBS index (where the next record goes).
pub const DS_PEBS_INDEX: u64 = 0x28;
/// Offset of the PEBS absolute maximum (first byte past the buffer).
pub const DS_PEBS_ABSOLUTE_MAXIMUM: u64 = 0x30;
/// Offset of the PEBS interrupt threshold.
pub const DS_PEBS_INTERRUPT_THRESHOLD: u64 = 0x38;
/// Offset of PEBS counter 0's reset value; counter `i`'s is at `+ 8 * i`.
pub const DS_PEBS_COUNTER_RESET: u64 = 0x40;

const RECORD_LEN: usize = PEBS_RECORD_SIZE as usize;

/// The PEBS fields of a DS save area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DsPebs {
    /// First byte of the PEBS buffer (linear).
    pub base: u64,
    /// Where the next record goes (linear).
    pub index: u64,
    /// First byte past the buffer (linear).
    pub absolute_maximum: u64,
    /// An index at or past this raises the PMI (linear).
    pub interrupt_threshold: u64,
}

impl DsPebs {
    /// Read the fields of the DS save area at linear `ds_area`.
    pub fn read(mem: &mut impl LinearMemory, ds_area: u64) -> Option<DsPebs> {
        let at = |off: u64| ds_area.checked_add(off);
        Some(DsPebs {
            base: mem.read_u64(at(DS_PEBS_BUFFER_BASE)?)?,
            index: mem.read_u64(at(DS_PEBS_INDEX)?)?,
            absolute_maximum: mem.read_u64(at(DS_PEBS_ABSOLUTE_MAXIMUM)?)?,
            interrupt_threshold: mem.read_u64(at(DS_PEBS_INTERRUPT_THRESHOLD)?)?,
        })
    }

    /// Where the next record goes, if it fits below the absolute maximum (the processor
    /// writes no record past it).
    pub fn next_record(&self) -> Option<u64> {
        let end = self.index.checked_add(PEBS_RECORD_SIZE)?;
        (end <= self.absolute_maximum).then_some(self.index)
    }
}

/// One PEBS record, format 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PebsRecord {
    /// RFLAGS after the triggering instruction.
    pub rflags: u64,
    /// RIP after the triggering instruction (trap-like PEBS).
    pub rip: u64,
    /// RAX, RBX, RCX, RDX, RSI, RDI, RBP, RSP, R8..R15: the record's order.
    pub gprs: [u64; 16],
    /// IA32_PERF_GLOBAL_STATUS at the assist.
    pub global_status: u64,
}

impl PebsRecord {
    /// The record of the vCPU state `regs` with GLOBAL_STATUS `global_status`.
    pub fn new(regs: &kvm_regs, global_status: u64) -> PebsRecord {
        let r = regs;
        PebsRecord {
            rflags: r.rflags,
            rip: r.rip,
            gprs: [
                r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14,
                r.r15,
            ],
            global_status,
        }
    }

    /// The record as the guest sees it; data linear address, data source and latency 0.
    pub fn to_bytes(&self) -> [u8; RECORD_LEN] {
        let mut out = [0u8; RECORD_LEN];
        let words = [self.rflags, self.rip].into_iter().chain(self.gprs).chain([self.global_status]);
        for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// What one assist did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assist {
    /// The record was written and the index advanced; the counter restarts from `reset`;
    /// `interrupt`: the index reached the interrupt threshold.
    Written {
        /// The counter's reset value from the DS save area.
        reset: u64,
        /// The index reached the interrupt threshold.
        interrupt: bool,
    },
    /// No room below the absolute maximum: skipped.
    BufferFull,
    /// The DS save area or the buffer is not mapped to guest RAM: skipped.
    Unmapped,
}

/// One PEBS assist for GP counter `counter` with the DS save area at linear `ds_area`.
pub fn assist(mem: &mut impl LinearMemory, ds_area: u64, counter: u8, record: &PebsRecord) -> Assist {
    let Some(ds) = DsPebs::read(mem, ds_area) else { return Assist::Unmapped };
    let reset_at = ds_area.checked_add(DS_PEBS_COUNTER_RESET + 8 * u64::from(counter));
    let Some(reset) = reset_at.and_then(|a| mem.read_u64(a)) else { return Assist::Unmapped };
    let Some(at) = ds.next_record() else { return Assist::BufferFull };
    if mem.write(at, &record.to_bytes()).is_none() {
        return Assist::Unmapped;
    }
    let index = at + PEBS_RECORD_SIZE;
    if mem.write_u64(ds_area + DS_PEBS_INDEX, index).is_none() {
        return Assist::Unmapped;
    }
    Assist::Written { reset, interrupt: index >= ds.interrupt_threshold }
}

/// Run the due assists of `mask` (GLOBAL_CTRL layout) with the vCPU's registers now, and
/// report each to the model. Returns whether a PMI is owed (an index reached its threshold).
pub fn run_assists<B: CountSource>(pmu: &mut Pmu<B>, vcpu: &VcpuFd, mem: &GuestMemoryMmap, mask: u64) -> bool {
    let regs = vcpu.get_regs().ok();
    let mut linear = VcpuLinear::new(vcpu, mem);
    let mut pmi = false;
    for bit in (0..64).filter(|b| mask >> b & 1 == 1) {
        let Some(idx) = PmcIdx::from_bit(bit) else { continue };
        let outcome = match &regs {
            // Format 1 has PEBS on GP counters only (the model never arms a fixed one).
            Some(r) if !idx.is_fixed() => {
                let record = PebsRecord::new(r, pmu.global_status());
                assist(&mut linear, pmu.ds_area(), idx.number(), &record)
            }
            _ => Assist::Unmapped,
        };
        match outcome {
            Assist::Written { reset, interrupt } => {
                pmu.pebs_record_written(idx, reset);
                if interrupt {
                    pmu.pebs_buffer_interrupt();
                    pmi = true;
                }
            }
            Assist::BufferFull | Assist::Unmapped => pmu.pebs_record_dropped(idx),
        }
    }
    pmi
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vstate::linear::{pages, Identity};
    use vm_memory::{Bytes, GuestAddress};

    const DS: u64 = 0x1000;
    const BUF: u64 = 0x2000;
    const SIZE: u64 = PEBS_RECORD_SIZE;

    fn memory() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap()
    }

    /// A DS area at DS with a buffer of `n` records at BUF and the threshold after `t`.
    fn setup(mem: &GuestMemoryMmap, n: u64, t: u64, resets: &[u64]) {
        let m = &mut Identity(mem);
        m.write_u64(DS + DS_PEBS_BUFFER_BASE, BUF).unwrap();
        m.write_u64(DS + DS_PEBS_INDEX, BUF).unwrap();
        m.write_u64(DS + DS_PEBS_ABSOLUTE_MAXIMUM, BUF + n * SIZE).unwrap();
        m.write_u64(DS + DS_PEBS_INTERRUPT_THRESHOLD, BUF + t * SIZE).unwrap();
        for (i, &r) in resets.iter().enumerate() {
            m.write_u64(DS + DS_PEBS_COUNTER_RESET + 8 * i as u64, r).unwrap();
        }
    }

    fn regs() -> kvm_regs {
        kvm_regs {
            rax: 0xA0,
            rbx: 0xB0,
            rcx: 0xC0,
            rdx: 0xD0,
            rsi: 0x51,
            rdi: 0xD1,
            rsp: 0x5F,
            rbp: 0xBF,
            r8: 8,
            r9: 9,
            r10: 10,
            r11: 11,
            r12: 12,
            r13: 13,
            r14: 14,
            r15: 15,
            rip: 0x10_0033,
            rflags: 0x246,
        }
    }

    #[test]
    fn ds_offsets_match_the_sdm_64_bit_layout() {
        // BTS base/index/max/threshold at 0x00..0x18, then the PEBS fields.
        assert_eq!(
            [
                DS_PEBS_BUFFER_BASE,
                DS_PEBS_INDEX,
                DS_PEBS_ABSOLUTE_MAXIMUM,
                DS_PEBS_INTERRUPT_THRESHOLD,
                DS_PEBS_COUNTER_RESET
            ],
            [0x20, 0x28, 0x30, 0x38, 0x40]
        );
    }

    #[test]
    fn record_layout_format_1() {
        let bytes = PebsRecord::new(&regs(), 1).to_bytes();
        assert_eq!(bytes.len(), 0xB0);
        let q = |off: usize| u64::from_le_bytes(bytes[off..off + 8].try_into().unwrap());
        assert_eq!((q(0x00), q(0x08)), (0x246, 0x10_0033), "RFLAGS, RIP");
        assert_eq!([q(0x10), q(0x18), q(0x20), q(0x28)], [0xA0, 0xB0, 0xC0, 0xD0], "RAX..RDX");
        assert_eq!([q(0x30), q(0x38), q(0x40), q(0x48)], [0x51, 0xD1, 0xBF, 0x5F], "RSI, RDI, RBP, RSP");
        for (i, off) in (0x50..0x90).step_by(8).enumerate() {
            assert_eq!(q(off), 8 + i as u64, "R{}", 8 + i);
        }
        assert_eq!(q(0x90), 1, "GLOBAL_STATUS");
        assert_eq!([q(0x98), q(0xA0), q(0xA8)], [0, 0, 0], "DLA, data source, latency");
    }

    #[test]
    fn assist_writes_advances_and_reports_the_reset() {
        let mem = memory();
        setup(&mem, 4, 2, &[(-7i64) as u64, 0x1234]);
        let m = &mut Identity(&mem);
        let rec = PebsRecord::new(&regs(), 1);
        assert_eq!(assist(m, DS, 0, &rec), Assist::Written { reset: (-7i64) as u64, interrupt: false });
        assert_eq!(m.read_u64(DS + DS_PEBS_INDEX), Some(BUF + SIZE));
        let mut got = [0u8; RECORD_LEN];
        m.read(BUF, &mut got).unwrap();
        assert_eq!(got, rec.to_bytes());
        // The second record reaches the threshold; counter 1's own reset value.
        assert_eq!(assist(m, DS, 1, &rec), Assist::Written { reset: 0x1234, interrupt: true });
        assert_eq!(m.read_u64(DS + DS_PEBS_INDEX), Some(BUF + 2 * SIZE));
        // Past the threshold every record interrupts.
        assert!(matches!(assist(m, DS, 0, &rec), Assist::Written { interrupt: true, .. }));
        assert!(matches!(assist(m, DS, 0, &rec), Assist::Written { .. }));
        // Full: nothing written, index unchanged, the byte after the buffer untouched.
        m.write_u64(BUF + 4 * SIZE, 0xC0FFEE).unwrap();
        assert_eq!(assist(m, DS, 0, &rec), Assist::BufferFull);
        assert_eq!(m.read_u64(DS + DS_PEBS_INDEX), Some(BUF + 4 * SIZE));
        assert_eq!(m.read_u64(BUF + 4 * SIZE), Some(0xC0FFEE));
    }

    #[test]
    fn a_record_fits_only_whole() {
        let ds = DsPebs { base: BUF, index: BUF, absolute_maximum: BUF + SIZE - 1, interrupt_threshold: 0 };
        assert_eq!(ds.next_record(), None);
        let ds = DsPebs { absolute_maximum: BUF + SIZE, ..ds };
        assert_eq!(ds.next_record(), Some(BUF));
        let ds = DsPebs { index: u64::MAX - 8, absolute_maximum: u64::MAX, ..ds };
        assert_eq!(ds.next_record(), None, "no wrap-around");
    }

    #[test]
    fn unmapped_ds_area_or_buffer_is_skipped() {
        let mem = memory();
        let rec = PebsRecord::new(&regs(), 1);
        assert_eq!(assist(&mut Identity(&mem), 0x10_0000, 0, &rec), Assist::Unmapped);
        assert_eq!(assist(&mut Identity(&mem), u64::MAX - 0x10, 0, &rec), Assist::Unmapped);
        let m = &mut Identity(&mem);
        m.write_u64(DS + DS_PEBS_BUFFER_BASE, 0xF000).unwrap();
        m.write_u64(DS + DS_PEBS_INDEX, 0xFFC0).unwrap();
        m.write_u64(DS + DS_PEBS_ABSOLUTE_MAXIMUM, 0x2_0000).unwrap();
        assert_eq!(assist(m, DS, 0, &rec), Assist::Unmapped, "record runs past RAM");
        assert_eq!(m.read_u64(DS + DS_PEBS_INDEX), Some(0xFFC0));
    }

    /// Linear memory mapped page by page in reverse (linear page p -> physical 15 - p).
    struct Reversed<'a>(&'a GuestMemoryMmap);

    impl LinearMemory for Reversed<'_> {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> Option<()> {
            for (va, off, n) in pages(addr, buf.len()) {
                let pa = (15 - (va >> 12)) << 12 | va & 0xfff;
                self.0.read_slice(&mut buf[off..off + n], GuestAddress(pa)).ok()?;
            }
            Some(())
        }
        fn write(&mut self, addr: u64, buf: &[u8]) -> Option<()> {
            for (va, off, n) in pages(addr, buf.len()) {
                let pa = (15 - (va >> 12)) << 12 | va & 0xfff;
                self.0.write_slice(&buf[off..off + n], GuestAddress(pa)).ok()?;
            }
            Some(())
        }
    }

    #[test]
    fn records_straddling_pages_follow_the_mapping() {
        let mem = memory();
        let m = &mut Reversed(&mem);
        let start = 0x3000 - 0x40; // the record crosses into the next linear page
        m.write_u64(DS + DS_PEBS_BUFFER_BASE, start).unwrap();
        m.write_u64(DS + DS_PEBS_INDEX, start).unwrap();
        m.write_u64(DS + DS_PEBS_ABSOLUTE_MAXIMUM, start + SIZE).unwrap();
        m.write_u64(DS + DS_PEBS_INTERRUPT_THRESHOLD, start + SIZE).unwrap();
        let rec = PebsRecord::new(&regs(), 1);
        assert!(matches!(assist(m, DS, 0, &rec), Assist::Written { interrupt: true, .. }));
        let mut got = [0u8; RECORD_LEN];
        m.read(start, &mut got).unwrap();
        assert_eq!(got, rec.to_bytes());
        // Physically: the first 0x40 bytes at the end of page 13, the rest at page 12.
        let mut head = [0u8; 0x40];
        mem.read_slice(&mut head, GuestAddress(0xE000 - 0x40)).unwrap();
        assert_eq!(head[..], rec.to_bytes()[..0x40]);
        assert_eq!(mem.read_obj::<u64>(GuestAddress(0xC000)).unwrap(), 0xBF, "RBP, at record offset 0x40");
    }
}
