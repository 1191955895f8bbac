//! Opening /dev/kvm with errors that say what is wrong, and the capabilities perfvm needs.

use kvm_bindings::kvm_userspace_memory_region;
use kvm_ioctls::{Cap, Kvm, VcpuFd, VmFd};
use std::io;
use thiserror::Error;
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

/// The KVM device opened unless `PERFVM_KVM_DEVICE` names another.
pub const KVM_PATH: &str = "/dev/kvm";

/// The KVM device to open: `PERFVM_KVM_DEVICE` overrides /dev/kvm (for tests of the error paths).
pub fn kvm_path() -> String {
    std::env::var("PERFVM_KVM_DEVICE").unwrap_or_else(|_| KVM_PATH.to_owned())
}

/// Why KVM cannot be used.
#[derive(Debug, Error)]
pub enum KvmError {
    /// The device (path given) does not exist.
    #[error("{0} does not exist (is KVM available on this host?)")]
    Missing(String),
    /// The device (path given) exists but we may not open it.
    #[error("no permission to open {0} (add yourself to the kvm group or run as root)")]
    Permission(String),
    /// Opening the device, or a VM or vCPU on it, failed otherwise.
    #[error("cannot open {0}: {1}")]
    Open(String, io::Error),
    /// KVM lacks the named capability.
    #[error("KVM lacks a capability perfvm needs: {0}")]
    MissingCap(&'static str),
}

/// Open KVM, telling a missing device from a permission problem.
pub fn open_kvm() -> Result<Kvm, KvmError> {
    let name = kvm_path();
    let path = std::ffi::CString::new(name.clone()).map_err(|_| KvmError::Missing(name.clone()))?;
    match Kvm::new_with_path(&path) {
        Ok(kvm) => {
            for (cap, name) in [(Cap::Irqchip, "KVM_CAP_IRQCHIP"), (Cap::UserMemory, "KVM_CAP_USER_MEMORY")] {
                if !kvm.check_extension(cap) {
                    return Err(KvmError::MissingCap(name));
                }
            }
            Ok(kvm)
        }
        Err(e) => Err(match e.errno() {
            libc::ENOENT => KvmError::Missing(name),
            libc::EACCES | libc::EPERM => KvmError::Permission(name),
            _ => KvmError::Open(name, io::Error::from_raw_os_error(e.errno())),
        }),
    }
}

/// Why a `/dev/kvm` test cannot run here, or None when it can.
pub fn unavailable_reason() -> Option<String> {
    open_kvm().err().map(|e| e.to_string())
}

/// Where this variable is `1` (CI), a test that cannot run here fails instead of skipping.
pub const REQUIRE_ENV: &str = "PERFVM_REQUIRE_KVM";

/// A test cannot run here: say so loudly (past libtest's capture), or fail where
/// [`REQUIRE_ENV`] forbids skipping.
pub fn skip_test(test: &str, reason: &str) {
    eprintln!("SKIP {test}: {reason}");
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("{test} cannot run here ({reason}) and {REQUIRE_ENV}=1 forbids skipping");
    }
}

/// A VM with `size` bytes of RAM at address 0 in one slot and one vCPU, for the probes
/// that measure what this host does (native support, an exit's cost).
#[derive(Debug)]
pub(crate) struct ScratchVm {
    /// Its vCPU.
    pub vcpu: VcpuFd,
    _vm: VmFd,
    _kvm: Kvm,
    /// Its RAM; declared last, so it is dropped after the VM that maps it.
    pub mem: GuestMemoryMmap,
}

/// Why a scratch VM could not be set up.
#[derive(Debug, Error)]
pub enum ScratchError {
    /// Its RAM could not be mapped.
    #[error("probe memory: {0}")]
    Memory(#[from] vm_memory::mmap::FromRangesError),
    /// KVM cannot be opened.
    #[error(transparent)]
    Kvm(#[from] KvmError),
    /// Creating the VM, its memory slot or its vCPU failed.
    #[error("probe {what}: {source}")]
    Ioctl {
        /// What was being created.
        what: &'static str,
        /// What the kernel said.
        source: kvm_ioctls::Error,
    },
}

impl ScratchVm {
    /// A scratch VM with `size` bytes of RAM.
    pub(crate) fn new(size: usize) -> Result<ScratchVm, ScratchError> {
        let ioctl = |what| move |source| ScratchError::Ioctl { what, source };
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size)])?;
        let kvm = open_kvm()?;
        let vm = kvm.create_vm().map_err(ioctl("VM"))?;
        let host = mem.get_host_address(GuestAddress(0)).expect("address 0 was just mapped");
        let region = kvm_userspace_memory_region {
            slot: 0,
            guest_phys_addr: 0,
            memory_size: size as u64,
            userspace_addr: host as u64,
            flags: 0,
        };
        // SAFETY: the region maps memory owned by `mem`, which outlives `vm` (dropped after it).
        unsafe { vm.set_user_memory_region(region) }.map_err(ioctl("memory"))?;
        let vcpu = vm.create_vcpu(0).map_err(ioctl("vCPU"))?;
        Ok(ScratchVm { vcpu, _vm: vm, _kvm: kvm, mem })
    }
}
