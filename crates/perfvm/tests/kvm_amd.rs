//! The standard-KVM tier: perfvm on a stock `kvm_amd`, not this machine's `kvm_pvm`. QEMU TCG
//! with `-cpu max` emulates AMD SVM with nested paging, so Debian's stock cloud kernel (the
//! one guest/linux fetches) loads kvm_amd inside it and gives a real /dev/kvm. One QEMU boot
//! (guest/kvmhost/run.sh, ~3 s to /dev/kvm) runs every command below in order; each test
//! checks one command's exit status and output, as the kvm_pvm tests check the same run. The
//! Linux exact boot is the slow tier's (`#[ignore]`d; `.ci/run` runs it with `-- --ignored`,
//! in a boot of its own).
//!
//! Skips (loudly; a failure under `PERFVM_REQUIRE_KVM=1`) where QEMU is not installed, the
//! apt assets cannot be fetched, or QEMU's CPU offers no SVM.

mod common;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The Linux guest's kernel and initramfs inside the host (build.sh puts them there).
const LINUX: &str = "perfvm run /linux/vmlinuz --initrd /linux/initramfs.cpio --timeout 1500 --stats";

/// `perf stat -e cycles,instructions:u ...` and friends on the perf backend, AMD identity
/// (tests/linux.rs's first boot), plus perf record + perf report of twofunc.
const LINUX_PERF_CMDS: &str = r#""echo marker-$((6 * 7))" "/bin/loop 1000" "/bin/twofunc 1000" "false" "perf stat -e cycles,instructions:u /bin/loop 1000" "perf record -e cycles -c 10000000 -B -N -o /tmp/p.data /bin/twofunc 20000000" "perf report -i /tmp/p.data --stdio --sort sym -q""#;

/// Exact counts of the kit's loop with the Intel identity (tests/linux.rs's second boot, which
/// also counts `/bin/loop 7`: each `perf stat` here steps ~1.1 million kernel instructions at
/// TCG's exit cost, 85-220 s, so this tier counts one loop). (Not here: `perf record -e
/// instructions:u` on the exact backend, over 6 minutes at TCG's speed: docs/DESIGN.md,
/// "Hosts".)
const LINUX_EXACT_CMDS: &str = r#""perf stat -e instructions:u,branches:u,instructions:k /bin/loop 1000""#;

/// docs/getting-started.md's Linux section as the guide gives it, its assets at /linux in
/// the host (the fetch is build.sh's): `perfvm record -a` of a boot, then `perfvm report`.
fn guide_linux() -> Vec<String> {
    let guide = common::guide::commands().into_iter().filter(|c| c.section == common::guide::LINUX_SECTION);
    guide.filter(|c| c.line.starts_with("perfvm ")).map(|c| c.line.replace("target/linux/", "/linux/")).collect()
}

/// The slow tier's commands, for its `#[ignore]`d tests (`.ci/run` runs them with
/// `-- --ignored`): the Linux exact boot steps for 3-4 minutes at TCG's exit cost, and grows
/// with a busy host's slowness (its guest's time runs on while it crawls).
const SLOW_TIER: &[&str] = &["linux_exact_intel"];

/// Whether this run boots command `name`: the slow tier's when libtest runs the ignored
/// tests, the others unless it runs those alone.
fn in_this_run(name: &str) -> bool {
    let asked = |flag: &str| std::env::args().any(|a| a == flag);
    match SLOW_TIER.contains(&name) {
        true => asked("--ignored") || asked("--include-ignored"),
        false => !asked("--ignored"),
    }
}

/// Every command of this run's boot, by test name, in the order they run.
fn commands() -> Vec<(&'static str, String)> {
    let guide = guide_linux();
    let [record, report] = &guide[..] else { panic!("the guide's Linux section: record, then report: {guide:?}") };
    let linux = |backend: &str, vendor: &str, cmds: &str| {
        format!("{LINUX} --backend {backend} --cpu-vendor {vendor} --cmdline 'nmi_watchdog=0 -- {cmds}'")
    };
    vec![
        // pmu_arch is the Intel suite; the identity defaults to the host's vendor, AMD here.
        ("pmu_arch_perf", "perfvm run --cpu-vendor intel pmu_arch --timeout 300".into()),
        ("pmu_arch_exact", "perfvm run --backend exact --cpu-vendor intel pmu_arch --timeout 300".into()),
        ("pmu_amd_perf", "perfvm run --cpu-vendor amd pmu_amd --timeout 300".into()),
        ("pmu_amd_exact", "perfvm run --backend exact --cpu-vendor amd pmu_amd --timeout 300".into()),
        ("stat_cycles", "perfvm stat -e cycles ftest".into()),
        // The main job as a user runs it: ftest at its full-speed size (~6 s at TCG's speed),
        // thousands of samples at the default rate; `ftest 100` at -F 1000 kept 57 of ~130
        // on a quiet host and 8 beside other work (notifications lost at ~140 us an exit).
        ("record", "perfvm record -o /tmp/p.data ftest".into()),
        ("report", "perfvm report -i /tmp/p.data --stdio".into()),
        ("smp", "perfvm run smp --vcpus 2 --timeout 120".into()),
        ("mbsmp", "perfvm run mbsmp --vcpus 2 --timeout 120".into()),
        // ftest's emulated size: by blocks in hardware its default is ten times that,
        // ~80 s at TCG's exit cost.
        ("stat_exact", "perfvm stat --backend exact -e instructions,branches ftest 1".into()),
        ("linux_perf_amd", linux("perf", "amd", LINUX_PERF_CMDS)),
        ("linux_exact_intel", linux("exact", "intel", LINUX_EXACT_CMDS)),
        ("guide_linux_record", record.clone()),
        ("guide_linux_report", report.clone()),
        // Runs end when told, whatever the guest does: spin is a vCPU that never exits.
        ("timeout", "perfvm run --timeout 3 spin".into()),
        ("sigterm", "perfvm run spin & p=$!; sleep 3; kill -TERM $p; wait $p".into()),
    ]
    .into_iter()
    .filter(|(name, _)| in_this_run(name))
    .collect()
}

/// One command's run: its line, exit status (None: it never finished), console output and
/// wall time in the host.
#[derive(Debug, Clone)]
struct Ran {
    cmd: String,
    status: Option<i32>,
    out: String,
    secs: Option<f64>,
}

#[derive(Debug)]
struct Boot {
    console: String,
    ran: BTreeMap<usize, Ran>,
}

/// The one boot every test reads, or why there is none (a skip).
fn boot() -> &'static Result<Boot, String> {
    static BOOT: OnceLock<Result<Boot, String>> = OnceLock::new();
    BOOT.get_or_init(run_boot)
}

/// Past libtest's output capture, so skips and the timing summary are seen.
fn loud(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

fn run_boot() -> Result<Boot, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().unwrap_or(root);
    let dir = root.join("guest/kvmhost");
    if Command::new("qemu-system-x86_64").arg("--version").output().is_err() {
        return Err("qemu-system-x86_64 not found (apt-get install qemu-system-x86)".into());
    }
    let build = Command::new("sh")
        .arg(dir.join("build.sh"))
        .env("PERFVM_BIN", env!("CARGO_BIN_EXE_perfvm"))
        .env("PERFVM_GUEST_DIR", env!("PERFVM_GUEST_DIR"))
        .output()
        .map_err(|e| format!("cannot run build.sh: {e}"))?;
    if !build.status.success() {
        return Err(format!("guest/kvmhost/build.sh failed: {}", String::from_utf8_lossy(&build.stderr).trim()));
    }
    let cmds = commands();
    let started = std::time::Instant::now();
    let mut run = Command::new("sh");
    run.arg(dir.join("run.sh"))
        .args(["--timeout", "3000"])
        .args(cmds.iter().map(|(_, c)| c))
        .env("PERFVM_BIN", env!("CARGO_BIN_EXE_perfvm"))
        .env("PERFVM_GUEST_DIR", env!("PERFVM_GUEST_DIR"));
    // Should this test process die, run.sh gets SIGTERM and takes QEMU with it.
    // SAFETY: prctl is async-signal-safe and touches nothing of the parent's.
    unsafe {
        use std::os::unix::process::CommandExt;
        run.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let o = run.output().map_err(|e| format!("cannot run run.sh: {e}"))?;
    let console = plain(&String::from_utf8_lossy(&o.stdout));
    if console.contains("kvmhost: failed: no /dev/kvm") {
        let why: Vec<&str> = console.lines().filter(|l| l.to_lowercase().contains("kvm")).collect();
        return Err(format!("kvm_amd did not load under QEMU TCG -cpu max: {}", why.join(" | ")));
    }
    // The whole console, for reading after the run (the checks print excerpts only).
    let log = root.join("target/kvmhost/kvm_amd-console.log");
    let _ = std::fs::write(&log, &console);
    let boot = Boot { ran: parse(&console), console };
    let mut summary = format!(
        "kvm_amd: one QEMU boot, {:.1} s wall, console in {}; per command:\n",
        started.elapsed().as_secs_f64(),
        log.display()
    );
    for (i, (name, _)) in cmds.iter().enumerate() {
        let r = boot.ran.get(&(i + 1));
        let status = r.and_then(|r| r.status).map_or("-".into(), |s| s.to_string());
        let secs = r.and_then(|r| r.secs).map_or("-".into(), |s| format!("{s:.2} s"));
        summary += &format!("  {:2} {name:20} exit {status:>3}  {secs}\n", i + 1);
    }
    loud(&summary);
    Ok(boot)
}

/// The console as text: no carriage returns (the serial line's CRLF), no colour (Linux's perf
/// report colours its percentages on a terminal, and the guest's console is one).
fn plain(console: &str) -> String {
    let mut out = String::with_capacity(console.len());
    let mut chars = console.chars();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {}
            // A CSI sequence: ESC [ parameters, then a final letter.
            '\x1b' => {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Split the console at init's frames: `kvmhost: run N: CMD`, output, `kvmhost: exit N: S`,
/// `kvmhost: time N: T s`.
fn parse(console: &str) -> BTreeMap<usize, Ran> {
    let mut ran = BTreeMap::new();
    let mut current: Option<usize> = None;
    let frame = |line: &str, what: &str| -> Option<(usize, String)> {
        let (n, rest) = line.strip_prefix(&format!("kvmhost: {what} "))?.split_once(": ")?;
        Some((n.parse().ok()?, rest.to_owned()))
    };
    for line in console.lines() {
        if let Some((n, cmd)) = frame(line, "run") {
            ran.insert(n, Ran { cmd, status: None, out: String::new(), secs: None });
            current = Some(n);
        } else if let Some((n, status)) = frame(line, "exit") {
            if let Some(r) = ran.get_mut(&n) {
                r.status = status.trim().parse().ok();
            }
            current = None;
        } else if let Some((n, secs)) = frame(line, "time") {
            if let Some(r) = ran.get_mut(&n) {
                r.secs = secs.trim_end_matches(" s").parse().ok();
            }
        } else if let Some(r) = current.and_then(|n| ran.get_mut(&n)) {
            r.out.push_str(line);
            r.out.push('\n');
        }
    }
    ran
}

/// The boot, or None where the tier skips (said loudly; a failure under
/// PERFVM_REQUIRE_KVM=1).
fn booted(test: &str) -> Option<&'static Boot> {
    match boot() {
        Ok(b) => Some(b),
        Err(reason) => {
            loud(&format!("SKIP kvm_amd: {reason}\n"));
            common::skip(&format!("kvm_amd::{test}"), reason);
            None
        }
    }
}

/// The run of the command `name` (None where the tier skips).
fn ran(name: &str) -> Option<Ran> {
    let boot = booted(name)?;
    let i = commands().iter().position(|(n, _)| *n == name).expect("a command of the list") + 1;
    let tail = |s: &str| s[s.len().saturating_sub(4000)..].to_owned();
    match boot.ran.get(&i) {
        Some(r) if r.status.is_some() => Some(r.clone()),
        Some(r) => panic!("{name}: `{}` did not finish; its output:\n{}", r.cmd, tail(&r.out)),
        None => panic!("{name}: command {i} never ran; the console's tail:\n{}", tail(&boot.console)),
    }
}

impl Ran {
    /// What a failed check prints: the command, its status and its output (the last 6000
    /// characters: a Linux boot's console is long).
    fn context(&self) -> String {
        let out = &self.out[self.out.len().saturating_sub(6000)..];
        format!("`{}` exited {:?}; output:\n{out}", self.cmd, self.status)
    }

    fn has(&self, needle: &str) {
        assert!(self.out.contains(needle), "expected {needle:?} in the output of {}", self.context());
    }

    fn lacks(&self, needle: &str) {
        assert!(!self.out.contains(needle), "unexpected {needle:?} in the output of {}", self.context());
    }

    fn exits(&self, code: i32) {
        assert_eq!(self.status, Some(code), "exit status of {}", self.context());
    }

    /// A conformance suite's run: exit 0, its last line "... passed, 0 failed", no FAIL.
    fn conformant(&self) {
        self.exits(0);
        let last = self.out.trim_end().lines().last().unwrap_or("");
        assert!(last.contains(" passed, 0 failed"), "last line {last:?} of {}", self.context());
        self.lacks("FAIL:");
    }

    /// The count of a `perf stat`-shaped row (`   1,011,574      instructions`).
    fn count(&self, event: &str) -> Option<u64> {
        stat_count(&self.out, event)
    }
}

fn stat_count(text: &str, event: &str) -> Option<u64> {
    let row = text.lines().find(|l| l.split_whitespace().nth(1) == Some(event))?;
    row.split_whitespace().next()?.replace(',', "").parse().ok()
}

/// The host itself: kvm_amd loaded with nested paging, and init ran every command and got
/// to the end (a host panic or a hung command would stop it short).
#[test]
fn host_boots_with_kvm_amd() {
    let Some(boot) = booted("host_boots_with_kvm_amd") else { return };
    let c = &boot.console;
    let tail = &c[c.len().saturating_sub(4000)..];
    assert!(c.contains("kvmhost: ready"), "{tail}");
    assert!(c.contains("SVM: kvm: Nested Paging enabled"), "{}", &c[..c.len().min(4000)]);
    assert!(c.contains("kvmhost: done"), "{tail}");
    assert_eq!(boot.ran.len(), commands().len(), "every command ran: {tail}");
}

#[test]
fn pmu_arch_perf() {
    let Some(r) = ran("pmu_arch_perf") else { return };
    r.conformant();
    r.has("pmu_arch: ranged counts");
    r.has("PASS: overflow-nmi: one PMI delivered");
}

/// A #UD the CPU delivers enters its handler with TF clear; QEMU 7.2 arms no nested
/// guest's DR7, so the stop at that handler is a port write planted on its entry
/// (`vpmu::planted`), and the handler's instructions count as on kvm_pvm.
#[test]
fn pmu_arch_exact() {
    let Some(r) = ran("pmu_arch_exact") else { return };
    r.conformant();
    r.has("PASS: kinds: #UD: handler add + iretq: 6 instructions, 1 branches (expect 6, 1)");
    r.has("pmu_arch: exact counts");
    r.has("PASS: gp: PMC0 instructions = 2005 (expect 2005)");
    r.has("PASS: gp: PMC0 branches = 1000 (expect 1000)");
    r.has("PASS: pmi-rip: PMI after 8 instructions at jnz");
    r.lacks("SKIP:");
}

/// What pmu_amd must say under either backend (tests/pmu.rs's `pmu_amd`).
fn amd_common(r: &Ran) {
    r.conformant();
    for line in [
        "PASS: identity: vendor AuthenticAMD",
        "PASS: identity: PerfMonV2 (CPUID 0x80000022 EAX[0])",
        "PASS: identity: no Intel perfmon leaf (CPUID 0xA = 0 0 0 0)",
        "PASS: legacy: PERF_CTR0-",
        "PASS: gating: EN set, GLOBAL_CTL clear: no count",
        "PASS: reserved: PERF_CTL0 with HostOnly (41): accepted, bit(s) dropped",
        "PASS: reserved: GLOBAL_STATUS write of 0: accepted and ignored",
        "PASS: #GP: PERF_CTL6/PERF_CTR6",
        "PASS: overflow-nmi: one PMI delivered (1;",
        "PASS: overflow-nmi: STATUS_CLR clears it",
        "PASS: overflow-vector: one PMI delivered (1;",
        "PASS: overflow-vector: STATUS_SET sets it again",
    ] {
        r.has(line);
    }
}

#[test]
fn pmu_amd_perf() {
    let Some(r) = ran("pmu_amd_perf") else { return };
    amd_common(&r);
    r.has("pmu_amd: ranged counts, 4 counters");
    r.has("PASS: identity: CPUID 0x80000022 EBX[3:0] = 4 core counters");
    r.has("PASS: rdpmc: RDPMC 4 (no such counter) #GPs");
    r.has("PASS: overflow-vector: GLOBAL_STATUS = 0x8 in the handler (bit 3)");
}

#[test]
fn pmu_amd_exact() {
    let Some(r) = ran("pmu_amd_exact") else { return };
    amd_common(&r);
    for line in [
        "pmu_amd: exact counts, 4 counters",
        "PASS: gp: PMC0 instructions = 2005 (expect 2005)",
        "PASS: gp: PMC3 instructions = 2005 (expect 2005)",
        "PASS: gp: PMC0 branches = 1000 (expect 1000)",
        "PASS: gp: PMC0 cycles = 2005 (expect 2005)",
        "PASS: rdpmc: RDPMC 0 of a running counter = 0x12346 (expect 0x12346)",
        "PASS: rdpmc: RDPMC 1..3 read all 48 bits of each counter",
        "PASS: pmi-rip: PMI after 8 instructions at jnz",
    ] {
        r.has(line);
    }
    for skip in r.out.lines().filter(|l| l.starts_with("SKIP:")) {
        assert!(skip.contains("VMM DISAGREES"), "exact backend skips nothing else: {skip}\n{}", r.context());
    }
}

#[test]
fn stat_counts_cycles() {
    let Some(r) = ran("stat_cycles") else { return };
    r.exits(0);
    r.has(" Performance counter stats for 'ftest':");
    r.has("seconds time elapsed");
    r.has("ftest: iterations=");
    assert!(r.count("cycles").is_some_and(|n| n > 0), "cycles counted: {}", r.context());
}

#[test]
fn record_then_report() {
    let Some(r) = ran("record") else { return };
    r.exits(0);
    r.has("[ perfvm record: Captured and wrote");
    r.lacks("perfvm: no samples");
    let Some(r) = ran("report") else { return };
    r.exits(0);
    let samples: u64 = r
        .out
        .lines()
        .find_map(|l| l.strip_prefix("# Samples: "))
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no '# Samples:' line in {}", r.context()));
    assert!(samples >= 10, "{samples} samples: {}", r.context());
    // A time profile, exits included (out_serial's console writes rank high here): the loop's
    // functions appear, not a ranking.
    r.has("[.] qux\n");
    r.has("[.] random\n");
}

#[test]
fn two_vcpus() {
    let Some(r) = ran("smp") else { return };
    r.exits(0);
    r.has("vcpu 0 up");
    r.has("vcpu 1 up");
    r.has("all 2 vcpus up");
    let Some(r) = ran("mbsmp") else { return };
    r.exits(0);
    r.has("mbsmp: ap up (apic id 1)");
    r.has("mbsmp: bsp saw the ap, done");
}

#[test]
fn stat_exact_counts() {
    let Some(r) = ran("stat_exact") else { return };
    r.exits(0);
    // ftest is ~10^6 instructions, about one in six a branch (tests/perf.rs).
    let insns = r.count("instructions").unwrap_or_else(|| panic!("instructions: {}", r.context()));
    assert!((900_000..1_200_000).contains(&insns), "{insns}: {}", r.context());
    let branches = r.count("branches").unwrap_or_else(|| panic!("branches: {}", r.context()));
    assert!(branches > insns / 10 && branches < insns / 3, "{branches}: {}", r.context());
}

/// `perf stat`'s output for `command` in a Linux guest's console (empty if it has none).
fn stat_of<'a>(out: &'a str, command: &str) -> &'a str {
    out.split(&format!("Performance counter stats for '{command}'")).nth(1).unwrap_or_default()
}

/// What every Linux boot must show (tests/linux.rs's `boot`): the vendor's perf driver took
/// the vPMU, Linux stayed off SPEC_CTRL, no panic or oops, init's commands all ran, and
/// `reboot -f` ended the run with exit 0.
fn linux_common(r: &Ran, driver: &str) {
    let line = r.out.lines().find(|l| l.contains("Performance Events:")).unwrap_or_default();
    assert!(line.contains(driver), "Linux's perf driver took the vPMU: {}", r.context());
    r.lacks("software events only");
    r.lacks("unchecked MSR access error");
    // A hardware host runs the kernel as users have it: no emulator-only words.
    r.lacks("clearcpuid=");
    r.lacks("mitigations=off");
    r.lacks("Kernel panic");
    r.lacks("Oops");
    r.has("Run /init as init process");
    r.has("perfvm-init: ready");
    r.has("perfvm-init: done");
    r.exits(0);
}

/// perf report's share of `symbol` (`    75.00%  [.] hot`), if it has a row.
fn share(out: &str, symbol: &str) -> Option<f64> {
    let row = out.lines().find(|l| l.trim_end().ends_with(&format!("[.] {symbol}")))?;
    row.split_whitespace().next()?.strip_suffix('%')?.parse().ok()
}

#[test]
fn linux_perf_backend_amd() {
    let Some(r) = ran("linux_perf_amd") else { return };
    linux_common(&r, "AMD PMU driver");
    r.has("Linux version 6.");
    r.has("marker-42");
    r.has("perfvm-init: exit 2: 0");
    r.has("twofunc: hot 3000 iterations, cold 1000 iterations");
    r.has("perfvm-init: exit 4: 1");
    let stat = stat_of(&r.out, "/bin/loop 1000");
    assert!(stat_count(stat, "cycles").is_some_and(|n| n > 0), "perf stat counts cycles: {}", r.context());
    // No host PMU under QEMU TCG either: AMD's counter runs and reads 0 (tests/linux.rs).
    assert_eq!(stat_count(stat, "instructions:u"), Some(0), "{}", r.context());
    r.has("perfvm-init: exit 5: 0");
    r.has("perfvm-init: exit 6: 0");
    r.has("perfvm-init: exit 7: 0");
    // A time profile of a few dozen samples, the console's exits among them: hot (3/4 of the
    // loop's instructions) above cold (73% / 27% of the user samples on kvm_pvm: docs/LINUX.md,
    // "Linux's perf inside the guest").
    let (hot, cold) = (share(&r.out, "hot"), share(&r.out, "cold"));
    assert!(hot.zip(cold).is_some_and(|(h, c)| h > c), "hot {hot:?} / cold {cold:?}: {}", r.context());
    r.has("kernel command line: console=ttyS0 ");
}

/// docs/getting-started.md's Linux profile: a boot recorded from the VMM, its report split
/// into the kernel's functions (by its kallsyms tables) and user space.
#[test]
fn the_guides_linux_profile() {
    let Some(r) = ran("guide_linux_record") else { return };
    r.exits(0);
    r.has("[ perfvm record: Captured and wrote");
    r.has("twofunc: hot");
    let Some(r) = ran("guide_linux_report") else { return };
    r.exits(0);
    r.has("[.] [user]");
    let kernel = r.out.lines().filter(|l| l.contains("[.] ") && !l.contains("[user]") && !l.contains("[unknown]"));
    assert!(kernel.count() >= 3, "kernel functions by name: {}", r.context());
}

#[test]
#[ignore = "slow tier: a stepped stock-kernel boot on kvm_amd under TCG (.ci/run runs it with --ignored)"]
fn linux_exact_backend_intel() {
    let Some(r) = ran("linux_exact_intel") else { return };
    linux_common(&r, "Intel PMU driver");
    // `/bin/loop N` with d digits: 2N + 8d + 14 user instructions, N + 2d + 3 user branches.
    // (1000, not tests/linux.rs's 100000: each step is a VM exit at TCG's ~1 ms here.)
    let stat = |n: &str| stat_of(&r.out, &format!("/bin/loop {n}"));
    assert_eq!(stat_count(stat("1000"), "instructions:u"), Some(2 * 1000 + 8 * 4 + 14), "{}", r.context());
    assert_eq!(stat_count(stat("1000"), "branches:u"), Some(1000 + 2 * 4 + 3), "{}", r.context());
    assert!(stat_count(stat("1000"), "instructions:k").is_some_and(|n| n > 0), "{}", r.context());
    r.has("perfvm-init: exit 1: 0");
    r.has("execution: hardware (kvm_amd runs guest code in hardware)");
}

#[test]
fn runs_end_when_told() {
    let Some(r) = ran("timeout") else { return };
    r.exits(124);
    r.has("spinning");
    r.has("guest still running after 3.0 s, stopped");
    assert!(r.secs.is_some_and(|s| s < 10.0), "ended promptly: {}", r.context());
    let Some(r) = ran("sigterm") else { return };
    r.exits(128 + libc::SIGTERM);
    r.has("spinning");
    assert!(r.secs.is_some_and(|s| s < 10.0), "ended promptly: {}", r.context());
}
