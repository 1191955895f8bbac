//! One exit in one pass: `handle_exit` enters the guest, decides what the exit is and does
//! its work, and returns what the loop (`vcpu.rs`) does next, as Firecracker's
//! `run_emulation` returns a `VcpuEmulation`. The exit's own data goes to the devices and
//! the vPMU while it borrows kvm_run; what needs the vCPU itself (its registers, guest
//! debug, the PV page) follows in the same arm through `ExitVcpu`, which `Vcpu`
//! implements and the unit tests mock.

use crate::devices::{DeviceAction, PioBus};
use crate::vpmu::VcpuPmu;
use crate::vstate::exit::VmEnd;
use kvm_ioctls::VcpuExit;
use pmu::MsrAccess;
use std::sync::Mutex;
use vm_memory::GuestMemoryMmap;

/// What the loop does after one exit.
#[derive(Debug)]
pub(crate) enum Emulation {
    /// The exit is handled: enter the guest again.
    Handled,
    /// The VM ends.
    End(VmEnd),
}

impl From<Option<VmEnd>> for Emulation {
    fn from(end: Option<VmEnd>) -> Self {
        end.map_or(Emulation::Handled, Emulation::End)
    }
}

/// What an exit's data goes to while the exit borrows kvm_run.
#[derive(Debug)]
pub(crate) struct ExitParts<'a> {
    /// The port-IO devices.
    pub bus: &'a Mutex<PioBus>,
    /// The vCPU's virtual PMU, if the VM has one.
    pub pmu: Option<&'a mut VcpuPmu>,
}

/// The vCPU as `handle_exit` sees it: KVM_RUN, and the work of an exit that needs the
/// vCPU itself once the exit's data is read.
pub(crate) trait ExitVcpu {
    /// Enter the guest (one KVM_RUN): its exit, and what the exit's data goes to meanwhile.
    fn enter(&mut self) -> (Result<VcpuExit<'_>, kvm_ioctls::Error>, ExitParts<'_>);
    /// The vCPU's index.
    fn index(&self) -> u32;
    /// Its RIP now (0 if it cannot be read).
    fn rip(&self) -> u64;
    /// Guest memory.
    fn mem(&self) -> &GuestMemoryMmap;
    /// A signal ended KVM_RUN (EINTR).
    fn interrupted(&mut self);
    /// The guest's write (OUT, MMIO store) exited and its device took it: while stepping,
    /// the write retires here, with the counters as they were before it (a doorbell's OUT).
    fn write_retired(&mut self);
    /// The guest asked for an NMI after `after` single-steps (the NMI port).
    fn nmi_requested(&mut self, after: u32);
    /// The guest offers its PV page at `gpa` (0: withdraws it).
    fn pv_register(&mut self, gpa: u64);
    /// The PV doorbell: the page's batch in this one exit.
    fn pv_doorbell(&mut self);
    /// PMU programming changed: refresh the PV page's published counters.
    fn pv_publish(&mut self);
    /// The guest wrote LSTAR (Linux guests: `syscall_entry`).
    fn lstar_written(&mut self, entry: u64);
    /// A #DB exit at `pc` with `dr6`: a single-step, or a breakpoint of the VMM's.
    fn debug_exit(&mut self, pc: u64, dr6: u64) -> Emulation;
    /// The guest wrote the RDPMC trap's port (`rdpmc_traps`, hardware hosts), or ran into
    /// a port write the exact backend planted (`vpmu::planted`).
    fn rdpmc_trap(&mut self) -> Emulation;
    /// The host's emulator rejected an instruction (KVM internal error).
    fn internal_error(&mut self) -> Emulation;
}

/// The BIOS warm-reset flag, a u16 at 0x472: Linux writes it before every reset, 0x1234
/// for a warm one.
const WARM_RESET_FLAG: u64 = 0x472;

/// How a reset from the guest ends the run: a panic if the warm-reset flag says warm, as
/// Linux leaves it on a panic under `reboot=panic_warm` (perfvm's default), else a reboot.
fn reset_end(mem: &GuestMemoryMmap) -> VmEnd {
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

/// Run the vCPU to its next exit and handle the exit: returns its stats label and what
/// the loop does next.
pub(crate) fn handle_exit(v: &mut impl ExitVcpu) -> (&'static str, Emulation) {
    use Emulation::{End, Handled};
    let (exit, ExitParts { bus, pmu }) = v.enter();
    let exit = match exit {
        Ok(exit) => exit,
        Err(e) if e.errno() == libc::EINTR => {
            v.interrupted();
            return ("intr", Handled);
        }
        Err(e) if e.errno() == libc::EAGAIN => return ("again", Handled),
        Err(e) => return ("error", End(failed(v, format!("KVM_RUN: {e}")))),
    };
    match exit {
        VcpuExit::IoOut(crate::devices::VIF_PENDING_PORT, _) => {
            v.write_retired();
            ("vif-pending", Handled)
        }
        // (Retired or not as the trap says: a planted stop's OUT is none of the guest's.)
        VcpuExit::IoOut(crate::vpmu::rdpmc_traps::RDPMC_TRAP_PORT, _) => ("trap-port", v.rdpmc_trap()),
        VcpuExit::IoOut(port, data) => {
            let action = bus.lock().unwrap().write(port, data);
            v.write_retired();
            match action {
                DeviceAction::Continue => (port_label("io-out", port), Handled),
                DeviceAction::Exit(status) => ("io-out", End(VmEnd::Status { status })),
                DeviceAction::Nmi(after) => {
                    v.nmi_requested(after);
                    ("io-out", Handled)
                }
                DeviceAction::PvRegister(gpa) => {
                    v.pv_register(gpa);
                    ("pv-register", Handled)
                }
                DeviceAction::PvDoorbell => {
                    v.pv_doorbell();
                    ("pv-doorbell", Handled)
                }
                DeviceAction::Reset => ("io-out", End(reset_end(v.mem()))),
                DeviceAction::PowerOff => ("serial", End(VmEnd::PowerOff)),
            }
        }
        VcpuExit::IoIn(port, data) => {
            bus.lock().unwrap().read(port, data);
            (port_label("io-in", port), Handled)
        }
        // Nothing is mapped outside RAM but the in-kernel LAPIC: reads float high.
        VcpuExit::MmioRead(_, data) => {
            data.fill(0xff);
            ("mmio-read", Handled)
        }
        VcpuExit::MmioWrite(..) => {
            v.write_retired();
            ("mmio-write", Handled)
        }
        VcpuExit::Hlt => ("hlt", Handled),
        VcpuExit::Shutdown => ("shutdown", End(VmEnd::TripleFault { vcpu: v.index(), rip: v.rip() })),
        VcpuExit::InternalError => ("internal-error", v.internal_error()),
        // Only the PMU's MSRs (and unadvertised ones, which #GP) are routed to user space.
        VcpuExit::X86Rdmsr(msr) if crate::host::pvm::emulator_cpuid::UNADVERTISED_MSRS.contains(&msr.index) => {
            *msr.error = 1;
            ("msr-read", Handled)
        }
        VcpuExit::X86Wrmsr(msr) if crate::host::pvm::emulator_cpuid::UNADVERTISED_MSRS.contains(&msr.index) => {
            *msr.error = 1;
            ("msr-write", Handled)
        }
        VcpuExit::X86Rdmsr(msr) if crate::arch::x86_64::identity::is_lbr_msr(msr.index) => {
            *msr.data = 0;
            ("msr-read", Handled)
        }
        VcpuExit::X86Wrmsr(msr) if crate::arch::x86_64::identity::is_lbr_msr(msr.index) => ("msr-write", Handled),
        VcpuExit::X86Rdmsr(msr) => {
            match pmu.map_or(MsrAccess::Fault, |p| p.rdmsr(msr.index)) {
                MsrAccess::Ok(value) => *msr.data = value,
                MsrAccess::Fault => *msr.error = 1,
            }
            ("msr-read", Handled)
        }
        VcpuExit::X86Wrmsr(msr) if msr.index == crate::host::pvm::syscall_entry::MSR_LSTAR => {
            let entry = msr.data;
            v.lstar_written(entry);
            ("msr-write", Handled)
        }
        VcpuExit::X86Wrmsr(msr) => {
            let Some(p) = pmu else {
                *msr.error = 1;
                return ("msr-write", Handled);
            };
            if p.wrmsr(msr.index, msr.data) == MsrAccess::Fault {
                *msr.error = 1;
            }
            if p.pv_publishing() {
                v.pv_publish();
            }
            ("msr-write", Handled)
        }
        VcpuExit::Debug(debug) => ("debug", v.debug_exit(debug.pc, debug.dr6)),
        VcpuExit::SystemEvent(kind, _) => {
            ("system-event", End(failed(v, format!("guest system event {kind} (reset or power-off request)"))))
        }
        VcpuExit::FailEntry(reason, cpu) => {
            ("fail-entry", End(failed(v, format!("VM entry failed: reason {reason:#x} on host cpu {cpu}"))))
        }
        other => {
            let reason = format!("unexpected exit {other:?}");
            ("other", End(failed(v, reason)))
        }
    }
}

/// The VM ends with vCPU `v` failing for `reason`.
pub(crate) fn failed(v: &impl ExitVcpu, reason: String) -> VmEnd {
    VmEnd::Failed { vcpu: v.index(), reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{Console, FwCfg, SerialPort, DEBUG_EXIT_PORT, NMI_REQUEST_PORT, VIF_PENDING_PORT};
    use crate::vstate::vcpu::Shared;
    use kvm_ioctls::{MsrExitReason, ReadMsrExit, WriteMsrExit};
    use std::sync::atomic::AtomicBool;

    /// A vCPU without KVM: its one exit, its devices, and what the handler asked of it.
    struct Mock<'a> {
        exit: Option<VcpuExit<'a>>,
        shared: Shared,
        mem: GuestMemoryMmap,
        /// The work the handler asked for, in order.
        asked: Vec<String>,
    }

    impl<'a> Mock<'a> {
        fn new(exit: VcpuExit<'a>) -> Self {
            let (shared, _) = shared();
            Mock::with(exit, shared)
        }

        fn with(exit: VcpuExit<'a>, shared: Shared) -> Self {
            let mem = GuestMemoryMmap::from_ranges(&[(vm_memory::GuestAddress(0), 0x1000)]).unwrap();
            Mock { exit: Some(exit), shared, mem, asked: Vec::new() }
        }
    }

    /// The mock's work without arguments: noted by name.
    macro_rules! noted {
        ($($work:ident),*) => {$(
            fn $work(&mut self) {
                self.asked.push(stringify!($work).into());
            }
        )*};
    }

    impl ExitVcpu for Mock<'_> {
        fn enter(&mut self) -> (Result<VcpuExit<'_>, kvm_ioctls::Error>, ExitParts<'_>) {
            (Ok(self.exit.take().expect("one exit")), ExitParts { bus: &self.shared.bus, pmu: None })
        }
        fn index(&self) -> u32 {
            0
        }
        fn rip(&self) -> u64 {
            0x1000
        }
        fn mem(&self) -> &GuestMemoryMmap {
            &self.mem
        }
        noted!(interrupted, write_retired, pv_doorbell, pv_publish);
        fn nmi_requested(&mut self, after: u32) {
            self.asked.push(format!("nmi after {after}"));
        }
        fn pv_register(&mut self, gpa: u64) {
            self.asked.push(format!("pv-register {gpa:#x}"));
        }
        fn lstar_written(&mut self, entry: u64) {
            self.asked.push(format!("lstar {entry:#x}"));
        }
        fn debug_exit(&mut self, pc: u64, dr6: u64) -> Emulation {
            self.asked.push(format!("debug at {pc:#x}, dr6 {dr6:#x}"));
            Emulation::Handled
        }
        fn rdpmc_trap(&mut self) -> Emulation {
            self.asked.push("rdpmc-trap".into());
            Emulation::Handled
        }
        fn internal_error(&mut self) -> Emulation {
            self.asked.push("internal-error".into());
            Emulation::Handled
        }
    }

    /// A VM's shared state with its devices, and the console they print to.
    fn shared() -> (Shared, Console) {
        let console = Console::capture();
        let bus = PioBus::new(SerialPort::new(console.clone()), FwCfg::new(1, 16 << 20));
        let (tx, _rx) = std::sync::mpsc::channel();
        (Shared { bus: Mutex::new(bus), stop: AtomicBool::new(false), ends: Mutex::new(tx) }, console)
    }

    /// Handle `exit` on a mock vCPU: the label, what the loop does next, and what the
    /// handler asked of the vCPU.
    fn run(exit: VcpuExit<'_>) -> (&'static str, Emulation, Vec<String>) {
        let mut v = Mock::new(exit);
        let (label, next) = handle_exit(&mut v);
        (label, next, v.asked)
    }

    #[test]
    fn port_writes_reach_their_devices() {
        let (shared, console) = shared();
        let mut v = Mock::with(VcpuExit::IoOut(0x3f8, b"A"), shared);
        let (label, next) = handle_exit(&mut v);
        assert!(matches!((label, next), ("serial", Emulation::Handled)));
        assert_eq!(console.captured(), b"A");
        assert_eq!(v.asked, ["write_retired"], "an OUT retires once its device took it");
        let (_, next, _) = run(VcpuExit::IoOut(DEBUG_EXIT_PORT, &[3]));
        assert!(matches!(next, Emulation::End(VmEnd::Status { status: 7 })), "isa-debug-exit: (3 << 1) | 1");
        assert_eq!(run(VcpuExit::IoOut(NMI_REQUEST_PORT, &[5])).2, ["write_retired", "nmi after 5"]);
        let (label, next, asked) = run(VcpuExit::IoOut(VIF_PENDING_PORT, &[0]));
        assert!(matches!((label, next), ("vif-pending", Emulation::Handled)));
        assert_eq!(asked, ["write_retired"]);
        let trap = crate::vpmu::rdpmc_traps::RDPMC_TRAP_PORT;
        let (label, _, asked) = run(VcpuExit::IoOut(trap, &[0]));
        assert_eq!(label, "trap-port");
        assert_eq!(asked, ["rdpmc-trap"]);
    }

    #[test]
    fn unclaimed_ports_and_mmio_float_high() {
        let mut data = [0u8; 2];
        assert!(matches!(run(VcpuExit::IoIn(0x2f0, &mut data)), ("io-in", Emulation::Handled, _)));
        assert_eq!(data, [0xff; 2]);
        let mut mmio = [0u8; 4];
        assert!(matches!(run(VcpuExit::MmioRead(0xd000_0000, &mut mmio)), ("mmio-read", Emulation::Handled, _)));
        assert_eq!(mmio, [0xff; 4]);
    }

    #[test]
    fn msrs_without_a_pmu_and_unadvertised_ones_fault() {
        for index in [crate::host::pvm::emulator_cpuid::UNADVERTISED_MSRS[0], 0x38f] {
            let (mut error, mut data) = (0u8, 0u64);
            let exit = ReadMsrExit { error: &mut error, reason: MsrExitReason::Filter, index, data: &mut data };
            assert!(matches!(run(VcpuExit::X86Rdmsr(exit)), ("msr-read", Emulation::Handled, _)));
            assert_eq!(error, 1, "MSR {index:#x}: #GP");
            let mut error = 0u8;
            let exit = WriteMsrExit { error: &mut error, reason: MsrExitReason::Filter, index, data: 1 };
            assert!(matches!(run(VcpuExit::X86Wrmsr(exit)), ("msr-write", Emulation::Handled, _)));
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
        let mut v = Mock::with(VcpuExit::IoOut(0x64, &[0xfe]), shared);
        assert!(matches!(handle_exit(&mut v).1, Emulation::End(VmEnd::Reboot)), "the i8042's reset line");
        v.mem.write_obj(0x1234u16, GuestAddress(WARM_RESET_FLAG)).unwrap();
        v.exit = Some(VcpuExit::IoOut(0x64, &[0xfe]));
        assert!(matches!(handle_exit(&mut v).1, Emulation::End(VmEnd::KernelPanic)));
    }

    #[test]
    fn ends_and_steps() {
        let (label, next, _) = run(VcpuExit::Shutdown);
        assert!(matches!((label, next), ("shutdown", Emulation::End(VmEnd::TripleFault { vcpu: 0, rip: 0x1000 }))));
        let (label, _, asked) = run(VcpuExit::InternalError);
        assert_eq!(label, "internal-error");
        assert_eq!(asked, ["internal-error"]);
        assert!(matches!(run(VcpuExit::Hlt), ("hlt", Emulation::Handled, _)));
        let debug = kvm_bindings::kvm_debug_exit_arch { pc: 0x1234, dr6: 0x4000, ..Default::default() };
        let (label, _, asked) = run(VcpuExit::Debug(debug));
        assert_eq!(label, "debug");
        assert_eq!(asked, ["debug at 0x1234, dr6 0x4000"]);
        assert!(matches!(run(VcpuExit::SystemEvent(2, &[])).1, Emulation::End(VmEnd::Failed { .. })));
    }

    #[test]
    fn an_lstar_write_goes_to_the_syscall_repair() {
        let mut error = 0u8;
        let index = crate::host::pvm::syscall_entry::MSR_LSTAR;
        let exit =
            WriteMsrExit { error: &mut error, reason: MsrExitReason::Filter, index, data: 0xffff_8000_0000_1000 };
        let (label, _, asked) = run(VcpuExit::X86Wrmsr(exit));
        assert_eq!(label, "msr-write");
        assert_eq!(asked, ["lstar 0xffff800000001000"]);
        assert_eq!(error, 0);
    }
}
