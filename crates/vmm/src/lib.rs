//! perfvm's KVM plumbing: guest memory, boot, loaders, devices, vCPU run loop.
#![deny(missing_docs)]

pub mod backends;
pub mod boot;
pub mod bounded;
pub mod builder;
pub mod complete;
pub mod config;
pub mod confine;
pub mod cpuid;
pub mod devices;
pub mod error;
pub mod exit;
pub mod guest_abi;
pub mod guest_tsc;
pub mod host_profile;
pub mod identity;
pub mod kallsyms;
pub mod kick;
pub mod kvm;
pub mod kvm_stats;
pub mod layout;
pub mod linear;
pub mod loader;
pub mod native;
pub mod pebs;
pub mod perfvm_leaf;
pub mod pmi;
pub mod pmu_report;
pub mod pv;
pub mod pv_sampling;
pub mod rdpmc_traps;
pub mod requests;
pub mod sampler;
pub mod softint;
pub mod stats;
pub mod stepping;
pub mod syscall_entry;
pub mod syscount;
pub mod throttle;
pub mod transition;
pub mod vcpu;
pub mod vm;
pub mod vpmu;
pub mod vpmu_stats;

pub use exit::VmEnd;
pub use vm::{RunReport, Vm, VmConfig, VmError};
