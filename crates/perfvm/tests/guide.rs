//! docs/GUEST.md, as a user follows it: build docs/guest-example with its Makefile, run it
//! with the exact backend emulated and natively, and get the same exact count; profile it
//! with the commands the guide shows.

mod common;
use common::*;

/// Build the guide's guest with its Makefile into a fresh directory of `test`'s.
fn build(test: &str) -> std::path::PathBuf {
    let out = std::env::temp_dir().join(format!("perfvm-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/guest-example");
    let make =
        std::process::Command::new("make").args(["-C", dir, &format!("OUT={}", out.display())]).output().unwrap();
    assert!(make.status.success(), "{}", String::from_utf8_lossy(&make.stderr));
    out
}

#[test]
fn the_guide_guest_builds_runs_and_counts_the_same_in_both_modes() {
    require_kvm!();
    let elf = build("guide").join("myguest.elf");
    let elf = elf.to_str().unwrap();
    let mut counts = Vec::new();
    for mode in modes("the_guide_guest_builds_runs_and_counts_the_same_in_both_modes") {
        let o = perfvm(&["run", elf, "--backend", "exact", "--native", mode, "--stats", "--timeout", "120"]);
        assert_eq!(code(&o), 0, "--native {mode}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("hello from my own guest"), "{out}");
        let line = out.lines().find(|l| l.starts_with("work: ")).expect("the count line");
        let n: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(n > 100_000, "work(100000) retires more than one instruction per iteration: {line}");
        counts.push(n);
        if mode == "on" {
            assert!(stderr(&o).contains("execution: native"), "{}", stderr(&o));
        }
    }
    assert!(counts.windows(2).all(|w| w[0] == w[1]), "the same exact count in both modes: {counts:?}");
    // Without --native, the VIF note lets `auto` run it natively where the host can.
    let o = perfvm(&["run", elf, "--stats"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    if vmm::host::pvm::native::host_support().is_ok() {
        assert!(stderr(&o).contains("execution: native (host support and the guest's VIF note)"), "{}", stderr(&o));
    }
}

/// "Profiling it": record -a -g, report flat and with the call graph, pprof.
#[test]
fn the_guide_guest_profiles_as_shown() {
    require_kvm!();
    let out = build("guide-profile");
    let path = |name: &str| out.join(name).display().to_string();
    let (elf, json, pb) = (path("myguest.elf"), path("my.json"), path("my.pb.gz"));
    let o = perfvm(&["record", "-a", "-g", "-F", "10000", "-o", &json, &elf]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = perfvm(&["report", "-i", &json, "--no-children"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let flat = stdout(&o);
    assert!(flat.contains("# call chains: dwarf: the VMM unwound with the guest ELF's .debug_frame"), "{flat}");
    assert!(flat.contains("[.] main"), "{flat}");
    let o = perfvm(&["report", "-i", &json, "-g"]);
    let graph = stdout(&o);
    assert!(graph.contains("Children      Self") && graph.contains("---_start"), "{graph}");
    let o = perfvm(&["script", "-i", &json, "--format", "pprof", "-o", &pb]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read(&pb).unwrap()[..2], [0x1f, 0x8b], "gzipped");
    let _ = std::fs::remove_dir_all(&out);
}
