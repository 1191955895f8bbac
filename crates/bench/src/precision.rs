//! Suite `precision` (seed 000, "vPMU Precision Comparison"): ftest's per-function profile
//! from sampling compared with the exact reference (every retired instruction attributed),
//! as total variation distance; samples per second of guest run time, legacy vs reuse; and
//! the cost of sampling at the default rate.

use super::precision_host::{host_run, shares_of, HostSamples};
use super::sampling_overhead::{self, Sampler};
use super::{config, in_mode, mode_name, pmu, Bench, NATIVE_WORK_SCALE};
use perfvm::cli::default_record_freq;
use perfvm::session::record::{record, Capture};
use perfvm::Failure;
use pmu::tsc::SamplePeriod;
use pmu::Policy;
use profile::events;
use profile::measure::{fmt, Summary};
use profile::profile::{tvd, tvd_of_shares, UNKNOWN};
use profile::table::{Cell, Column, Table};
use profile::Mode;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Instant;
use vmm::config::BackendKind;
use vmm::host::pvm::native::NativeMode;
use vmm::host::runs_at_full_speed;
use vmm::VmConfig;

/// ftest's VM in `mode` with this backend and policy.
fn ftest_config(mode: NativeMode, (backend, policy): (BackendKind, Policy)) -> VmConfig {
    in_mode(&config("ftest", "", pmu(backend, policy)), mode)
}

/// ftest's profile in `mode`; None where a native run failed (see `Bench::attempt`).
fn profile(
    b: &Bench,
    mode: NativeMode,
    setup: (BackendKind, Policy),
    event: &str,
    period: SamplePeriod,
    reference: bool,
) -> Result<Option<Capture>, Failure> {
    let cfg = ftest_config(mode, setup);
    let args = work(&cfg, mode, setup.0);
    profile_args(b, cfg, mode, setup, event, period, reference, args)
}

/// `profile` of ftest in `cfg` with arguments `args`.
#[allow(clippy::too_many_arguments)]
fn profile_args(
    b: &Bench,
    cfg: VmConfig,
    mode: NativeMode,
    (backend, policy): (BackendKind, Policy),
    event: &str,
    period: SamplePeriod,
    reference: bool,
    args: Vec<String>,
) -> Result<Option<Capture>, Failure> {
    let policy_name = if matches!(policy, Policy::Legacy) { "legacy" } else { "reuse" };
    let backend_name = if backend == BackendKind::Exact { "exact" } else { "perf" };
    let how = match period {
        _ if reference => "--reference".to_owned(),
        SamplePeriod::Count(n) => format!("-e {event} -c {n}"),
        SamplePeriod::Hz(hz) => format!("-e {event} -F {hz}"),
    };
    let what = format!("record {how} --backend {backend_name} --policy {policy_name} ftest {}", args.join(" "));
    b.attempt(mode, &what, || {
        let mode = if reference { Mode::Reference } else { Mode::Sampled };
        let event = events::parse(event).map_err(Failure::failed)?;
        let capture = record(cfg, "ftest", &args, &[event], period, mode, None, Instant::now())?;
        match capture.code {
            0 if capture.record.samples.is_empty() => Err(Failure::failed("no samples")),
            0 => Ok(capture),
            code => Err(Failure::failed(format!("ftest record ended with {code}"))),
        }
    })
}

/// ftest's arguments: sampling does natively the work it does emulated in the same time;
/// the exact backend single-steps, at emulation speed in both modes.
fn work(cfg: &VmConfig, mode: NativeMode, backend: BackendKind) -> Vec<String> {
    if backend == BackendKind::Perf && runs_at_full_speed(cfg, mode) {
        vec![NATIVE_WORK_SCALE.to_string()]
    } else {
        vec![]
    }
}

/// A TVD to 4 places, or n/a.
fn tvd4(t: f64) -> String {
    if t.is_finite() {
        format!("{t:.4}")
    } else {
        "n/a".into()
    }
}

fn shares(f: &Capture) -> Value {
    let mut v: Vec<(String, f64)> = f.profile.shares().into_iter().filter(|(_, s)| *s >= 0.005).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    json!(v)
}

/// One mode's results: table lines (label, cells) with their JSON, then the summary lines.
struct ModeResult {
    /// Per line: the profile's cells before the mode's, and after it.
    lines: Vec<(Vec<Cell>, Vec<Cell>)>,
    reference: Option<Capture>,
    exact: Option<Capture>,
    summary: String,
    json: Value,
    sweep: sampling_overhead::Sweep,
}

fn run_mode(b: &Bench, mode: NativeMode) -> Result<ModeResult, Failure> {
    let default_freq = default_record_freq(runs_at_full_speed(&config("ftest", "", None), mode));
    let default_period = SamplePeriod::Hz(default_freq);
    let fast_period = SamplePeriod::Hz(2000);
    let (exact, perf) = ((BackendKind::Exact, Policy::default()), (BackendKind::Perf, Policy::default()));
    let reference = profile(b, mode, exact, "instructions", SamplePeriod::Count(1), true)?;
    let sampled = profile(b, mode, exact, "instructions", SamplePeriod::Count(997), false)?;
    let samples = |f: &Option<Capture>| f.as_ref().map_or(f64::NAN, |f| f.record.sample_count() as f64);
    let tvd_to = |f: &Capture| reference.as_ref().map_or(f64::NAN, |r| tvd(&r.profile, &f.profile));
    let profile_cells = |text: &str, json: &str| vec![Cell::text(text), Cell::json("profile", json)];
    let t = sampled.as_ref().map_or(f64::NAN, tvd_to);
    let mut lines = vec![
        (
            profile_cells("reference (exact, every instruction)", "reference: exact, every retired instruction"),
            vec![
                Cell::new("samples", samples(&reference), fmt(samples(&reference))),
                Cell::new("tvd", 0.0, "0"),
                Cell::json("shares", reference.as_ref().map(shares)),
            ],
        ),
        (
            profile_cells("record -e instructions -c 997, exact", "record -e instructions -c 997 --backend exact"),
            vec![
                Cell::new("samples", samples(&sampled), fmt(samples(&sampled))),
                Cell::new("tvd", t, tvd4(t)),
                Cell::json("shares", sampled.as_ref().map(shares)),
            ],
        ),
    ];
    for (label, period) in [
        (format!("record -e cycles -F {default_freq} (default), perf"), default_period),
        ("record -e cycles -F 2000, perf".to_owned(), fast_period),
    ] {
        let (mut tvds, mut n) = (Vec::new(), Vec::new());
        for _ in 0..b.reps.max(1) {
            let Some(f) = profile(b, mode, perf, "cycles", period, false)? else { break };
            tvds.push(tvd_to(&f));
            n.push(f.record.sample_count() as f64);
        }
        let (t, n) = (Summary::of(&tvds), Summary::of(&n));
        let spread = if t.n > 0 { format!(" (median of {}, {:.4}–{:.4})", t.n, t.min, t.max) } else { String::new() };
        lines.push((
            profile_cells(&label, &label),
            vec![Cell::new("samples", n, fmt(n.median)), Cell::new("tvd", t, tvd4(t.median)), Cell::text(spread)],
        ));
    }

    let host_vs_native = if runs_at_full_speed(&config("ftest", "", None), mode) {
        Some(host_vs_native(b, mode, default_freq)?)
    } else {
        None
    };

    // Samples in the same guest run time, and what sampling costs, on the perf backend.
    let mut per_policy = Vec::new();
    for policy in [Policy::Legacy, Policy::default()] {
        let mut rate = Vec::new();
        for _ in 0..b.reps.max(1) {
            let Some(f) = profile(b, mode, (BackendKind::Perf, policy), "cycles", fast_period, false)? else { break };
            let r = &f.record;
            rate.push(r.sample_count() as f64 / (r.workload_ns.unwrap_or(r.wall_ns) as f64 / 1e9));
        }
        per_policy.push(Summary::of(&rate));
    }
    // What sampling costs against its floor, from -F 100 to -F 5000 (the default among them).
    let runs = if b.quick { 3 } else { b.reps.max(5) };
    let sweep = sampling_overhead::measure(b, mode, runs, |hz, pv_samples| {
        let mut cfg = ftest_config(mode, perf);
        if let Some(p) = cfg.pmu.as_mut() {
            p.pv_samples = pv_samples;
        }
        let args = work(&cfg, mode, perf.0);
        let f = profile_args(b, cfg, mode, perf, "cycles", SamplePeriod::Hz(hz), false, args)?;
        Ok(f.map(|f| (f.thread_ns as f64, f.record.sample_count() as f64, f.stats)))
    })?;
    let mut summary = host_vs_native.as_ref().map_or(String::new(), |(text, _)| text.clone());
    summary.push_str(&format!(
        "{}: samples per second of guest run time (record -e cycles -F 2000, perf): legacy {} | reuse {}\n",
        mode_name(mode),
        fmt(per_policy[0].median),
        fmt(per_policy[1].median),
    ));
    let at = |sampler| sweep.at(default_freq, sampler);
    let (agent, agent_pmi, vmm) = (at(Sampler::Agent), at(Sampler::AgentPmi), at(Sampler::Vmm));
    if let (Some(agent), Some(pmi), Some(vmm)) = (agent, agent_pmi, vmm) {
        let s = sweep.plain_ns / 1e9;
        summary.push_str(&format!(
            "{}: sampling's steady cost at the default rate (-F {default_freq}), a guest reading the TSC: it loses {} µs a sample to the agent's samples taken by the VMM, {} µs to the agent's PMIs, {} µs to record -a -g: {:.2}x ({:.2}-{:.2}), {:.2}x ({:.2}-{:.2}) and 1x; {:.2}x, {:.2}x and {:.2}x an OUT's exit\n",
            mode_name(mode),
            fmt(agent.lost / 1000.0),
            fmt(pmi.lost / 1000.0),
            fmt(vmm.lost / 1000.0),
            agent.x_vmm.median,
            agent.x_vmm.min,
            agent.x_vmm.max,
            pmi.x_vmm.median,
            pmi.x_vmm.min,
            pmi.x_vmm.max,
            agent.lost_x_floor(),
            pmi.lost_x_floor(),
            vmm.lost_x_floor(),
        ));
        summary.push_str(&format!(
            "{}: sampling overhead at the default rate (-F {default_freq}), in vCPU CPU time beyond a counting run beside each: ftest {s:.3} s counting; agent {:+.2}%, agent's PMIs {:+.2}%, record -a -g {:+.2}%; floor (one {} µs exit per sample) {:.2}%, {:.2}% and {:.2}%: {:.2}x, {:.2}x and {:.2}x the floor ({} runs each)\n",
            mode_name(mode),
            agent.overhead,
            pmi.overhead,
            vmm.overhead,
            fmt(sweep.roundtrip_ns / 1000.0),
            agent.floor,
            pmi.floor,
            vmm.floor,
            agent.x_floor(),
            pmi.x_floor(),
            vmm.x_floor(),
            sweep.runs
        ));
    }
    let json = json!({"samples_per_second": {"legacy": per_policy[0], "reuse": per_policy[1]},
                      "overhead_percent": agent.map(|r| r.overhead), "floor_percent": agent.map(|r| r.floor),
                      "vmm_sampling_overhead_percent": vmm.map(|r| r.overhead), "vmm_floor_percent": vmm.map(|r| r.floor),
                      "agent_pmi_overhead_percent": agent_pmi.map(|r| r.overhead),
                      "lost_ns": {"agent": agent.map(|r| r.lost), "agent_pmi": agent_pmi.map(|r| r.lost), "vmm": vmm.map(|r| r.lost)},
                      "plain_ns": sweep.plain_ns, "exit_roundtrip_ns": sweep.roundtrip_ns,
                      "host_vs_native": host_vs_native.map(|(_, j)| j)});
    Ok(ModeResult { lines, reference, exact: sampled, summary, json, sweep })
}

/// Profile ftest's host build for the host-vs-native line now, before bench confines itself
/// (the native guest's default rate and work).
pub fn measure_host(reps: usize, quick: bool) {
    super::precision_host::measure_host(reps, host_vs_native_units(quick), default_record_freq(true));
}

/// Work of each run of the host-vs-native comparison, in ftest units: ~4x a native
/// sampling run's, for ~2,000 samples a side at 1 kHz (with ~450, sampling noise alone
/// puts the TVD of two profiles of the same code near 0.05).
fn host_vs_native_units(quick: bool) -> u64 {
    if quick {
        NATIVE_WORK_SCALE
    } else {
        4 * NATIVE_WORK_SCALE
    }
}

/// TVD of two profiles over ftest's code: the functions the host binary's symbols name. The
/// guest's kit (its console's serial output: an exit per byte natively) and the host's libc
/// and loader ([unknown] there) have no counterpart on the other side.
fn ftest_tvd(host: &BTreeMap<String, u64>, guest: &BTreeMap<String, u64>) -> f64 {
    let ftest_only = |m: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        let shared = |f: &String| f.as_str() != UNKNOWN && host.contains_key(f);
        m.iter().filter(|(f, _)| shared(f)).map(|(f, &n)| (f.clone(), n)).collect()
    };
    tvd_of_shares(&shares_of(&ftest_only(host)), &shares_of(&ftest_only(guest)))
}

/// The native guest's cycles profile at `hz` against ftest's host build sampled by a host
/// cpu-clock at the same rate, over the same work: the line and its JSON. Samples are
/// pooled over the repetitions (the TVD of each pair is given as a range).
fn host_vs_native(b: &Bench, mode: NativeMode, hz: u64) -> Result<(String, Value), Failure> {
    let units = host_vs_native_units(b.quick);
    let perf = (BackendKind::Perf, Policy::default());
    let (mut host, mut guest) = (HostSamples::default(), BTreeMap::<String, u64>::new());
    // The host against itself: its even runs pooled against its odd ones.
    let mut host_halves = [HostSamples::default(), HostSamples::default()];
    let (mut pair_tvds, mut guest_samples) = (Vec::new(), 0u64);
    for rep in 0..b.reps.max(1) {
        let args = vec![units.to_string()];
        let Some(f) =
            profile_args(b, ftest_config(mode, perf), mode, perf, "cycles", SamplePeriod::Hz(hz), false, args)?
        else {
            break;
        };
        let h = host_run(rep)?;
        // The guest's shares are of cycles (each sample weighs its period), as perf's are.
        let g: BTreeMap<String, u64> = f.profile.self_weights().into_iter().map(|(k, w)| (k.to_owned(), w)).collect();
        pair_tvds.push(ftest_tvd(&h.per_function, &g));
        host.merge(&h);
        host_halves[rep % 2].merge(&h);
        guest_samples += f.record.sample_count();
        for (k, w) in g {
            *guest.entry(k).or_default() += w;
        }
    }
    let (hs, gs) = (shares_of(&host.per_function), shares_of(&guest));
    let everything = tvd_of_shares(&hs, &gs);
    let t = ftest_tvd(&host.per_function, &guest);
    let pairs = Summary::of(&pair_tvds);
    let host_noise = (pairs.n >= 2).then(|| ftest_tvd(&host_halves[0].per_function, &host_halves[1].per_function));
    let (n, m) = (host.total(), guest_samples);
    let mut text = format!(
        "{}: host vs native: {} vs {} samples, TVD {} over ftest's functions ({} with the guest's console and the host's libc) (ftest {units} units, cpu-clock at {hz} Hz on the host, cycles at {hz} Hz in the guest; {} runs pooled, each pair {:.4}–{:.4}; host samples lost {})\n",
        mode_name(mode),
        fmt(n as f64),
        fmt(m as f64),
        tvd4(t),
        tvd4(everything),
        pairs.n,
        pairs.min,
        pairs.max,
        host.lost,
    );
    let mut names: Vec<&String> =
        hs.keys().chain(gs.keys()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    names.sort_by(|a, b| gs.get(*b).unwrap_or(&0.0).total_cmp(gs.get(*a).unwrap_or(&0.0)));
    text.push_str("  shares (host | native):");
    let share = |m: &BTreeMap<String, f64>, f: &String| m.get(f).copied().unwrap_or(0.0);
    for f in names.iter().filter(|f| share(&hs, f).max(share(&gs, f)) >= 0.005) {
        text.push_str(&format!(
            " {f} {:.1}% | {:.1}%;",
            100.0 * hs.get(*f).unwrap_or(&0.0),
            100.0 * gs.get(*f).unwrap_or(&0.0)
        ));
    }
    text.push('\n');
    if let Some(noise) = host_noise {
        text.push_str(&format!(
            "  host vs host, its even runs pooled against its odd ones: TVD {} (the host's own run-to-run spread, at half the samples)\n",
            tvd4(noise)
        ));
    }
    let json = json!({"host_samples": n, "native_samples": m, "tvd": t, "tvd_everything": everything, "pair_tvds": pairs, "units": units, "host_vs_host_tvd": host_noise,
                      "hz": hz, "host_lost": host.lost, "host_shares": hs, "native_shares": gs});
    Ok((text, json))
}

pub fn run(b: &Bench) -> Result<(String, Value), Failure> {
    let results = b.modes.iter().map(|&m| run_mode(b, m)).collect::<Result<Vec<_>, _>>()?;
    let mut text =
        String::from("precision — ftest per-function shares vs the exact reference (TVD: 0 same, 1 disjoint)\n");
    if b.modes.iter().any(|m| *m != NativeMode::Off) {
        text.push_str(&format!(
            "native sampling runs do {NATIVE_WORK_SCALE}x ftest's work, to sample as long as emulated runs\n"
        ));
    }
    let mut table = Table::new(&[
        Column::left("profile", 46),
        Column::left("mode", 8),
        Column::right("samples", 10),
        Column::right("TVD", 8),
        Column::left("", 0),
    ]);
    for i in 0..results[0].lines.len() {
        for (&mode, r) in b.modes.iter().zip(&results) {
            let (before, after) = &r.lines[i];
            let mode = Cell::label("mode", mode_name(mode));
            table.push(before.iter().cloned().chain([mode]).chain(after.iter().cloned()).collect());
        }
    }
    text.push('\n');
    text.push_str(&table.text());
    text.push_str("\nshares (reference | exact sampled):\n");
    for (&mode, r) in b.modes.iter().zip(&results) {
        let (Some(reference), Some(exact)) = (&r.reference, &r.exact) else { continue };
        text.push_str(&format!("  {}:\n", mode_name(mode)));
        let (rs, es) = (reference.profile.shares(), exact.profile.shares());
        let mut syms: Vec<_> = rs.iter().filter(|(_, v)| **v >= 0.005).collect();
        syms.sort_by(|a, b| b.1.total_cmp(a.1));
        for (s, v) in syms {
            let e = es.get(s).copied().unwrap_or(0.0);
            text.push_str(&format!("    {:<12} {:>6.2}% | {:>6.2}%\n", s, 100.0 * v, 100.0 * e));
        }
    }
    text.push('\n');
    let mut by_mode = serde_json::Map::new();
    for (&mode, r) in b.modes.iter().zip(&results) {
        text.push_str(&r.summary);
        by_mode.insert(mode_name(mode).into(), r.json.clone());
    }
    let sweeps: Vec<_> = results.into_iter().map(|r| r.sweep).collect();
    let sweep = sampling_overhead::table(b, &sweeps);
    text.push_str(&format!(
        "\nsampling overhead against its floor (one exit per sample at an OUT's roundtrip, portio, measured in this run), three samplers: the agent with its\n\
         samples taken by the VMM (PV page v5), the agent's PMIs (--pv-samples off), record -a -g. overhead: the vCPU threads' CPU time beyond a counting run\n\
         of ftest beside it, over its workload's (median of the pairs; a shared host's CPU time varies more than this at 1 kHz). lost: the steady measure,\n\
         what a guest reading the TSC loses per sample (steps of 1 us-1 ms, less the plain loop's), x floor over an exit, x -a over record -a -g's\n\
         (per repetition: median and range). A sample's µs: the signal's exit (the loop's loss under -a, less the VMM's), the VMM's handling, the\n\
         guest's refill (ftest's under -a less the loop's), the agent's PMI (its loop loss less the signal's exit and the VMM's)\n\n{}",
        sweep.text()
    ));
    Ok((text, json!({"rows": table.json(), "by_mode": by_mode, "sampling_overhead": sweep.json()})))
}
