//! What the host's perf can count: hardware events, or only a software clock.

use crate::backends::perf_sys::*;
use serde::Serialize;

/// How [`PerfMode::Hardware`] counts.
pub const HARDWARE: &str = "hardware events (host PMU, guest mode only)";
/// How [`PerfMode::SoftwareClock`] counts, whatever its rate.
pub const SOFTWARE_CLOCK: &str = "software task-clock (no host PMU)";

/// What the host can count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum PerfMode {
    /// Host PMU: hardware events, guest mode only.
    Hardware,
    /// No host PMU: cycles from the vCPU thread's task-clock at `tsc_khz`.
    SoftwareClock {
        /// The guest TSC frequency, kHz, that turns clock ns into cycles.
        tsc_khz: u64,
    },
}

impl PerfMode {
    /// Hardware if the host has a PMU ([`PerfMode::host_pmu`]), else software clock.
    pub fn detect(tsc_khz: u64) -> PerfMode {
        match Self::host_pmu() {
            true => PerfMode::Hardware,
            false => PerfMode::SoftwareClock { tsc_khz: tsc_khz.max(1) },
        }
    }

    /// Whether the host can open a hardware instructions event that counts guest mode.
    pub fn host_pmu() -> bool {
        let probe = PerfEventAttr {
            type_: PERF_TYPE_HARDWARE,
            config: PERF_COUNT_HW_INSTRUCTIONS,
            flags: FLAG_DISABLED | FLAG_EXCLUDE_HOST,
            ..Default::default()
        };
        PerfEvent::open(&probe).is_ok()
    }

    /// What counts in this mode, for `--stats`.
    pub fn describe(&self) -> String {
        match self {
            PerfMode::Hardware => HARDWARE.into(),
            PerfMode::SoftwareClock { tsc_khz } => {
                format!("{SOFTWARE_CLOCK}: cycles = vCPU thread time x {tsc_khz} kHz TSC")
            }
        }
    }
}
