//! Suite `linux` (run only when named: a boot is tens of minutes here): Debian's stock
//! kernel (guest/linux/fetch-and-build.sh's target/linux) booted to /init, whose only
//! command powers it off, against its floor: the instructions KVM emulated for it over this
//! host's emulation rate, the `rate` guest's emulated loop measured just before and just
//! after the boot in the same run (docs/LINUX.md).

use super::rate::guest_rate;
use super::{config, Bench};
use crate::Failure;
use profile::measure::{fmt, per_second};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vmm::native::NativeMode;
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
    let guests = crate::guests::guest_dir();
    guests.ancestors().nth(2).map(PathBuf::from).unwrap_or(guests)
}

/// Instructions per second of the emulated rate loop, vPMU off.
fn emulation_rate(b: &Bench) -> Result<f64, Failure> {
    let cfg = config("rate", &RATE_ITERATIONS.to_string(), None);
    let report = b.run(&cfg, NativeMode::Off)?.ok_or_else(|| Failure::failed("the rate guest did not run"))?;
    guest_rate(&report, "loop").ok_or_else(|| Failure::failed("the rate guest printed no rate"))
}

/// KVM's `insn_emulation`, all vCPUs.
fn instructions_emulated(report: &RunReport) -> u64 {
    report.stats.vcpus.iter().filter_map(|v| v.kvm.get("insn_emulation")).sum()
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
    let seconds = start.elapsed().as_secs_f64();
    let after = emulation_rate(b)?;
    let instructions = instructions_emulated(&report);
    let rate = (before + after) / 2.0;
    let floor = instructions as f64 / rate;
    let text = format!(
        "linux — Debian's stock kernel booted to /init and powered off (perf backend), one run, against its floor\n\n\
         boot to /init and power-off   {} s wall\n\
         instructions KVM emulated     {}\n\
         emulation rate (rate guest)   {} instr/s before the boot, {} after\n\
         floor = instructions / rate   {} s\n\
         boot / floor                  {}x\n",
        fmt(seconds),
        fmt(instructions as f64),
        per_second(before),
        per_second(after),
        fmt(floor),
        fmt(seconds / floor),
    );
    let value = json!({
        "cmdline": CMDLINE,
        "boot_seconds": seconds,
        "instructions_emulated": instructions,
        "rate_before": before,
        "rate_after": after,
        "floor_seconds": floor,
        "boot_over_floor": seconds / floor,
    });
    Ok((text, value))
}
