//! One exit, decided: what the loop does after each KVM_RUN exit, in a free function the
//! unit tests drive without a vCPU (the loop itself is `vcpu.rs`).

use crate::devices::DeviceAction;
use crate::vpmu::VcpuPmu;
use crate::vstate::exit::VmEnd;
use crate::vstate::vcpu::Shared;
use kvm_ioctls::VcpuExit;
use pmu::MsrAccess;
use vm_memory::GuestMemoryMmap;

/// What the loop does after an exit, decided while the kvm_run borrow is live.
pub(crate) enum Next {
    Continue,
    /// The guest asked for an NMI after this many single-steps (test port).
    Nmi(u32),
    PvRegister(u64),
    PvDoorbell,
    /// Programming changed: refresh the PV page's published counters.
    PvPublish,
    /// A #DB exit at this RIP, with this DR6 (a single-step, or a breakpoint of ours).
    Step(u64, u64),
    /// The guest wrote the RDPMC trap's port (`rdpmc_traps`, hardware hosts).
    RdpmcTrap,
    End(VmEnd),
    TripleFault,
    InternalError,
    /// The CPU reset line was pulsed: a reboot, or a panic's (warm-reset flag).
    Reset,
    /// The guest wrote LSTAR (Linux guests: `syscall_entry`).
    Lstar(u64),
}

/// The BIOS warm-reset flag, a u16 at 0x472: Linux writes it before every reset, 0x1234
/// for a warm one.
const WARM_RESET_FLAG: u64 = 0x472;

/// How a reset from the guest ends the run: a panic if the warm-reset flag says warm, as
/// Linux leaves it on a panic under `reboot=panic_warm` (perfvm's default), else a reboot.
pub(crate) fn reset_end(mem: &GuestMemoryMmap) -> VmEnd {
    use vm_memory::Bytes;
    match mem.read_obj::<u16>(vm_memory::GuestAddress(WARM_RESET_FLAG)) {
        Ok(0x1234) => VmEnd::KernelPanic,
        _ => VmEnd::Reboot,
    }
}

/// Stats label of a port access: console and agent-channel exits apart from other IO.
fn port_label(io: &'static str, port: u16) -> &'static str {
    match port {
        p if crate::devices::SERIAL_PORTS.contains(&p) => "serial",
        crate::devices::AGENT_PORT => "agent",
        _ => io,
    }
}

/// Handle one exit; returns its stats label and what to do next.
pub(crate) fn dispatch(
    exit: VcpuExit<'_>,
    shared: &Shared,
    pmu: &mut Option<VcpuPmu>,
    vcpu: u32,
) -> (&'static str, Next) {
    match exit {
        VcpuExit::IoOut(crate::devices::VIF_PENDING_PORT, _) => ("vif-pending", Next::Continue),
        VcpuExit::IoOut(crate::vpmu::rdpmc_traps::RDPMC_TRAP_PORT, _) => ("rdpmc-trap", Next::RdpmcTrap),
        VcpuExit::IoOut(port, data) => match shared.bus.lock().unwrap().write(port, data) {
            DeviceAction::Continue => (port_label("io-out", port), Next::Continue),
            DeviceAction::Exit(status) => ("io-out", Next::End(VmEnd::Status { status })),
            DeviceAction::Nmi(after) => ("io-out", Next::Nmi(after)),
            DeviceAction::PvRegister(gpa) => ("pv-register", Next::PvRegister(gpa)),
            DeviceAction::PvDoorbell => ("pv-doorbell", Next::PvDoorbell),
            DeviceAction::Reset => ("io-out", Next::Reset),
            DeviceAction::PowerOff => ("serial", Next::End(VmEnd::PowerOff)),
        },
        VcpuExit::IoIn(port, data) => {
            shared.bus.lock().unwrap().read(port, data);
            (port_label("io-in", port), Next::Continue)
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
        // Only the PMU's MSRs (and unadvertised ones, which #GP) are routed to user space.
        VcpuExit::X86Rdmsr(msr) if crate::host::pvm::emulator_cpuid::UNADVERTISED_MSRS.contains(&msr.index) => {
            *msr.error = 1;
            ("msr-read", Next::Continue)
        }
        VcpuExit::X86Wrmsr(msr) if crate::host::pvm::emulator_cpuid::UNADVERTISED_MSRS.contains(&msr.index) => {
            *msr.error = 1;
            ("msr-write", Next::Continue)
        }
        VcpuExit::X86Rdmsr(msr) if crate::arch::x86_64::identity::is_lbr_msr(msr.index) => {
            *msr.data = 0;
            ("msr-read", Next::Continue)
        }
        VcpuExit::X86Wrmsr(msr) if crate::arch::x86_64::identity::is_lbr_msr(msr.index) => {
            ("msr-write", Next::Continue)
        }
        VcpuExit::X86Rdmsr(msr) => {
            match pmu.as_mut().map_or(MsrAccess::Fault, |p| p.rdmsr(msr.index)) {
                MsrAccess::Ok(value) => *msr.data = value,
                MsrAccess::Fault => *msr.error = 1,
            }
            ("msr-read", Next::Continue)
        }
        VcpuExit::X86Wrmsr(msr) if msr.index == crate::host::pvm::syscall_entry::MSR_LSTAR => {
            ("msr-write", Next::Lstar(msr.data))
        }
        VcpuExit::X86Wrmsr(msr) => {
            let Some(p) = pmu.as_mut() else {
                *msr.error = 1;
                return ("msr-write", Next::Continue);
            };
            if p.wrmsr(msr.index, msr.data) == MsrAccess::Fault {
                *msr.error = 1;
            }
            let next = if p.pv_publishing() { Next::PvPublish } else { Next::Continue };
            ("msr-write", next)
        }
        VcpuExit::Debug(debug) => ("debug", Next::Step(debug.pc, debug.dr6)),
        VcpuExit::SystemEvent(kind, _) => (
            "system-event",
            Next::End(VmEnd::Failed {
                vcpu,
                reason: format!("guest system event {kind} (reset or power-off request)"),
            }),
        ),
        VcpuExit::FailEntry(reason, cpu) => (
            "fail-entry",
            Next::End(VmEnd::Failed { vcpu, reason: format!("VM entry failed: reason {reason:#x} on host cpu {cpu}") }),
        ),
        other => ("other", Next::End(VmEnd::Failed { vcpu, reason: format!("unexpected exit {other:?}") })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::PioBus;
    use crate::devices::{Console, FwCfg, SerialPort, DEBUG_EXIT_PORT, NMI_REQUEST_PORT, VIF_PENDING_PORT};
    use kvm_ioctls::{MsrExitReason, ReadMsrExit, WriteMsrExit};
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    /// A VM's shared state with its devices, and the console they print to.
    fn shared() -> (Shared, Console) {
        let console = Console::capture();
        let bus = PioBus::new(SerialPort::new(console.clone()), FwCfg::new(1, 16 << 20));
        let (tx, _rx) = std::sync::mpsc::channel();
        (Shared { bus: Mutex::new(bus), stop: AtomicBool::new(false), ends: Mutex::new(tx) }, console)
    }

    fn run(exit: VcpuExit<'_>) -> (&'static str, Next) {
        let (shared, _) = shared();
        dispatch(exit, &shared, &mut None, 0)
    }

    #[test]
    fn port_writes_reach_their_devices() {
        let (shared, console) = shared();
        let (label, next) = dispatch(VcpuExit::IoOut(0x3f8, b"A"), &shared, &mut None, 0);
        assert!(matches!((label, next), ("serial", Next::Continue)));
        assert_eq!(console.captured(), b"A");
        let (_, next) = run(VcpuExit::IoOut(DEBUG_EXIT_PORT, &[3]));
        assert!(matches!(next, Next::End(VmEnd::Status { status: 7 })), "isa-debug-exit: (3 << 1) | 1");
        assert!(matches!(run(VcpuExit::IoOut(NMI_REQUEST_PORT, &[5])).1, Next::Nmi(5)));
        assert!(matches!(run(VcpuExit::IoOut(VIF_PENDING_PORT, &[0])), ("vif-pending", Next::Continue)));
        let trap = crate::vpmu::rdpmc_traps::RDPMC_TRAP_PORT;
        assert!(matches!(run(VcpuExit::IoOut(trap, &[0])), ("rdpmc-trap", Next::RdpmcTrap)));
    }

    #[test]
    fn unclaimed_ports_and_mmio_float_high() {
        let mut data = [0u8; 2];
        assert!(matches!(run(VcpuExit::IoIn(0x2f0, &mut data)), ("io-in", Next::Continue)));
        assert_eq!(data, [0xff; 2]);
        let mut mmio = [0u8; 4];
        assert!(matches!(run(VcpuExit::MmioRead(0xd000_0000, &mut mmio)), ("mmio-read", Next::Continue)));
        assert_eq!(mmio, [0xff; 4]);
    }

    #[test]
    fn msrs_without_a_pmu_and_unadvertised_ones_fault() {
        for index in [crate::host::pvm::emulator_cpuid::UNADVERTISED_MSRS[0], 0x38f] {
            let (mut error, mut data) = (0u8, 0u64);
            let exit = ReadMsrExit { error: &mut error, reason: MsrExitReason::Filter, index, data: &mut data };
            assert!(matches!(run(VcpuExit::X86Rdmsr(exit)), ("msr-read", Next::Continue)));
            assert_eq!(error, 1, "MSR {index:#x}: #GP");
            let mut error = 0u8;
            let exit = WriteMsrExit { error: &mut error, reason: MsrExitReason::Filter, index, data: 1 };
            assert!(matches!(run(VcpuExit::X86Wrmsr(exit)), ("msr-write", Next::Continue)));
            assert_eq!(error, 1, "MSR {index:#x}: #GP");
        }
    }

    #[test]
    fn the_lbr_records_nothing_and_takes_writes() {
        let (mut error, mut data) = (0u8, 7u64);
        let exit = ReadMsrExit { error: &mut error, reason: MsrExitReason::Filter, index: 0x40, data: &mut data };
        run(VcpuExit::X86Rdmsr(exit));
        assert_eq!((error, data), (0, 0));
        let exit = WriteMsrExit { error: &mut error, reason: MsrExitReason::Filter, index: 0x1c9, data: 0 };
        run(VcpuExit::X86Wrmsr(exit));
        assert_eq!(error, 0);
    }

    #[test]
    fn a_reset_is_a_panic_only_with_the_warm_flag() {
        use vm_memory::{Bytes, GuestAddress};
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x1000)]).unwrap();
        assert_eq!(reset_end(&mem), VmEnd::Reboot);
        mem.write_obj(0x1234u16, GuestAddress(WARM_RESET_FLAG)).unwrap();
        assert_eq!(reset_end(&mem), VmEnd::KernelPanic);
        assert_eq!(VmEnd::KernelPanic.exit_code(), 10);
        assert_eq!((VmEnd::Reboot.exit_code(), VmEnd::PowerOff.exit_code()), (0, 0));
        let (shared, _) = shared();
        shared.bus.lock().unwrap().pc = Some(Default::default());
        let (_, next) = dispatch(VcpuExit::IoOut(0x64, &[0xfe]), &shared, &mut None, 0);
        assert!(matches!(next, Next::Reset));
    }

    #[test]
    fn ends_and_steps() {
        assert!(matches!(run(VcpuExit::Shutdown), ("shutdown", Next::TripleFault)));
        assert!(matches!(run(VcpuExit::InternalError), ("internal-error", Next::InternalError)));
        assert!(matches!(run(VcpuExit::Hlt), ("hlt", Next::Continue)));
        let debug = kvm_bindings::kvm_debug_exit_arch { pc: 0x1234, ..Default::default() };
        assert!(matches!(run(VcpuExit::Debug(debug)), ("debug", Next::Step(0x1234, _))));
        assert!(matches!(run(VcpuExit::SystemEvent(2, &[])).1, Next::End(VmEnd::Failed { .. })));
    }
}
