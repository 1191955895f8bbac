//! Profiling a host program as `perf record -e cpu-clock` does: a software cpu-clock event
//! on the child process samples its instruction pointer every `period_ns` of its CPU time
//! into the event's ring buffer (`perf_event_mmap_page` and the data pages after it), read
//! once the child has exited. As `perf record` does for a workload it starts, one event per
//! CPU is opened on the calling thread, disabled, with `inherit` and `enable_on_exec`: the
//! child forked from it inherits them and the kernel enables the child's copies at its exec,
//! so they see the program from its first instruction, and an inherited event's samples go
//! to its parent's ring buffer on that CPU (the kernel maps no buffer of an inherited event
//! that follows the task across CPUs). The calling thread's own copies never exec and never
//! count. `bench precision` compares a native guest's cycles profile with this.

use crate::backends::perf_sys::{PerfEventAttr, FLAG_DISABLED, FLAG_EXCLUDE_HV, FLAG_EXCLUDE_KERNEL};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, ExitStatus};

/// Software `config`: the CPU clock (per-task when opened on a task), ns.
const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
/// `sample_type`: the instruction pointer.
const PERF_SAMPLE_IP: u64 = 1 << 0;
/// `flags`: children inherit the event.
const FLAG_INHERIT: u64 = 1 << 1;
/// `flags`: enable the event when the task execs.
const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;
/// `perf_event_header::type` of a sample, and of lost records.
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_RECORD_LOST: u32 = 2;
/// Data pages of each CPU's ring buffer (a power of two): 512 KiB, 32,768 IP samples.
const DATA_PAGES: usize = 128;
const PAGE: usize = 4096;
/// perf_event_open(2) `flags`: the fd is close-on-exec (the child inherits the event, not the fd).
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `perf_event_mmap_page::data_head`, bytes from the page's start.
const DATA_HEAD: usize = 1024;

/// What the profile of one run of a program holds.
#[derive(Debug)]
pub struct HostProfile {
    /// How the program ended.
    pub status: ExitStatus,
    /// Its user-mode instruction pointers, one per sample, in order.
    pub ips: Vec<u64>,
    /// Samples the kernel could not store (a full ring buffer).
    pub lost: u64,
    /// What it printed on stdout.
    pub stdout: String,
}

/// Run `cmd` and sample its user-mode IP every `period_ns` of its CPU time.
pub fn profile(cmd: &mut Command, period_ns: u64) -> io::Result<HostProfile> {
    // SAFETY: sysconf(3) reads a system value.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as i32;
    let mut samplers = Vec::new();
    for cpu in 0..cpus {
        match open_sampler(period_ns, cpu) {
            Ok(s) => samplers.push(s),
            // An offline CPU runs nothing; any other failure is the profile's.
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
            Err(e) => return Err(e),
        }
    }
    let output = cmd.stdout(std::process::Stdio::piped()).output();
    let (mut ips, mut lost) = (Vec::new(), 0);
    for (fd, ring) in samplers {
        // No later child of this thread inherits it.
        drop(fd);
        let (i, l) = ring.samples();
        ips.extend(i);
        lost += l;
    }
    let output = output?;
    Ok(HostProfile { status: output.status, ips, lost, stdout: String::from_utf8_lossy(&output.stdout).into() })
}

/// Open the sampling cpu-clock of the calling thread on `cpu` for its children (enabled at
/// their exec) and map its ring buffer.
fn open_sampler(period_ns: u64, cpu: i32) -> io::Result<(OwnedFd, Ring)> {
    let mut attr = PerfEventAttr {
        type_: crate::backends::perf_sys::PERF_TYPE_SOFTWARE,
        config: PERF_COUNT_SW_CPU_CLOCK,
        sample_period: period_ns.max(10_000),
        sample_type: PERF_SAMPLE_IP,
        flags: FLAG_DISABLED | FLAG_INHERIT | FLAG_ENABLE_ON_EXEC | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
        ..Default::default()
    };
    attr.size = std::mem::size_of::<PerfEventAttr>() as u32;
    // SAFETY: attr is a valid, fully initialised perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, 0, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let ring = Ring::map(&fd)?;
    Ok((fd, ring))
}

/// The event's control page and data pages, mapped read-write (the reader owns data_tail).
struct Ring {
    base: *mut u8,
    len: usize,
}

impl Ring {
    fn map(fd: &OwnedFd) -> io::Result<Ring> {
        let len = (1 + DATA_PAGES) * PAGE;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a new shared mapping of the event's buffer; unmapped in Drop.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Ring { base: p as *mut u8, len })
    }

    /// Every sample's IP since the start (the child has exited: the buffer is final), and
    /// the samples lost.
    fn samples(&self) -> (Vec<u64>, u64) {
        // SAFETY: data_head is a u64 inside the mapped control page.
        let head = unsafe { std::ptr::read_volatile(self.base.add(DATA_HEAD) as *const u64) } as usize;
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let size = DATA_PAGES * PAGE;
        // SAFETY: the data pages follow the control page inside the mapping.
        let data = unsafe { std::slice::from_raw_parts(self.base.add(PAGE), size) };
        let byte = |at: usize| data[at % size];
        let word = |at: usize, n: usize| (0..n).fold(0u64, |v, i| v | u64::from(byte(at + i)) << (8 * i));
        // Nothing is read before the end, so the kernel never overwrote a record: they start at 0
        // (past a full buffer it dropped samples instead, and said so in LOST records).
        let (mut ips, mut lost, mut at) = (Vec::new(), 0, 0);
        let head = head.min(size);
        while at + 8 <= head {
            let (kind, len) = (word(at, 4) as u32, word(at + 6, 2) as usize);
            if len < 8 {
                break;
            }
            match kind {
                PERF_RECORD_SAMPLE if len >= 16 => ips.push(word(at + 8, 8)),
                PERF_RECORD_LOST if len >= 24 => lost += word(at + 16, 8),
                _ => {}
            }
            at += len;
        }
        (ips, lost)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A busy shell loop sampled every 100 us of its CPU time: samples arrive, in user space.
    #[test]
    fn a_busy_child_is_sampled_in_user_space() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done"]);
        let p = match profile(&mut cmd, 100_000) {
            Ok(p) => p,
            Err(e) => {
                crate::vstate::kvm::skip_test("host_profile", &format!("perf_event_open: {e}"));
                return;
            }
        };
        assert!(p.status.success(), "{:?}", p.status);
        assert_eq!(p.stdout.trim(), "done");
        assert!(p.ips.len() >= 50, "{} samples of a busy loop", p.ips.len());
        assert!(p.ips.iter().all(|&ip| ip < 1 << 47), "user-mode IPs only");
    }
}
