//! Guest CPUID: the host's supported leaves, with per-vCPU APIC IDs and the virtual PMU's
//! leaf 0xA (generated from the model, never the host's).

use kvm_bindings::{kvm_cpuid_entry2, CpuId};
use pmu::PmuCaps;

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
/// architectural perfmon version 0).
pub fn for_vcpu(supported: &CpuId, index: u32, pmu: Option<&PmuCaps>) -> CpuId {
    let mut entries: Vec<kvm_cpuid_entry2> = supported.as_slice().to_vec();
    if !entries.iter().any(|e| e.function == 0xa) {
        entries.push(kvm_cpuid_entry2 { function: 0xa, ..Default::default() });
    }
    let max_basic = entries.iter().filter(|e| e.function < 0x8000_0000).map(|e| e.function).max().unwrap_or(0);
    for entry in &mut entries {
        match entry.function {
            0 => entry.eax = entry.eax.max(0xa).max(max_basic),
            1 => {
                entry.ebx = (entry.ebx & 0x00ff_ffff) | (index << 24);
                entry.ecx &= !LEAF1_ECX_PDCM;
                if pmu.is_some_and(|p| p.perf_capabilities() != 0) {
                    entry.ecx |= LEAF1_ECX_PDCM;
                }
                entry.ecx &= !LEAF1_ECX_DTES64;
                entry.edx &= !LEAF1_EDX_DS;
                if pmu.is_some_and(|p| p.pebs()) {
                    entry.ecx |= LEAF1_ECX_DTES64;
                    entry.edx |= LEAF1_EDX_DS;
                }
            }
            6 => entry.ecx &= !LEAF6_ECX_APERFMPERF,
            0xb | 0x1f => entry.edx = index,
            0xa => [entry.eax, entry.ebx, entry.ecx, entry.edx] = pmu.map(PmuCaps::cpuid_0xa).unwrap_or([0; 4]),
            _ => {}
        }
    }
    CpuId::from_entries(&entries).expect("CPUID entries fit")
}
