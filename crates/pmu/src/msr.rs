//! MSR numbers, their architectural decode, and the result type of an MSR access.

use crate::pmc::{MAX_FIXED_COUNTERS, MAX_GP_COUNTERS};
use serde::{Deserialize, Serialize};

/// An MSR number (ECX of RDMSR/WRMSR). Not a counter index: see [`crate::PmcIdx`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MsrIndex(pub u32);

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

/// What an MSR number names in architectural perfmon, before asking whether this PMU has it
/// (e.g. `Pmc(5)` decodes even when only 4 GP counters exist; access to it then #GPs).
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

/// `count` consecutive MSRs from `base` (for KVM's MSR filter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MsrRange {
    /// First MSR.
    pub base: MsrIndex,
    /// Number of MSRs.
    pub count: u32,
}

impl MsrRange {
    /// Whether `msr` is in the range.
    pub const fn contains(&self, msr: MsrIndex) -> bool {
        msr.0 >= self.base.0 && msr.0 - self.base.0 < self.count
    }
}

/// Who performs an MSR access. Host-initiated accesses (VMM save/restore) may write what
/// the guest may not, e.g. IA32_PERF_GLOBAL_STATUS (KVM `msr_info->host_initiated`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Initiator {
    /// RDMSR/WRMSR executed by the guest.
    Guest,
    /// The VMM, e.g. restoring a snapshot.
    Host,
}

/// Outcome of an emulated MSR access or RDPMC. A #GP is an ordinary value here, not a Rust
/// error: the VMM injects it (e.g. by setting `error` in KVM's MSR exit).
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MsrAccess<T = ()> {
    /// The access completed; reads carry the value.
    Ok(T),
    /// The access raises #GP(0) in the guest.
    Fault,
}

impl<T> MsrAccess<T> {
    /// The access completed.
    pub fn is_ok(&self) -> bool {
        matches!(self, MsrAccess::Ok(_))
    }
    /// The access faults.
    pub fn is_fault(&self) -> bool {
        matches!(self, MsrAccess::Fault)
    }
    /// The value, or `None` on #GP.
    pub fn ok(self) -> Option<T> {
        match self {
            MsrAccess::Ok(v) => Some(v),
            MsrAccess::Fault => None,
        }
    }
    /// Maps the value of a completed access.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> MsrAccess<U> {
        match self {
            MsrAccess::Ok(v) => MsrAccess::Ok(f(v)),
            MsrAccess::Fault => MsrAccess::Fault,
        }
    }
}

impl<T> From<Option<T>> for MsrAccess<T> {
    fn from(v: Option<T>) -> Self {
        v.map_or(MsrAccess::Fault, MsrAccess::Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn range_contains() {
        let r = MsrRange { base: MsrIndex(0xC1), count: 4 };
        assert!(r.contains(MsrIndex(0xC1)) && r.contains(MsrIndex(0xC4)));
        assert!(!r.contains(MsrIndex(0xC0)) && !r.contains(MsrIndex(0xC5)));
    }

    #[test]
    fn msr_access_helpers() {
        let a: MsrAccess<u64> = Some(3).into();
        assert_eq!(a, MsrAccess::Ok(3));
        assert!(a.is_ok() && !a.is_fault());
        assert_eq!(a.map(|v| v + 1).ok(), Some(4));
        let f: MsrAccess<u64> = None.into();
        assert!(f.is_fault());
        assert_eq!(f.ok(), None);
    }
}
