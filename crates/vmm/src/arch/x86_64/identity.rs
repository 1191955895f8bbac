//! The CPU the guest is told it runs on: one consistent identity whatever the host (the
//! machines here are Intel Xeon or AMD EPYC). A stock guest picks its PMU driver from the
//! vendor and family, so leaves 0x0, 0x1, 0xA, 0x80000001 and 0x80000022 must agree with the
//! vPMU: Intel's architectural PMU under `GenuineIntel`, and no AMD PMU bit beside it. Also
//! hidden: KVM paravirtual features (their hypercalls hang on kvm_pvm). What a host's
//! emulator cannot run is the host's to hide (`HostCaps::limit_cpuid`).

use kvm_bindings::kvm_cpuid_entry2;
use serde::Serialize;

/// `--cpu-vendor`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuVendor {
    /// GenuineIntel, family 6 model 0x17 (Core 2, "Penryn"): the first with architectural
    /// perfmon version 2, the version the vPMU exposes.
    #[default]
    Intel,
    /// AuthenticAMD, family 0x19 model 0x11 (Zen 4, "Genoa"): the AMD vPMU with PerfCtrExtCore
    /// and PerfMonV2, as that family has.
    Amd,
}

impl CpuVendor {
    /// The 12-byte vendor string as leaf 0 returns it in EBX, EDX, ECX.
    pub fn vendor_regs(self) -> [u32; 3] {
        let name: &[u8; 12] = match self {
            CpuVendor::Intel => b"GenuineIntel",
            CpuVendor::Amd => b"AuthenticAMD",
        };
        let word = |i: usize| u32::from_le_bytes(name[i..i + 4].try_into().expect("4 bytes"));
        [word(0), word(4), word(8)]
    }

    /// Leaf 1 EAX: stepping, model, family, extended model and family.
    fn signature(self) -> u32 {
        match self {
            CpuVendor::Intel => 0x0001_067a, // family 6, model 0x17, stepping 10
            CpuVendor::Amd => 0x00a1_0f10,   // family 0xf + 0xa, model 0x11, stepping 0
        }
    }

    /// The vPMU that goes with this identity.
    pub fn pmu_vendor(self) -> pmu::Vendor {
        match self {
            CpuVendor::Intel => pmu::Vendor::Intel,
            CpuVendor::Amd => pmu::Vendor::Amd,
        }
    }
}

/// CPUID.0x80000001:ECX: AMD core, northbridge and L2 performance counter extensions,
/// and the performance timestamp counter.
const LEAF_8000_0001_ECX_AMD_PMU: u32 = 1 << 23 | 1 << 24 | 1 << 27 | 1 << 28;

/// (first MSR, count) of every MSR either vendor's PMU has, at the most counters: Intel's
/// PMCs, EVENTSELs, fixed counters, PERF_CAPABILITIES, FIXED_CTR_CTRL..GLOBAL_OVF_CTRL,
/// full-width PMCs, PEBS_ENABLE and DS_AREA; AMD's legacy and extended counters and
/// PerfMonV2's global registers. The vPMU decides them all, so another vendor's or an
/// absent counter's MSR #GPs as on hardware.
pub const PMU_MSR_RANGES: [(u32, u32); 11] = [
    (0xc1, 8),
    (0x186, 8),
    (0x309, 3),
    (0x345, 1),
    (0x38d, 4),
    (0x4c1, 8),
    (0x3f1, 1),
    (0x600, 1),
    (0xc001_0000, 8),
    (0xc001_0200, 12),
    (0xc000_0300, 4),
];

/// The last-branch record of the Intel identity's Core 2 (4 deep): LASTBRANCH_0..3_FROM_IP,
/// _TO_IP and LASTBRANCH_TOS, which Linux's driver resets on every CPU. The VMM answers
/// them (reads 0: no branch recorded, writes taken), so that no host #GPs them (kvm_amd
/// has no Intel LBR): the guest sees an LBR that records nothing.
pub const LBR_MSR_RANGES: [(u32, u32); 3] = [(0x40, 4), (0x60, 4), (0x1c9, 1)];

/// Whether `msr` is one of [`LBR_MSR_RANGES`].
pub fn is_lbr_msr(msr: u32) -> bool {
    LBR_MSR_RANGES.iter().any(|&(base, n)| (base..base + n).contains(&msr))
}

/// Give `entries` the identity of `vendor`: its vendor string and signature, no PMU bits
/// (the vPMU sets its own), no KVM paravirtual features; the host's features otherwise as
/// KVM offers them.
pub fn apply(entries: &mut [kvm_cpuid_entry2], vendor: CpuVendor) {
    for e in entries.iter_mut() {
        match e.function {
            0 => [e.ebx, e.edx, e.ecx] = vendor.vendor_regs(),
            // AMD repeats the vendor string here; Intel leaves it zero.
            0x8000_0000 => {
                [e.ebx, e.edx, e.ecx] = match vendor {
                    CpuVendor::Amd => vendor.vendor_regs(),
                    CpuVendor::Intel => [0; 3],
                }
            }
            1 => e.eax = vendor.signature(),
            0x4000_0001 => [e.eax, e.ebx, e.ecx, e.edx] = [0; 4],
            0x8000_0001 => e.ecx &= !LEAF_8000_0001_ECX_AMD_PMU,
            0x8000_0022 => [e.eax, e.ebx, e.ecx, e.edx] = [0; 4],
            _ => {}
        }
    }
}

/// What the guest was told it runs on, for `--stats` and `--json`.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct CpuReport {
    /// Leaf 0's vendor string.
    pub vendor: String,
    /// The PMU the guest has, or why it has none.
    pub pmu: String,
}

/// The vendor string of leaf 0 in `entries` (for `--stats`).
pub fn vendor_string(entries: &[kvm_cpuid_entry2]) -> String {
    let Some(e) = entries.iter().find(|e| e.function == 0) else { return String::new() };
    [e.ebx, e.edx, e.ecx].iter().flat_map(|r| r.to_le_bytes()).map(char::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(function: u32, regs: [u32; 4]) -> kvm_cpuid_entry2 {
        let [eax, ebx, ecx, edx] = regs;
        kvm_cpuid_entry2 { function, eax, ebx, ecx, edx, ..Default::default() }
    }

    /// What an AMD EPYC host's KVM reports, in the leaves that matter.
    fn amd_host() -> Vec<kvm_cpuid_entry2> {
        let mut v = vec![
            leaf(0, [0x10, 0, 0, 0]),
            leaf(1, [0x00a0_0f11, 0, 0, 0]),
            leaf(7, [0, 0, 0, u32::MAX]),
            leaf(0x4000_0001, [0x01ff_ffff, 0, 0, 0]),
            leaf(0x8000_0001, [0, 0, u32::MAX, 0]),
            leaf(0x8000_0008, [0, u32::MAX, 0, 0]),
            leaf(0x8000_0022, [1, 6, 0, 0]),
        ];
        [v[0].ebx, v[0].edx, v[0].ecx] = CpuVendor::Amd.vendor_regs();
        v.truncate(7);
        v
    }

    #[test]
    fn an_amd_host_looks_intel_with_no_amd_pmu_bit() {
        let mut e = amd_host();
        assert_eq!(vendor_string(&e), "AuthenticAMD");
        apply(&mut e, CpuVendor::Intel);
        assert_eq!(vendor_string(&e), "GenuineIntel");
        let get = |f: u32| *e.iter().find(|x| x.function == f).unwrap();
        let sig = get(1).eax;
        assert_eq!((sig >> 8 & 0xf, (sig >> 4 & 0xf) | (sig >> 12 & 0xf0)), (6, 0x17), "family 6 model 0x17");
        assert_eq!(get(0x8000_0001).ecx & 1 << 23, 0, "no PerfCtrExtCore");
        assert_eq!([get(0x8000_0022).eax, get(0x8000_0022).ebx], [0, 0], "no PerfMonV2");
        assert_eq!(get(0x4000_0001).eax, 0, "no KVM paravirtual feature");
    }

    #[test]
    fn a_hardware_host_keeps_its_features_and_loses_only_pmu_and_kvm_bits() {
        let mut e = amd_host();
        e[1].ecx = 1 << 13 | 1 << 26; // CX16, XSAVE
        let before = e.clone();
        apply(&mut e, CpuVendor::Intel);
        assert_eq!(vendor_string(&e), "GenuineIntel");
        assert_eq!(e[1].ecx, before[1].ecx, "leaf 1 features pass through");
        let ext = e.iter().find(|l| l.function == 0x8000_0001).unwrap();
        let ext_before = before.iter().find(|l| l.function == 0x8000_0001).unwrap();
        assert_eq!(ext.ecx, ext_before.ecx & !LEAF_8000_0001_ECX_AMD_PMU, "only the AMD PMU bits go");
    }

    #[test]
    fn amd_identity() {
        let mut e = amd_host();
        apply(&mut e, CpuVendor::Amd);
        assert_eq!(vendor_string(&e), "AuthenticAMD");
        let sig = e[1].eax;
        assert_eq!((sig >> 8 & 0xf) + (sig >> 20 & 0xff), 0x19, "family 0x19");
        assert_eq!((sig >> 4 & 0xf) | (sig >> 12 & 0xf0), 0x11, "model 0x11");
        assert_eq!(CpuVendor::Amd.pmu_vendor(), pmu::Vendor::Amd);
    }
}
