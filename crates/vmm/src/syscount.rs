//! Counting a thread's syscalls independently of our own bookkeeping: a perf counter on the
//! `raw_syscalls:sys_enter` tracepoint (needs tracefs; mounted on demand when we are root).

use crate::backends::perf_sys::{PerfEvent, PerfEventAttr, FLAG_DISABLED};
use std::path::Path;

const PERF_TYPE_TRACEPOINT: u32 = 2;
const TRACEFS: &str = "/sys/kernel/tracing";
const ID_PATHS: [&str; 2] = [
    "/sys/kernel/tracing/events/raw_syscalls/sys_enter/id",
    "/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id",
];

/// The tracepoint's id, found once (mounting tracefs runs `mount`, which a confined VMM
/// cannot: `prime` runs before the filters go in).
fn tracepoint_id() -> Result<u64, String> {
    static ID: std::sync::OnceLock<Result<u64, String>> = std::sync::OnceLock::new();
    ID.get_or_init(find_tracepoint_id).clone()
}

/// Find the tracepoint's id now (see `tracepoint_id`).
pub fn prime() {
    let _ = tracepoint_id();
}

fn find_tracepoint_id() -> Result<u64, String> {
    let read = || ID_PATHS.iter().find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse().ok());
    if let Some(id) = read() {
        return Ok(id);
    }
    // Not mounted yet: try (root only).
    if Path::new(TRACEFS).exists() {
        let _ = std::process::Command::new("mount").args(["-t", "tracefs", "nodev", TRACEFS]).status();
    }
    read().ok_or_else(|| "tracefs raw_syscalls:sys_enter is not available (mount tracefs as root)".into())
}

/// Why syscalls cannot be counted here, or None.
pub fn unavailable_reason() -> Option<String> {
    tracepoint_id().and_then(SyscallCounter::open).err()
}

/// Counts the syscalls of the thread that opened it.
#[derive(Debug)]
pub struct SyscallCounter {
    event: PerfEvent,
}

impl SyscallCounter {
    fn open(id: u64) -> Result<SyscallCounter, String> {
        let attr =
            PerfEventAttr { type_: PERF_TYPE_TRACEPOINT, config: id, flags: FLAG_DISABLED, ..Default::default() };
        let event =
            PerfEvent::open_untracked(&attr).map_err(|e| format!("perf_event_open(raw_syscalls:sys_enter): {e}"))?;
        Ok(SyscallCounter { event })
    }

    /// Start counting the calling thread's syscalls.
    pub fn start() -> Result<SyscallCounter, String> {
        let counter = Self::open(tracepoint_id()?)?;
        counter.event.enable().map_err(|e| e.to_string())?;
        Ok(counter)
    }

    /// Syscalls so far, not counting the read itself.
    pub fn read(&self) -> u64 {
        self.event.read().map(|n| n.saturating_sub(1)).unwrap_or(0)
    }
}
