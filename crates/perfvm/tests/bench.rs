//! `perfvm bench` suites end to end, at their smallest (`--quick --reps 1`). Timings vary by
//! host and load, so only the shape and the presence of every figure are asserted.

mod common;
use common::*;

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
