//! How this host enters SYSCALL from user mode, and perfvm's repair (vmm::host::pvm::syscall_entry), on
//! a probe guest shaped like Linux that makes three SYSCALLs and returns from each with SYSRETQ
//! (guest/linux/syscall_probe.S: exit 7 if all three entered at CPL 0, 199 if the entry faulted).

mod common;
use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The probe, assembled and linked once (the tests run in parallel and would write the
/// same files), wrapped in a bzImage so perfvm boots it as Linux.
fn probe() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(build_probe).clone()
}

fn build_probe() -> String {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../guest/linux/syscall_probe.S");
    let dir = std::env::temp_dir().join(format!("perfvm-syscall-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (obj, elf) = (dir.join("probe.o"), dir.join("probe.elf"));
    let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
    assert!(ok(Command::new("gcc").arg("-c").arg(&src).arg("-o").arg(&obj)), "assembling {}", src.display());
    assert!(ok(Command::new("ld")
        .args([
            "-static",
            "-Ttext=0x100000",
            "-Tdata=0x101000",
            "--section-start=.entry=0x200000",
            "-e",
            "_start",
            "-o"
        ])
        .arg(&elf)
        .arg(&obj)));
    temp_file("syscall-probe.bz", &vmm::loader::synthetic::bzimage(&std::fs::read(&elf).unwrap()))
}

fn run(image: &str, repair: bool) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .args(["run", image, "--pmu", "off", "--stats", "--timeout", "60"])
        .env("PERFVM_SYSCALL_REPAIR", if repair { "1" } else { "0" })
        .output()
        .unwrap()
}

#[test]
fn a_user_syscall_enters_the_kernel_with_the_repair() {
    require_kvm!();
    let image = probe();
    let o = run(&image, true);
    assert_eq!(code(&o), 7, "three SYSCALLs entered with CS 0x10 and returned: {}", stderr(&o));
    let without = run(&image, false);
    // 7 where the host enters SYSCALL correctly, 199 on this kvm_pvm (measured).
    assert!([7, 199].contains(&code(&without)), "{}", stderr(&without));
    if code(&without) == 199 {
        assert!(stderr(&o).contains("completed by the VMM: syscall 3"), "{}", stderr(&o));
    }
}

/// The exact backend steps the whole probe, user mode included (run natively by this host,
/// where no step traps), with the repair's breakpoint kept. User mode runs `mov; syscall`,
/// then twice `jmp; mov; syscall` after SYSRETQ: 8 instructions, 5 of them branches
/// (SYSCALL is a far branch). The kernel runs 71 instructions to its IRETQ (2 branches:
/// LRETQ, IRETQ), the entry twice 18 (JNE, JAE, SYSRETQ) and then 14 to its OUT (JNE, JAE):
/// 121 instructions, 10 branches (counted from `objdump -d`).
#[test]
fn the_exact_backend_steps_through_repaired_syscalls() {
    require_kvm!();
    let image = probe();
    let o = Command::new(env!("CARGO_BIN_EXE_perfvm"))
        .args([
            "stat",
            "-a",
            "--backend",
            "exact",
            "-e",
            "instructions:u,branches:u,instructions:k,branches:k",
            "--json",
        ])
        .args([image.as_str(), "--timeout", "60"])
        .env("PERFVM_SYSCALL_REPAIR", "1")
        .output()
        .unwrap();
    assert_eq!(code(&o), 7, "{}", stderr(&o));
    let counts: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let value = |event: &str| {
        counts["counts"].as_array().unwrap().iter().find(|c| c["event"] == event).unwrap()["value"].as_u64().unwrap()
    };
    assert_eq!(value("instructions:u"), 8);
    assert_eq!(value("branches:u"), 5);
    assert_eq!(value("instructions:k"), 121);
    assert_eq!(value("branches:k"), 10);
}
