//! `perf stat`'s model: the agent's counts folded over runs and tasks, scaled as perf scales
//! multiplexed events, each with perf's status (counted, `<not counted>`, `<not
//! supported>`), and the table and JSON `perfvm stat` prints from the same lines.

use crate::events;
use crate::format::thousands;
use pmu::EventSet;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;

/// One event's final count, as the agent sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    /// The event: EVENTSEL\[15:0\].
    pub event: u16,
    /// The agent found no counter that could count it.
    pub unsupported: bool,
    /// 0: the whole run; else a task id.
    pub task: u32,
    /// What it counted while on a counter.
    pub value: u64,
    /// Guest TSC ticks it was enabled (0 from an agent that sends no times).
    pub time_enabled: u64,
    /// Guest TSC ticks it was on a counter.
    pub time_running: u64,
}

/// One run's counts and the agent's task names.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// The counts, in the order sent.
    pub counts: Vec<Count>,
    /// Task names by id.
    pub tasks: BTreeMap<u32, String>,
}

/// How an event fared, in perf's words (in rising severity: the worst run's status wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// It counted.
    Counted,
    /// The vPMU offers the event but it never ran on a counter (record does not multiplex;
    /// stat multiplexes, but a workload shorter than a rotation may not reach an event).
    NotCounted,
    /// The vPMU does not offer the event: CPUID.0AH:EBX says so (Intel), its caps do (AMD),
    /// or it is not architectural (no backend counts those).
    NotSupported,
}

impl Status {
    fn of(c: &Count, offered: Option<EventSet>) -> Status {
        if !advertised(c.event, offered) {
            Status::NotSupported
        } else if c.unsupported || (c.time_enabled > 0 && c.time_running == 0) {
            Status::NotCounted
        } else {
            Status::Counted
        }
    }

    /// What the table shows instead of a count.
    fn placeholder(self) -> &'static str {
        match self {
            Status::Counted => "",
            Status::NotCounted => "<not counted>",
            Status::NotSupported => "<not supported>",
        }
    }
}

/// Whether the vPMU offers the event `raw`: `offered` is what its capabilities say it
/// counts (on Intel what CPUID leaf 0xA advertises, on AMD the PMU caps'); None without a
/// vPMU.
fn advertised(raw: u16, offered: Option<EventSet>) -> bool {
    matches!((offered, events::architectural(raw)), (Some(set), Some(event)) if set.contains(event))
}

/// Whose count a line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// The whole run.
    Whole,
    /// A guest task.
    Task(u32),
    /// The whole minus the tasks: the scheduler, idle, the agent between tasks.
    OutsideTasks,
}

/// One event's counts over the runs, for one scope.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The event: EVENTSEL\[15:0\].
    pub event: u16,
    /// Position of the event in `-e`.
    pub slot: usize,
    /// Whose count.
    pub scope: Scope,
    /// How it fared (the worst run's).
    pub status: Status,
    /// One count per run (counted lines only), scaled as perf does when multiplexed.
    pub values: Vec<u64>,
    /// Guest TSC ticks the event was enabled, summed over the runs (0 from an agent that
    /// sends no times: it ran the whole time).
    pub enabled: u64,
    /// Guest TSC ticks it was running on a counter, summed over the runs.
    pub running: u64,
    /// The privilege levels it counted at (its modifier, which the counts do not carry:
    /// the caller sets it from its `-e` list by `slot`).
    pub levels: events::Levels,
}

impl Line {
    /// The event's name with its modifier.
    pub fn name(&self) -> String {
        format!("{}{}", events::by_raw(self.event).name, self.levels.suffix())
    }
}

/// perf's estimate of what a multiplexed event would have counted on a counter of its own:
/// `value * enabled / running` (the value as it is when it ran all the time or has no times).
pub fn scaled(value: u64, enabled: u64, running: u64) -> u64 {
    if running == 0 || running >= enabled {
        value
    } else {
        (value as f64 * enabled as f64 / running as f64).round() as u64
    }
}

impl Line {
    /// The mean count over the runs.
    pub fn mean(&self) -> f64 {
        self.values.iter().sum::<u64>() as f64 / self.values.len().max(1) as f64
    }

    /// perf's running-time column: the share of its enabled time the event was on a
    /// counter, only when it was not there all the time.
    pub fn running_percent(&self) -> Option<f64> {
        (self.status == Status::Counted && self.running < self.enabled)
            .then(|| 100.0 * self.running as f64 / self.enabled as f64)
    }

    /// perf's `+- x.xx%`: the standard error of the mean, in percent of the mean (None for
    /// one run).
    pub fn spread_percent(&self) -> Option<f64> {
        let samples: Vec<f64> = self.values.iter().map(|&v| v as f64).collect();
        spread_percent(&samples)
    }
}

fn spread_percent(samples: &[f64]) -> Option<f64> {
    let n = samples.len() as f64;
    if samples.len() < 2 {
        return None;
    }
    let mean = samples.iter().sum::<f64>() / n;
    let variance = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some(if mean == 0.0 { 0.0 } else { 100.0 * (variance / n).sqrt() / mean })
}

/// Every run's counts, folded into lines (in the order of the first run), with a row per
/// event for what ran outside the tasks when counting per task.
pub fn fold(runs: &[&Run], offered: Option<EventSet>) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for agent in runs {
        let mut slots: BTreeMap<Scope, usize> = BTreeMap::new();
        for c in &agent.counts {
            let scope = if c.task == 0 { Scope::Whole } else { Scope::Task(c.task) };
            // The agent sends a scope's events in `-e` order: the slot tells repeated ones apart.
            let slot = slots.entry(scope).or_default();
            let status = Status::of(c, offered);
            let i = match lines.iter().position(|l| l.slot == *slot && l.scope == scope) {
                Some(i) => i,
                None => {
                    let line = Line {
                        event: c.event,
                        slot: *slot,
                        scope,
                        status,
                        values: Vec::new(),
                        enabled: 0,
                        running: 0,
                        levels: events::Levels::All,
                    };
                    lines.push(line);
                    lines.len() - 1
                }
            };
            *slot += 1;
            let line = &mut lines[i];
            line.status = line.status.max(status);
            line.values.push(scaled(c.value, c.time_enabled, c.time_running));
            line.enabled += c.time_enabled;
            line.running += c.time_running;
        }
    }
    for line in lines.iter_mut().filter(|l| l.status != Status::Counted) {
        line.values.clear();
    }
    let outside: Vec<Line> = lines
        .iter()
        .filter(|l| l.scope == Scope::Whole && l.status == Status::Counted)
        .filter_map(|whole| {
            let tasks: Vec<&Line> =
                lines.iter().filter(|l| l.slot == whole.slot && matches!(l.scope, Scope::Task(_))).collect();
            let in_tasks = |run: usize| tasks.iter().filter_map(|t| t.values.get(run)).sum::<u64>();
            let values = whole.values.iter().enumerate().map(|(run, v)| v.saturating_sub(in_tasks(run))).collect();
            let enabled = whole.enabled.saturating_sub(tasks.iter().map(|t| t.enabled).sum());
            let running = whole.running.saturating_sub(tasks.iter().map(|t| t.running).sum());
            (!tasks.is_empty()).then_some(Line {
                values,
                enabled,
                running,
                scope: Scope::OutsideTasks,
                ..whole.clone()
            })
        })
        .collect();
    lines.extend(outside);
    lines
}

/// What the `perf stat` block shows.
#[derive(Debug)]
pub struct Table<'a> {
    /// The command as run.
    pub command: &'a str,
    /// The folded lines.
    pub lines: &'a [Line],
    /// Task names by id.
    pub tasks: &'a BTreeMap<u32, String>,
    /// Workload time of each run.
    pub seconds: &'a [f64],
    /// The exact backend counted: cycles are its model clock.
    pub model_clock: bool,
    /// The perf backend counted: events it did not support that the exact backend counts
    /// (these) earn a hint.
    pub exact_hint: Option<EventSet>,
}

impl Table<'_> {
    fn task_name(&self, scope: Scope) -> String {
        match scope {
            Scope::Task(id) => self.tasks.get(&id).cloned().unwrap_or_else(|| crate::record::unnamed_task(id)),
            Scope::OutsideTasks => "[outside tasks]".into(),
            Scope::Whole => String::new(),
        }
    }

    /// The whole run's count of `raw` at `levels`.
    fn mean_of(&self, raw: u16, levels: events::Levels) -> Option<f64> {
        self.lines
            .iter()
            .find(|l| l.event == raw && l.levels == levels && l.scope == Scope::Whole && l.status == Status::Counted)
            .map(Line::mean)
    }

    /// perf's ratio column: IPC for instructions, miss rate for branch misses, each against
    /// the other event at the same privilege levels; the clock rate for cycles over the
    /// workload's time (perf divides by task-clock, which perfvm has not; not for the exact
    /// backend's model clock, which is no rate).
    fn note(&self, line: &Line) -> String {
        let of = |raw| self.mean_of(raw, line.levels).filter(|&d| d > 0.0 && line.status == Status::Counted);
        let seconds = self.seconds.iter().sum::<f64>() / self.seconds.len().max(1) as f64;
        match line.event {
            0x003c if !self.model_clock && seconds > 0.0 && line.status == Status::Counted => {
                Some(format!("#  {:>6.3} GHz", line.mean() / seconds / 1e9))
            }
            0x00c0 => of(0x003c).map(|cy| format!("#  {:>6.2}  insn per cycle", line.mean() / cy)),
            0x00c5 => of(0x00c4).map(|b| format!("#  {:>6.2}% of all branches", 100.0 * line.mean() / b)),
            _ => None,
        }
        .unwrap_or_default()
    }

    /// A count (or perf's placeholder), the event, the ratio, the spread over runs, and the
    /// share of the time it ran when multiplexed.
    fn row(&self, prefix: &str, line: &Line, note: &str) -> String {
        let name = line.name();
        let value = match line.status {
            Status::Counted => thousands(line.mean().round() as u64),
            other => other.placeholder().to_owned(),
        };
        let mut row = format!("{prefix}{value:>20}      {name:<24}  {note:<28}");
        if let Some(spread) = line.spread_percent() {
            row.push_str(&format!("( +- {spread:>5.2}% )"));
        }
        if let Some(running) = line.running_percent() {
            row.push_str(&format!("  ({running:.2}%)"));
        }
        format!("{}\n", row.trim_end())
    }

    /// The `perf stat` block.
    pub fn render(&self) -> String {
        let runs = self.seconds.len();
        let of_runs = if runs > 1 { format!(" ({runs} runs)") } else { String::new() };
        let mut out = format!("\n Performance counter stats for '{}'{of_runs}:\n\n", self.command);
        for line in self.lines.iter().filter(|l| l.scope == Scope::Whole) {
            out.push_str(&self.row("", line, &self.note(line)));
        }
        let per_task: Vec<&Line> =
            self.lines.iter().filter(|l| l.scope != Scope::Whole && l.status == Status::Counted).collect();
        if !per_task.is_empty() {
            out.push_str("\n Per task:\n");
            for line in per_task {
                out.push_str(&self.row(&format!("  {:<16}", self.task_name(line.scope)), line, ""));
            }
        }
        out.push_str(&self.elapsed());
        if self.model_clock && self.lines.iter().any(|l| l.event == 0x003c && l.status == Status::Counted) {
            out.push_str(" cycles are the exact backend's model clock: one per retired instruction\n\n");
        }
        if let Some(hint) = self.exact_hint() {
            out.push_str(&hint);
        }
        out
    }

    fn elapsed(&self) -> String {
        let mean = self.seconds.iter().sum::<f64>() / self.seconds.len().max(1) as f64;
        match spread_percent(self.seconds) {
            None => format!("\n{mean:>20.9} seconds time elapsed\n\n"),
            Some(spread) => format!(
                "\n{mean:>20.9} +- {:.9} seconds time elapsed  ( +- {spread:>5.2}% )\n\n",
                mean * spread / 100.0
            ),
        }
    }

    /// Events the perf backend does not support here (no host PMU) that `--backend exact`
    /// counts.
    fn exact_hint(&self) -> Option<String> {
        let names: Vec<String> = self
            .lines
            .iter()
            .filter(|l| l.scope == Scope::Whole && l.status == Status::NotSupported)
            .filter(|l| matches!((self.exact_hint, events::architectural(l.event)), (Some(set), Some(e)) if set.contains(e)))
            .map(|l| l.name())
            .collect();
        (!names.is_empty()).then(|| {
            let (them, are) = if names.len() == 1 { ("it", "is") } else { ("them", "are") };
            format!(
                " {} {are} not supported by the perf backend on this host: --backend exact counts {them}\n\n",
                names.join(", ")
            )
        })
    }
}

/// One line as JSON: the mean count (rounded, scaled when multiplexed; null where nothing
/// was counted), each run's count, perf's spread, and the times enabled and running (guest
/// TSC ticks over the runs) with perf's running percentage (null when it ran all the time).
pub fn line_json(line: &Line, table: &Table) -> serde_json::Value {
    let task = match line.scope {
        Scope::Whole => json!(0),
        Scope::Task(id) => json!(id),
        Scope::OutsideTasks => json!(null),
    };
    let name = (line.scope != Scope::Whole).then(|| table.task_name(line.scope));
    json!({"event": line.name(), "raw": line.event, "task": task, "task_name": name,
           "status": line.status, "supported": line.status == Status::Counted,
           "value": (line.status == Status::Counted).then(|| line.mean().round() as u64), "values": line.values,
           "spread_percent": line.spread_percent(), "time_enabled": line.enabled, "time_running": line.running,
           "running_percent": line.running_percent()})
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmu::ArchEvent;

    /// What the exact backend counts: instructions, branches and the cycles events.
    fn exact_set() -> EventSet {
        EventSet::from_fn(|e| !matches!(e, ArchEvent::LlcReferences | ArchEvent::LlcMisses | ArchEvent::BranchMisses))
    }

    /// A PMU offering the 7 architectural events but those of `missing` (CPUID.0AH:EBX bits).
    fn cpuid(missing: u32) -> Option<EventSet> {
        Some(EventSet::from_fn(|e| missing & (1 << e.cpuid_bit()) == 0))
    }

    /// A count the agent found no counter for.
    const COUNT_UNSUPPORTED: u16 = 1;

    fn agent(records: &[(u16, u16, u32, u64)], tasks: &[(u32, &str)]) -> Run {
        let mut agent = Run::default();
        for &(event, flags, task, value) in records {
            let unsupported = flags & COUNT_UNSUPPORTED != 0;
            agent.counts.push(Count { event, unsupported, task, value, time_enabled: 0, time_running: 0 });
        }
        agent.tasks = tasks.iter().map(|(id, name)| (*id, name.to_string())).collect();
        agent
    }

    fn render(agents: &[&Run], offered: Option<EventSet>, perf_backend: bool) -> String {
        let lines = fold(agents, offered);
        let seconds: Vec<f64> = agents.iter().enumerate().map(|(i, _)| 1.5 + i as f64 * 0.1).collect();
        let table = Table {
            command: "ftest 3",
            lines: &lines,
            tasks: &agents[0].tasks,
            seconds: &seconds,
            model_clock: false,
            exact_hint: perf_backend.then(exact_set),
        };
        table.render()
    }

    #[test]
    fn renders_like_perf_stat() {
        let a = agent(
            &[(0x003c, 0, 0, 2_000_000), (0x00c0, 0, 0, 1_000_000), (0x00c4, 0, 0, 100_000), (0x00c5, 0, 0, 2_000)],
            &[],
        );
        let out = render(&[&a], cpuid(0), false);
        assert!(out.contains(" Performance counter stats for 'ftest 3':"), "{out}");
        let lines = fold(&[&a], cpuid(0));
        let model =
            Table { command: "", lines: &lines, tasks: &a.tasks, seconds: &[1.5], model_clock: true, exact_hint: None };
        assert!(!model.render().contains("GHz"), "the model clock is no rate");
        // 2,000,000 cycles in 1.5 s.
        assert!(out.contains("           2,000,000      cycles                    #   0.001 GHz\n"), "{out}");
        assert!(out.contains("1,000,000      instructions              #    0.50  insn per cycle\n"), "{out}");
        assert!(out.contains("2,000      branch-misses             #    2.00% of all branches\n"), "{out}");
        assert!(out.contains("1.500000000 seconds time elapsed"), "{out}");
        assert!(!out.contains("+-") && !out.contains("Per task"), "{out}");
    }

    #[test]
    fn not_supported_and_not_counted_like_perf() {
        // No host PMU: instructions and branches not advertised (EBX bits 1, 5); r01c2 is not
        // architectural: its 0 was never counted; cycles found no second counter.
        let a = agent(
            &[
                (0x003c, 0, 0, 2_000_000),
                (0x00c0, COUNT_UNSUPPORTED, 0, 0),
                (0x00c4, COUNT_UNSUPPORTED, 0, 0),
                (0x01c2, 0, 0, 0),
                (0x013c, COUNT_UNSUPPORTED, 0, 0),
            ],
            &[],
        );
        let out = render(&[&a], cpuid(0b10_0010), true);
        assert!(out.contains("     <not supported>      instructions\n"), "{out}");
        assert!(out.contains("     <not supported>      r01c2\n"), "{out}");
        assert!(out.contains("       <not counted>      ref-cycles\n"), "{out}");
        assert_eq!(out.matches("ref-cycles").count(), 1, "{out}");
        assert!(
            out.contains(" instructions, branches are not supported by the perf backend on this host: --backend exact counts them\n"),
            "{out}"
        );
        assert!(!render(&[&a], cpuid(0b10_0010), false).contains("--backend exact"), "no hint on the exact backend");
        assert!(render(&[&a], None, true).contains("<not supported>      cycles"), "no vPMU, nothing counted");
    }

    #[test]
    fn per_task_rows_add_up_with_the_outside_row() {
        let a = agent(
            &[
                (0x00c0, 0, 0, 1000),
                (0x00c5, COUNT_UNSUPPORTED, 0, 0),
                (0x00c0, 0, 1, 600),
                (0x00c5, COUNT_UNSUPPORTED, 1, 0),
                (0x00c0, 0, 2, 300),
                (0x00c5, COUNT_UNSUPPORTED, 2, 0),
            ],
            &[(1, "task-a"), (2, "task-b")],
        );
        let out = render(&[&a], cpuid(0), false);
        assert!(out.contains("\n Per task:\n  task-a                           600      instructions\n"), "{out}");
        assert!(out.contains("  task-b                           300      instructions\n"), "{out}");
        assert!(out.contains("  [outside tasks]                  100      instructions\n"), "{out}");
        assert_eq!(out.matches("branch-misses").count(), 1, "not counted: once, in the main table: {out}");
    }

    fn timed(records: &[(u16, u32, u64, u64, u64)]) -> Run {
        let mut agent = Run::default();
        for &(event, task, value, time_enabled, time_running) in records {
            agent.counts.push(Count { event, unsupported: false, task, value, time_enabled, time_running });
        }
        agent
    }

    #[test]
    fn multiplexed_counts_are_scaled_with_perfs_running_column() {
        // cycles ran all the time; ref-cycles and r003c shared one counter, a third and two
        // thirds of the time; branches never got a counter before the workload ended.
        let a = timed(&[
            (0x003c, 0, 3_000, 9_000, 9_000),
            (0x013c, 0, 1_000, 9_000, 3_000),
            (0x003c, 0, 2_000, 9_000, 6_000),
            (0x00c4, 0, 0, 9_000, 0),
        ]);
        let out = render(&[&a], cpuid(0), false);
        let line = |n: usize| out.lines().filter(|l| l.contains("cycles") || l.contains("branches")).nth(n).unwrap();
        let first = line(0);
        assert!(
            first.starts_with("               3,000      cycles ") && first.ends_with(" GHz"),
            "ran all the time: no column: {out}"
        );
        assert!(
            line(1).starts_with("               3,000      ref-cycles") && line(1).ends_with("  (33.33%)"),
            "{out}"
        );
        assert!(line(2).starts_with("               3,000      cycles") && line(2).ends_with("  (66.67%)"), "{out}");
        assert_eq!(line(3).trim_end(), "       <not counted>      branches", "{out}");
        let lines = fold(&[&a], cpuid(0));
        let table = Table {
            command: "ftest",
            lines: &lines,
            tasks: &a.tasks,
            seconds: &[1.0],
            model_clock: false,
            exact_hint: None,
        };
        let json: Vec<_> = lines.iter().map(|l| line_json(l, &table)).collect();
        assert_eq!((json[0]["value"].clone(), json[0]["running_percent"].clone()), (json!(3000), json!(null)));
        assert_eq!((json[1]["value"].clone(), json[1]["time_running"].clone()), (json!(3000), json!(3000)));
        assert!((json[1]["running_percent"].as_f64().unwrap() - 100.0 / 3.0).abs() < 1e-9, "{}", json[1]);
        assert_eq!((json[3]["status"].clone(), json[3]["value"].clone()), (json!("not_counted"), json!(null)));
    }

    #[test]
    fn multiplexed_runs_and_tasks_scale_before_adding_up() {
        // Two runs: each scaled on its own, the column from the summed times.
        let (a, b) = (timed(&[(0x013c, 0, 500, 1_000, 500)]), timed(&[(0x013c, 0, 300, 1_000, 250)]));
        let out = render(&[&a, &b], cpuid(0), false);
        let line = out.lines().find(|l| l.contains("ref-cycles")).unwrap();
        assert!(line.starts_with("               1,100      ref-cycles"), "mean of 1000 and 1200: {line}");
        assert!(line.ends_with("( +-  9.09% )  (37.50%)"), "spread, then the running column: {line}");
        // Per task: the outside row is the scaled whole minus the scaled tasks.
        let t = timed(&[(0x013c, 0, 400, 1_000, 500), (0x013c, 1, 100, 400, 200), (0x013c, 2, 50, 200, 100)]);
        let lines = fold(&[&t], cpuid(0));
        let outside = lines.iter().find(|l| l.scope == Scope::OutsideTasks).unwrap();
        assert_eq!((outside.values.clone(), outside.enabled, outside.running), (vec![800 - 200 - 100], 400, 200));
        // An agent that sends no times ran everything the whole time.
        assert_eq!(scaled(7, 0, 0), 7);
        assert_eq!(fold(&[&timed(&[(0x003c, 0, 7, 0, 0)])], cpuid(0))[0].running_percent(), None);
    }

    #[test]
    fn repeated_runs_print_mean_and_spread() {
        let (a, b) = (agent(&[(0x00c0, 0, 0, 1000)], &[]), agent(&[(0x00c0, 0, 0, 1100)], &[]));
        let out = render(&[&a, &b], cpuid(0), false);
        assert!(out.contains(" Performance counter stats for 'ftest 3' (2 runs):"), "{out}");
        // mean 1050, standard error 50: 4.76%.
        let line = out.lines().find(|l| l.contains("instructions")).unwrap();
        assert!(
            line.starts_with("               1,050      instructions") && line.ends_with("( +-  4.76% )"),
            "{line}"
        );
        assert!(out.contains("1.550000000 +- 0.050000000 seconds time elapsed  ( +-  3.23% )"), "{out}");
    }
}
