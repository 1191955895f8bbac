//! The exact backend's block engine (`--exact-engine blocks`): between two stops the guest's
//! path is known from its code and state, so the VMM runs it ahead (`ahead`: its integer
//! instructions, branches and loads interpreted from the registers at the stop), lets the
//! guest run to a point far down that path (an execution breakpoint there, no single-step),
//! and retires the instructions one by one through the same counting as single-stepping
//! (`retire`), in the order they ran: CMASK/INV/EDGE, deadlines, the reference profile and
//! `stat -a`'s tally see exactly what stepping gives them.
//!
//! A block is the path run ahead from the stop through *plain* instructions (`plain`: no
//! privileged or I/O instruction, nothing the VMM runs or counts apart, only base x86-64) and branches (Jcc, JMP, CALL, RET), up to the first instruction `ahead`
//! cannot run (one stepping handles, a load that would fault, a branch on an undefined
//! flag) or the limit; it may pass an address many times (loops).
//!
//! It ends where the guest reaches an address for the first time on that path, the last
//! such point before the run ahead stopped: a breakpoint there fires exactly there (one on
//! an address passed before would fire at the first pass; this host's emulator also takes
//! a breakpoint at RIP again whatever RFLAGS.RF says), never on a watched exception handler
//! (`avoid`). Where the host's breakpoints do not stop the guest (kvm_amd under QEMU, a
//! native vCPU on kvm_pvm), the
//! end's first two bytes become `OUT imm8, AL` while the block runs (`EndBy::Trap`): the port
//! exit is undone and the bytes put back at the stop. Interrupts stay out (`BLOCKIRQ`); what faults inside a block anyway is seen at
//! its handler as when stepping (`handler_watch`: #PF, #GP, #UD in DR0-DR2, the block's end in
//! DR3). At the end the guest's registers are checked against the ones run ahead. `plan` is
//! pure, tested against a mock.

use super::ahead::Machine;
use super::decode::{decode, InsnClass, MAX_INSN_LEN};
use crate::vstate::linear::DataAccess;
use ahash::{AHashMap, AHashSet};
use iced_x86::{CpuidFeature, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, Register};

/// The most instructions one block retires.
pub const MAX_BLOCK: usize = 4096;

/// How the guest is stopped at a block's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndBy {
    /// An execution breakpoint (DR3), where the host's breakpoints stop the guest.
    Breakpoint,
    /// A port write planted over the end's first two bytes (`TrapForm::PortOut`), where
    /// they do not (kvm_amd under QEMU): the end's instruction is two bytes long at least,
    /// within one page, and no byte of it is an instruction on the path.
    Trap,
}

impl EndBy {
    /// The fewest instructions a block holds: a planted end costs a port exit, its
    /// completion and a register ioctl, a few steps' worth.
    fn min_block(self) -> usize {
        match self {
            EndBy::Breakpoint => 2,
            EndBy::Trap => 8,
        }
    }

    /// A breakpoint where the host's breakpoints stop the guest, else a planted port write:
    /// on kvm_amd under QEMU, and for a `native` vCPU on kvm_pvm (which arms no breakpoint
    /// for one). `PERFVM_BLOCK_ENDS=trap` plants them on any host (the tests run kvm_amd's
    /// way here).
    pub fn for_vcpu(native: bool) -> Self {
        let planted = std::env::var("PERFVM_BLOCK_ENDS").is_ok_and(|v| v == "trap");
        if crate::host::caps().stops_at_breakpoints() && !native && !planted {
            EndBy::Breakpoint
        } else {
            EndBy::Trap
        }
    }

    /// Whether the instruction `insn` at `pc` can end a block stopped this way.
    fn can_end(self, insn: &Instruction, pc: u64, passed: &AHashSet<u64>) -> bool {
        match self {
            EndBy::Breakpoint => true,
            EndBy::Trap => insn.len() >= 2 && pc & 0xfff != 0xfff && !passed.contains(&(pc + 1)),
        }
    }
}

/// How far the run ahead goes past the last address it reached for the first time before
/// it gives up looking for another (a loop that has far to go: each pass ends a block).
/// Before it has found one it goes on to the limit: a tight loop's passes hold no such
/// address, its exit does.
const STALE_RUN: usize = 64;

/// What planning reads of the guest.
pub trait BlockCpu {
    /// The bytes at guest-virtual `va` (zeros where unmapped).
    fn code(&mut self, va: u64) -> [u8; MAX_INSN_LEN];
    /// Where a CPL 0 data access to `va` goes (`write`: a store), None where it would
    /// fault or is not RAM.
    fn data(&mut self, va: u64, write: bool) -> Option<DataAccess>;
    /// Guest-physical bytes (RAM only).
    fn read_phys(&mut self, pa: u64, buf: &mut [u8]) -> Option<()>;
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
        Regs {
            gpr: Self::gprs(regs),
            rip: regs.rip,
            rflags: regs.rflags,
            fs_base: sregs.fs.base,
            gs_base: sregs.gs.base,
        }
    }

    /// KVM's general registers in encoding order.
    pub fn gprs(r: &kvm_bindings::kvm_regs) -> [u64; 16] {
        [r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15]
    }

    /// A 64-bit general register or a segment base, as iced-x86 asks for it.
    pub(super) fn value(&self, reg: Register) -> Option<u64> {
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
    /// Each instruction's address and class, in the order they run.
    pub insns: Vec<(u64, InsnClass)>,
    /// Where the guest stops: the instruction after the last one.
    pub end: u64,
    /// The registers the guest has there, as run ahead.
    pub expect: Regs,
    /// The arithmetic flags of `expect.rflags` known there.
    pub known_flags: u64,
}

impl Block {
    /// How many of the block's instructions ran before the one at `rip`, if the path passes
    /// it once (None: not in it, or in a loop, where which pass is not known).
    pub fn before(&self, rip: u64) -> Option<usize> {
        let mut at = self.insns.iter().enumerate().filter(|(_, &(a, _))| a == rip).map(|(i, _)| i);
        let first = at.next()?;
        at.next().is_none().then_some(first)
    }

    /// Whether the guest stopped at the end with the registers run ahead (general
    /// registers, and the known arithmetic flags).
    pub fn as_run_ahead(&self, gpr: &[u64; 16], rflags: u64) -> bool {
        *gpr == self.expect.gpr && (rflags ^ self.expect.rflags) & self.known_flags == 0
    }
}

/// Instructions decoded at earlier stops, by address, with the bytes they were decoded
/// from: reused while the guest's code there is unchanged.
#[derive(Debug, Default)]
pub struct DecodeCache(AHashMap<u64, ([u8; MAX_INSN_LEN], Instruction, InsnClass)>);

/// The most instructions the cache keeps (it starts over beyond).
const DECODE_CACHE_MAX: usize = 1 << 16;

impl DecodeCache {
    fn get(&mut self, cpu: &mut impl BlockCpu, pc: u64) -> (Instruction, InsnClass) {
        let bytes = cpu.code(pc);
        if let Some((seen, insn, class)) = self.0.get(&pc) {
            if *seen == bytes {
                return (*insn, *class);
            }
        }
        if self.0.len() >= DECODE_CACHE_MAX {
            self.0.clear();
        }
        let insn = Decoder::with_ip(64, &bytes, pc, DecoderOptions::NONE).decode();
        let class = decode(&bytes, true).class;
        self.0.insert(pc, (bytes, insn, class));
        (insn, class)
    }
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
            Cpuid
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

/// No block runs from a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoBlock {
    /// The instructions run ahead in vain (a tight loop that outran the limit: all of them).
    pub ran_ahead: usize,
}

/// The block the guest runs from the stop at `regs.rip`: at most `limit` instructions, none
/// of them (but the head) nor its end at an address of `avoid`. None where the first
/// instruction must be stepped, or the block would hold fewer than `EndBy::min_block`
/// (steps cost no more).
pub fn plan(
    cpu: &mut impl BlockCpu,
    cache: &mut DecodeCache,
    regs: &Regs,
    limit: usize,
    avoid: &[u64],
    end_by: EndBy,
) -> Result<Block, NoBlock> {
    let limit = limit.min(MAX_BLOCK);
    let mut machine = Machine::new(*regs);
    let mut insns: Vec<(u64, InsnClass)> = Vec::new();
    let mut passed: AHashSet<u64> = AHashSet::new();
    let mut best: Option<(usize, Regs, u64)> = None;
    let mut pc = regs.rip;
    while insns.len() < limit && best.as_ref().is_none_or(|b| b.0 + STALE_RUN > insns.len()) {
        if !insns.is_empty() && avoid.contains(&pc) {
            break;
        }
        let (insn, class) = cache.get(cpu, pc);
        if !(plain(&insn, class) || class == InsnClass::Branch) {
            break;
        }
        let Some(next) = machine.exec(cpu, &insn) else { break };
        insns.push((pc, class));
        passed.insert(pc);
        pc = next;
        // An address reached for the first time can end the block.
        if insns.len() >= end_by.min_block()
            && !passed.contains(&pc)
            && !avoid.contains(&pc)
            && end_by.can_end(&cache.get(cpu, pc).0, pc, &passed)
        {
            best = Some((insns.len(), machine.regs, machine.known));
        }
    }
    let Some((n, expect, known_flags)) = best else { return Err(NoBlock { ran_ahead: insns.len() }) };
    insns.truncate(n);
    Ok(Block { insns, end: expect.rip, expect, known_flags })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use InsnClass::*;

    /// Code and data at their linear addresses (linear == physical), data only where mapped.
    #[derive(Default)]
    pub(crate) struct Mem {
        code: BTreeMap<u64, u8>,
        pub(crate) data: BTreeMap<u64, u8>,
    }

    impl Mem {
        /// Instructions laid out one after the other from `at`.
        pub(crate) fn at(at: u64, program: &[&[u8]]) -> Self {
            let mut m = Mem::default();
            m.put(at, program);
            m
        }
        pub(crate) fn put(&mut self, mut at: u64, program: &[&[u8]]) {
            for bytes in program {
                for (i, &b) in bytes.iter().enumerate() {
                    self.code.insert(at + i as u64, b);
                }
                at += bytes.len() as u64;
            }
        }
        /// Map the page at `va`, zeroed.
        pub(crate) fn map(&mut self, va: u64) {
            for a in va & !0xfff..(va & !0xfff) + 0x1000 {
                self.data.entry(a).or_insert(0);
            }
        }
        pub(crate) fn put_u64(&mut self, va: u64, v: u64) {
            self.map(va);
            for (i, b) in v.to_le_bytes().into_iter().enumerate() {
                self.data.insert(va + i as u64, b);
            }
        }
    }

    impl BlockCpu for Mem {
        fn code(&mut self, va: u64) -> [u8; MAX_INSN_LEN] {
            let mut b = [0xcc; MAX_INSN_LEN]; // unmapped: INT3, which ends any block
            for (i, byte) in b.iter_mut().enumerate() {
                if let Some(&v) = self.code.get(&(va + i as u64)) {
                    *byte = v;
                }
            }
            b
        }
        fn data(&mut self, va: u64, _write: bool) -> Option<DataAccess> {
            self.data.contains_key(&va).then_some(DataAccess { pa: va, tables: [0; 5] })
        }
        fn read_phys(&mut self, pa: u64, buf: &mut [u8]) -> Option<()> {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = *self.data.get(&(pa + i as u64))?;
            }
            Some(())
        }
    }

    const NOP: &[u8] = &[0x90];
    const MOV: &[u8] = &[0x48, 0x89, 0xc3]; // mov %rax,%rbx
    const MOV_3_ECX: &[u8] = &[0xb9, 0x03, 0x00, 0x00, 0x00]; // mov $3,%ecx
    const DEC_ECX: &[u8] = &[0xff, 0xc9];
    const JNE_BACK2: &[u8] = &[0x75, 0xfc]; // jne -4: to the DEC before it
    const RET: &[u8] = &[0xc3];
    const WRMSR: &[u8] = &[0x0f, 0x30];
    const REP_STOSB: &[u8] = &[0xf3, 0xaa];

    fn regs(rip: u64) -> Regs {
        Regs { rip, ..Default::default() }
    }

    /// The block planned from `r` with a breakpoint at its end.
    fn planned(m: &mut Mem, r: &Regs, limit: usize, avoid: &[u64]) -> Option<Block> {
        plan(m, &mut DecodeCache::default(), r, limit, avoid, EndBy::Breakpoint).ok()
    }

    fn rips(b: &Block) -> Vec<u64> {
        b.insns.iter().map(|x| x.0).collect()
    }

    #[test]
    fn a_loop_is_run_ahead_to_its_exit() {
        // 0x100: mov $3,%ecx; 0x105: dec %ecx; 0x107: jne 0x105; 0x109: nop; 0x10a: wrmsr
        let mut m = Mem::at(0x100, &[MOV_3_ECX, DEC_ECX, JNE_BACK2, NOP, WRMSR]);
        let b = planned(&mut m, &regs(0x100), 100, &[]).unwrap();
        assert_eq!(rips(&b), vec![0x100, 0x105, 0x107, 0x105, 0x107, 0x105, 0x107, 0x109]);
        assert_eq!(b.end, 0x10a, "stops before the WRMSR");
        assert_eq!(b.insns.iter().filter(|x| x.1 == Branch).count(), 3);
        assert_eq!(b.expect.gpr[1], 0, "ECX counted down");
        assert!(b.as_run_ahead(&b.expect.gpr, b.expect.rflags));
        let mut other = b.expect.gpr;
        other[1] = 1;
        assert!(!b.as_run_ahead(&other, b.expect.rflags), "a register off the path");
        assert_eq!(b.before(0x100), Some(0));
        assert_eq!(b.before(0x105), None, "passed three times: which one is not known");
    }

    #[test]
    fn a_block_ends_on_an_address_reached_for_the_first_time() {
        // Cut by the limit inside the loop: the last address seen for the first time is the
        // JNE (after MOV, DEC); later ones were all passed before.
        let mut m = Mem::at(0x100, &[MOV_3_ECX, DEC_ECX, JNE_BACK2, NOP, WRMSR]);
        let b = planned(&mut m, &regs(0x100), 5, &[]).unwrap();
        assert_eq!((rips(&b), b.end), (vec![0x100, 0x105], 0x107));
    }

    #[test]
    fn instructions_stepping_handles_end_a_block_and_are_never_a_head() {
        for stop in [WRMSR, REP_STOSB, &[0xcd, 0x80][..], &[0x0f, 0x33], &[0x0f, 0xae, 0xf0], &[0xfa]] {
            let mut m = Mem::at(0x100, &[MOV, MOV, stop, NOP]);
            let b = planned(&mut m, &regs(0x100), 100, &[]).unwrap();
            assert_eq!(b.end, 0x106, "{stop:02x?}");
            assert_eq!(planned(&mut m, &regs(0x106), 100, &[]), None, "{stop:02x?} is stepped");
        }
    }

    #[test]
    fn a_branch_on_an_undefined_flag_ends_the_run() {
        // imul leaves ZF undefined: the JE after it cannot be run ahead.
        let mut m = Mem::at(0x100, &[&[0x48, 0x0f, 0xaf, 0xd8], NOP, &[0x74, 0x00], WRMSR]);
        let b = planned(&mut m, &regs(0x100), 100, &[]).unwrap();
        assert_eq!((rips(&b), b.end), (vec![0x100, 0x104], 0x105));
    }

    #[test]
    fn calls_push_and_returns_pop_through_memory() {
        // 0x100: call 0x200; 0x105: nop; 0x106: wrmsr. 0x200: mov; ret.
        let mut m = Mem::at(0x100, &[&[0xe8, 0xfb, 0x00, 0x00, 0x00], NOP, WRMSR]);
        m.put(0x200, &[MOV, RET]);
        m.map(0x7ff8);
        let mut r = regs(0x100);
        r.gpr[4] = 0x8000;
        let b = planned(&mut m, &r, 100, &[]).unwrap();
        assert_eq!(rips(&b), vec![0x100, 0x200, 0x203, 0x105]);
        assert_eq!(b.insns.iter().filter(|x| x.1.is_branch()).count(), 2, "CALL and RET");
        assert_eq!((b.end, b.expect.gpr[4]), (0x106, 0x8000));
        assert_eq!(m.data[&0x7ff8], 0, "the guest's memory is never written");
        assert_eq!(planned(&mut Mem::at(0x100, &[RET, NOP]), &r, 100, &[]), None, "an unmapped stack");
    }

    #[test]
    fn indirect_branches_read_their_operand() {
        let mut m = Mem::at(0x100, &[&[0xff, 0xe0]]); // jmp *%rax
        m.put(0x180, &[&[0xff, 0x24, 0xc5, 0x00, 0x10, 0x00, 0x00]]); // jmp *0x1000(,%rax,8)
        m.put(0x200, &[NOP, NOP, WRMSR]);
        let mut r = regs(0x100);
        r.gpr[0] = 0x200;
        assert_eq!(rips(&planned(&mut m, &r, 100, &[]).unwrap()), vec![0x100, 0x200, 0x201]);
        m.put_u64(0x1000 + 2 * 8, 0x200);
        r.gpr[0] = 2;
        r.rip = 0x180;
        assert_eq!(rips(&planned(&mut m, &r, 100, &[]).unwrap()), vec![0x180, 0x200, 0x201]);
    }

    #[test]
    fn limits_and_watched_addresses_end_blocks_early() {
        let mut m = Mem::at(0x100, &[NOP, NOP, NOP, NOP, NOP, WRMSR]);
        let b = planned(&mut m, &regs(0x100), 3, &[]).unwrap();
        assert_eq!((b.insns.len(), b.end), (3, 0x103));
        let b = planned(&mut m, &regs(0x100), 100, &[0x103]).unwrap();
        assert_eq!((b.insns.len(), b.end), (2, 0x102), "a handler is never run through nor stopped on");
        assert_eq!(planned(&mut m, &regs(0x100), 1, &[]), None, "one instruction is a step");
        let b = planned(&mut m, &regs(0x100), 100, &[0x100]).unwrap();
        assert_eq!(b.insns[0].0, 0x100, "a head on a watched handler: the stop is there already");
    }

    #[test]
    fn a_planted_end_needs_two_bytes_off_the_path_and_a_longer_block() {
        // 0x100..0x11b: ten movs; 0x11e: cli (one byte, stepped)
        let mut m = Mem::at(0x100, &[MOV; 10]);
        m.put(0x11e, &[&[0xfa]]);
        let trap =
            |m: &mut Mem, limit| plan(m, &mut DecodeCache::default(), &regs(0x100), limit, &[], EndBy::Trap).ok();
        assert_eq!(planned(&mut m, &regs(0x100), 100, &[]).unwrap().end, 0x11e);
        let b = trap(&mut m, 100).unwrap();
        assert_eq!((b.end, b.insns.len()), (0x11b, 9), "the CLI is too short to plant on");
        assert_eq!(trap(&mut m, 7), None, "seven instructions: stepped");
    }

    #[test]
    fn a_tight_loop_past_the_limit_is_no_block_and_says_how_far_it_ran() {
        // mov $3,%ecx; dec; jne: at 4 instructions the loop has not come out.
        let mut m = Mem::at(0x100, &[MOV_3_ECX, DEC_ECX, JNE_BACK2, NOP, WRMSR]);
        let r = regs(0x105);
        let miss = plan(
            &mut m,
            &mut DecodeCache::default(),
            &Regs { gpr: [0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], ..r },
            4,
            &[],
            EndBy::Breakpoint,
        );
        assert_eq!(miss, Err(NoBlock { ran_ahead: 4 }));
    }

    #[test]
    fn a_jump_to_itself_is_stepped() {
        let mut m = Mem::at(0x100, &[&[0xeb, 0xfe]]);
        assert_eq!(planned(&mut m, &regs(0x100), 100, &[]), None);
    }
}
