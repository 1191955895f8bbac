//! Thin, safe wrappers over perf_event_open(2) and its ioctls, for events on the calling
//! thread. Every call is counted, because "backend syscalls" is a number we report.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// perf_event_attr, ABI version 5 (112 bytes); later kernels accept it.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct PerfEventAttr {
    /// Event type (`PERF_TYPE_*`).
    pub type_: u32,
    /// Size of this struct; set by [`PerfEvent::open`].
    pub size: u32,
    /// Event within the type (`PERF_COUNT_*`, a tracepoint id).
    pub config: u64,
    /// Events between overflow notifications (union with sample_freq).
    pub sample_period: u64,
    /// What a sample records (`PERF_SAMPLE_*`); we take none.
    pub sample_type: u64,
    /// What read(2) returns (`PERF_FORMAT_*`).
    pub read_format: u64,
    /// The attribute bitfield (`FLAG_*`: disabled, exclude_user, ...).
    pub flags: u64,
    /// Overflows per wakeup (union with wakeup_watermark).
    pub wakeup_events: u32,
    /// Breakpoint type, for breakpoint events.
    pub bp_type: u32,
    /// Extension of `config` (union with bp_addr).
    pub config1: u64,
    /// Further extension of `config` (union with bp_len).
    pub config2: u64,
    /// Branch sampling filter (`PERF_SAMPLE_BRANCH_*`).
    pub branch_sample_type: u64,
    /// User registers dumped in samples.
    pub sample_regs_user: u64,
    /// User stack bytes dumped in samples.
    pub sample_stack_user: u32,
    /// Clock of sample timestamps, with use_clockid.
    pub clockid: i32,
    /// Registers dumped in samples taken in interrupt context.
    pub sample_regs_intr: u64,
    /// AUX area bytes per wakeup.
    pub aux_watermark: u32,
    /// Most callchain frames in a sample.
    pub sample_max_stack: u16,
    /// Padding; must be zero.
    pub reserved: u16,
}

/// `type_`: a generalized hardware event.
pub const PERF_TYPE_HARDWARE: u32 = 0;
/// `type_`: a kernel software event.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// Hardware `config`: core cycles.
pub const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
/// Hardware `config`: instructions retired.
pub const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
/// Hardware `config`: last-level cache references.
pub const PERF_COUNT_HW_CACHE_REFERENCES: u64 = 2;
/// Hardware `config`: last-level cache misses.
pub const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
/// Hardware `config`: branch instructions retired.
pub const PERF_COUNT_HW_BRANCH_INSTRUCTIONS: u64 = 4;
/// Hardware `config`: mispredicted branches.
pub const PERF_COUNT_HW_BRANCH_MISSES: u64 = 5;
/// Hardware `config`: reference cycles (TSC rate).
pub const PERF_COUNT_HW_REF_CPU_CYCLES: u64 = 9;
/// Software `config`: the task's CPU time, ns.
pub const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;

/// `flags`: open the event disabled.
pub const FLAG_DISABLED: u64 = 1 << 0;
/// `flags`: do not count user mode.
pub const FLAG_EXCLUDE_USER: u64 = 1 << 4;
/// `flags`: do not count kernel mode.
pub const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
/// `flags`: do not count the hypervisor.
pub const FLAG_EXCLUDE_HV: u64 = 1 << 6;
/// `flags`: count guest mode only.
pub const FLAG_EXCLUDE_HOST: u64 = 1 << 19;

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

/// `struct f_owner_ex` of fcntl(2).
#[repr(C)]
struct OwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_RESET: libc::c_ulong = 0x2403;
const IOC_PERIOD: libc::c_ulong = 0x4008_2404;

/// Syscalls made by all perf events of this process.
static SYSCALLS: AtomicU64 = AtomicU64::new(0);

/// Total perf syscalls so far (open, ioctl, read, fcntl, close).
pub fn syscalls() -> u64 {
    SYSCALLS.load(Ordering::Relaxed)
}

thread_local! {
    /// The same, by the calling thread only (per-operation costs on a vCPU thread).
    static THREAD_SYSCALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Perf syscalls made so far by the calling thread's events.
pub fn thread_syscalls() -> u64 {
    THREAD_SYSCALLS.with(|c| c.get())
}

/// Perf ioctls of this process that failed: none should, and a counter whose enable,
/// disable or period change failed counts wrong, so `--stats` shows them.
static FAILED_IOCTLS: AtomicU64 = AtomicU64::new(0);

/// Failed perf ioctls so far.
pub fn failed_ioctls() -> u64 {
    FAILED_IOCTLS.load(Ordering::Relaxed)
}

/// `r`, a failure counted.
fn tally(r: io::Result<()>) -> io::Result<()> {
    if r.is_err() {
        FAILED_IOCTLS.fetch_add(1, Ordering::Relaxed);
    }
    r
}

fn counted() {
    SYSCALLS.fetch_add(1, Ordering::Relaxed);
    THREAD_SYSCALLS.with(|c| c.set(c.get() + 1));
}

/// One open perf event of the calling thread. Closed on drop.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
    /// Whether this event's syscalls count as PMU backend work (not for instrumentation).
    tracked: bool,
}

impl PerfEvent {
    /// Open `attr` for the calling thread on any CPU.
    pub fn open(attr: &PerfEventAttr) -> io::Result<PerfEvent> {
        Self::open_with(attr, true)
    }

    /// Open an event for instrumentation; its syscalls are not counted as PMU work.
    pub fn open_untracked(attr: &PerfEventAttr) -> io::Result<PerfEvent> {
        Self::open_with(attr, false)
    }

    fn open_with(attr: &PerfEventAttr, tracked: bool) -> io::Result<PerfEvent> {
        let mut attr = *attr;
        attr.size = std::mem::size_of::<PerfEventAttr>() as u32;
        if tracked {
            counted();
        }
        // SAFETY: attr is a valid, fully initialised perf_event_attr of the size we declare.
        let fd = unsafe {
            libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a new fd that nothing else owns.
        Ok(PerfEvent { fd: unsafe { OwnedFd::from_raw_fd(fd as i32) }, tracked })
    }

    fn count(&self) {
        if self.tracked {
            counted();
        }
    }

    fn ioctl(&self, request: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
        self.count();
        // SAFETY: a perf ioctl on our own fd; PERIOD's pointer argument is handled by `set_period`.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), request, arg) };
        if r < 0 {
            tally(Err(io::Error::last_os_error()))
        } else {
            Ok(())
        }
    }

    /// Start counting.
    pub fn enable(&self) -> io::Result<()> {
        self.ioctl(IOC_ENABLE, 0)
    }

    /// Stop counting; the count is kept.
    pub fn disable(&self) -> io::Result<()> {
        self.ioctl(IOC_DISABLE, 0)
    }

    /// Set the count to zero.
    pub fn reset(&self) -> io::Result<()> {
        self.ioctl(IOC_RESET, 0)
    }

    /// Change the sampling period (takes effect at the next overflow or enable).
    pub fn set_period(&self, period: u64) -> io::Result<()> {
        self.count();
        // SAFETY: PERF_EVENT_IOC_PERIOD reads one u64 through the pointer, which is live.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), IOC_PERIOD, &period as *const u64) };
        if r < 0 {
            tally(Err(io::Error::last_os_error()))
        } else {
            Ok(())
        }
    }

    /// The current count.
    pub fn read(&self) -> io::Result<u64> {
        let mut value = 0u64;
        self.count();
        // SAFETY: reading 8 bytes into a u64 we own.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), &mut value as *mut u64 as *mut libc::c_void, 8) };
        if n != 8 {
            return Err(io::Error::last_os_error());
        }
        Ok(value)
    }

    /// Deliver `signal` to thread `tid` at every overflow (O_ASYNC + F_SETSIG + F_SETOWN_EX).
    pub fn signal_overflows_to(&self, tid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        let owner = OwnerEx { kind: F_OWNER_TID, pid: tid };
        // SAFETY: fcntl on our own fd with valid arguments.
        unsafe {
            self.count();
            if libc::fcntl(fd, libc::F_SETFL, libc::O_ASYNC) < 0 {
                return Err(io::Error::last_os_error());
            }
            self.count();
            if libc::fcntl(fd, F_SETSIG, signal) < 0 {
                return Err(io::Error::last_os_error());
            }
            self.count();
            if libc::fcntl(fd, F_SETOWN_EX, &owner as *const OwnerEx) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The event's file descriptor, still owned by this event.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Map the event's control page (`struct perf_event_mmap_page`, no ring buffer), which
    /// the kernel rewrites under its `lock` sequence count whenever it updates the event.
    pub fn user_page(&self) -> io::Result<UserPage> {
        self.count();
        // SAFETY: a fresh read-only shared mapping of one page of our own perf fd; the
        // kernel allows mapping just the control page. Unmapped by UserPage's Drop.
        let addr = unsafe {
            libc::mmap(std::ptr::null_mut(), USER_PAGE_LEN, libc::PROT_READ, libc::MAP_SHARED, self.fd.as_raw_fd(), 0)
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(UserPage { addr: addr.cast() })
    }
}

/// Bytes of the control page mapping (the kernel wants a page).
const USER_PAGE_LEN: usize = 4096;
/// `perf_event_mmap_page::lock`, in u32 words from the page's start.
const USER_PAGE_LOCK: usize = 2;

/// A perf event's control page, mapped read-only.
#[derive(Debug)]
pub struct UserPage {
    addr: *const u32,
}

impl UserPage {
    /// The page's sequence count (`perf_event_mmap_page::lock`, after `version` and
    /// `compat_version`): it changes whenever the kernel updates the page, e.g. when it
    /// schedules the thread in.
    pub fn seq(&self) -> u32 {
        // SAFETY: the page stays mapped while self lives and the field is within it; the
        // kernel writes it concurrently, hence the volatile read of an aligned u32.
        unsafe { std::ptr::read_volatile(self.addr.add(USER_PAGE_LOCK)) }
    }
}

// SAFETY: the mapping is ordinary process memory that stays valid until Drop; any thread
// may read it (the VMM reads it on the event's own vCPU thread, which owns the event).
unsafe impl Send for UserPage {}

impl Drop for UserPage {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping user_page made, once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, USER_PAGE_LEN) };
    }
}

impl Drop for PerfEvent {
    fn drop(&mut self) {
        self.count(); // close(2), done by OwnedFd
    }
}

/// The calling thread's id.
pub fn gettid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task_clock() -> PerfEventAttr {
        PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_TASK_CLOCK,
            flags: FLAG_DISABLED,
            ..Default::default()
        }
    }

    #[test]
    fn attr_has_abi_v5_size() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 112);
    }

    #[test]
    fn task_clock_counts_only_while_enabled() {
        let ev = match PerfEvent::open(&task_clock()) {
            Ok(ev) => ev,
            Err(e) => {
                crate::vstate::kvm::skip_test("task_clock_counts_only_while_enabled", &format!("perf_event_open: {e}"));
                return;
            }
        };
        assert_eq!(ev.read().unwrap(), 0);
        // Spin for 5 ms of this thread's own CPU time, so host load cannot shorten it.
        let cpu_ns = || {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: clock_gettime writes one timespec we own.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        ev.enable().unwrap();
        let start = cpu_ns();
        while cpu_ns() - start < 5_000_000 {}
        ev.disable().unwrap();
        let counted = ev.read().unwrap();
        assert!(counted >= 4_500_000, "task-clock counted {counted} ns over 5 ms of thread CPU time");
        let spin = std::time::Instant::now();
        while spin.elapsed().as_millis() < 2 {}
        assert_eq!(ev.read().unwrap(), counted, "a disabled event must not advance");
    }
}
