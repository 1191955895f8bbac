//! perfvm's own CPUID leaves (guest/include/abi/perfvm_cpuid.h): a signature, and how the vPMU
//! counts, so a guest learns its backend from the VMM rather than from its command line.

use crate::config::BackendKind;
use kvm_bindings::{kvm_cpuid_entry2, CpuId};

/// EAX: the last perfvm leaf; EBX, ECX, EDX: "perfvm" padded with NULs. Outside KVM's own
/// 0x4000_00xx leaves, at the next hypervisor base.
pub const SIGNATURE_LEAF: u32 = 0x4000_0100;
/// EAX: the vPMU's backend ([`Backend`]).
pub const VPMU_LEAF: u32 = 0x4000_0101;
/// "perfvm\0\0\0\0\0\0" as EBX, ECX, EDX.
pub const SIGNATURE: [u32; 3] = [u32::from_le_bytes(*b"perf"), u32::from_le_bytes(*b"vm\0\0"), 0];

/// What the vPMU leaf's EAX says (PERFVM_BACKEND_*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Backend {
    /// `--pmu off`.
    None = 0,
    /// Host perf events: counts are ranges.
    Perf = 1,
    /// Single-stepped: instructions and branches exact.
    Exact = 2,
}

impl From<Option<BackendKind>> for Backend {
    fn from(kind: Option<BackendKind>) -> Self {
        match kind {
            None => Backend::None,
            Some(BackendKind::Perf) => Backend::Perf,
            Some(BackendKind::Exact) => Backend::Exact,
        }
    }
}

/// `cpuid` with perfvm's leaves (replacing any the host had there).
pub fn with_leaves(cpuid: &CpuId, backend: Backend) -> CpuId {
    let mut entries: Vec<kvm_cpuid_entry2> = cpuid.as_slice().to_vec();
    entries.retain(|e| e.function != SIGNATURE_LEAF && e.function != VPMU_LEAF);
    let [ebx, ecx, edx] = SIGNATURE;
    entries.push(kvm_cpuid_entry2 { function: SIGNATURE_LEAF, eax: VPMU_LEAF, ebx, ecx, edx, ..Default::default() });
    entries.push(kvm_cpuid_entry2 { function: VPMU_LEAF, eax: backend as u32, ..Default::default() });
    CpuId::from_entries(&entries).expect("CPUID entries fit")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(cpuid: &CpuId, function: u32) -> kvm_cpuid_entry2 {
        *cpuid.as_slice().iter().find(|e| e.function == function).unwrap()
    }

    #[test]
    fn the_leaves_carry_the_signature_and_the_backend() {
        let host =
            CpuId::from_entries(&[kvm_cpuid_entry2 { function: VPMU_LEAF, eax: 7, ..Default::default() }]).unwrap();
        let cpuid = with_leaves(&host, Backend::from(Some(BackendKind::Exact)));
        let sig = leaf(&cpuid, SIGNATURE_LEAF);
        assert_eq!([sig.eax, sig.ebx, sig.ecx, sig.edx], [VPMU_LEAF, 0x6672_6570, 0x6d76, 0]);
        assert_eq!(cpuid.as_slice().iter().filter(|e| e.function == VPMU_LEAF).count(), 1, "the host's is replaced");
        assert_eq!(leaf(&cpuid, VPMU_LEAF).eax, 2);
        assert_eq!(leaf(&with_leaves(&host, Backend::from(Some(BackendKind::Perf))), VPMU_LEAF).eax, 1);
        assert_eq!(leaf(&with_leaves(&host, Backend::from(None)), VPMU_LEAF).eax, 0);
    }
}
