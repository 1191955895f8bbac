//! What the host's perf can count: hardware events, or only a software clock.

use crate::backends::perf_sys::*;
use serde::Serialize;

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
    /// Hardware if the host can open a hardware instructions event, else software clock.
    pub fn detect(tsc_khz: u64) -> PerfMode {
        let probe = PerfEventAttr {
            type_: PERF_TYPE_HARDWARE,
            config: PERF_COUNT_HW_INSTRUCTIONS,
            flags: FLAG_DISABLED | FLAG_EXCLUDE_HOST,
            ..Default::default()
        };
        match PerfEvent::open(&probe) {
            Ok(_) => PerfMode::Hardware,
            Err(_) => PerfMode::SoftwareClock { tsc_khz: tsc_khz.max(1) },
        }
    }

    /// What counts in this mode, for `--stats`.
    pub fn describe(&self) -> String {
        match self {
            PerfMode::Hardware => "hardware events (host PMU, guest mode only)".into(),
            PerfMode::SoftwareClock { tsc_khz } => {
                format!("software task-clock (no host PMU): cycles = vCPU thread time x {tsc_khz} kHz TSC")
            }
        }
    }
}
