//! KVM state and the vCPU loop: /dev/kvm and its capabilities (`kvm`), running a built VM
//! (`vm`), one vCPU thread's KVM_RUN loop (`vcpu`), each exit handled in one pass
//! (`dispatch`), the loop's work before each entry (`requests`), the signals that take a
//! vCPU out of KVM_RUN (`kick`), how a run ends (`exit`), and what the VMM reads and writes
//! of a vCPU: its guest-debug word (`guest_debug`), one MSR (`vcpu_msr`), injected
//! exceptions (`inject`), `INT n` and `IRETQ` run in the guest's place (`softint`) and
//! guest linear memory (`linear`).

mod dispatch;
pub mod exit;
pub mod guest_debug;
pub mod inject;
pub mod kick;
pub mod kvm;
pub mod linear;
pub mod requests;
pub mod softint;
pub mod vcpu;
pub mod vcpu_msr;
pub mod vm;
