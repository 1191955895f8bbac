//! Save/restore of the guest-visible PMU state.

use crate::backend::CountSource;
use crate::error::RestoreError;
use crate::msr::{Initiator, MsrIndex};
use crate::pmc::{PmcIdx, COUNTER_MASK};
use crate::pmu::Pmu;
use crate::vendor::{CounterWrite, PmuReg};
use serde::{Deserialize, Serialize};

/// Format number written into [`PmuState::format`].
pub const STATE_FORMAT: u32 = 1;

/// Snapshot of every guest-visible PMU register. Configuration (counter counts, full-width
/// writes, policy, PEBS) is not part of it: restore into a PMU built with the same config.
/// Like an owed PMI, an armed or due PEBS assist is not saved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmuState {
    /// [`STATE_FORMAT`].
    pub format: u32,
    /// IA32_PMCx values.
    pub pmc: Vec<u64>,
    /// IA32_PERFEVTSELx values.
    pub eventsel: Vec<u64>,
    /// IA32_FIXED_CTRj values.
    pub fixed_ctr: Vec<u64>,
    /// IA32_FIXED_CTR_CTRL.
    pub fixed_ctr_ctrl: u64,
    /// IA32_PERF_GLOBAL_CTRL.
    pub global_ctrl: u64,
    /// IA32_PERF_GLOBAL_STATUS.
    pub global_status: u64,
    /// IA32_PEBS_ENABLE (always 0 without PEBS).
    #[serde(default)]
    pub pebs_enable: u64,
    /// IA32_DS_AREA (always 0 without PEBS).
    #[serde(default)]
    pub ds_area: u64,
    /// IA32_MISC_ENABLE (`None` in snapshots from before the model owned it: restored at
    /// its reset value).
    #[serde(default)]
    pub misc_enable: Option<u64>,
}

impl<B: CountSource> Pmu<B> {
    /// Snapshots the guest-visible state (folds running counters; no other side effect).
    pub fn save(&mut self) -> PmuState {
        let gp: Vec<PmcIdx> = self.caps.pmcs().filter(|p| !p.is_fixed()).collect();
        let fixed: Vec<PmcIdx> = self.caps.pmcs().filter(|p| p.is_fixed()).collect();
        PmuState {
            format: STATE_FORMAT,
            pmc: gp.iter().map(|&p| self.read_counter(p)).collect(),
            eventsel: gp.iter().map(|&p| self.pmcs[p.slot()].eventsel).collect(),
            fixed_ctr: fixed.iter().map(|&p| self.read_counter(p)).collect(),
            fixed_ctr_ctrl: self.fixed_ctr_ctrl,
            global_ctrl: self.global_ctrl,
            global_status: self.global_status,
            pebs_enable: self.pebs_enable,
            ds_area: self.ds_area,
            misc_enable: self.caps.has_reg(PmuReg::MiscEnable).then_some(self.misc_enable),
        }
    }

    /// Resets the PMU, then loads `state` through host-initiated writes of the vendor's MSRs
    /// (so every value passes the same checks as on real MSRs), GLOBAL_CTRL last so counting
    /// starts only once everything is in place. A snapshot of the wrong format or shape is
    /// refused before anything changes; if a value is rejected, the PMU is left reset. A
    /// register this PMU does not have must hold its reset value (0, or none for
    /// MISC_ENABLE) in the snapshot.
    pub fn restore(&mut self, state: &PmuState) -> Result<(), RestoreError> {
        if state.format != STATE_FORMAT {
            return Err(RestoreError::Format(state.format));
        }
        let (gp, fixed) = (self.caps.gp_counters(), self.caps.fixed_counters());
        if state.pmc.len() != usize::from(gp)
            || state.eventsel.len() != usize::from(gp)
            || state.fixed_ctr.len() != usize::from(fixed)
        {
            return Err(RestoreError::Shape {
                found_gp: state.pmc.len().max(state.eventsel.len()),
                found_fixed: state.fixed_ctr.len(),
                gp,
                fixed,
            });
        }
        self.reset();
        let r = self.load(state);
        if r.is_err() {
            self.reset();
        }
        r
    }

    fn load(&mut self, s: &PmuState) -> Result<(), RestoreError> {
        let gp = || (0u8..).map_while(PmcIdx::gp);
        let fixed = || (0u8..).map_while(PmcIdx::fixed);
        // With a global enable, hold counting back with it until everything is in place.
        // Without one (AMD before PerfMonV2) the selectors start the counters, so they come
        // last, after every other value has been accepted: a refused snapshot never starts
        // a counter.
        let gated = self.caps.has_reg(PmuReg::GlobalCtrl);
        if gated {
            self.load_reg(PmuReg::GlobalCtrl, 0, 0)?;
            for (idx, &v) in gp().zip(&s.eventsel) {
                self.load_reg(PmuReg::EventSel(idx), v, 0)?;
            }
        }
        // Host writes to legacy PMCs are not sign-extended but would be truncated: refuse
        // values wider than a counter instead of silently losing bits.
        for (idx, &v) in gp().zip(&s.pmc) {
            self.load_counter(idx, v)?;
        }
        for (idx, &v) in fixed().zip(&s.fixed_ctr) {
            self.load_counter(idx, v)?;
        }
        self.load_reg(PmuReg::FixedCtrCtrl, s.fixed_ctr_ctrl, 0)?;
        self.load_reg(PmuReg::GlobalStatus, s.global_status, 0)?;
        // PEBS_ENABLE and DS_AREA exist only with PEBS: a snapshot that sets them is
        // refused by a PMU without (the host write faults).
        if let Some(v) = s.misc_enable {
            // Any value: a snapshot that has one needs the register (`!v` is never `v`).
            self.load_reg(PmuReg::MiscEnable, v, !v)?;
        }
        self.load_reg(PmuReg::DsArea, s.ds_area, 0)?;
        self.load_reg(PmuReg::PebsEnable, s.pebs_enable, 0)?;
        if gated {
            return self.load_reg(PmuReg::GlobalCtrl, s.global_ctrl, 0);
        }
        if s.global_ctrl != self.global_ctrl {
            return Err(RestoreError::Absent { register: PmuReg::GlobalCtrl, value: s.global_ctrl });
        }
        for (idx, &v) in gp().zip(&s.eventsel) {
            self.load_reg(PmuReg::EventSel(idx), v, 0)?;
        }
        Ok(())
    }

    /// Host write of `value` to `reg` through its MSR. A register this PMU does not have
    /// takes only `absent` (skipped); any other value is refused: the write is tried and
    /// faults, or, if the vendor has no MSR for it at all, [`RestoreError::Absent`].
    fn load_reg(&mut self, reg: PmuReg, value: u64, absent: u64) -> Result<(), RestoreError> {
        match self.caps.reg_msr(reg) {
            Some(msr) if value != absent || self.caps.decode_msr(msr).is_some() => self.host_write(msr, value),
            None if value != absent => Err(RestoreError::Absent { register: reg, value }),
            _ => Ok(()),
        }
    }

    fn load_counter(&mut self, idx: PmcIdx, value: u64) -> Result<(), RestoreError> {
        let reg = PmuReg::Counter(idx, CounterWrite::Masked);
        let Some(msr) = self.caps.reg_msr(reg) else {
            return Err(RestoreError::Absent { register: reg, value });
        };
        self.host_write_counter(msr, value)
    }

    fn host_write_counter(&mut self, msr: MsrIndex, value: u64) -> Result<(), RestoreError> {
        if value & !COUNTER_MASK != 0 {
            return Err(RestoreError::Rejected { msr: msr.0, value });
        }
        self.host_write(msr, value)
    }

    fn host_write(&mut self, msr: MsrIndex, value: u64) -> Result<(), RestoreError> {
        self.set_msr(msr, value, Initiator::Host).ok().ok_or(RestoreError::Rejected { msr: msr.0, value })
    }
}
