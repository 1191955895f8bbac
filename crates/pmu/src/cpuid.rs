//! The CPUID bits a virtual PMU owns, for the VMM to build its guest's CPUID from the
//! model rather than from the host. Every vendor owns the same bits (so switching vendors
//! leaves no stale bit behind); only their values differ ([`PmuCaps::cpuid_bits`]).

use crate::caps::PmuCaps;

/// CPUID.1:ECX.DTES64 (bit 2): 64-bit DS area layout (Intel, with PEBS).
pub const LEAF1_ECX_DTES64: u32 = 1 << 2;
/// CPUID.1:ECX.PDCM (bit 15): IA32_PERF_CAPABILITIES exists (Intel).
pub const LEAF1_ECX_PDCM: u32 = 1 << 15;
/// CPUID.1:EDX.DS (bit 21): the debug store, IA32_DS_AREA (Intel, with PEBS).
pub const LEAF1_EDX_DS: u32 = 1 << 21;
/// CPUID.80000001H:ECX.PerfCtrExtCore (bit 23): AMD's six interleaved core counters.
pub const LEAF_8000_0001_ECX_PERFCTR_CORE: u32 = 1 << 23;
/// CPUID.80000022H:EAX.PerfMonV2 (bit 0): AMD's global control and status registers; the
/// leaf's EBX\[3:0\] is then the number of core counters.
pub const LEAF_8000_0022_EAX_PERFMON_V2: u32 = 1 << 0;

/// `(leaf, [eax, ebx, ecx, edx] mask)` of every CPUID bit a PMU owns (subleaf 0).
pub(crate) const PMU_CPUID_LEAVES: [(u32, [u32; 4]); 4] = [
    (0x1, [0, 0, LEAF1_ECX_PDCM | LEAF1_ECX_DTES64, LEAF1_EDX_DS]),
    // Architectural performance monitoring (Intel): all of it.
    (0xA, [u32::MAX; 4]),
    // AMD: PerfCtrExtCore. Its neighbours (northbridge and L2 counters, the performance
    // timestamp counter) are not the core PMU's: the VMM's identity decides them.
    (0x8000_0001, [0, 0, LEAF_8000_0001_ECX_PERFCTR_CORE, 0]),
    // AMD extended performance monitoring and debug: all of it.
    (0x8000_0022, [u32::MAX; 4]),
];

/// The PMU-owned bits of one CPUID leaf: the VMM keeps the host's other bits and sets
/// these, `reg = reg & !mask | value` ([`CpuidBits::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CpuidBits {
    /// Leaf (EAX input).
    pub function: u32,
    /// Subleaf (ECX input); always 0 here.
    pub index: u32,
    /// Owned bits of `[eax, ebx, ecx, edx]`.
    pub mask: [u32; 4],
    /// Their values (zero outside `mask`).
    pub value: [u32; 4],
}

impl CpuidBits {
    /// Sets the owned bits of `regs` (`[eax, ebx, ecx, edx]` of this leaf), keeping the rest.
    pub fn apply(&self, regs: &mut [u32; 4]) {
        for ((r, m), v) in regs.iter_mut().zip(self.mask).zip(self.value) {
            *r = *r & !m | v;
        }
    }
}

impl PmuCaps {
    /// Every CPUID bit a PMU owns, leaf by leaf, with the values the guest must see: leaf 1
    /// (Intel PDCM; DS and DTES64 with PEBS), leaf 0xA (Intel architectural perfmon), leaf
    /// 0x80000001 ECX bit 23 (AMD PerfCtrExtCore) and leaf 0x80000022 (AMD PerfMonV2 and its
    /// counter count). Every vendor owns all of them (an Intel PMU clears the AMD bits and
    /// the other way round). A leaf the host does not report should be added with all-zero
    /// registers before applying, and leaf 0x80000000 EAX raised to 0x80000022 when that
    /// leaf is non-zero.
    pub fn cpuid_bits(&self) -> Vec<CpuidBits> {
        let ops = self.ops();
        PMU_CPUID_LEAVES
            .iter()
            .map(|&(function, mask)| {
                let v = ops.cpuid(self, function);
                let value = [v[0] & mask[0], v[1] & mask[1], v[2] & mask[2], v[3] & mask[3]];
                CpuidBits { function, index: 0, mask, value }
            })
            .collect()
    }

    /// The PMU-owned bits of leaf `function`, if it owns any ([`PmuCaps::cpuid_bits`]).
    pub fn cpuid_leaf(&self, function: u32) -> Option<CpuidBits> {
        self.cpuid_bits().into_iter().find(|b| b.function == function)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ArchEvent, EventSet};

    #[test]
    fn apply_keeps_foreign_bits() {
        let b = CpuidBits { function: 1, index: 0, mask: [0, 0, 0x8004, 0x20_0000], value: [0, 0, 0x8000, 0] };
        let mut regs = [1, 2, u32::MAX, u32::MAX];
        b.apply(&mut regs);
        assert_eq!(regs, [1, 2, !0x4, !0x20_0000]);
    }

    #[test]
    fn intel_leaves() {
        let c = PmuCaps::new(4, true, EventSet::ALL).unwrap();
        let leaf1 = c.cpuid_leaf(1).unwrap();
        assert_eq!(leaf1.value, [0, 0, LEAF1_ECX_PDCM, 0], "FW_WRITE => PDCM");
        assert_eq!(c.cpuid_leaf(0xA).unwrap().value, c.cpuid_0xa());
        let c = PmuCaps::new(4, false, EventSet::EMPTY.with(ArchEvent::Instructions)).unwrap();
        assert_eq!(c.cpuid_leaf(1).unwrap().value, [0; 4], "nothing in PERF_CAPABILITIES => no PDCM");
        let c = c.with_pebs(true);
        assert_eq!(c.cpuid_leaf(1).unwrap().value, [0, 0, LEAF1_ECX_PDCM | LEAF1_ECX_DTES64, LEAF1_EDX_DS]);
        assert_eq!(c.cpuid_leaf(7), None);
    }
}
