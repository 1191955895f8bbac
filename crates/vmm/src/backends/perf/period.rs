//! Sampling periods on the host: event units against host units, the shortest period we
//! program, and when a running sampling timer already fires where it should.

use super::PerfMode;
use pmu::{ArchEvent, HostEventConfig};

/// A sampling period so long it never fires: perf only accepts IOC_PERIOD on events opened
/// as sampling events, so every event is opened with this and re-armed as needed.
pub(crate) const NEVER: u64 = 1 << 62;
/// Shortest overflow period we program for the software clock. The kernel's floor is 10 us;
/// we stay well above it because every notification costs the vCPU a signal and an exit.
pub(crate) const MIN_CLOCK_PERIOD_NS: u64 = 50_000;

impl PerfMode {
    /// Event units -> host units (cycles -> ns for the software clock, no shorter than
    /// `floor_ns`), rounding up.
    pub(crate) fn to_host_units(self, counts: u64, floor_ns: u64) -> u64 {
        match self {
            PerfMode::Hardware => counts.max(1),
            PerfMode::SoftwareClock { tsc_khz } => {
                let ns = pmu::tsc::TscRate::from_khz(tsc_khz).map_or(NEVER, |tsc| tsc.cycles_to_ns_ceil(counts));
                ns.min(NEVER).max(floor_ns)
            }
        }
    }

    /// Host units -> event units.
    pub(crate) fn in_event_units(self, raw: u64) -> u64 {
        match self {
            PerfMode::Hardware => raw,
            PerfMode::SoftwareClock { tsc_khz } => {
                pmu::tsc::TscRate::from_khz(tsc_khz).map_or(0, |tsc| tsc.ns_to_cycles(raw))
            }
        }
    }
}

/// The events a software clock counts at all: core and reference cycles.
pub fn clock_supports(event: ArchEvent) -> bool {
    matches!(event, ArchEvent::CoreCycles | ArchEvent::RefCycles)
}

/// Whether a software clock counts what `config` asks: core or reference cycles in the
/// guest kernel. A clock cannot tell privilege levels apart, and perfvm guests run at CPL0,
/// so a counter without OS counts nothing (no event) rather than wrong time; nor can it
/// filter edge/inv/cmask.
pub(crate) fn clock_counts(config: &HostEventConfig) -> bool {
    clock_supports(config.event) && config.os && !config.edge && !config.inv && config.cmask == 0
}

/// Whether a timer next due at `due` fires close enough to `wanted`, an overflow `distance`
/// away: within 1/64 of it (a periodic timer that fired starts over with the same period,
/// which is where periodic sampling with a reload wants the next overflow).
pub(crate) fn lands(due: u64, wanted: u64, distance: u64) -> bool {
    due.abs_diff(wanted) <= distance / 64
}

/// Whether a timer due at `due` notices an overflow at `wanted`, `distance` away, in time
/// after a notification: at it or after it by at most 1/16 of the distance (a sample's time
/// shifts by that much; its count does not, the clock is read), never before it, as `lands`
/// allows: a timer kept across a notification that fired just before the overflow would
/// find the counter short of it and notice it a period late.
pub(crate) fn fires_just_after(due: u64, wanted: u64, distance: u64) -> bool {
    due >= wanted && due - wanted <= distance / 16
}
