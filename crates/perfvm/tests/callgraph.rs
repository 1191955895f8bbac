//! `record -a -g`: the VMM profiles a guest that never heard of perfvm's agent, with call
//! chains walked through its page tables (tests/callgraph-guest: main -> cmain -> work ->
//! heavy, 70% of the iterations, and light, 30%).

mod common;
use common::*;
use std::path::PathBuf;

/// Build the foreign guest into a fresh directory.
fn build_guest(test: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("perfvm-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/callgraph-guest");
    let make =
        std::process::Command::new("make").args(["-C", dir, &format!("OUT={}", out.display())]).output().unwrap();
    assert!(make.status.success(), "{}", String::from_utf8_lossy(&make.stderr));
    out.join("callgraph.elf")
}

/// A record file path of this test run.
fn out_path(name: &str) -> String {
    std::env::temp_dir().join(format!("perfvm-{name}-{}.json", std::process::id())).display().to_string()
}

/// Remove a record file and its folded stacks.
fn remove(out: &str) {
    let _ = std::fs::remove_file(out);
    let _ = std::fs::remove_file(format!("{out}.folded"));
}

fn load(path: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn record_a_g_profiles_a_foreign_guest_with_call_chains_in_both_modes() {
    require_kvm!();
    let elf = build_guest("callgraph");
    let elf = elf.to_str().unwrap();
    for mode in modes("record_a_g_profiles_a_foreign_guest_with_call_chains_in_both_modes") {
        // Millions of loop iterations: about a second of guest time in each mode.
        let millions = if mode == "on" { "1000" } else { "1" };
        let out = &out_path(&format!("cg-{mode}"));
        let o = perfvm(&["record", "-a", "-g", "--native", mode, "-o", out, elf, millions]);
        assert_eq!(code(&o), 0, "--native {mode}: {}", stderr(&o));
        let file = load(out);
        assert_eq!(file["mode"], "vcpus");
        assert_eq!(file["callgraph"], true);
        let samples = file["samples"].as_array().unwrap();
        assert!(samples.len() > 50, "--native {mode}: {} samples", samples.len());
        let times: Vec<u64> = samples.iter().map(|s| s["time_ns"].as_u64().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "samples in time order");
        let folded = std::fs::read_to_string(format!("{out}.folded")).unwrap();
        let weight = |needle: &str| -> u64 {
            folded
                .lines()
                .filter(|l| l.contains(needle))
                .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
                .sum()
        };
        // Folded stacks weigh each sample by its period: shares are of the total weight.
        let share = weight(";heavy ") as f64 / weight(";") as f64;
        assert!((0.55..=0.85).contains(&share), "--native {mode}: heavy {share:.3}\n{folded}");
        assert!(weight("main;cmain;work;heavy ") > 0 && weight("cmain;work;light ") > 0, "{folded}");
        // Without -g: the same profile, no chains.
        let o = perfvm(&["record", "-a", "--native", mode, "-o", out, elf, millions]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let file = load(out);
        assert_eq!(file["callgraph"], false);
        assert!(file["samples"].as_array().unwrap().iter().all(|s| s.get("callchain").is_none()));
        remove(out);
    }
}

/// `script` prints the -a -g profile of the foreign guest as perf script does.
#[test]
fn script_prints_the_vmm_profile_with_its_chains() {
    require_kvm!();
    let elf = build_guest("callgraph-script");
    let out = &out_path("cg-script");
    let o = perfvm(&["record", "-a", "-g", "-F", "200", "--native", "off", "-o", out, elf.to_str().unwrap(), "1"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = perfvm(&["script", "-i", out]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    let heading = text.lines().find(|l| l.contains(" cycles:")).expect("a sample line");
    assert!(heading.starts_with("callgraph") && heading.contains("[000]"), "{heading}");
    assert!(text.contains(" heavy+0x") && text.contains(" work+0x") && text.contains(" cmain+0x"), "{text}");
    remove(out);
}

/// The guest agent walks the chain itself on its PMIs (`record -g` without -a).
#[test]
fn record_g_through_the_agent_carries_chains_and_times() {
    require_kvm!();
    for mode in modes("record_g_through_the_agent_carries_chains_and_times") {
        let out = &out_path(&format!("agent-g-{mode}"));
        let work: &[&str] = if mode == "on" { &[] } else { &["1"] };
        let o = perfvm(&[&["record", "-g", "--native", mode, "-o", out, "ftest"][..], work].concat());
        assert_eq!(code(&o), 0, "--native {mode}: {}", stderr(&o));
        let file = load(out);
        assert_eq!(file["mode"], "sampled");
        assert_eq!(file["callgraph"], true);
        let samples = file["samples"].as_array().unwrap();
        let chained = samples.iter().filter(|s| s["callchain"].as_array().is_some_and(|c| c.len() >= 2)).count();
        assert!(
            samples.len() > 20 && chained * 10 >= samples.len() * 9,
            "--native {mode}: {chained} of {}",
            samples.len()
        );
        assert!(samples.iter().all(|s| s["time_ns"].as_u64().unwrap() > 0), "times placed through the START mark");
        let folded = std::fs::read_to_string(format!("{out}.folded")).unwrap();
        assert!(folded.lines().all(|l| l.starts_with("ftest;_start;kit_start;agent_run;")), "{folded}");
        remove(out);
    }
}

/// Each vCPU's samples are its own: vCPU 1 only waits in _start's pause loop.
#[test]
fn record_a_attributes_samples_per_vcpu() {
    require_native!();
    let elf = build_guest("callgraph-vcpus");
    let out = &out_path("cg-vcpus");
    let o = perfvm(&["record", "-a", "--vcpus", "2", "--native", "on", "-o", out, elf.to_str().unwrap(), "500"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let file = load(out);
    let samples = file["samples"].as_array().unwrap();
    let on = |vcpu: u64| samples.iter().filter(move |s| s["vcpu"] == vcpu);
    assert!(on(0).count() > 50 && on(1).count() > 50, "both vCPUs sampled");
    // _start's samples, from report's -n column.
    let o = perfvm(&["report", "-i", out, "--no-children", "-n", "--sort", "sym"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let report = stdout(&o);
    let row = report.lines().find(|l| l.ends_with("[.] _start")).unwrap_or_else(|| panic!("{report}"));
    let in_start: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    let vcpu1 = on(1).count() as u64;
    assert!(in_start >= vcpu1 * 9 / 10, "vCPU 1 spins in _start: {in_start} of {vcpu1}\n{report}");
    remove(out);
}

#[test]
fn record_a_refuses_what_it_cannot_sample() {
    assert_usage_error(&perfvm(&["record", "-a", "-e", "instructions", "ftest"]), "-a samples cycles");
    assert_usage_error(&perfvm(&["record", "-a", "--reference", "--backend", "exact", "ftest"]), "exclude each other");
}

/// SIGTERM mid-run: exit 143, and the file holds the VMM's samples so far, marked partial.
#[test]
fn record_a_cut_short_keeps_what_it_sampled() {
    require_kvm!();
    let elf = build_guest("callgraph-term");
    let out = &out_path("cg-term");
    // Emulated, 100 million iterations last minutes: the signal comes first.
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .args(["record", "-a", "-g", "--native", "off", "-o", out, elf.to_str().unwrap(), "100"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_cpu(child.id(), std::time::Duration::from_millis(1500), std::time::Duration::from_secs(60));
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 143, "{}", stderr(&o));
    let file = load(out);
    assert_eq!(file["partial"], true);
    assert!(file["samples"].as_array().unwrap().len() > 10, "samples kept: {}", stderr(&o));
    let report = stdout(&perfvm(&["report", "-i", out]));
    assert!(report.contains("\n# partial: the run was cut short"), "report marks it: {report}");
    remove(out);
}

/// `go tool pprof ARGS FILE`'s output, or None (with a SKIP line) without a Go toolchain.
fn go_pprof(args: &[&str], file: &str) -> Option<String> {
    let dir = std::env::temp_dir();
    let go = |a: &[&str]| std::process::Command::new("go").args(a).arg(file).current_dir(&dir).output();
    if std::process::Command::new("go").arg("version").output().map_or(true, |o| !o.status.success()) {
        eprintln!("SKIP go tool pprof: no Go toolchain; the export is checked with the crate's decoder");
        return None;
    }
    let o = go(&[&["tool", "pprof"][..], args].concat()).unwrap();
    assert!(o.status.success(), "go tool pprof {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The end-to-end check: a foreign guest (no agent; heavy called through work,
/// cmain and main) profiled with `record -a -g -F 1000`, exported with `script --format
/// pprof`: pprof's flat share of heavy is report's Self share, and its stacks hold the
/// true caller chain.
#[test]
fn pprof_of_a_foreign_guest_agrees_with_report() {
    require_kvm!();
    let elf = build_guest("callgraph-pprof");
    for mode in modes("pprof_of_a_foreign_guest_agrees_with_report") {
        let millions = if mode == "on" { "1000" } else { "1" };
        let out = &out_path(&format!("cg-pprof-{mode}"));
        let o =
            perfvm(&["record", "-a", "-g", "-F", "1000", "--native", mode, "-o", out, elf.to_str().unwrap(), millions]);
        assert_eq!(code(&o), 0, "--native {mode}: {}", stderr(&o));
        let o = perfvm(&["report", "-i", out, "--no-children", "--sort", "sym"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let report = stdout(&o);
        let self_share = |name: &str| -> f64 {
            let row =
                report.lines().find(|l| l.ends_with(&format!("[.] {name}"))).unwrap_or_else(|| panic!("{report}"));
            row.split_whitespace().next().unwrap().trim_end_matches('%').parse().unwrap()
        };
        let pb_path = format!("{out}.pb.gz");
        let o = perfvm(&["script", "-i", out, "--format", "pprof", "-o", &pb_path]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let pb = profile::pprof::decode(&std::fs::read(&pb_path).unwrap()).unwrap();
        let name = |loc: u64| {
            let f = pb.location[loc as usize - 1].line[0].function_id;
            pb.string_table[pb.function[f as usize - 1].name as usize].clone()
        };
        let total: i64 = pb.sample.iter().map(|s| s.value[1]).sum();
        let heavy: i64 = pb.sample.iter().filter(|s| name(s.location_id[0]) == "heavy").map(|s| s.value[1]).sum();
        let decoded = 100.0 * heavy as f64 / total as f64;
        assert!((decoded - self_share("heavy")).abs() <= 1.0, "{mode}: pprof {decoded:.2}% against\n{report}");
        let chain = ["heavy", "work", "cmain", "main"];
        assert!(
            pb.sample.iter().any(|s| s.location_id.iter().take(4).map(|&l| name(l)).eq(chain)),
            "{mode}: a stack heavy <- work <- cmain <- main"
        );
        if let Some(top) = go_pprof(&["-top", "-nodecount=50"], &pb_path) {
            let row =
                top.lines().find(|l| l.split_whitespace().last() == Some("heavy")).unwrap_or_else(|| panic!("{top}"));
            let flat: f64 = row.split_whitespace().nth(1).unwrap().trim_end_matches('%').parse().unwrap();
            assert!(
                (flat - self_share("heavy")).abs() <= 1.0,
                "{mode}: go tool pprof {flat}% against\n{report}\n{top}"
            );
            let traces = go_pprof(&["-traces"], &pb_path).unwrap();
            let stacks: Vec<Vec<&str>> = traces
                .split("-----------+")
                .map(|t| t.lines().filter_map(|l| l.split_whitespace().last()).collect())
                .collect();
            assert!(stacks.iter().any(|s| s.windows(4).any(|w| w == chain)), "{mode}: {traces}");
        }
        remove(out);
        let _ = std::fs::remove_file(&pb_path);
    }
}
