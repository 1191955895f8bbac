//! With no room for queued signals (RLIMIT_SIGPENDING = 0, as on a busy host or in a tight
//! container) sampling, --timeout and SIGTERM still work: the VMM never depends on
//! real-time signals.

mod common;
use common::*;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// perfvm with RLIMIT_SIGPENDING = 0 (soft and hard).
fn perfvm_without_sigqueue(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_perfvm"));
    cmd.args(args);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child before exec.
    unsafe {
        cmd.pre_exec(|| {
            let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::setrlimit(libc::RLIMIT_SIGPENDING, &zero) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

fn samples(o: &Output) -> u64 {
    let err = stderr(o);
    let line = err.lines().find(|l| l.contains("perfvm record: Captured")).unwrap_or_else(|| panic!("{err}"));
    let words: Vec<&str> = line.split(['(', ' ']).collect();
    let i = words.iter().position(|w| w.starts_with("samples")).expect("samples");
    words[i - 1].parse().expect("a count")
}

#[test]
fn sampling_works_without_queued_signals() {
    require_kvm!();
    let out = temp_file("sigq.json", b"");
    let args = ["record", "--native", "off", "-c", "2000000", "-o", &out, "ftest", "1"];
    let normal = samples(&perfvm(&args));
    let starved = samples(&perfvm_without_sigqueue(&args).output().unwrap());
    assert!(normal > 20, "{normal} samples normally");
    assert!(starved * 2 >= normal, "{starved} samples without a signal queue, {normal} with one");
}

/// The VMM's own sampler (`record -a`) too.
#[test]
fn vmm_sampling_works_without_queued_signals() {
    require_kvm!();
    let out = temp_file("sigq-a.json", b"");
    let args = ["record", "-a", "-g", "--native", "off", "-F", "200", "-o", &out, "ftest", "1"];
    let normal = samples(&perfvm(&args));
    let starved = samples(&perfvm_without_sigqueue(&args).output().unwrap());
    assert!(normal > 20, "{normal} samples normally");
    assert!(starved * 2 >= normal, "{starved} samples without a signal queue, {normal} with one");
}

#[test]
fn timeout_and_sigterm_work_without_queued_signals() {
    require_kvm!();
    let t = Instant::now();
    let o = perfvm_without_sigqueue(&["run", "--timeout", "2", "spin"]).output().unwrap();
    assert_eq!(code(&o), 124, "{}", stderr(&o));
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());

    let mut child = perfvm_without_sigqueue(&["run", "spin"]).stdout(std::process::Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert!(t.elapsed() < Duration::from_secs(1), "SIGTERM took {:?}", t.elapsed());
}
