//! What differs between PMU vendors, behind one trait: [`VendorOps`], the model's
//! counterpart of Linux KVM's `struct kvm_pmu_ops`. The generic model (`pmu.rs`,
//! `counting.rs`, `policy.rs`, `overflow.rs`, `state.rs`, ...) works on [`PmuReg`]s and
//! [`PmcIdx`]s and never sees an MSR number; each vendor module maps its MSRs onto them
//! and decides its own CPUID leaves, reserved bits, RDPMC operands and event encodings:
//!
//! * `intel.rs`: Intel architectural performance monitoring version 2 (KVM
//!   `vmx/pmu_intel.c`).
//! * `amd.rs`: AMD64 performance monitoring: the legacy counters, PerfCtrExtCore and
//!   PerfMonV2 (AMD APM Vol. 2, "Performance Monitoring Counters"; KVM `svm/pmu.c`).
//!
//! A vendor is chosen by [`Vendor`]; the choice is fixed in [`PmuCaps`] when the PMU is
//! built (KVM `refresh()`), so each MSR access costs one dispatch through `Vendor::ops`.

mod amd;
mod intel;

pub use amd::{AmdEventSel, AmdMsr, AMD_MAX_GP_COUNTERS};

pub(crate) use intel::perf_capabilities as intel_perf_capabilities;
pub use intel::{PmuMsr, ARCH_EVENT_VECTOR_LEN, PMU_VERSION};

use crate::caps::PmuCaps;
use crate::error::ConfigError;
use crate::event::{ArchEvent, EventSet};
use crate::msr::{Initiator, MsrIndex, MsrRange};
use crate::pmc::{full_width_write_value, legacy_write_value, PmcIdx, RdpmcIdx, COUNTER_MASK};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The CPU vendor whose PMU the model implements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// Intel architectural performance monitoring, version 2 (SDM Vol. 3B, "Architectural
    /// Performance Monitoring").
    #[default]
    Intel,
    /// AMD64 performance monitoring (AMD APM Vol. 2, "Performance Monitoring Counters"),
    /// at the level [`crate::PmuConfig::amd_perfmon`] says: no fixed counters, no PEBS.
    Amd,
}

impl Vendor {
    /// The vendor's operations.
    pub(crate) fn ops(self) -> &'static dyn VendorOps {
        match self {
            Vendor::Intel => &intel::Intel,
            Vendor::Amd => &amd::Amd,
        }
    }
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Vendor::Intel => "Intel",
            Vendor::Amd => "AMD",
        })
    }
}

/// How much of AMD64 performance monitoring an AMD PMU has (what the guest learns from
/// CPUID 0x80000001 and 0x80000022; KVM `amd_pmu_refresh`). Each level includes the one
/// before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AmdPerfMon {
    /// The four legacy counters: PERF_CTL0-3 at 0xC0010000-3, PERF_CTR0-3 at
    /// 0xC0010004-7. Exactly 4 counters; no global registers.
    Legacy,
    /// PerfCtrExtCore (CPUID 0x80000001 ECX bit 23): six counters with their CTL/CTR pairs
    /// interleaved at 0xC0010200-0xC001020B; the legacy MSRs alias counters 0-3. Exactly 6
    /// counters (the guest learns no count).
    ExtCore,
    /// PerfMonV2 (CPUID 0x80000022 EAX bit 0): ExtCore plus PerfCntrGlobalCtl,
    /// PerfCntrGlobalStatus and its Clr/Set registers (0xC0000300-3); 1-6 counters,
    /// advertised in CPUID 0x80000022 EBX\[3:0\].
    #[default]
    PerfMonV2,
}

impl fmt::Display for AmdPerfMon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AmdPerfMon::Legacy => "legacy counters",
            AmdPerfMon::ExtCore => "PerfCtrExtCore",
            AmdPerfMon::PerfMonV2 => "PerfMonV2",
        })
    }
}

/// A PMU register as the generic model sees it, whatever MSR a vendor gives it (the
/// vendor-neutral half of KVM's `kvm_pmu_get_msr`/`kvm_pmu_set_msr` plus the `kvm_pmc`
/// that `msr_idx_to_pmc` returns). [`PmuCaps::decode_msr`] turns an MSR number into one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PmuReg {
    /// A counter's value, and how a write to this particular MSR becomes it.
    Counter(PmcIdx, CounterWrite),
    /// A general-purpose counter's event selector.
    EventSel(PmcIdx),
    /// The fixed counters' control register (Intel IA32_FIXED_CTR_CTRL).
    FixedCtrCtrl,
    /// Overflow status, one bit per counter in [`PmcIdx`] layout (Intel
    /// IA32_PERF_GLOBAL_STATUS, AMD PerfCntrGlobalStatus). Read-only to the guest; the VMM
    /// restores it.
    GlobalStatus,
    /// Global enables, one bit per counter in [`PmcIdx`] layout (Intel
    /// IA32_PERF_GLOBAL_CTRL, AMD PerfCntrGlobalCtl).
    GlobalCtrl,
    /// Writing ones clears those GLOBAL_STATUS bits; reads as 0 (Intel
    /// IA32_PERF_GLOBAL_OVF_CTRL, AMD PerfCntrGlobalStatusClr).
    GlobalStatusClear,
    /// Writing ones sets those GLOBAL_STATUS bits; reads as 0 (AMD
    /// PerfCntrGlobalStatusSet).
    GlobalStatusSet,
    /// Intel IA32_PERF_CAPABILITIES.
    PerfCapabilities,
    /// Intel IA32_MISC_ENABLE (its perfmon bits).
    MiscEnable,
    /// Intel IA32_PEBS_ENABLE (PEBS model only).
    PebsEnable,
    /// Intel IA32_DS_AREA (PEBS model only).
    DsArea,
}

/// How a write to a counter MSR becomes the counter value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterWrite {
    /// Intel IA32_PMCx: a guest write keeps the low 32 bits, sign-extended to the width; a
    /// host write is taken as is, masked to the width.
    Legacy,
    /// Intel IA32_A_PMCx: the value must fit the width, else #GP (guest and host).
    FullWidth,
    /// Masked to the width, never a #GP (Intel IA32_FIXED_CTRj and every AMD counter, as
    /// KVM does).
    Masked,
}

impl CounterWrite {
    /// The counter value a write of `data` leaves, or `None` for #GP (KVM
    /// `intel_pmu_set_msr`). The SDM calls the bits above a fixed counter's width reserved,
    /// but KVM does not fault on them; we follow KVM.
    pub fn value(self, data: u64, who: Initiator) -> Option<u64> {
        match (self, who) {
            (CounterWrite::FullWidth, _) => full_width_write_value(data),
            (CounterWrite::Legacy, Initiator::Guest) => Some(legacy_write_value(data)),
            (CounterWrite::Legacy, Initiator::Host) | (CounterWrite::Masked, _) => Some(data & COUNTER_MASK),
        }
    }
}

/// What a write with reserved bits set does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ReservedBits {
    /// #GP, and the register keeps its value (Intel; also a guest write to a read-only
    /// register #GPs).
    Fault,
    /// Cleared: the rest of the write takes effect (AMD; a guest write to a read-only
    /// register is ignored). KVM `kvm_pmu_set_msr`: "AMD ignores writes to reserved bits
    /// and read-only PMU MSRs, whereas Intel generates #GP"; AMD EPYC parts never #GP a
    /// PerfEvtSel write (KVM commit 9b026073db2f), and Linux guests set HostOnly (bit 41)
    /// there, so a #GP would break them.
    Ignore,
}

impl ReservedBits {
    /// The value a write of `data` to a register whose reserved bits are `reserved` stores,
    /// or `None` for #GP.
    pub(crate) const fn apply(self, data: u64, reserved: u64) -> Option<u64> {
        match self {
            ReservedBits::Fault => {
                if data & reserved != 0 {
                    None
                } else {
                    Some(data)
                }
            }
            ReservedBits::Ignore => Some(data & !reserved),
        }
    }
}

/// What a PMU is built from (the vendor checks it and derives the rest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CapsRequest {
    /// General-purpose counters.
    pub gp_counters: u8,
    /// Intel full-width counter writes (IA32_A_PMCx).
    pub full_width_writes: bool,
    /// Intel software PEBS.
    pub pebs: bool,
    /// AMD performance monitoring level.
    pub amd_perfmon: AmdPerfMon,
    /// Architectural events the backend counts honestly.
    pub available: EventSet,
}

/// What differs between PMU vendors (KVM `struct kvm_pmu_ops`). Implementations are unit
/// structs reached through [`Vendor`]; every method is a pure function of the caps the
/// vendor built and its arguments.
pub(crate) trait VendorOps: fmt::Debug + Sync {
    /// KVM `refresh()`: the caps of a PMU built from `req` (counter counts, which counters
    /// exist, reserved-bit masks, GLOBAL_CTRL reset value), or why it cannot be built.
    fn refresh(&self, req: &CapsRequest) -> Result<PmuCaps, ConfigError>;

    /// KVM `msr_idx_to_pmc` + `is_valid_msr`: the register `msr` names in a PMU with
    /// `caps`, or `None` if this PMU has no such MSR (the access #GPs).
    fn decode_msr(&self, caps: &PmuCaps, msr: MsrIndex) -> Option<PmuReg>;

    /// The MSR through which the VMM writes `reg` (restore), if the vendor has one. For a
    /// counter, its plain (not full-width) MSR.
    fn reg_msr(&self, caps: &PmuCaps, reg: PmuReg) -> Option<MsrIndex>;

    /// Exactly the MSRs `decode_msr` accepts, for the VMM's KVM MSR filter.
    fn msr_ranges(&self, caps: &PmuCaps) -> Vec<MsrRange>;

    /// KVM `rdpmc_ecx_to_pmc`: the counter RDPMC's ECX names and the mask applied to its
    /// value, or `None` (#GP).
    fn rdpmc_to_pmc(&self, caps: &PmuCaps, ecx: RdpmcIdx) -> Option<(PmcIdx, u64)>;

    /// The `(event select, unit mask)` an event selector programs, as the event filter
    /// keys it (KVM `EVENTSEL_EVENT` and the unit mask).
    fn event_select(&self, eventsel: u64) -> (u16, u8);

    /// The architectural event an event selector programs in this vendor's encoding, if
    /// any (whether the backend can count it is the caller's business).
    fn arch_event(&self, eventsel: u64) -> Option<ArchEvent>;

    /// The event each fixed counter counts, in counter order (empty: no fixed counters).
    fn fixed_events(&self) -> &'static [ArchEvent];

    /// The PMU-owned bits of CPUID leaf `function` (subleaf 0) as `[eax, ebx, ecx, edx]`;
    /// which bits a leaf owns is `cpuid::PMU_CPUID_LEAVES`' business.
    fn cpuid(&self, caps: &PmuCaps, function: u32) -> [u32; 4];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_write_rules() {
        use CounterWrite::*;
        use Initiator::*;
        assert_eq!(Legacy.value(0x8000_0000, Guest), Some(0xFFFF_8000_0000));
        assert_eq!(Legacy.value(0x8000_0000, Host), Some(0x8000_0000));
        assert_eq!(Legacy.value(0x1_0000_0000_0001, Host), Some(1));
        assert_eq!(FullWidth.value(0x8000_0000, Guest), Some(0x8000_0000));
        assert_eq!(FullWidth.value(1 << 48, Guest), None);
        assert_eq!(FullWidth.value(1 << 48, Host), None);
        assert_eq!(Masked.value(0xFFFF_0000_0000_0001, Guest), Some(0x0000_0000_0001));
        assert_eq!(Masked.value(0x8000_0000, Guest), Some(0x8000_0000));
    }

    #[test]
    fn reserved_bits_fault_or_are_ignored() {
        assert_eq!(ReservedBits::Fault.apply(0x10, 0x01), Some(0x10));
        assert_eq!(ReservedBits::Fault.apply(0x11, 0x01), None);
        assert_eq!(ReservedBits::Ignore.apply(0x11, 0x01), Some(0x10));
    }

    #[test]
    fn vendors_by_name() {
        assert_eq!(Vendor::default(), Vendor::Intel);
        assert_eq!(serde_json::to_string(&Vendor::Amd).unwrap(), "\"amd\"");
        assert_eq!(serde_json::from_str::<AmdPerfMon>("\"extcore\"").unwrap(), AmdPerfMon::ExtCore);
        assert_eq!(AmdPerfMon::default(), AmdPerfMon::PerfMonV2);
        assert!(AmdPerfMon::Legacy < AmdPerfMon::ExtCore && AmdPerfMon::ExtCore < AmdPerfMon::PerfMonV2);
        assert_eq!(Vendor::Amd.to_string(), "AMD");
    }
}
