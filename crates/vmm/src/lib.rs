//! perfvm's VMM: KVM state and the vCPU loop, x86 guest setup, loaders, devices, the vPMU's
//! VMM side, the counting backends, the host seam, profiling, confinement and statistics.
#![deny(missing_docs)]

// x86-64 guest setup: boot structures, memory layout, CPUID and the guest's CPU identity.
pub mod arch;
// Counting backends: host perf events, one software clock, the exact (single-step) backend.
pub mod backends;
// Reading a user-named file with a bound on its size.
// The one place that wires a VM.
pub mod builder;
// What a VM is built from: the configuration the CLI fills in.
pub mod config;
// Confining the VMM's threads: seccomp filters, no_new_privs, dropped capabilities.
pub mod confine;
// Port-IO devices and the bus that routes guest IN/OUT to them.
pub mod devices;
// Why a VM could not be built.
pub mod error;
// The guest ABIs' structs and constants as the C headers in guest/include/abi lay them out.
pub mod guest_abi;
// The host seam: which KVM this is, and every answer that differs between hosts.
pub mod host;
// Guest images: ELF, multiboot, Linux bzImage, synthetic test guests.
pub mod loader;
// Profiling from the VMM: vCPU sampling and unwinding, VMM-side counts, kernel symbols.
pub mod profiling;
// Run statistics: VM exits, KVM's own per-vCPU statistics, syscall counts.
pub mod stats;
// The vPMU's VMM side: `VcpuPmu`, PMI delivery, the PV page, PEBS, RDPMC traps, its costs.
pub mod vpmu;
// KVM state and the vCPU loop: /dev/kvm, the VM, vCPU threads, exits, and vCPU state.
pub mod vstate;

pub use config::VmConfig;
pub use error::VmError;
pub use vstate::exit::VmEnd;
pub use vstate::vm::{RunReport, Vm};
