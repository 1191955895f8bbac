//! `perfvm run`: booting the guest kit's kernels, exit statuses, and every error path.

mod common;
use common::*;

#[test]
fn hello_boots_and_exits_zero() {
    require_kvm!();
    let o = perfvm(&["run", "hello", "--cmdline", "alpha beta"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "stdout: {out}\nstderr: {}", stderr(&o));
    assert!(out.contains("Hello from perfvm guest (vcpu 0 of 1, 256 MiB)"), "{out}");
    assert!(out.contains("argv[1]=alpha") && out.contains("argv[2]=beta"), "{out}");
}

#[test]
fn ftest_runs_to_completion() {
    require_kvm!();
    let o = perfvm(&["run", "ftest"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}{}", stderr(&o));
    assert!(out.contains("ftest: iterations="), "{out}");
    assert!(out.contains("checksum="), "{out}");
}

#[test]
fn two_vcpus_each_print_their_index() {
    require_kvm!();
    let o = perfvm(&["run", "smp", "--vcpus", "2"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}{}", stderr(&o));
    assert!(out.contains("vcpu 0 up"), "{out}");
    assert!(out.contains("vcpu 1 up"), "{out}");
    assert!(out.contains("all 2 vcpus up"), "{out}");
}

#[test]
fn multiboot_kernel_reads_its_cmdline() {
    require_kvm!();
    let o = perfvm(&["run", "mbtest", "--cmdline", "console=ttyS0 answer=42", "--mem", "64"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 0, "{out}{}", stderr(&o));
    assert!(out.contains("mbtest: magic ok"), "{out}");
    assert!(out.contains("mem_upper=64512K"), "{out}");
    assert!(out.contains("mbtest: cmdline=mbtest console=ttyS0 answer=42"), "{out}");
    assert!(out.contains("mbtest: fw_cfg QEMU cpus=1"), "{out}");
}

#[test]
fn debug_exit_status_is_the_exit_code() {
    require_kvm!();
    let o = perfvm(&["run", "exitcode", "--cmdline", "5"]);
    assert_eq!(code(&o), 11, "{}", stderr(&o));
    let o = perfvm(&["run", "exitcode", "--cmdline", "0x10"]);
    assert_eq!(code(&o), 33, "{}", stderr(&o));
}

#[test]
fn unexpected_exception_is_reported_by_the_guest() {
    require_kvm!();
    let o = perfvm(&["run", "fault"]);
    let out = stdout(&o);
    assert_eq!(code(&o), 7, "{out}");
    assert!(out.contains("unexpected exception: vector=6"), "{out}");
}

#[test]
fn triple_fault_is_reported_with_rip() {
    require_kvm!();
    let o = perfvm(&["run", "triple"]);
    assert_eq!(code(&o), 4);
    let err = stderr(&o);
    assert!(err.contains("guest shutdown (triple fault) at RIP=0x"), "{err}");
}

#[test]
fn timeout_stops_a_spinning_guest() {
    require_kvm!();
    let started = std::time::Instant::now();
    let o = perfvm(&["run", "spin", "--timeout", "1"]);
    assert_eq!(code(&o), 124);
    assert!(stdout(&o).contains("spinning"));
    assert!(stderr(&o).contains("timeout: guest still running after 1.0 s"), "{}", stderr(&o));
    assert!(started.elapsed().as_secs_f64() < 10.0);
}

#[test]
fn stats_and_json_report_exits() {
    require_kvm!();
    let o = perfvm(&["run", "hello", "--stats"]);
    assert_eq!(code(&o), 0);
    let err = stderr(&o);
    assert!(err.contains("exit reason") && err.contains("io-out"), "{err}");
    assert!(err.contains("first console byte after"), "{err}");
    let o = perfvm(&["run", "hello", "--json"]);
    assert_eq!(code(&o), 0);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON on stdout");
    assert_eq!(doc["exit_code"], 0);
    assert_eq!(doc["end"]["kind"], "status");
    assert!(doc["console"].as_str().unwrap().contains("Hello from perfvm guest"));
    assert!(doc["stats"]["exits"]["serial"]["count"].as_u64().unwrap() > 10, "console output");
    assert!(doc["stats"]["exits"]["io-out"]["count"].as_u64().unwrap() >= 8, "the shutdown port");
}

#[test]
fn missing_guest_file() {
    let o = perfvm(&["run", "/nonexistent/kernel.elf"]);
    assert_usage_error(&o, "guest file /nonexistent/kernel.elf: no such file");
    let o = perfvm(&["run", "no-such-guest"]);
    assert_usage_error(&o, "built-in guests: ");
}

#[test]
fn not_an_elf() {
    let path = temp_file("not-elf", b"#!/bin/sh\necho hi\n");
    assert_usage_error(&perfvm(&["run", &path]), "not an ELF file");
}

#[test]
fn kernel_too_big_for_memory() {
    let path = temp_file("big.elf", &elf64(0x100000, &[(0x100000, 0x10, 32 << 20)]));
    assert_usage_error(&perfvm(&["run", &path, "--mem", "16"]), "does not fit in guest memory (16 MiB)");
}

#[test]
fn overlapping_segments() {
    let path = temp_file("overlap.elf", &elf64(0x100000, &[(0x100000, 0x10, 0x2000), (0x101000, 0x10, 0x10)]));
    assert_usage_error(&perfvm(&["run", &path]), "segments 0 and 1 overlap");
}

#[test]
fn entry_outside_loaded_memory() {
    let path = temp_file("entry.elf", &elf64(0x900000, &[(0x100000, 0x10, 0x10)]));
    assert_usage_error(&perfvm(&["run", &path]), "entry point 0x900000 is outside the loaded segments");
}

#[test]
fn truncated_elf() {
    let mut bytes = elf64(0x100000, &[(0x100000, 0x100, 0x100)]);
    bytes.truncate(bytes.len() - 16);
    let path = temp_file("truncated.elf", &bytes);
    assert_usage_error(&perfvm(&["run", &path]), "truncated ELF");
}

#[test]
fn bad_multiboot_checksum() {
    let mut bytes = std::fs::read(std::path::Path::new(env!("PERFVM_GUEST_DIR_FOR_TESTS")).join("mbtest.elf"))
        .expect("mbtest built");
    let at = bytes.windows(4).position(|w| w == 0x1bad_b002u32.to_le_bytes()).expect("multiboot header");
    bytes[at + 8] ^= 1;
    let path = temp_file("badsum.elf", &bytes);
    assert_usage_error(&perfvm(&["run", &path]), "multiboot header: header at");
}

#[test]
fn huge_memsz_is_refused() {
    let path = temp_file("huge.elf", &elf64(0x100000, &[(0x100000, 0x10, u64::MAX / 2)]));
    assert_usage_error(&perfvm(&["run", &path]), "does not fit in guest memory");
}

#[test]
fn bad_flags_are_one_line_errors() {
    assert_usage_error(&perfvm(&["run", "hello", "--bogus"]), "unexpected argument '--bogus'");
    assert_usage_error(&perfvm(&["run", "hello", "--vcpus", "9"]), "--vcpus must be between 1 and 8");
    assert_usage_error(&perfvm(&["run", "hello", "--mem", "4"]), "--mem must be between");
    assert_usage_error(&perfvm(&["run", "hello", "--timeout", "-1"]), "--timeout");
    assert_usage_error(&perfvm(&["frobnicate"]), "unrecognized subcommand");
}

#[test]
fn kvm_device_missing_or_forbidden() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .args(["run", "hello"])
        .env("PERFVM_KVM_DEVICE", "/nonexistent/kvm")
        .output()
        .unwrap();
    assert_usage_error(&o, "/nonexistent/kvm does not exist");
    // Permission: a world-inaccessible device node, opened as an unprivileged user.
    if !std::path::Path::new("/dev/kvm").exists() || unsafe_geteuid() != 0 {
        skip("kvm_device_missing_or_forbidden (permission part)", "needs root and /dev/kvm to drop privileges");
        return;
    }
    let o = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_perfvm"), "run", "hello"])
        .env("PERFVM_KVM_DEVICE", "/dev/kvm")
        .output()
        .expect("setpriv (util-linux)");
    assert_usage_error(&o, "no permission to open /dev/kvm");
}

fn unsafe_geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// `--json` goes out through the same writer as report and script: a reader that stops
/// early (`| head`) is no panic, and the run's own exit code stands.
#[test]
fn json_to_a_reader_that_stops_early_is_not_an_error() {
    require_kvm!();
    for args in [vec!["run", "--json", "hello"], vec!["list"]] {
        let o = perfvm_to_a_closed_reader(&args);
        let err = stderr(&o);
        assert_eq!(code(&o), 0, "{args:?}: {err}");
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
    }
}

#[test]
fn an_instruction_the_host_emulator_rejects_ends_the_run_with_6() {
    require_kvm!();
    // clac; hlt at CPL 0, emulated: this host's emulator stops on CLAC, and nothing changed
    // the text, so the VMM's one re-entry fails the same way and the run ends.
    let guest = temp_file("clac.elf", &vmm::loader::synthetic::elf64_code(&[0x0f, 0x01, 0xca, 0xf4]));
    let o = perfvm(&["run", &guest, "--native", "off", "--stats"]);
    let err = stderr(&o);
    assert_eq!(code(&o), 6, "{err}");
    assert!(err.contains("KVM internal error, suberror 1 at RIP=0x100000 on vcpu 0 (clac [0f 01 ca])"), "{err}");
    assert!(err.contains("completed by the VMM: re-entered 1"), "{err}");
}
