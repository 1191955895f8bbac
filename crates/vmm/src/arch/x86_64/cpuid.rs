//! Guest CPUID: the host's supported leaves, with per-vCPU APIC IDs and the virtual PMU's
//! leaf 0xA (generated from the model, never the host's).

use crate::guest_abi::CpuidEntry;
use kvm_bindings::{kvm_cpuid_entry2, CpuId, KVM_CPUID_FLAG_SIGNIFCANT_INDEX};
use pmu::PmuCaps;
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemoryMmap};

/// Bytes of one entry of the in-memory table (`struct perfvm_cpuid_entry`).
const TABLE_ENTRY_SIZE: usize = std::mem::size_of::<CpuidEntry>();
/// Most entries a vCPU's one-page table holds.
pub const TABLE_MAX_ENTRIES: usize = 4096 / TABLE_ENTRY_SIZE;

/// CPUID.1:ECX.PDCM: IA32_PERF_CAPABILITIES exists.
const LEAF1_ECX_PDCM: u32 = 1 << 15;
/// CPUID.1:EDX.DS and CPUID.1:ECX.DTES64: the debug store (IA32_DS_AREA) with its 64-bit
/// layout; advertised exactly when the PMU has software PEBS.
const LEAF1_EDX_DS: u32 = 1 << 21;
const LEAF1_ECX_DTES64: u32 = 1 << 2;
/// CPUID.6:ECX bit 0 (hardware coordination feedback, APERF/MPERF) — perf's msr driver
/// probes those MSRs when it is set; we do not route them, so keep it clear.
const LEAF6_ECX_APERFMPERF: u32 = 1 << 0;

/// CPUID for vCPU `index` (APIC ID == index), with the PMU described by `pmu` (None: no PMU,
/// architectural perfmon version 0), within what `host` can run (`HostCaps::limit_cpuid`).
pub fn for_vcpu(
    supported: &CpuId,
    index: u32,
    pmu: Option<&PmuCaps>,
    vendor: crate::arch::x86_64::identity::CpuVendor,
    host: &crate::host::HostCaps,
) -> CpuId {
    let mut entries: Vec<kvm_cpuid_entry2> = supported.as_slice().to_vec();
    // The PMU leaves exist whatever the host reports (zero where there is no such PMU).
    for function in [0xa, 0x8000_0022] {
        if !entries.iter().any(|e| e.function == function) {
            entries.push(kvm_cpuid_entry2 { function, ..Default::default() });
        }
    }
    // (The hypervisor leaves 0x4000_00xx are not basic leaves.)
    let max_basic = entries.iter().filter(|e| e.function < 0x4000_0000).map(|e| e.function).max().unwrap_or(0);
    for entry in &mut entries {
        match entry.function {
            0 => entry.eax = entry.eax.max(0xa).max(max_basic),
            1 => {
                entry.ebx = (entry.ebx & 0x00ff_ffff) | (index << 24);
                // PMU bits: none unless the vPMU sets them below.
                entry.ecx &= !(LEAF1_ECX_PDCM | LEAF1_ECX_DTES64);
                entry.edx &= !LEAF1_EDX_DS;
            }
            6 => entry.ecx &= !LEAF6_ECX_APERFMPERF,
            0xb | 0x1f => entry.edx = index,
            0xa | 0x8000_0022 => [entry.eax, entry.ebx, entry.ecx, entry.edx] = [0; 4],
            // An AMD PMU lives in leaf 0x80000022: the extended range must reach it.
            0x8000_0000 if pmu.is_some_and(|p| p.vendor() == pmu::Vendor::Amd) => {
                entry.eax = entry.eax.max(0x8000_0022)
            }
            _ => {}
        }
    }
    crate::arch::x86_64::identity::apply(&mut entries, vendor);
    host.limit_cpuid(&mut entries, vendor);
    // The vPMU's own bits, from the model: Intel's leaf 0xA or AMD's PerfCtrExtCore and
    // PerfMonV2 leaf (each vendor clears the other's).
    for bits in pmu.map(PmuCaps::cpuid_bits).unwrap_or_default() {
        if let Some(e) = entries.iter_mut().find(|e| e.function == bits.function && e.index == bits.index) {
            let mut regs = [e.eax, e.ebx, e.ecx, e.edx];
            bits.apply(&mut regs);
            [e.eax, e.ebx, e.ecx, e.edx] = regs;
        }
    }
    CpuId::from_entries(&entries).expect("CPUID entries fit")
}

/// CPUID 0x15 (TSC/crystal ratio) and 0x16 (base frequency) for the Intel identity, so Linux
/// knows the TSC frequency (X86_FEATURE_TSC_KNOWN_FREQ) instead of calibrating it against
/// the PIT, which takes long and reads wrong under this host's emulator. The crystal runs
/// at the TSC's rate and the TSC is said to be `scale` times the crystal (1: the truth;
/// Linux guests get a dilated clock, `HostCaps::linux_tsc_scale`). AMD has no such leaves
/// (Linux reads them only on Intel).
pub fn add_tsc_leaves(cpuid: &mut CpuId, vendor: crate::arch::x86_64::identity::CpuVendor, tsc_khz: u64, scale: u64) {
    let claimed_khz = tsc_khz.saturating_mul(scale);
    let fits = tsc_khz * 1000 <= u64::from(u32::MAX) && claimed_khz <= u64::from(u32::MAX);
    if vendor != crate::arch::x86_64::identity::CpuVendor::Intel || tsc_khz == 0 || scale == 0 || !fits {
        return;
    }
    let mhz = (claimed_khz / 1000) as u32;
    let leaves = [
        kvm_cpuid_entry2 {
            function: 0x15,
            eax: 1,
            ebx: scale as u32,
            ecx: (tsc_khz * 1000) as u32,
            ..Default::default()
        },
        kvm_cpuid_entry2 { function: 0x16, eax: mhz, ebx: mhz, ecx: 100, ..Default::default() },
    ];
    let mut entries: Vec<kvm_cpuid_entry2> = cpuid.as_slice().to_vec();
    entries.retain(|e| e.function != 0x15 && e.function != 0x16);
    entries.extend_from_slice(&leaves);
    if let Some(leaf0) = entries.iter_mut().find(|e| e.function == 0) {
        leaf0.eax = leaf0.eax.max(0x16);
    }
    *cpuid = CpuId::from_entries(&entries).expect("CPUID entries fit");
}

/// Write `cpuid` into guest memory at `gpa` as `struct perfvm_cpuid_entry[]`
/// (guest/include/abi/perfvm_boot.h): in native mode this host's CPUID instruction does not
/// follow KVM_SET_CPUID2, so kit guests look their leaves up there. Returns the entries
/// written.
pub fn write_table(mem: &GuestMemoryMmap, gpa: u64, cpuid: &CpuId) -> vm_memory::GuestMemoryResult<u32> {
    let entries = &cpuid.as_slice()[..cpuid.as_slice().len().min(TABLE_MAX_ENTRIES)];
    let mut table = Vec::with_capacity(entries.len() * TABLE_ENTRY_SIZE);
    for e in entries {
        let entry = CpuidEntry {
            leaf: e.function,
            subleaf: e.index,
            flags: e.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
            eax: e.eax,
            ebx: e.ebx,
            ecx: e.ecx,
            edx: e.edx,
            reserved: 0,
        };
        table.extend_from_slice(entry.as_slice());
    }
    mem.write_slice(&table, GuestAddress(gpa))?;
    Ok(entries.len() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_holds_every_leaf_with_its_index_rule() {
        let leaves = [
            kvm_cpuid_entry2 { function: 0, eax: 0xd, ebx: 0x756e_6547, ..Default::default() },
            kvm_cpuid_entry2 {
                function: 4,
                index: 1,
                flags: KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
                eax: 5,
                ..Default::default()
            },
        ];
        let cpuid = for_vcpu(
            &CpuId::from_entries(&leaves).unwrap(),
            3,
            None,
            Default::default(),
            &crate::host::HostCaps::pvm(),
        );
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10000)]).unwrap();
        let n = write_table(&mem, 0x1000, &cpuid).unwrap();
        assert_eq!(n as usize, cpuid.as_slice().len());
        let word = |entry: u64, i: u64| mem.read_obj::<u32>(GuestAddress(0x1000 + entry * 32 + i * 4)).unwrap();
        assert_eq!((word(0, 0), word(0, 3), word(0, 4)), (0, 0xd, 0x756e_6547));
        assert_eq!((word(1, 0), word(1, 1), word(1, 2), word(1, 3)), (4, 1, 1, 5));
        let leaf_a = (0..u64::from(n)).find(|&e| word(e, 0) == 0xa).expect("leaf 0xA added");
        assert_eq!(word(leaf_a, 3), 0, "no PMU: version 0");
    }

    /// What an AMD EPYC host's KVM reports in the leaves an identity must keep consistent.
    fn amd_host() -> CpuId {
        let vendor = |ebx, ecx, edx| (ebx, ecx, edx);
        let (b, c, d) = vendor(0x6874_7541, 0x444d_4163, 0x6974_6e65); // "Auth" "cAMD" "enti"
        let leaves = [
            kvm_cpuid_entry2 { function: 0, eax: 0x10, ebx: b, ecx: c, edx: d, ..Default::default() },
            kvm_cpuid_entry2 { function: 1, eax: 0x00a0_0f11, ..Default::default() },
            kvm_cpuid_entry2 { function: 0x8000_0000, eax: 0x8000_0022, ebx: b, ecx: c, edx: d, ..Default::default() },
            kvm_cpuid_entry2 { function: 0x8000_0001, ecx: 1 << 23, ..Default::default() },
            kvm_cpuid_entry2 { function: 0x8000_0022, eax: 1, ebx: 6, ..Default::default() },
        ];
        CpuId::from_entries(&leaves).unwrap()
    }

    fn leaf(cpuid: &CpuId, function: u32) -> kvm_cpuid_entry2 {
        *cpuid.as_slice().iter().find(|e| e.function == function).unwrap()
    }

    #[test]
    fn the_intel_identity_agrees_with_its_pmu_on_any_host() {
        let caps = PmuCaps::new(4, true, pmu::EventSet::ALL).unwrap();
        let cpuid = for_vcpu(
            &amd_host(),
            0,
            Some(&caps),
            crate::arch::x86_64::identity::CpuVendor::Intel,
            &crate::host::HostCaps::pvm(),
        );
        assert_eq!(crate::arch::x86_64::identity::vendor_string(cpuid.as_slice()), "GenuineIntel");
        assert_eq!(leaf(&cpuid, 0xa).eax & 0xff, 2, "architectural perfmon v2");
        assert_eq!(leaf(&cpuid, 1).eax >> 8 & 0xf, 6, "family 6");
        assert_eq!(leaf(&cpuid, 0x8000_0001).ecx & 1 << 23, 0, "no AMD core counters");
        assert_eq!(leaf(&cpuid, 0x8000_0022).eax, 0, "no PerfMonV2");
        let ext = leaf(&cpuid, 0x8000_0000);
        assert_eq!([ext.ebx, ext.ecx, ext.edx], [0; 3], "Intel leaves no vendor in 0x80000000");
    }

    #[test]
    fn the_amd_identity_gets_the_amd_pmu_leaves() {
        let caps = PmuCaps::amd(pmu::AmdPerfMon::PerfMonV2, 4, pmu::EventSet::ALL).unwrap();
        let cpuid = for_vcpu(
            &amd_host(),
            0,
            Some(&caps),
            crate::arch::x86_64::identity::CpuVendor::Amd,
            &crate::host::HostCaps::pvm(),
        );
        assert_eq!(crate::arch::x86_64::identity::vendor_string(cpuid.as_slice()), "AuthenticAMD");
        assert_eq!(leaf(&cpuid, 0xa).eax, 0, "no Intel PMU leaf");
        assert_eq!(leaf(&cpuid, 0x8000_0001).ecx & 1 << 23, 1 << 23, "PerfCtrExtCore");
        assert_eq!([leaf(&cpuid, 0x8000_0022).eax & 1, leaf(&cpuid, 0x8000_0022).ebx & 0xf], [1, 4], "PerfMonV2, 4");
        let ext = leaf(&cpuid, 0x8000_0000);
        assert!(ext.eax >= 0x8000_0022, "the extended range reaches leaf 0x80000022");
        assert_eq!([ext.ebx, ext.edx, ext.ecx], crate::arch::x86_64::identity::CpuVendor::Amd.vendor_regs());
    }

    #[test]
    fn intel_gets_the_tsc_frequency_leaves() {
        let mut cpuid = for_vcpu(
            &amd_host(),
            0,
            None,
            crate::arch::x86_64::identity::CpuVendor::Intel,
            &crate::host::HostCaps::pvm(),
        );
        add_tsc_leaves(&mut cpuid, crate::arch::x86_64::identity::CpuVendor::Intel, 2_445_000, 1);
        let l15 = leaf(&cpuid, 0x15);
        assert_eq!(u64::from(l15.ecx) * u64::from(l15.ebx) / u64::from(l15.eax), 2_445_000_000, "TSC Hz");
        assert_eq!(leaf(&cpuid, 0x16).eax, 2445, "base MHz");
        assert!(leaf(&cpuid, 0).eax >= 0x16);
        add_tsc_leaves(&mut cpuid, crate::arch::x86_64::identity::CpuVendor::Intel, 2_445_000, 128);
        let l15 = leaf(&cpuid, 0x15);
        assert_eq!(u64::from(l15.ecx) / 1000 * u64::from(l15.ebx) / u64::from(l15.eax), 2_445_000 * 128, "dilated");
        assert_eq!(cpuid.as_slice().iter().filter(|e| e.function == 0x15).count(), 1);
        let mut amd = for_vcpu(
            &amd_host(),
            0,
            None,
            crate::arch::x86_64::identity::CpuVendor::Amd,
            &crate::host::HostCaps::pvm(),
        );
        add_tsc_leaves(&mut amd, crate::arch::x86_64::identity::CpuVendor::Amd, 2_445_000, 1);
        assert!(!amd.as_slice().iter().any(|e| e.function == 0x15), "not on AMD");
    }

    #[test]
    fn without_a_pmu_no_pmu_leaf_survives() {
        let cpuid = for_vcpu(
            &amd_host(),
            0,
            None,
            crate::arch::x86_64::identity::CpuVendor::Amd,
            &crate::host::HostCaps::pvm(),
        );
        assert_eq!(leaf(&cpuid, 0xa).eax, 0);
        assert_eq!(leaf(&cpuid, 0x8000_0001).ecx & 1 << 23, 0);
        assert_eq!([leaf(&cpuid, 0x8000_0022).eax, leaf(&cpuid, 0x8000_0022).ebx], [0, 0]);
    }
}
