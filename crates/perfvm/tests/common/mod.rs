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
            common::skip(module_path!(), &reason);
            return;
        }
    };
}

pub fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIP {test}: needs /dev/kvm: {reason}");
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

/// A minimal ELF64 executable: (paddr, filesz, memsz) per PT_LOAD.
pub fn elf64(entry: u64, segs: &[(u64, u64, u64)]) -> Vec<u8> {
    let phoff = 64u64;
    let mut out = vec![0u8; 64];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2;
    out[5] = 1;
    out[6] = 1;
    out[16..18].copy_from_slice(&2u16.to_le_bytes());
    out[18..20].copy_from_slice(&62u16.to_le_bytes());
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[24..32].copy_from_slice(&entry.to_le_bytes());
    out[32..40].copy_from_slice(&phoff.to_le_bytes());
    out[52..54].copy_from_slice(&64u16.to_le_bytes());
    out[54..56].copy_from_slice(&56u16.to_le_bytes());
    out[56..58].copy_from_slice(&(segs.len() as u16).to_le_bytes());
    let mut offset = phoff + 56 * segs.len() as u64;
    for &(paddr, filesz, memsz) in segs {
        let mut ph = vec![0u8; 56];
        ph[0..4].copy_from_slice(&1u32.to_le_bytes());
        ph[4..8].copy_from_slice(&5u32.to_le_bytes());
        ph[8..16].copy_from_slice(&offset.to_le_bytes());
        ph[16..24].copy_from_slice(&paddr.to_le_bytes());
        ph[24..32].copy_from_slice(&paddr.to_le_bytes());
        ph[32..40].copy_from_slice(&filesz.to_le_bytes());
        ph[40..48].copy_from_slice(&memsz.to_le_bytes());
        out.extend_from_slice(&ph);
        offset += filesz;
    }
    for &(_, filesz, _) in segs {
        out.extend(std::iter::repeat_n(0xf4u8, filesz as usize)); // hlt
    }
    out
}

/// Write bytes to a fresh temporary file and return its path.
pub fn temp_file(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("perfvm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::File::create(&path).unwrap().write_all(bytes).unwrap();
    path.display().to_string()
}
