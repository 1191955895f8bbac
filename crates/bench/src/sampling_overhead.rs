//! Part of suite `precision`: what sampling costs against its floor, at rates from -F 100 to
//! -F 5000. The floor is one exit per sample at the exit roundtrip measured in the same run
//! (portio's OUT, seen from the guest). Each sample's cost is split into the exit its signal
//! causes (`rate N gaps`, a guest reading the TSC in a loop, sampled by the VMM: the time it
//! lost per sample, less the VMM's handling), the VMM's handling of it (the sample's exit, the
//! unwind, and for the agent the PMI's delivery), the guest's refill of what the exit
//! flushed (ftest's cost per sample under the VMM's sampling less the gaps loop's), and for
//! the agent its PMI in the guest (the NMI's entry and the handler: its cost less the VMM's
//! sampling's, less the difference of the VMM's handling).

use super::{config, console_value, count_cycles, mode_name, pmu, runs_natively, Bench, NATIVE_WORK_SCALE};
use perfvm::Failure;
use pmu::tsc::{SamplePeriod, TscRate};
use pmu::Policy;
use profile::measure::{fmt, Summary};
use profile::table::{Cell, Column, Table};
use vmm::config::BackendKind;
use vmm::host::pvm::native::NativeMode;
use vmm::profiling::sampler::{CallGraph, SamplingConfig};
use vmm::stats::VmStats;
use vmm::{RunReport, VmConfig};

/// The sweep's rates (-F), in samples per second of guest cycles.
pub fn rates(quick: bool) -> &'static [u64] {
    if quick {
        &[100, 1000, 5000]
    } else {
        &[100, 200, 500, 1000, 2000, 5000]
    }
}

/// Who samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sampler {
    /// The guest's perf agent (`record`): a PMI per sample.
    Agent,
    /// The VMM (`record -a -g`): an exit per sample, no PMI.
    Vmm,
}

/// One sampled run: its vCPU threads' CPU time (the gaps loop: the time it lost), its
/// samples, and the VMM's time on them.
#[derive(Debug, Clone, Copy)]
struct Sampled {
    ns: f64,
    samples: f64,
    vmm_ns: f64,
}

/// What the VMM spent on a run's samples: the signal exits' handling (the sampler's unwind
/// included) and the vPMU's time (the agent's PMIs).
fn vmm_ns(stats: &VmStats) -> f64 {
    let intr = stats.exits.get("intr").map_or(0, |e| e.handle_ns);
    let pmu = stats.pmu.as_ref().map_or(0, |p| p.vmm.handle_ns);
    (intr + pmu) as f64
}

/// CPU time of a run's vCPU threads: what sampling adds to it is its cost, whatever else
/// the host runs (wall time on a loaded host is mostly waiting for a CPU).
fn thread_ns(report: &RunReport) -> f64 {
    report.vcpu_counts.iter().map(|c| c.thread_ns).sum::<u64>() as f64
}

/// The CPU time of the counting run's workload: the cycles the agent counted (the vCPU
/// thread's task-clock at the TSC's rate).
fn workload_cpu_ns(report: &RunReport) -> Option<f64> {
    let cycles = report.agent.counts.first()?.value;
    Some(TscRate::from_khz(report.tsc_khz)?.seconds(cycles as f64) * 1e9)
}

/// ftest counting cycles with the agent (the baseline), in `mode`, perf backend.
fn ftest(mode: NativeMode) -> VmConfig {
    let mut cfg = config("ftest", "", pmu(BackendKind::Perf, Policy::default()));
    let work = if runs_natively(&cfg, mode) { NATIVE_WORK_SCALE.to_string() } else { String::new() };
    cfg.cmdline = count_cycles(false, &work);
    cfg
}

/// The `rate` guest reading the TSC in a loop (`rate N gaps`): ~0.5 s natively, ~2 s emulated.
fn gaps_loop(mode: NativeMode, quick: bool) -> VmConfig {
    let mut cfg = config("rate", "", None);
    let n: u64 = match (runs_natively(&cfg, mode), quick) {
        (true, false) => 50_000_000,
        (true, true) => 20_000_000,
        (false, false) => 300_000,
        (false, true) => 100_000,
    };
    cfg.cmdline = format!("{n} gaps");
    cfg
}

/// The time the gaps loop lost to steps of the TSC between 1 µs and 1 ms (exits and the
/// host's interrupts, not its preemptions), ns, from its `rate: gaps` line.
fn gaps_ns(report: &RunReport) -> Option<f64> {
    let get = |key| console_value(report, "rate: gaps ", key);
    Some(TscRate::from_khz(get("tsc_khz")? as u64)?.seconds(get("tsc")?) * 1e9)
}

/// `cfg` sampled by the VMM at `hz`, with call chains (as `record -a -g`).
fn vmm_sampled(cfg: &VmConfig, hz: u64) -> VmConfig {
    let mut cfg = cfg.clone();
    cfg.sampling = Some(SamplingConfig {
        period: SamplePeriod::Hz(hz),
        callchain: Some(CallGraph::Dwarf),
        max_samples: cfg.max_samples,
    });
    cfg
}

fn vmm_samples(report: &RunReport) -> f64 {
    (report.samples.taken.len() as u64 + report.samples.dropped) as f64
}

/// One mode's measurements, per repetition.
#[derive(Default)]
struct Runs {
    /// The counting run's vCPU CPU time, and its workload's.
    plain: Vec<f64>,
    workload: Vec<f64>,
    loop_plain: Vec<f64>,
    roundtrip: Vec<f64>,
    /// [rate][sampler] per repetition.
    sampled: Vec<[Vec<Sampled>; 2]>,
    /// [rate] the gaps loop sampled by the VMM (its lost time), per repetition.
    loop_sampled: Vec<Vec<Sampled>>,
}

/// One rate and sampler: medians of the overhead, its floor, and where a sample's cost goes
/// (ns; NaN where it does not apply).
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub hz: u64,
    sampler: Sampler,
    samples: Summary,
    /// Time beyond the baseline, % of it.
    pub overhead: f64,
    /// One exit roundtrip per sample taken, % of the baseline.
    pub floor: f64,
    per_sample: f64,
    /// The exit roundtrip of an OUT (the floor's).
    exit: f64,
    /// A signal's exit, VMM aside: the time the gaps loop lost per sample.
    signal_exit: f64,
    vmm: f64,
    refill: f64,
    /// The agent's PMI in the guest (its NMI's entry and handler).
    pmi: f64,
}

impl Row {
    /// The overhead over its floor.
    pub fn x_floor(&self) -> f64 {
        self.overhead / self.floor
    }

    /// Whether the guest's agent sampled (else the VMM).
    pub fn agent(&self) -> bool {
        self.sampler == Sampler::Agent
    }

    fn cells(&self) -> Vec<Cell> {
        let us =
            |key, v: f64| Cell::new(key, v, if v.is_finite() { format!("{:.1}", v / 1000.0) } else { "n/a".into() });
        vec![
            Cell::label("hz", format!("-F {}", self.hz)),
            Cell::label("sampler", if self.agent() { "agent" } else { "-a -g" }),
            Cell::new("samples", self.samples, fmt(self.samples.median)),
            Cell::new("overhead_percent", self.overhead, format!("{:+.2}%", self.overhead)),
            Cell::new("floor_percent", self.floor, format!("{:.2}%", self.floor)),
            Cell::new("x_floor", self.x_floor(), format!("{:.2}x", self.x_floor())),
            us("ns_per_sample", self.per_sample),
            us("exit_ns", self.exit),
            us("signal_exit_ns", self.signal_exit),
            us("vmm_ns", self.vmm),
            us("refill_ns", self.refill),
            us("pmi_ns", self.pmi),
        ]
    }
}

/// The sweep in one mode: per rate, the agent's row then the VMM's; the baseline's runs.
pub struct Sweep {
    pub rows: Vec<Row>,
    pub runs: usize,
    /// The counting run's workload, CPU ns.
    pub plain_ns: f64,
    pub roundtrip_ns: f64,
}

impl Sweep {
    /// The row of `hz` sampled by the agent (`agent`) or the VMM.
    pub fn at(&self, hz: u64, agent: bool) -> Option<&Row> {
        self.rows.iter().find(|r| r.hz == hz && r.agent() == agent)
    }
}

/// Measure the sweep in `mode`: `runs` repetitions, each measuring the baselines, the exit
/// roundtrip and every rate once. `agent_profile` records ftest with the agent at a rate
/// (precision's `record`): its vCPU threads' CPU ns, its samples and the run's statistics.
pub fn measure(
    b: &Bench,
    mode: NativeMode,
    runs: usize,
    mut agent_profile: impl FnMut(u64) -> Result<Option<(f64, f64, VmStats)>, Failure>,
) -> Result<Sweep, Failure> {
    let rates = rates(b.quick);
    let (cfg, loop_cfg) = (ftest(mode), gaps_loop(mode, b.quick));
    let mut r = Runs {
        sampled: rates.iter().map(|_| Default::default()).collect(),
        loop_sampled: rates.iter().map(|_| Vec::new()).collect(),
        ..Default::default()
    };
    'reps: for _ in 0..runs {
        let (Some(plain), Some(lp), Some(io)) =
            (b.run(&cfg, mode)?, b.run(&loop_cfg, mode)?, b.run(&config("portio", "", None), mode)?)
        else {
            break;
        };
        r.plain.push(thread_ns(&plain));
        r.workload.extend(workload_cpu_ns(&plain));
        r.loop_plain.extend(gaps_ns(&lp));
        r.roundtrip.extend(super::transitions::portio_ns(&io));
        for (i, &hz) in rates.iter().enumerate() {
            let Some((ns, samples, stats)) = agent_profile(hz)? else { break 'reps };
            r.sampled[i][0].push(Sampled { ns, samples, vmm_ns: vmm_ns(&stats) });
            let Some(v) = b.run(&vmm_sampled(&cfg, hz), mode)? else { break 'reps };
            r.sampled[i][1].push(Sampled { ns: thread_ns(&v), samples: vmm_samples(&v), vmm_ns: vmm_ns(&v.stats) });
            let Some(l) = b.run(&vmm_sampled(&loop_cfg, hz), mode)? else { break 'reps };
            if let Some(ns) = gaps_ns(&l) {
                r.loop_sampled[i].push(Sampled { ns, samples: vmm_samples(&l), vmm_ns: vmm_ns(&l.stats) });
            }
        }
    }
    Ok(summarize(rates, &r))
}

/// Medians: per rate and sampler, the overhead, its floor and where each sample's cost goes.
fn summarize(rates: &[u64], r: &Runs) -> Sweep {
    let median = |v: Vec<f64>| Summary::of(&v).median;
    let (plain, loop_plain, exit) =
        (median(r.plain.clone()), median(r.loop_plain.clone()), median(r.roundtrip.clone()));
    let workload = median(r.workload.clone());
    let vmm_per_sample = |runs: &[Sampled]| median(runs.iter().map(|s| s.vmm_ns / s.samples).collect());
    let mut rows = Vec::new();
    for (i, &hz) in rates.iter().enumerate() {
        // The loop has nothing to refill and sees every exit as a step of the TSC: what it
        // lost per sample is the signal's exit and the VMM's handling.
        let loop_cost = median(per_sample(&r.loop_sampled[i], loop_plain));
        let signal_exit = loop_cost - vmm_per_sample(&r.loop_sampled[i]);
        // ftest sampled by the VMM: the same plus the refill (its unwind may cost the VMM
        // more than the loop's).
        let vmm_sampled = &r.sampled[i][1];
        let (vmm_cost, vmm_vmm) = (median(per_sample(vmm_sampled, plain)), vmm_per_sample(vmm_sampled));
        let refill = vmm_cost - signal_exit - vmm_vmm;
        for (k, sampler) in [Sampler::Agent, Sampler::Vmm].into_iter().enumerate() {
            let s = &r.sampled[i][k];
            let samples = Summary::of(&s.iter().map(|s| s.samples).collect::<Vec<_>>());
            let per_sample = median(per_sample(s, plain));
            let vmm = vmm_per_sample(s);
            let pmi = match sampler {
                Sampler::Agent => per_sample - signal_exit - vmm - refill,
                Sampler::Vmm => f64::NAN,
            };
            rows.push(Row {
                hz,
                sampler,
                samples,
                overhead: 100.0 * (median(s.iter().map(|s| s.ns).collect()) - plain) / workload,
                floor: 100.0 * samples.median * exit / workload,
                per_sample,
                exit,
                signal_exit,
                vmm,
                refill,
                pmi,
            });
        }
    }
    Sweep { rows, runs: r.plain.len(), plain_ns: workload, roundtrip_ns: exit }
}

/// Each run's cost per sample: its time beyond `plain_ns` over its samples.
fn per_sample(runs: &[Sampled], plain_ns: f64) -> Vec<f64> {
    runs.iter().map(|s| (s.ns - plain_ns) / s.samples).collect()
}

/// The sweep's table, one row per rate, sampler and mode.
pub fn table(b: &Bench, sweeps: &[Sweep]) -> Table {
    let mut table = Table::new(&[
        Column::left("rate", 8),
        Column::left("sampler", 8),
        Column::left("mode", 8),
        Column::right("samples", 8),
        Column::right("overhead", 9),
        Column::right("floor", 7),
        Column::right("x floor", 8),
        Column::right("µs/sample", 10),
        Column::right("OUT exit", 9),
        Column::right("signal exit", 12),
        Column::right("VMM", 7),
        Column::right("refill", 7),
        Column::right("PMI", 7),
    ]);
    let rows = sweeps.first().map_or(0, |s| s.rows.len());
    for i in 0..rows {
        for (&mode, s) in b.modes.iter().zip(sweeps) {
            let mut cells = s.rows[i].cells();
            cells.insert(2, Cell::label("mode", mode_name(mode)));
            table.push(cells);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ns: f64, samples: f64, vmm_ns: f64) -> Sampled {
        Sampled { ns, samples, vmm_ns }
    }

    #[test]
    fn each_samples_cost_is_split_into_the_exit_vmm_refill_and_pmi() {
        // Baselines: ftest's run 1.2 s of vCPU time, its workload 1 s, the loop's run 1 s; an
        // OUT's exit costs 20 us. Per sample at 1 kHz:
        // the loop loses 30 us (26 the signal's exit, 4 the VMM), ftest under -a 50 us (5
        // the VMM, so 19 to refill), under the agent 70 us (10 the VMM: 15 for its PMI).
        let r = Runs {
            plain: vec![1.2e9],
            workload: vec![1e9],
            loop_plain: vec![1e9],
            roundtrip: vec![20e3],
            sampled: vec![[vec![run(1.27e9, 1000.0, 10e6)], vec![run(1.25e9, 1000.0, 5e6)]]],
            loop_sampled: vec![vec![run(1.03e9, 1000.0, 4e6)]],
        };
        let s = summarize(&[1000], &r);
        let (agent, vmm) = (s.at(1000, true).unwrap(), s.at(1000, false).unwrap());
        assert!((agent.overhead - 7.0).abs() < 1e-9 && (vmm.overhead - 5.0).abs() < 1e-9);
        assert!((vmm.floor - 2.0).abs() < 1e-9, "1000 exits of 20 us in 1 s: 2%");
        assert!((vmm.x_floor() - 2.5).abs() < 1e-9);
        assert!((vmm.per_sample - 50e3).abs() < 1e-6 && (vmm.signal_exit - 26e3).abs() < 1e-6);
        assert!((vmm.refill - 19e3).abs() < 1e-6 && vmm.pmi.is_nan());
        assert!((agent.vmm - 10e3).abs() < 1e-6 && (agent.refill - 19e3).abs() < 1e-6);
        assert!((agent.pmi - 15e3).abs() < 1e-6, "70 = 26 signal exit + 10 VMM + 19 refill + 15 PMI");
    }
}
