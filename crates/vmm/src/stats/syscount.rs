//! Counting a thread's syscalls independently of our own bookkeeping: a perf counter on the
//! `raw_syscalls:sys_enter` tracepoint. It needs tracefs mounted: the VMM spawns nothing and
//! mounts nothing, so where tracefs is absent the count is said to be unavailable
//! (`mount -t tracefs nodev /sys/kernel/tracing` as root makes it available).

use crate::backends::perf_sys::{PerfEvent, PerfEventAttr, FLAG_DISABLED};

const PERF_TYPE_TRACEPOINT: u32 = 2;
const ID_PATHS: [&str; 2] = [
    "/sys/kernel/tracing/events/raw_syscalls/sys_enter/id",
    "/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id",
];

/// Why a thread's syscalls cannot be counted.
#[derive(Debug, thiserror::Error)]
pub enum SyscountError {
    /// tracefs is not mounted.
    #[error("tracefs raw_syscalls:sys_enter is not available (mount -t tracefs nodev /sys/kernel/tracing)")]
    NoTracepoint,
    /// The counter could not be opened.
    #[error("perf_event_open(raw_syscalls:sys_enter): {0}")]
    Open(std::io::Error),
    /// The counter could not be started.
    #[error("enabling the syscall counter: {0}")]
    Enable(std::io::Error),
}

/// The tracepoint's id, found once (`prime` reads it before the filters go in).
fn tracepoint_id() -> Result<u64, SyscountError> {
    static ID: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    ID.get_or_init(find_tracepoint_id).ok_or(SyscountError::NoTracepoint)
}

/// Find the tracepoint's id now (see `tracepoint_id`).
pub fn prime() {
    let _ = tracepoint_id();
}

fn find_tracepoint_id() -> Option<u64> {
    ID_PATHS.iter().find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse().ok())
}

/// Why syscalls cannot be counted here, or None.
pub fn unavailable_reason() -> Option<String> {
    tracepoint_id().and_then(SyscallCounter::open).err().map(|e| e.to_string())
}

/// Counts the syscalls of the thread that opened it.
#[derive(Debug)]
pub struct SyscallCounter {
    event: PerfEvent,
}

impl SyscallCounter {
    fn open(id: u64) -> Result<SyscallCounter, SyscountError> {
        let attr =
            PerfEventAttr { type_: PERF_TYPE_TRACEPOINT, config: id, flags: FLAG_DISABLED, ..Default::default() };
        let event = PerfEvent::open_untracked(&attr).map_err(SyscountError::Open)?;
        Ok(SyscallCounter { event })
    }

    /// Start counting the calling thread's syscalls.
    pub fn start() -> Result<SyscallCounter, SyscountError> {
        let counter = Self::open(tracepoint_id()?)?;
        counter.event.enable().map_err(SyscountError::Enable)?;
        Ok(counter)
    }

    /// Syscalls so far, not counting the read itself.
    pub fn read(&self) -> u64 {
        self.event.read().map(|n| n.saturating_sub(1)).unwrap_or(0)
    }
}
