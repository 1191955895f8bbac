//! Just enough x86 decoding for the exact backend: is the instruction at RIP a branch (for
//! "branch instructions retired", event 0xC4), or one the VMM must run itself or count apart
//! while stepping (RDPMC, fences, REP strings, INT n; see `retire.rs`)?

/// What an instruction is, as far as counting goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsnClass {
    /// A branch: Jcc, JMP, CALL, RET, LOOP/JCXZ, INT3/INTO/IRET, SYSCALL-class.
    Branch,
    /// `INT n` (`CD ib`), a branch too.
    SoftInt(u8),
    /// `IRETQ` (`REX.W CF`), a branch too.
    Iret,
    /// SYSENTER, SYSRET, SYSEXIT, and SYSCALL outside 64-bit mode: a branch that changes
    /// privilege level by design.
    SysCall,
    /// `SYSCALL` (`0F 05`) in 64-bit mode, a SYSCALL-class branch the VMM runs while stepping
    /// on hardware hosts (FMASK clears TF: the kernel half would run unstepped).
    Syscall64,
    /// `SYSRETQ` (`REX.W 0F 07`), a SYSCALL-class branch the VMM runs while stepping.
    SysRetq,
    /// `0F 33`.
    Rdpmc,
    /// `SWAPGS` (`0F 01 F8`): no step trap follows it on this host, so the VMM runs it.
    Swapgs,
    /// LFENCE, MFENCE, SFENCE (`0F AE` /5, /6, /7 with a register operand).
    Fence,
    /// A REP/REPNE-prefixed string instruction (MOVS, CMPS, STOS, LODS, SCAS, INS, OUTS).
    RepString,
    /// Anything else: it only counts as an instruction retired.
    Other,
}

impl InsnClass {
    /// Whether the instruction counts as a branch instruction retired.
    pub fn is_branch(self) -> bool {
        matches!(
            self,
            InsnClass::Branch
                | InsnClass::SoftInt(_)
                | InsnClass::Iret
                | InsnClass::SysCall
                | InsnClass::Syscall64
                | InsnClass::SysRetq
        )
    }

    /// Whether the instruction moves between user and kernel mode when it retires (the
    /// calls into the kernel and the returns from it), rather than by faulting.
    pub fn changes_privilege(self) -> bool {
        matches!(
            self,
            InsnClass::SoftInt(_) | InsnClass::Iret | InsnClass::SysCall | InsnClass::Syscall64 | InsnClass::SysRetq
        )
    }
}

/// A decoded instruction: its class and, for the classes the VMM runs itself (INT n,
/// RDPMC, fences), its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// What it is.
    pub class: InsnClass,
    /// Its length in bytes, prefixes included; 0 where the class needs none.
    pub len: u64,
}

/// Longest x86 instruction; reading this many bytes at RIP is always enough.
pub const MAX_INSN_LEN: usize = 15;

/// Classify the instruction starting at `bytes[0]`. `long_mode` decides whether 0x40-0x4F
/// are REX prefixes (64-bit) or INC/DEC (32-bit).
pub fn classify(bytes: &[u8], long_mode: bool) -> InsnClass {
    decode(bytes, long_mode).class
}

/// Decode the instruction starting at `bytes[0]` (see [`classify`]); `len` is 0 where the
/// class needs none.
pub fn decode(bytes: &[u8], long_mode: bool) -> Insn {
    let mut i = 0;
    let mut rep = false;
    let mut other_prefix = false;
    let mut rex_w = false;
    while i < bytes.len() && is_prefix(bytes[i], long_mode) {
        rex_w = long_mode && bytes[i] & 0xf8 == 0x48;
        rep |= matches!(bytes[i], 0xf2 | 0xf3);
        other_prefix |= matches!(bytes[i], 0x66 | 0xf2 | 0xf3);
        i += 1;
    }
    let insn = |class, len: usize| Insn { class, len: (i + len) as u64 };
    let Some(&op) = bytes.get(i) else {
        return insn(InsnClass::Other, 0);
    };
    let class = match op {
        0xcd => match bytes.get(i + 1) {
            Some(&vector) => return insn(InsnClass::SoftInt(vector), 2),
            None => InsnClass::Other,
        },
        0xcf if rex_w => return insn(InsnClass::Iret, 1),
        0x70..=0x7f | 0xe0..=0xe3 | 0xe8 | 0xe9 | 0xeb | 0xc2 | 0xc3 | 0xca | 0xcb | 0xcc..=0xcf => InsnClass::Branch,
        0x9a | 0xea if !long_mode => InsnClass::Branch,
        0x6c..=0x6f | 0xa4..=0xa7 | 0xaa..=0xaf if rep => InsnClass::RepString,
        0x0f => match (bytes.get(i + 1), bytes.get(i + 2)) {
            (Some(0x80..=0x8f), _) => InsnClass::Branch,
            (Some(0x07), _) if rex_w => return insn(InsnClass::SysRetq, 2),
            (Some(0x05), _) if long_mode => return insn(InsnClass::Syscall64, 2),
            (Some(0x05 | 0x07 | 0x34 | 0x35), _) => InsnClass::SysCall,
            (Some(0x33), _) => return insn(InsnClass::Rdpmc, 2),
            (Some(0x01), Some(0xf8)) => return insn(InsnClass::Swapgs, 3),
            (Some(0xae), Some(0xe8..=0xff)) if !other_prefix => return insn(InsnClass::Fence, 3),
            _ => InsnClass::Other,
        },
        // Group 5: /2 CALL near, /3 CALL far, /4 JMP near, /5 JMP far (indirect).
        0xff => match bytes.get(i + 1).map(|modrm| (modrm >> 3) & 7) {
            Some(2..=5) => InsnClass::Branch,
            _ => InsnClass::Other,
        },
        _ => InsnClass::Other,
    };
    insn(class, 0)
}

fn is_prefix(b: u8, long_mode: bool) -> bool {
    matches!(b, 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65)
        || (long_mode && (0x40..=0x4f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use InsnClass::*;

    #[test]
    fn branches_in_long_mode() {
        let cases: &[&[u8]] = &[
            &[0x75, 0xfe],                   // jne rel8
            &[0x0f, 0x84, 0, 0, 0, 0],       // je rel32
            &[0xe8, 0, 0, 0, 0],             // call rel32
            &[0xe9, 0, 0, 0, 0],             // jmp rel32
            &[0xeb, 0xfe],                   // jmp rel8
            &[0xc3],                         // ret
            &[0xf3, 0xc3],                   // repz ret
            &[0xc2, 8, 0],                   // ret imm16
            &[0xcf],                         // iretd
            &[0xe2, 0xfe],                   // loop
            &[0xe3, 0xfe],                   // jrcxz
            &[0xff, 0xd0],                   // call *%rax
            &[0x41, 0xff, 0xe3],             // jmp *%r11
            &[0xff, 0x24, 0xc5, 0, 0, 0, 0], // jmp *table(,%rax,8)
            &[0x3e, 0x74, 0x00],             // ds-prefixed (hint) je
        ];
        for bytes in cases {
            assert_eq!(classify(bytes, true), Branch, "{bytes:02x?}");
        }
    }

    #[test]
    fn non_branches() {
        let cases: &[&[u8]] = &[
            &[0x48, 0x89, 0xc3],       // mov %rax,%rbx
            &[0xff, 0xc0],             // inc %eax (ff /0)
            &[0xff, 0x30],             // push (%rax) (ff /6)
            &[0x0f, 0x1f, 0x44, 0, 0], // nopl
            &[0x90],                   // nop
            &[0x0f, 0x32],             // rdmsr
            &[0xf4],                   // hlt
            &[],
            &[0x66, 0x66],
        ];
        for bytes in cases {
            assert_eq!(classify(bytes, true), Other, "{bytes:02x?}");
        }
    }

    #[test]
    fn system_calls_and_returns_change_privilege() {
        for bytes in [&[0x0f, 0x34][..], &[0x0f, 0x07], &[0x0f, 0x35]] {
            let class = classify(bytes, true);
            assert_eq!(class, SysCall, "{bytes:02x?}");
            assert!(class.is_branch() && class.changes_privilege());
        }
        assert_eq!(classify(&[0x0f, 0x05], false), SysCall, "SYSCALL in 32-bit mode");
        assert_eq!(decode(&[0x0f, 0x05], true), Insn { class: Syscall64, len: 2 }, "the VMM may run SYSCALL");
        assert!(Syscall64.is_branch() && Syscall64.changes_privilege());
        assert!(SoftInt(0x80).changes_privilege() && Iret.changes_privilege());
        assert_eq!(decode(&[0x48, 0x0f, 0x07], true), Insn { class: SysRetq, len: 3 }, "the VMM runs SYSRETQ");
        assert!(SysRetq.is_branch() && SysRetq.changes_privilege());
        assert_eq!(decode(&[0x0f, 0x01, 0xf8], true), Insn { class: Swapgs, len: 3 });
        assert!(!Branch.changes_privilege() && !Other.changes_privilege());
    }

    #[test]
    fn rdpmc_is_recognised_with_prefixes() {
        assert_eq!(classify(&[0x0f, 0x33], true), Rdpmc);
        assert_eq!(classify(&[0x48, 0x0f, 0x33], true), Rdpmc);
    }

    #[test]
    fn instructions_the_vmm_runs_or_counts_apart() {
        let d = |b: &[u8]| decode(b, true);
        assert_eq!(d(&[0xcd, 0x80]), Insn { class: SoftInt(0x80), len: 2 });
        assert!(SoftInt(0x80).is_branch());
        assert_eq!(d(&[0x48, 0xcf]), Insn { class: Iret, len: 2 }, "iretq");
        assert!(Iret.is_branch());
        assert_eq!(d(&[0x0f, 0xae, 0xf0]), Insn { class: Fence, len: 3 }, "mfence");
        assert_eq!(d(&[0x0f, 0xae, 0xe8]), Insn { class: Fence, len: 3 }, "lfence");
        assert_eq!(d(&[0x0f, 0xae, 0xf8]), Insn { class: Fence, len: 3 }, "sfence");
        assert_eq!(d(&[0x0f, 0xae, 0x38]).class, Other, "clflush (%rax) is no fence");
        assert_eq!(d(&[0x66, 0x0f, 0xae, 0xf0]).class, Other, "tpause is no fence");
        assert_eq!(d(&[0x48, 0x0f, 0x33]), Insn { class: Rdpmc, len: 3 });
        for rep in [&[0xf3, 0xa4][..], &[0xf3, 0x48, 0xab], &[0xf2, 0xae], &[0xf3, 0x6e]] {
            assert_eq!(d(rep).class, RepString, "{rep:02x?}");
        }
        assert_eq!(d(&[0xa4]).class, Other, "movsb without REP retires per execution");
    }

    #[test]
    fn rex_is_inc_dec_in_32_bit_mode() {
        // 0x48 is `dec %eax` in 32-bit mode, so 48 c3 is dec + ret: the first insn is no branch.
        assert_eq!(classify(&[0x48, 0xc3], false), Other);
        assert_eq!(classify(&[0x48, 0xc3], true), Branch);
        assert_eq!(classify(&[0xea, 0, 0, 0, 0, 0x08, 0], false), Branch); // ljmp
    }
}
