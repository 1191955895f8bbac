//! Intel architectural performance monitoring version 2 (SDM Vol. 3B, "Architectural
//! Performance Monitoring"; KVM `vmx/pmu_intel.c`): the MSR map (IA32_PMCx,
//! IA32_PERFEVTSELx, IA32_FIXED_CTRj, the IA32_PERF_GLOBAL_* registers, the full-width
//! aliases, PERF_CAPABILITIES, MISC_ENABLE and the PEBS registers), CPUID leaf 0xA, the
//! reserved-bit masks, RDPMC's fast and fixed forms, and the architectural event encoding.

use super::{CapsRequest, CounterWrite, PmuReg, ReservedBits, Vendor, VendorOps};
use crate::caps::PmuCaps;
use crate::cpuid::{LEAF1_ECX_DTES64, LEAF1_ECX_PDCM, LEAF1_EDX_DS};
use crate::error::ConfigError;
use crate::event::{ArchEvent, FIXED_EVENTS};
use crate::eventsel::{EventSel, FixedCtrl};
use crate::msr::{MsrIndex, MsrRange};
use crate::pebs::{GLOBAL_STATUS_OVF_BUFFER, PEBS_RECORD_FORMAT};
use crate::pmc::{PmcIdx, RdpmcIdx, COUNTER_WIDTH, MAX_FIXED_COUNTERS, MAX_GP_COUNTERS};

/// Architectural perfmon version the Intel model implements.
pub const PMU_VERSION: u32 = 2;
/// Length of the CPUID.0AH:EBX architectural event vector (`EAX[31:24]`).
pub const ARCH_EVENT_VECTOR_LEN: u32 = 7;
/// IA32_PERF_CAPABILITIES.FW_WRITE: IA32_A_PMCx exist.
const PERF_CAP_FW_WRITE: u64 = 1 << 13;
/// IA32_PERF_CAPABILITIES.PEBS_TRAP: PEBS records are trap-like (written after the
/// instruction that triggered them; the record's RIP is the next instruction's).
const PERF_CAP_PEBS_TRAP: u64 = 1 << 6;
/// IA32_PERF_CAPABILITIES.PEBS_ARCH_REG: records hold RFLAGS, RIP and the 16 GPRs.
const PERF_CAP_PEBS_ARCH_REG: u64 = 1 << 7;
/// IA32_PERF_CAPABILITIES[11:8]: the PEBS record format.
const PERF_CAP_PEBS_FORMAT_SHIFT: u32 = 8;
/// IA32_PERF_GLOBAL_STATUS.CondChgd (bit 63).
const GLOBAL_STATUS_COND_CHGD: u64 = 1 << 63;
/// GLOBAL_STATUS / OVF_CTRL bits 62 (OvfBuffer) and 63 (CondChgd).
const OVF_BUF_COND_CHGD: u64 = GLOBAL_STATUS_OVF_BUFFER | GLOBAL_STATUS_COND_CHGD;

impl MsrIndex {
    /// IA32_PMC0; IA32_PMCx is `0xC1 + x`.
    pub const IA32_PMC0: MsrIndex = MsrIndex(0xC1);
    /// IA32_MISC_ENABLE: the model owns it for its perfmon bits (7 perfmon available,
    /// 11/12 BTS/PEBS unavailable).
    pub const IA32_MISC_ENABLE: MsrIndex = MsrIndex(0x1A0);
    /// IA32_PERFEVTSEL0; IA32_PERFEVTSELx is `0x186 + x`.
    pub const IA32_PERFEVTSEL0: MsrIndex = MsrIndex(0x186);
    /// IA32_FIXED_CTR0; IA32_FIXED_CTRj is `0x309 + j`.
    pub const IA32_FIXED_CTR0: MsrIndex = MsrIndex(0x309);
    /// IA32_PERF_CAPABILITIES.
    pub const IA32_PERF_CAPABILITIES: MsrIndex = MsrIndex(0x345);
    /// IA32_FIXED_CTR_CTRL.
    pub const IA32_FIXED_CTR_CTRL: MsrIndex = MsrIndex(0x38D);
    /// IA32_PERF_GLOBAL_STATUS.
    pub const IA32_PERF_GLOBAL_STATUS: MsrIndex = MsrIndex(0x38E);
    /// IA32_PERF_GLOBAL_CTRL.
    pub const IA32_PERF_GLOBAL_CTRL: MsrIndex = MsrIndex(0x38F);
    /// IA32_PERF_GLOBAL_OVF_CTRL.
    pub const IA32_PERF_GLOBAL_OVF_CTRL: MsrIndex = MsrIndex(0x390);
    /// IA32_PEBS_ENABLE (PEBS model only).
    pub const IA32_PEBS_ENABLE: MsrIndex = MsrIndex(0x3F1);
    /// IA32_A_PMC0 (full-width alias); IA32_A_PMCx is `0x4C1 + x`.
    pub const IA32_A_PMC0: MsrIndex = MsrIndex(0x4C1);
    /// IA32_DS_AREA: linear address of the DS save area (PEBS model only).
    pub const IA32_DS_AREA: MsrIndex = MsrIndex(0x600);

    /// IA32_PMCx.
    pub const fn pmc(x: u8) -> MsrIndex {
        MsrIndex(Self::IA32_PMC0.0 + x as u32)
    }
    /// IA32_PERFEVTSELx.
    pub const fn perfevtsel(x: u8) -> MsrIndex {
        MsrIndex(Self::IA32_PERFEVTSEL0.0 + x as u32)
    }
    /// IA32_FIXED_CTRj.
    pub const fn fixed_ctr(j: u8) -> MsrIndex {
        MsrIndex(Self::IA32_FIXED_CTR0.0 + j as u32)
    }
    /// IA32_A_PMCx.
    pub const fn a_pmc(x: u8) -> MsrIndex {
        MsrIndex(Self::IA32_A_PMC0.0 + x as u32)
    }
}

/// What an MSR number names in Intel architectural perfmon, before asking whether this PMU
/// has it (e.g. `Pmc(5)` decodes even when only 4 GP counters exist; access to it then
/// #GPs). Intel only: [`PmuCaps::decode_msr`] is the vendor-neutral decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PmuMsr {
    /// IA32_PMCx, legacy (32-bit sign-extending) writes.
    Pmc(u8),
    /// IA32_A_PMCx, full-width writes.
    FullWidthPmc(u8),
    /// IA32_PERFEVTSELx.
    EventSel(u8),
    /// IA32_FIXED_CTRj.
    FixedCtr(u8),
    /// IA32_FIXED_CTR_CTRL.
    FixedCtrCtrl,
    /// IA32_PERF_GLOBAL_STATUS.
    GlobalStatus,
    /// IA32_PERF_GLOBAL_CTRL.
    GlobalCtrl,
    /// IA32_PERF_GLOBAL_OVF_CTRL.
    GlobalOvfCtrl,
    /// IA32_PERF_CAPABILITIES.
    PerfCapabilities,
    /// IA32_MISC_ENABLE.
    MiscEnable,
    /// IA32_PEBS_ENABLE.
    PebsEnable,
    /// IA32_DS_AREA.
    DsArea,
}

impl PmuMsr {
    /// Decodes `msr`, or `None` if it is not a PMU MSR of this model (at most 8 GP and 3
    /// fixed counters; e.g. IA32_FIXED_CTR3 never exists here).
    pub fn decode(msr: MsrIndex) -> Option<PmuMsr> {
        let in_range =
            |base: MsrIndex, n: u8| msr.0.checked_sub(base.0).filter(|&off| off < n as u32).map(|off| off as u8);
        if let Some(i) = in_range(MsrIndex::IA32_PMC0, MAX_GP_COUNTERS) {
            return Some(PmuMsr::Pmc(i));
        }
        if let Some(i) = in_range(MsrIndex::IA32_A_PMC0, MAX_GP_COUNTERS) {
            return Some(PmuMsr::FullWidthPmc(i));
        }
        if let Some(i) = in_range(MsrIndex::IA32_PERFEVTSEL0, MAX_GP_COUNTERS) {
            return Some(PmuMsr::EventSel(i));
        }
        if let Some(j) = in_range(MsrIndex::IA32_FIXED_CTR0, MAX_FIXED_COUNTERS) {
            return Some(PmuMsr::FixedCtr(j));
        }
        match msr {
            MsrIndex::IA32_FIXED_CTR_CTRL => Some(PmuMsr::FixedCtrCtrl),
            MsrIndex::IA32_PERF_GLOBAL_STATUS => Some(PmuMsr::GlobalStatus),
            MsrIndex::IA32_PERF_GLOBAL_CTRL => Some(PmuMsr::GlobalCtrl),
            MsrIndex::IA32_PERF_GLOBAL_OVF_CTRL => Some(PmuMsr::GlobalOvfCtrl),
            MsrIndex::IA32_PERF_CAPABILITIES => Some(PmuMsr::PerfCapabilities),
            MsrIndex::IA32_MISC_ENABLE => Some(PmuMsr::MiscEnable),
            MsrIndex::IA32_PEBS_ENABLE => Some(PmuMsr::PebsEnable),
            MsrIndex::IA32_DS_AREA => Some(PmuMsr::DsArea),
            _ => None,
        }
    }

    /// The MSR number.
    pub const fn index(self) -> MsrIndex {
        match self {
            PmuMsr::Pmc(i) => MsrIndex::pmc(i),
            PmuMsr::FullWidthPmc(i) => MsrIndex::a_pmc(i),
            PmuMsr::EventSel(i) => MsrIndex::perfevtsel(i),
            PmuMsr::FixedCtr(j) => MsrIndex::fixed_ctr(j),
            PmuMsr::FixedCtrCtrl => MsrIndex::IA32_FIXED_CTR_CTRL,
            PmuMsr::GlobalStatus => MsrIndex::IA32_PERF_GLOBAL_STATUS,
            PmuMsr::GlobalCtrl => MsrIndex::IA32_PERF_GLOBAL_CTRL,
            PmuMsr::GlobalOvfCtrl => MsrIndex::IA32_PERF_GLOBAL_OVF_CTRL,
            PmuMsr::PerfCapabilities => MsrIndex::IA32_PERF_CAPABILITIES,
            PmuMsr::MiscEnable => MsrIndex::IA32_MISC_ENABLE,
            PmuMsr::PebsEnable => MsrIndex::IA32_PEBS_ENABLE,
            PmuMsr::DsArea => MsrIndex::IA32_DS_AREA,
        }
    }
}

/// IA32_PERF_CAPABILITIES of a PMU with `caps`: FW_WRITE (bit 13) with full-width writes;
/// with PEBS also PEBS_TRAP (bit 6), PEBS_ARCH_REG (bit 7) and the record format (11:8).
pub(crate) const fn perf_capabilities(caps: &PmuCaps) -> u64 {
    let mut v = 0;
    if caps.full_width_writes {
        v |= PERF_CAP_FW_WRITE;
    }
    if caps.pebs {
        v |= PERF_CAP_PEBS_TRAP | PERF_CAP_PEBS_ARCH_REG | (PEBS_RECORD_FORMAT as u64) << PERF_CAP_PEBS_FORMAT_SHIFT;
    }
    v
}

/// CPUID leaf 0xA of a PMU with `caps`.
fn cpuid_0xa(caps: &PmuCaps) -> [u32; 4] {
    let eax = PMU_VERSION | u32::from(caps.gp_counters) << 8 | COUNTER_WIDTH << 16 | ARCH_EVENT_VECTOR_LEN << 24;
    let ebx = u32::from(!caps.available.bits()) & ((1 << ARCH_EVENT_VECTOR_LEN) - 1);
    let edx = u32::from(caps.fixed_counters) | COUNTER_WIDTH << 5;
    [eax, ebx, 0, edx]
}

/// Intel's [`VendorOps`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Intel;

impl VendorOps for Intel {
    fn refresh(&self, req: &CapsRequest) -> Result<PmuCaps, ConfigError> {
        let gp_counters = req.gp_counters;
        if !(1..=MAX_GP_COUNTERS).contains(&gp_counters) {
            return Err(ConfigError::GpCounters(gp_counters));
        }
        let available = req.available;
        let fixed_counters = FIXED_EVENTS.iter().take_while(|&&e| available.contains(e)).count() as u8;
        debug_assert!(fixed_counters <= MAX_FIXED_COUNTERS);
        let gp_bits = (1u64 << gp_counters) - 1;
        let fixed_bits = ((1u64 << fixed_counters) - 1) << PmcIdx::FIXED_BASE;
        let counters = gp_bits | fixed_bits;
        // Per fixed counter OS|USR|PMI are writable; ANY (bit 2) is reserved in v2 (KVM: 0xb).
        let fixed_ctrl_ok = (0..fixed_counters)
            .map(|j| u64::from(FixedCtrl::OS | FixedCtrl::USR | FixedCtrl::PMI) << (j as u32 * FixedCtrl::BITS))
            .fold(0, |a, b| a | b);
        Ok(PmuCaps {
            vendor: Vendor::Intel,
            version: PMU_VERSION,
            gp_counters,
            fixed_counters,
            full_width_writes: req.full_width_writes,
            available,
            counters,
            eventsel_reserved: EventSel::RESERVED,
            fixed_ctr_ctrl_reserved: !fixed_ctrl_ok,
            global_ctrl_reserved: !counters,
            // STATUS and OVF_CTRL share reserved bits: counters plus OvfBuffer/CondChgd (KVM).
            global_status_reserved: !(counters | OVF_BUF_COND_CHGD),
            reserved_bits: ReservedBits::Fault,
            pebs: req.pebs,
            amd_perfmon: None,
        })
    }

    fn decode_msr(&self, caps: &PmuCaps, msr: MsrIndex) -> Option<PmuReg> {
        let gp = |i| PmcIdx::gp(i).filter(|&p| caps.has(p));
        match PmuMsr::decode(msr)? {
            PmuMsr::Pmc(i) => gp(i).map(|p| PmuReg::Counter(p, CounterWrite::Legacy)),
            // IA32_A_PMCx exist only when PERF_CAPABILITIES.FW_WRITE is advertised (KVM
            // `get_fw_gp_pmc`).
            PmuMsr::FullWidthPmc(i) if caps.full_width_writes() => {
                gp(i).map(|p| PmuReg::Counter(p, CounterWrite::FullWidth))
            }
            PmuMsr::FullWidthPmc(_) => None,
            PmuMsr::EventSel(i) => gp(i).map(PmuReg::EventSel),
            PmuMsr::FixedCtr(j) => {
                PmcIdx::fixed(j).filter(|&p| caps.has(p)).map(|p| PmuReg::Counter(p, CounterWrite::Masked))
            }
            PmuMsr::FixedCtrCtrl => Some(PmuReg::FixedCtrCtrl),
            PmuMsr::GlobalStatus => Some(PmuReg::GlobalStatus),
            PmuMsr::GlobalCtrl => Some(PmuReg::GlobalCtrl),
            PmuMsr::GlobalOvfCtrl => Some(PmuReg::GlobalStatusClear),
            PmuMsr::PerfCapabilities => Some(PmuReg::PerfCapabilities),
            // Every PMU has MISC_ENABLE (its perfmon bits say whether PEBS exists); the
            // PEBS registers exist only in a PEBS model.
            PmuMsr::MiscEnable => Some(PmuReg::MiscEnable),
            PmuMsr::PebsEnable => caps.pebs().then_some(PmuReg::PebsEnable),
            PmuMsr::DsArea => caps.pebs().then_some(PmuReg::DsArea),
        }
    }

    /// Every register but AMD's GLOBAL_STATUS_SET has an Intel MSR.
    fn reg_msr(&self, _caps: &PmuCaps, reg: PmuReg) -> Option<MsrIndex> {
        let m = match reg {
            PmuReg::Counter(p, _) if p.is_fixed() => PmuMsr::FixedCtr(p.number()),
            PmuReg::Counter(p, _) => PmuMsr::Pmc(p.number()),
            PmuReg::EventSel(p) => PmuMsr::EventSel(p.number()),
            PmuReg::FixedCtrCtrl => PmuMsr::FixedCtrCtrl,
            PmuReg::GlobalStatus => PmuMsr::GlobalStatus,
            PmuReg::GlobalCtrl => PmuMsr::GlobalCtrl,
            PmuReg::GlobalStatusClear => PmuMsr::GlobalOvfCtrl,
            PmuReg::GlobalStatusSet => return None,
            PmuReg::PerfCapabilities => PmuMsr::PerfCapabilities,
            PmuReg::MiscEnable => PmuMsr::MiscEnable,
            PmuReg::PebsEnable => PmuMsr::PebsEnable,
            PmuReg::DsArea => PmuMsr::DsArea,
        };
        Some(m.index())
    }

    fn msr_ranges(&self, caps: &PmuCaps) -> Vec<MsrRange> {
        let gp = u32::from(caps.gp_counters);
        let mut v = vec![
            MsrRange { base: MsrIndex::IA32_PMC0, count: gp },
            MsrRange { base: MsrIndex::IA32_PERFEVTSEL0, count: gp },
        ];
        if caps.fixed_counters > 0 {
            v.push(MsrRange { base: MsrIndex::IA32_FIXED_CTR0, count: u32::from(caps.fixed_counters) });
        }
        v.push(MsrRange { base: MsrIndex::IA32_PERF_CAPABILITIES, count: 1 });
        // FIXED_CTR_CTRL, GLOBAL_STATUS, GLOBAL_CTRL, GLOBAL_OVF_CTRL are contiguous.
        v.push(MsrRange { base: MsrIndex::IA32_FIXED_CTR_CTRL, count: 4 });
        if caps.full_width_writes {
            v.push(MsrRange { base: MsrIndex::IA32_A_PMC0, count: gp });
        }
        // MISC_ENABLE always: its PEBS_UNAVAIL bit must match the model, whatever the
        // host's KVM would say. Without PEBS, PEBS_ENABLE / DS_AREA stay with KVM, which
        // #GPs them for a vCPU without PEBS.
        v.push(MsrRange { base: MsrIndex::IA32_MISC_ENABLE, count: 1 });
        if caps.pebs {
            for base in [MsrIndex::IA32_PEBS_ENABLE, MsrIndex::IA32_DS_AREA] {
                v.push(MsrRange { base, count: 1 });
            }
        }
        v
    }

    /// Bits 31:30 are flags (31: fast read of the low 32 bits, 30: fixed counters); the
    /// rest must number an existing counter (KVM `intel_rdpmc_ecx_to_pmc`).
    fn rdpmc_to_pmc(&self, caps: &PmuCaps, ecx: RdpmcIdx) -> Option<(PmcIdx, u64)> {
        let n = u8::try_from(ecx.number()).ok()?;
        let idx = if ecx.is_fixed() { PmcIdx::fixed(n) } else { PmcIdx::gp(n) }?;
        let mask = if ecx.is_fast() { 0xFFFF_FFFF } else { u64::MAX };
        caps.has(idx).then_some((idx, mask))
    }

    fn event_select(&self, eventsel: u64) -> (u16, u8) {
        let s = EventSel(eventsel);
        (u16::from(s.event()), s.umask())
    }

    fn arch_event(&self, eventsel: u64) -> Option<ArchEvent> {
        EventSel(eventsel).arch_event()
    }

    fn fixed_events(&self) -> &'static [ArchEvent] {
        &FIXED_EVENTS
    }

    fn cpuid(&self, caps: &PmuCaps, function: u32) -> [u32; 4] {
        match function {
            0x1 => {
                let mut ecx = 0;
                let mut edx = 0;
                if caps.has_perf_capabilities() {
                    ecx |= LEAF1_ECX_PDCM;
                }
                if caps.pebs {
                    ecx |= LEAF1_ECX_DTES64;
                    edx |= LEAF1_EDX_DS;
                }
                [0, 0, ecx, edx]
            }
            0xA => cpuid_0xa(caps),
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

    fn caps(fw: bool) -> PmuCaps {
        PmuCaps::new(4, fw, EventSet::ALL).unwrap()
    }

    fn dec(c: &PmuCaps, msr: u32) -> Option<PmuReg> {
        Intel.decode_msr(c, MsrIndex(msr))
    }

    fn rdpmc_to_pmc(c: &PmuCaps, ecx: RdpmcIdx) -> Option<PmcIdx> {
        Intel.rdpmc_to_pmc(c, ecx).map(|(p, _)| p)
    }

    fn caps_with(gp: u8, fw: bool, ev: &[ArchEvent]) -> PmuCaps {
        PmuCaps::new(gp, fw, ev.iter().copied().collect()).unwrap()
    }

    #[test]
    fn msr_ranges_exact() {
        let r = |b: u32, n: u32| MsrRange { base: MsrIndex(b), count: n };
        assert_eq!(
            caps_with(4, true, &ArchEvent::ALL).msr_ranges(),
            vec![r(0xC1, 4), r(0x186, 4), r(0x309, 3), r(0x345, 1), r(0x38D, 4), r(0x4C1, 4), r(0x1A0, 1)]
        );
        assert_eq!(
            caps_with(2, false, &[]).msr_ranges(),
            vec![r(0xC1, 2), r(0x186, 2), r(0x345, 1), r(0x38D, 4), r(0x1A0, 1)]
        );
    }

    #[test]
    fn pebs_msr_ranges_only_with_pebs() {
        let r = |b: u32, n: u32| MsrRange { base: MsrIndex(b), count: n };
        assert_eq!(
            caps_with(2, false, &[]).with_pebs(true).msr_ranges(),
            vec![r(0xC1, 2), r(0x186, 2), r(0x345, 1), r(0x38D, 4), r(0x1A0, 1), r(0x3F1, 1), r(0x600, 1)]
        );
        let without = caps_with(2, false, &[]).msr_ranges();
        for msr in [0x3F1, 0x600] {
            assert!(!without.iter().any(|r| r.contains(MsrIndex(msr))));
        }
    }

    #[test]
    fn msr_numbers_match_sdm() {
        assert_eq!(MsrIndex::pmc(0).0, 0xC1);
        assert_eq!(MsrIndex::pmc(7).0, 0xC8);
        assert_eq!(MsrIndex::perfevtsel(3).0, 0x189);
        assert_eq!(MsrIndex::fixed_ctr(2).0, 0x30B);
        assert_eq!(MsrIndex::a_pmc(1).0, 0x4C2);
        assert_eq!(MsrIndex::IA32_PERF_CAPABILITIES.0, 0x345);
        assert_eq!(MsrIndex::IA32_FIXED_CTR_CTRL.0, 0x38D);
        assert_eq!(MsrIndex::IA32_PERF_GLOBAL_STATUS.0, 0x38E);
        assert_eq!(MsrIndex::IA32_PERF_GLOBAL_CTRL.0, 0x38F);
        assert_eq!(MsrIndex::IA32_PERF_GLOBAL_OVF_CTRL.0, 0x390);
        assert_eq!(MsrIndex::IA32_MISC_ENABLE.0, 0x1A0);
        assert_eq!(MsrIndex::IA32_PEBS_ENABLE.0, 0x3F1);
        assert_eq!(MsrIndex::IA32_DS_AREA.0, 0x600);
    }

    #[test]
    fn decode_index_roundtrip() {
        let mut seen = 0;
        for n in 0..0x1000 {
            if let Some(m) = PmuMsr::decode(MsrIndex(n)) {
                assert_eq!(m.index(), MsrIndex(n));
                seen += 1;
            }
        }
        // 8 PMC + 8 A_PMC + 8 EVTSEL + 3 fixed + 5 control MSRs + 3 PEBS MSRs.
        assert_eq!(seen, 35);
    }

    #[test]
    fn decode_edges() {
        assert_eq!(PmuMsr::decode(MsrIndex(0xC0)), None);
        assert_eq!(PmuMsr::decode(MsrIndex(0xC9)), None);
        assert_eq!(PmuMsr::decode(MsrIndex(0x185)), None);
        assert_eq!(PmuMsr::decode(MsrIndex(0x18E)), None);
        assert_eq!(PmuMsr::decode(MsrIndex(0x30C)), None, "FIXED_CTR3 never exists");
        assert_eq!(PmuMsr::decode(MsrIndex(0x4C9)), None);
        assert_eq!(PmuMsr::decode(MsrIndex(0x391)), None);
        assert_eq!(PmuMsr::decode(MsrIndex(0xC1)), Some(PmuMsr::Pmc(0)));
        assert_eq!(PmuMsr::decode(MsrIndex(0x4C8)), Some(PmuMsr::FullWidthPmc(7)));
        assert_eq!(PmuMsr::decode(MsrIndex(u32::MAX)), None);
    }

    #[test]
    fn decode_respects_counter_count() {
        let c = caps(true);
        let p = |i| PmcIdx::gp(i).unwrap();
        assert_eq!(dec(&c, 0xC1), Some(PmuReg::Counter(p(0), CounterWrite::Legacy)));
        assert_eq!(dec(&c, 0xC4), Some(PmuReg::Counter(p(3), CounterWrite::Legacy)));
        assert_eq!(dec(&c, 0xC5), None, "PMC4 with 4 counters");
        assert_eq!(dec(&c, 0x189), Some(PmuReg::EventSel(p(3))));
        assert_eq!(dec(&c, 0x18A), None);
        assert_eq!(dec(&c, 0x4C4), Some(PmuReg::Counter(p(3), CounterWrite::FullWidth)));
        assert_eq!(dec(&c, 0x4C5), None);
        assert_eq!(dec(&c, 0x30B), Some(PmuReg::Counter(PmcIdx::fixed(2).unwrap(), CounterWrite::Masked)));
        assert_eq!(dec(&c, 0x30C), None);
        assert_eq!(dec(&c, 0x38E), Some(PmuReg::GlobalStatus));
        assert_eq!(dec(&c, 0x38F), Some(PmuReg::GlobalCtrl));
        assert_eq!(dec(&c, 0x390), Some(PmuReg::GlobalStatusClear));
    }

    #[test]
    fn reg_msr_inverts_decode() {
        let c = caps(true).with_pebs(true);
        for n in 0..0x1000 {
            if let Some(reg) = dec(&c, n) {
                let back = Intel.reg_msr(&c, reg).unwrap();
                match reg {
                    // A counter's plain MSR is IA32_PMCx, whichever alias named it.
                    PmuReg::Counter(p, CounterWrite::FullWidth) => assert_eq!(back, MsrIndex::pmc(p.number())),
                    _ => assert_eq!(back, MsrIndex(n), "{reg:?}"),
                }
            }
        }
    }

    #[test]
    fn full_width_aliases_need_fw_write() {
        let c = caps(false);
        for i in 0..8 {
            assert_eq!(dec(&c, 0x4C1 + i), None);
        }
    }

    #[test]
    fn fixed_counters_follow_caps() {
        let c = PmuCaps::new(4, true, EventSet::EMPTY.with(ArchEvent::Instructions)).unwrap();
        assert!(dec(&c, 0x309).is_some());
        assert_eq!(dec(&c, 0x30A), None);
    }

    #[test]
    fn pebs_registers_need_pebs() {
        for msr in [0x3F1, 0x600] {
            assert_eq!(dec(&caps(true), msr), None, "{msr:#x} without PEBS");
        }
        assert_eq!(dec(&caps(true), 0x1A0), Some(PmuReg::MiscEnable));
        let c = caps(true).with_pebs(true);
        assert_eq!(dec(&c, 0x1A0), Some(PmuReg::MiscEnable));
        assert_eq!(dec(&c, 0x3F1), Some(PmuReg::PebsEnable));
        assert_eq!(dec(&c, 0x600), Some(PmuReg::DsArea));
    }

    #[test]
    fn rdpmc_mapping() {
        let c = caps(true);
        assert_eq!(rdpmc_to_pmc(&c, RdpmcIdx(0)), PmcIdx::gp(0));
        assert_eq!(rdpmc_to_pmc(&c, RdpmcIdx(3)), PmcIdx::gp(3));
        assert_eq!(rdpmc_to_pmc(&c, RdpmcIdx(4)), None);
        assert_eq!(rdpmc_to_pmc(&c, RdpmcIdx(1 << 30 | 2)), PmcIdx::fixed(2));
        assert_eq!(rdpmc_to_pmc(&c, RdpmcIdx(1 << 30 | 3)), None);
        assert_eq!(rdpmc_to_pmc(&c, RdpmcIdx(1 << 31 | 1)), PmcIdx::gp(1));
        assert_eq!(rdpmc_to_pmc(&c, RdpmcIdx(0x100)), None);
        assert_eq!(rdpmc_to_pmc(&c, RdpmcIdx(0x2000_0000)), None);
        assert_eq!(Intel.rdpmc_to_pmc(&c, RdpmcIdx(1 << 31 | 1)).map(|(_, m)| m), Some(0xFFFF_FFFF));
        assert_eq!(Intel.rdpmc_to_pmc(&c, RdpmcIdx(1)).map(|(_, m)| m), Some(u64::MAX));
    }

    #[test]
    fn gp_config_from_eventsel() {
        let c = caps(true);
        let sel = EventSel(0x03 << 24 | EventSel::INV | EventSel::INT | EventSel::EDGE | EventSel::OS | 0xC4).0;
        assert_eq!(
            gp_config(&c, sel),
            Some(HostEventConfig {
                event: ArchEvent::Branches,
                usr: false,
                os: true,
                edge: true,
                inv: true,
                cmask: 3,
                interrupt: true
            })
        );
        assert_eq!(gp_config(&c, 0x01D1), None, "non-architectural event");
        let no_llc = PmuCaps::new(4, true, EventSet::ALL.without(ArchEvent::LlcMisses)).unwrap();
        assert_eq!(gp_config(&no_llc, 0x412E), None, "unavailable event");
        // PC is not part of the host config.
        assert_eq!(gp_config(&c, 0xC0), gp_config(&c, 0xC0 | EventSel::PC));
    }

    #[test]
    fn event_select_is_eight_bits() {
        assert_eq!(Intel.event_select(0xF_0000_41C0), (0xC0, 0x41));
        assert_eq!(Intel.arch_event(0x1_0000_00C0), Some(ArchEvent::Instructions), "bits 35:32 select no event");
    }
}
