//! Suite `linux` (run only when named: a boot is tens of minutes here): Debian's stock
//! kernel (guest/linux/fetch-and-build.sh's target/linux) booted to /init, whose only
//! command powers it off, against its floor: the instructions KVM emulated for it over this
//! host's emulation rate, the `rate` guest's emulated loop measured just before and just
//! after the boot in the same run (docs/LINUX.md, "What a boot costs").

use super::rate::guest_rate;
use super::{config, Bench};
use perfvm::Failure;
use profile::measure::{fmt, per_second};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vmm::host::pvm::native::NativeMode;
use vmm::RunReport;

/// Init runs the quoted commands after `--` (guest/linux/init.c): here only the power-off.
const CMDLINE: &str = r#"nmi_watchdog=0 -- "poweroff -f""#;

/// The emulated rate loop's iterations (2 instructions each): a few seconds here.
const RATE_ITERATIONS: u64 = 1_000_000;

/// A boot that takes longer has hung.
const BOOT_TIMEOUT: Duration = Duration::from_secs(3 * 3600);

/// The kernel and initramfs: `$PERFVM_LINUX_DIR`, else the repository's target/linux.
pub fn assets() -> Result<(PathBuf, PathBuf), Failure> {
    let dir =
        std::env::var_os("PERFVM_LINUX_DIR").map(PathBuf::from).unwrap_or_else(|| repository().join("target/linux"));
    let (kernel, initrd) = (dir.join("vmlinuz"), dir.join("initramfs.cpio"));
    if kernel.exists() && initrd.exists() {
        Ok((kernel, initrd))
    } else {
        Err(Failure::usage(format!(
            "bench linux: no kernel and initramfs in {} (build them with guest/linux/fetch-and-build.sh)",
            dir.display()
        )))
    }
}

/// The repository: guest/build's grandparent.
fn repository() -> PathBuf {
    let guests = perfvm::guests::guest_dir();
    guests.ancestors().nth(2).map(PathBuf::from).unwrap_or(guests)
}

/// What one run emulated: KVM's `insn_emulation` and the vCPU threads' CPU time, all vCPUs.
struct Emulated {
    instructions: u64,
    cpu_seconds: f64,
}

impl Emulated {
    fn of(report: &RunReport) -> Self {
        let instructions = report.stats.vcpus.iter().filter_map(|v| v.kvm.get("insn_emulation")).sum();
        let cpu_ns: u64 = report.vcpu_counts.iter().map(|c| c.thread_ns).sum();
        Emulated { instructions, cpu_seconds: cpu_ns as f64 / 1e9 }
    }

    /// Instructions per second of vCPU thread time: what the emulator gives a CPU, whatever
    /// else shares the host.
    fn per_cpu_second(&self) -> f64 {
        self.instructions as f64 / self.cpu_seconds
    }
}

/// The emulated rate loop (vPMU off): its instructions per second of wall time (its
/// TSC-timed loop) and per second of vCPU thread time (the whole run).
fn emulation_rate(b: &Bench) -> Result<(f64, f64), Failure> {
    let cfg = config("rate", &RATE_ITERATIONS.to_string(), None);
    let report = b.run(&cfg, NativeMode::Off)?.ok_or_else(|| Failure::failed("the rate guest did not run"))?;
    let wall = guest_rate(&report, "loop").ok_or_else(|| Failure::failed("the rate guest printed no rate"))?;
    Ok((wall, Emulated::of(&report).per_cpu_second()))
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let (kernel, initrd) = assets()?;
    let mut boot = config("linux", CMDLINE, None);
    boot.kernel = kernel;
    boot.initrd = Some(initrd);
    boot.pmu = Some(Default::default());
    boot.timeout = Some(BOOT_TIMEOUT);
    let before = emulation_rate(b)?;
    let start = Instant::now();
    let report = b.run(&boot, NativeMode::Off)?.ok_or_else(|| Failure::failed("the Linux guest did not run"))?;
    let wall = start.elapsed().as_secs_f64();
    let after = emulation_rate(b)?;
    let boot = Emulated::of(&report);
    let n = boot.instructions as f64;
    let floor_wall = n / ((before.0 + after.0) / 2.0);
    let floor_cpu = n / ((before.1 + after.1) / 2.0);
    let mut table =
        Table::new(&[Column::left("", 24), Column::right("wall time", 14), Column::right("vCPU thread time", 18)]);
    let row = |what: &'static str, wall: String, cpu: String| {
        vec![Cell::label("what", what), Cell::text(wall), Cell::text(cpu)]
    };
    let secs = |s: f64| format!("{} s", fmt(s));
    table.push(row("boot", secs(wall), secs(boot.cpu_seconds)));
    table.push(row("emulation rate, before", per_second(before.0), per_second(before.1)));
    table.push(row("emulation rate, after", per_second(after.0), per_second(after.1)));
    table.push(row("floor", secs(floor_wall), secs(floor_cpu)));
    table.push(row(
        "boot / floor",
        format!("{}x", fmt(wall / floor_wall)),
        format!("{}x", fmt(boot.cpu_seconds / floor_cpu)),
    ));
    let text = format!(
        "linux — Debian's stock kernel booted to /init and powered off (perf backend), one run, against its floor:\n\
         the {} instructions KVM emulated for it at the rate guest's emulated rate (instructions/s), before and after\n\n{}",
        fmt(n),
        table.text()
    );
    let value = json!({
        "cmdline": CMDLINE,
        "instructions_emulated": boot.instructions,
        "boot_seconds": wall,
        "boot_cpu_seconds": boot.cpu_seconds,
        "rate_before": {"wall": before.0, "cpu": before.1},
        "rate_after": {"wall": after.0, "cpu": after.1},
        "floor_seconds": floor_wall,
        "floor_cpu_seconds": floor_cpu,
        "boot_over_floor": wall / floor_wall,
        "boot_over_floor_cpu": boot.cpu_seconds / floor_cpu,
    });
    Ok((text, value))
}
