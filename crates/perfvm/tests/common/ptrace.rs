//! Faults injected into a running perfvm from outside, with ptrace: the binary the tests run
//! is the one `cargo build --release` makes, with no hook a user's environment could
//! trigger. Each function traces one thread, from the test thread that calls it (ptrace's
//! tracer is a thread), and waits for that thread only, never for other tests' children.

use std::time::{Duration, Instant};

/// The id of `pid`'s first thread whose name starts with `name` (None: its main thread,
/// once it runs perfvm), waiting up to `timeout` for it to appear and, with `confined`, to
/// have its own seccomp filter: more filters than the main thread has (a thread the
/// confined main thread spawned runs under the filters it inherited until it adds its own);
/// the main thread both of its own (`confine::filters::filter_for`: clone3's refusal, then
/// the allowlist; seen between the two, a forbidden call would still pass).
pub fn thread(pid: u32, name: Option<&str>, confined: bool, timeout: Duration) -> Result<i32, String> {
    let deadline = Instant::now() + timeout;
    let filters = |status: &str| {
        status.lines().find_map(|l| l.strip_prefix("Seccomp_filters:")).and_then(|n| n.trim().parse::<u32>().ok())
    };
    loop {
        let main_filters = match name {
            Some(_) => std::fs::read_to_string(format!("/proc/{pid}/status")).ok().and_then(|s| filters(&s)),
            None => Some(1),
        };
        for entry in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let tid = entry.file_name().to_string_lossy().parse::<i32>().map_err(|e| format!("{e}"))?;
            let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
            let thread_name = status.lines().next().map_or("", |l| l.trim_start_matches("Name:").trim());
            let named = match name {
                Some(name) => thread_name.starts_with(name),
                None => tid as u32 == pid && thread_name == "perfvm",
            };
            let filtered = status.lines().any(|l| l.starts_with("Seccomp:") && l.ends_with('2'))
                && filters(&status).zip(main_filters).is_none_or(|(own, main)| own > main);
            if named && (filtered || !confined) {
                return Ok(tid);
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no thread {name:?} in process {pid} after {timeout:?}"));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// `ptrace(request, tid, addr, data)`, its error said with `what`.
fn ptrace(request: libc::c_uint, tid: i32, addr: usize, data: usize, what: &str) -> Result<(), String> {
    // SAFETY: ptrace on a thread of our own child; addr and data are what `request` takes.
    let r = unsafe { libc::ptrace(request, tid, addr as *mut libc::c_void, data as *mut libc::c_void) };
    if r == -1 {
        return Err(format!("{what} of thread {tid}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The next stop (or the end) of traced thread `tid`: its wait status.
fn wait(tid: i32) -> Result<i32, String> {
    let mut status = 0;
    // SAFETY: waitpid for a thread we trace, into a status we own.
    if unsafe { libc::waitpid(tid, &mut status, libc::__WALL) } == -1 {
        return Err(format!("waitpid {tid}: {}", std::io::Error::last_os_error()));
    }
    Ok(status)
}

/// Have thread `tid` make system call `nr` (no arguments) just before the next one it makes,
/// then let it go: at that call's entry the number becomes `nr`, and at its exit the thread
/// is put back to make its own call again, as the kernel restarts one. The kernel's seccomp
/// check comes after ptrace's syscall-entry stop, so the thread's own filter judges `nr` as
/// if the thread had made it.
pub fn inject_syscall(tid: i32, nr: i64) -> Result<(), String> {
    ptrace(libc::PTRACE_SEIZE, tid, 0, libc::PTRACE_O_TRACESYSGOOD as usize, "PTRACE_SEIZE")?;
    ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0, "PTRACE_INTERRUPT")?;
    // Interrupted (a blocking call returns, to be restarted or to say EINTR: its exit stop
    // comes first), then on to the next syscall entry.
    let own = next_syscall_entry(tid)?;
    let mut regs = own;
    regs.orig_rax = nr as u64;
    setregs(tid, &regs)?;
    ptrace(libc::PTRACE_SYSCALL, tid, 0, 0, "PTRACE_SYSCALL")?;
    // The injected call's exit stop, or (refused by seccomp) its SIGSYS's delivery stop,
    // whichever comes first: there the thread goes back before its own `syscall`
    // instruction (2 bytes), its number in RAX, and a SIGSYS is delivered as it detaches
    // (delivered earlier, its handler's own calls would meet the rewind).
    let back = libc::user_regs_struct { rip: own.rip - 2, rax: own.orig_rax, ..own };
    loop {
        let status = wait(tid)?;
        if !libc::WIFSTOPPED(status) {
            return Err(format!("thread {tid} ended in the injected system call ({status:#x})"));
        }
        let signal = libc::WSTOPSIG(status);
        if status >> 8 == (libc::SIGTRAP | 0x80) || (signal == libc::SIGSYS && status >> 16 == 0) {
            setregs(tid, &back)?;
            let deliver = if signal == libc::SIGSYS { signal } else { 0 };
            return ptrace(libc::PTRACE_DETACH, tid, 0, deliver as usize, "PTRACE_DETACH");
        }
        let deliver = if status >> 16 != 0 { 0 } else { signal };
        ptrace(libc::PTRACE_SYSCALL, tid, 0, deliver as usize, "PTRACE_SYSCALL")?;
    }
}

/// Run thread `tid` (stopped) to its next syscall-entry stop (x86-64 reports an entry with
/// -ENOSYS in RAX; an exit stop holds the call's result), past any exit stop.
fn next_syscall_entry(tid: i32) -> Result<libc::user_regs_struct, String> {
    loop {
        let regs = next_syscall_stop(tid)?;
        if regs.rax as i64 == -i64::from(libc::ENOSYS) {
            return Ok(regs);
        }
        ptrace(libc::PTRACE_SYSCALL, tid, 0, 0, "PTRACE_SYSCALL")?;
    }
}

/// Run thread `tid` (stopped) to its next syscall stop, delivering any signal that stops
/// it first; its registers there.
fn next_syscall_stop(tid: i32) -> Result<libc::user_regs_struct, String> {
    loop {
        let status = wait(tid)?;
        if !libc::WIFSTOPPED(status) {
            return Err(format!("thread {tid} ended before its next system call ({status:#x})"));
        }
        if status >> 8 == (libc::SIGTRAP | 0x80) {
            // SAFETY: user_regs_struct is plain data, filled by PTRACE_GETREGS.
            let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
            ptrace(libc::PTRACE_GETREGS, tid, 0, &mut regs as *mut _ as usize, "PTRACE_GETREGS")?;
            return Ok(regs);
        }
        // A signal-delivery stop delivers its signal; an event stop (PTRACE_INTERRUPT's) none.
        let signal = if status >> 16 != 0 { 0 } else { libc::WSTOPSIG(status) };
        ptrace(libc::PTRACE_SYSCALL, tid, 0, signal as usize, "PTRACE_SYSCALL")?;
    }
}

fn setregs(tid: i32, regs: &libc::user_regs_struct) -> Result<(), String> {
    ptrace(libc::PTRACE_SETREGS, tid, 0, regs as *const _ as usize, "PTRACE_SETREGS")
}

/// Trace thread `tid` until it ends, delivering its signals but every `every`-th of
/// `dropped` (which never reaches the thread's handler, as if the kernel had lost it).
/// Returns how many of `dropped` it delivered and how many it dropped.
pub fn drop_signals(tid: i32, dropped: &[i32], every: u64) -> Result<(u64, u64), String> {
    ptrace(libc::PTRACE_SEIZE, tid, 0, 0, "PTRACE_SEIZE")?;
    let (mut seen, mut delivered, mut lost) = (0u64, 0u64, 0u64);
    loop {
        let status = wait(tid)?;
        if !libc::WIFSTOPPED(status) {
            return Ok((delivered, lost));
        }
        let event_stop = status >> 16 != 0;
        let mut signal = if event_stop { 0 } else { libc::WSTOPSIG(status) };
        if dropped.contains(&signal) {
            seen += 1;
            if seen % every == 0 {
                (signal, lost) = (0, lost + 1);
            } else {
                delivered += 1;
            }
        }
        // A thread that ended while stopped: the next wait says so.
        let _ = ptrace(libc::PTRACE_CONT, tid, 0, signal as usize, "PTRACE_CONT");
    }
}
