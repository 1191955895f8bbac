//! Intel-specific half of the two-tier dispatch (KVM `pmu_intel.c`): which counter an MSR
//! or RDPMC operand names in this PMU, how counter writes are widened, and how EVENTSEL /
//! FIXED_CTR_CTRL become a [`HostEventConfig`]. The vendor-neutral globals live in
//! `pmu.rs`, so another vendor can be added beside this file.

use crate::backend::HostEventConfig;
use crate::caps::PmuCaps;
use crate::event::FIXED_EVENTS;
use crate::eventsel::{EventSel, FixedCtrl};
use crate::msr::{Initiator, PmuMsr};
use crate::pmc::{full_width_write_value, legacy_write_value, PmcIdx, RdpmcIdx, COUNTER_MASK};

/// How a write to a counter MSR becomes the counter value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CounterWrite {
    /// IA32_PMCx.
    Legacy,
    /// IA32_A_PMCx.
    FullWidth,
    /// IA32_FIXED_CTRj.
    Fixed,
}

/// An Intel-specific PMU register that exists in this PMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntelReg {
    Counter(PmcIdx, CounterWrite),
    EventSel(PmcIdx),
    FixedCtrCtrl,
    PerfCapabilities,
    /// Every PMU has MISC_ENABLE (its perfmon bits say whether PEBS exists); the PEBS
    /// registers exist only in a PEBS model ([`PmuCaps::pebs`]).
    MiscEnable,
    PebsEnable,
    DsArea,
}

/// The register `msr` names in a PMU with `caps`, or `None` (#GP) if it does not exist there
/// (counter beyond the count, full-width alias without FW_WRITE, or a global MSR).
pub(crate) fn decode(caps: &PmuCaps, msr: PmuMsr) -> Option<IntelReg> {
    let gp = |i| PmcIdx::gp(i).filter(|&p| caps.has(p));
    match msr {
        PmuMsr::Pmc(i) => gp(i).map(|p| IntelReg::Counter(p, CounterWrite::Legacy)),
        // IA32_A_PMCx exist only when PERF_CAPABILITIES.FW_WRITE is advertised (KVM
        // `get_fw_gp_pmc`).
        PmuMsr::FullWidthPmc(i) if caps.full_width_writes() => {
            gp(i).map(|p| IntelReg::Counter(p, CounterWrite::FullWidth))
        }
        PmuMsr::FullWidthPmc(_) => None,
        PmuMsr::EventSel(i) => gp(i).map(IntelReg::EventSel),
        PmuMsr::FixedCtr(j) => {
            PmcIdx::fixed(j).filter(|&p| caps.has(p)).map(|p| IntelReg::Counter(p, CounterWrite::Fixed))
        }
        PmuMsr::FixedCtrCtrl => Some(IntelReg::FixedCtrCtrl),
        PmuMsr::PerfCapabilities => Some(IntelReg::PerfCapabilities),
        PmuMsr::MiscEnable => Some(IntelReg::MiscEnable),
        PmuMsr::PebsEnable => caps.pebs().then_some(IntelReg::PebsEnable),
        PmuMsr::DsArea => caps.pebs().then_some(IntelReg::DsArea),
        PmuMsr::GlobalStatus | PmuMsr::GlobalCtrl | PmuMsr::GlobalOvfCtrl => None,
    }
}

/// The counter value a write of `data` leaves, or `None` for #GP. Mirrors KVM
/// `intel_pmu_set_msr`: a full-width write that does not fit the width faults (guest or
/// host); a guest legacy write keeps the low 32 bits sign-extended, a host one is taken
/// as is; fixed counters take the value masked to the width. (The SDM calls the bits above
/// a fixed counter's width reserved, but KVM does not fault on them; we follow KVM.)
pub(crate) fn counter_write_value(rule: CounterWrite, data: u64, who: Initiator) -> Option<u64> {
    match (rule, who) {
        (CounterWrite::FullWidth, _) => full_width_write_value(data),
        (CounterWrite::Legacy, Initiator::Guest) => Some(legacy_write_value(data)),
        (CounterWrite::Legacy, Initiator::Host) | (CounterWrite::Fixed, _) => Some(data & COUNTER_MASK),
    }
}

/// The counter RDPMC's ECX names, or `None` (#GP). Bits 31:30 are flags; the rest must
/// number an existing counter (KVM `intel_rdpmc_ecx_to_pmc`).
pub(crate) fn rdpmc_to_pmc(caps: &PmuCaps, ecx: RdpmcIdx) -> Option<PmcIdx> {
    let n = u8::try_from(ecx.number()).ok()?;
    let idx = if ecx.is_fixed() { PmcIdx::fixed(n) } else { PmcIdx::gp(n) }?;
    caps.has(idx).then_some(idx)
}

/// Host configuration for GP counter with `eventsel`, or `None` when nothing is to be
/// counted: the selected event is not architectural or not available. Such an EVENTSEL is
/// accepted (no #GP, as on hardware) but counts nothing.
pub(crate) fn gp_config(caps: &PmuCaps, eventsel: EventSel) -> Option<HostEventConfig> {
    let event = eventsel.arch_event().filter(|&e| caps.is_available(e))?;
    Some(HostEventConfig {
        event,
        usr: eventsel.usr(),
        os: eventsel.os(),
        edge: eventsel.edge(),
        inv: eventsel.inv(),
        cmask: eventsel.cmask(),
        interrupt: eventsel.int(),
    })
}

/// Host configuration for fixed counter `j` with control field `ctrl`.
pub(crate) fn fixed_config(j: u8, ctrl: FixedCtrl) -> HostEventConfig {
    HostEventConfig {
        event: FIXED_EVENTS[usize::from(j)],
        usr: ctrl.usr(),
        os: ctrl.os(),
        edge: false,
        inv: false,
        cmask: 0,
        interrupt: ctrl.pmi(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ArchEvent, EventSet};
    use crate::msr::MsrIndex;

    fn caps(fw: bool) -> PmuCaps {
        PmuCaps::new(4, fw, EventSet::ALL).unwrap()
    }

    fn dec(c: &PmuCaps, msr: u32) -> Option<IntelReg> {
        decode(c, PmuMsr::decode(MsrIndex(msr))?)
    }

    #[test]
    fn decode_respects_counter_count() {
        let c = caps(true);
        let p = |i| PmcIdx::gp(i).unwrap();
        assert_eq!(dec(&c, 0xC1), Some(IntelReg::Counter(p(0), CounterWrite::Legacy)));
        assert_eq!(dec(&c, 0xC4), Some(IntelReg::Counter(p(3), CounterWrite::Legacy)));
        assert_eq!(dec(&c, 0xC5), None, "PMC4 with 4 counters");
        assert_eq!(dec(&c, 0x189), Some(IntelReg::EventSel(p(3))));
        assert_eq!(dec(&c, 0x18A), None);
        assert_eq!(dec(&c, 0x4C4), Some(IntelReg::Counter(p(3), CounterWrite::FullWidth)));
        assert_eq!(dec(&c, 0x4C5), None);
        assert_eq!(dec(&c, 0x30B), Some(IntelReg::Counter(PmcIdx::fixed(2).unwrap(), CounterWrite::Fixed)));
        assert_eq!(dec(&c, 0x30C), None);
        assert_eq!(dec(&c, 0x38F), None, "globals are not Intel-specific");
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
        assert_eq!(dec(&caps(true), 0x1A0), Some(IntelReg::MiscEnable));
        let c = caps(true).with_pebs(true);
        assert_eq!(dec(&c, 0x1A0), Some(IntelReg::MiscEnable));
        assert_eq!(dec(&c, 0x3F1), Some(IntelReg::PebsEnable));
        assert_eq!(dec(&c, 0x600), Some(IntelReg::DsArea));
    }

    #[test]
    fn write_rules() {
        use CounterWrite::*;
        use Initiator::*;
        assert_eq!(counter_write_value(Legacy, 0x8000_0000, Guest), Some(0xFFFF_8000_0000));
        assert_eq!(counter_write_value(Legacy, 0x8000_0000, Host), Some(0x8000_0000));
        assert_eq!(counter_write_value(Legacy, 0x1_0000_0000_0001, Host), Some(1));
        assert_eq!(counter_write_value(FullWidth, 0x8000_0000, Guest), Some(0x8000_0000));
        assert_eq!(counter_write_value(FullWidth, 1 << 48, Guest), None);
        assert_eq!(counter_write_value(FullWidth, 1 << 48, Host), None);
        assert_eq!(counter_write_value(Fixed, 0xFFFF_0000_0000_0001, Guest), Some(0x0000_0000_0001));
        assert_eq!(counter_write_value(Fixed, 0x8000_0000, Guest), Some(0x8000_0000));
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
    }

    #[test]
    fn gp_config_from_eventsel() {
        let c = caps(true);
        let sel = EventSel(0x03 << 24 | EventSel::INV | EventSel::INT | EventSel::EDGE | EventSel::OS | 0xC4);
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
        assert_eq!(gp_config(&c, EventSel(0x01D1)), None, "non-architectural event");
        let no_llc = PmuCaps::new(4, true, EventSet::ALL.without(ArchEvent::LlcMisses)).unwrap();
        assert_eq!(gp_config(&no_llc, EventSel(0x412E)), None, "unavailable event");
        // PC is not part of the host config.
        assert_eq!(gp_config(&c, EventSel(0xC0)), gp_config(&c, EventSel(0xC0 | EventSel::PC)));
    }

    #[test]
    fn fixed_config_events() {
        let f = fixed_config(2, FixedCtrl(FixedCtrl::USR | FixedCtrl::PMI));
        assert_eq!(f.event, ArchEvent::RefCycles);
        assert!(f.usr && !f.os && f.interrupt);
        assert_eq!(fixed_config(0, FixedCtrl(1)).event, ArchEvent::Instructions);
        assert_eq!(fixed_config(1, FixedCtrl(1)).event, ArchEvent::CoreCycles);
    }
}
