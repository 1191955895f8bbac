//! Save/restore of the guest-visible PMU state.

use crate::backend::CountSource;
use crate::error::RestoreError;
use crate::msr::{Initiator, MsrIndex};
use crate::pmc::{PmcIdx, COUNTER_MASK};
use crate::pmu::Pmu;
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
            misc_enable: Some(self.misc_enable),
        }
    }

    /// Resets the PMU, then loads `state` through host-initiated MSR writes (so every value
    /// passes the same checks as on real MSRs), GLOBAL_CTRL last so counting starts only
    /// once everything is in place. A snapshot of the wrong format or shape is refused
    /// before anything changes; if a value is rejected, the PMU is left reset.
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
        self.host_write(MsrIndex::IA32_PERF_GLOBAL_CTRL, 0)?;
        for (i, &v) in (0u8..).zip(&s.eventsel) {
            self.host_write(MsrIndex::perfevtsel(i), v)?;
        }
        // Host writes to legacy PMCs are not sign-extended but would be truncated: refuse
        // values wider than a counter instead of silently losing bits.
        for (i, &v) in (0u8..).zip(&s.pmc) {
            self.host_write_counter(MsrIndex::pmc(i), v)?;
        }
        for (j, &v) in (0u8..).zip(&s.fixed_ctr) {
            self.host_write_counter(MsrIndex::fixed_ctr(j), v)?;
        }
        self.host_write(MsrIndex::IA32_FIXED_CTR_CTRL, s.fixed_ctr_ctrl)?;
        self.host_write(MsrIndex::IA32_PERF_GLOBAL_STATUS, s.global_status)?;
        // PEBS_ENABLE and DS_AREA exist only with PEBS: a snapshot that sets them is
        // refused by a PMU without (the host write faults).
        if let Some(v) = s.misc_enable {
            self.host_write(MsrIndex::IA32_MISC_ENABLE, v)?;
        }
        if self.caps.pebs() || s.ds_area != 0 {
            self.host_write(MsrIndex::IA32_DS_AREA, s.ds_area)?;
        }
        if self.caps.pebs() || s.pebs_enable != 0 {
            self.host_write(MsrIndex::IA32_PEBS_ENABLE, s.pebs_enable)?;
        }
        self.host_write(MsrIndex::IA32_PERF_GLOBAL_CTRL, s.global_ctrl)
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
