//! Just enough x86 decoding for the exact backend: is the instruction at RIP a branch (for
//! "branch instructions retired", event 0xC4) or RDPMC (emulated in exact mode)?

/// What an instruction is, as far as counting goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsnClass {
    /// A branch: Jcc, JMP, CALL, RET, LOOP/JCXZ, INT/IRET, SYSCALL-class.
    Branch,
    /// `0F 33`.
    Rdpmc,
    Other,
}

/// Longest x86 instruction; reading this many bytes at RIP is always enough.
pub const MAX_INSN_LEN: usize = 15;

/// Classify the instruction starting at `bytes[0]`. `long_mode` decides whether 0x40-0x4F
/// are REX prefixes (64-bit) or INC/DEC (32-bit).
pub fn classify(bytes: &[u8], long_mode: bool) -> InsnClass {
    let mut i = 0;
    while i < bytes.len() && is_prefix(bytes[i], long_mode) {
        i += 1;
    }
    let Some(&op) = bytes.get(i) else {
        return InsnClass::Other;
    };
    match op {
        0x70..=0x7f | 0xe0..=0xe3 | 0xe8 | 0xe9 | 0xeb | 0xc2 | 0xc3 | 0xca | 0xcb | 0xcc..=0xcf => InsnClass::Branch,
        0x9a | 0xea if !long_mode => InsnClass::Branch,
        0x0f => match bytes.get(i + 1) {
            Some(0x80..=0x8f | 0x05 | 0x07 | 0x34 | 0x35) => InsnClass::Branch,
            Some(0x33) => InsnClass::Rdpmc,
            _ => InsnClass::Other,
        },
        // Group 5: /2 CALL near, /3 CALL far, /4 JMP near, /5 JMP far (indirect).
        0xff => match bytes.get(i + 1).map(|modrm| (modrm >> 3) & 7) {
            Some(2..=5) => InsnClass::Branch,
            _ => InsnClass::Other,
        },
        _ => InsnClass::Other,
    }
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
            &[0x48, 0xcf],                   // iretq
            &[0xe2, 0xfe],                   // loop
            &[0xe3, 0xfe],                   // jrcxz
            &[0xff, 0xd0],                   // call *%rax
            &[0x41, 0xff, 0xe3],             // jmp *%r11
            &[0xff, 0x24, 0xc5, 0, 0, 0, 0], // jmp *table(,%rax,8)
            &[0x0f, 0x05],                   // syscall
            &[0xcd, 0x80],                   // int $0x80
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
    fn rdpmc_is_recognised_with_prefixes() {
        assert_eq!(classify(&[0x0f, 0x33], true), Rdpmc);
        assert_eq!(classify(&[0x48, 0x0f, 0x33], true), Rdpmc);
    }

    #[test]
    fn rex_is_inc_dec_in_32_bit_mode() {
        // 0x48 is `dec %eax` in 32-bit mode, so 48 c3 is dec + ret: the first insn is no branch.
        assert_eq!(classify(&[0x48, 0xc3], false), Other);
        assert_eq!(classify(&[0x48, 0xc3], true), Branch);
        assert_eq!(classify(&[0xea, 0, 0, 0, 0, 0x08, 0], false), Branch); // ljmp
    }
}
