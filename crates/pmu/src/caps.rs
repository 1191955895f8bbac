//! [`PmuCaps`]: what the virtual PMU exposes, decided once from the config and the backend
//! by the vendor's `refresh` (KVM `kvm_pmu_ops.refresh`), turned into CPUID leaves,
//! IA32_PERF_CAPABILITIES, reserved-bit masks and MSR ranges. Legality is decided here so
//! each WRMSR check is one AND.

use crate::backend::CountSource;
use crate::error::ConfigError;
use crate::event::{ArchEvent, EventSet};
use crate::msr::{MsrIndex, MsrRange};
use crate::pebs::{MISC_ENABLE_BTS_UNAVAIL, MISC_ENABLE_EMON, MISC_ENABLE_PEBS_UNAVAIL};
use crate::pmc::{PmcIdx, COUNTER_MASK, COUNTER_WIDTH};
use crate::pmu::PmuConfig;
use crate::vendor::{AmdPerfMon, CapsRequest, PmuReg, ReservedBits, Vendor, VendorOps};

/// Capabilities of one virtual PMU, as its vendor's `refresh` decided them.
///
/// Intel: fixed counters are the longest prefix of FIXED_CTR0..2 whose events
/// ([`crate::FIXED_EVENTS`]: instructions, core cycles, reference cycles) the backend counts
/// honestly, so a backend without instructions exposes no fixed counter at all. AMD: GP
/// counters only, as many as its [`AmdPerfMon`] level allows.
///
/// The VMM builds its guest's CPUID from [`PmuCaps::cpuid_bits`] (every vendor's PMU leaves)
/// and routes [`PmuCaps::msr_ranges`] to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmuCaps {
    pub(crate) vendor: Vendor,
    /// Architectural perfmon version (KVM `pmu->version`).
    pub(crate) version: u32,
    pub(crate) gp_counters: u8,
    pub(crate) fixed_counters: u8,
    pub(crate) full_width_writes: bool,
    pub(crate) available: EventSet,
    pub(crate) counters: u64,
    pub(crate) eventsel_reserved: u64,
    pub(crate) fixed_ctr_ctrl_reserved: u64,
    pub(crate) global_ctrl_reserved: u64,
    pub(crate) global_status_reserved: u64,
    pub(crate) reserved_bits: ReservedBits,
    pub(crate) pebs: bool,
    /// AMD's level (`None` for Intel).
    pub(crate) amd_perfmon: Option<AmdPerfMon>,
}

impl PmuCaps {
    /// Intel caps for `gp_counters` GP counters over a backend that counts `available`
    /// honestly.
    pub fn new(gp_counters: u8, full_width_writes: bool, available: EventSet) -> Result<PmuCaps, ConfigError> {
        Vendor::Intel.ops().refresh(&CapsRequest {
            gp_counters,
            full_width_writes,
            pebs: false,
            amd_perfmon: AmdPerfMon::default(),
            available,
        })
    }

    /// AMD caps at level `perfmon` with `gp_counters` counters (exactly 4 for
    /// [`AmdPerfMon::Legacy`], 6 for [`AmdPerfMon::ExtCore`], 1..=6 for
    /// [`AmdPerfMon::PerfMonV2`]) over a backend that counts `available` honestly.
    pub fn amd(perfmon: AmdPerfMon, gp_counters: u8, available: EventSet) -> Result<PmuCaps, ConfigError> {
        Vendor::Amd.ops().refresh(&CapsRequest {
            gp_counters,
            full_width_writes: false,
            pebs: false,
            amd_perfmon: perfmon,
            available,
        })
    }

    /// The caps a [`crate::Pmu`] built from `config` has over a backend that counts
    /// `available` honestly (any vendor).
    pub fn from_config(config: &PmuConfig, available: EventSet) -> Result<PmuCaps, ConfigError> {
        config.vendor.ops().refresh(&CapsRequest {
            gp_counters: config.gp_counters,
            full_width_writes: config.full_width_writes,
            pebs: config.pebs,
            amd_perfmon: config.amd_perfmon,
            available,
        })
    }

    /// [`PmuCaps::from_config`] for a backend: asks it once which events it can count.
    pub fn probe_config<B: CountSource + ?Sized>(config: &PmuConfig, backend: &B) -> Result<PmuCaps, ConfigError> {
        PmuCaps::from_config(config, EventSet::from_fn(|e| backend.supports(e)))
    }

    /// The same caps with software PEBS (see [`crate::Pmu`]'s PEBS methods) on or off:
    /// IA32_PEBS_ENABLE and IA32_DS_AREA exist, IA32_MISC_ENABLE.PEBS_UNAVAIL is clear, and
    /// PERF_CAPABILITIES advertises PEBS record format [`crate::PEBS_RECORD_FORMAT`],
    /// trap-like, with registers. Intel only: AMD caps stay without PEBS.
    pub const fn with_pebs(mut self, pebs: bool) -> PmuCaps {
        self.pebs = pebs && matches!(self.vendor, Vendor::Intel);
        self
    }

    /// Intel caps for a backend: asks it once which architectural events it can count.
    pub fn probe<B: CountSource + ?Sized>(
        gp_counters: u8,
        full_width_writes: bool,
        backend: &B,
    ) -> Result<PmuCaps, ConfigError> {
        PmuCaps::new(gp_counters, full_width_writes, EventSet::from_fn(|e| backend.supports(e)))
    }

    /// The vendor's operations.
    pub(crate) fn ops(&self) -> &'static dyn VendorOps {
        self.vendor.ops()
    }

    /// The vendor whose PMU this is.
    pub const fn vendor(&self) -> Vendor {
        self.vendor
    }

    /// AMD's performance-monitoring level (`None` for Intel).
    pub const fn amd_perfmon(&self) -> Option<AmdPerfMon> {
        self.amd_perfmon
    }

    /// The register `msr` names in this PMU, or `None` if it has no such MSR (an access
    /// #GPs). Vendor-neutral: e.g. [`PmuReg::GlobalCtrl`] for Intel's IA32_PERF_GLOBAL_CTRL.
    pub fn decode_msr(&self, msr: MsrIndex) -> Option<PmuReg> {
        self.ops().decode_msr(self, msr)
    }

    /// The MSR the VMM writes `reg` through, if this vendor has one (a counter's plain MSR).
    pub fn reg_msr(&self, reg: PmuReg) -> Option<MsrIndex> {
        self.ops().reg_msr(self, reg)
    }

    /// Whether this PMU has register `reg` (the vendor has an MSR for it, and it exists here).
    pub fn has_reg(&self, reg: PmuReg) -> bool {
        self.reg_msr(reg).is_some_and(|msr| self.decode_msr(msr).is_some())
    }

    /// The value a write of `data` to a register with reserved bits `reserved` stores, or
    /// `None` for #GP (per the vendor's rule for reserved bits).
    pub(crate) const fn check_reserved(&self, data: u64, reserved: u64) -> Option<u64> {
        self.reserved_bits.apply(data, reserved)
    }

    /// Whether a guest write to a read-only register (GLOBAL_STATUS) #GPs rather than
    /// being ignored.
    pub(crate) const fn read_only_faults(&self) -> bool {
        matches!(self.reserved_bits, ReservedBits::Fault)
    }

    /// Whether this PMU has software PEBS.
    pub const fn pebs(&self) -> bool {
        self.pebs
    }
    /// Reserved bits of IA32_PEBS_ENABLE: everything but one bit per GP counter (record
    /// format 1 has PEBS on GP counters only; its load-latency bits 35:32 are not offered),
    /// as KVM's `pebs_enable_rsvd` for a non-baseline format. All bits without PEBS.
    pub const fn pebs_enable_reserved(&self) -> u64 {
        if self.pebs {
            !((1u64 << self.gp_counters) - 1)
        } else {
            u64::MAX
        }
    }
    /// IA32_MISC_ENABLE at reset: what KVM gives a vCPU with a PMU: perfmon available, BTS
    /// unavailable, PEBS unavailable unless this PMU has PEBS.
    pub const fn misc_enable_reset(&self) -> u64 {
        let unavail = if self.pebs { 0 } else { MISC_ENABLE_PEBS_UNAVAIL };
        MISC_ENABLE_EMON | MISC_ENABLE_BTS_UNAVAIL | unavail
    }

    /// Performance monitoring version (KVM `pmu->version`): 2 for Intel (architectural
    /// perfmon version 2); for AMD 2 with PerfMonV2, else 1.
    pub const fn version(&self) -> u32 {
        self.version
    }
    /// Number of GP counters.
    pub const fn gp_counters(&self) -> u8 {
        self.gp_counters
    }
    /// Number of fixed counters (see the type docs for the prefix rule).
    pub const fn fixed_counters(&self) -> u8 {
        self.fixed_counters
    }
    /// Whether IA32_A_PMCx exist (PERF_CAPABILITIES.FW_WRITE).
    pub const fn full_width_writes(&self) -> bool {
        self.full_width_writes
    }
    /// Architectural events the guest may count.
    pub const fn available(&self) -> EventSet {
        self.available
    }
    /// Whether the guest may count `event`.
    pub const fn is_available(&self, event: ArchEvent) -> bool {
        self.available.contains(event)
    }
    /// Counter width in bits (48).
    pub const fn counter_width(&self) -> u32 {
        COUNTER_WIDTH
    }
    /// Mask of a counter's bits.
    pub const fn counter_mask(&self) -> u64 {
        COUNTER_MASK
    }
    /// GLOBAL_CTRL-layout mask of the counters that exist.
    pub const fn counters(&self) -> u64 {
        self.counters
    }
    /// Whether counter `idx` exists.
    pub const fn has(&self, idx: PmcIdx) -> bool {
        self.counters & idx.mask() != 0
    }
    /// Every counter that exists, GP first.
    pub fn pmcs(&self) -> impl Iterator<Item = PmcIdx> {
        PmcIdx::iter_mask(self.counters)
    }
    /// Reserved bits of the event selectors (Intel IA32_PERFEVTSELx).
    pub const fn eventsel_reserved(&self) -> u64 {
        self.eventsel_reserved
    }
    /// Reserved bits of IA32_FIXED_CTR_CTRL (ANY bits and fields of absent counters).
    pub const fn fixed_ctr_ctrl_reserved(&self) -> u64 {
        self.fixed_ctr_ctrl_reserved
    }
    /// Reserved bits of the global control register (Intel IA32_PERF_GLOBAL_CTRL).
    pub const fn global_ctrl_reserved(&self) -> u64 {
        self.global_ctrl_reserved
    }
    /// Reserved bits of the global status register and of the register that clears it
    /// (Intel IA32_PERF_GLOBAL_STATUS and IA32_PERF_GLOBAL_OVF_CTRL).
    pub const fn global_status_reserved(&self) -> u64 {
        self.global_status_reserved
    }
    /// The global control register at reset: GP enables set, fixed clear. SDM: v2
    /// processors come up this way so version-1 software, which knows no GLOBAL_CTRL, still
    /// counts (KVM does the same since "Set enable bits for GP counters in PERF_GLOBAL_CTRL
    /// at RESET").
    pub const fn global_ctrl_reset(&self) -> u64 {
        (1u64 << self.gp_counters) - 1
    }

    /// IA32_PERF_CAPABILITIES: FW_WRITE (bit 13) when full-width writes are enabled; with
    /// PEBS also PEBS_TRAP (bit 6), PEBS_ARCH_REG (bit 7) and the record format in bits
    /// 11:8. The VMM should advertise `CPUID.1:ECX.PDCM[15]` so the guest knows to read it
    /// ([`PmuCaps::cpuid_bits`] does).
    pub const fn perf_capabilities(&self) -> u64 {
        crate::vendor::intel_perf_capabilities(self)
    }

    /// Whether the guest has IA32_PERF_CAPABILITIES: the VMM advertises `CPUID.1:ECX.PDCM`
    /// exactly when this is true (a non-zero value), and guest RDMSR of it #GPs otherwise.
    pub const fn has_perf_capabilities(&self) -> bool {
        self.perf_capabilities() != 0
    }

    /// CPUID leaf 0xA as `[eax, ebx, ecx, edx]`. EBX sets a bit for every architectural
    /// event the backend cannot count (never advertise what is not counted honestly).
    pub fn cpuid_0xa(&self) -> [u32; 4] {
        self.ops().cpuid(self, 0xA)
    }

    /// Exactly the MSRs of this PMU, for the VMM to route here (KVM MSR filter).
    pub fn msr_ranges(&self) -> Vec<MsrRange> {
        self.ops().msr_ranges(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ArchEvent::*;

    fn caps(gp: u8, fw: bool, ev: &[ArchEvent]) -> PmuCaps {
        PmuCaps::new(gp, fw, ev.iter().copied().collect()).unwrap()
    }

    #[test]
    fn counter_count_limits() {
        assert_eq!(PmuCaps::new(0, true, EventSet::ALL), Err(ConfigError::GpCounters(0)));
        assert_eq!(PmuCaps::new(9, true, EventSet::ALL), Err(ConfigError::GpCounters(9)));
        assert!(PmuCaps::new(1, true, EventSet::ALL).is_ok());
        assert!(PmuCaps::new(8, true, EventSet::ALL).is_ok());
    }

    #[test]
    fn cpuid_full_backend() {
        let c = caps(4, true, &ArchEvent::ALL);
        assert_eq!(c.cpuid_0xa(), [0x0730_0402, 0, 0, 3 | 48 << 5]);
    }

    #[test]
    fn cpuid_eight_counters() {
        let c = caps(8, false, &ArchEvent::ALL);
        assert_eq!(c.cpuid_0xa()[0], 2 | 8 << 8 | 48 << 16 | 7 << 24);
    }

    #[test]
    fn cpuid_without_instructions_has_no_fixed_counters() {
        let c = caps(4, true, &[CoreCycles, RefCycles, Branches]);
        let [eax, ebx, ecx, edx] = c.cpuid_0xa();
        assert_eq!(eax & 0xFF, 2);
        assert_eq!(ebx, 1 << 1 | 1 << 3 | 1 << 4 | 1 << 6);
        assert_eq!(ecx, 0);
        assert_eq!(edx & 0x1F, 0);
        assert_eq!(c.fixed_counters(), 0);
    }

    #[test]
    fn cpuid_fixed_prefix_rule() {
        // instructions + cycles but no reference cycles: FIXED_CTR0..1 only.
        assert_eq!(caps(4, true, &[Instructions, CoreCycles]).fixed_counters(), 2);
        assert_eq!(caps(4, true, &[Instructions]).fixed_counters(), 1);
        // reference cycles alone does not bring FIXED_CTR2: the prefix is broken.
        assert_eq!(caps(4, true, &[Instructions, RefCycles]).fixed_counters(), 1);
        let c = caps(4, true, &[Instructions, CoreCycles]);
        assert_eq!(c.cpuid_0xa()[3], 2 | 48 << 5);
        assert_eq!(c.cpuid_0xa()[1], 0b111_1100);
    }

    #[test]
    fn cpuid_exact_backend() {
        // An exact single-step backend: instructions and branches only.
        let c = caps(2, false, &[Instructions, Branches]);
        assert_eq!(c.cpuid_0xa(), [2 | 2 << 8 | 48 << 16 | 7 << 24, 0b101_1101, 0, 1 | 48 << 5]);
    }

    #[test]
    fn cpuid_nothing_countable() {
        let c = caps(1, false, &[]);
        assert_eq!(c.cpuid_0xa(), [2 | 1 << 8 | 48 << 16 | 7 << 24, 0x7F, 0, 48 << 5]);
    }

    #[test]
    fn reserved_masks() {
        let c = caps(4, true, &ArchEvent::ALL);
        assert_eq!(c.eventsel_reserved(), 0xFFFF_FFFF_0020_0000);
        assert_eq!(c.fixed_ctr_ctrl_reserved(), !0xBBB);
        assert_eq!(c.global_ctrl_reserved(), !(0xF | 7 << 32));
        assert_eq!(c.global_status_reserved(), !(0xF | 7 << 32 | 3 << 62));
        assert_eq!(c.global_ctrl_reset(), 0xF);
        let c = caps(8, true, &[Instructions]);
        assert_eq!(c.fixed_ctr_ctrl_reserved(), !0xB);
        assert_eq!(c.global_ctrl_reserved(), !(0xFF | 1 << 32));
        assert_eq!(c.counters(), 0xFF | 1 << 32);
        let c = caps(3, true, &[]);
        assert_eq!(c.fixed_ctr_ctrl_reserved(), u64::MAX);
    }

    #[test]
    fn perf_capabilities_fw_write() {
        assert_eq!(caps(4, true, &[]).perf_capabilities(), 1 << 13);
        assert_eq!(caps(4, false, &[]).perf_capabilities(), 0);
    }

    #[test]
    fn pebs_caps() {
        let c = caps(4, true, &ArchEvent::ALL).with_pebs(true);
        assert!(c.pebs());
        // FW_WRITE | PEBS_TRAP | PEBS_ARCH_REG | format 1.
        assert_eq!(c.perf_capabilities(), 1 << 13 | 1 << 6 | 1 << 7 | 1 << 8);
        assert!(c.has_perf_capabilities());
        let c = caps(4, false, &[]).with_pebs(true);
        assert_eq!(c.perf_capabilities(), 0x1C0, "PDCM even without FW_WRITE");
        assert!(c.has_perf_capabilities());
        assert_eq!(c.pebs_enable_reserved(), !0xF);
        assert_eq!(caps(8, true, &[]).with_pebs(true).pebs_enable_reserved(), !0xFF);
        assert_eq!(caps(4, true, &[]).pebs_enable_reserved(), u64::MAX);
        assert_eq!(c.misc_enable_reset(), 0x880);
        assert_eq!(caps(4, true, &[]).misc_enable_reset(), 0x1880);
        // The cpuid leaf does not change.
        assert_eq!(c.cpuid_0xa(), caps(4, false, &[]).with_pebs(false).cpuid_0xa());
    }

    #[test]
    fn pmcs_iterates_existing() {
        let c = caps(2, true, &[Instructions, CoreCycles]);
        let v: Vec<_> = c.pmcs().map(|p| p.bit()).collect();
        assert_eq!(v, vec![0, 1, 32, 33]);
        assert!(c.has(PmcIdx::fixed(1).unwrap()));
        assert!(!c.has(PmcIdx::fixed(2).unwrap()));
        assert!(!c.has(PmcIdx::gp(2).unwrap()));
    }
}
