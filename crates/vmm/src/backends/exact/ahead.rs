//! Running the guest ahead of itself: the block engine interprets the guest's integer
//! instructions from a stop, in the VMM, to know the path it will take through conditional
//! branches, returns and indirect jumps, so that one breakpoint far down that path covers
//! many branches. Only what the interpreter knows exactly is run ahead: general registers,
//! the arithmetic flags the SDM defines for each instruction (a flag it leaves undefined is
//! *unknown*, and a branch on an unknown flag ends the run), and loads from RAM through the
//! guest's page tables. Stores go to an overlay, never to the guest. Whatever else comes
//! (an instruction not handled here, a load or store that would fault or is not RAM, a store
//! to a page table) ends the run before it: the guest then stops there.

use super::blocks::{BlockCpu, Regs};
use ahash::AHashMap;
use iced_x86::{Code, ConditionCode, FlowControl, Instruction, Mnemonic, OpKind, Register};

const CF: u64 = 1;
const PF: u64 = 1 << 2;
const AF: u64 = 1 << 4;
const ZF: u64 = 1 << 6;
const SF: u64 = 1 << 7;
const OF: u64 = 1 << 11;
/// The arithmetic flags.
pub const STATUS_FLAGS: u64 = CF | PF | AF | ZF | SF | OF;

/// The guest as the interpreter runs it ahead.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Registers as they will be (RIP: the next instruction).
    pub regs: Regs,
    /// The arithmetic flags whose value is known.
    pub known: u64,
    /// Bytes stored so far, by guest-physical address.
    stores: AHashMap<u64, u8>,
    /// Translations made (linear page, for a store, physical page): a store to a page table
    /// ends the run, so they hold for all of it.
    pages: Vec<(u64, bool, u64)>,
    /// The pages stored to, and the page tables walked: a store to a table, or a walk
    /// through a page stored to, would make the translations run ahead stale.
    stored_pages: Vec<u64>,
    tables: Vec<u64>,
    /// Linear pages of code run ahead, and of stores: code stored to would be stale.
    code_pages: Vec<u64>,
    stored_linear: Vec<u64>,
}

/// Add `page` to a short set.
fn note(set: &mut Vec<u64>, page: u64) {
    if !set.contains(&page) {
        set.push(page);
    }
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

fn sign_extend(v: u64, bits: u32) -> u64 {
    if bits >= 64 {
        v
    } else {
        let shift = 64 - bits;
        (((v << shift) as i64) >> shift) as u64
    }
}

fn msb(v: u64, bits: u32) -> bool {
    v >> (bits - 1) & 1 != 0
}

fn is_high_byte(r: Register) -> bool {
    matches!(r, Register::AH | Register::CH | Register::DH | Register::BH)
}

/// The flags condition `cc` reads.
fn reads(cc: ConditionCode) -> u64 {
    use ConditionCode::*;
    match cc {
        o | no => OF,
        b | ae => CF,
        e | ne => ZF,
        be | a => CF | ZF,
        s | ns => SF,
        p | np => PF,
        l | ge => SF | OF,
        le | g => ZF | SF | OF,
        None => 0,
    }
}

/// Whether condition `cc` holds under `rflags`.
pub fn holds(cc: ConditionCode, rflags: u64) -> Option<bool> {
    let bit = |f: u64| rflags & f != 0;
    let (cf, pf, zf, sf, of) = (bit(CF), bit(PF), bit(ZF), bit(SF), bit(OF));
    use ConditionCode::*;
    Some(match cc {
        o => of,
        no => !of,
        b => cf,
        ae => !cf,
        e => zf,
        ne => !zf,
        be => cf || zf,
        a => !cf && !zf,
        s => sf,
        ns => !sf,
        p => pf,
        np => !pf,
        l => sf != of,
        ge => sf == of,
        le => zf || sf != of,
        g => !zf && sf == of,
        None => return Option::None,
    })
}

/// A canonical 48-bit address (what the guest can touch without a #GP).
fn canonical(va: u64) -> bool {
    sign_extend(va, 48) == va
}

impl Machine {
    /// The guest at a stop with registers `regs`.
    pub fn new(regs: Regs) -> Self {
        Machine {
            regs,
            known: STATUS_FLAGS,
            stores: AHashMap::new(),
            pages: Vec::new(),
            stored_pages: Vec::new(),
            tables: Vec::new(),
            code_pages: Vec::new(),
            stored_linear: Vec::new(),
        }
    }

    /// Run `insn` (at `self.regs.rip`): the address of the next instruction, or None where it
    /// cannot be run ahead (the machine is then as it was, but for what it already stored).
    pub fn exec(&mut self, cpu: &mut impl BlockCpu, insn: &Instruction) -> Option<u64> {
        let (first, last) = (insn.ip() & !0xfff, (insn.next_ip() - 1) & !0xfff);
        if self.stored_linear.contains(&first) || self.stored_linear.contains(&last) {
            return None; // code the path stored to
        }
        note(&mut self.code_pages, first);
        note(&mut self.code_pages, last);
        let saved = (self.regs, self.known);
        let next = self.run(cpu, insn);
        if next.is_none() {
            (self.regs, self.known) = saved;
        } else {
            self.regs.rip = next?;
        }
        next
    }

    fn run(&mut self, cpu: &mut impl BlockCpu, insn: &Instruction) -> Option<u64> {
        use Mnemonic::*;
        let next = insn.next_ip();
        match insn.mnemonic() {
            Nop => {}
            Mov => {
                let v = self.get(cpu, insn, 1)?;
                self.set(cpu, insn, 0, v)?;
            }
            Movzx => {
                let v = self.get(cpu, insn, 1)?;
                self.set(cpu, insn, 0, v)?;
            }
            Movsx | Movsxd => {
                let v = sign_extend(self.get(cpu, insn, 1)?, self.bits(insn, 1)?);
                self.set(cpu, insn, 0, v)?;
            }
            Lea => {
                let va = self.address(insn)?;
                self.set(cpu, insn, 0, va)?;
            }
            Add | Adc | Sub | Sbb | Cmp | And | Or | Xor | Test => {
                let bits = self.bits(insn, 0)?;
                let (a, b) = (self.get(cpu, insn, 0)?, self.get(cpu, insn, 1)? & mask(bits));
                let res = match insn.mnemonic() {
                    Add => self.add(a, b, 0, bits),
                    Adc => self.add(a, b, self.flag(CF)?, bits),
                    Sub | Cmp => self.sub(a, b, 0, bits),
                    Sbb => self.sub(a, b, self.flag(CF)?, bits),
                    And | Test => self.logic(a & b, bits),
                    Or => self.logic(a | b, bits),
                    _ => self.logic(a ^ b, bits),
                };
                if !matches!(insn.mnemonic(), Cmp | Test) {
                    self.set(cpu, insn, 0, res)?;
                }
            }
            Inc | Dec => {
                let bits = self.bits(insn, 0)?;
                let (a, cf) = (self.get(cpu, insn, 0)?, self.regs.rflags & CF);
                let res = if insn.mnemonic() == Inc { self.add(a, 1, 0, bits) } else { self.sub(a, 1, 0, bits) };
                let known_cf = self.known & CF;
                self.regs.rflags = self.regs.rflags & !CF | cf;
                self.known = self.known & !CF | known_cf;
                self.set(cpu, insn, 0, res)?;
            }
            Neg => {
                let bits = self.bits(insn, 0)?;
                let a = self.get(cpu, insn, 0)?;
                let res = self.sub(0, a, 0, bits);
                self.set(cpu, insn, 0, res)?;
            }
            Not => {
                let bits = self.bits(insn, 0)?;
                let a = self.get(cpu, insn, 0)?;
                self.set(cpu, insn, 0, !a & mask(bits))?;
            }
            Shl | Sal | Shr | Sar => {
                let bits = self.bits(insn, 0)?;
                let a = self.get(cpu, insn, 0)?;
                let count = match insn.op_count() {
                    1 => 1,
                    _ => self.get(cpu, insn, 1)? & if bits == 64 { 0x3f } else { 0x1f },
                } as u32;
                // (A count of 0 changes no flag, but a 32-bit register is still written:
                // its upper half cleared.)
                let res = if count == 0 { a } else { self.shift(insn.mnemonic(), a, count, bits) };
                self.set(cpu, insn, 0, res)?;
            }
            Rol | Ror => {
                let bits = self.bits(insn, 0)?;
                let a = self.get(cpu, insn, 0)?;
                let count = (self.get(cpu, insn, 1)? & if bits == 64 { 0x3f } else { 0x1f }) as u32;
                let res = if count == 0 { a } else { self.rotate(insn.mnemonic() == Rol, a, count, bits) };
                self.set(cpu, insn, 0, res)?;
            }
            Mul | Imul if insn.op_count() == 1 => {
                let bits = self.bits(insn, 0)?;
                let (a, b) = (self.gpr(0) & mask(bits), self.get(cpu, insn, 0)?);
                let (low, high, lost) = if insn.mnemonic() == Mul {
                    let full = a as u128 * b as u128;
                    (full as u64 & mask(bits), (full >> bits) as u64 & mask(bits), full >> bits != 0)
                } else {
                    let full = sign_extend(a, bits) as i64 as i128 * sign_extend(b, bits) as i64 as i128;
                    let low = full as u64 & mask(bits);
                    (low, (full >> bits) as u64 & mask(bits), sign_extend(low, bits) as i64 as i128 != full)
                };
                self.flags(if lost { CF | OF } else { 0 }, CF | OF);
                self.known &= !(SF | ZF | AF | PF);
                self.wide_result(bits, low, high)?;
            }
            Div | Idiv => {
                // Only a division that cannot fault (#DE) is run ahead.
                let bits = self.bits(insn, 0)?;
                let divisor = self.get(cpu, insn, 0)?;
                let (low, high) = match bits {
                    8 => (self.gpr(0) & 0xff, self.gpr(0) >> 8 & 0xff),
                    _ => (self.gpr(0) & mask(bits), self.gpr(2) & mask(bits)),
                };
                let dividend = (high as u128) << bits | low as u128;
                let (q, r) = if insn.mnemonic() == Div {
                    let d = divisor as u128;
                    let q = dividend.checked_div(d)?;
                    (u64::try_from(q).ok().filter(|&q| q <= mask(bits))?, (dividend % d) as u64)
                } else {
                    let n = (dividend << (128 - 2 * bits)) as i128 >> (128 - 2 * bits);
                    let d = sign_extend(divisor, bits) as i64 as i128;
                    let q = n.checked_div(d)?;
                    let half = 1i128 << (bits - 1);
                    if q < -half || q >= half {
                        return None;
                    }
                    (q as u64 & mask(bits), (n % d) as u64 & mask(bits))
                };
                self.known &= !STATUS_FLAGS;
                self.wide_result(bits, q, r)?;
            }
            Imul if insn.op_count() >= 2 => {
                let bits = self.bits(insn, 0)?;
                let a = self.get(cpu, insn, insn.op_count() - 2)?;
                let b = self.get(cpu, insn, insn.op_count() - 1)?;
                let full = sign_extend(a, bits) as i64 as i128 * sign_extend(b, bits) as i64 as i128;
                let res = full as u64 & mask(bits);
                let lost = sign_extend(res, bits) as i64 as i128 != full;
                self.flags(if lost { CF | OF } else { 0 }, CF | OF);
                self.known &= !(SF | ZF | AF | PF);
                self.set(cpu, insn, 0, res)?;
            }
            Xchg => {
                let (a, b) = (self.get(cpu, insn, 0)?, self.get(cpu, insn, 1)?);
                self.set(cpu, insn, 0, b)?;
                self.set(cpu, insn, 1, a)?;
            }
            Xadd => {
                let bits = self.bits(insn, 0)?;
                let (a, b) = (self.get(cpu, insn, 0)?, self.get(cpu, insn, 1)?);
                let res = self.add(a, b, 0, bits);
                self.set(cpu, insn, 0, res)?;
                self.set(cpu, insn, 1, a)?;
            }
            Cmpxchg => {
                let bits = self.bits(insn, 0)?;
                let acc = self.accumulator(bits)?;
                let (dest, src) = (self.get(cpu, insn, 0)?, self.get(cpu, insn, 1)?);
                let acc_value = self.reg(acc)?;
                self.sub(acc_value, dest, 0, bits);
                if acc_value == dest {
                    self.set(cpu, insn, 0, src)?;
                } else if insn.op0_kind() == OpKind::Register && bits == 32 {
                    return None; // (whether the destination's upper half is cleared: not run ahead)
                } else {
                    // (A memory destination is written back with its own value.)
                    self.set(cpu, insn, 0, dest)?;
                    self.set_reg(acc, dest)?;
                }
            }
            Cbw | Cwde | Cdqe => {
                let bits = match insn.mnemonic() {
                    Cbw => 16,
                    Cwde => 32,
                    _ => 64,
                };
                let v = sign_extend(self.gpr(0) & mask(bits / 2), bits / 2);
                self.set_reg(self.accumulator(bits)?, v & mask(bits))?;
            }
            Cwd | Cdq | Cqo => {
                let bits = match insn.mnemonic() {
                    Cwd => 16,
                    Cdq => 32,
                    _ => 64,
                };
                let fill = if msb(self.gpr(0), bits) { mask(bits) } else { 0 };
                let rdx = match bits {
                    16 => Register::DX,
                    32 => Register::EDX,
                    _ => Register::RDX,
                };
                self.set_reg(rdx, fill)?;
            }
            Push if insn.stack_pointer_increment() == -8 => {
                let v = self.get(cpu, insn, 0)?;
                self.push(cpu, v)?;
            }
            Pop if insn.stack_pointer_increment() == 8 && insn.op0_kind() == OpKind::Register => {
                let v = self.pop(cpu)?;
                self.set_reg(insn.op0_register(), v)?;
            }
            Leave if insn.code() == Code::Leaveq => {
                self.regs.gpr[4] = self.gpr(5);
                let rbp = self.pop(cpu)?;
                self.regs.gpr[5] = rbp;
            }
            m if insn.condition_code() != ConditionCode::None && is_setcc(m) => {
                let v = self.condition(insn.condition_code())?;
                self.set(cpu, insn, 0, u64::from(v))?;
            }
            m if insn.condition_code() != ConditionCode::None && is_cmovcc(m) => {
                let taken = self.condition(insn.condition_code())?;
                let v = self.get(cpu, insn, 1)?;
                let old = self.get(cpu, insn, 0)?;
                self.set(cpu, insn, 0, if taken { v } else { old })?;
            }
            _ => return self.branch(cpu, insn),
        }
        Some(next)
    }

    /// A branch's target (None: not one run ahead).
    fn branch(&mut self, cpu: &mut impl BlockCpu, insn: &Instruction) -> Option<u64> {
        match insn.flow_control() {
            FlowControl::ConditionalBranch if insn.is_jcc_short_or_near() => {
                Some(if self.condition(insn.condition_code())? { insn.near_branch_target() } else { insn.next_ip() })
            }
            FlowControl::UnconditionalBranch if insn.is_jmp_short_or_near() => Some(insn.near_branch_target()),
            FlowControl::IndirectBranch if insn.code() == Code::Jmp_rm64 => self.get(cpu, insn, 0),
            FlowControl::Call if insn.code() == Code::Call_rel32_64 => {
                self.push(cpu, insn.next_ip())?;
                Some(insn.near_branch_target())
            }
            FlowControl::IndirectCall if insn.code() == Code::Call_rm64 => {
                let target = self.get(cpu, insn, 0)?;
                self.push(cpu, insn.next_ip())?;
                Some(target)
            }
            FlowControl::Return if matches!(insn.code(), Code::Retnq | Code::Retnq_imm16) => {
                let target = self.pop(cpu)?;
                if insn.code() == Code::Retnq_imm16 {
                    self.regs.gpr[4] = self.gpr(4).wrapping_add(u64::from(insn.immediate16()));
                }
                Some(target)
            }
            _ => None,
        }
    }

    fn gpr(&self, n: usize) -> u64 {
        self.regs.gpr[n]
    }

    fn flag(&self, f: u64) -> Option<u64> {
        (self.known & f == f).then_some(u64::from(self.regs.rflags & f != 0))
    }

    fn condition(&self, cc: ConditionCode) -> Option<bool> {
        let needs = reads(cc);
        if self.known & needs != needs {
            return None;
        }
        holds(cc, self.regs.rflags)
    }

    /// Set the flags `defined` to the bits of `values`, all known.
    fn flags(&mut self, values: u64, defined: u64) {
        self.regs.rflags = self.regs.rflags & !defined | values & defined;
        self.known |= defined;
    }

    /// ZF, SF and PF of result `res`.
    fn szp(res: u64, bits: u32) -> u64 {
        let mut f = 0;
        if res & mask(bits) == 0 {
            f |= ZF;
        }
        if msb(res, bits) {
            f |= SF;
        }
        if (res as u8).count_ones().is_multiple_of(2) {
            f |= PF;
        }
        f
    }

    fn add(&mut self, a: u64, b: u64, carry: u64, bits: u32) -> u64 {
        let (a, b) = (a & mask(bits), b & mask(bits));
        let wide = a as u128 + b as u128 + carry as u128;
        let res = wide as u64 & mask(bits);
        self.arithmetic(res, bits, wide >> bits & 1 != 0, msb((a ^ res) & (b ^ res), bits), a ^ b)
    }

    fn sub(&mut self, a: u64, b: u64, borrow: u64, bits: u32) -> u64 {
        let (a, b) = (a & mask(bits), b & mask(bits));
        let res = a.wrapping_sub(b).wrapping_sub(borrow) & mask(bits);
        self.arithmetic(res, bits, (a as u128) < b as u128 + borrow as u128, msb((a ^ b) & (a ^ res), bits), a ^ b)
    }

    /// Every arithmetic flag of an addition or subtraction: its result, carry (borrow) out
    /// and signed overflow, and AF from the operands' bits 4 (`a ^ b`) and the result's.
    fn arithmetic(&mut self, res: u64, bits: u32, cf: bool, of: bool, operands: u64) -> u64 {
        let mut f = Self::szp(res, bits);
        if cf {
            f |= CF;
        }
        if of {
            f |= OF;
        }
        if (operands ^ res) & 0x10 != 0 {
            f |= AF;
        }
        self.flags(f, STATUS_FLAGS);
        res
    }

    fn logic(&mut self, res: u64, bits: u32) -> u64 {
        let res = res & mask(bits);
        self.flags(Self::szp(res, bits), CF | OF | ZF | SF | PF);
        self.known &= !AF;
        res
    }

    /// A shift by a non-zero `count` (masked). CF is the last bit shifted out, undefined for
    /// a count of the width or more (SDM: SHL and SHR; SAR is taken alike, as vendors may
    /// differ); OF is defined for a count of 1 only.
    fn shift(&mut self, m: Mnemonic, a: u64, count: u32, bits: u32) -> u64 {
        let a = a & mask(bits);
        let (res, cf) = match m {
            Mnemonic::Shl | Mnemonic::Sal => {
                let res = if count >= 64 { 0 } else { a << count & mask(bits) };
                (res, (count < bits).then(|| a >> (bits - count) & 1))
            }
            Mnemonic::Shr => {
                let res = if count >= 64 { 0 } else { a >> count };
                (res, (count < bits).then(|| a >> (count - 1) & 1))
            }
            _ => {
                let s = sign_extend(a, bits) as i64;
                let res = (s >> count.min(63)) as u64 & mask(bits);
                (res, (count < bits).then(|| (s >> (count - 1)) as u64 & 1))
            }
        };
        let mut f = Self::szp(res, bits);
        let mut defined = ZF | SF | PF;
        if let Some(cf) = cf {
            f |= cf * CF;
            defined |= CF;
        }
        if count == 1 {
            let of = match m {
                Mnemonic::Shr => msb(a, bits),
                Mnemonic::Sar => false,
                _ => msb(res, bits) != (cf == Some(1)),
            };
            if of {
                f |= OF;
            }
            defined |= OF;
        }
        self.flags(f, defined);
        self.known &= !(AF | (STATUS_FLAGS & !defined));
        res
    }

    /// A rotate by a non-zero `count` (masked): CF is the bit rotated last, OF defined for a
    /// count of 1 only; no other flag changes.
    fn rotate(&mut self, left: bool, a: u64, count: u32, bits: u32) -> u64 {
        let a = a & mask(bits);
        let n = count % bits;
        let res = match (n, left) {
            (0, _) => a,
            (n, true) => (a << n | a >> (bits - n)) & mask(bits),
            (n, false) => (a >> n | a << (bits - n)) & mask(bits),
        };
        let cf = if left { res & 1 != 0 } else { msb(res, bits) };
        let mut f = if cf { CF } else { 0 };
        let mut defined = CF;
        if count == 1 {
            let of = if left { msb(res, bits) != cf } else { msb(res, bits) != msb(res << 1, bits) };
            if of {
                f |= OF;
            }
            defined |= OF;
        } else {
            self.known &= !OF;
        }
        self.flags(f, defined);
        res
    }

    /// A MUL's or DIV's two halves: AL and AH for bytes, else the accumulator and DX.
    fn wide_result(&mut self, bits: u32, low: u64, high: u64) -> Option<()> {
        if bits == 8 {
            return self.set_reg(Register::AX, high << 8 | low);
        }
        let dx = match bits {
            16 => Register::DX,
            32 => Register::EDX,
            _ => Register::RDX,
        };
        self.set_reg(self.accumulator(bits)?, low)?;
        self.set_reg(dx, high)
    }

    fn accumulator(&self, bits: u32) -> Option<Register> {
        Some(match bits {
            8 => Register::AL,
            16 => Register::AX,
            32 => Register::EAX,
            64 => Register::RAX,
            _ => return None,
        })
    }

    /// Operand `op`'s width in bits.
    fn bits(&self, insn: &Instruction, op: u32) -> Option<u32> {
        let bytes = match insn.op_kind(op) {
            OpKind::Register => insn.op_register(op).size(),
            OpKind::Memory => insn.memory_size().size(),
            _ => return None,
        };
        matches!(bytes, 1 | 2 | 4 | 8).then_some(bytes as u32 * 8)
    }

    fn reg(&self, r: Register) -> Option<u64> {
        if !r.is_gpr() {
            return None;
        }
        let v = self.gpr(r.full_register().number());
        Some(if is_high_byte(r) { v >> 8 & 0xff } else { v & mask(r.size() as u32 * 8) })
    }

    fn set_reg(&mut self, r: Register, v: u64) -> Option<()> {
        if !r.is_gpr() {
            return None;
        }
        let slot = &mut self.regs.gpr[r.full_register().number()];
        *slot = match r.size() {
            1 if is_high_byte(r) => *slot & !0xff00 | (v & 0xff) << 8,
            1 => *slot & !0xff | v & 0xff,
            2 => *slot & !0xffff | v & 0xffff,
            4 => v & 0xffff_ffff,
            _ => v,
        };
        Some(())
    }

    /// The linear address of the instruction's memory operand.
    fn address(&self, insn: &Instruction) -> Option<u64> {
        if insn.memory_base() == Register::RIP {
            return Some(insn.memory_displacement64());
        }
        let op = (0..insn.op_count()).find(|&i| insn.op_kind(i) == OpKind::Memory)?;
        let regs = &self.regs;
        insn.virtual_address(op, 0, |r, _, _| {
            if r.is_gpr() && !r.is_gpr64() {
                return None; // 32-bit addressing
            }
            regs.value(r)
        })
    }

    /// Operand `op`'s value, zero-extended.
    fn get(&mut self, cpu: &mut impl BlockCpu, insn: &Instruction, op: u32) -> Option<u64> {
        match insn.op_kind(op) {
            OpKind::Register => self.reg(insn.op_register(op)),
            OpKind::Memory => {
                let va = self.address(insn)?;
                self.load(cpu, va, insn.memory_size().size())
            }
            OpKind::Immediate8
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate64
            | OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32to64 => Some(insn.immediate(op)),
            _ => None,
        }
    }

    /// Write `v` to operand `op` (a register or memory).
    fn set(&mut self, cpu: &mut impl BlockCpu, insn: &Instruction, op: u32, v: u64) -> Option<()> {
        match insn.op_kind(op) {
            OpKind::Register => self.set_reg(insn.op_register(op), v),
            OpKind::Memory => {
                let va = self.address(insn)?;
                self.store(cpu, va, insn.memory_size().size(), v)
            }
            _ => None,
        }
    }

    fn push(&mut self, cpu: &mut impl BlockCpu, v: u64) -> Option<()> {
        let rsp = self.gpr(4).wrapping_sub(8);
        self.store(cpu, rsp, 8, v)?;
        self.regs.gpr[4] = rsp;
        Some(())
    }

    fn pop(&mut self, cpu: &mut impl BlockCpu) -> Option<u64> {
        let v = self.load(cpu, self.gpr(4), 8)?;
        self.regs.gpr[4] = self.gpr(4).wrapping_add(8);
        Some(v)
    }

    /// The guest-physical address of each of `len` bytes at `va`.
    fn bytes(&mut self, cpu: &mut impl BlockCpu, va: u64, len: usize, write: bool) -> Option<[u64; 8]> {
        let end = va.wrapping_add(len as u64 - 1);
        if !(1..=8).contains(&len) || !canonical(va) || !canonical(end) {
            return None;
        }
        let mut pa = [0; 8];
        for (piece, at, n) in crate::vstate::linear::pages(va, len) {
            let first = self.page(cpu, piece, write)?;
            if write {
                if self.code_pages.contains(&(piece & !0xfff)) {
                    return None; // a store to code on the path
                }
                note(&mut self.stored_linear, piece & !0xfff);
            }
            for (i, slot) in pa[at..at + n].iter_mut().enumerate() {
                *slot = first + i as u64;
            }
        }
        Some(pa)
    }

    /// Where the access to `va` goes, if the translation run ahead holds.
    fn page(&mut self, cpu: &mut impl BlockCpu, va: u64, write: bool) -> Option<u64> {
        let linear = va & !0xfff;
        if let Some(&(_, _, pa)) = self.pages.iter().find(|&&(l, w, _)| l == linear && w == write) {
            return Some(pa | (va & 0xfff));
        }
        let access = cpu.data(linear, write)?;
        let walked = access.tables.iter().copied().filter(|&t| t != 0);
        if walked.clone().any(|t| self.stored_pages.contains(&t)) {
            return None;
        }
        walked.for_each(|t| note(&mut self.tables, t));
        let page = access.pa & !0xfff;
        if write {
            if self.tables.contains(&page) {
                return None;
            }
            note(&mut self.stored_pages, page);
        }
        self.pages.push((linear, write, page));
        Some(page | (va & 0xfff))
    }

    fn load(&mut self, cpu: &mut impl BlockCpu, va: u64, len: usize) -> Option<u64> {
        let pa = self.bytes(cpu, va, len, false)?;
        let mut v = 0u64;
        for (i, &a) in pa.iter().take(len).enumerate() {
            let byte = match self.stores.get(&a) {
                Some(&b) => b,
                None => {
                    let mut b = [0u8];
                    cpu.read_phys(a, &mut b)?;
                    b[0]
                }
            };
            v |= u64::from(byte) << (8 * i);
        }
        Some(v)
    }

    fn store(&mut self, cpu: &mut impl BlockCpu, va: u64, len: usize, v: u64) -> Option<()> {
        let pa = self.bytes(cpu, va, len, true)?;
        for (i, &a) in pa.iter().take(len).enumerate() {
            self.stores.insert(a, (v >> (8 * i)) as u8);
        }
        Some(())
    }
}

fn is_setcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Seto | Setno
            | Setb
            | Setae
            | Sete
            | Setne
            | Setbe
            | Seta
            | Sets
            | Setns
            | Setp
            | Setnp
            | Setl
            | Setge
            | Setle
            | Setg
    )
}

fn is_cmovcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Cmovo
            | Cmovno
            | Cmovb
            | Cmovae
            | Cmove
            | Cmovne
            | Cmovbe
            | Cmova
            | Cmovs
            | Cmovns
            | Cmovp
            | Cmovnp
            | Cmovl
            | Cmovge
            | Cmovle
            | Cmovg
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::exact::blocks::tests::Mem;
    use iced_x86::{Decoder, DecoderOptions};

    /// Run `code` ahead with RAX = `a`, RCX = `b` and CF = `cf`: RAX and RFLAGS after it,
    /// and the flags known.
    fn ahead(code: &[u8], a: u64, b: u64, cf: u64) -> (u64, u64, u64) {
        let insn = Decoder::with_ip(64, code, 0x100, DecoderOptions::NONE).decode();
        let mut regs = Regs { rip: 0x100, rflags: 2 | cf, ..Default::default() };
        (regs.gpr[0], regs.gpr[1]) = (a, b);
        let mut m = Machine::new(regs);
        m.exec(&mut Mem::default(), &insn).unwrap_or_else(|| panic!("{insn} not run ahead"));
        (m.regs.gpr[0], m.regs.rflags, m.known)
    }

    /// The host CPU's RAX and RFLAGS after `$asm` (RAX = a, RCX = b, CF = cf).
    macro_rules! host {
        ($asm:literal) => {
            |a: u64, b: u64, cf: u64| -> (u64, u64) {
                let (mut rax, mut flags) = (a, 2 | cf);
                // SAFETY: the instruction reads and writes RAX, RCX and the flags only.
                unsafe {
                    core::arch::asm!("push {f}", "popfq", $asm, "pushfq", "pop {f}",
                        f = inout(reg) flags, inout("rax") rax, in("rcx") b);
                }
                (rax, flags)
            }
        };
    }

    /// Operands at the edges of each width, and some in between.
    fn operands() -> Vec<u64> {
        let mut v = vec![0, 1, 2, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff];
        v.extend([
            0x7fff_ffff_ffff_ffff,
            0x8000_0000_0000_0000,
            u64::MAX,
            0x1234_5678_9abc_def0,
            0x0f0f_0f0f_f0f0_f0f0,
        ]);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..24 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(x);
        }
        v
    }

    #[test]
    fn arithmetic_flags_match_this_cpu() {
        type Host = fn(u64, u64, u64) -> (u64, u64);
        let cases: &[(&str, &[u8], Host)] = &[
            ("add", &[0x48, 0x01, 0xc8], host!("add rax, rcx")),
            ("add32", &[0x01, 0xc8], host!("add eax, ecx")),
            ("add8", &[0x00, 0xc8], host!("add al, cl")),
            ("adc", &[0x48, 0x11, 0xc8], host!("adc rax, rcx")),
            ("sub", &[0x48, 0x29, 0xc8], host!("sub rax, rcx")),
            ("sub16", &[0x66, 0x29, 0xc8], host!("sub ax, cx")),
            ("sbb32", &[0x19, 0xc8], host!("sbb eax, ecx")),
            ("cmp", &[0x48, 0x39, 0xc8], host!("cmp rax, rcx")),
            ("cmp32", &[0x39, 0xc8], host!("cmp eax, ecx")),
            ("and", &[0x48, 0x21, 0xc8], host!("and rax, rcx")),
            ("or32", &[0x09, 0xc8], host!("or eax, ecx")),
            ("xor", &[0x48, 0x31, 0xc8], host!("xor rax, rcx")),
            ("test8", &[0x84, 0xc8], host!("test al, cl")),
            ("neg", &[0x48, 0xf7, 0xd8], host!("neg rax")),
            ("neg32", &[0xf7, 0xd8], host!("neg eax")),
            ("inc", &[0x48, 0xff, 0xc0], host!("inc rax")),
            ("dec32", &[0xff, 0xc8], host!("dec eax")),
            ("imul", &[0x48, 0x0f, 0xaf, 0xc1], host!("imul rax, rcx")),
            ("imul32", &[0x0f, 0xaf, 0xc1], host!("imul eax, ecx")),
            ("shl", &[0x48, 0xd3, 0xe0], host!("shl rax, cl")),
            ("shl32", &[0xd3, 0xe0], host!("shl eax, cl")),
            ("shl8", &[0xd2, 0xe0], host!("shl al, cl")),
            ("shr", &[0x48, 0xd3, 0xe8], host!("shr rax, cl")),
            ("shr16", &[0x66, 0xd3, 0xe8], host!("shr ax, cl")),
            ("sar", &[0x48, 0xd3, 0xf8], host!("sar rax, cl")),
            ("sar32", &[0xd3, 0xf8], host!("sar eax, cl")),
            ("sar8", &[0xd2, 0xf8], host!("sar al, cl")),
            ("cdqe", &[0x48, 0x98], host!("cdqe")),
            ("cwde", &[0x98], host!("cwde")),
            ("movsx8", &[0x48, 0x0f, 0xbe, 0xc1], host!("movsx rax, cl")),
            ("movzx16", &[0x0f, 0xb7, 0xc1], host!("movzx eax, cx")),
            ("movsxd", &[0x48, 0x63, 0xc1], host!("movsxd rax, ecx")),
            ("mov32", &[0x89, 0xc8], host!("mov eax, ecx")),
            ("mov_ah", &[0x88, 0xcc], host!("mov ah, cl")),
            ("xchg32", &[0x91], host!("xchg eax, ecx")),
            ("cmovb32", &[0x0f, 0x42, 0xc1], host!("cmovb eax, ecx")),
            ("setl", &[0x0f, 0x9c, 0xc0], host!("setl al")),
            ("lea", &[0x48, 0x8d, 0x44, 0x08, 0x07], host!("lea rax, [rax + rcx + 7]")),
            ("rol", &[0x48, 0xd3, 0xc0], host!("rol rax, cl")),
            ("rol32", &[0xd3, 0xc0], host!("rol eax, cl")),
            ("rol8", &[0xd2, 0xc0], host!("rol al, cl")),
            ("ror", &[0x48, 0xd3, 0xc8], host!("ror rax, cl")),
            ("ror16", &[0x66, 0xd3, 0xc8], host!("ror ax, cl")),
            ("rol32_15", &[0xc1, 0xc0, 0x0f], host!("rol eax, 15")),
            ("ror_1", &[0x48, 0xd1, 0xc8], host!("ror rax, 1")),
        ];
        let ops = operands();
        for &(name, code, host) in cases {
            for &a in &ops {
                for &b in &ops {
                    // Shift counts: the low bits of CL, and a few past the width.
                    let shift = ["shl", "shr", "sar", "rol", "ror"].iter().any(|p| name.starts_with(p));
                    let b = if shift { b % 70 } else { b };
                    for cf in [0, 1] {
                        let (rax, flags) = host(a, b, cf);
                        let (ahead_rax, ahead_flags, known) = ahead(code, a, b, cf);
                        let what = format!("{name} {a:#x}, {b:#x}, CF {cf}");
                        assert_eq!(ahead_rax, rax, "{what}: result");
                        assert_eq!(ahead_flags & known, flags & known, "{what}: flags (known {known:#x})");
                    }
                }
            }
        }
    }

    #[test]
    fn wide_multiplies_and_divisions_that_cannot_fault() {
        let run = |code: &[u8], rax: u64, rdx: u64, rcx: u64| {
            let insn = Decoder::with_ip(64, code, 0x100, DecoderOptions::NONE).decode();
            let mut regs = Regs { rip: 0x100, ..Default::default() };
            (regs.gpr[0], regs.gpr[2], regs.gpr[1]) = (rax, rdx, rcx);
            let mut m = Machine::new(regs);
            m.exec(&mut Mem::default(), &insn).map(|_| (m.regs.gpr[0], m.regs.gpr[2], m.regs.rflags & (CF | OF)))
        };
        let mul = [0x48, 0xf7, 0xe1]; // mul %rcx
        assert_eq!(run(&mul, u64::MAX, 7, 2), Some((u64::MAX - 1, 1, CF | OF)));
        assert_eq!(run(&mul, 3, 7, 5), Some((15, 0, 0)));
        let div = [0x48, 0xf7, 0xf1]; // div %rcx
        assert_eq!(run(&div, 100, 0, 7), Some((14, 2, 0)));
        assert_eq!(run(&div, 0, 1, 2), Some((1 << 63, 0, 0)));
        assert_eq!(run(&div, 0, 2, 2), None, "quotient too wide: #DE");
        assert_eq!(run(&div, 5, 0, 0), None, "by zero: #DE");
        let idiv32 = [0xf7, 0xf9]; // idiv %ecx
        assert_eq!(
            run(&idiv32, (-7i32) as u32 as u64, u32::MAX as u64, 2),
            Some(((-3i32) as u32 as u64, u32::MAX as u64, 0))
        );
        assert_eq!(run(&idiv32, 0x8000_0000, u32::MAX as u64, u32::MAX as u64), None, "INT_MIN / -1: #DE");
    }

    #[test]
    fn undefined_flags_are_unknown_and_stop_a_branch() {
        let (_, _, known) = ahead(&[0x48, 0x0f, 0xaf, 0xc1], 3, 5, 0);
        assert_eq!(known & (ZF | SF | PF | AF), 0, "imul");
        assert_eq!(known & (CF | OF), CF | OF);
        let (_, _, known) = ahead(&[0x48, 0x21, 0xc8], 3, 5, 0);
        assert_eq!(known & AF, 0, "and: AF undefined");
        let (_, _, known) = ahead(&[0x48, 0xd3, 0xe0], 3, 5, 0);
        assert_eq!(known & OF, 0, "shl by more than 1: OF undefined");
        let (_, flags, known) = ahead(&[0x48, 0xd3, 0xe0], 3, 0, 1);
        assert_eq!((flags & CF, known), (1, STATUS_FLAGS), "shl by 0: nothing changes");
        let (_, _, known) = ahead(&[0xd2, 0xe0], 0x81, 8, 0);
        assert_eq!(known & CF, 0, "shl %cl,%al by 8: CF undefined");
        // A JE after IMUL: ZF unknown, not run ahead.
        let mut m = Machine::new(Regs { rip: 0x100, ..Default::default() });
        m.known &= !ZF;
        let je = Decoder::with_ip(64, &[0x74, 0x10], 0x100, DecoderOptions::NONE).decode();
        assert_eq!(m.exec(&mut Mem::default(), &je), None);
        let jb = Decoder::with_ip(64, &[0x72, 0x10], 0x100, DecoderOptions::NONE).decode();
        assert_eq!(m.exec(&mut Mem::default(), &jb), Some(0x102), "JB reads CF only");
    }

    #[test]
    fn memory_goes_through_the_overlay_and_rip_relative_addresses_resolve() {
        let mut mem = Mem::default();
        mem.put_u64(0x2000, 0x1122_3344_5566_7788);
        let mut m = Machine::new(Regs { rip: 0x1000, ..Default::default() });
        // mov 0x1000(%rip),%rax at 0x1000 (7 bytes): 0x2007... use disp 0xff9 -> 0x2000.
        let load =
            Decoder::with_ip(64, &[0x48, 0x8b, 0x05, 0xf9, 0x0f, 0x00, 0x00], 0x1000, DecoderOptions::NONE).decode();
        assert_eq!(m.exec(&mut mem, &load), Some(0x1007));
        assert_eq!(m.regs.gpr[0], 0x1122_3344_5566_7788);
        // movb $0xaa,(%rbx) with RBX = 0x2001, then the load again: the store is seen.
        m.regs.gpr[3] = 0x2001;
        let store = Decoder::with_ip(64, &[0xc6, 0x03, 0xaa], 0x1007, DecoderOptions::NONE).decode();
        assert_eq!(m.exec(&mut mem, &store), Some(0x100a));
        m.regs.rip = 0x1000;
        m.exec(&mut mem, &load).unwrap();
        assert_eq!(m.regs.gpr[0], 0x1122_3344_5566_aa88);
        assert_eq!(mem.data[&0x2001], 0x77, "the guest's memory unchanged");
        // A store to an unmapped page is not run ahead.
        m.regs.gpr[3] = 0x9000;
        assert_eq!(m.exec(&mut mem, &store), None);
    }
}
