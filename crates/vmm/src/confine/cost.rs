//! What the filters cost a vCPU thread per system call, measured directly: an exit's
//! roundtrip (tens of microseconds on a nested host) hides a cost of nanoseconds.

use super::{filter_for, ConfineError, ThreadKind};
use std::time::Instant;

/// KVM_RUN's request number: the ioctl every exit makes, through the argument checks.
const KVM_RUN: libc::c_ulong = 0xae80;

/// ns per `ioctl(-1, KVM_RUN)` (fails at once with EBADF, after the filters) in a fresh
/// thread without filters, then with a vCPU thread's stack (the VMM's two, the vCPU's):
/// the best of `rounds` rounds of `n` calls each. Call it from an unconfined thread.
pub fn ioctl_ns(n: u32, rounds: u32) -> Result<(f64, f64), ConfineError> {
    let thread = std::thread::spawn(move || {
        let time = || {
            (0..rounds.max(1))
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..n {
                        // SAFETY: an ioctl on no descriptor: EBADF, no effect.
                        unsafe { libc::ioctl(-1, KVM_RUN) };
                    }
                    t.elapsed().as_nanos() as f64 / f64::from(n.max(1))
                })
                .fold(f64::INFINITY, f64::min)
        };
        let off = time();
        for kind in [ThreadKind::Vmm, ThreadKind::Vcpu] {
            for program in filter_for(kind)? {
                seccompiler::apply_filter(&program)
                    .map_err(|source| ConfineError::Install { thread: kind.name(), source })?;
            }
        }
        Ok((off, time()))
    });
    thread.join().map_err(|_| ConfineError::MeasurePanicked)?
}
