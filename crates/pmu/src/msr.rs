//! MSR numbers, ranges and the result type of an MSR access: vendor-neutral. Each vendor's
//! MSR map (which numbers exist and what they name) is in `vendor/`.

use serde::{Deserialize, Serialize};

/// An MSR number (ECX of RDMSR/WRMSR). Not a counter index: see [`crate::PmcIdx`]. The
/// vendors' MSR numbers are associated constants (`MsrIndex::IA32_PERF_GLOBAL_CTRL`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MsrIndex(pub u32);

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
