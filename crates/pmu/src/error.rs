//! Rust errors for the VMM. A guest #GP is not one of these: see [`crate::MsrAccess`].

use thiserror::Error;

/// A [`crate::PmuConfig`] the model cannot honour.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Architectural perfmon needs 1..=8 general-purpose counters here.
    #[error("Unsupported number of general-purpose counters: {0} (expected 1..=8)")]
    GpCounters(u8),
    /// An AMD PMU has exactly 4 counters with the legacy MSRs only, exactly 6 with
    /// PerfCtrExtCore, and 1..=6 with PerfMonV2.
    #[error("Unsupported number of AMD general-purpose counters: {gp} ({perfmon} has {})", amd_counts(*.perfmon))]
    AmdGpCounters {
        /// The AMD level asked for.
        perfmon: crate::vendor::AmdPerfMon,
        /// The number of counters asked for.
        gp: u8,
    },
    /// Software PEBS was asked of a vendor that has none (PEBS is Intel's).
    #[error("PEBS is not available on {0} PMUs")]
    Pebs(crate::vendor::Vendor),
}

fn amd_counts(perfmon: crate::vendor::AmdPerfMon) -> &'static str {
    match perfmon {
        crate::vendor::AmdPerfMon::Legacy => "exactly 4",
        crate::vendor::AmdPerfMon::ExtCore => "exactly 6",
        crate::vendor::AmdPerfMon::PerfMonV2 => "1..=6",
    }
}

/// A [`crate::CountSource`] could not create a host-side event.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// A per-VM or per-host limit on events is reached.
    #[error("Host event limit reached")]
    LimitReached,
    /// The host cannot count this configuration.
    #[error("Event configuration not supported by the host")]
    Unsupported,
    /// The host refused with an OS error number.
    #[error("Host event creation failed (errno {0})")]
    Os(i32),
}

/// A [`crate::PmuState`] that cannot be loaded into this PMU. [`RestoreError::Format`] and
/// [`RestoreError::Shape`] leave the PMU untouched; after [`RestoreError::Rejected`] or
/// [`RestoreError::Absent`] it is reset.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RestoreError {
    /// The snapshot was written by an incompatible format.
    #[error("Unsupported snapshot format {0}")]
    Format(u32),
    /// The snapshot has a different number of counters than this PMU.
    #[error("Snapshot has {found_gp} GP and {found_fixed} fixed counters, PMU has {gp} and {fixed}")]
    Shape {
        /// GP counters in the snapshot.
        found_gp: usize,
        /// Fixed counters in the snapshot.
        found_fixed: usize,
        /// GP counters of this PMU.
        gp: u8,
        /// Fixed counters of this PMU.
        fixed: u8,
    },
    /// The snapshot gives a register this PMU does not have (e.g. a fixed-counter control
    /// for a vendor without fixed counters) a value other than its reset value.
    #[error("Snapshot sets {register:?} to {value:#x}, which this PMU does not have")]
    Absent {
        /// The register.
        register: crate::vendor::PmuReg,
        /// The value it was given.
        value: u64,
    },
    /// A host-initiated write of a snapshot value faulted (reserved bits, too wide).
    #[error("Snapshot value {value:#x} rejected by MSR {msr:#x}")]
    Rejected {
        /// MSR number.
        msr: u32,
        /// Value that was refused.
        value: u64,
    },
}
