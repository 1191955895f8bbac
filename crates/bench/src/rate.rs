//! Suite `rate`: what native execution buys and what it costs. The same dec/jnz loop (2
//! instructions per iteration) on a host thread in this process and in the `rate` guest in
//! each mode, timed by the TSC; the same for a locked read-modify-write loop (`rate N
//! lock`) and for ftest's loop (its host build, guest/build/host/ftest, against the native
//! guest); and an exit's roundtrip seen from the guest in each mode: port IO (`portio`,
//! vPMU off) and a filtered MSR (`rate N msr`: RDMSR of GLOBAL_CTRL, which the vPMU takes
//! from KVM's MSR filter).

use super::transitions::portio_ns;
use super::{config, console_value, mode_name, tsc, Bench};
use perfvm::Failure;
use pmu::tsc::{SamplePeriod, TscRate};
use profile::measure::{fmt, per_second, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use std::time::Instant;
use vmm::config::PmuSettings;
use vmm::host::pvm::native::NativeMode;
use vmm::host::runs_at_full_speed;
use vmm::RunReport;

/// Loop iterations: ~1 s natively and on the host (several 10^9 instructions/s), ~2 s
/// emulated (~1 µs per instruction).
fn iterations(native: bool, quick: bool) -> u64 {
    match (native, quick) {
        (true, false) => 2_000_000_000,
        (true, true) => 200_000_000,
        (false, false) => 1_000_000,
        (false, true) => 200_000,
    }
}

/// Instructions per second of the guest/rate.c loop run on this thread.
fn host_rate(n: u64) -> f64 {
    let n = n.max(1);
    let start = Instant::now();
    // SAFETY: the loop only counts a register down (asm! assumes the flags clobbered).
    unsafe { core::arch::asm!("2:", "dec {n}", "jnz 2b", n = inout(reg) n => _, options(nomem, nostack)) };
    2.0 * n as f64 / start.elapsed().as_secs_f64()
}

/// The locked loop runs this many times fewer iterations than the plain one (a locked
/// read-modify-write takes ~20 cycles where dec/jnz takes one).
const LOCK_DIVISOR: u64 = 32;

/// Instructions per second of guest/rate.c's locked loop (lock xadd; dec; jnz) run on this
/// thread on an aligned word.
fn host_lock_rate(n: u64) -> f64 {
    let n = n.max(1);
    #[repr(align(64))]
    struct Line(u64);
    let mut word = Line(0);
    let start = Instant::now();
    // SAFETY: the loop adds to a word this function owns and counts a register down.
    unsafe {
        core::arch::asm!("2:", "lock xadd [{w}], {one}", "dec {n}", "jnz 2b",
            w = in(reg) &mut word.0, one = inout(reg) 1u64 => _, n = inout(reg) n => _, options(nostack))
    };
    3.0 * n as f64 / start.elapsed().as_secs_f64()
}

/// Instructions per second of the guest's loop `what` (`loop` or `lock`), from its
/// `rate: <what>` line.
pub(super) fn guest_rate(report: &RunReport, what: &str) -> Option<f64> {
    let get = |key| console_value(report, &format!("rate: {what} "), key);
    let tsc = TscRate::from_khz(get("tsc_khz")? as u64)?;
    Some(get("instructions")? / tsc.seconds(get("tsc")?))
}

/// ftest's units (4,500 iterations each) for the host/native comparison: ~2 s natively.
fn ftest_units(quick: bool) -> u64 {
    if quick {
        1500
    } else {
        15000
    }
}

/// The host ftest's TSC ticks, one per repetition: measured before the suites run, since a
/// confined VMM cannot start a process (docs/SECURITY.md).
static HOST_FTEST: std::sync::OnceLock<Vec<Result<f64, String>>> = std::sync::OnceLock::new();

/// Run the host's ftest `reps` times now, for `run` to use.
pub fn measure_host(reps: usize, quick: bool) {
    let units = ftest_units(quick);
    HOST_FTEST.get_or_init(|| (0..reps).map(|_| host_ftest_ticks(units).map_err(|f| f.to_string())).collect());
}

/// Repetition `rep`'s host ftest ticks, as `measure_host` took them.
fn host_ftest_measured(rep: usize) -> Result<f64, Failure> {
    let measured =
        HOST_FTEST.get().and_then(|m| m.get(rep)).ok_or_else(|| Failure::failed("host ftest not measured"))?;
    measured.clone().map_err(Failure::failed)
}

/// TSC ticks of ftest's loop built for the host (guest/build/host/ftest); the guests' VMs
/// state the TSC rate that turns them into time.
fn host_ftest_ticks(units: u64) -> Result<f64, Failure> {
    let exe = perfvm::guests::guest_dir().join("host/ftest");
    let out = std::process::Command::new(&exe)
        .arg(units.to_string())
        .output()
        .map_err(|e| Failure::failed(format!("cannot run {}: {e}", exe.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|w| w.strip_prefix("tsc=")?.parse::<f64>().ok())
        .ok_or_else(|| Failure::failed(format!("{} printed no tsc=: {text}", exe.display())))
}

/// "3.32 s", or "n/a" (ftest's full size runs natively only).
fn seconds(s: f64) -> String {
    if s.is_finite() {
        format!("{} s", fmt(s))
    } else {
        "n/a".into()
    }
}

/// Seconds of ftest's loop in the guest, from its `ftest:` line.
fn guest_ftest_seconds(report: &RunReport) -> Option<f64> {
    Some(TscRate::from_khz(report.tsc_khz)?.seconds(console_value(report, "ftest:", "tsc")?))
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let host_n = iterations(true, b.quick);
    let units = ftest_units(b.quick);
    // The TSC rate the guests' VMs state (the host's ftest loop is timed in the same ticks).
    let mut rate_of_tsc = None;
    let (mut host, mut host_lock, mut host_ftest) = (Vec::new(), Vec::new(), Vec::new());
    // Per mode: iterations, instructions/s, port-IO roundtrip ns, RDMSR roundtrip ns,
    // instructions/s while the VMM samples the loop (record -a -g at record's default rate),
    // the locked loop's instructions/s, and ftest's seconds (native only).
    let mut per: Vec<(u64, [Vec<f64>; 6])> = b.modes.iter().map(|_| Default::default()).collect();
    for rep in 0..b.reps {
        host.push(host_rate(host_n));
        host_lock.push(host_lock_rate(host_n / LOCK_DIVISOR));
        host_ftest.push(host_ftest_measured(rep)?);
        for (&mode, (n, [rate, portio, rdmsr, sampled, lock, ftest])) in b.modes.iter().zip(&mut per) {
            let mut cfg = config("rate", "", Some(PmuSettings::default()));
            let native = runs_at_full_speed(&cfg, mode);
            *n = iterations(native, b.quick);
            cfg.cmdline = format!("{n} msr");
            if let Some(r) = b.run(&cfg, mode)? {
                rate.extend(guest_rate(&r, "loop"));
                rdmsr.extend(console_value(&r, "rate: rdmsr", "ns"));
                rate_of_tsc = Some(tsc(&r)?);
            }
            cfg.cmdline = format!("{} lock", *n / LOCK_DIVISOR);
            if let Some(r) = b.run(&cfg, mode)? {
                lock.extend(guest_rate(&r, "lock"));
            }
            if native {
                if let Some(r) = b.run(&config("ftest", &units.to_string(), None), mode)? {
                    ftest.extend(guest_ftest_seconds(&r));
                }
            }
            cfg.sampling = Some(vmm::profiling::sampler::SamplingConfig {
                period: SamplePeriod::Hz(perfvm::cli::default_record_freq(native)),
                callchain: Some(vmm::profiling::sampler::CallGraph::Dwarf),
                max_samples: cfg.max_samples,
            });
            if let Some(r) = b.run(&cfg, mode)? {
                sampled.extend(guest_rate(&r, "loop"));
            }
            if let Some(r) = b.run(&config("portio", "", None), mode)? {
                portio.extend(portio_ns(&r));
            }
        }
    }
    let host_ftest: Vec<f64> = host_ftest.iter().filter_map(|&t| Some(rate_of_tsc?.seconds(t))).collect();
    let (host, host_lock, host_ftest) = (Summary::of(&host), Summary::of(&host_lock), Summary::of(&host_ftest));
    let mut table = Table::new(&[
        Column::left("where", 12),
        Column::right("iterations", 14),
        Column::right("instr/s", 12),
        Column::right("port-IO exit", 16),
        Column::right("filtered RDMSR", 16),
    ]);
    table.push(vec![
        Cell::text("host thread"),
        Cell::json("mode", "host"),
        Cell::new("iterations", host_n, fmt(host_n as f64)),
        Cell::new("instr_per_s", host, per_second(host.median)),
        Cell::json("lock_instr_per_s", host_lock),
        Cell::json("ftest_seconds", host_ftest),
        Cell::json("ftest_units", units),
    ]);
    // The locked loop and ftest: text of their own, their numbers in the rows above.
    let mut locked =
        Table::new(&[Column::left("where", 12), Column::right("lock instr/s", 14), Column::right("ftest", 14)]);
    locked.push(vec![
        Cell::text("host thread"),
        Cell::text(per_second(host_lock.median)),
        Cell::text(seconds(host_ftest.median)),
    ]);
    let mut medians = Vec::new();
    let mut sampling = String::new();
    for (&mode, (n, v)) in b.modes.iter().zip(&per) {
        let [rate, portio, rdmsr, sampled, lock, ftest] = v.each_ref().map(|v| Summary::of(v));
        locked.push(vec![
            Cell::text(mode_name(mode)),
            Cell::text(per_second(lock.median)),
            Cell::text(seconds(ftest.median)),
        ]);
        let freq = perfvm::cli::default_record_freq(runs_at_full_speed(&config("rate", "", None), mode));
        let slowdown = 100.0 * (rate.median / sampled.median - 1.0);
        sampling.push_str(&format!(
            "{}: record -a -g at -F {freq} (the VMM samples the loop, no agent): {} instead of {} instr/s = {slowdown:+.2}%\n",
            mode_name(mode),
            per_second(sampled.median),
            per_second(rate.median),
        ));
        table.push(vec![
            Cell::label("mode", mode_name(mode)),
            Cell::new("iterations", n, fmt(*n as f64)),
            Cell::new("instr_per_s", rate, per_second(rate.median)),
            Cell::new("portio_roundtrip_ns", portio, format!("{} ns", fmt(portio.median))),
            Cell::new("rdmsr_roundtrip_ns", rdmsr, format!("{} ns", fmt(rdmsr.median))),
            Cell::json("vmm_sampled_instr_per_s", sampled),
            Cell::json("vmm_sampling_overhead_percent", slowdown),
            Cell::json("lock_instr_per_s", lock),
            Cell::json("ftest_seconds", ftest),
        ]);
        // The native/host speeds compare each side's least disturbed run (fastest rate,
        // shortest time): CPU-bound work on a shared host only ever loses time to others.
        medians.push([rate.median, portio.median, rdmsr.median, lock.max, ftest.min, rate.max]);
    }
    let mut text = format!(
        "rate — the same dec/jnz loop (2 instructions per iteration) on a host thread and in the guest (TSC-timed),\n\
         and an exit's roundtrip seen from the guest (portio's OUT, rate's RDMSR); {} runs each (median)\n\n{}",
        b.reps,
        table.text()
    );
    let mut locked = format!(
        "\nlocked read-modify-write loop (lock xadd; dec; jnz) and ftest's loop ({units} units), TSC-timed\n\n{}",
        locked.text()
    );
    let mut value = json!({"rows": table.json(), "reps": b.reps});
    let of = |mode| b.modes.iter().position(|m| *m == mode).map(|i| medians[i]);
    if let (Some(native), Some(emulated)) = (of(NativeMode::On), of(NativeMode::Off)) {
        let x = |a: f64, b: f64| format!("{}x", fmt(a / b));
        text.push_str(&format!(
            "\ninstr/s: native/host {}, native/emulated {}; exit roundtrip native/emulated: port IO {}, RDMSR {}\n",
            x(native[0], host.median),
            x(native[0], emulated[0]),
            x(native[1], emulated[1]),
            x(native[2], emulated[2])
        ));
        value["native_over_emulated"] = json!(native[0] / emulated[0]);
    }
    if let Some(native) = of(NativeMode::On) {
        // Speeds: time on the host over time natively for ftest, rates otherwise; each
        // side's best run.
        let (plain, lock, ftest) = (native[5] / host.max, native[3] / host_lock.max, host_ftest.min / native[4]);
        locked.push_str(&format!(
            "\nnative/host speed (best run of each): plain loop {}x, locked loop {}x, ftest {}x\n",
            fmt(plain),
            fmt(lock),
            fmt(ftest)
        ));
        value["native_over_host"] = json!(plain);
        value["native_over_host_lock"] = json!(lock);
        value["native_over_host_ftest"] = json!(ftest);
    }
    text.push_str(&locked);
    text.push_str(&sampling);
    Ok((text, value))
}
