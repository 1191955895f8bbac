//! The exact backend's block engine (`--exact-engine blocks`): between two stops the guest's
//! instructions are known from its code, so the VMM decodes ahead from RIP, lets the guest run
//! to the first instruction it cannot pass blind (an execution breakpoint there, no
//! single-step), and retires the block's instructions one by one through the same counting
//! as single-stepping (`retire`), in the order they ran: CMASK/INV/EDGE, deadlines, the
//! reference profile and `stat -a`'s tally see exactly what stepping gives them.
//!
//! A block is:
//! * its *head*, the instruction at the stop, which may be a branch whose outcome follows from
//!   the registers at the stop: Jcc from RFLAGS, RET from `[RSP]`, an indirect near JMP/CALL
//!   from its register or memory operand, a direct JMP/CALL from its encoding;
//! * then *plain* instructions (`plain`: no branch, no privileged or I/O instruction, nothing
//!   the VMM runs or counts apart, no DIV/IDIV, only base x86-64, SSE and SSE2), through
//!   direct JMPs and CALLs (static targets);
//! * ending before the first other instruction: a Jcc, RET or indirect branch (the next
//!   block's head) or one that stepping handles (REP strings, WRMSR, INT n, ...).
//!
//! Its end never lies on an address of the block (a breakpoint there would fire at the first
//! pass; this host's emulator also takes a breakpoint at RIP again whatever RFLAGS.RF says)
//! nor on a watched exception handler (`avoid`). Interrupts stay out (`BLOCKIRQ`); what
//! faults inside a block is seen at its handler as when stepping (`handler_watch`: #PF, #GP,
//! #UD in DR0-DR2, the block's end in DR3), and the instructions before the faulting one
//! retire. `plan` is pure, tested against a mock.

use super::decode::{decode, InsnClass, MAX_INSN_LEN};
use iced_x86::{Code, ConditionCode, CpuidFeature, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic};
use iced_x86::{OpKind, Register};

/// The most instructions one block retires.
pub const MAX_BLOCK: usize = 4096;

/// What planning reads of the guest.
pub trait BlockCpu {
    /// The bytes at guest-virtual `va` (zeros where unmapped).
    fn code(&mut self, va: u64) -> [u8; MAX_INSN_LEN];
    /// The quadword at guest-virtual `va`.
    fn read_u64(&mut self, va: u64) -> Option<u64>;
}

/// The registers at a stop, as the head's outcome needs them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Regs {
    /// RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8-R15 (encoding order).
    pub gpr: [u64; 16],
    /// RIP.
    pub rip: u64,
    /// RFLAGS.
    pub rflags: u64,
    /// FS.base and GS.base.
    pub fs_base: u64,
    /// GS.base.
    pub gs_base: u64,
}

impl Regs {
    /// From KVM's registers and segment bases.
    pub fn of(regs: &kvm_bindings::kvm_regs, sregs: &kvm_bindings::kvm_sregs) -> Self {
        let r = regs;
        Regs {
            gpr: [
                r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14,
                r.r15,
            ],
            rip: r.rip,
            rflags: r.rflags,
            fs_base: sregs.fs.base,
            gs_base: sregs.gs.base,
        }
    }

    /// A 64-bit general register or a segment base, as iced-x86 asks for it.
    fn value(&self, reg: Register) -> Option<u64> {
        match reg {
            Register::ES | Register::CS | Register::SS | Register::DS => Some(0),
            Register::FS => Some(self.fs_base),
            Register::GS => Some(self.gs_base),
            r if r.is_gpr64() => Some(self.gpr[r.number()]),
            _ => None,
        }
    }
}

/// Instructions the guest runs between two stops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Each instruction's address and class, in the order they run (no address twice).
    pub insns: Vec<(u64, InsnClass)>,
    /// Where the guest stops: the instruction after the last one.
    pub end: u64,
}

impl Block {
    /// How many of the block's instructions ran before the one at `rip` (None: not in it).
    pub fn before(&self, rip: u64) -> Option<usize> {
        self.insns.iter().position(|&(a, _)| a == rip)
    }
}

fn decode_at(cpu: &mut impl BlockCpu, pc: u64) -> (Instruction, InsnClass) {
    let bytes = cpu.code(pc);
    let insn = Decoder::with_ip(64, &bytes, pc, DecoderOptions::NONE).decode();
    (insn, decode(&bytes, true).class)
}

/// Whether `insn` (of `class`) may run inside a block: it falls through to the next
/// instruction, retires once as a plain instruction, cannot exit to the VMM, and faults, if
/// at all, only by #PF, #GP or #UD (the watched vectors).
pub fn plain(insn: &Instruction, class: InsnClass) -> bool {
    use Mnemonic::*;
    class == InsnClass::Other
        && !insn.is_invalid()
        && insn.flow_control() == FlowControl::Next
        && !insn.is_privileged()
        && !insn.has_rep_prefix()
        && !insn.has_repne_prefix()
        && !matches!(
            insn.mnemonic(),
            Div | Idiv
                | Cpuid
                | Hlt
                | In
                | Out
                | Insb
                | Insw
                | Insd
                | Outsb
                | Outsw
                | Outsd
                | Cli
                | Sti
                | Popf
                | Popfq
                | Popfd
                | Pushf
                | Pushfq
                | Pushfd
                | Rdpmc
                | Rdmsr
                | Wrmsr
                | Swapgs
                | Lfence
                | Mfence
                | Sfence
                | Wait
                | Rdtsc
                | Rdtscp
                | Pause
        )
        && insn.cpuid_features().iter().all(|f| {
            use CpuidFeature::*;
            matches!(f, INTEL8086 | INTEL186 | INTEL386 | INTEL486 | X64 | CMOV | CX8 | SSE | SSE2 | MULTIBYTENOP)
        })
}

/// Whether condition `cc` holds under `rflags`.
fn holds(cc: ConditionCode, rflags: u64) -> Option<bool> {
    let bit = |n: u32| rflags >> n & 1 != 0;
    let (cf, pf, zf, sf, of) = (bit(0), bit(2), bit(6), bit(7), bit(11));
    Some(match cc {
        ConditionCode::o => of,
        ConditionCode::no => !of,
        ConditionCode::b => cf,
        ConditionCode::ae => !cf,
        ConditionCode::e => zf,
        ConditionCode::ne => !zf,
        ConditionCode::be => cf || zf,
        ConditionCode::a => !cf && !zf,
        ConditionCode::s => sf,
        ConditionCode::ns => !sf,
        ConditionCode::p => pf,
        ConditionCode::np => !pf,
        ConditionCode::l => sf != of,
        ConditionCode::ge => sf == of,
        ConditionCode::le => zf || sf != of,
        ConditionCode::g => !zf && sf == of,
        ConditionCode::None => return None,
    })
}

/// A direct near JMP or CALL: its static target.
fn direct_target(insn: &Instruction) -> Option<u64> {
    let direct = insn.is_jmp_short_or_near() || insn.is_call_near();
    (direct && insn.op0_kind() == OpKind::NearBranch64).then(|| insn.near_branch_target())
}

/// Where the branch at the stop goes, from the registers there (None: it is stepped).
fn head_target(cpu: &mut impl BlockCpu, insn: &Instruction, regs: &Regs) -> Option<u64> {
    match insn.flow_control() {
        FlowControl::ConditionalBranch if insn.is_jcc_short_or_near() => {
            Some(if holds(insn.condition_code(), regs.rflags)? { insn.near_branch_target() } else { insn.next_ip() })
        }
        FlowControl::UnconditionalBranch | FlowControl::Call => direct_target(insn),
        FlowControl::IndirectBranch | FlowControl::IndirectCall => {
            if !matches!(insn.code(), Code::Jmp_rm64 | Code::Call_rm64) {
                return None;
            }
            match insn.op0_kind() {
                OpKind::Register => regs.value(insn.op0_register()),
                OpKind::Memory => cpu.read_u64(insn.virtual_address(0, 0, |r, _, _| regs.value(r))?),
                _ => None,
            }
        }
        FlowControl::Return if matches!(insn.code(), Code::Retnq | Code::Retnq_imm16) => cpu.read_u64(regs.gpr[4]),
        _ => None,
    }
}

/// The block the guest runs from the stop at `regs.rip`: at most `limit` instructions, none
/// of them (but the head) nor its end at an address of `avoid`. None where the head must be
/// stepped, or the block would hold fewer than two instructions (a step costs no more).
pub fn plan(cpu: &mut impl BlockCpu, regs: &Regs, limit: usize, avoid: &[u64]) -> Option<Block> {
    let limit = limit.min(MAX_BLOCK);
    let start = regs.rip;
    let (head, class) = decode_at(cpu, start);
    let mut pc = if plain(&head, class) {
        head.next_ip()
    } else if class == InsnClass::Branch {
        head_target(cpu, &head, regs)?
    } else {
        return None;
    };
    let mut insns = vec![(start, class)];
    while insns.len() < limit {
        let (insn, class) = decode_at(cpu, pc);
        let next = if plain(&insn, class) {
            insn.next_ip()
        } else if class == InsnClass::Branch {
            match direct_target(&insn) {
                Some(target) => target,
                None => break,
            }
        } else {
            break;
        };
        if insns.iter().any(|&(a, _)| a == pc) || avoid.contains(&pc) {
            break;
        }
        insns.push((pc, class));
        pc = next;
    }
    // The end must be neither in the block nor watched: give back instructions until it is.
    let mut end = pc;
    while insns.iter().any(|&(a, _)| a == end) || avoid.contains(&end) {
        end = insns.pop()?.0;
    }
    (insns.len() >= 2).then_some(Block { insns, end })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use InsnClass::*;

    #[derive(Default)]
    struct Mem {
        code: BTreeMap<u64, Vec<u8>>,
        data: BTreeMap<u64, u64>,
    }

    impl Mem {
        /// Instructions laid out one after the other from `at`.
        fn at(at: u64, program: &[&[u8]]) -> Self {
            let mut m = Mem::default();
            m.put(at, program);
            m
        }
        fn put(&mut self, mut at: u64, program: &[&[u8]]) {
            for bytes in program {
                for (i, &b) in bytes.iter().enumerate() {
                    self.code.insert(at + i as u64, vec![b]);
                }
                at += bytes.len() as u64;
            }
        }
    }

    impl BlockCpu for Mem {
        fn code(&mut self, va: u64) -> [u8; MAX_INSN_LEN] {
            let mut b = [0xcc; MAX_INSN_LEN]; // unmapped: INT3, which ends any block
            for (i, byte) in b.iter_mut().enumerate() {
                if let Some(v) = self.code.get(&(va + i as u64)) {
                    *byte = v[0];
                }
            }
            b
        }
        fn read_u64(&mut self, va: u64) -> Option<u64> {
            self.data.get(&va).copied()
        }
    }

    const NOP: &[u8] = &[0x90];
    const MOV: &[u8] = &[0x48, 0x89, 0xc3]; // mov %rax,%rbx
    const ADD_MEM: &[u8] = &[0x48, 0x01, 0x07]; // add %rax,(%rdi)
    const JNE_BACK: &[u8] = &[0x75, 0xf7]; // jne -9 (from 0x107: 0x100)
    const RET: &[u8] = &[0xc3];
    const WRMSR: &[u8] = &[0x0f, 0x30];
    const DIV: &[u8] = &[0x48, 0xf7, 0xf1];
    const REP_STOSB: &[u8] = &[0xf3, 0xaa];

    fn regs(rip: u64) -> Regs {
        Regs { rip, ..Default::default() }
    }

    fn rips(b: &Block) -> Vec<u64> {
        b.insns.iter().map(|x| x.0).collect()
    }

    #[test]
    fn a_block_runs_to_the_next_branch_it_cannot_predict() {
        let mut m = Mem::at(0x100, &[MOV, ADD_MEM, NOP, JNE_BACK]);
        let b = plan(&mut m, &regs(0x100), 100, &[]).unwrap();
        assert_eq!(rips(&b), vec![0x100, 0x103, 0x106]);
        assert_eq!(b.end, 0x107, "stops on the JNE");
        assert!(b.insns.iter().all(|x| x.1 == Other));
    }

    #[test]
    fn instructions_stepping_handles_end_a_block_and_are_never_a_head() {
        for stop in [WRMSR, DIV, REP_STOSB, &[0xcd, 0x80][..], &[0x0f, 0x33], &[0x0f, 0xae, 0xf0], &[0xfa]] {
            let mut m = Mem::at(0x100, &[MOV, MOV, stop, NOP]);
            let b = plan(&mut m, &regs(0x100), 100, &[]).unwrap();
            assert_eq!(b.end, 0x106, "{stop:02x?}");
            assert_eq!(plan(&mut m, &regs(0x106), 100, &[]), None, "{stop:02x?} is stepped");
        }
    }

    #[test]
    fn a_conditional_head_follows_rflags() {
        // 0x100: mov; 0x103: mov; 0x106: nop; 0x107: jne 0x100; 0x109: nop; nop; wrmsr
        let mut m = Mem::at(0x100, &[MOV, MOV, NOP, JNE_BACK, NOP, NOP, WRMSR]);
        let taken = plan(&mut m, &Regs { rflags: 0, ..regs(0x107) }, 100, &[]).unwrap();
        assert_eq!(taken.insns[0], (0x107, Branch));
        // Back at 0x100 the loop comes round to the JNE, the block's own head: it ends on
        // the instruction before it, which is given back.
        assert_eq!(rips(&taken), vec![0x107, 0x100, 0x103]);
        assert_eq!(taken.end, 0x106);
        let fallen = plan(&mut m, &Regs { rflags: 1 << 6, ..regs(0x107) }, 100, &[]).unwrap();
        assert_eq!(rips(&fallen), vec![0x107, 0x109, 0x10a]);
        assert_eq!(fallen.end, 0x10b);
    }

    #[test]
    fn conditions() {
        let f = |bits: &[u32]| bits.iter().fold(0u64, |a, &b| a | 1 << b);
        assert_eq!(holds(ConditionCode::l, f(&[7])), Some(true), "SF != OF");
        assert_eq!(holds(ConditionCode::l, f(&[7, 11])), Some(false));
        assert_eq!(holds(ConditionCode::g, f(&[])), Some(true));
        assert_eq!(holds(ConditionCode::be, f(&[0])), Some(true));
        assert_eq!(holds(ConditionCode::a, f(&[6])), Some(false));
        assert_eq!(holds(ConditionCode::np, f(&[2])), Some(false));
    }

    #[test]
    fn a_return_head_goes_where_the_stack_says_and_calls_are_followed() {
        let mut m = Mem::at(0x100, &[RET]);
        m.put(0x200, &[MOV, &[0xe8, 0xf8, 0x00, 0x00, 0x00], NOP]); // call 0x300
        m.put(0x300, &[NOP, NOP, WRMSR]);
        m.data.insert(0x8000, 0x200);
        let mut r = regs(0x100);
        r.gpr[4] = 0x8000;
        let b = plan(&mut m, &r, 100, &[]).unwrap();
        assert_eq!(rips(&b), vec![0x100, 0x200, 0x203, 0x300, 0x301]);
        assert_eq!(b.insns.iter().filter(|x| x.1.is_branch()).count(), 2, "RET and CALL");
        assert_eq!(b.end, 0x302);
        assert_eq!(plan(&mut m, &regs(0x100), 100, &[]), None, "an unreadable return address");
    }

    #[test]
    fn indirect_heads_read_their_operand() {
        let mut m = Mem::at(0x100, &[&[0xff, 0xe0]]); // jmp *%rax
        m.put(0x180, &[&[0xff, 0x24, 0xc5, 0x00, 0x10, 0x00, 0x00]]); // jmp *0x1000(,%rax,8)
        m.put(0x200, &[NOP, NOP, WRMSR]);
        let mut r = regs(0x100);
        r.gpr[0] = 0x200;
        assert_eq!(rips(&plan(&mut m, &r, 100, &[]).unwrap()), vec![0x100, 0x200, 0x201]);
        m.data.insert(0x1000 + 2 * 8, 0x200);
        r.gpr[0] = 2;
        r.rip = 0x180;
        assert_eq!(rips(&plan(&mut m, &r, 100, &[]).unwrap()), vec![0x180, 0x200, 0x201]);
    }

    #[test]
    fn limits_and_watched_addresses_end_blocks_early() {
        let mut m = Mem::at(0x100, &[NOP, NOP, NOP, NOP, NOP, WRMSR]);
        let b = plan(&mut m, &regs(0x100), 3, &[]).unwrap();
        assert_eq!((b.insns.len(), b.end), (3, 0x103));
        let b = plan(&mut m, &regs(0x100), 100, &[0x103]).unwrap();
        assert_eq!((b.insns.len(), b.end), (2, 0x102), "a handler is never run through nor stopped on");
        assert_eq!(plan(&mut m, &regs(0x100), 1, &[]), None, "one instruction is a step");
        let b = plan(&mut m, &regs(0x100), 100, &[0x100]).unwrap();
        assert_eq!(b.insns[0].0, 0x100, "a head on a watched handler: the stop is there already");
    }

    #[test]
    fn a_jump_to_itself_is_stepped() {
        let mut m = Mem::at(0x100, &[&[0xeb, 0xfe]]);
        assert_eq!(plan(&mut m, &regs(0x100), 100, &[]), None);
    }
}
