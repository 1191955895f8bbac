//! perfvm's virtual PMU: a pure model of Intel architectural performance monitoring
//! version 2 (Intel SDM Vol. 3B, "Architectural Performance Monitoring").
//!
//! The model is split as Linux KVM splits `arch/x86/kvm/pmu.c` from `vmx/pmu_intel.c`: the
//! generic part ([`Pmu`]: counters, enables, overflow, policies, filter, snapshots) works on
//! vendor-neutral registers ([`PmuReg`]) and counter indexes ([`PmcIdx`]); a vendor module
//! (KVM's `kvm_pmu_ops`, chosen by [`Vendor`]) owns the MSR map, CPUID leaves
//! ([`PmuCaps::cpuid_bits`]), reserved bits, RDPMC operands and event encodings.
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

mod backend;
mod caps;
mod counting;
mod cpuid;
mod error;
mod event;
mod eventsel;
mod filter;
mod host;
#[cfg(any(test, feature = "mock"))]
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
mod vendor;

pub use backend::{CountSource, HostEventConfig};
pub use caps::PmuCaps;
pub use cpuid::{CpuidBits, LEAF1_ECX_DTES64, LEAF1_ECX_PDCM, LEAF1_EDX_DS};
pub use error::{BackendError, ConfigError, RestoreError};
pub use event::{ArchEvent, EventSet, FIXED_EVENTS};
pub use eventsel::{EventSel, FixedCtrl};
pub use filter::{FilterAction, FilterError, FilterFormat, PmuEventFilter};
#[cfg(any(test, feature = "mock"))]
pub use mock::{MockCall, MockEvent, MockSource};
pub use msr::{Initiator, MsrAccess, MsrIndex, MsrRange};
pub use pebs::{
    GLOBAL_STATUS_OVF_BUFFER, MISC_ENABLE_BTS_UNAVAIL, MISC_ENABLE_EMON, MISC_ENABLE_PEBS_UNAVAIL, PEBS_RECORD_FORMAT,
    PEBS_RECORD_SIZE,
};
pub use pmc::{PmcIdx, RdpmcIdx, COUNTER_MASK, COUNTER_WIDTH, MAX_FIXED_COUNTERS, MAX_GP_COUNTERS, PMC_SLOTS};
pub use pmu::{Pmu, PmuConfig};
pub use policy::{Policy, DEFAULT_RELEASE_AFTER_NS};
pub use state::{PmuState, STATE_FORMAT};
pub use stats::{BackendCalls, PmuStats};
pub use vendor::{CounterWrite, PmuMsr, PmuReg, Vendor, ARCH_EVENT_VECTOR_LEN, PMU_VERSION};
