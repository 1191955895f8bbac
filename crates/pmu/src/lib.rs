//! perfvm's virtual PMU: a pure model of Intel architectural performance monitoring
//! version 2 (Intel SDM Vol. 3B, "Architectural Performance Monitoring") and of AMD64
//! performance monitoring (AMD APM Vol. 2, "Performance Monitoring Counters": the legacy
//! counters, PerfCtrExtCore and PerfMonV2).
//!
//! The model is split as Linux KVM splits `arch/x86/kvm/pmu.c` from `vmx/pmu_intel.c` and
//! `svm/pmu.c`: the generic part ([`Pmu`]: counters, enables, overflow, policies, filter,
//! snapshots) works on vendor-neutral registers ([`PmuReg`]) and counter indexes
//! ([`PmcIdx`]); a vendor module (KVM's `kvm_pmu_ops`, chosen by [`PmuConfig::vendor`])
//! owns the MSR map, CPUID leaves ([`PmuCaps::cpuid_bits`]), reserved bits, RDPMC operands
//! and event encodings. AMD event codes map onto the same [`ArchEvent`]s as Intel's
//! ([`ArchEvent::amd_select`]), so every backend counts both.
//!
//! The model owns every guest-visible PMU register and decides every rule (reserved bits,
//! widths, gating, overflow status). It never touches KVM, file descriptors or threads:
//! the outside world is reached only through [`CountSource`], which the VMM implements
//! (host `perf_event_open`, exact single-step) and which tests replace with `MockSource`
//! (feature `mock`).
//!
//! A guest #GP is an ordinary value, [`MsrAccess::Fault`], never a Rust error; Rust errors
//! ([`ConfigError`], [`BackendError`], [`RestoreError`], [`FilterError`]) are for the VMM.
//!
//! Optional software PEBS ([`PmuConfig::pebs`], [`Pmu::pebs_effective`]): the model owns
//! IA32_PEBS_ENABLE, IA32_DS_AREA and IA32_MISC_ENABLE and decides when a PEBS assist is
//! due; the VMM writes the record into the guest's DS buffer.
//!
//! An optional [`PmuEventFilter`] ([`PmuConfig::filter`], [`Pmu::set_event_filter`]) keeps
//! chosen events from counting, with KVM's `KVM_SET_PMU_EVENT_FILTER` semantics.
//!
//! ```
//! use pmu::{Initiator, MsrAccess, MsrIndex, MockSource, Pmu, PmuConfig};
//!
//! let mut pmu = Pmu::new(PmuConfig::default(), MockSource::new()).unwrap();
//! // Count instructions retired (0xC0/0x00) in ring 0 on PMC0.
//! let sel = 0xC0 | 1 << 17 | 1 << 22;
//! assert_eq!(pmu.set_msr(MsrIndex::perfevtsel(0), sel, Initiator::Guest), MsrAccess::Ok(()));
//! pmu.backend_mut().advance(pmu::PmcIdx::gp(0).unwrap(), 1000);
//! assert_eq!(pmu.get_msr(MsrIndex::pmc(0), Initiator::Guest), MsrAccess::Ok(1000));
//! // The ANY bit (21) is reserved in version 2.
//! assert!(pmu.set_msr(MsrIndex::perfevtsel(0), sel | 1 << 21, Initiator::Guest).is_fault());
//! ```
//!
//! An AMD PMU (PerfMonV2, six counters), and the CPUID bits its guest must see:
//!
//! ```
//! use pmu::{AmdPerfMon, Initiator, MsrAccess, MsrIndex, MockSource, Pmu, PmuConfig, Vendor};
//!
//! let config = PmuConfig { vendor: Vendor::Amd, amd_perfmon: AmdPerfMon::PerfMonV2, gp_counters: 6, ..PmuConfig::default() };
//! let mut pmu = Pmu::new(config, MockSource::new()).unwrap();
//! // Retired instructions (PMCx0C0) in ring 0 on counter 5.
//! let sel = 0xC0 | 1 << 17 | 1 << 22;
//! assert!(pmu.set_msr(MsrIndex::amd_ext_perf_ctl(5), sel, Initiator::Guest).is_ok());
//! pmu.backend_mut().advance(pmu::PmcIdx::gp(5).unwrap(), 1000);
//! assert_eq!(pmu.rdpmc(pmu::RdpmcIdx(5)), MsrAccess::Ok(1000));
//! // HostOnly (bit 41) is reserved for a guest: cleared, not a #GP, as on AMD hardware.
//! assert!(pmu.set_msr(MsrIndex::amd_ext_perf_ctl(5), sel | 1 << 41, Initiator::Guest).is_ok());
//! assert_eq!(pmu.get_msr(MsrIndex::amd_ext_perf_ctl(5), Initiator::Guest), MsrAccess::Ok(sel));
//! // CPUID 0x80000022: PerfMonV2, six core counters; 0x80000001 ECX bit 23: PerfCtrExtCore.
//! assert_eq!(pmu.caps().cpuid_leaf(0x8000_0022).unwrap().value, [1, 6, 0, 0]);
//! assert_eq!(pmu.caps().cpuid_leaf(0x8000_0001).unwrap().value, [0, 0, 1 << 23, 0]);
//! assert_eq!(pmu.caps().cpuid_0xa(), [0; 4]);
//! ```

mod backend;
mod caps;
mod counting;
mod cpuid;
mod error;
mod event;
mod eventsel;
mod filter;
mod host;
mod mock;
mod msr;
mod overflow;
mod pebs;
mod pmc;
mod pmu;
mod policy;
mod reload;
mod state;
mod stats;
pub mod tsc;
mod vendor;

pub use backend::{CountSource, HostEventConfig};
pub use caps::PmuCaps;
pub use cpuid::{
    CpuidBits, LEAF1_ECX_DTES64, LEAF1_ECX_PDCM, LEAF1_EDX_DS, LEAF_8000_0001_ECX_PERFCTR_CORE,
    LEAF_8000_0022_EAX_PERFMON_V2,
};
pub use error::{BackendError, ConfigError, RestoreError};
pub use event::{ArchEvent, EventSet, FIXED_EVENTS};
pub use eventsel::{EventSel, FixedCtrl};
pub use filter::{FilterAction, FilterError, FilterFormat, PmuEventFilter};
/// The recording test double of `CountSource`, for tests of this crate and its users (no
/// feature gate: the binary the tests run is the one a release build makes).
pub use mock::{MockCall, MockEvent, MockSource};
pub use msr::{Initiator, MsrAccess, MsrIndex, MsrRange};
pub use pebs::{
    GLOBAL_STATUS_OVF_BUFFER, MISC_ENABLE_BTS_UNAVAIL, MISC_ENABLE_EMON, MISC_ENABLE_PEBS_UNAVAIL, PEBS_RECORD_FORMAT,
    PEBS_RECORD_SIZE,
};
pub use pmc::{PmcIdx, RdpmcIdx, COUNTER_MASK, COUNTER_WIDTH, MAX_FIXED_COUNTERS, MAX_GP_COUNTERS, PMC_SLOTS};
pub use pmu::{DecodedMsr, Pmu, PmuConfig};
pub use policy::{Policy, DEFAULT_RELEASE_AFTER_NS};
pub use state::{PmuState, STATE_FORMAT};
pub use stats::{BackendCalls, PmuStats};
pub use vendor::{
    AmdEventSel, AmdMsr, AmdPerfMon, CounterWrite, PmuMsr, PmuReg, Vendor, AMD_MAX_GP_COUNTERS, ARCH_EVENT_VECTOR_LEN,
    PMU_VERSION,
};
