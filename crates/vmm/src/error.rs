//! Why a VM could not be built: one variant per kind of failure, each a one-line message.

use crate::loader::LoadError;
use crate::vstate::kvm::KvmError;
use thiserror::Error;

/// Why a VM could not be built. All are the user's input or the host, reported in one line.
#[derive(Debug, Error)]
pub enum VmError {
    /// /dev/kvm is missing or unusable.
    #[error(transparent)]
    Kvm(#[from] KvmError),
    /// The guest file cannot be read.
    #[error("guest file {path}: {reason}")]
    GuestFile {
        /// The path as given.
        path: String,
        /// Why it cannot be read.
        reason: String,
    },
    /// The guest file is no image perfvm can boot.
    #[error("guest file {path}: {source}")]
    Load {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        source: LoadError,
    },
    /// A configuration value out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A KVM ioctl failed while building the VM.
    #[error("VM setup failed: {op}: {source}")]
    Ioctl {
        /// The ioctl (e.g. `KVM_CREATE_VCPU`).
        op: &'static str,
        /// What the kernel said.
        source: kvm_ioctls::Error,
    },
    /// Guest memory could not be mapped.
    #[error("VM setup failed: guest memory: {0}")]
    MemoryMap(#[from] vm_memory::mmap::FromRangesError),
    /// Writing the image or boot data into guest memory failed.
    #[error("VM setup failed: {what}: {source}")]
    GuestMemory {
        /// What was being written.
        what: &'static str,
        /// The memory error.
        source: vm_memory::GuestMemoryError,
    },
    /// The PMU configuration is invalid.
    #[error("virtual PMU: {0}")]
    Pmu(#[from] pmu::ConfigError),
    /// `--native on` where the guest or the host cannot run natively.
    #[error(transparent)]
    NativeOn(#[from] crate::host::pvm::native::NativeOnError),
    /// A vCPU's VIF page was refused.
    #[error("registering the VIF page: {0}")]
    Vif(crate::host::pvm::native::VifError),
}

/// `map_err` for a failed ioctl named `op`.
pub(crate) fn ioctl(op: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmError {
    move |source| VmError::Ioctl { op, source }
}

/// `map_err` for a failed write of `what` into guest memory.
pub(crate) fn memory(what: &'static str) -> impl FnOnce(vm_memory::GuestMemoryError) -> VmError {
    move |source| VmError::GuestMemory { what, source }
}
