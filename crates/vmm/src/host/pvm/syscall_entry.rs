//! SYSCALL from a Linux guest's user mode, completed by the VMM.
//!
//! User code runs natively on this host, and kvm_pvm turns its SYSCALL into a jump to the
//! guest's LSTAR that stays in user mode (CS = 0x33: measured with a probe guest, the
//! selectors STAR names are ignored). Linux's `entry_SYSCALL_64` then page-faults on its
//! first fetch (a supervisor page at CPL 3), and init dies of SIGSEGV at its first system
//! call. The page fault, though, is delivered properly: into the kernel's #PF handler, at
//! CPL 0, emulated.
//!
//! So the VMM puts a hardware execution breakpoint on the guest's #PF handler
//! (KVM_GUESTDBG_USE_HW_BP, DR0), armed when the guest writes LSTAR (MSR filter; the IDT
//! is loaded by then). At the breakpoint, a fault whose frame says "user mode, at LSTAR,
//! fetching LSTAR" is that SYSCALL: the VMM drops the fault frame and finishes the SYSCALL
//! as a CPU would (RIP = LSTAR, RSP = the user's, CS and SS = the kernel selectors in STAR,
//! RFLAGS masked by FMASK; RCX and R11 already hold the return RIP and RFLAGS). Any other
//! fault steps over the breakpoint (one single-step with it off, then re-armed). One exit
//! per system call and two per page fault, each small beside the thousands of emulated
//! instructions that handle it.
//!
//! The exact backend single-steps through guest debug too: `GuestDebug` composes both. While
//! stepping, a completed SYSCALL is a retired instruction (the step goes on at LSTAR), and a
//! fault stopped at the breakpoint retires nothing yet (the step after the handler's first
//! instruction counts the faulting one in its place, as for any fault: `backends::retire`).
//!
//! On by default for Linux guests on a host whose native mode the probe finds (kvm_pvm);
//! PERFVM_SYSCALL_REPAIR=0 or 1 overrides that. Resuming from the breakpoint with RFLAGS.RF
//! does not work (this host's emulator takes the breakpoint again whatever RF says: a probe
//! guest took 212,405 debug exits on one instruction in 30 s), so it steps over it instead.
//! guest/linux/syscall_probe.S makes three user SYSCALLs into a supervisor-only entry the way
//! Linux does (kernel CS 0x10, SWAPGS, SYSRETQ; tests/syscall_probe.rs). On Debian's kernel
//! (docs/LINUX.md, "SYSCALL") init's system calls go through it to `reboot -f`.

use crate::vstate::guest_debug::GuestDebug;
use crate::vstate::linear::{LinearMemory, VcpuLinear};
use crate::vstate::vcpu_msr;
use kvm_bindings::kvm_segment;
use kvm_ioctls::VcpuFd;
use vm_memory::GuestMemoryMmap;

/// IA32_STAR: SYSCALL's CS in bits 47:32 (SS is CS + 8).
pub const MSR_STAR: u32 = 0xc000_0081;
/// IA32_LSTAR: the 64-bit SYSCALL entry.
pub const MSR_LSTAR: u32 = 0xc000_0082;
/// IA32_FMASK: RFLAGS bits SYSCALL clears.
pub const MSR_FMASK: u32 = 0xc000_0084;
/// #PF.
const VECTOR_PF: u64 = 14;

/// Why the repair cannot be set up (the guest keeps the host's SYSCALL).
#[derive(Debug, thiserror::Error)]
pub enum SyscallEntryError {
    /// A KVM ioctl failed.
    #[error("{0}")]
    Kvm(#[from] kvm_ioctls::Error),
    /// The #PF gate cannot be read.
    #[error("cannot read the #PF gate of the IDT")]
    NoGate,
}

/// Write LSTAR as the guest asked (the MSR filter kept the write from KVM).
pub fn set_lstar(vcpu: &VcpuFd, entry: u64) -> Result<(), kvm_ioctls::Error> {
    crate::vstate::vcpu_msr::write(vcpu, MSR_LSTAR, entry)
}

/// The guest wrote LSTAR = `entry`: make the write and return the address of the #PF
/// handler in the IDT now loaded.
fn pf_handler_after_lstar(vcpu: &VcpuFd, mem: &GuestMemoryMmap, entry: u64) -> Result<u64, SyscallEntryError> {
    set_lstar(vcpu, entry)?;
    let sregs = vcpu.get_sregs()?;
    let mut gate = [0u8; 16];
    if u64::from(sregs.idt.limit) < VECTOR_PF * 16 + 15 {
        return Err(SyscallEntryError::NoGate);
    }
    VcpuLinear::new(vcpu, mem).read(sregs.idt.base + VECTOR_PF * 16, &mut gate).ok_or(SyscallEntryError::NoGate)?;
    let handler = u64::from(u16::from_le_bytes([gate[0], gate[1]]))
        | u64::from(u16::from_le_bytes([gate[6], gate[7]])) << 16
        | u64::from(u32::from_le_bytes([gate[8], gate[9], gate[10], gate[11]])) << 32;
    Ok(handler)
}

/// The kernel segments SYSCALL loads, from STAR's bits 47:32.
pub fn kernel_segments(star: u64) -> (kvm_segment, kvm_segment) {
    let cs_sel = ((star >> 32) & 0xfffc) as u16;
    let flat = kvm_segment { base: 0, limit: 0xffff_ffff, present: 1, s: 1, g: 1, ..Default::default() };
    let cs = kvm_segment { selector: cs_sel, type_: 0xb, l: 1, ..flat };
    let ss = kvm_segment { selector: cs_sel + 8, type_: 0x3, db: 1, ..flat };
    (cs, ss)
}

/// A #PF frame as the CPU pushes it: error code, RIP, CS, RFLAGS, RSP, SS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultFrame {
    /// RIP of the faulting instruction.
    pub rip: u64,
    /// Its CS.
    pub cs: u64,
    /// Its RFLAGS.
    pub rflags: u64,
    /// Its RSP.
    pub rsp: u64,
}

/// Whether a #PF at `cr2` with `frame` is the host's broken SYSCALL into `entry`.
pub fn is_broken_syscall(frame: &FaultFrame, cr2: u64, entry: u64) -> bool {
    frame.rip == entry && cr2 == entry && frame.cs & 3 == 3
}

/// At the breakpoint on the #PF handler: finish a broken SYSCALL into `entry` (true), or
/// leave a fault to go on (false). The registers KVM synced out at this exit are brought up
/// to date, for the exact backend's step that follows.
fn at_fault(vcpu: &mut VcpuFd, mem: &GuestMemoryMmap, entry: u64) -> Result<bool, kvm_ioctls::Error> {
    let mut regs = vcpu.get_regs()?;
    let mut sregs = vcpu.get_sregs()?;
    let mut raw = [0u8; 48];
    let frame = VcpuLinear::new(vcpu, mem).read(regs.rsp, &mut raw).map(|()| {
        let word = |i: usize| u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        FaultFrame { rip: word(1), cs: word(2), rflags: word(3), rsp: word(4) }
    });
    let Some(frame) = frame.filter(|f| is_broken_syscall(f, sregs.cr2, entry)) else {
        return Ok(false);
    };
    let (star, fmask) = (vcpu_msr::read(vcpu, MSR_STAR)?, vcpu_msr::read(vcpu, MSR_FMASK)?);
    (sregs.cs, sregs.ss) = kernel_segments(star);
    regs.rip = entry;
    regs.rsp = frame.rsp;
    regs.rflags = (frame.rflags & !fmask) | 2;
    vcpu.set_sregs(&sregs)?;
    vcpu.set_regs(&regs)?;
    let synced = vcpu.sync_regs_mut();
    (synced.regs, synced.sregs) = (regs, sregs);
    Ok(true)
}

/// A debug exit the repair's breakpoint failed to handle (the run ends).
#[derive(Debug, thiserror::Error)]
pub enum BreakpointError {
    /// Setting the breakpoint, reading the fault or entering the SYSCALL failed.
    #[error("at the #PF breakpoint: {0}")]
    AtFault(kvm_ioctls::Error),
    /// The breakpoint could not be put back after stepping over a fault.
    #[error("re-arming the #PF breakpoint: {0}")]
    Rearm(kvm_ioctls::Error),
}

/// What a debug exit was to the repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugExit {
    /// A single-step: the exact backend's, or the step over the breakpoint (then re-armed),
    /// during which the exact backend may be stepping too.
    Step,
    /// The repair completed a SYSCALL: the guest is at LSTAR, in the kernel.
    Syscall,
    /// A fault stopped at the breakpoint: it goes on, stepping over the breakpoint.
    Fault,
}

/// One vCPU's repair: its SYSCALL entry and the breakpoint on the #PF handler, once the
/// guest wrote LSTAR.
#[derive(Debug, Default)]
pub struct SyscallRepair {
    entry: u64,
    breakpoint: Option<u64>,
}

impl SyscallRepair {
    /// The guest wrote LSTAR = `entry`: make the write and put the breakpoint on the #PF
    /// handler of the IDT now loaded.
    pub fn lstar_written(
        &mut self,
        vcpu: &VcpuFd,
        debug: &mut GuestDebug,
        mem: &GuestMemoryMmap,
        entry: u64,
    ) -> Result<(), SyscallEntryError> {
        let handler = pf_handler_after_lstar(vcpu, mem, entry)?;
        debug.set_breakpoint(vcpu, handler)?;
        (self.entry, self.breakpoint) = (entry, Some(handler));
        Ok(())
    }

    /// A debug exit at `pc`.
    pub fn debug_exit(
        &mut self,
        vcpu: &mut VcpuFd,
        debug: &mut GuestDebug,
        mem: &GuestMemoryMmap,
        pc: u64,
    ) -> Result<DebugExit, BreakpointError> {
        if debug.stepping_over() {
            debug.rearm(vcpu).map_err(BreakpointError::Rearm)?;
            return Ok(DebugExit::Step);
        }
        if self.breakpoint != Some(pc) {
            return Ok(DebugExit::Step);
        }
        if at_fault(vcpu, mem, self.entry).map_err(BreakpointError::AtFault)? {
            return Ok(DebugExit::Syscall);
        }
        debug.step_over(vcpu).map_err(BreakpointError::AtFault)?;
        Ok(DebugExit::Fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_names_the_kernel_segments() {
        // Linux: STAR = (__USER32_CS << 48) | (__KERNEL_CS << 32).
        let star = 0x0023_0010_0000_0000u64;
        let (cs, ss) = kernel_segments(star);
        assert_eq!((cs.selector, cs.dpl, cs.l, cs.type_), (0x10, 0, 1, 0xb));
        assert_eq!((ss.selector, ss.dpl, ss.type_), (0x18, 0, 0x3));
    }

    #[test]
    fn only_a_user_fetch_fault_at_the_entry_is_a_syscall() {
        let entry = 0xffff_ffff_81c0_0080;
        // What init's first system call looked like (measured).
        let frame = FaultFrame { rip: entry, cs: 0x33, rflags: 0x10002, rsp: 0x7fff_4b38_78d0 };
        assert!(is_broken_syscall(&frame, entry, entry));
        assert!(!is_broken_syscall(&FaultFrame { cs: 0x10, ..frame }, entry, entry), "a kernel fault");
        assert!(!is_broken_syscall(&FaultFrame { rip: 0x40_1000, ..frame }, 0x40_1000, entry), "demand paging");
        assert!(!is_broken_syscall(&frame, 0x1234, entry), "a data fault at the entry");
    }
}
