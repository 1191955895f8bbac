//! Profiles are never lost or torn: a `record` killed with SIGKILL at 15 points over its run
//! leaves a complete, parseable record file (the previous one or the new one), and a
//! finished record keeps the file it replaced as FILE.old.

mod common;
use common::*;
use std::process::Command;
use std::time::Instant;

/// The record file at `path` parses as a whole profile with samples.
fn assert_complete(path: &str, when: &str) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{when}: {path} missing: {e}"));
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{when}: {path} torn ({} bytes): {e}", text.len()));
    assert!(doc["samples"].as_array().is_some_and(|s| !s.is_empty()), "{when}: {path} has no samples");
    let o = perfvm(&["report", "-i", path, "--stdio"]);
    assert_eq!(code(&o), 0, "{when}: report -i {path}: {}", stderr(&o));
}

fn record(out: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_perfvm"));
    c.args(["record", "-o", out, "ftest"]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    c
}

#[test]
fn sigkill_at_fifteen_points_leaves_a_whole_profile() {
    require_kvm!();
    let out = temp_file("killed.json", b"");
    std::fs::remove_file(&out).unwrap();
    // A first, complete run: its time spaces the kills, its file is the "old" one.
    let t = Instant::now();
    assert!(record(&out).status().unwrap().success());
    let run = t.elapsed();
    assert_complete(&out, "after a whole run");
    for i in 1..=15u32 {
        // From early in the boot to past the end (the writes are the last moments).
        let at = run.mul_f64(0.1 + 1.0 * f64::from(i) / 15.0);
        let mut child = record(&out).spawn().unwrap();
        std::thread::sleep(at);
        let _ = child.kill();
        let status = child.wait().unwrap();
        let when = format!("killed at {:.2} s ({status})", at.as_secs_f64());
        assert_complete(&out, &when);
        if std::path::Path::new(&format!("{out}.old")).exists() {
            assert_complete(&format!("{out}.old"), &when);
        }
    }
}

#[test]
fn record_keeps_the_previous_profile_as_old() {
    require_kvm!();
    let out = temp_file("kept.json", b"");
    std::fs::remove_file(&out).unwrap();
    assert!(record(&out).status().unwrap().success());
    assert!(!std::path::Path::new(&format!("{out}.old")).exists(), "no previous profile, no .old");
    let first = std::fs::read(&out).unwrap();
    assert!(record(&out).status().unwrap().success());
    assert_eq!(std::fs::read(format!("{out}.old")).unwrap(), first);
    assert_complete(&out, "second run");
}
