//! Helpers shared by the CLI integration tests.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Output};

/// Skip the calling test, loudly (straight to the terminal, past libtest's capture),
/// when /dev/kvm cannot be used here.
#[macro_export]
macro_rules! require_kvm {
    () => {
        if let Some(reason) = vmm::kvm::unavailable_reason() {
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
        if let Err(reason) = vmm::native::host_support() {
            common::skip(module_path!(), &format!("needs native mode: {reason}"));
            return;
        }
    };
}

/// The execution modes a conformance test runs in: both where the host has native mode
/// (saying so loudly where it does not).
pub fn modes(test: &str) -> Vec<&'static str> {
    match vmm::native::host_support() {
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
    vmm::kvm::skip_test(test, reason);
}

/// Run the perfvm binary.
pub fn perfvm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfvm")).args(args).output().expect("running perfvm")
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
