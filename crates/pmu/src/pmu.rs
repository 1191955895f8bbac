//! [`Pmu`]: the virtual PMU of one vCPU, vendor-neutral (KVM's generic `pmu.c`). Its
//! registers are [`PmuReg`]s; which MSR names which register, and every other vendor rule,
//! is the vendor's (`vendor/`, KVM's `kvm_pmu_ops`), reached through [`PmuCaps`].

use crate::backend::CountSource;
use crate::backend::HostEventConfig;
use crate::caps::PmuCaps;
use crate::error::ConfigError;
use crate::eventsel::{EventSel, FixedCtrl};
use crate::filter::PmuEventFilter;
use crate::host::HostDriver;
use crate::msr::{Initiator, MsrAccess, MsrIndex, MsrRange};
use crate::pmc::{Pmc, PmcIdx, RdpmcIdx, PMC_SLOTS};
use crate::policy::Policy;
use crate::stats::PmuStats;
use crate::vendor::{AmdPerfMon, PmuReg, Vendor};

/// An MSR number and the register it names in one PMU ([`Pmu::decode`]; `None`: none,
/// and an access #GPs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DecodedMsr {
    index: MsrIndex,
    reg: Option<PmuReg>,
}

impl DecodedMsr {
    /// The MSR number.
    pub fn index(self) -> MsrIndex {
        self.index
    }
    /// The register it names, if the PMU has it.
    pub fn reg(self) -> Option<PmuReg> {
        self.reg
    }
}

/// How to build a [`Pmu`]. Not `Copy` (the filter owns a list): clone it to build several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuConfig {
    /// The vendor whose PMU this is (default [`Vendor::Intel`]).
    pub vendor: Vendor,
    /// AMD's performance-monitoring level (default [`AmdPerfMon::PerfMonV2`]); ignored for
    /// Intel.
    pub amd_perfmon: AmdPerfMon,
    /// General-purpose counters (default 4): Intel 1..=8; AMD exactly 4 (legacy), exactly 6
    /// (PerfCtrExtCore) or 1..=6 (PerfMonV2).
    pub gp_counters: u8,
    /// Intel: advertise PERF_CAPABILITIES.FW_WRITE and the IA32_A_PMCx aliases (default
    /// true). Ignored for AMD, whose counters always take 48-bit writes.
    pub full_width_writes: bool,
    /// Host event management policy (default [`Policy::default`]).
    pub policy: Policy,
    /// Events the guest may not count (default none: everything counts). See
    /// [`PmuEventFilter`]; it can be replaced later with [`Pmu::set_event_filter`].
    pub filter: Option<PmuEventFilter>,
    /// Software PEBS (default false): IA32_PEBS_ENABLE and IA32_DS_AREA exist,
    /// IA32_MISC_ENABLE says PEBS is available and PERF_CAPABILITIES advertises record
    /// format 1; see `Pmu::pebs_effective`. Intel only ([`ConfigError::Pebs`] for AMD).
    pub pebs: bool,
}

impl Default for PmuConfig {
    fn default() -> Self {
        PmuConfig {
            vendor: Vendor::Intel,
            amd_perfmon: AmdPerfMon::default(),
            gp_counters: 4,
            full_width_writes: true,
            policy: Policy::default(),
            filter: None,
            pebs: false,
        }
    }
}

/// A virtual PMU (Intel architectural perfmon version 2, or AMD64 performance monitoring,
/// per [`PmuConfig::vendor`]) driving a [`CountSource`].
///
/// Generic over the backend so the VMM keeps typed access to it ([`Pmu::backend_mut`]);
/// [`CountSource`] is object-safe, so `Pmu<Box<dyn CountSource>>` works too.
///
/// Host events are reprogrammed eagerly inside the MSR write that changes them; nothing is
/// deferred to VM entry, so an idle PMU costs nothing there ([`Pmu::is_active`]).
#[derive(Debug)]
pub struct Pmu<B: CountSource> {
    pub(crate) caps: PmuCaps,
    pub(crate) policy: Policy,
    pub(crate) filter: Option<PmuEventFilter>,
    pub(crate) host: HostDriver<B>,
    pub(crate) pmcs: [Pmc; PMC_SLOTS],
    pub(crate) fixed_ctr_ctrl: u64,
    pub(crate) global_ctrl: u64,
    pub(crate) global_status: u64,
    /// Per-counter local enables (EVENTSEL.EN, fixed OS|USR) in GLOBAL_CTRL layout.
    pub(crate) local_enables: u64,
    /// Counters with an open host event, GLOBAL_CTRL layout.
    pub(crate) open_mask: u64,
    pub(crate) scheduled_in: bool,
    /// vCPU run time at the last [`Pmu::tick`].
    pub(crate) now_ns: u64,
    /// An overflow of a PMI-enabled counter was seen and not yet reported.
    pub(crate) pmi_pending: bool,
    /// IA32_PEBS_ENABLE.
    pub(crate) pebs_enable: u64,
    /// IA32_DS_AREA.
    pub(crate) ds_area: u64,
    /// IA32_MISC_ENABLE.
    pub(crate) misc_enable: u64,
    /// PEBS counters that overflowed and wait for their next event (GLOBAL_CTRL layout).
    pub(crate) pebs_armed: u64,
    /// PEBS counters whose assist is due: the VMM writes their records.
    pub(crate) pebs_pending: u64,
    /// Paravirtual auto-reload of sampling counters (`reload.rs`).
    pub(crate) auto_reload: crate::reload::AutoReload,
    pub(crate) stats: PmuStats,
}

impl<B: CountSource> Pmu<B> {
    /// Builds a PMU in its reset state, asking `backend` once which events it counts.
    pub fn new(config: PmuConfig, backend: B) -> Result<Self, ConfigError> {
        let caps = PmuCaps::probe_config(&config, &backend)?;
        Ok(Pmu {
            caps,
            policy: config.policy,
            filter: config.filter,
            host: HostDriver::new(backend),
            pmcs: [Pmc::default(); PMC_SLOTS],
            fixed_ctr_ctrl: 0,
            global_ctrl: caps.global_ctrl_reset(),
            global_status: 0,
            local_enables: 0,
            open_mask: 0,
            scheduled_in: true,
            now_ns: 0,
            pmi_pending: false,
            pebs_enable: 0,
            ds_area: 0,
            misc_enable: caps.misc_enable_reset(),
            pebs_armed: 0,
            pebs_pending: 0,
            auto_reload: Default::default(),
            stats: PmuStats::default(),
        })
    }

    /// What this PMU exposes (CPUID 0xA, PERF_CAPABILITIES, masks).
    pub fn caps(&self) -> &PmuCaps {
        &self.caps
    }
    /// The host event policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }
    /// The event filter in force, if any.
    pub fn event_filter(&self) -> Option<&PmuEventFilter> {
        self.filter.as_ref()
    }

    /// Replaces the event filter (`None` removes it) and re-decides every counter at once,
    /// as KVM does after `KVM_SET_PMU_EVENT_FILTER`: a counter now denied stops (its host
    /// event is parked or closed per the policy; it keeps its value), one now allowed starts
    /// if the guest has it enabled. Guest-visible registers do not change.
    pub fn set_event_filter(&mut self, filter: Option<PmuEventFilter>) {
        self.filter = filter;
        let wanted = self.global_ctrl & self.local_enables & self.caps.counters();
        for idx in PmcIdx::iter_mask(wanted | self.open_mask) {
            self.reconcile(idx, false);
            if self.counting(idx) && self.filtered(idx) {
                self.stats.filtered_programs += 1;
            }
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.host.backend
    }
    /// The backend, mutably (e.g. for the VMM to service its fds, or tests to feed counts).
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.host.backend
    }
    /// Consumes the PMU, returning the backend with its host events still open.
    pub fn into_backend(self) -> B {
        self.host.backend
    }
    /// Telemetry so far.
    pub fn stats(&self) -> PmuStats {
        PmuStats { backend_calls: self.host.calls, ..self.stats.clone() }
    }
    /// The MSRs the VMM must route to this model: exactly this PMU's MSRs.
    pub fn msr_ranges(&self) -> Vec<MsrRange> {
        self.caps.msr_ranges()
    }
    /// True iff some counter is enabled (locally and globally) or some host event is open.
    /// No backend call: the VMM may skip all PMU work on entries/exits while it is false.
    pub fn is_active(&self) -> bool {
        self.global_ctrl & self.local_enables != 0 || self.open_mask != 0
    }
    /// True iff some counter is programmed (EVENTSEL.EN, or OS/USR in FIXED_CTR_CTRL),
    /// whether or not GLOBAL_CTRL enables it. No backend call.
    pub fn any_programmed(&self) -> bool {
        self.local_enables != 0
    }
    /// What counter `idx` counts now, as its host event is asked to: `None` when it counts
    /// nothing (not enabled locally and globally, filtered, or an event no backend here
    /// counts). No backend call.
    pub fn counting_config(&self, idx: PmcIdx) -> Option<HostEventConfig> {
        self.desired_config(idx)
    }
    /// Whether the vCPU is scheduled in ([`Pmu::sched_out`] / [`Pmu::sched_in`]).
    pub fn is_scheduled_in(&self) -> bool {
        self.scheduled_in
    }
    /// An overflow of a PMI-enabled counter was seen (e.g. while folding on an MSR access)
    /// and [`Pmu::collect_overflows`] has not reported it yet. No backend call.
    pub fn pmi_pending(&self) -> bool {
        self.pmi_pending
    }

    /// The register `msr` names in this PMU, decoded once: the access
    /// ([`Pmu::get_decoded`], [`Pmu::set_decoded`]) and the caller's own bookkeeping (what
    /// kind of access it was) share it.
    pub fn decode(&self, msr: MsrIndex) -> DecodedMsr {
        DecodedMsr { index: msr, reg: self.caps.decode_msr(msr) }
    }

    /// RDMSR of `msr`. Returns [`MsrAccess::Fault`] for MSRs this PMU does not have.
    pub fn get_msr(&mut self, msr: MsrIndex, who: Initiator) -> MsrAccess<u64> {
        self.get_decoded(self.decode(msr), who)
    }

    /// RDMSR of an MSR [`Pmu::decode`] decoded.
    pub fn get_decoded(&mut self, msr: DecodedMsr, who: Initiator) -> MsrAccess<u64> {
        *self.stats.msr_reads.entry(msr.index.0).or_default() += 1;
        let r = msr.reg.and_then(|reg| self.read_reg(reg, who));
        self.account(r, who)
    }

    /// WRMSR of `value` to `msr`. Returns [`MsrAccess::Fault`] for absent MSRs, reserved
    /// bits, read-only registers (guest) and values a counter cannot hold.
    pub fn set_msr(&mut self, msr: MsrIndex, value: u64, who: Initiator) -> MsrAccess {
        self.set_decoded(self.decode(msr), value, who)
    }

    /// WRMSR of `value` to an MSR [`Pmu::decode`] decoded.
    pub fn set_decoded(&mut self, msr: DecodedMsr, value: u64, who: Initiator) -> MsrAccess {
        *self.stats.msr_writes.entry(msr.index.0).or_default() += 1;
        let r = msr.reg.and_then(|reg| self.write_reg(reg, value, who));
        self.account(r, who)
    }

    /// RDPMC with `ecx`: the counter's value, low 32 bits only for a fast read (`ECX[31]`);
    /// #GP if ECX names no counter of this PMU. CR4.PCE/CPL checks are the VMM's (our guests
    /// run at CPL 0).
    pub fn rdpmc(&mut self, ecx: RdpmcIdx) -> MsrAccess<u64> {
        self.stats.rdpmc += 1;
        let r = self.caps.ops().rdpmc_to_pmc(&self.caps, ecx).map(|(idx, mask)| self.read_counter(idx) & mask);
        self.account(r, Initiator::Guest)
    }

    /// SDM reset: counters, EVENTSELs, FIXED_CTR_CTRL and GLOBAL_STATUS zero, GLOBAL_CTRL
    /// with the GP enables set; PEBS_ENABLE and DS_AREA zero, MISC_ENABLE at its reset
    /// value, no PEBS assist armed or due, no auto-reload; every host event is closed.
    /// Statistics are kept.
    pub fn reset(&mut self) {
        for idx in PmcIdx::iter_mask(self.open_mask) {
            self.discard_event(idx);
        }
        self.pmcs = [Pmc::default(); PMC_SLOTS];
        self.fixed_ctr_ctrl = 0;
        self.global_ctrl = self.caps.global_ctrl_reset();
        self.global_status = 0;
        self.local_enables = 0;
        self.pmi_pending = false;
        self.pebs_enable = 0;
        self.ds_area = 0;
        self.misc_enable = self.caps.misc_enable_reset();
        self.pebs_armed = 0;
        self.pebs_pending = 0;
        self.auto_reload = Default::default();
    }

    fn account<T>(&mut self, r: Option<T>, who: Initiator) -> MsrAccess<T> {
        if r.is_none() {
            match who {
                Initiator::Guest => self.stats.faults += 1,
                Initiator::Host => self.stats.host_rejects += 1,
            }
        }
        r.into()
    }

    fn read_reg(&mut self, reg: PmuReg, who: Initiator) -> Option<u64> {
        Some(match reg {
            PmuReg::Counter(idx, _) => self.read_counter(idx),
            PmuReg::EventSel(idx) => self.pmcs[idx.slot()].eventsel,
            PmuReg::FixedCtrCtrl => self.fixed_ctr_ctrl,
            PmuReg::GlobalStatus => self.global_status,
            PmuReg::GlobalCtrl => self.global_ctrl,
            // They only act on writes; they read as 0 (KVM).
            PmuReg::GlobalStatusClear | PmuReg::GlobalStatusSet => 0,
            // Exists for the guest only when CPUID.1:ECX.PDCM is advertised, which the VMM
            // does iff the value is non-zero (KVM: #GP without guest PDCM; the host may
            // always read it).
            PmuReg::PerfCapabilities => {
                if who == Initiator::Guest && !self.caps.has_perf_capabilities() {
                    return None;
                }
                self.caps.perf_capabilities()
            }
            PmuReg::MiscEnable => self.misc_enable,
            PmuReg::PebsEnable => self.pebs_enable,
            PmuReg::DsArea => self.ds_area,
        })
    }

    fn write_reg(&mut self, reg: PmuReg, data: u64, who: Initiator) -> Option<()> {
        let guest = who == Initiator::Guest;
        match reg {
            PmuReg::Counter(idx, rule) => {
                let v = rule.value(data, who)?;
                self.write_counter(idx, v);
            }
            PmuReg::EventSel(idx) => {
                let v = self.caps.check_reserved(data, self.caps.eventsel_reserved())?;
                self.write_eventsel(idx, v);
            }
            PmuReg::FixedCtrCtrl => {
                let v = self.caps.check_reserved(data, self.caps.fixed_ctr_ctrl_reserved())?;
                self.write_fixed_ctr_ctrl(v);
            }
            PmuReg::GlobalStatus => {
                // Read-only to the guest; the VMM restores it (KVM: host_initiated only), but
                // never with reserved bits.
                if guest {
                    return (!self.caps.read_only_faults()).then_some(());
                }
                if data & self.caps.global_status_reserved() != 0 {
                    return None;
                }
                self.global_status = data;
            }
            PmuReg::GlobalCtrl => {
                let v = self.caps.check_reserved(data, self.caps.global_ctrl_reserved())?;
                self.write_global_ctrl(v);
            }
            PmuReg::GlobalStatusClear => {
                // Shares STATUS's reserved bits. A host write is accepted but clears nothing,
                // as in KVM: restore sets GLOBAL_STATUS directly and must not be undone.
                let v = self.caps.check_reserved(data, self.caps.global_status_reserved())?;
                if guest {
                    self.global_status &= !v;
                }
            }
            PmuReg::GlobalStatusSet => {
                // Sets overflow bits as if the counters had wrapped, without a PMI (KVM).
                let v = self.caps.check_reserved(data, self.caps.global_status_reserved())?;
                if guest {
                    self.global_status |= v;
                }
            }
            // Read-only to the guest; the host may only confirm the configured value.
            PmuReg::PerfCapabilities => {
                if guest || data != self.caps.perf_capabilities() {
                    return None;
                }
            }
            PmuReg::MiscEnable => self.write_misc_enable(data, who)?,
            PmuReg::PebsEnable => self.write_pebs_enable(data)?,
            PmuReg::DsArea => self.write_ds_area(data)?,
        }
        Some(())
    }

    fn write_eventsel(&mut self, idx: PmcIdx, data: u64) {
        let pmc = &mut self.pmcs[idx.slot()];
        // Rewriting the same value changes nothing: no backend call (KVM, old and new).
        if pmc.eventsel == data {
            return;
        }
        pmc.eventsel = data;
        self.set_local_enable(idx, EventSel(data).enabled());
        self.reconcile(idx, true);
    }

    fn write_fixed_ctr_ctrl(&mut self, data: u64) {
        let old = std::mem::replace(&mut self.fixed_ctr_ctrl, data);
        // Only counters whose 4-bit field changed are touched (KVM reprogram_fixed_counters).
        for j in 0..self.caps.fixed_counters() {
            let (was, now) = (FixedCtrl::of(old, j), FixedCtrl::of(data, j));
            if was != now {
                let idx = PmcIdx::fixed(j).expect("fixed counter within caps");
                self.set_local_enable(idx, now.enabled());
                self.reconcile(idx, true);
            }
        }
    }

    fn write_global_ctrl(&mut self, data: u64) {
        // Only flipped enables are reprogrammed (KVM global_ctrl_changed / reprogram_counters).
        let diff = std::mem::replace(&mut self.global_ctrl, data) ^ data;
        if self.policy == Policy::Legacy {
            // The baseline: one counter at a time, as before event reuse.
            PmcIdx::iter_mask(diff).for_each(|idx| self.reconcile(idx, true));
        } else {
            self.reconcile_many(diff, true);
        }
    }

    fn set_local_enable(&mut self, idx: PmcIdx, on: bool) {
        if on {
            self.local_enables |= idx.mask();
        } else {
            self.local_enables &= !idx.mask();
        }
    }

    /// Counter `idx` counts per the guest registers: SDM "each enable bit in GLOBAL_CTRL is
    /// AND'ed with the enable bits ... in IA32_PERFEVTSELx or FIXED_CTR_CTRL".
    pub(crate) fn counting(&self, idx: PmcIdx) -> bool {
        self.global_ctrl & self.local_enables & idx.mask() != 0
    }

    /// The event filter denies counter `idx`'s current programming (KVM
    /// `check_pmu_event_filter`: GP counters by the vendor's event select and the unit mask,
    /// fixed ones by the bitmap).
    pub(crate) fn filtered(&self, idx: PmcIdx) -> bool {
        let Some(f) = &self.filter else {
            return false;
        };
        if idx.is_fixed() {
            !f.allows_fixed(idx.number())
        } else {
            let (event, umask) = self.caps.ops().event_select(self.pmcs[idx.slot()].eventsel);
            !f.allows_gp(event, umask)
        }
    }

    /// The host event counter `idx` needs now, or `None` when it must count nothing
    /// (stopped by the guest, denied by the filter, or an event the backend cannot count).
    pub(crate) fn desired_config(&self, idx: PmcIdx) -> Option<HostEventConfig> {
        if !self.counting(idx) || self.filtered(idx) {
            return None;
        }
        if idx.is_fixed() {
            let j = idx.number();
            Some(fixed_config(&self.caps, j, FixedCtrl::of(self.fixed_ctr_ctrl, j)))
        } else {
            gp_config(&self.caps, self.pmcs[idx.slot()].eventsel)
        }
    }
}

/// Host configuration for a GP counter with `eventsel`, or `None` when nothing is to be
/// counted: the selected event (in the vendor's encoding) is not architectural or not
/// available. Such an event selector is accepted (no #GP, as on hardware) but counts
/// nothing. The control bits (USR, OS, EDGE, INT, INV, CMASK) sit at the same place for
/// every vendor.
pub(crate) fn gp_config(caps: &PmuCaps, eventsel: u64) -> Option<HostEventConfig> {
    let event = caps.ops().arch_event(eventsel).filter(|&e| caps.is_available(e))?;
    let s = EventSel(eventsel);
    Some(HostEventConfig {
        event,
        usr: s.usr(),
        os: s.os(),
        edge: s.edge(),
        inv: s.inv(),
        cmask: s.cmask(),
        interrupt: s.int(),
    })
}

/// Host configuration for fixed counter `j` with control field `ctrl`.
pub(crate) fn fixed_config(caps: &PmuCaps, j: u8, ctrl: FixedCtrl) -> HostEventConfig {
    HostEventConfig {
        event: caps.ops().fixed_events()[usize::from(j)],
        usr: ctrl.usr(),
        os: ctrl.os(),
        edge: false,
        inv: false,
        cmask: 0,
        interrupt: ctrl.pmi(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ArchEvent, EventSet};

    #[test]
    fn fixed_config_events() {
        let caps = PmuCaps::new(4, true, EventSet::ALL).unwrap();
        let f = fixed_config(&caps, 2, FixedCtrl(FixedCtrl::USR | FixedCtrl::PMI));
        assert_eq!(f.event, ArchEvent::RefCycles);
        assert!(f.usr && !f.os && f.interrupt);
        assert_eq!(fixed_config(&caps, 0, FixedCtrl(1)).event, ArchEvent::Instructions);
        assert_eq!(fixed_config(&caps, 1, FixedCtrl(1)).event, ArchEvent::CoreCycles);
    }

    #[test]
    fn one_decode_serves_the_access_and_the_callers_bookkeeping() {
        let mut pmu = Pmu::new(PmuConfig::default(), crate::MockSource::new()).unwrap();
        let ctrl = pmu.decode(MsrIndex::IA32_PERF_GLOBAL_CTRL);
        assert_eq!((ctrl.index(), ctrl.reg()), (MsrIndex::IA32_PERF_GLOBAL_CTRL, Some(PmuReg::GlobalCtrl)));
        assert!(pmu.set_decoded(ctrl, 1, Initiator::Guest).is_ok());
        assert_eq!(pmu.get_msr(MsrIndex::IA32_PERF_GLOBAL_CTRL, Initiator::Guest), MsrAccess::Ok(1));
        // An MSR this PMU lacks decodes to no register, and its access #GPs.
        let absent = pmu.decode(MsrIndex(0x10));
        assert_eq!(absent.reg(), None);
        assert!(pmu.get_decoded(absent, Initiator::Guest).is_fault());
        let stats = pmu.stats();
        assert_eq!((stats.faults, stats.msr_writes.get(&0x38f), stats.msr_reads.get(&0x10)), (1, Some(&1), Some(&1)));
    }
}
