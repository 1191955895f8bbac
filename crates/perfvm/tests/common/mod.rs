//! Helpers shared by the CLI integration tests.
#![allow(dead_code)]

pub mod guide;
pub mod ptrace;

use std::io::Write;
use std::process::{Command, Output};

/// Skip the calling test, loudly (straight to the terminal, past libtest's capture),
/// when /dev/kvm cannot be used here.
#[macro_export]
macro_rules! require_kvm {
    () => {
        if let Some(reason) = vmm::vstate::kvm::unavailable_reason() {
            common::skip(module_path!(), &format!("needs /dev/kvm: {reason}"));
            return;
        }
    };
}

/// Skip the calling test, loudly, where this host cannot run guests natively.
#[macro_export]
macro_rules! require_native {
    () => {
        require_kvm!();
        if let Err(reason) = vmm::host::pvm::native::host_support() {
            common::skip(module_path!(), &format!("needs native mode: {reason}"));
            return;
        }
    };
}

/// The execution modes a conformance test runs in: both where the host has native mode
/// (saying so loudly where it does not).
pub fn modes(test: &str) -> Vec<&'static str> {
    match vmm::host::pvm::native::host_support() {
        Ok(()) => vec!["off", "on"],
        Err(reason) => {
            skip(&format!("{test} (native half)"), &format!("needs native mode: {reason}"));
            vec!["off"]
        }
    }
}

/// Say loudly that `test` skips and why; a failure where CI requires every test to run
/// (`PERFVM_REQUIRE_KVM=1`).
pub fn skip(test: &str, reason: &str) {
    vmm::vstate::kvm::skip_test(test, reason);
}

/// The perfvm binary: this crate's, or, for crates/bench's tests, the one cargo built
/// beside perfvm-bench (`cargo test --workspace` builds both).
pub fn perfvm_binary() -> std::path::PathBuf {
    let beside_bench =
        || Some(std::path::Path::new(option_env!("CARGO_BIN_EXE_perfvm-bench")?).with_file_name("perfvm"));
    option_env!("CARGO_BIN_EXE_perfvm").map(std::path::PathBuf::from).or_else(beside_bench).expect("a perfvm binary")
}

/// Run the perfvm binary.
pub fn perfvm(args: &[&str]) -> Output {
    Command::new(perfvm_binary()).args(args).output().expect("running perfvm")
}

/// Run the perfvm binary with its stdout read by no one: a reader that stopped early (`| head`).
pub fn perfvm_to_a_closed_reader(args: &[&str]) -> Output {
    let mut child = Command::new(perfvm_binary())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running perfvm");
    drop(child.stdout.take());
    child.wait_with_output().expect("waiting for perfvm")
}

/// Wait until process `pid` has run `cpu` of CPU time (user + system), or `wall` has
/// passed: on a busy host a child gets its CPU late, so a signal sent after a fixed sleep
/// may find it still booting.
#[allow(dead_code)]
pub fn wait_for_cpu(pid: u32, cpu: std::time::Duration, wall: std::time::Duration) {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let used = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces): utime and stime are 14 and 15.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let t: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(std::time::Duration::from_secs_f64(t / ticks))
    };
    let started = std::time::Instant::now();
    while started.elapsed() < wall && used().is_some_and(|u| u < cpu) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code, with a readable failure message showing both streams.
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or_else(|| panic!("killed by a signal: {o:?}"))
}

/// Assert a one-line error with exit code 2 containing `needle`.
pub fn assert_usage_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(code(o), 2, "stderr: {err}");
    assert!(err.contains(needle), "expected {needle:?} in {err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "one-line error expected: {err:?}");
}

#[allow(unused_imports)] // used by some test files only
pub use vmm::loader::synthetic::elf64;

/// Write bytes to a fresh temporary file and return its path.
pub fn temp_file(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("perfvm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().write_all(bytes).unwrap();
    path.display().to_string()
}

/// A guest ELF with functions qux (0x100), foo (0x200), main (0x300, 0x80 long), written
/// to a temporary file, for record files whose addresses should resolve.
pub fn symbol_elf() -> String {
    static PATH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let elf =
            profile::testelf::with_functions(&[("qux", 0x100, 0x40), ("foo", 0x200, 0x40), ("main", 0x300, 0x80)]);
        temp_file("symbols.elf", &elf)
    })
    .clone()
}

/// A sampled `cycles` record file (`perfvm-record-2`) of guest ftest naming `elf`, with
/// these samples: `(ip, callchain innermost first, period)`.
pub fn record_file(name: &str, elf: &str, samples: &[(u64, &[u64], u64)]) -> String {
    let list: Vec<serde_json::Value> = samples
        .iter()
        .enumerate()
        .map(|(i, (ip, chain, period))| {
            serde_json::json!({"time_ns": (i as u64 + 1) * 1_000_000, "vcpu": 0, "task": 0, "ip": ip,
                               "period": period, "callchain": chain})
        })
        .collect();
    let doc = serde_json::json!({"format": "perfvm-record-2", "guest": "ftest", "elf": elf, "args": [],
        "event": "cycles", "raw_event": 0x3c, "period": samples.first().map_or(1000, |s| s.2),
        "backend": "test", "policy": "test", "mode": "sampled",
        "callgraph": samples.iter().any(|s| !s.1.is_empty()), "samples": list});
    temp_file(name, doc.to_string().as_bytes())
}
