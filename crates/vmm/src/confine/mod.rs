//! Confining the VMM as Firecracker does: each thread installs the seccomp-bpf filter of
//! its kind (filters.rs) before the guest's first instruction, with no_new_privs, and the
//! VMM thread drops the capabilities it no longer needs (privileges.rs). A forbidden
//! system call is trapped: the SIGSYS handler (sigsys.rs) says which one in one line and
//! the process dies of SIGSYS. On by default; `--seccomp off` turns the filters off (not
//! no_new_privs) for debugging. docs/SECURITY.md says what is confined and what is not.

pub mod cost;
mod filters;
mod privileges;
mod sigsys;

pub use filters::filter_for;
pub use privileges::{limit_core_dumps, set_no_new_privs};
use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a thread could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// prctl(PR_SET_NO_NEW_PRIVS) failed.
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(io::Error),
    /// The thread's capabilities could not be read.
    #[error("capget: {0}")]
    Capget(io::Error),
    /// The thread's capabilities could not be dropped.
    #[error("capset: {0}")]
    Capset(io::Error),
    /// The SIGSYS handler could not be installed.
    #[error("cannot handle SIGSYS: {0}")]
    Sigsys(io::Error),
    /// A thread kind's filter does not compile.
    #[error("seccomp filter for the {thread} thread: {source}")]
    Compile {
        /// The thread kind's name.
        thread: &'static str,
        /// What seccompiler said.
        source: seccompiler::BackendError,
    },
    /// The kernel refused a filter.
    #[error("cannot install the {thread} seccomp filter: {source}")]
    Install {
        /// The thread kind's name.
        thread: &'static str,
        /// What seccompiler said.
        source: seccompiler::Error,
    },
    /// The thread measuring the filters' cost panicked.
    #[error("the measuring thread panicked")]
    MeasurePanicked,
}

/// The kinds of thread, each with its own allowlist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadKind {
    /// The main (VMM) thread: builds VMs, waits for their end, reads and writes files.
    Vmm,
    /// A vCPU thread: KVM_RUN, the vPMU's host perf events, the console.
    Vcpu,
    /// A helper thread (console input reader, agent-line splitter): reads and writes
    /// descriptors it already has.
    Helper,
}

impl ThreadKind {
    /// The name the SIGSYS line and the test hook use.
    pub fn name(self) -> &'static str {
        match self {
            ThreadKind::Vmm => "vmm",
            ThreadKind::Vcpu => "vcpu",
            ThreadKind::Helper => "helper",
        }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(true);

thread_local! {
    /// This thread's filter is installed (a thread is confined once: filters stack). Not
    /// set with the filters off, so a thread can still be confined after (bench measures
    /// runs without filters first).
    static CONFINED: Cell<bool> = const { Cell::new(false) };
}

/// Turn the seccomp filters on or off for the threads confined from now on.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::SeqCst);
}

/// Whether threads get seccomp filters.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::SeqCst)
}

/// Confine the calling thread as `kind` (once per thread; later calls do nothing): the VMM
/// thread first drops capabilities and opens what the filters forbid later; every thread
/// sets no_new_privs, then its filter (when enabled).
pub fn confine_thread(kind: ThreadKind) -> Result<(), ConfineError> {
    if CONFINED.with(Cell::get) {
        return Ok(());
    }
    set_no_new_privs()?;
    privileges::drop_capabilities(kind)?;
    if kind == ThreadKind::Vmm {
        // The syscall tracepoint's id, read now: the filters forbid the read later.
        crate::stats::syscount::prime();
    }
    if enabled() {
        sigsys::install(kind)?;
        for program in filter_for(kind)? {
            seccompiler::apply_filter(&program)
                .map_err(|source| ConfineError::Install { thread: kind.name(), source })?;
        }
        CONFINED.with(|c| c.set(true));
    }
    Ok(())
}
