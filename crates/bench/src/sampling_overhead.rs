//! Part of suite `precision`: what sampling costs against its floor, at rates from -F 100 to
//! -F 5000, for three samplers: the guest's agent with its samples taken by the VMM at the
//! wraps (PV page version 5, `agent`), the agent taking them in its PMI handler (`--pv-samples
//! off`, `agent (PMI)`: what an older guest or VMM does) and the VMM alone (`record -a -g`).
//! The floor is one exit per sample at the exit roundtrip measured in the same run (portio's
//! OUT, seen from the guest).
//!
//! Two measures. The overhead: ftest's vCPU CPU time beyond that of a counting run made
//! right beside it (interleaved: each rate of each repetition has its own baseline, and the
//! samplers run in an order that turns with the repetition), the median over repetitions of
//! those paired differences. On a shared host the same work's CPU time varies by 10-25% run to
//! run, several times a 1 kHz sampling overhead: this column cannot tell 1.3x apart there.
//! The steady one: what a guest reading the TSC in a loop (`rate N gaps`) loses per sample
//! under each sampler, from the TSC within the same run (steps between 1 us and 1 ms: the
//! exits, the VMM's handling, the agent's PMI in the guest; not the host's preemptions),
//! less the plain loop's; its ratio to -a -g's, per repetition (`x -a`, median and range),
//! resolves 1.3x. Each sample's cost is then split into the exit its signal causes (the
//! loop's loss under -a less the VMM's handling), the VMM's handling of it (the sample's exit,
//! the unwind, and for the agent the reload and the sample or the PMI's delivery), the
//! guest's refill of what the exit flushed (ftest's cost per sample under -a less the loop's),
//! and for the agent its PMI in the guest (the NMI's entry and the handler: its loop loss less
//! the signal's exit and the VMM's handling).

use super::{config, console_value, count_cycles, mode_name, pmu, sample_cycles, Bench, NATIVE_WORK_SCALE};
use perfvm::Failure;
use pmu::tsc::{SamplePeriod, TscRate};
use pmu::Policy;
use profile::measure::{fmt, Summary};
use profile::table::{Cell, Column, Table};
use vmm::config::BackendKind;
use vmm::host::pvm::native::NativeMode;
use vmm::host::runs_at_full_speed;
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
pub enum Sampler {
    /// The guest's perf agent (`record`), its samples taken by the VMM at the exit where the
    /// counter wraps (PV page version 5): an exit per sample, no PMI.
    Agent,
    /// The agent taking its samples in its PMI handler (`--pv-samples off`): an exit and a
    /// PMI per sample.
    AgentPmi,
    /// The VMM (`record -a -g`): an exit per sample, no PMI.
    Vmm,
}

/// The samplers, in the order of each sweep's rows.
const SAMPLERS: [Sampler; 3] = [Sampler::Agent, Sampler::AgentPmi, Sampler::Vmm];

impl Sampler {
    fn index(self) -> usize {
        SAMPLERS.iter().position(|&s| s == self).expect("listed")
    }

    fn name(self) -> &'static str {
        match self {
            Sampler::Agent => "agent",
            Sampler::AgentPmi => "agent (PMI)",
            Sampler::Vmm => "-a -g",
        }
    }
}

/// One sampled run: its vCPU threads' CPU time (the gaps loop: the time it lost), its
/// samples, the VMM's time on them, and the same of the plain run beside it.
#[derive(Debug, Clone, Copy)]
struct Sampled {
    ns: f64,
    samples: f64,
    vmm_ns: f64,
    base_ns: f64,
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
    let work = if runs_at_full_speed(&cfg, mode) { NATIVE_WORK_SCALE.to_string() } else { String::new() };
    cfg.cmdline = count_cycles(false, &work);
    cfg
}

/// The `rate` guest reading the TSC in a loop (`rate N gaps`): ~0.5 s natively, ~2 s emulated.
fn gaps_loop(mode: NativeMode, quick: bool) -> VmConfig {
    let mut cfg = config("rate", "", None);
    let n: u64 = match (runs_at_full_speed(&cfg, mode), quick) {
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

/// The gaps loop sampled by the agent at `hz` (its samples taken by the VMM, or by its PMIs).
fn agent_loop(mode: NativeMode, quick: bool, hz: u64, pv_samples: bool) -> VmConfig {
    let mut cfg = gaps_loop(mode, quick);
    let mut settings = pmu(BackendKind::Perf, Policy::default());
    if let Some(p) = settings.as_mut() {
        p.pv_samples = pv_samples;
    }
    cfg.pmu = settings;
    cfg.cmdline = sample_cycles(hz, &cfg.cmdline);
    cfg
}

fn agent_samples(report: &RunReport) -> f64 {
    (report.agent.samples.len() as u64 + report.agent.samples_dropped_vmm) as f64
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
    /// The counting runs' workload CPU time (a run beside each rate).
    workload: Vec<f64>,
    loop_plain: Vec<f64>,
    roundtrip: Vec<f64>,
    /// [rate][sampler] ftest, per repetition.
    sampled: Vec<[Vec<Sampled>; 3]>,
    /// [rate][sampler] the gaps loop (its lost time), per repetition.
    loop_sampled: Vec<[Vec<Sampled>; 3]>,
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
    /// The steady measure: what the gaps loop lost per sample, ns.
    pub lost: f64,
    /// `lost` over -a -g's, per repetition: median, least and most.
    pub x_vmm: Summary,
}

impl Row {
    /// The overhead over its floor.
    pub fn x_floor(&self) -> f64 {
        self.overhead / self.floor
    }

    /// The steady measure over the floor: the loop's loss per sample over an exit.
    pub fn lost_x_floor(&self) -> f64 {
        self.lost / self.exit
    }

    fn cells(&self) -> Vec<Cell> {
        let us =
            |key, v: f64| Cell::new(key, v, if v.is_finite() { format!("{:.1}", v / 1000.0) } else { "n/a".into() });
        vec![
            Cell::label("hz", format!("-F {}", self.hz)),
            Cell::label("sampler", self.sampler.name()),
            Cell::new("samples", self.samples, fmt(self.samples.median)),
            Cell::new("overhead_percent", self.overhead, format!("{:+.2}%", self.overhead)),
            Cell::new("floor_percent", self.floor, format!("{:.2}%", self.floor)),
            Cell::new("x_floor", self.x_floor(), format!("{:.2}x", self.x_floor())),
            us("lost_ns", self.lost),
            Cell::new("lost_x_floor", self.lost_x_floor(), format!("{:.2}x", self.lost_x_floor())),
            Cell::new(
                "x_vmm",
                self.x_vmm,
                format!("{:.2}x ({:.2}-{:.2})", self.x_vmm.median, self.x_vmm.min, self.x_vmm.max),
            ),
            us("ns_per_sample", self.per_sample),
            us("exit_ns", self.exit),
            us("signal_exit_ns", self.signal_exit),
            us("vmm_ns", self.vmm),
            us("refill_ns", self.refill),
            us("pmi_ns", self.pmi),
        ]
    }
}

/// The sweep in one mode: per rate, a row per sampler (SAMPLERS' order); the baseline's runs.
pub struct Sweep {
    pub rows: Vec<Row>,
    pub runs: usize,
    /// The counting run's workload, CPU ns.
    pub plain_ns: f64,
    pub roundtrip_ns: f64,
}

impl Sweep {
    /// The row of `hz` sampled by `sampler`.
    pub fn at(&self, hz: u64, sampler: Sampler) -> Option<&Row> {
        self.rows.iter().find(|r| r.hz == hz && r.sampler == sampler)
    }
}

/// Measure the sweep in `mode`: `runs` repetitions, each measuring the loop's baseline, the
/// exit roundtrip and every rate once: a counting run of ftest, then each sampler on ftest
/// and on the gaps loop, in an order that turns with the repetition. `agent_profile(hz,
/// pv_samples)` records ftest with the agent at a rate (precision's `record`), its samples
/// taken by the VMM or by its PMIs: its vCPU threads' CPU ns, its samples and the run's
/// statistics.
pub fn measure(
    b: &Bench,
    mode: NativeMode,
    runs: usize,
    mut agent_profile: impl FnMut(u64, bool) -> Result<Option<(f64, f64, VmStats)>, Failure>,
) -> Result<Sweep, Failure> {
    let rates = rates(b.quick);
    let (cfg, loop_cfg) = (ftest(mode), gaps_loop(mode, b.quick));
    let mut r = Runs {
        sampled: rates.iter().map(|_| Default::default()).collect(),
        loop_sampled: rates.iter().map(|_| Default::default()).collect(),
        ..Default::default()
    };
    'reps: for rep in 0..runs {
        let (Some(lp), Some(io)) = (b.run(&loop_cfg, mode)?, b.run(&config("portio", "", None), mode)?) else {
            break;
        };
        let loop_base = gaps_ns(&lp);
        r.loop_plain.extend(loop_base);
        r.roundtrip.extend(super::transitions::portio_ns(&io));
        for (i, &hz) in rates.iter().enumerate() {
            let Some(plain) = b.run(&cfg, mode)? else { break 'reps };
            let base_ns = thread_ns(&plain);
            r.workload.extend(workload_cpu_ns(&plain));
            for k in 0..SAMPLERS.len() {
                let sampler = SAMPLERS[(k + rep + i) % SAMPLERS.len()];
                let ftest_run = match sampler {
                    Sampler::Vmm => {
                        b.run(&vmm_sampled(&cfg, hz), mode)?.map(|v| (thread_ns(&v), vmm_samples(&v), v.stats))
                    }
                    agent => agent_profile(hz, agent == Sampler::Agent)?,
                };
                let Some((ns, samples, stats)) = ftest_run else { break 'reps };
                r.sampled[i][sampler.index()].push(Sampled { ns, samples, vmm_ns: vmm_ns(&stats), base_ns });
                let looped = match sampler {
                    Sampler::Vmm => b.run(&vmm_sampled(&loop_cfg, hz), mode)?.map(|l| (vmm_samples(&l), l)),
                    agent => b
                        .run(&agent_loop(mode, b.quick, hz, agent == Sampler::Agent), mode)?
                        .map(|l| (agent_samples(&l), l)),
                };
                let Some((samples, l)) = looped else { break 'reps };
                if let (Some(ns), Some(base_ns)) = (gaps_ns(&l), loop_base) {
                    let s = Sampled { ns, samples, vmm_ns: vmm_ns(&l.stats), base_ns };
                    r.loop_sampled[i][sampler.index()].push(s);
                }
            }
        }
    }
    Ok(summarize(rates, &r))
}

/// Medians: per rate and sampler, the overhead (paired with the baseline run beside each
/// sampled run), its floor, the loop's steady loss per sample and its ratio to -a -g's, and
/// where each sample's cost goes.
fn summarize(rates: &[u64], r: &Runs) -> Sweep {
    let median = |v: Vec<f64>| Summary::of(&v).median;
    let exit = median(r.roundtrip.clone());
    let workload = median(r.workload.clone());
    let vmm_per_sample = |runs: &[Sampled]| median(runs.iter().map(|s| s.vmm_ns / s.samples).collect());
    let vmm = Sampler::Vmm.index();
    let mut rows = Vec::new();
    for (i, &hz) in rates.iter().enumerate() {
        // The loop has nothing to refill and sees every exit as a step of the TSC: what it
        // lost per sample under -a is the signal's exit and the VMM's handling.
        let looped = &r.loop_sampled[i];
        let signal_exit = median(per_sample(&looped[vmm])) - vmm_per_sample(&looped[vmm]);
        // ftest sampled by the VMM: the same plus the refill (its unwind may cost the VMM
        // more than the loop's).
        let vmm_sampled = &r.sampled[i][vmm];
        let (vmm_cost, vmm_vmm) = (median(per_sample(vmm_sampled)), vmm_per_sample(vmm_sampled));
        let refill = vmm_cost - signal_exit - vmm_vmm;
        for sampler in SAMPLERS {
            let (s, l) = (&r.sampled[i][sampler.index()], &looped[sampler.index()]);
            let samples = Summary::of(&s.iter().map(|s| s.samples).collect::<Vec<_>>());
            let cost = median(per_sample(s));
            let vmm = vmm_per_sample(s);
            let lost = median(per_sample(l));
            // Repetition by repetition (the samplers of one ran side by side).
            let ratios: Vec<f64> =
                per_sample(l).iter().zip(per_sample(&looped[Sampler::Vmm.index()])).map(|(a, b)| a / b).collect();
            let pmi = match sampler {
                Sampler::Vmm => f64::NAN,
                _ => lost - signal_exit - vmm_per_sample(l),
            };
            rows.push(Row {
                hz,
                sampler,
                samples,
                overhead: 100.0 * median(s.iter().map(|s| s.ns - s.base_ns).collect()) / workload,
                floor: 100.0 * samples.median * exit / workload,
                per_sample: cost,
                exit,
                signal_exit,
                vmm,
                refill,
                pmi,
                lost,
                x_vmm: Summary::of(&ratios),
            });
        }
    }
    Sweep { rows, runs: r.loop_plain.len(), plain_ns: workload, roundtrip_ns: exit }
}

/// Each run's cost per sample: its time beyond its baseline's over its samples.
fn per_sample(runs: &[Sampled]) -> Vec<f64> {
    runs.iter().map(|s| (s.ns - s.base_ns) / s.samples).collect()
}

/// The sweep's table, one row per rate, sampler and mode.
pub fn table(b: &Bench, sweeps: &[Sweep]) -> Table {
    let mut table = Table::new(&[
        Column::left("rate", 8),
        Column::left("sampler", 12),
        Column::left("mode", 8),
        Column::right("samples", 8),
        Column::right("overhead", 9),
        Column::right("floor", 7),
        Column::right("x floor", 8),
        Column::right("lost µs", 8),
        Column::right("x floor", 8),
        Column::right("x -a (range)", 19),
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

    fn run(ns: f64, samples: f64, vmm_ns: f64, base_ns: f64) -> Sampled {
        Sampled { ns, samples, vmm_ns, base_ns }
    }

    #[test]
    fn each_samples_cost_is_split_into_the_exit_vmm_refill_and_pmi() {
        // Baselines: ftest's run beside 1.2 s of vCPU time, its workload 1 s, the loop's run
        // 1 s; an OUT's exit costs 20 us. Per sample at 1 kHz: the loop loses 30 us under -a
        // (26 the signal's exit, 4 the VMM), ftest 50 us (5 the VMM, so 19 to refill); under
        // the agent's PMIs the loop loses 45 us (4 the VMM: 15 for its PMI), ftest 70 us; with
        // the agent's samples taken by the VMM the loop loses 31 us (5 the VMM: no PMI).
        let (f, l) = (1.2e9, 1e9);
        let r = Runs {
            workload: vec![1e9],
            loop_plain: vec![l],
            roundtrip: vec![20e3],
            sampled: vec![[
                vec![run(1.252e9, 1000.0, 6e6, f)],
                vec![run(1.27e9, 1000.0, 10e6, f)],
                vec![run(1.25e9, 1000.0, 5e6, f)],
            ]],
            loop_sampled: vec![[
                vec![run(1.031e9, 1000.0, 5e6, l)],
                vec![run(1.045e9, 1000.0, 4e6, l)],
                vec![run(1.03e9, 1000.0, 4e6, l)],
            ]],
        };
        let s = summarize(&[1000], &r);
        let at = |sampler| s.at(1000, sampler).unwrap();
        let (agent, pmi, vmm) = (at(Sampler::Agent), at(Sampler::AgentPmi), at(Sampler::Vmm));
        assert!((pmi.overhead - 7.0).abs() < 1e-9 && (vmm.overhead - 5.0).abs() < 1e-9);
        assert!((agent.overhead - 5.2).abs() < 1e-9);
        assert!((vmm.floor - 2.0).abs() < 1e-9, "1000 exits of 20 us in 1 s: 2%");
        assert!((vmm.x_floor() - 2.5).abs() < 1e-9);
        assert!((vmm.per_sample - 50e3).abs() < 1e-6 && (vmm.signal_exit - 26e3).abs() < 1e-6);
        assert!((vmm.refill - 19e3).abs() < 1e-6 && vmm.pmi.is_nan());
        assert!((pmi.vmm - 10e3).abs() < 1e-6 && (pmi.refill - 19e3).abs() < 1e-6);
        assert!((pmi.pmi - 15e3).abs() < 1e-6, "the loop's 45 = 26 signal exit + 4 VMM + 15 PMI");
        assert!(agent.pmi.abs() < 1e-6, "the loop's 31 = 26 signal exit + 5 VMM: no PMI");
        // The steady measure: the loop's loss, over an exit and over -a -g's.
        assert!((pmi.lost - 45e3).abs() < 1e-6 && (pmi.lost_x_floor() - 2.25).abs() < 1e-9);
        assert!((pmi.x_vmm.median - 1.5).abs() < 1e-9 && (agent.x_vmm.median - 31.0 / 30.0).abs() < 1e-9);
        assert!((vmm.x_vmm.median - 1.0).abs() < 1e-9);
    }
}
