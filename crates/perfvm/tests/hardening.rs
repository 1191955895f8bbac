//! Hardening: the event filter (as KVM's pmu_event_filter_test checks it), a hostile guest,
//! and bad filter files.

mod common;
use common::*;

/// Count `events` of ftest on the exact backend under a filter; None = not counted/supported.
fn counts_under(filter: &str, events: &str) -> Vec<u64> {
    let path = temp_file(&format!("filter-{}.toml", filter.len()), filter.as_bytes());
    let o = perfvm(&["stat", "--json", "--backend", "exact", "-e", events, "--pmu-filter", &path, "ftest"]);
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
    assert_eq!(counts_under("action = \"allow\"\nfixed_counters = 0\nevents = [ { event = 0xc0 } ]\n", "instructions"), vec![0]);
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
    for (backend, policy) in [("perf", "reuse"), ("perf", "legacy"), ("exact", "reuse")] {
        let o = perfvm(&["run", "hostile", "--backend", backend, "--policy", policy, "--timeout", "300", "--cmdline", "300"]);
        let out = stdout(&o);
        assert_eq!(code(&o), 0, "{backend}/{policy}: {out}{}", stderr(&o));
        let last = out.trim_end().lines().last().unwrap_or("");
        assert!(last.ends_with(" passed, 0 failed"), "{backend}/{policy}: {last}");
    }
}

#[test]
fn host_event_cap_holds() {
    require_kvm!();
    // pmu_arch's all-at-once check wants 4 cycles events at once.
    let o = perfvm(&["run", "pmu_arch", "--max-host-events", "2", "--json", "--timeout", "300"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let pmu = &doc["stats"]["pmu"];
    assert_eq!(pmu["host_events_cap"], 2);
    assert!(pmu["host_events_peak"].as_u64().unwrap() <= 2, "{pmu}");
    assert!(pmu["host_events_refused"].as_u64().unwrap() > 0, "the cap was exercised: {pmu}");
    // The VMM survives and ends the run normally; the guest sees counters that count nothing.
    assert!(matches!(doc["end"]["kind"].as_str(), Some("status")), "{}", doc["end"]);
}
