//! Opening /dev/kvm with errors that say what is wrong, and the capabilities perfvm needs.

use kvm_ioctls::{Cap, Kvm};
use std::io;
use thiserror::Error;

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
