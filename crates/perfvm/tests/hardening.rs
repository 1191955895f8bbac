//! Hardening: the event filter (as KVM's pmu_event_filter_test checks it), a hostile guest,
//! and bad filter files.

mod common;
use common::*;
use std::time::Duration;

/// Count `events` of ftest on the exact backend under a filter; None = not counted/supported.
/// (Its block engine counts as stepping does, tests/exact_engines.rs, in a third of the time.)
fn counts_under(filter: &str, events: &str) -> Vec<u64> {
    let path = temp_file(&format!("filter-{}.toml", filter.len()), filter.as_bytes());
    let args = ["stat", "--json", "--backend", "exact", "--exact-engine", "blocks", "-e", events];
    let o = perfvm(&[&args[..], &["--pmu-filter", &path, "ftest"]].concat());
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    doc["counts"].as_array().unwrap().iter().filter(|c| c["task"] == 0).map(|c| c["value"].as_u64().unwrap()).collect()
}

#[test]
fn allow_list_with_and_without_the_measured_event() {
    require_kvm!();
    // branches runs on a GP counter.
    assert!(counts_under("action = \"allow\"\nevents = [ { event = 0xc4 } ]\n", "branches")[0] > 100_000);
    assert_eq!(counts_under("action = \"allow\"\nevents = [ { event = 0xc0 } ]\n", "branches"), vec![0]);
}

#[test]
fn deny_list_with_and_without_the_measured_event() {
    require_kvm!();
    assert_eq!(counts_under("action = \"deny\"\nevents = [ { event = 0xc4 } ]\n", "branches"), vec![0]);
    assert!(counts_under("action = \"deny\"\nevents = [ { event = 0x3c } ]\n", "branches")[0] > 100_000);
}

#[test]
fn fixed_counters_obey_the_bitmap() {
    require_kvm!();
    // The agent counts instructions on FIXED_CTR0 when it exists (exact backend).
    assert_eq!(
        counts_under("action = \"allow\"\nfixed_counters = 0\nevents = [ { event = 0xc0 } ]\n", "instructions"),
        vec![0]
    );
    assert!(counts_under("action = \"allow\"\nfixed_counters = 1\n", "instructions")[0] > 900_000);
    assert_eq!(counts_under("action = \"deny\"\nfixed_counters = 1\n", "instructions"), vec![0]);
}

#[test]
fn bad_filter_file_is_a_one_line_error_naming_the_line() {
    let path = temp_file("bad.toml", b"action = \"allow\"\nevents = [ { event = 0x1c0 } ]\n");
    assert_usage_error(&perfvm(&["run", "hello", "--pmu-filter", &path]), "at line 2");
    let path = temp_file("bad.json", b"{\n  \"action\": \"maybe\"\n}\n");
    assert_usage_error(&perfvm(&["run", "hello", "--pmu-filter", &path]), "line 2");
    assert_usage_error(&perfvm(&["run", "hello", "--pmu-filter", "/nonexistent.toml"]), "/nonexistent.toml");
}

#[test]
fn hostile_guest_gets_gp_exactly_where_the_sdm_says() {
    require_kvm!();
    for mode in modes("hostile") {
        for (backend, policy) in [("perf", "reuse"), ("perf", "legacy"), ("exact", "reuse")] {
            let args = ["run", "hostile", "--backend", backend, "--policy", policy, "--native", mode];
            let o = perfvm(&[&args[..], &["--timeout", "300", "--cmdline", "300"]].concat());
            let out = stdout(&o);
            let what = format!("{backend}/{policy}, --native {mode}");
            assert_eq!(code(&o), 0, "{what}: {out}{}", stderr(&o));
            let last = out.trim_end().lines().last().unwrap_or("");
            assert!(last.ends_with(" passed, 0 failed"), "{what}: {last}\n{out}");
        }
    }
}

#[test]
fn host_event_cap_holds() {
    require_kvm!();
    // pmu_arch's all-at-once check wants 4 cycles events at once: legacy makes an event per
    // counter.
    let args = ["run", "pmu_arch", "--max-host-events", "2", "--json", "--timeout", "300"];
    let o = perfvm(&[&args[..], &["--policy", "legacy"]].concat());
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let pmu = &doc["stats"]["pmu"];
    assert_eq!(pmu["host_events_cap"], 2);
    assert!(pmu["host_events_peak"].as_u64().unwrap() <= 2, "{pmu}");
    assert!(pmu["host_events_refused"].as_u64().unwrap() > 0, "the cap was exercised: {pmu}");
    // The VMM survives and ends the run normally; the guest sees counters that count nothing.
    assert!(matches!(doc["end"]["kind"].as_str(), Some("status")), "{}", doc["end"]);
    // Reuse on a host without a PMU: every counter rides one clock, which fits any cap.
    let o = perfvm(&args);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let pmu = &doc["stats"]["pmu"];
    if pmu["backend_detail"].as_str().is_some_and(|d| d.contains("one clock")) {
        assert_eq!(pmu["host_events_peak"], 1, "{pmu}");
        assert_eq!(pmu["host_events_refused"], 0, "{pmu}");
        assert!(stdout(&o).contains(" 0 failed"), "{}", stdout(&o));
    }
}

/// SIGINT/SIGTERM mid-run: exit 130/143, and the record file holds every sample taken so far,
/// including those still in the guest agent's buffer.
#[test]
fn signals_end_a_record_cleanly() {
    require_kvm!();
    for (signal, expected) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let out = std::env::temp_dir().join(format!("perfvm-sig-{}-{signal}.json", std::process::id()));
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_perfvm"))
            // Emulated: ftest 50 lasts ~50 s there (natively it would end before the signal).
            .args([
                "record",
                "--native",
                "off",
                "-e",
                "cycles",
                "-F",
                "2000",
                "-o",
                out.to_str().unwrap(),
                "ftest",
                "50",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // 1.5 s of its CPU: ~2,500 samples at 2 kHz of vCPU time, however busy the host.
        wait_for_cpu(child.id(), Duration::from_millis(1500), Duration::from_secs(60));
        // SAFETY: sending a signal to our own child process.
        unsafe { libc::kill(child.id() as i32, signal) };
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(expected), "{}", String::from_utf8_lossy(&o.stderr));
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let samples = doc["samples"].as_array().unwrap().len();
        assert!(samples > 500, "samples taken before the signal were kept: {samples}");
        assert_ne!(samples % 2048, 0, "the partly filled guest buffer was drained too");
    }
}
