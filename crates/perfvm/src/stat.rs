//! `perfvm stat`: boot a guest whose perf agent counts the workload, then print what
//! `perf stat` prints.

use crate::cli::StatArgs;
use crate::events::{self, Event};
use crate::format::thousands;
use crate::run::{boot, vm_config};
use crate::Failure;
use serde_json::json;
use std::time::Instant;
use vmm::devices::{AgentData, COUNT_UNSUPPORTED};

/// The guest command line: agent orders, then the workload's arguments.
pub fn agent_cmdline(orders: &str, args: &[String], extra: &str) -> String {
    let mut cmdline = format!("{orders} --");
    for a in args {
        cmdline.push(' ');
        cmdline.push_str(a);
    }
    if !extra.is_empty() {
        cmdline.push(' ');
        cmdline.push_str(extra);
    }
    cmdline
}

/// The raw encodings as the agent takes them: `0xUUEE,...`.
pub fn raw_list(events: &[Event]) -> String {
    events.iter().map(|e| format!("{:#06x}", e.raw)).collect::<Vec<_>>().join(",")
}

pub fn run(args: StatArgs, started: Instant) -> Result<i32, Failure> {
    let events = events::parse_list(&args.events).map_err(Failure::usage)?;
    let mut config = vm_config(&args.vm, args.json)?;
    let orders = format!("stat -e {}{}", raw_list(&events), if args.per_task { " -p" } else { "" });
    config.cmdline = agent_cmdline(&orders, &args.args, &args.vm.cmdline);
    let report = boot(&config, started)?;
    let code = report.end.exit_code();
    if let Some(msg) = report.end.message() {
        eprintln!("perfvm: {msg}");
    }
    let whole: Vec<_> = report.agent.counts.iter().filter(|c| c.task == 0).collect();
    if whole.is_empty() {
        return Err(Failure {
            code: if code == 0 { 1 } else { code },
            message: "the guest sent no counts (is it built with the guest kit's perf agent?)".into(),
        });
    }
    let command = std::iter::once(args.vm.guest.clone()).chain(args.args.iter().cloned()).collect::<Vec<_>>().join(" ");
    let seconds = report.agent.workload_ns().unwrap_or(report.stats.wall_ns) as f64 / 1e9;
    let backend = report.stats.pmu.as_ref().map(|p| p.backend_detail.clone()).unwrap_or_default();
    if args.json {
        let counts: Vec<_> = report
            .agent
            .counts
            .iter()
            .map(|c| {
                json!({"event": events::by_raw(c.event).name, "raw": c.event, "task": c.task,
                       "task_name": report.agent.tasks.get(&c.task), "supported": c.flags & COUNT_UNSUPPORTED == 0,
                       "value": c.value})
            })
            .collect();
        let doc = json!({"command": command, "counts": counts, "seconds": seconds, "backend": backend,
                         "exit_code": code, "stats": report.stats, "console": String::from_utf8_lossy(&report.console.captured())});
        println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
    } else {
        eprint!("{}", render(&command, &report.agent, seconds, &backend));
        if args.vm_stats {
            eprint!("{}", report.stats.render());
        }
    }
    Ok(code)
}

/// The `perf stat` block.
pub fn render(command: &str, agent: &AgentData, seconds: f64, backend: &str) -> String {
    let mut out = format!("\n Performance counter stats for '{command}':\n\n");
    let whole: Vec<_> = agent.counts.iter().filter(|c| c.task == 0).collect();
    let value_of =
        |raw: u16| whole.iter().find(|c| c.event == raw && c.flags & COUNT_UNSUPPORTED == 0).map(|c| c.value);
    for c in &whole {
        let name = events::by_raw(c.event).name;
        if c.flags & COUNT_UNSUPPORTED != 0 {
            out.push_str(&format!("{:>20}      {}\n", "<not supported>", name));
            continue;
        }
        let note = match c.event {
            0x00c0 => value_of(0x003c)
                .filter(|&cy| cy > 0)
                .map(|cy| format!("#  {:>6.2}  insn per cycle", c.value as f64 / cy as f64)),
            0x00c5 => value_of(0x00c4)
                .filter(|&b| b > 0)
                .map(|b| format!("#  {:>6.2}% of all branches", 100.0 * c.value as f64 / b as f64)),
            _ => None,
        };
        let line = format!("{:>20}      {:<24}  {}", thousands(c.value), name, note.unwrap_or_default());
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let per_task: Vec<_> = agent.counts.iter().filter(|c| c.task != 0).collect();
    if !per_task.is_empty() {
        out.push_str("\n Per task:\n");
        for c in per_task {
            let task = agent.tasks.get(&c.task).cloned().unwrap_or_else(|| format!("task-{}", c.task));
            let value =
                if c.flags & COUNT_UNSUPPORTED != 0 { "<not supported>".to_owned() } else { thousands(c.value) };
            out.push_str(&format!("  {:<16} {:>18}      {}\n", task, value, events::by_raw(c.event).name));
        }
    }
    out.push_str(&format!("\n{seconds:>20.9} seconds time elapsed\n\n"));
    if backend.contains("model clock") && value_of(0x003c).is_some() {
        out.push_str(" cycles are the exact backend's model clock: one per retired instruction\n\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::devices::CountRecord;

    #[test]
    fn renders_like_perf_stat() {
        let mut agent = AgentData::default();
        for (event, flags, value) in
            [(0x003c, 0, 2_000_000), (0x00c0, 0, 1_000_000), (0x00c4, 0, 100_000), (0x00c5, COUNT_UNSUPPORTED, 0)]
        {
            agent.counts.push(CountRecord { event, flags, task: 0, value });
        }
        let out = render("ftest 3", &agent, 1.5, "perf");
        assert!(out.contains(" Performance counter stats for 'ftest 3':"), "{out}");
        assert!(out.contains("           2,000,000      cycles"), "{out}");
        assert!(out.contains("1,000,000      instructions              #    0.50  insn per cycle"), "{out}");
        assert!(out.contains("     <not supported>      branch-misses"), "{out}");
        assert!(out.contains("1.500000000 seconds time elapsed"), "{out}");
        assert_eq!(agent_cmdline("stat -e 0x00c0", &["3".into()], ""), "stat -e 0x00c0 -- 3");
        assert_eq!(
            raw_list(&[events::parse("cycles").unwrap(), events::parse("ref-cycles").unwrap()]),
            "0x003c,0x013c"
        );
    }
}
