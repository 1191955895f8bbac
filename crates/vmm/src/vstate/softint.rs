//! `INT n` and `IRETQ`, run by the VMM.
//!
//! This host's CPL0 emulator rejects `INT n` (KVM internal error, emulation failure) in both
//! execution modes, so the VMM does what the CPU would (SDM vol. 3, 6.14 "Exception and
//! interrupt handling in 64-bit mode"): read the 64-bit IDT gate, push SS, RSP, RFLAGS, CS
//! and the return RIP on the 16-byte-aligned stack, clear TF, NT and RF (and IF for an
//! interrupt gate) and jump to the handler. While single-stepping, the host takes no trap
//! after `IRETQ` (the next instruction runs in the same step), so the exact backend runs
//! `IRETQ` here too, and `SYSRETQ`; the returns to user mode are `user_return`'s. `INT n`
//! only as kernels at CPL0 use it: same privilege, no IST stack; anything else is left to
//! the host.

use crate::host::pvm::native::VifFlag;
use crate::vstate::linear::{LinearMemory, VcpuLinear};
use kvm_bindings::{kvm_regs, kvm_sregs};
use kvm_ioctls::VcpuFd;
use vm_memory::GuestMemoryMmap;

/// IA32_KERNEL_GS_BASE, which SWAPGS trades with GS.base.
const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
const RFLAGS_TF: u64 = 1 << 8;
const RFLAGS_IF: u64 = 1 << 9;
const RFLAGS_NT: u64 = 1 << 14;
const RFLAGS_RF: u64 = 1 << 16;
/// Gate types (SDM table 3-2, IA-32e mode).
const INTERRUPT_GATE: u8 = 0xe;
const TRAP_GATE: u8 = 0xf;

/// Where the guest's interrupt flag lives: RFLAGS, or natively the VIF page's byte.
pub trait InterruptFlag {
    /// Whether interrupts are on, given the vCPU's registers `regs`.
    fn get(&mut self, regs: &kvm_regs) -> bool;
    /// Turn interrupts on or off (`on`), in `regs` or wherever the flag lives.
    fn set(&mut self, regs: &mut kvm_regs, on: bool);
}

/// The architectural flag, RFLAGS.IF.
#[derive(Debug)]
pub struct Rflags;

impl InterruptFlag for Rflags {
    fn get(&mut self, regs: &kvm_regs) -> bool {
        regs.rflags & RFLAGS_IF != 0
    }
    fn set(&mut self, regs: &mut kvm_regs, on: bool) {
        regs.rflags = regs.rflags & !RFLAGS_IF | if on { RFLAGS_IF } else { 0 };
    }
}

/// 64-bit mode at CPL 0: the only state the VMM delivers in.
fn kernel_long_mode(sregs: &kvm_sregs) -> bool {
    sregs.efer & EFER_LMA != 0 && sregs.cs.l == 1 && sregs.cs.dpl == 0
}

/// 64-bit mode at CPL 3, where SYSCALL enters the kernel.
fn user_long_mode(sregs: &kvm_sregs) -> bool {
    sregs.efer & EFER_LMA != 0 && sregs.cs.l == 1 && sregs.cs.selector & 3 == 3
}

/// EFER.SCE (SYSCALL enabled) and EFER.LMA (long mode active).
const EFER_SCE: u64 = 1;
const EFER_LMA: u64 = 1 << 10;

/// Deliver `int vector` whose instruction (`len` bytes) is at `regs.rip`. On success `regs`
/// is the state at the handler's first instruction and the frame is on the guest's stack;
/// `None` leaves the guest untouched (not deliverable here).
pub fn deliver(
    regs: &mut kvm_regs,
    sregs: &kvm_sregs,
    mem: &mut impl LinearMemory,
    flag: &mut dyn InterruptFlag,
    vector: u8,
    len: u64,
) -> Option<()> {
    if !kernel_long_mode(sregs) {
        return None;
    }
    let offset = u64::from(vector) * 16;
    if offset + 15 > u64::from(sregs.idt.limit) {
        return None;
    }
    let mut gate = [0u8; 16];
    mem.read(sregs.idt.base + offset, &mut gate)?;
    let (selector, ist, kind) = (u16::from_le_bytes([gate[2], gate[3]]), gate[4] & 7, gate[5]);
    let present = kind & 0x80 != 0;
    let gate_type = kind & 0xf;
    if !present || ist != 0 || !matches!(gate_type, INTERRUPT_GATE | TRAP_GATE) || selector != sregs.cs.selector {
        return None;
    }
    let target = u64::from(u16::from_le_bytes([gate[0], gate[1]]))
        | u64::from(u16::from_le_bytes([gate[6], gate[7]])) << 16
        | u64::from(u32::from_le_bytes([gate[8], gate[9], gate[10], gate[11]])) << 32;
    let mut rflags = regs.rflags & !RFLAGS_IF;
    if flag.get(regs) {
        rflags |= RFLAGS_IF;
    }
    let frame = [regs.rip + len, u64::from(sregs.cs.selector), rflags, regs.rsp, u64::from(sregs.ss.selector)];
    let rsp = (regs.rsp & !0xf) - 8 * frame.len() as u64;
    let bytes: Vec<u8> = frame.iter().flat_map(|v| v.to_le_bytes()).collect();
    mem.write(rsp, &bytes)?;
    regs.rsp = rsp;
    regs.rip = target;
    regs.rflags &= !(RFLAGS_TF | RFLAGS_NT | RFLAGS_RF);
    if gate_type == INTERRUPT_GATE {
        flag.set(regs, false);
    }
    Some(())
}

/// `IRETQ` at `regs.rip` back to the same privilege level and stack segment: pop RIP, CS,
/// RFLAGS, RSP and SS; the interrupt flag comes from the frame. `None` leaves the guest
/// untouched (for the host to run).
pub fn iret(
    regs: &mut kvm_regs,
    sregs: &kvm_sregs,
    mem: &mut impl LinearMemory,
    flag: &mut dyn InterruptFlag,
) -> Option<()> {
    if !kernel_long_mode(sregs) {
        return None;
    }
    let mut frame = [0u8; 40];
    mem.read(regs.rsp, &mut frame)?;
    let word = |i: usize| u64::from_le_bytes(frame[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let [rip, cs, rflags, rsp, ss] = [0, 1, 2, 3, 4].map(word);
    if cs != u64::from(sregs.cs.selector) || ss != u64::from(sregs.ss.selector) {
        return None;
    }
    regs.rip = rip;
    regs.rsp = rsp;
    regs.rflags = (rflags & !RFLAGS_RF) | 2;
    flag.set(regs, rflags & RFLAGS_IF != 0);
    Some(())
}

/// Where a vCPU keeps its interrupt flag.
#[derive(Debug, Clone, Copy)]
pub enum FlagHome {
    /// RFLAGS.IF (emulated execution).
    Rflags,
    /// Natively: the VIF page at this address.
    Vif(u64),
}

/// What the VMM runs on a vCPU in place of the host.
#[derive(Debug, Clone, Copy)]
pub enum Run {
    /// `INT vector`, `len` bytes long.
    Int {
        /// The interrupt vector.
        vector: u8,
        /// Length of the instruction, bytes.
        len: u64,
    },
    /// `IRETQ`.
    Iret,
    /// `SYSRETQ` (`user_return`).
    Sysret,
    /// `SYSCALL` from 64-bit user mode (`user_return::syscall`).
    Syscall,
    /// `SWAPGS`, `len` bytes long: GS.base and IA32_KERNEL_GS_BASE trade places.
    Swapgs {
        /// Length of the instruction, bytes.
        len: u64,
    },
}

/// Run `what` at `vcpu`'s RIP; returns where it leaves the vCPU, or None if it is left to
/// the host (the vCPU is unchanged).
pub fn run_on(vcpu: &VcpuFd, mem: &GuestMemoryMmap, home: FlagHome, what: Run) -> Option<Landing> {
    let mut regs = vcpu.get_regs().ok()?;
    let mut sregs = vcpu.get_sregs().ok()?;
    let linear = &mut VcpuLinear::new(vcpu, mem);
    let (mut rflags, mut vif);
    let flag: &mut dyn InterruptFlag = match home {
        FlagHome::Rflags => {
            rflags = Rflags;
            &mut rflags
        }
        FlagHome::Vif(gpa) => {
            vif = VifFlag { mem, gpa };
            &mut vif
        }
    };
    match what {
        Run::Int { vector, len } => deliver(&mut regs, &sregs, linear, flag, vector, len)?,
        Run::Sysret if kernel_long_mode(&sregs) => {
            let star = crate::vstate::vcpu_msr::read(vcpu, crate::host::pvm::syscall_entry::MSR_STAR).ok()?;
            crate::host::pvm::user_return::sysretq(&mut regs, &mut sregs, star);
            vcpu.set_sregs(&sregs).ok()?;
        }
        Run::Swapgs { len } if kernel_long_mode(&sregs) => {
            let kernel_gs = crate::vstate::vcpu_msr::read(vcpu, MSR_KERNEL_GS_BASE).ok()?;
            crate::vstate::vcpu_msr::write(vcpu, MSR_KERNEL_GS_BASE, sregs.gs.base).ok()?;
            sregs.gs.base = kernel_gs;
            vcpu.set_sregs(&sregs).ok()?;
            regs.rip += len;
        }
        Run::Syscall if user_long_mode(&sregs) && sregs.efer & EFER_SCE != 0 => {
            let msr = |index| crate::vstate::vcpu_msr::read(vcpu, index).ok();
            use crate::host::pvm::syscall_entry::{MSR_FMASK, MSR_LSTAR, MSR_STAR};
            let (star, lstar, fmask) = (msr(MSR_STAR)?, msr(MSR_LSTAR)?, msr(MSR_FMASK)?);
            crate::host::pvm::user_return::syscall(&mut regs, &mut sregs, star, lstar, fmask);
            vcpu.set_sregs(&sregs).ok()?;
        }
        Run::Sysret | Run::Swapgs { .. } | Run::Syscall => return None,
        Run::Iret => {
            if iret(&mut regs, &sregs, linear, flag).is_none() {
                if !kernel_long_mode(&sregs) {
                    return None;
                }
                crate::host::pvm::user_return::iret(&mut regs, &mut sregs, linear)?;
                let on = regs.rflags & RFLAGS_IF != 0;
                flag.set(&mut regs, on);
                vcpu.set_sregs(&sregs).ok()?;
            }
            // IRET ends NMI blocking (SDM 6.7.1): the frame may be an NMI handler's.
            let mut events = vcpu.get_vcpu_events().ok()?;
            if events.nmi.masked != 0 {
                events.nmi.masked = 0;
                events.flags = 0;
                vcpu.set_vcpu_events(&events).ok()?;
            }
        }
    }
    vcpu.set_regs(&regs).ok()?;
    Some(Landing { rip: regs.rip, user: crate::host::pvm::user_return::is_user(u64::from(sregs.cs.selector)) })
}

/// Where an instruction the VMM ran left the vCPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landing {
    /// The next instruction.
    pub rip: u64,
    /// It runs in user mode.
    pub user: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vstate::linear::Identity;
    use kvm_bindings::{kvm_dtable, kvm_segment};
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    const IDT: u64 = 0x1000;
    const HANDLER: u64 = 0x1234_5678_9abc;

    fn setup(gate_type: u8, ist: u8) -> (GuestMemoryMmap, kvm_regs, kvm_sregs) {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
        let mut gate = [0u8; 16];
        gate[0..2].copy_from_slice(&(HANDLER as u16).to_le_bytes());
        gate[2..4].copy_from_slice(&8u16.to_le_bytes());
        gate[4] = ist;
        gate[5] = 0x80 | gate_type;
        gate[6..8].copy_from_slice(&((HANDLER >> 16) as u16).to_le_bytes());
        gate[8..12].copy_from_slice(&((HANDLER >> 32) as u32).to_le_bytes());
        mem.write_slice(&gate, GuestAddress(IDT + 0xf1 * 16)).unwrap();
        let regs = kvm_regs { rip: 0x5000, rsp: 0x8008, rflags: 0x202 | RFLAGS_TF, ..Default::default() };
        let sregs = kvm_sregs {
            efer: 1 << 10 | 1 << 8,
            cs: kvm_segment { l: 1, selector: 8, ..Default::default() },
            ss: kvm_segment { selector: 0x10, ..Default::default() },
            idt: kvm_dtable { base: IDT, limit: 0xfff, ..Default::default() },
            ..Default::default()
        };
        (mem, regs, sregs)
    }

    #[test]
    fn an_interrupt_gate_pushes_the_frame_and_clears_if() {
        let (mem, mut regs, sregs) = setup(INTERRUPT_GATE, 0);
        deliver(&mut regs, &sregs, &mut Identity(&mem), &mut Rflags, 0xf1, 2).unwrap();
        assert_eq!(regs.rip, HANDLER);
        assert_eq!(regs.rsp, 0x8000 - 40, "aligned to 16 bytes, then 5 quadwords");
        assert_eq!(regs.rflags & (RFLAGS_IF | RFLAGS_TF), 0);
        let frame: Vec<u64> = (0..5).map(|i| mem.read_obj::<u64>(GuestAddress(regs.rsp + 8 * i)).unwrap()).collect();
        assert_eq!(frame, vec![0x5002, 8, 0x202 | RFLAGS_TF, 0x8008, 0x10], "RIP, CS, RFLAGS, RSP, SS");
    }

    #[test]
    fn iretq_returns_through_the_frame_and_restores_if() {
        let (mem, mut regs, sregs) = setup(INTERRUPT_GATE, 0);
        let before = regs;
        deliver(&mut regs, &sregs, &mut Identity(&mem), &mut Rflags, 0xf1, 2).unwrap();
        iret(&mut regs, &sregs, &mut Identity(&mem), &mut Rflags).unwrap();
        assert_eq!((regs.rip, regs.rsp), (before.rip + 2, before.rsp));
        assert_eq!(regs.rflags & RFLAGS_IF, RFLAGS_IF, "IF back from the frame");
        let mut other = sregs;
        other.ss.selector = 0x18;
        assert!(
            iret(&mut regs.clone(), &other, &mut Identity(&mem), &mut Rflags).is_none(),
            "a stack switch is the host's"
        );
    }

    #[test]
    fn a_trap_gate_keeps_if() {
        let (mem, mut regs, sregs) = setup(TRAP_GATE, 0);
        deliver(&mut regs, &sregs, &mut Identity(&mem), &mut Rflags, 0xf1, 2).unwrap();
        assert_eq!(regs.rflags & RFLAGS_IF, RFLAGS_IF);
    }

    #[test]
    fn what_it_cannot_deliver_leaves_the_guest_alone() {
        let (mem, regs, sregs) = setup(INTERRUPT_GATE, 1);
        let mut r = regs;
        assert!(deliver(&mut r, &sregs, &mut Identity(&mem), &mut Rflags, 0xf1, 2).is_none(), "IST stack");
        assert_eq!(r, regs);
        let (mem, _, sregs) = setup(INTERRUPT_GATE, 0);
        assert!(deliver(&mut r, &sregs, &mut Identity(&mem), &mut Rflags, 0xf0, 2).is_none(), "gate not present");
        let mut low = sregs;
        low.idt.limit = 0xf1 * 16;
        assert!(deliver(&mut r, &low, &mut Identity(&mem), &mut Rflags, 0xf1, 2).is_none(), "beyond the IDT limit");
    }
}
