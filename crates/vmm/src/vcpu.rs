//! One vCPU thread: KVM_RUN, dispatch the exit, repeat until the VM ends.

use crate::devices::{DeviceAction, PioBus};
use crate::exit::VmEnd;
use crate::kick;
use crate::stats::VcpuStats;
use crate::vpmu::VcpuPmu;
use kvm_ioctls::{VcpuExit, VcpuFd, VmFd};
use vm_memory::GuestMemoryMmap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// State every vCPU thread of a VM shares.
#[derive(Debug)]
pub struct Shared {
    pub bus: Mutex<PioBus>,
    /// Set once the VM has ended; every vCPU leaves its loop.
    pub stop: AtomicBool,
    pub ends: Mutex<Sender<VmEnd>>,
}

impl Shared {
    /// Report an end of the VM and ask every vCPU to stop.
    pub fn end(&self, end: VmEnd) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.ends.lock().unwrap().send(end);
    }
}

/// What the loop does after an exit, decided while the kvm_run borrow is live.
enum Next {
    Continue,
    /// A single-step finished at this RIP.
    Step(u64),
    End(VmEnd),
    TripleFault,
    InternalError,
}

/// A vCPU and its loop.
#[derive(Debug)]
pub struct Vcpu {
    pub index: u32,
    pub fd: VcpuFd,
    pub shared: Arc<Shared>,
    pub stats: VcpuStats,
    pub vm: Arc<VmFd>,
    pub mem: GuestMemoryMmap,
    pub pmu: Option<VcpuPmu>,
}

/// What a vCPU thread hands back when the VM ends.
#[derive(Debug)]
pub struct VcpuResult {
    pub stats: VcpuStats,
    pub pmu: Option<VcpuPmu>,
}

impl Vcpu {
    /// Run until the VM ends; returns this vCPU's statistics and PMU.
    pub fn run(mut self) -> VcpuResult {
        kick::register(self.fd.get_kvm_run());
        while !self.shared.stop.load(Ordering::Acquire) {
            if let Some(pmu) = &mut self.pmu {
                pmu.before_entry(&self.vm, &self.fd, &self.mem, self.stats.run_ns);
            }
            let entered = Instant::now();
            self.stats.entries += 1;
            let result = self.fd.run();
            let exited = Instant::now();
            self.stats.run_ns += (exited - entered).as_nanos() as u64;
            let (reason, next) = match result {
                Ok(exit) => dispatch(exit, &self.shared, &mut self.pmu, self.index),
                Err(e) if e.errno() == libc::EINTR => {
                    self.fd.set_kvm_immediate_exit(0);
                    ("intr", Next::Continue)
                }
                Err(e) if e.errno() == libc::EAGAIN => ("again", Next::Continue),
                Err(e) => ("error", Next::End(self.failed(format!("KVM_RUN: {e}")))),
            };
            let next = match next {
                Next::Step(pc) => {
                    if let Some(pmu) = &mut self.pmu {
                        pmu.on_step(&self.fd, &self.mem, pc);
                    }
                    Next::Continue
                }
                Next::TripleFault => Next::End(VmEnd::TripleFault { vcpu: self.index, rip: self.rip() }),
                Next::InternalError => Next::End(self.internal_error()),
                other => other,
            };
            self.stats.record(reason, exited.elapsed());
            if let Next::End(end) = next {
                self.shared.end(end);
            }
        }
        kick::unregister();
        if let Some(pmu) = &mut self.pmu {
            pmu.finish();
        }
        VcpuResult { stats: self.stats, pmu: self.pmu }
    }

    fn rip(&self) -> u64 {
        self.fd.get_regs().map(|r| r.rip).unwrap_or(0)
    }

    fn failed(&self, reason: String) -> VmEnd {
        VmEnd::Failed { vcpu: self.index, reason }
    }

    fn internal_error(&mut self) -> VmEnd {
        // SAFETY: the exit reason was KVM_EXIT_INTERNAL_ERROR, so `internal` is the live union member.
        let suberror = unsafe { self.fd.get_kvm_run().__bindgen_anon_1.internal.suberror };
        VmEnd::InternalError { vcpu: self.index, suberror, rip: self.rip() }
    }
}

/// Handle one exit; returns its stats label and what to do next.
fn dispatch(exit: VcpuExit<'_>, shared: &Shared, pmu: &mut Option<VcpuPmu>, vcpu: u32) -> (&'static str, Next) {
    match exit {
        VcpuExit::IoOut(port, data) => match shared.bus.lock().unwrap().write(port, data) {
            DeviceAction::Continue => ("io-out", Next::Continue),
            DeviceAction::Exit(status) => ("io-out", Next::End(VmEnd::Status { status })),
        },
        VcpuExit::IoIn(port, data) => {
            shared.bus.lock().unwrap().read(port, data);
            ("io-in", Next::Continue)
        }
        // Nothing is mapped outside RAM but the in-kernel LAPIC: reads float high.
        VcpuExit::MmioRead(_, data) => {
            data.fill(0xff);
            ("mmio-read", Next::Continue)
        }
        VcpuExit::MmioWrite(..) => ("mmio-write", Next::Continue),
        VcpuExit::Hlt => ("hlt", Next::Continue),
        VcpuExit::Shutdown => ("shutdown", Next::TripleFault),
        VcpuExit::InternalError => ("internal-error", Next::InternalError),
        // Only the PMU's MSRs are routed to user space; anything else faults.
        VcpuExit::X86Rdmsr(msr) => {
            match pmu.as_mut().and_then(|p| p.rdmsr(msr.index)) {
                Some(value) => *msr.data = value,
                None => *msr.error = 1,
            }
            ("msr-read", Next::Continue)
        }
        VcpuExit::X86Wrmsr(msr) => {
            if !pmu.as_mut().is_some_and(|p| p.wrmsr(msr.index, msr.data)) {
                *msr.error = 1;
            }
            ("msr-write", Next::Continue)
        }
        VcpuExit::Debug(debug) => ("debug", Next::Step(debug.pc)),
        VcpuExit::SystemEvent(kind, _) => {
            ("system-event", Next::End(VmEnd::Failed { vcpu, reason: format!("guest system event {kind} (reset or power-off request)") }))
        }
        VcpuExit::FailEntry(reason, cpu) => {
            ("fail-entry", Next::End(VmEnd::Failed { vcpu, reason: format!("VM entry failed: reason {reason:#x} on host cpu {cpu}") }))
        }
        other => ("other", Next::End(VmEnd::Failed { vcpu, reason: format!("unexpected exit {other:?}") })),
    }
}
