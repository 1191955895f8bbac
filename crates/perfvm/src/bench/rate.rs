//! Suite `rate`: what native execution buys and what it costs. The same dec/jnz loop (2
//! instructions per iteration) on a host thread in this process and in the `rate` guest in
//! each mode, timed by the TSC; and an exit's roundtrip seen from the guest in each mode:
//! port IO (`portio`, vPMU off) and a filtered MSR (`rate N msr`: RDMSR of GLOBAL_CTRL,
//! which the vPMU takes from KVM's MSR filter).

use super::transitions::portio_ns;
use super::{config, console_value, mode_name, runs_natively, Bench};
use crate::Failure;
use profile::measure::{fmt, per_second, Summary};
use profile::table::{Cell, Column, Table};
use serde_json::{json, Value};
use std::time::Instant;
use vmm::native::NativeMode;
use vmm::vm::PmuSettings;
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

/// Instructions per second of the guest's loop, from its `rate: loop` line.
fn guest_rate(report: &RunReport) -> Option<f64> {
    let get = |key| console_value(report, "rate: loop", key);
    let tsc = pmu::tsc::TscRate::from_khz(get("tsc_khz")? as u64)?;
    let seconds = tsc.cycles_to_ns(get("tsc")? as u64) as f64 / 1e9;
    Some(get("instructions")? / seconds)
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let host_n = iterations(true, b.quick);
    let mut host = Vec::new();
    // Per mode: iterations, instructions/s, port-IO roundtrip ns, RDMSR roundtrip ns, and
    // instructions/s while the VMM samples the loop (record -a -g at record's default rate).
    let mut per: Vec<(u64, [Vec<f64>; 4])> = b.modes.iter().map(|_| Default::default()).collect();
    for _ in 0..b.reps {
        host.push(host_rate(host_n));
        for (&mode, (n, [rate, portio, rdmsr, sampled])) in b.modes.iter().zip(&mut per) {
            let mut cfg = config("rate", "", Some(PmuSettings::default()));
            let native = runs_natively(&cfg, mode);
            *n = iterations(native, b.quick);
            cfg.cmdline = format!("{n} msr");
            if let Some(r) = b.run(&cfg, mode)? {
                rate.extend(guest_rate(&r));
                rdmsr.extend(console_value(&r, "rate: rdmsr", "ns"));
            }
            cfg.sampling = Some(vmm::sampler::SamplingConfig {
                period: pmu::tsc::SamplePeriod::Hz(crate::cli::default_record_freq(native)),
                callchain: true,
                max_samples: cfg.max_samples,
            });
            if let Some(r) = b.run(&cfg, mode)? {
                sampled.extend(guest_rate(&r));
            }
            if let Some(r) = b.run(&config("portio", "", None), mode)? {
                portio.extend(portio_ns(&r));
            }
        }
    }
    let host = Summary::of(&host);
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
    ]);
    let mut medians = Vec::new();
    let mut sampling = String::new();
    for (&mode, (n, v)) in b.modes.iter().zip(&per) {
        let [rate, portio, rdmsr, sampled] = v.each_ref().map(|v| Summary::of(v));
        let freq = crate::cli::default_record_freq(runs_natively(&config("rate", "", None), mode));
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
        ]);
        medians.push([rate.median, portio.median, rdmsr.median]);
    }
    let mut text = format!(
        "rate — the same dec/jnz loop (2 instructions per iteration) on a host thread and in the guest (TSC-timed),\n\
         and an exit's roundtrip seen from the guest (portio's OUT, rate's RDMSR); {} runs each (median)\n\n{}",
        b.reps,
        table.text()
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
        value["native_over_host"] = json!(native[0] / host.median);
        value["native_over_emulated"] = json!(native[0] / emulated[0]);
    }
    text.push_str(&sampling);
    Ok((text, value))
}
