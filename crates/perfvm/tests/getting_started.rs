//! docs/getting-started.md, run as a user runs it: every command of its blocks in order, in
//! a fresh directory holding a copy of docs/guest-example, with the binaries cargo built on
//! PATH; each must succeed and show what the guide says it shows. (Its Linux section boots a
//! stock kernel: the standard-KVM tier runs that one, tests/kvm_amd.rs.)

mod common;
use common::guide::{commands, LINUX_SECTION};
use common::*;
use std::path::Path;
use std::process::Command;

/// A fresh directory with docs/guest-example copied in, as in a clone.
fn workdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("perfvm-getting-started-{}", std::process::id()));
    let example = dir.join("docs/guest-example");
    std::fs::create_dir_all(&example).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/guest-example");
    for entry in std::fs::read_dir(source).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), example.join(entry.file_name())).unwrap();
        }
    }
    dir
}

/// What the guide says `line` shows, checked on its output (`out`: stdout and stderr) and
/// the files it wrote in `dir`.
fn check(line: &str, out: &str, dir: &Path) {
    let file = |name: &str| std::fs::read(dir.join(name)).unwrap_or_default();
    let words: Vec<&str> = line.split_whitespace().collect();
    match words[..] {
        ["perfvm", "run", "hello"] => assert!(out.contains("Hello"), "{line}: {out}"),
        ["perfvm", "stat", "-e", ..] => {
            assert!(out.contains("Performance counter stats for 'ftest'"), "{line}: {out}");
            assert!(out.contains("<not supported>") || out.contains(" instructions"), "{line}: {out}");
        }
        ["perfvm", "stat", "--backend", "exact", ..] => {
            let count = |event: &str| {
                out.lines()
                    .find(|l| l.split_whitespace().nth(1) == Some(event))
                    .and_then(|l| l.split_whitespace().next()?.replace(',', "").parse::<u64>().ok())
            };
            assert!(count("instructions").is_some_and(|n| n > 100_000), "{line}: {out}");
            assert!(count("branches").is_some_and(|n| n > 10_000), "{line}: {out}");
        }
        ["perfvm", "record", ..] => assert!(out.contains("[ perfvm record: Captured and wrote"), "{line}: {out}"),
        ["perfvm", "report", "--flamegraph", svg] => assert!(file(svg).starts_with(b"<?xml"), "{line}: {out}"),
        ["perfvm", "report", "-i", "my.json", ..] => assert!(out.contains("[.] main"), "{line}: {out}"),
        ["perfvm", "report", ..] => assert!(out.contains("# Samples: ") && out.contains("[.] "), "{line}: {out}"),
        ["perfvm", "script", "--format", "pprof", "-o", pb] => {
            assert!(file(pb).starts_with(&[0x1f, 0x8b]), "{line}: a gzipped profile: {out}")
        }
        ["go", "tool", "pprof", "-top", _] => assert!(out.contains("flat%"), "{line}: {out}"),
        ["make", "-C", example] => assert!(dir.join(example).join("myguest.elf").exists(), "{line}: {out}"),
        ["perfvm", "run", guest] if guest.ends_with("myguest.elf") => {
            assert!(out.contains("hello from my own guest"), "{line}: {out}")
        }
        _ => panic!("docs/getting-started.md has a command this test does not check: {line}"),
    }
}

#[test]
fn the_guide_runs_as_written() {
    require_kvm!();
    let dir = workdir();
    let bin = perfvm_binary().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let lines: Vec<String> = commands().into_iter().filter(|c| c.section != LINUX_SECTION).map(|c| c.line).collect();
    assert!(lines.len() >= 10, "the guide's commands: {lines:?}");
    for line in &lines {
        if line.starts_with("go ") && Command::new("go").arg("version").output().is_err() {
            skip("the_guide_runs_as_written (its go tool pprof line)", "needs Go");
            continue;
        }
        let o = Command::new("sh").args(["-c", line]).current_dir(&dir).env("PATH", &path).output().unwrap();
        let out = format!("{}{}", stdout(&o), stderr(&o));
        assert_eq!(code(&o), 0, "{line}: {out}");
        check(line, &out, &dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
