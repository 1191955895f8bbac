//! `perfvm bench` end to end, as a user runs it (the perfvm binary runs perfvm-bench): its
//! flags, Ctrl-C, and suites at their smallest (`--quick --reps 1`). Timings vary by host
//! and load, so only the shape and the presence of every figure are asserted.

#[path = "../../perfvm/tests/common/mod.rs"]
mod common;
use common::*;
use std::io::BufRead;

#[test]
fn bench_flags_are_its_own_and_errors_name_its_help() {
    assert!(stderr(&perfvm(&["bench", "--native", "maybe"])).contains("(see perfvm bench --help)"));
    let help = stdout(&perfvm(&["bench", "--help"]));
    assert!(help.starts_with("Reproduce the seed documents' tables") && help.contains("Usage: perfvm bench"), "{help}");
    let top = stdout(&perfvm(&["--help"]));
    assert!(top.contains("bench "), "perfvm's help lists bench: {top}");
}

/// `bench rate` times the plain loop, the locked loop and ftest's loop on a host thread and
/// natively, and prints the native/host speeds.
#[test]
fn rate_compares_the_locked_loop_and_ftest_with_the_host() {
    require_native!();
    let o = perfvm(&["bench", "rate", "--quick", "--reps", "1", "--native", "on", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let rate = &doc["rate"];
    let (host, native) = (&rate["rows"][0], &rate["rows"][1]);
    assert_eq!((&host["mode"], &native["mode"]), (&"host".into(), &"native".into()), "{rate}");
    for row in [host, native] {
        for key in ["instr_per_s", "lock_instr_per_s", "ftest_seconds"] {
            let median = row[key]["median"].as_f64().unwrap_or(f64::NAN);
            assert!(median > 0.0, "{key} measured: {row}");
        }
    }
    for key in ["native_over_host", "native_over_host_lock", "native_over_host_ftest"] {
        assert!(rate[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {rate}");
    }
    let o = perfvm(&["bench", "rate", "--quick", "--reps", "1", "--native", "on"]);
    assert!(stdout(&o).contains("native/host speed (best run of each): plain loop "), "{}", stdout(&o));
}

#[test]
fn bench_reps_must_be_positive_and_quick_leaves_them_alone() {
    assert_usage_error(&perfvm(&["bench", "--reps", "0"]), "--reps must be at least 1");
    let help = stdout(&perfvm(&["bench", "--help"]));
    assert!(help.contains("2 repetitions unless --reps is given"), "{help}");
    require_kvm!();
    let o = perfvm(&["bench", "transitions", "--quick", "--reps", "1", "--native", "off", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(doc["transitions"]["reps"], 1, "--reps wins over --quick");
    assert_eq!(doc["transitions"]["rows"][0]["roundtrip_ns"]["n"], 1);
}

#[test]
fn bench_suites_are_checked_and_linux_needs_its_assets() {
    let o = perfvm(&["bench", "nosuch"]);
    assert_usage_error(&o, "unknown bench suite 'nosuch' (available: rate, pmu-ops,");
    assert!(stderr(&o).contains(", scaling, exact, linux)"), "the named-only suite is listed: {}", stderr(&o));
    let empty = std::env::temp_dir().join(format!("perfvm-no-linux-{}", std::process::id()));
    let o = std::process::Command::new(perfvm_binary())
        .args(["bench", "linux"])
        .env("PERFVM_LINUX_DIR", &empty)
        .output()
        .expect("perfvm runs");
    assert_usage_error(&o, &format!("bench linux: no kernel and initramfs in {}", empty.display()));
    assert!(stderr(&o).contains("guest/linux/fetch-and-build.sh"), "{}", stderr(&o));
}

#[test]
fn ctrl_c_stops_the_bench_with_130_and_one_line() {
    require_kvm!();
    let mut child = std::process::Command::new(perfvm_binary())
        .args(["bench", "transitions", "--native", "off", "--reps", "50"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("running transitions"), "{first}");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: signalling our own child by pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let rest: Vec<String> = err.lines().map_while(Result::ok).collect();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    assert_eq!(rest.last().map(String::as_str), Some("perfvm: bench interrupted by SIGINT"), "{rest:?}");
    assert!(!rest.iter().any(|l| l.contains("Signal {") || l.contains("failed (")), "no debug text: {rest:?}");
}
