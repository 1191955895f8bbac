//! Overflow notifications of the perf backend: lost ones are detected and reported, and a
//! period too short for the host to keep up with is throttled instead of livelocking.

mod common;
use common::*;

/// `(taken, lost, throttled)` from `record --stats` of an emulated ftest, and the whole
/// stderr; with `drop_every` N, every Nth overflow signal to the vCPU thread is dropped on
/// its way (from outside, with ptrace: `common::ptrace`).
fn record(drop_every: Option<u64>, extra: &[&str]) -> ((u64, u64, u64), String) {
    record_in("off", drop_every, extra, &["ftest", "1"])
}

fn record_in(mode: &str, drop_every: Option<u64>, extra: &[&str], guest: &[&str]) -> ((u64, u64, u64), String) {
    let out = temp_file(&format!("notifications-{mode}.json"), b"");
    let mut args = vec!["record", "--stats", "--native", mode, "-o", &out];
    args.extend_from_slice(extra);
    args.extend_from_slice(guest);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("perfvm");
    if let Some(every) = drop_every {
        // The overflow signal (SIGUSR2, or SIGIO where the kernel falls back to it).
        let vcpu = ptrace::thread(child.id(), Some("vcpu0"), false, std::time::Duration::from_secs(60)).unwrap();
        ptrace::drop_signals(vcpu, &[libc::SIGUSR2, libc::SIGIO], every).unwrap();
    }
    let o = child.wait_with_output().expect("perfvm");
    let err = stderr(&o);
    assert_eq!(code(&o), 0, "{err}");
    let line = err.lines().find(|l| l.contains("overflow notifications")).unwrap_or_else(|| panic!("{err}"));
    let n: Vec<u64> = line.split([' ', ',']).filter_map(|w| w.parse().ok()).collect();
    assert_eq!(n.len(), 3, "{line}");
    ((n[0], n[1], n[2]), err)
}

#[test]
fn dropped_notifications_are_counted_as_lost() {
    require_kvm!();
    let ((taken, lost, _), _) = record(None, &["-c", "2000000"]);
    assert!(taken > 20 && lost * 20 <= taken, "none dropped: {taken} taken, {lost} lost");
    let ((taken, lost, _), _) = record(Some(2), &["-c", "2000000"]);
    assert!(lost * 2 >= taken && lost <= taken * 2, "every 2nd dropped: {taken} taken, {lost} lost");
    let ((taken, lost, _), err) = record(Some(1), &["-c", "2000000"]);
    assert!(taken == 0 && lost > 20, "all dropped: {taken} taken, {lost} lost");
    assert!(err.contains("perfvm: warning: captured") && err.contains("overflow notifications lost"), "{err}");
}

#[test]
fn a_period_too_short_is_throttled_and_the_guest_progresses() {
    require_kvm!();
    let ((taken, _, throttled), err) = record(None, &["-c", "1000", "--pmi-max-percent", "5"]);
    assert!(throttled > 0 && taken > 0, "{taken} taken, {throttled} throttled");
    assert!(err.contains("periods throttled"), "{err}");
}

/// A period shorter than one exit on this host (40 us of cycles; a native exit is 25-60 us
/// on the hosts here) used to livelock a native guest: each notification's exit took the
/// whole period. The throttle charges the exit it measured and the run ends.
#[test]
fn a_period_shorter_than_the_hosts_exit_is_throttled_natively() {
    require_native!();
    let ((taken, _, throttled), err) = record_in("on", None, &["-c", "100000", "--timeout", "120"], &["ftest"]);
    assert!(throttled > 0 && taken > 0, "{taken} taken, {throttled} throttled");
    let line = err.lines().find(|l| l.contains("PMI throttle")).unwrap_or_else(|| panic!("{err}"));
    let exit_us: f64 = line.split("costs ").nth(1).and_then(|w| w.split(' ').next()).unwrap().parse().unwrap();
    assert!(exit_us > 1.0, "the exit roundtrip was measured: {line}");
}
