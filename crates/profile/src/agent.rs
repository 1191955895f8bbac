//! Orders for the guest kit's perf agent: what the VMM asks it to count or sample, as the
//! guest's command line carries them (`guest/kit/agent_options.c` reads them) — built from
//! types in one place, not formatted at each call site.

use crate::events::{agent_code, Event};
use pmu::tsc::SamplePeriod;
use pmu::Vendor;

/// What the agent does around the workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    /// Count `events` (`stat`), per guest task too when `per_task`.
    Stat {
        /// The events, in `-e` order.
        events: Vec<Event>,
        /// Count per task as well (counters saved and restored on every switch).
        per_task: bool,
    },
    /// Sample `events` every `period` (`record`; more events than counters take turns on
    /// them), with frame-pointer call chains when `callchain`.
    Record {
        /// The sampled events, in `-e` order.
        events: Vec<Event>,
        /// Every so many events, or so many times per second of the guest's TSC (the agent
        /// turns a frequency into cycles with the rate the VMM booted it with).
        period: SamplePeriod,
        /// Walk the interrupted stack's frame pointers.
        callchain: bool,
    },
}

impl Order {
    /// The guest command line for a guest of `vendor`: the order, `--`, the workload's
    /// arguments, then `extra` (the user's `--cmdline`).
    pub fn cmdline(&self, vendor: Vendor, workload: &[String], extra: &str) -> String {
        let mut words: Vec<String> = Vec::new();
        let codes = |events: &[Event]| events.iter().map(|&e| agent_code(e, vendor)).collect::<Vec<_>>().join(",");
        match self {
            Order::Stat { events, per_task } => {
                words.extend(["stat".into(), "-e".into(), codes(events)]);
                if *per_task {
                    words.push("-p".into());
                }
            }
            Order::Record { events, period, callchain } => {
                words.extend(["record".into(), "-e".into(), codes(events)]);
                match period {
                    SamplePeriod::Count(n) => words.extend(["-c".into(), n.to_string()]),
                    SamplePeriod::Hz(hz) => words.extend(["-F".into(), hz.to_string()]),
                }
                if *callchain {
                    words.push("-g".into());
                }
            }
        }
        words.push("--".into());
        words.extend(workload.iter().cloned());
        if !extra.is_empty() {
            words.push(extra.to_owned());
        }
        words.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::parse;

    #[test]
    fn orders_as_the_agent_reads_them() {
        let ev = |n| parse(n).unwrap();
        let stat = Order::Stat { events: vec![ev("cycles"), ev("ref-cycles")], per_task: false };
        assert_eq!(stat.cmdline(Vendor::Intel, &["3".into()], ""), "stat -e 0x003c,0x013c -- 3");
        let stat = Order::Stat { events: vec![ev("cycles"), ev("instructions")], per_task: true };
        assert_eq!(stat.cmdline(Vendor::Amd, &[], "x=1"), "stat -e 0x003c=0x00076,0x00c0=0x000c0 -p -- x=1");
        let record = Order::Record {
            events: vec![ev("cycles"), ev("instructions:k")],
            period: SamplePeriod::Count(100_000),
            callchain: true,
        };
        assert_eq!(record.cmdline(Vendor::Intel, &[], ""), "record -e 0x003c,0x00c0:k -c 100000 -g --");
        let record = Order::Record { events: vec![ev("cycles")], period: SamplePeriod::Hz(1000), callchain: false };
        assert_eq!(record.cmdline(Vendor::Intel, &["5000".into()], ""), "record -e 0x003c -F 1000 -- 5000");
    }
}
