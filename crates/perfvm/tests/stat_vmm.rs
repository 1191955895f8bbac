//! `stat` from the VMM: a guest without the guest kit's agent is pointed to `-a`; `stat -a`
//! counts a whole foreign guest (cycles from the vCPU threads' time; instructions and
//! branches exactly on the exact backend); a `stat` cut short by SIGINT/SIGTERM prints the
//! counts so far, as perf stat does.

mod common;
use common::*;
use std::path::PathBuf;

/// Build docs/guest-example (a guest that knows nothing of perfvm's kit) into a fresh
/// directory.
fn guide_guest(test: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("perfvm-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/guest-example");
    let make =
        std::process::Command::new("make").args(["-C", dir, &format!("OUT={}", out.display())]).output().unwrap();
    assert!(make.status.success(), "{}", String::from_utf8_lossy(&make.stderr));
    out.join("myguest.elf")
}

/// The count of `event` in `stat --json`'s output (None: not counted).
fn json_count(o: &std::process::Output, event: &str) -> Option<u64> {
    let doc: serde_json::Value = serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)));
    let line = doc["counts"].as_array().unwrap().iter().find(|c| c["event"] == event).expect("the event's line");
    line["value"].as_u64()
}

#[test]
fn a_guest_without_the_agent_is_pointed_to_a() {
    require_kvm!();
    let elf = guide_guest("no-agent");
    let elf = elf.to_str().unwrap();
    let o = perfvm(&["stat", elf]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let err = stderr(&o);
    let line = err.lines().last().unwrap();
    assert!(line.contains("runs no perfvm agent") && line.contains("perfvm stat -a"), "{err}");
    let out = std::env::temp_dir().join(format!("perfvm-no-agent-{}.json", std::process::id())).display().to_string();
    let o = perfvm(&["record", "-o", &out, elf]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("runs no perfvm agent (perfvm record -a samples any guest from the VMM)"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_file(&out);
    let _ = std::fs::remove_file(format!("{out}.folded"));
}

/// The exact backend counts every instruction the whole guest retires, the same emulated
/// and natively; more than its own PMC0 counted around work() alone. The perf backend
/// counts cycles (the vCPU threads' time) and says what it cannot count.
#[test]
fn stat_a_counts_a_foreign_guest() {
    require_kvm!();
    let elf = guide_guest("stat-a");
    let elf = elf.to_str().unwrap();
    let mut counts = Vec::new();
    for mode in modes("stat_a_counts_a_foreign_guest") {
        let o = perfvm(&["stat", "-a", "--backend", "exact", "--native", mode, "--json", elf]);
        assert_eq!(code(&o), 0, "--native {mode}: {}", stderr(&o));
        let own: u64 = stdout(&o)
            .split("work: ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the guest's own count: {}", stdout(&o)));
        let (instructions, branches) = (json_count(&o, "instructions").unwrap(), json_count(&o, "branches").unwrap());
        assert!(instructions > own && branches > 100_000, "--native {mode}: {instructions} > {own}, {branches}");
        assert_eq!(json_count(&o, "cycles"), Some(instructions), "the model clock");
        assert_eq!(json_count(&o, "branch-misses"), None);
        counts.push((instructions, branches));
    }
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "the same in both modes: {counts:?}");
    let o = perfvm(&["stat", "-a", elf]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let err = stderr(&o);
    let cycles = err.lines().find(|l| l.split_whitespace().nth(1) == Some("cycles")).unwrap_or_else(|| panic!("{err}"));
    let n: u64 = cycles.split_whitespace().next().unwrap().replace(',', "").parse().unwrap();
    assert!(n > 0, "{err}");
    assert!(err.contains("<not supported>      instructions"), "{err}");
    assert!(err.contains("counted by the VMM (-a), no agent: cycles = the vCPU threads' CPU time x TSC"), "{err}");
    assert_usage_error(&perfvm(&["stat", "-a", "--per-task", elf]), "drop -a");
}

/// SIGINT / SIGTERM before the agent reported: the counters as the vPMU held them, exit
/// 130 / 143, as perf stat prints the counts so far.
#[test]
fn stat_cut_short_prints_the_counts_so_far() {
    require_kvm!();
    for (signal, exit, backend) in [(libc::SIGINT, 130, "perf"), (libc::SIGTERM, 143, "exact")] {
        // Emulated, 1000x ftest lasts minutes: the signal comes first.
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_perfvm"))
            .args(["stat", "-e", "cycles,instructions", "--backend", backend, "--native", "off", "ftest", "1000"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(3000));
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(child.id() as i32, signal) };
        let o = child.wait_with_output().unwrap();
        assert_eq!(code(&o), exit, "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("cut short before the guest's agent reported"), "{err}");
        assert!(!err.contains("sent no counts"), "{err}");
        let count = |event: &str| -> Option<u64> {
            let line = err.lines().find(|l| l.split_whitespace().nth(1) == Some(event))?;
            line.split_whitespace().next()?.replace(',', "").parse().ok()
        };
        assert!(count("cycles").is_some_and(|n| n > 0), "{backend}: {err}");
        match backend {
            "exact" => assert!(count("instructions").is_some_and(|n| n > 1000), "{err}"),
            _ => assert!(err.contains("<not supported>      instructions"), "{err}"),
        }
    }
}

/// Natively, ftest's default size is 15,000 units; counted exactly by blocks it runs 10
/// (stepped, 1), and `stat` says so (one line), unless the size was given.
#[test]
fn stat_says_when_the_exact_backend_changed_the_workload_size() {
    require_native!();
    let note = "the guest kit's workloads take ten times their emulated default size";
    let stat = |size: &[&str]| {
        let args = [&["stat", "--json", "-e", "instructions", "--backend", "exact", "--native", "on", "ftest"], size];
        let o = perfvm(&args.concat());
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        o
    };
    let (default, one) = (stat(&[]), stat(&["1"]));
    assert_eq!(stderr(&default).lines().filter(|l| l.contains(note)).count(), 1, "{}", stderr(&default));
    assert!(!stderr(&one).contains(note), "{}", stderr(&one));
    let (default, one) = (json_count(&default, "instructions").unwrap(), json_count(&one, "instructions").unwrap());
    assert!((9 * one..=11 * one).contains(&default), "default {default}, ftest 1 {one}");
}
