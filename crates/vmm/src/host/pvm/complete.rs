//! Instructions this host's CPL0 emulator rejects (KVM internal error, emulation failure),
//! completed by the VMM: the one place where such an instruction is decoded (iced-x86) and
//! carried out, so the guest goes on as a CPU would have run it.
//!
//! | instruction | what the VMM does | why |
//! | --- | --- | --- |
//! | `INT3` (CC) | delivers #BP, vector 3, through the guest's IDT (RIP after the INT3, a trap) | Linux's alternatives self-test and text_poke_bp's live patching execute it in the kernel |
//! | `INT n` (CD ib) | delivers vector n through the IDT | perfvm's guests and Linux's int80 self-tests |
//! | `FWAIT` (9B) | #MF (vector 16) if the x87 status word has an unmasked exception pending (ES), else nothing | Linux's `fpu__drop` on every exec and exit |
//! | `FNCLEX` (DB E2) | clears the x87 exception flags, ES and B in the status word | x87 exception handling |
//! | `EMMS` (0F 77) | marks every x87 register empty (tag word) | MMX code, x87 state resets |
//!
//! Delivery is `softint::deliver`: a 64-bit gate at CPL0 without an IST stack. A software
//! breakpoint the VMM plants itself (e.g. to emulate RDPMC) is to be recognized in
//! [`plan`] before the #BP is delivered to the guest.

use crate::vstate::linear::{LinearMemory, VcpuLinear};
use crate::vstate::softint::{FlagHome, Run};
use iced_x86::{Decoder, DecoderOptions, Formatter as _, Instruction, Mnemonic};
use kvm_ioctls::VcpuFd;
use vm_memory::GuestMemoryMmap;

/// Longest x86 instruction.
const MAX_INSN: usize = 15;

/// What the VMM does with a rejected instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Deliver an interrupt through the IDT, returning after the instruction.
    Deliver {
        /// The vector.
        vector: u8,
        /// The instruction's length (the frame's RIP is past it).
        len: u64,
        /// Its name in `--stats`.
        kind: &'static str,
    },
    /// An x87 control instruction, run on the vCPU's FPU state (KVM_GET_FPU/KVM_SET_FPU).
    X87 {
        /// Which one.
        op: X87Op,
        /// The instruction's length.
        len: u64,
    },
}

/// The x87 control instructions the VMM runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum X87Op {
    /// FWAIT: #MF if an unmasked exception is pending, else nothing.
    Fwait,
    /// FNCLEX: clear the exception flags.
    Fnclex,
    /// EMMS: tag every register empty.
    Emms,
}

impl X87Op {
    fn kind(self) -> &'static str {
        match self {
            X87Op::Fwait => "fwait",
            X87Op::Fnclex => "fnclex",
            X87Op::Emms => "emms",
        }
    }
}

/// x87 status word: exception summary (ES) and busy (B), and the six exception flags and
/// stack fault that FNCLEX clears with them.
const FSW_ES: u16 = 1 << 7;
const FSW_CLEARED_BY_FNCLEX: u16 = 0x80ff;
/// #MF, the x87 floating-point error.
const VECTOR_MF: u8 = 16;

/// FWAIT/FNCLEX/EMMS on the FPU state `fpu`; what to deliver next, if anything (FWAIT's #MF,
/// a fault: RIP stays on the FWAIT).
pub fn run_x87(op: X87Op, fpu: &mut kvm_bindings::kvm_fpu) -> Option<u8> {
    match op {
        X87Op::Fwait if fpu.fsw & FSW_ES != 0 => return Some(VECTOR_MF),
        X87Op::Fwait => {}
        X87Op::Fnclex => fpu.fsw &= !FSW_CLEARED_BY_FNCLEX,
        X87Op::Emms => fpu.ftwx = 0,
    }
    None
}

/// What to do with the decoded instruction `insn`, or None to leave the error standing.
pub fn plan(insn: &Instruction) -> Option<Action> {
    let len = insn.len() as u64;
    match insn.mnemonic() {
        // (A VMM breakpoint would be recognized here, by address, before the guest's #BP.)
        Mnemonic::Int3 => Some(Action::Deliver { vector: 3, len, kind: "int3" }),
        Mnemonic::Int => Some(Action::Deliver { vector: insn.immediate8(), len, kind: "int n" }),
        Mnemonic::Wait => Some(Action::X87 { op: X87Op::Fwait, len }),
        Mnemonic::Fnclex => Some(Action::X87 { op: X87Op::Fnclex, len }),
        Mnemonic::Emms => Some(Action::X87 { op: X87Op::Emms, len }),
        _ => None,
    }
}

/// Decode the instruction in `bytes` at `rip` in 64-bit mode.
pub fn decode(bytes: &[u8], rip: u64) -> Instruction {
    Decoder::with_ip(64, bytes, rip, DecoderOptions::NONE).decode()
}

/// The outcome of [`complete`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// Done: the guest continues (the stats label of what was run).
    Done(&'static str),
    /// Not ours to complete; the instruction as text, when it could be read.
    Left(Option<String>),
}

/// Complete the instruction at the vCPU's RIP after an emulation failure.
pub fn complete(vcpu: &VcpuFd, mem: &GuestMemoryMmap, home: FlagHome) -> Completed {
    let Some((insn, bytes)) = fetch(vcpu, mem) else { return Completed::Left(None) };
    let left = |why: &str| Completed::Left(Some(format!("{}{why}", describe(&insn, &bytes))));
    let deliver = |vector: u8, len: u64, kind: &'static str| match crate::vstate::softint::run_on(
        vcpu,
        mem,
        home,
        Run::Int { vector, len },
    ) {
        Some(_) => Completed::Done(kind),
        None => left(" (not deliverable by the VMM)"),
    };
    match plan(&insn) {
        None => left(""),
        Some(Action::Deliver { vector, len, kind }) => deliver(vector, len, kind),
        Some(Action::X87 { op, len }) => {
            let (Ok(mut fpu), Ok(mut regs)) = (vcpu.get_fpu(), vcpu.get_regs()) else {
                return left(" (FPU state unreadable)");
            };
            if let Some(vector) = run_x87(op, &mut fpu) {
                return deliver(vector, 0, op.kind());
            }
            regs.rip += len;
            match (vcpu.set_fpu(&fpu), vcpu.set_regs(&regs)) {
                (Ok(()), Ok(())) => Completed::Done(op.kind()),
                _ => left(" (FPU state not writable)"),
            }
        }
    }
}

/// The instruction at RIP (64-bit mode only: the VMM completes nothing else), with its bytes.
fn fetch(vcpu: &VcpuFd, mem: &GuestMemoryMmap) -> Option<(Instruction, Vec<u8>)> {
    let regs = vcpu.get_regs().ok()?;
    let sregs = vcpu.get_sregs().ok()?;
    if sregs.efer & (1 << 10) == 0 || sregs.cs.l == 0 {
        return None;
    }
    let mut linear = VcpuLinear::new(vcpu, mem);
    // Up to the page end first: the next page may be unmapped.
    let in_page = (0x1000 - (regs.rip & 0xfff)) as usize;
    let mut bytes = vec![0u8; MAX_INSN.min(in_page)];
    linear.read(regs.rip, &mut bytes)?;
    if bytes.len() < MAX_INSN {
        let mut rest = vec![0u8; MAX_INSN - bytes.len()];
        if linear.read(regs.rip + bytes.len() as u64, &mut rest).is_some() {
            bytes.extend_from_slice(&rest);
        }
    }
    let insn = decode(&bytes, regs.rip);
    let len = insn.len().max(1).min(bytes.len());
    bytes.truncate(len);
    Some((insn, bytes))
}

/// `mnemonic operands [bytes]`, for the error message.
fn describe(insn: &Instruction, bytes: &[u8]) -> String {
    let mut text = String::new();
    iced_x86::GasFormatter::new().format(insn, &mut text);
    let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{text} [{}]", hex.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int3_and_int_n_are_delivered() {
        let int3 = decode(&[0xcc, 0x90], 0x1000);
        assert_eq!(plan(&int3), Some(Action::Deliver { vector: 3, len: 1, kind: "int3" }));
        let int80 = decode(&[0xcd, 0x80], 0x1000);
        assert_eq!(plan(&int80), Some(Action::Deliver { vector: 0x80, len: 2, kind: "int n" }));
    }

    #[test]
    fn x87_control_instructions_run_on_the_fpu_state() {
        assert_eq!(plan(&decode(&[0x9b], 0)), Some(Action::X87 { op: X87Op::Fwait, len: 1 }));
        assert_eq!(plan(&decode(&[0xdb, 0xe2], 0)), Some(Action::X87 { op: X87Op::Fnclex, len: 2 }));
        assert_eq!(plan(&decode(&[0x0f, 0x77], 0)), Some(Action::X87 { op: X87Op::Emms, len: 2 }));
        let mut fpu = kvm_bindings::kvm_fpu { fcw: 0x37f, fsw: 0x3800, ftwx: 0xff, ..Default::default() };
        assert_eq!(run_x87(X87Op::Fwait, &mut fpu), None, "nothing pending: no #MF");
        fpu.fsw |= FSW_ES | 1;
        assert_eq!(run_x87(X87Op::Fwait, &mut fpu), Some(VECTOR_MF));
        assert_eq!(run_x87(X87Op::Fnclex, &mut fpu), None);
        assert_eq!(fpu.fsw, 0x3800, "flags cleared, TOP kept");
        assert_eq!(run_x87(X87Op::Emms, &mut fpu), None);
        assert_eq!(fpu.ftwx, 0, "all empty");
    }

    #[test]
    fn other_instructions_are_left_with_their_text() {
        let cx16 = decode(&[0xf0, 0x48, 0x0f, 0xc7, 0x0e], 0x1000);
        assert_eq!(plan(&cx16), None);
        let text = describe(&cx16, &[0xf0, 0x48, 0x0f, 0xc7, 0x0e]);
        assert!(text.contains("cmpxchg16b") && text.ends_with("[f0 48 0f c7 0e]"), "{text}");
    }
}
