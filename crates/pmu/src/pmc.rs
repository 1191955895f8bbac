//! Counter index spaces ([`PmcIdx`], [`RdpmcIdx`]), width rules, and per-counter state.

use crate::backend::HostEventConfig;
use serde::{Deserialize, Serialize};

/// Most general-purpose counters the model supports (KVM `KVM_INTEL_PMC_MAX_GENERIC`).
pub const MAX_GP_COUNTERS: u8 = 8;
/// Most fixed counters in architectural perfmon version 2.
pub const MAX_FIXED_COUNTERS: u8 = 3;
/// Width of every counter, GP and fixed (`CPUID.0AH:EAX[23:16]` and `EDX[12:5]`).
pub const COUNTER_WIDTH: u32 = 48;
/// Mask of the bits a counter holds.
pub const COUNTER_MASK: u64 = (1 << COUNTER_WIDTH) - 1;

/// Number of counter slots: the dense index space of [`PmcIdx::slot`] (GP counters
/// `0..MAX_GP_COUNTERS`, then fixed counters), for per-counter arrays
/// (`[T; PMC_SLOTS]` indexed by `idx.slot()`).
pub const PMC_SLOTS: usize = (MAX_GP_COUNTERS + MAX_FIXED_COUNTERS) as usize;

/// Internal counter index: GP counter i is `i`, fixed counter j is `32 + j`, so the index is
/// also the counter's bit in IA32_PERF_GLOBAL_CTRL / STATUS / OVF_CTRL (as KVM's `pmc->idx`).
/// Not an MSR number ([`crate::MsrIndex`]) nor an RDPMC operand ([`RdpmcIdx`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PmcIdx(u8);

impl PmcIdx {
    /// Index of FIXED_CTR0.
    pub const FIXED_BASE: u8 = 32;

    /// GP counter `i`, if `i < MAX_GP_COUNTERS`.
    pub const fn gp(i: u8) -> Option<PmcIdx> {
        if i < MAX_GP_COUNTERS {
            Some(PmcIdx(i))
        } else {
            None
        }
    }

    /// Fixed counter `j`, if `j < MAX_FIXED_COUNTERS`.
    pub const fn fixed(j: u8) -> Option<PmcIdx> {
        if j < MAX_FIXED_COUNTERS {
            Some(PmcIdx(Self::FIXED_BASE + j))
        } else {
            None
        }
    }

    /// The counter owning GLOBAL_CTRL bit `bit`, if any can.
    pub const fn from_bit(bit: u32) -> Option<PmcIdx> {
        let fixed_end = (Self::FIXED_BASE + MAX_FIXED_COUNTERS) as u32;
        if bit < MAX_GP_COUNTERS as u32 || (bit >= Self::FIXED_BASE as u32 && bit < fixed_end) {
            Some(PmcIdx(bit as u8))
        } else {
            None
        }
    }

    /// The raw index (= GLOBAL_CTRL bit).
    pub const fn bit(self) -> u32 {
        self.0 as u32
    }

    /// `1 << bit()`.
    pub const fn mask(self) -> u64 {
        1 << self.0
    }

    /// Whether this is a fixed counter.
    pub const fn is_fixed(self) -> bool {
        self.0 >= Self::FIXED_BASE
    }

    /// Number within its kind: i for GP counter i, j for fixed counter j.
    pub const fn number(self) -> u8 {
        if self.is_fixed() {
            self.0 - Self::FIXED_BASE
        } else {
            self.0
        }
    }

    /// Dense slot `0..PMC_SLOTS` (GP first): an index for per-counter arrays.
    pub const fn slot(self) -> usize {
        if self.is_fixed() {
            (MAX_GP_COUNTERS + self.0 - Self::FIXED_BASE) as usize
        } else {
            self.0 as usize
        }
    }

    /// The counter of dense slot `slot` ([`PmcIdx::slot`]), if `slot < PMC_SLOTS`.
    pub const fn from_slot(slot: usize) -> Option<PmcIdx> {
        let gp = MAX_GP_COUNTERS as usize;
        if slot < gp {
            Some(PmcIdx(slot as u8))
        } else if slot < PMC_SLOTS {
            Some(PmcIdx(Self::FIXED_BASE + (slot - gp) as u8))
        } else {
            None
        }
    }

    /// Indices of the set bits of a GLOBAL_CTRL-layout mask that name counters.
    pub fn iter_mask(mask: u64) -> impl Iterator<Item = PmcIdx> {
        let mut m = mask;
        std::iter::from_fn(move || {
            while m != 0 {
                let bit = m.trailing_zeros();
                m &= m - 1;
                if let Some(idx) = PmcIdx::from_bit(bit) {
                    return Some(idx);
                }
            }
            None
        })
    }
}

/// The ECX operand of RDPMC: bit 30 selects the fixed counters, bit 31 asks for a "fast"
/// read (low 32 bits only), bits 29:0 number the counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RdpmcIdx(pub u32);

impl RdpmcIdx {
    /// ECX bit 30.
    pub const FIXED: u32 = 1 << 30;
    /// ECX bit 31.
    pub const FAST: u32 = 1 << 31;

    /// Selects a fixed counter.
    pub const fn is_fixed(self) -> bool {
        self.0 & Self::FIXED != 0
    }
    /// Requests a 32-bit read.
    pub const fn is_fast(self) -> bool {
        self.0 & Self::FAST != 0
    }
    /// Counter number within its kind (bits 29:0).
    pub const fn number(self) -> u32 {
        self.0 & !(Self::FIXED | Self::FAST)
    }
}

/// Value a guest write of `data` to a legacy IA32_PMCx leaves: "only the lower 32 bits are
/// written, sign-extended to the counter width" (SDM "Full-Width Writes to Performance
/// Counter Registers"; KVM `(s64)(s32)data`).
pub const fn legacy_write_value(data: u64) -> u64 {
    (data as u32 as i32 as i64 as u64) & COUNTER_MASK
}

/// Value a full-width write of `data` leaves, or `None` (#GP) when it does not fit the width.
pub const fn full_width_write_value(data: u64) -> Option<u64> {
    if data & !COUNTER_MASK != 0 {
        None
    } else {
        Some(data)
    }
}

/// The host event behind a virtual counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostEvent {
    /// Configuration it was opened with.
    pub config: HostEventConfig,
    /// Enabled in the backend (counting).
    pub enabled: bool,
    /// Run time (ns) since which the guest has not wanted it; `None` while wanted.
    pub idle_since: Option<u64>,
}

/// One virtual counter's model state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pmc {
    /// IA32_PERFEVTSELx (GP counters only).
    pub eventsel: u64,
    /// Guest-visible value as of the last fold, masked to the width.
    pub saved: u64,
    /// Backend raw count at the last fold.
    pub raw_start: u64,
    /// Host event, when one is open.
    pub host: Option<HostEvent>,
    /// The backend's overflow notification no longer matches `saved` (write, wrap, open).
    pub needs_arm: bool,
}

impl Pmc {
    /// The host event is open and counting.
    pub fn running(&self) -> bool {
        matches!(self.host, Some(HostEvent { enabled: true, .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmc_idx_layout_matches_global_ctrl() {
        assert_eq!(PmcIdx::gp(0).unwrap().bit(), 0);
        assert_eq!(PmcIdx::gp(7).unwrap().bit(), 7);
        assert_eq!(PmcIdx::gp(8), None);
        assert_eq!(PmcIdx::fixed(0).unwrap().bit(), 32);
        assert_eq!(PmcIdx::fixed(2).unwrap().mask(), 1 << 34);
        assert_eq!(PmcIdx::fixed(3), None);
        assert!(PmcIdx::fixed(1).unwrap().is_fixed());
        assert!(!PmcIdx::gp(1).unwrap().is_fixed());
        assert_eq!(PmcIdx::fixed(1).unwrap().number(), 1);
        assert_eq!(PmcIdx::gp(5).unwrap().number(), 5);
    }

    #[test]
    fn pmc_idx_from_bit() {
        for bit in 0..64 {
            let idx = PmcIdx::from_bit(bit);
            let valid = bit < 8 || (32..35).contains(&bit);
            assert_eq!(idx.is_some(), valid, "bit {bit}");
            if let Some(i) = idx {
                assert_eq!(i.bit(), bit);
            }
        }
    }

    #[test]
    fn slots_are_dense_and_distinct() {
        let all: Vec<_> =
            (0..8).map(|i| PmcIdx::gp(i).unwrap()).chain((0..3).map(|j| PmcIdx::fixed(j).unwrap())).collect();
        let slots: Vec<_> = all.iter().map(|i| i.slot()).collect();
        assert_eq!(slots, (0..PMC_SLOTS).collect::<Vec<_>>());
        for (slot, idx) in all.iter().enumerate() {
            assert_eq!(PmcIdx::from_slot(slot), Some(*idx));
        }
        assert_eq!(PmcIdx::from_slot(PMC_SLOTS), None);
    }

    #[test]
    fn iter_mask_skips_non_counter_bits() {
        let v: Vec<_> = PmcIdx::iter_mask(1 << 0 | 1 << 3 | 1 << 9 | 1 << 33 | 1 << 40 | 1 << 63).collect();
        assert_eq!(v, vec![PmcIdx::gp(0).unwrap(), PmcIdx::gp(3).unwrap(), PmcIdx::fixed(1).unwrap()]);
    }

    #[test]
    fn rdpmc_decoding() {
        let r = RdpmcIdx(0x4000_0002);
        assert!(r.is_fixed() && !r.is_fast());
        assert_eq!(r.number(), 2);
        let r = RdpmcIdx(0x8000_0001);
        assert!(!r.is_fixed() && r.is_fast());
        assert_eq!(r.number(), 1);
        let r = RdpmcIdx(0xC000_0000);
        assert!(r.is_fixed() && r.is_fast());
        assert_eq!(r.number(), 0);
        assert_eq!(RdpmcIdx(0x100).number(), 0x100);
    }

    #[test]
    fn legacy_write_sign_extends_bit_31() {
        assert_eq!(legacy_write_value(0), 0);
        assert_eq!(legacy_write_value(0x7FFF_FFFF), 0x7FFF_FFFF);
        assert_eq!(legacy_write_value(0x8000_0000), 0xFFFF_8000_0000);
        assert_eq!(legacy_write_value(0xFFFF_FFFF), COUNTER_MASK);
        // Bits 63:32 of the operand are ignored.
        assert_eq!(legacy_write_value(0x1234_5678_0000_0001), 1);
        assert_eq!(legacy_write_value(0xFFFF_FFFF_7FFF_FFFF), 0x7FFF_FFFF);
    }

    #[test]
    fn full_width_write_must_fit() {
        assert_eq!(full_width_write_value(COUNTER_MASK), Some(COUNTER_MASK));
        assert_eq!(full_width_write_value(0x8000_0000), Some(0x8000_0000));
        assert_eq!(full_width_write_value(1 << 48), None);
        assert_eq!(full_width_write_value(u64::MAX), None);
    }
}
