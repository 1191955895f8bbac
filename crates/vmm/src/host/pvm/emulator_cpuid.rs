//! What kvm_pvm's CPL0 emulator cannot run, kept from the guest: a stock kernel picks its
//! instructions from CPUID (at boot and in its alternatives), so it must never see CX16
//! (cmpxchg16b, which SLUB uses), XSAVE and everything AVX/AVX-512/AMX (xsave/xrstor, VEX),
//! PCID/INVPCID, FSGSBASE, PKU, LA57, SMAP (stac/clac) and SMEP, UMIP, RDRAND/RDSEED,
//! RDTSCP/RDPID, SERIALIZE, MONITOR/MWAIT, the AES/SHA/GFNI instructions, or ERMS/FSRM (so
//! kernel copies use `rep movsq` rather than eight times as many emulated `rep movsb`
//! iterations). What remains is one plausible CPU: the family-6 model-0x17 (Penryn) the
//! Intel identity names had none of these either.
//!
//! kvm_pvm answers leaves 1, 7, 0xD and 0x80000001 from the hardware whatever
//! KVM_SET_CPUID2 says (measured), so a Linux guest is also told to ignore those features
//! (`clearcpuid=`). And it accepts the speculation-control MSRs even where CPUID does not
//! advertise them: [`UNADVERTISED_MSRS`] #GP as on hardware (the MSR filter sends them here).

use crate::arch::x86_64::identity::CpuVendor;
use kvm_bindings::kvm_cpuid_entry2;

/// IA32_SPEC_CTRL, IA32_PRED_CMD, IA32_FLUSH_CMD: #GP, as CPUID no longer advertises them.
pub const UNADVERTISED_MSRS: [u32; 3] = [0x48, 0x49, 0x10b];

/// CPUID.7.0:EDX: IBRS/IBPB (SPEC_CTRL, PRED_CMD), STIBP, L1D_FLUSH (FLUSH_CMD), ARCH_CAPABILITIES
/// and SSBD.
#[cfg(test)]
const LEAF7_EDX_SPECULATION: u32 = 1 << 26 | 1 << 27 | 1 << 28 | 1 << 29 | 1 << 31;
/// CPUID.0x80000008:EBX: AMD's IBPB, IBRS, STIBP, SSBD, VIRT_SSBD.
const LEAF_8000_0008_EBX_SPECULATION: u32 = 1 << 12 | 1 << 14 | 1 << 15 | 1 << 24 | 1 << 25;
/// CPUID.0x80000008:EBX bit 2, XSAVEERPTR: FXSAVE always saves the x87 error pointers (Zen 2
/// and later). Without it Linux works around the leak of older AMD CPUs with `fnclex; emms;
/// fildl` before each return to user mode, and this host's emulator stops on `fildl`.
const LEAF_8000_0008_EBX_XSAVEERPTR: u32 = 1 << 2;
/// CPUID.1:ECX bits hidden: SSE3 (0), PCLMULQDQ (1), MONITOR (3), VMX (5), SMX (6), EST (7),
/// TM2 (8), SSSE3 (9), FMA (12), CX16 (13), PCID (17), DCA (18), SSE4.1 (19), SSE4.2 (20),
/// MOVBE (22), POPCNT (23), AES (25), XSAVE (26), OSXSAVE (27), AVX (28), F16C (29),
/// RDRAND (30). (The emulator rejects the SIMD ones; the kernel runs them only in
/// kernel_fpu sections, which they would take into the emulator.)
const LEAF1_ECX_HIDDEN: u32 = 1 << 0
    | 1 << 1
    | 1 << 3
    | 1 << 5
    | 1 << 6
    | 1 << 7
    | 1 << 8
    | 1 << 12
    | 1 << 13
    | 1 << 9
    | 1 << 17
    | 1 << 18
    | 1 << 19
    | 1 << 20
    | 1 << 22
    | 1 << 23
    | 1 << 25
    | 1 << 26
    | 1 << 27
    | 1 << 28
    | 1 << 29
    | 1 << 30;
/// CPUID.1:EDX bits hidden: ACPI thermal (22), TM (29), PBE (31).
const LEAF1_EDX_HIDDEN: u32 = 1 << 22 | 1 << 29 | 1 << 31;
/// CPUID.7.0:EBX bits kept: none. Leaf 7 is hidden whole: EBX (FSGSBASE, BMI1/2, AVX2,
/// SMEP, ERMS, INVPCID, RTM, AVX-512, RDSEED, ADX, SMAP, SHA, ...), ECX (PKU, LA57, UMIP,
/// RDPID, GFNI, ...) and EDX (FSRM, SERIALIZE, AMX, the speculation controls): the kernel
/// needs none of them and the emulator's support of the rest is unknown.
const LEAF7_EBX_KEPT: u32 = 0;
/// CPUID.0x80000001:ECX bits hidden: LZCNT (5), SSE4A (6), misaligned SSE (7), 3DNow! prefetch (8),
/// XOP (11), SKINIT (12), LWP (15), FMA4 (16), TBM (21), MWAITX (29).
const LEAF_8000_0001_ECX_HIDDEN: u32 =
    1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 11 | 1 << 12 | 1 << 15 | 1 << 16 | 1 << 21 | 1 << 29;
/// CPUID.0x80000001:EDX bits hidden: MMX extensions (22), FXSR optimizations (25),
/// RDTSCP (27), 3DNow! (30, 31).
const LEAF_8000_0001_EDX_HIDDEN: u32 = 1 << 22 | 1 << 25 | 1 << 27 | 1 << 30 | 1 << 31;

/// Hide from `entries` (already given `vendor`'s identity) what the emulator cannot run and
/// the speculation controls it does not implement.
pub fn hide(entries: &mut [kvm_cpuid_entry2], vendor: CpuVendor) {
    for e in entries.iter_mut() {
        match e.function {
            1 => {
                e.ecx &= !LEAF1_ECX_HIDDEN;
                e.edx &= !LEAF1_EDX_HIDDEN;
            }
            7 if e.index == 0 => [e.ebx, e.ecx, e.edx] = [e.ebx & LEAF7_EBX_KEPT, 0, 0],
            // Subleaf 1 (AVX-VNNI, AVX512_BF16, LAM, ...), XSAVE state (0xD: no XSAVE), Intel PT,
            // SGX.
            7 | 0xd | 0x12 | 0x14 => [e.eax, e.ebx, e.ecx, e.edx] = [0; 4],
            0x8000_0001 => {
                e.ecx &= !LEAF_8000_0001_ECX_HIDDEN;
                e.edx &= !LEAF_8000_0001_EDX_HIDDEN;
            }
            0x8000_0008 => {
                e.ebx &= !LEAF_8000_0008_EBX_SPECULATION;
                if vendor == CpuVendor::Amd {
                    e.ebx |= LEAF_8000_0008_EBX_XSAVEERPTR;
                }
            }
            _ => {}
        }
    }
}

/// Features Linux could pick that this host's CPL0 emulator cannot run (or that the kernel
/// would use in ways it cannot run), by their /proc/cpuinfo names, most important first:
/// (name, leaf, subleaf, register 0-3 for EAX-EDX, bit). `xsave` takes AVX, AVX2, AVX-512,
/// FMA and F16C with it (Linux's CPUID dependencies).
const LINUX_HIDDEN: [(&str, u32, u32, usize, u32); 39] = [
    ("cx16", 1, 0, 2, 13),
    ("xsave", 1, 0, 2, 26),
    ("popcnt", 1, 0, 2, 23),
    ("smap", 7, 0, 1, 20),
    ("fsgsbase", 7, 0, 1, 0),
    ("rdrand", 1, 0, 2, 30),
    ("rdseed", 7, 0, 1, 18),
    ("pcid", 1, 0, 2, 17),
    ("invpcid", 7, 0, 1, 10),
    ("pku", 7, 0, 2, 3),
    ("la57", 7, 0, 2, 16),
    ("smep", 7, 0, 1, 7),
    ("umip", 7, 0, 2, 2),
    ("rdtscp", 0x8000_0001, 0, 3, 27),
    ("rdpid", 7, 0, 2, 22),
    ("erms", 7, 0, 1, 9),
    ("fsrm", 7, 0, 3, 4),
    ("serialize", 7, 0, 3, 14),
    ("movbe", 1, 0, 2, 22),
    ("sse4_2", 1, 0, 2, 20),
    ("aes", 1, 0, 2, 25),
    ("pclmulqdq", 1, 0, 2, 1),
    ("sha_ni", 7, 0, 1, 29),
    ("gfni", 7, 0, 2, 8),
    ("vaes", 7, 0, 2, 9),
    ("vpclmulqdq", 7, 0, 2, 10),
    ("sse4_1", 1, 0, 2, 19),
    ("ssse3", 1, 0, 2, 9),
    ("pni", 1, 0, 2, 0),
    ("abm", 0x8000_0001, 0, 2, 5),
    ("bmi1", 7, 0, 1, 3),
    ("bmi2", 7, 0, 1, 8),
    ("adx", 7, 0, 1, 19),
    ("hle", 7, 0, 1, 4),
    ("rtm", 7, 0, 1, 11),
    ("waitpkg", 7, 0, 2, 5),
    ("movdiri", 7, 0, 2, 27),
    ("movdir64b", 7, 0, 2, 28),
    ("monitor", 1, 0, 2, 3),
];

/// The speculation controls whose MSRs #GP here (`UNADVERTISED_MSRS`): (name, leaf, subleaf,
/// register, bit) of SPEC_CTRL, STIBP, SSBD and AMD's IBRS/STIBP/SSBD. From any of them Linux
/// sets its own "MSR SPEC_CTRL is implemented" flag before `clearcpuid=` applies, and reads
/// and writes IA32_SPEC_CTRL by that flag alone: clearing the flag is what keeps it away.
const LINUX_SPECULATION: [(&str, u32, u32, usize, u32); 7] = [
    ("spec_ctrl", 7, 0, 3, 26),
    ("intel_stibp", 7, 0, 3, 27),
    ("spec_ctrl_ssbd", 7, 0, 3, 31),
    ("amd_ibrs", 0x8000_0008, 0, 1, 14),
    ("amd_stibp", 0x8000_0008, 0, 1, 15),
    ("amd_ssbd", 0x8000_0008, 0, 1, 24),
    ("virt_ssbd", 0x8000_0008, 0, 1, 25),
];

/// Linux's X86_FEATURE_MSR_SPEC_CTRL (7*32+16 since 4.18), a flag of its own with no name.
const LINUX_MSR_SPEC_CTRL: u32 = 7 * 32 + 16;

/// Linux's number for a CPUID bit: its capability word (arch/x86/include/asm/cpufeatures.h,
/// the hardware-defined words, stable across versions) times 32 plus the bit.
fn linux_feature_number(leaf: u32, reg: usize, bit: u32) -> Option<u32> {
    let word = match (leaf, reg) {
        (1, 3) => 0,
        (0x8000_0001, 3) => 1,
        (1, 2) => 4,
        (0x8000_0001, 2) => 6,
        (7, 1) => 9,
        (7, 2) => 16,
        (7, 3) => 18,
        _ => return None,
    };
    Some(word * 32 + bit)
}

/// Linux keeps at most this many characters of `clearcpuid=`'s value (its buffer is 128).
const CLEARCPUID_MAX: usize = 127;

/// This CPU's own leaves 1, 7 and 0x80000001, as the CPUID instruction answers here: what
/// this host's kvm_pvm shows a guest in those leaves comes from the hardware (measured),
/// not from KVM's supported CPUID (which lacks e.g. XSAVE here while the guest sees it).
pub fn hardware_leaves() -> Vec<kvm_cpuid_entry2> {
    [(1u32, 0u32), (7, 0), (0x8000_0001, 0)]
        .into_iter()
        .map(|(function, index)| {
            // SAFETY: CPUID is available on every x86-64 CPU and only reads registers.
            #[allow(unused_unsafe)]
            let r = unsafe { std::arch::x86_64::__cpuid_count(function, index) };
            kvm_cpuid_entry2 { function, index, eax: r.eax, ebx: r.ebx, ecx: r.ecx, edx: r.edx, ..Default::default() }
        })
        .collect()
}

/// `clearcpuid=...` for a Linux guest: the features [`hide`] hides come back in the leaves
/// kvm_pvm answers from the hardware, so Linux is told to ignore the ones `host` has
/// ([`hardware_leaves`] and KVM's supported CPUID). Only those, most
/// important first, then Linux's SPEC_CTRL flag where the host has a speculation control,
/// within what Linux reads; by number, which Linux takes (and prints by name where the flag
/// has one) and which fits three times as many as names do.
pub fn linux_clearcpuid(host: &[kvm_cpuid_entry2]) -> Option<String> {
    let has = |leaf: u32, sub: u32, reg: usize, bit: u32| {
        host.iter()
            .filter(|e| e.function == leaf && (e.index == sub || leaf != 7))
            .any(|e| [e.eax, e.ebx, e.ecx, e.edx][reg] & 1 << bit != 0)
    };
    let speculation = LINUX_SPECULATION.iter().any(|f| has(f.1, f.2, f.3, f.4));
    let numbers = LINUX_HIDDEN
        .iter()
        .filter(|f| has(f.1, f.2, f.3, f.4))
        .filter_map(|&(_, leaf, _, reg, bit)| linux_feature_number(leaf, reg, bit))
        .chain(speculation.then_some(LINUX_MSR_SPEC_CTRL));
    let mut value = String::new();
    for number in numbers {
        let item = if value.is_empty() { number.to_string() } else { format!(",{number}") };
        if value.len() + item.len() > CLEARCPUID_MAX {
            break;
        }
        value.push_str(&item);
    }
    (!value.is_empty()).then(|| format!("clearcpuid={value}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(function: u32, regs: [u32; 4]) -> kvm_cpuid_entry2 {
        let [eax, ebx, ecx, edx] = regs;
        kvm_cpuid_entry2 { function, eax, ebx, ecx, edx, ..Default::default() }
    }

    #[test]
    fn the_speculation_controls_are_not_advertised() {
        let mut e = vec![
            kvm_cpuid_entry2 { function: 7, edx: u32::MAX, ..Default::default() },
            leaf(0x8000_0008, [0, u32::MAX, 0, 0]),
        ];
        hide(&mut e, CpuVendor::Intel);
        assert_eq!(e[0].edx & LEAF7_EDX_SPECULATION, 0, "SPEC_CTRL, PRED_CMD, FLUSH_CMD");
        assert_eq!(e[1].ebx & LEAF_8000_0008_EBX_SPECULATION, 0);
    }

    #[test]
    fn an_amd_identity_saves_the_x87_error_pointers() {
        let mut e = vec![leaf(0x8000_0008, [0; 4])];
        hide(&mut e, CpuVendor::Amd);
        assert_ne!(e[0].ebx & LEAF_8000_0008_EBX_XSAVEERPTR, 0, "a Zen 4 saves them");
    }

    #[test]
    fn linux_is_told_to_ignore_what_the_host_has_most_important_first() {
        // This host's leaves as its kvm_pvm answers them (measured).
        let host = vec![
            leaf(1, [0, 0, 0xf7f8_9203, 0x1f8b_fbff]),
            kvm_cpuid_entry2 { function: 7, ebx: 0xd19f_63eb, ecx: 0x804, edx: 0xbc00_0400, ..Default::default() },
            leaf(0x8000_0001, [0, 0, 1, 0x2010_0800]),
        ];
        let line = linux_clearcpuid(&host).unwrap();
        // xsave (4*32+26), popcnt (4*32+23), smap (9*32+20), fsgsbase (9*32+0), rdrand
        // (4*32+30), rdseed (9*32+18), smep (9*32+7), umip (16*32+2), erms (9*32+9).
        assert!(line.starts_with("clearcpuid=154,151,308,288,158,306,295,514,297,"), "{line}");
        let numbers: Vec<u32> = line["clearcpuid=".len()..].split(',').map(|n| n.parse().unwrap()).collect();
        assert!(!numbers.contains(&(4 * 32 + 13)), "this host shows no CX16: {line}");
        assert!(!numbers.contains(&(4 * 32 + 17)) && !numbers.contains(&(32 + 27)), "no PCID, RDTSCP: {line}");
        assert_eq!(numbers.last(), Some(&LINUX_MSR_SPEC_CTRL), "SPEC_CTRL, and all before it fit: {line}");
        assert!(line.len() - "clearcpuid=".len() <= CLEARCPUID_MAX, "{line}");
        let without_speculation = vec![leaf(1, [0, 0, 1 << 26, 0])];
        assert_eq!(linux_clearcpuid(&without_speculation).as_deref(), Some("clearcpuid=154"));
        assert_eq!(linux_clearcpuid(&[leaf(1, [0; 4])]), None);
    }

    #[test]
    fn what_the_host_emulator_cannot_run_is_hidden() {
        let mut e = vec![
            leaf(1, [0, 0, u32::MAX, u32::MAX]),
            kvm_cpuid_entry2 {
                function: 7,
                index: 0,
                ebx: u32::MAX,
                ecx: u32::MAX,
                edx: u32::MAX,
                ..Default::default()
            },
            kvm_cpuid_entry2 { function: 7, index: 1, eax: u32::MAX, ..Default::default() },
            leaf(0xd, [7, 0x340, 0x340, 0]),
            leaf(0x8000_0001, [0, 0, u32::MAX, u32::MAX]),
        ];
        for vendor in [CpuVendor::Intel, CpuVendor::Amd] {
            hide(&mut e, vendor);
            let (l1, l7, l7_1) = (e[0], e[1], e[2]);
            for (bit, name) in [(13, "CX16"), (26, "XSAVE"), (28, "AVX"), (17, "PCID"), (30, "RDRAND")] {
                assert_eq!(l1.ecx & 1 << bit, 0, "{name}");
            }
            assert_eq!(l1.ecx & (1 << 23 | 1 << 20), 0, "POPCNT, SSE4.2");
            assert_ne!(l1.edx & 1 << 25, 0, "SSE stays");
            for (bit, name) in [(0, "FSGSBASE"), (5, "AVX2"), (7, "SMEP"), (9, "ERMS"), (10, "INVPCID"), (20, "SMAP")] {
                assert_eq!(l7.ebx & 1 << bit, 0, "{name}");
            }
            assert_eq!(l7.ebx, LEAF7_EBX_KEPT);
            assert_eq!([l7.ecx, l7.edx], [0, 0], "PKU, LA57, UMIP, FSRM, SERIALIZE, ...");
            assert_eq!(l7_1.eax, 0);
            assert_eq!(e[3].eax, 0, "no XSAVE state components");
            assert_eq!(e[4].edx & 1 << 27, 0, "RDTSCP");
            assert_ne!(e[4].edx & 1 << 29, 0, "long mode stays");
        }
    }
}
