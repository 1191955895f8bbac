//! How a run of a VM ends.

use serde::Serialize;
use std::time::Duration;

/// Why the VM stopped. The CLI turns this into a message and an exit code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VmEnd {
    /// The guest ended the VM with a status: `(v << 1) | 1` via debug-exit, 0 via shutdown.
    Status {
        /// The guest's exit status.
        status: i32,
    },
    /// KVM_EXIT_SHUTDOWN: a triple fault.
    TripleFault {
        /// The vCPU that faulted.
        vcpu: u32,
        /// Its RIP at the exit.
        rip: u64,
    },
    /// KVM could not emulate or continue the guest.
    InternalError {
        /// The vCPU that stopped.
        vcpu: u32,
        /// KVM's `internal.suberror`.
        suberror: u32,
        /// Its RIP at the exit.
        rip: u64,
        /// The instruction there, decoded (when it could be read).
        #[serde(skip_serializing_if = "Option::is_none")]
        insn: Option<String>,
    },
    /// A Linux guest rebooted (`reboot -f`: i8042 reset with no warm-reset flag).
    Reboot,
    /// A Linux guest powered off (`poweroff -f`: its power-off line on the console).
    PowerOff,
    /// A Linux guest panicked: it reset with the BIOS warm-reset flag that perfvm's
    /// `reboot=panic_warm` makes a panic set (the panic text is on the console above).
    KernelPanic,
    /// `--timeout` elapsed with the guest still running.
    Timeout {
        /// The timeout, ms.
        after_ms: u64,
    },
    /// The VMM hit an unexpected condition running the guest.
    Failed {
        /// The vCPU whose loop failed.
        vcpu: u32,
        /// What went wrong.
        reason: String,
    },
    /// SIGINT or SIGTERM stopped the run.
    Signal {
        /// The signal number.
        signal: i32,
    },
}

/// Process exit codes for ends that are not a guest status. Guest statuses are 0 or odd, so
/// VMM-detected ends use even codes that no guest status can produce.
pub mod codes {
    /// The user's input is wrong (a bad option, an unusable guest file).
    pub const BAD_INPUT: i32 = 2;
    /// [`VmEnd::TripleFault`](crate::VmEnd::TripleFault).
    pub const TRIPLE_FAULT: i32 = 4;
    /// [`VmEnd::InternalError`](crate::VmEnd::InternalError).
    pub const INTERNAL_ERROR: i32 = 6;
    /// [`VmEnd::Failed`](crate::VmEnd::Failed).
    pub const FAILED: i32 = 8;
    /// [`VmEnd::KernelPanic`](crate::VmEnd::KernelPanic).
    pub const KERNEL_PANIC: i32 = 10;
    /// [`VmEnd::Timeout`](crate::VmEnd::Timeout), as timeout(1) exits.
    pub const TIMEOUT: i32 = 124;
}

impl VmEnd {
    /// The end of a run stopped by `--timeout` after `after`.
    pub fn timeout(after: Duration) -> Self {
        VmEnd::Timeout { after_ms: after.as_millis() as u64 }
    }

    /// The process exit code for this end.
    pub fn exit_code(&self) -> i32 {
        match self {
            VmEnd::Status { status } => *status & 0xff,
            VmEnd::Reboot | VmEnd::PowerOff => 0,
            VmEnd::KernelPanic => codes::KERNEL_PANIC,
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
            VmEnd::Status { .. } | VmEnd::Reboot | VmEnd::PowerOff => None,
            VmEnd::KernelPanic => Some("guest kernel panic (see the console)".into()),
            VmEnd::TripleFault { vcpu, rip } => {
                Some(format!("guest shutdown (triple fault) at RIP={rip:#x} on vcpu {vcpu}"))
            }
            VmEnd::InternalError { vcpu, suberror, rip, insn } => Some(format!(
                "KVM internal error, suberror {suberror} at RIP={rip:#x} on vcpu {vcpu}{}",
                insn.as_ref().map(|i| format!(" ({i})")).unwrap_or_default()
            )),
            VmEnd::Timeout { after_ms } => {
                Some(format!("timeout: guest still running after {:.1} s, stopped", *after_ms as f64 / 1000.0))
            }
            VmEnd::Failed { vcpu, reason } => Some(format!("vcpu {vcpu} failed: {reason}")),
            VmEnd::Signal { signal } => Some(format!("stopped by {}", stop_signal_name(*signal))),
        }
    }
}

/// The name of a signal that stops a run: SIGINT, or SIGTERM (the only other one handled).
pub fn stop_signal_name(signal: i32) -> &'static str {
    if signal == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}
