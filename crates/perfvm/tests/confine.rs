//! Confinement (docs/SECURITY.md): every thread of a running VMM has its seccomp filter and
//! no_new_privs; a forbidden system call kills the process with SIGSYS and one line saying
//! which (the call injected from outside with ptrace: `common::ptrace`); `--seccomp off`
//! warns.

mod common;
use common::*;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// (thread name, its /proc status) for every thread of `pid`.
fn threads(pid: u32) -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return vec![] };
    dir.filter_map(|t| {
        let path = t.ok()?.path();
        let status = std::fs::read_to_string(path.join("status")).ok()?;
        let name = status.lines().next()?.trim_start_matches("Name:").trim().to_owned();
        Some((name, status))
    })
    .collect()
}

fn field<'a>(status: &'a str, key: &str) -> &'a str {
    status.lines().find_map(|l| l.strip_prefix(key)).map_or("", str::trim)
}

#[test]
fn every_thread_of_a_running_vm_is_confined() {
    require_kvm!();
    let mut child = Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .args(["run", "--vcpus", "2", "--native", "off", "ftest"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Both vCPU threads up (each confines itself before its first KVM_RUN), then a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    while threads(child.id()).iter().filter(|(n, _)| n.starts_with("vcpu")).count() < 2 {
        assert!(Instant::now() < deadline, "no two vCPU threads: {:?}", threads(child.id()));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let seen = threads(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.len() >= 3, "{seen:?}");
    for (name, status) in &seen {
        assert_eq!(field(status, "Seccomp:"), "2", "thread {name}");
        assert_eq!(field(status, "NoNewPrivs:"), "1", "thread {name}");
        // Run as root, CAP_SYS_ADMIN (bit 21) is gone once /dev/kvm is open.
        let effective = u64::from_str_radix(field(status, "CapEff:"), 16).unwrap();
        // (Kept where perf_event_paranoid > 2 asks it of every perf event: docs/SECURITY.md.)
        let paranoid: i32 =
            std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap().trim().parse().unwrap();
        if paranoid <= 2 {
            assert_eq!(effective & (1 << 21), 0, "thread {name} keeps CAP_SYS_ADMIN");
        }
    }
}

/// The thread of each kind the confinement knows: the main one, a vCPU, stat's helper.
fn thread_name(kind: &str) -> Option<&str> {
    match kind {
        "vmm" => None,
        "vcpu" => Some("vcpu0"),
        _ => Some("agent-lines"),
    }
}

/// Run `args` and, once its `kind` thread is confined (with `--seccomp off`: once it runs),
/// have that thread make a forbidden system call (getppid, which no filter allows).
fn forbidden_call_in(kind: &str, args: &[&str]) -> std::process::Output {
    let child = Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let confined = !args.windows(2).any(|w| w == ["--seccomp", "off"]);
    let tid = ptrace::thread(child.id(), thread_name(kind), confined, Duration::from_secs(60)).unwrap();
    ptrace::inject_syscall(tid, libc::SYS_getppid).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_forbidden_call_kills_with_sigsys_and_one_line() {
    require_kvm!();
    // Runs that last until the call comes: spin never exits, ftest 30 runs emulated for
    // ~25 s (its default size ends in under a second, before a busy host's test found the
    // helper confined).
    let spin = &["run", "spin", "--timeout", "60"][..];
    for (kind, args) in [
        ("vmm", spin),
        ("vcpu", spin),
        // stat's agent-line splitter is a helper thread.
        ("helper", &["stat", "--native", "off", "ftest", "30"]),
    ] {
        let o = forbidden_call_in(kind, args);
        assert_eq!(o.status.signal(), Some(libc::SIGSYS), "{kind}: {o:?}");
        let err = stderr(&o);
        let line = format!(
            "perfvm: seccomp: the {kind} thread made system call {}, which its filter forbids",
            libc::SYS_getppid
        );
        assert!(err.contains(&line), "{kind}: {err}");
        assert_eq!(err.lines().filter(|l| l.contains("seccomp")).count(), 1, "{err}");
    }
}

#[test]
fn seccomp_off_warns_and_runs_unfiltered() {
    require_kvm!();
    let o = forbidden_call_in("vmm", &["run", "hello", "--seccomp", "off"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("perfvm: warning: --seccomp off"), "{}", stderr(&o));
    assert!(stdout(&o).contains("Hello from perfvm"));
}

#[test]
fn report_and_script_run_confined() {
    // A hostile record file meets a confined reader: report confines its thread before it
    // opens the file, here a FIFO nobody writes, where it waits for the injected call.
    let fifo = std::env::temp_dir().join(format!("perfvm-confined-{}.fifo", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "{}", std::io::Error::last_os_error());
    let o = forbidden_call_in("vmm", &["report", "-i", fifo.to_str().unwrap()]);
    let _ = std::fs::remove_file(&fifo);
    assert_eq!(o.status.signal(), Some(libc::SIGSYS), "{o:?}");
    let rec = record_file("confined.json", &symbol_elf(), &[(0x210, &[], 1000)]);
    let o = perfvm(&["script", "-i", &rec]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}
