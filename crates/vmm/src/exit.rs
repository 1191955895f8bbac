//! How a run of a VM ends.

use serde::Serialize;
use std::time::Duration;

/// Why the VM stopped. The CLI turns this into a message and an exit code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VmEnd {
    /// The guest ended the VM with a status: `(v << 1) | 1` via debug-exit, 0 via shutdown.
    Status { status: i32 },
    /// KVM_EXIT_SHUTDOWN: a triple fault.
    TripleFault { vcpu: u32, rip: u64 },
    /// KVM could not emulate or continue the guest.
    InternalError { vcpu: u32, suberror: u32, rip: u64 },
    /// `--timeout` elapsed with the guest still running.
    Timeout { after_ms: u64 },
    /// The VMM hit an unexpected condition running the guest.
    Failed { vcpu: u32, reason: String },
    /// SIGINT or SIGTERM stopped the run.
    Signal { signal: i32 },
}

/// Process exit codes for ends that are not a guest status. Guest statuses are 0 or odd, so
/// VMM-detected ends use even codes that no guest status can produce.
pub mod codes {
    pub const BAD_INPUT: i32 = 2;
    pub const TRIPLE_FAULT: i32 = 4;
    pub const INTERNAL_ERROR: i32 = 6;
    pub const FAILED: i32 = 8;
    pub const TIMEOUT: i32 = 124;
}

impl VmEnd {
    pub fn timeout(after: Duration) -> Self {
        VmEnd::Timeout { after_ms: after.as_millis() as u64 }
    }

    /// The process exit code for this end.
    pub fn exit_code(&self) -> i32 {
        match self {
            VmEnd::Status { status } => *status & 0xff,
            VmEnd::TripleFault { .. } => codes::TRIPLE_FAULT,
            VmEnd::InternalError { .. } => codes::INTERNAL_ERROR,
            VmEnd::Failed { .. } => codes::FAILED,
            VmEnd::Timeout { .. } => codes::TIMEOUT,
            VmEnd::Signal { signal } => 128 + signal,
        }
    }

    /// A one-line explanation for ends that are not a plain guest status.
    pub fn message(&self) -> Option<String> {
        match self {
            VmEnd::Status { .. } => None,
            VmEnd::TripleFault { vcpu, rip } => {
                Some(format!("guest shutdown (triple fault) at RIP={rip:#x} on vcpu {vcpu}"))
            }
            VmEnd::InternalError { vcpu, suberror, rip } => {
                Some(format!("KVM internal error, suberror {suberror} at RIP={rip:#x} on vcpu {vcpu}"))
            }
            VmEnd::Timeout { after_ms } => {
                Some(format!("timeout: guest still running after {:.1} s, stopped", *after_ms as f64 / 1000.0))
            }
            VmEnd::Failed { vcpu, reason } => Some(format!("vcpu {vcpu} failed: {reason}")),
            VmEnd::Signal { signal } => {
                Some(format!("stopped by {}", if *signal == libc::SIGINT { "SIGINT" } else { "SIGTERM" }))
            }
        }
    }
}
