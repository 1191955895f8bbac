//! Signals that take a vCPU thread out of KVM_RUN: a handler sets `immediate_exit` in the
//! thread's kvm_run, so a signal that lands just before KVM_RUN is not lost (Firecracker's
//! way). Two signals: the kick (stop the VM) and the PMU overflow signal of host perf events,
//! which also raises a thread-local flag the run loop checks before each entry.
//!
//! Both are standard signals (SIGUSR1, SIGUSR2), never real-time ones: the kernel queues
//! real-time signals against RLIMIT_SIGPENDING and drops them (or falls back to SIGIO) when
//! the queue is full, as on a busy host or in a tight container, while a standard signal is
//! always delivered, coalesced with one already pending. Nothing here needs each signal
//! counted: a kick re-checks the stop flag, a notification re-checks every counter. SIGIO,
//! the kernel's fallback for perf notifications, is taken as a notification too.

use kvm_bindings::kvm_run;
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;

/// SIGINT or SIGTERM received (0: none): the VM stops, and the run is reported as it ended.
static TERMINATION: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_termination(signal: libc::c_int) {
    TERMINATION.store(signal, Ordering::SeqCst);
}

/// Catch SIGINT and SIGTERM so a run in progress ends cleanly (samples written, host events
/// closed) instead of the process dying mid-way.
pub fn catch_termination() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: installing a handler that only stores to an atomic.
            unsafe { libc::signal(signal, on_termination as *const () as libc::sighandler_t) };
        }
    });
}

/// The termination signal received, if any.
pub fn termination() -> Option<i32> {
    match TERMINATION.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

thread_local! {
    static KVM_RUN: Cell<*mut kvm_run> = const { Cell::new(std::ptr::null_mut()) };
    static PMU_SIGNALED: Cell<bool> = const { Cell::new(false) };
    static SAMPLE_SIGNALED: Cell<Option<bool>> = const { Cell::new(None) };
}

/// The signal host perf events raise on overflow (F_SETSIG).
pub fn pmu_signal() -> libc::c_int {
    libc::SIGUSR2
}

/// Whether a PMU overflow signal arrived on this thread since the last call.
pub fn take_pmu_signal() -> bool {
    PMU_SIGNALED.with(|c| c.replace(false))
}

/// The signal the VMM's own sampling clock raises (`sampler.rs`).
pub fn sample_signal() -> libc::c_int {
    libc::SIGPROF
}

/// Whether the sampling clock signaled this thread since the last call: Some(true) for its
/// own signal, Some(false) for SIGIO, the kernel's fallback, which does not say whose.
pub fn take_sample_signal() -> Option<bool> {
    SAMPLE_SIGNALED.with(|c| c.replace(None))
}

/// The signal used to kick vCPU threads.
pub fn kick_signal() -> libc::c_int {
    libc::SIGUSR1
}

extern "C" fn on_kick(signal: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only async-signal-safe work: const-initialised thread-locals and a byte store.
    if signal == pmu_signal() || signal == libc::SIGIO {
        PMU_SIGNALED.with(|c| c.set(true));
    }
    if signal == sample_signal() {
        SAMPLE_SIGNALED.with(|c| c.set(Some(true)));
    } else if signal == libc::SIGIO {
        SAMPLE_SIGNALED.with(|c| c.set(Some(c.get().unwrap_or(false))));
    }
    let run = KVM_RUN.with(Cell::get);
    if !run.is_null() {
        // SAFETY: the pointer was registered by this thread and stays valid while its vCPU
        // (which owns the kvm_run mapping) is alive; `unregister` clears it before drop.
        unsafe { std::ptr::write_volatile(&mut (*run).immediate_exit, 1) };
    }
}

/// Install the process-wide handlers (once).
pub fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for signal in [kick_signal(), pmu_signal(), sample_signal(), libc::SIGIO] {
            // SAFETY: a zeroed sigaction with a valid handler and an empty mask is well formed.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_kick as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(signal, &sa, std::ptr::null_mut());
            }
        }
    });
}

/// Register the calling thread's kvm_run as the kick target.
pub fn register(run: *mut kvm_run) {
    KVM_RUN.with(|c| c.set(run));
}

/// Forget the calling thread's kvm_run (before the vCPU is dropped).
pub fn unregister() {
    KVM_RUN.with(|c| c.set(std::ptr::null_mut()));
}

/// Kick a thread (by pthread id). Harmless if it is not in KVM_RUN.
pub fn kick(thread: libc::pthread_t) {
    // SAFETY: pthread_kill on a joinable thread id of ours with a handled signal.
    unsafe { libc::pthread_kill(thread, kick_signal()) };
}
