//! AMD64 performance monitoring (AMD APM Vol. 2, "Performance Monitoring Counters"; KVM
//! `svm/pmu.c`): the four legacy counters, PerfCtrExtCore's six, PerfMonV2's global
//! control and status, AMD's event selector (12-bit event select), RDPMC by counter
//! number, and CPUID 0x80000001 / 0x80000022. No fixed counters, no PEBS.
//!
//! Writes follow KVM (`amd_pmu_set_msr`, `kvm_pmu_set_msr`) and AMD hardware rather than
//! Intel's #GP rules: reserved bits of PERF_CTL and PerfCntrGlobalCtl are cleared, a guest
//! write to PerfCntrGlobalStatus is ignored, counters take the low 48 bits of any value.
//! Only MSRs the PMU does not have, and RDPMC of a counter it does not have, #GP.

use super::{AmdPerfMon, CapsRequest, CounterWrite, PmuReg, ReservedBits, Vendor, VendorOps};
use crate::caps::PmuCaps;
use crate::cpuid::{LEAF_8000_0001_ECX_PERFCTR_CORE, LEAF_8000_0022_EAX_PERFMON_V2};
use crate::error::ConfigError;
use crate::event::ArchEvent;
use crate::eventsel::EventSel;
use crate::msr::{MsrIndex, MsrRange};
use crate::pmc::{PmcIdx, RdpmcIdx};

/// Most general-purpose counters an AMD PMU has (PerfCtrExtCore; KVM
/// `KVM_MAX_NR_AMD_GP_COUNTERS`).
pub const AMD_MAX_GP_COUNTERS: u8 = 6;
/// Counters with legacy MSRs (Linux `AMD64_NUM_COUNTERS`).
const LEGACY_COUNTERS: u8 = 4;

impl MsrIndex {
    /// PERF_CTL0, the legacy event selector of counter 0 (Linux `MSR_K7_EVNTSEL0`);
    /// PERF_CTLi is `0xC0010000 + i`, i < 4.
    pub const AMD_PERF_CTL0: MsrIndex = MsrIndex(0xC001_0000);
    /// PERF_CTR0, the legacy counter 0 (Linux `MSR_K7_PERFCTR0`); PERF_CTRi is
    /// `0xC0010004 + i`, i < 4.
    pub const AMD_PERF_CTR0: MsrIndex = MsrIndex(0xC001_0004);
    /// PerfCtrExtCore PERF_CTL0 (Linux `MSR_F15H_PERF_CTL0`); PERF_CTLi is
    /// `0xC0010200 + 2i`.
    pub const AMD_EXT_PERF_CTL0: MsrIndex = MsrIndex(0xC001_0200);
    /// PerfCtrExtCore PERF_CTR0 (Linux `MSR_F15H_PERF_CTR0`); PERF_CTRi is
    /// `0xC0010201 + 2i`.
    pub const AMD_EXT_PERF_CTR0: MsrIndex = MsrIndex(0xC001_0201);
    /// PerfMonV2 PerfCntrGlobalStatus (Linux `MSR_AMD64_PERF_CNTR_GLOBAL_STATUS`).
    pub const AMD_PERF_GLOBAL_STATUS: MsrIndex = MsrIndex(0xC000_0300);
    /// PerfMonV2 PerfCntrGlobalCtl (Linux `MSR_AMD64_PERF_CNTR_GLOBAL_CTL`).
    pub const AMD_PERF_GLOBAL_CTL: MsrIndex = MsrIndex(0xC000_0301);
    /// PerfMonV2 PerfCntrGlobalStatusClr (Linux `MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR`).
    pub const AMD_PERF_GLOBAL_STATUS_CLR: MsrIndex = MsrIndex(0xC000_0302);
    /// PerfMonV2 PerfCntrGlobalStatusSet (Linux `MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_SET`).
    pub const AMD_PERF_GLOBAL_STATUS_SET: MsrIndex = MsrIndex(0xC000_0303);

    /// Legacy PERF_CTLi.
    pub const fn amd_perf_ctl(i: u8) -> MsrIndex {
        MsrIndex(Self::AMD_PERF_CTL0.0 + i as u32)
    }
    /// Legacy PERF_CTRi.
    pub const fn amd_perf_ctr(i: u8) -> MsrIndex {
        MsrIndex(Self::AMD_PERF_CTR0.0 + i as u32)
    }
    /// PerfCtrExtCore PERF_CTLi.
    pub const fn amd_ext_perf_ctl(i: u8) -> MsrIndex {
        MsrIndex(Self::AMD_EXT_PERF_CTL0.0 + 2 * i as u32)
    }
    /// PerfCtrExtCore PERF_CTRi.
    pub const fn amd_ext_perf_ctr(i: u8) -> MsrIndex {
        MsrIndex(Self::AMD_EXT_PERF_CTR0.0 + 2 * i as u32)
    }
}

/// What an MSR number names in AMD64 performance monitoring, before asking whether this
/// PMU has it (e.g. `ExtPerfCtl(5)` decodes whatever the level; a PMU without
/// PerfCtrExtCore then #GPs it). [`PmuCaps::decode_msr`] is the vendor-neutral decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AmdMsr {
    /// Legacy PERF_CTLi (i < 4).
    PerfCtl(u8),
    /// Legacy PERF_CTRi (i < 4).
    PerfCtr(u8),
    /// PerfCtrExtCore PERF_CTLi (i < 6).
    ExtPerfCtl(u8),
    /// PerfCtrExtCore PERF_CTRi (i < 6).
    ExtPerfCtr(u8),
    /// PerfCntrGlobalStatus.
    GlobalStatus,
    /// PerfCntrGlobalCtl.
    GlobalCtl,
    /// PerfCntrGlobalStatusClr.
    GlobalStatusClr,
    /// PerfCntrGlobalStatusSet.
    GlobalStatusSet,
}

impl AmdMsr {
    /// Decodes `msr`, or `None` if it is no AMD core performance-monitoring MSR.
    pub fn decode(msr: MsrIndex) -> Option<AmdMsr> {
        let off = |base: MsrIndex, n: u32| msr.0.checked_sub(base.0).filter(|&off| off < n);
        if let Some(i) = off(MsrIndex::AMD_PERF_CTL0, u32::from(LEGACY_COUNTERS)) {
            return Some(AmdMsr::PerfCtl(i as u8));
        }
        if let Some(i) = off(MsrIndex::AMD_PERF_CTR0, u32::from(LEGACY_COUNTERS)) {
            return Some(AmdMsr::PerfCtr(i as u8));
        }
        // CTL/CTR pairs interleaved: even offsets select, odd ones count (KVM
        // `get_gp_pmc_amd`).
        if let Some(o) = off(MsrIndex::AMD_EXT_PERF_CTL0, 2 * u32::from(AMD_MAX_GP_COUNTERS)) {
            let i = (o / 2) as u8;
            return Some(if o % 2 == 0 { AmdMsr::ExtPerfCtl(i) } else { AmdMsr::ExtPerfCtr(i) });
        }
        match msr {
            MsrIndex::AMD_PERF_GLOBAL_STATUS => Some(AmdMsr::GlobalStatus),
            MsrIndex::AMD_PERF_GLOBAL_CTL => Some(AmdMsr::GlobalCtl),
            MsrIndex::AMD_PERF_GLOBAL_STATUS_CLR => Some(AmdMsr::GlobalStatusClr),
            MsrIndex::AMD_PERF_GLOBAL_STATUS_SET => Some(AmdMsr::GlobalStatusSet),
            _ => None,
        }
    }

    /// The MSR number.
    pub const fn index(self) -> MsrIndex {
        match self {
            AmdMsr::PerfCtl(i) => MsrIndex::amd_perf_ctl(i),
            AmdMsr::PerfCtr(i) => MsrIndex::amd_perf_ctr(i),
            AmdMsr::ExtPerfCtl(i) => MsrIndex::amd_ext_perf_ctl(i),
            AmdMsr::ExtPerfCtr(i) => MsrIndex::amd_ext_perf_ctr(i),
            AmdMsr::GlobalStatus => MsrIndex::AMD_PERF_GLOBAL_STATUS,
            AmdMsr::GlobalCtl => MsrIndex::AMD_PERF_GLOBAL_CTL,
            AmdMsr::GlobalStatusClr => MsrIndex::AMD_PERF_GLOBAL_STATUS_CLR,
            AmdMsr::GlobalStatusSet => MsrIndex::AMD_PERF_GLOBAL_STATUS_SET,
        }
    }
}

/// An AMD PERF_CTLn value. USR (16), OS (17), EDGE (18), INT (20), EN (22), INV (23) and
/// CMASK (31:24) sit where Intel has them ([`EventSel`] reads them); the event select is
/// 12 bits, 7:0 and 35:32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AmdEventSel(pub u64);

impl AmdEventSel {
    /// Event select bits 11:8, in bits 35:32.
    pub const EVENT_HI: u64 = 0xF << 32;
    /// GuestOnly (bit 40): not offered to guests, so reserved.
    pub const GUEST_ONLY: u64 = 1 << 40;
    /// HostOnly (bit 41): not offered to guests, so reserved.
    pub const HOST_ONLY: u64 = 1 << 41;
    /// Reserved bits for a guest: 19, 21 and 63:36, which includes HostOnly/GuestOnly (KVM
    /// `reserved_bits = 0xfffffff000280000`). A write clears them, it does not #GP.
    pub const RESERVED: u64 = 0xFFFF_FFF0_0028_0000;

    /// The selector for `event` (12 bits) and `umask`, with no other bit set.
    pub const fn encode(event: u16, umask: u8) -> u64 {
        (event as u64 & 0xFF) | (umask as u64) << 8 | (event as u64 >> 8 & 0xF) << 32
    }
    /// Event select, 12 bits (7:0 and 35:32).
    pub const fn event(self) -> u16 {
        (self.0 & 0xFF) as u16 | ((self.0 >> 32 & 0xF) as u16) << 8
    }
    /// Unit mask, bits 15:8.
    pub const fn umask(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// The fields AMD and Intel share (USR, OS, EDGE, INT, EN, INV, CMASK).
    pub const fn common(self) -> EventSel {
        EventSel(self.0)
    }
    /// The architectural event this selects, if any ([`ArchEvent::from_amd_select`]).
    pub fn arch_event(self) -> Option<ArchEvent> {
        ArchEvent::from_amd_select(self.event(), self.umask())
    }
}

/// AMD encodings of the architectural events: Linux's generic-event maps
/// (`arch/x86/events/amd/core.c`): `amd_zen2_perfmon_event_map` / zen4 first (the
/// canonical encoding), then the family 10h-16h `amd_perfmon_event_map` codes of cache
/// references and misses. Reference cycles are Zen 4's PMCx120 (P0-frequency cycles not
/// halted, Linux's `ref-cycles` there), a 12-bit event select.
const AMD_EVENTS: [(u16, u8, ArchEvent); 9] = [
    (0x076, 0x00, ArchEvent::CoreCycles),
    (0x0C0, 0x00, ArchEvent::Instructions),
    (0x120, 0x00, ArchEvent::RefCycles),
    (0x060, 0xFF, ArchEvent::LlcReferences),
    (0x064, 0x09, ArchEvent::LlcMisses),
    (0x0C2, 0x00, ArchEvent::Branches),
    (0x0C3, 0x00, ArchEvent::BranchMisses),
    (0x07D, 0x07, ArchEvent::LlcReferences),
    (0x07E, 0x07, ArchEvent::LlcMisses),
];

impl ArchEvent {
    /// `(event select, unit mask)` of this event in AMD PERF_CTL encoding (see
    /// [`AmdEventSel`]; Linux's Zen event map).
    pub fn amd_select(self) -> (u16, u8) {
        let (event, umask, _) = AMD_EVENTS.into_iter().find(|&(_, _, e)| e == self).expect("every event has one");
        (event, umask)
    }

    /// The architectural event an AMD `event`/`umask` pair selects, if any: Linux's generic
    /// hardware events on AMD (cycles 0x76, instructions 0xC0, branches 0xC2, branch misses
    /// 0xC3, cache references 0xFF60 or 0x077D, cache misses 0x0964 or 0x077E, reference
    /// cycles 0x120).
    pub fn from_amd_select(event: u16, umask: u8) -> Option<ArchEvent> {
        AMD_EVENTS.into_iter().find(|&(e, u, _)| (e, u) == (event, umask)).map(|(_, _, a)| a)
    }
}

/// AMD's [`VendorOps`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Amd;

impl Amd {
    fn perfmon(caps: &PmuCaps) -> AmdPerfMon {
        caps.amd_perfmon.unwrap_or(AmdPerfMon::Legacy)
    }
}

impl VendorOps for Amd {
    fn refresh(&self, req: &CapsRequest) -> Result<PmuCaps, ConfigError> {
        if req.pebs {
            return Err(ConfigError::Pebs(Vendor::Amd));
        }
        let perfmon = req.amd_perfmon;
        let gp_counters = req.gp_counters;
        let fits = match perfmon {
            AmdPerfMon::Legacy => gp_counters == LEGACY_COUNTERS,
            AmdPerfMon::ExtCore => gp_counters == AMD_MAX_GP_COUNTERS,
            AmdPerfMon::PerfMonV2 => (1..=AMD_MAX_GP_COUNTERS).contains(&gp_counters),
        };
        if !fits {
            return Err(ConfigError::AmdGpCounters { perfmon, gp: gp_counters });
        }
        let counters = (1u64 << gp_counters) - 1;
        let v2 = perfmon == AmdPerfMon::PerfMonV2;
        // Without PerfMonV2 there is no global register at all: nothing may be written to
        // GLOBAL_CTRL (it stays at its reset value, every counter enabled) and no overflow
        // is recorded in a status nobody can read.
        let global_reserved = if v2 { !counters } else { u64::MAX };
        Ok(PmuCaps {
            vendor: Vendor::Amd,
            version: if v2 { 2 } else { 1 },
            gp_counters,
            fixed_counters: 0,
            full_width_writes: false,
            available: req.available,
            counters,
            eventsel_reserved: AmdEventSel::RESERVED,
            fixed_ctr_ctrl_reserved: u64::MAX,
            global_ctrl_reserved: global_reserved,
            global_status_reserved: global_reserved,
            reserved_bits: ReservedBits::Ignore,
            pebs: false,
            amd_perfmon: Some(perfmon),
        })
    }

    /// KVM `amd_is_valid_msr` / `get_gp_pmc_amd`: the legacy MSRs at every level (for the
    /// counters that exist), the interleaved ones with PerfCtrExtCore, the global ones with
    /// PerfMonV2.
    fn decode_msr(&self, caps: &PmuCaps, msr: MsrIndex) -> Option<PmuReg> {
        let perfmon = Self::perfmon(caps);
        let ext = perfmon >= AmdPerfMon::ExtCore;
        let v2 = perfmon == AmdPerfMon::PerfMonV2;
        let gp = |i| PmcIdx::gp(i).filter(|&p| caps.has(p));
        match AmdMsr::decode(msr)? {
            AmdMsr::PerfCtl(i) => gp(i).map(PmuReg::EventSel),
            AmdMsr::PerfCtr(i) => gp(i).map(|p| PmuReg::Counter(p, CounterWrite::Masked)),
            AmdMsr::ExtPerfCtl(i) if ext => gp(i).map(PmuReg::EventSel),
            AmdMsr::ExtPerfCtr(i) if ext => gp(i).map(|p| PmuReg::Counter(p, CounterWrite::Masked)),
            AmdMsr::GlobalStatus if v2 => Some(PmuReg::GlobalStatus),
            AmdMsr::GlobalCtl if v2 => Some(PmuReg::GlobalCtrl),
            AmdMsr::GlobalStatusClr if v2 => Some(PmuReg::GlobalStatusClear),
            AmdMsr::GlobalStatusSet if v2 => Some(PmuReg::GlobalStatusSet),
            _ => None,
        }
    }

    fn reg_msr(&self, caps: &PmuCaps, reg: PmuReg) -> Option<MsrIndex> {
        let ext = Self::perfmon(caps) >= AmdPerfMon::ExtCore;
        let m = match reg {
            PmuReg::Counter(p, _) if p.is_fixed() => return None,
            PmuReg::Counter(p, _) if ext => AmdMsr::ExtPerfCtr(p.number()),
            PmuReg::Counter(p, _) => AmdMsr::PerfCtr(p.number()),
            PmuReg::EventSel(p) if ext => AmdMsr::ExtPerfCtl(p.number()),
            PmuReg::EventSel(p) => AmdMsr::PerfCtl(p.number()),
            PmuReg::GlobalStatus => AmdMsr::GlobalStatus,
            PmuReg::GlobalCtrl => AmdMsr::GlobalCtl,
            PmuReg::GlobalStatusClear => AmdMsr::GlobalStatusClr,
            PmuReg::GlobalStatusSet => AmdMsr::GlobalStatusSet,
            PmuReg::FixedCtrCtrl
            | PmuReg::PerfCapabilities
            | PmuReg::MiscEnable
            | PmuReg::PebsEnable
            | PmuReg::DsArea => return None,
        };
        Some(m.index())
    }

    fn msr_ranges(&self, caps: &PmuCaps) -> Vec<MsrRange> {
        let perfmon = Self::perfmon(caps);
        let legacy = u32::from(caps.gp_counters.min(LEGACY_COUNTERS));
        let mut v = vec![
            MsrRange { base: MsrIndex::AMD_PERF_CTL0, count: legacy },
            MsrRange { base: MsrIndex::AMD_PERF_CTR0, count: legacy },
        ];
        if perfmon >= AmdPerfMon::ExtCore {
            v.push(MsrRange { base: MsrIndex::AMD_EXT_PERF_CTL0, count: 2 * u32::from(caps.gp_counters) });
        }
        if perfmon == AmdPerfMon::PerfMonV2 {
            // STATUS, CTL, STATUS_CLR, STATUS_SET are contiguous.
            v.push(MsrRange { base: MsrIndex::AMD_PERF_GLOBAL_STATUS, count: 4 });
        }
        v
    }

    /// ECX is the counter number, 0-5, with no flag bits: anything else #GPs (APM RDPMC;
    /// KVM `amd_check_rdpmc_early`). The whole 48-bit value is returned.
    fn rdpmc_to_pmc(&self, caps: &PmuCaps, ecx: RdpmcIdx) -> Option<(PmcIdx, u64)> {
        let idx = PmcIdx::gp(u8::try_from(ecx.0).ok()?)?;
        caps.has(idx).then_some((idx, u64::MAX))
    }

    fn event_select(&self, eventsel: u64) -> (u16, u8) {
        let s = AmdEventSel(eventsel);
        (s.event(), s.umask())
    }

    fn arch_event(&self, eventsel: u64) -> Option<ArchEvent> {
        AmdEventSel(eventsel).arch_event()
    }

    fn fixed_events(&self) -> &'static [ArchEvent] {
        &[]
    }

    /// 0x80000001 ECX bit 23 with PerfCtrExtCore; 0x80000022 with PerfMonV2: EAX bit 0,
    /// EBX\[3:0\] the number of core counters (no LBR stack, no northbridge counters). Leaf
    /// 0xA and the Intel bits of leaf 1 stay zero.
    fn cpuid(&self, caps: &PmuCaps, function: u32) -> [u32; 4] {
        let perfmon = Self::perfmon(caps);
        match function {
            0x8000_0001 if perfmon >= AmdPerfMon::ExtCore => [0, 0, LEAF_8000_0001_ECX_PERFCTR_CORE, 0],
            0x8000_0022 if perfmon == AmdPerfMon::PerfMonV2 => {
                [LEAF_8000_0022_EAX_PERFMON_V2, u32::from(caps.gp_counters), 0, 0]
            }
            _ => [0; 4],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::HostEventConfig;
    use crate::event::EventSet;
    use crate::pmu::gp_config;

    fn caps(perfmon: AmdPerfMon, gp: u8) -> PmuCaps {
        PmuCaps::amd(perfmon, gp, EventSet::ALL).unwrap()
    }

    fn dec(c: &PmuCaps, msr: u32) -> Option<PmuReg> {
        Amd.decode_msr(c, MsrIndex(msr))
    }

    #[test]
    fn msr_numbers_match_the_apm_and_linux() {
        assert_eq!(MsrIndex::amd_perf_ctl(3).0, 0xC001_0003);
        assert_eq!(MsrIndex::amd_perf_ctr(0).0, 0xC001_0004);
        assert_eq!(MsrIndex::amd_perf_ctr(3).0, 0xC001_0007);
        assert_eq!(MsrIndex::amd_ext_perf_ctl(0).0, 0xC001_0200);
        assert_eq!(MsrIndex::amd_ext_perf_ctr(0).0, 0xC001_0201);
        assert_eq!(MsrIndex::amd_ext_perf_ctl(5).0, 0xC001_020A);
        assert_eq!(MsrIndex::amd_ext_perf_ctr(5).0, 0xC001_020B);
        assert_eq!(MsrIndex::AMD_PERF_GLOBAL_STATUS.0, 0xC000_0300);
        assert_eq!(MsrIndex::AMD_PERF_GLOBAL_CTL.0, 0xC000_0301);
        assert_eq!(MsrIndex::AMD_PERF_GLOBAL_STATUS_CLR.0, 0xC000_0302);
        assert_eq!(MsrIndex::AMD_PERF_GLOBAL_STATUS_SET.0, 0xC000_0303);
    }

    #[test]
    fn decode_index_roundtrip() {
        let mut seen = 0;
        for n in (0xC000_0000..0xC000_1000).chain(0xC001_0000..0xC001_1000) {
            if let Some(m) = AmdMsr::decode(MsrIndex(n)) {
                assert_eq!(m.index(), MsrIndex(n));
                seen += 1;
            }
        }
        // 4 + 4 legacy, 6 + 6 interleaved, 4 global.
        assert_eq!(seen, 24);
        assert_eq!(AmdMsr::decode(MsrIndex(0xC001_0008)), None);
        assert_eq!(AmdMsr::decode(MsrIndex(0xC001_020C)), None);
        assert_eq!(AmdMsr::decode(MsrIndex(0xC000_0304)), None);
        assert_eq!(AmdMsr::decode(MsrIndex(0xC1)), None, "Intel's IA32_PMC0");
    }

    #[test]
    fn decode_by_level() {
        let p = |i| PmcIdx::gp(i).unwrap();
        let masked = CounterWrite::Masked;
        let legacy = caps(AmdPerfMon::Legacy, 4);
        assert_eq!(dec(&legacy, 0xC001_0003), Some(PmuReg::EventSel(p(3))));
        assert_eq!(dec(&legacy, 0xC001_0007), Some(PmuReg::Counter(p(3), masked)));
        assert_eq!(dec(&legacy, 0xC001_0200), None, "no PerfCtrExtCore");
        assert_eq!(dec(&legacy, 0xC000_0301), None, "no PerfMonV2");
        let ext = caps(AmdPerfMon::ExtCore, 6);
        assert_eq!(dec(&ext, 0xC001_0000), Some(PmuReg::EventSel(p(0))), "legacy alias of counter 0");
        assert_eq!(dec(&ext, 0xC001_0200), Some(PmuReg::EventSel(p(0))));
        assert_eq!(dec(&ext, 0xC001_0205), Some(PmuReg::Counter(p(2), masked)));
        assert_eq!(dec(&ext, 0xC001_020B), Some(PmuReg::Counter(p(5), masked)));
        assert_eq!(dec(&ext, 0xC000_0300), None);
        let v2 = caps(AmdPerfMon::PerfMonV2, 2);
        assert_eq!(dec(&v2, 0xC001_0201), Some(PmuReg::Counter(p(0), masked)));
        assert_eq!(dec(&v2, 0xC001_0204), None, "counter 2 of 2");
        assert_eq!(dec(&v2, 0xC001_0002), None, "legacy alias of an absent counter");
        assert_eq!(dec(&v2, 0xC000_0300), Some(PmuReg::GlobalStatus));
        assert_eq!(dec(&v2, 0xC000_0301), Some(PmuReg::GlobalCtrl));
        assert_eq!(dec(&v2, 0xC000_0302), Some(PmuReg::GlobalStatusClear));
        assert_eq!(dec(&v2, 0xC000_0303), Some(PmuReg::GlobalStatusSet));
        for intel in [0xC1, 0x186, 0x309, 0x38D, 0x38E, 0x38F, 0x390, 0x345, 0x1A0] {
            assert_eq!(dec(&v2, intel), None, "{intel:#x}");
        }
    }

    #[test]
    fn reg_msr_inverts_decode() {
        for (perfmon, gp) in [(AmdPerfMon::Legacy, 4), (AmdPerfMon::ExtCore, 6), (AmdPerfMon::PerfMonV2, 5)] {
            let c = caps(perfmon, gp);
            for range in Amd.msr_ranges(&c) {
                for n in range.base.0..range.base.0 + range.count {
                    let reg = dec(&c, n).unwrap();
                    let back = Amd.reg_msr(&c, reg).unwrap();
                    assert_eq!(dec(&c, back.0), Some(reg), "{perfmon:?} {n:#x} -> {reg:?} -> {back:?}");
                }
            }
            assert_eq!(Amd.reg_msr(&c, PmuReg::FixedCtrCtrl), None);
            assert_eq!(Amd.reg_msr(&c, PmuReg::MiscEnable), None);
        }
        // The canonical MSR is the interleaved one once it exists.
        let ext = caps(AmdPerfMon::ExtCore, 6);
        let p0 = PmcIdx::gp(0).unwrap();
        assert_eq!(Amd.reg_msr(&ext, PmuReg::EventSel(p0)), Some(MsrIndex(0xC001_0200)));
        let legacy = caps(AmdPerfMon::Legacy, 4);
        assert_eq!(Amd.reg_msr(&legacy, PmuReg::EventSel(p0)), Some(MsrIndex(0xC001_0000)));
    }

    #[test]
    fn counter_counts_per_level() {
        use AmdPerfMon::*;
        for (perfmon, ok) in [(Legacy, 4..=4), (ExtCore, 6..=6), (PerfMonV2, 1..=6)] {
            for gp in 0..=9 {
                let r = PmuCaps::amd(perfmon, gp, EventSet::ALL);
                assert_eq!(r.is_ok(), ok.contains(&gp), "{perfmon:?} {gp}");
                if r.is_err() {
                    assert_eq!(r, Err(ConfigError::AmdGpCounters { perfmon, gp }));
                }
            }
        }
    }

    #[test]
    fn caps_and_masks() {
        let c = caps(AmdPerfMon::PerfMonV2, 6);
        assert_eq!(c.vendor(), Vendor::Amd);
        assert_eq!((c.version(), c.gp_counters(), c.fixed_counters()), (2, 6, 0));
        assert_eq!(c.counters(), 0x3F);
        assert_eq!(c.eventsel_reserved(), 0xFFFF_FFF0_0028_0000);
        assert_eq!(c.global_ctrl_reserved(), !0x3F);
        assert_eq!(c.global_status_reserved(), !0x3F);
        assert_eq!(c.global_ctrl_reset(), 0x3F, "every GP enable set at reset, as on Intel");
        assert_eq!(c.fixed_ctr_ctrl_reserved(), u64::MAX);
        assert_eq!(c.perf_capabilities(), 0);
        assert!(!c.pebs() && !c.full_width_writes());
        let c = caps(AmdPerfMon::Legacy, 4);
        assert_eq!(c.version(), 1);
        assert_eq!(c.global_ctrl_reserved(), u64::MAX, "no PerfCntrGlobalCtl");
        assert_eq!(c.global_ctrl_reset(), 0xF, "counters count on EN alone");
        assert_eq!(c.amd_perfmon(), Some(AmdPerfMon::Legacy));
    }

    #[test]
    fn msr_ranges_exact() {
        let r = |b: u32, n: u32| MsrRange { base: MsrIndex(b), count: n };
        assert_eq!(Amd.msr_ranges(&caps(AmdPerfMon::Legacy, 4)), vec![r(0xC001_0000, 4), r(0xC001_0004, 4)]);
        assert_eq!(
            Amd.msr_ranges(&caps(AmdPerfMon::ExtCore, 6)),
            vec![r(0xC001_0000, 4), r(0xC001_0004, 4), r(0xC001_0200, 12)]
        );
        assert_eq!(
            Amd.msr_ranges(&caps(AmdPerfMon::PerfMonV2, 3)),
            vec![r(0xC001_0000, 3), r(0xC001_0004, 3), r(0xC001_0200, 6), r(0xC000_0300, 4)]
        );
    }

    #[test]
    fn rdpmc_is_the_counter_number() {
        let c = caps(AmdPerfMon::ExtCore, 6);
        for n in 0..6 {
            assert_eq!(Amd.rdpmc_to_pmc(&c, RdpmcIdx(n)), Some((PmcIdx::gp(n as u8).unwrap(), u64::MAX)));
        }
        for ecx in [6, 7, 8, 1 << 30, 1 << 31, 1 << 31 | 1, 1 << 30 | 1, u32::MAX, 0x100] {
            assert_eq!(Amd.rdpmc_to_pmc(&c, RdpmcIdx(ecx)), None, "{ecx:#x}");
        }
        let c = caps(AmdPerfMon::PerfMonV2, 2);
        assert!(Amd.rdpmc_to_pmc(&c, RdpmcIdx(1)).is_some());
        assert_eq!(Amd.rdpmc_to_pmc(&c, RdpmcIdx(2)), None);
    }

    #[test]
    fn event_select_is_twelve_bits() {
        let sel = AmdEventSel(AmdEventSel::encode(0x1C0, 0x41) | EventSel::EN | EventSel::OS);
        assert_eq!(sel.0, 0x1_0042_41C0);
        assert_eq!((sel.event(), sel.umask()), (0x1C0, 0x41));
        assert_eq!(Amd.event_select(sel.0), (0x1C0, 0x41));
        assert!(sel.common().enabled() && sel.common().os());
        assert_eq!(AmdEventSel(0xF_0000_00FF).event(), 0xFFF);
    }

    #[test]
    fn event_table_follows_linux() {
        use ArchEvent::*;
        for (ev, sel) in [
            (CoreCycles, (0x76, 0)),
            (Instructions, (0xC0, 0)),
            (RefCycles, (0x120, 0)),
            (LlcReferences, (0x60, 0xFF)),
            (LlcMisses, (0x64, 0x09)),
            (Branches, (0xC2, 0)),
            (BranchMisses, (0xC3, 0)),
        ] {
            assert_eq!(ev.amd_select(), sel, "{ev:?}");
            assert_eq!(ArchEvent::from_amd_select(sel.0, sel.1), Some(ev));
        }
        assert_eq!(ArchEvent::from_amd_select(0x7D, 0x07), Some(LlcReferences), "family 10h-16h");
        assert_eq!(ArchEvent::from_amd_select(0x7E, 0x07), Some(LlcMisses), "family 10h-16h");
        // Intel's encodings mean other things on AMD.
        assert_eq!(ArchEvent::from_amd_select(0x3C, 0), None);
        assert_eq!(ArchEvent::from_amd_select(0xC4, 0), None);
        assert_eq!(ArchEvent::from_amd_select(0x20, 0), None, "0x120 needs bits 35:32");
        assert_eq!(ArchEvent::from_amd_select(0xC0, 1), None, "the unit mask is part of the key");
    }

    #[test]
    fn gp_config_from_amd_eventsel() {
        let c = caps(AmdPerfMon::PerfMonV2, 6);
        let sel = AmdEventSel::encode(0xC2, 0) | 2 << 24 | EventSel::INV | EventSel::INT | EventSel::USR | EventSel::EN;
        assert_eq!(
            gp_config(&c, sel),
            Some(HostEventConfig {
                event: ArchEvent::Branches,
                usr: true,
                os: false,
                edge: false,
                inv: true,
                cmask: 2,
                interrupt: true
            })
        );
        assert_eq!(gp_config(&c, AmdEventSel::encode(0x120, 0)).unwrap().event, ArchEvent::RefCycles);
        assert_eq!(gp_config(&c, 0x20), None, "PMCx020 is no architectural event");
        assert_eq!(gp_config(&c, 0x3C), None, "Intel's cycles encoding counts nothing on AMD");
        let no_ref = PmuCaps::amd(AmdPerfMon::PerfMonV2, 6, EventSet::ALL.without(ArchEvent::RefCycles)).unwrap();
        assert_eq!(gp_config(&no_ref, AmdEventSel::encode(0x120, 0)), None, "unavailable event");
    }

    #[test]
    fn cpuid_by_level() {
        use crate::cpuid::LEAF1_ECX_PDCM;
        let v2 = caps(AmdPerfMon::PerfMonV2, 6);
        assert_eq!(v2.cpuid_leaf(0x8000_0022).unwrap().value, [1, 6, 0, 0]);
        assert_eq!(v2.cpuid_leaf(0x8000_0001).unwrap().value, [0, 0, 1 << 23, 0]);
        assert_eq!(v2.cpuid_0xa(), [0; 4], "no Intel architectural perfmon");
        assert_eq!(v2.cpuid_leaf(1).unwrap().value, [0; 4]);
        assert_eq!(v2.cpuid_leaf(1).unwrap().mask[2] & LEAF1_ECX_PDCM, LEAF1_ECX_PDCM, "owned, cleared");
        let v2_4 = caps(AmdPerfMon::PerfMonV2, 4);
        assert_eq!(v2_4.cpuid_leaf(0x8000_0022).unwrap().value, [1, 4, 0, 0]);
        let ext = caps(AmdPerfMon::ExtCore, 6);
        assert_eq!(ext.cpuid_leaf(0x8000_0022).unwrap().value, [0; 4]);
        assert_eq!(ext.cpuid_leaf(0x8000_0001).unwrap().value, [0, 0, 1 << 23, 0]);
        let legacy = caps(AmdPerfMon::Legacy, 4);
        assert_eq!(legacy.cpuid_leaf(0x8000_0001).unwrap().value, [0; 4]);
        assert_eq!(legacy.cpuid_leaf(0x8000_0022).unwrap().value, [0; 4]);
    }

    #[test]
    fn pebs_is_intel_only() {
        let req = CapsRequest {
            gp_counters: 6,
            full_width_writes: true,
            pebs: true,
            amd_perfmon: AmdPerfMon::PerfMonV2,
            available: EventSet::ALL,
        };
        assert_eq!(Amd.refresh(&req), Err(ConfigError::Pebs(Vendor::Amd)));
        let c = Amd.refresh(&CapsRequest { pebs: false, ..req }).unwrap();
        assert!(!c.full_width_writes(), "AMD counters are always written whole");
        assert!(!c.with_pebs(true).pebs(), "with_pebs cannot give AMD PEBS");
    }
}
