//! `perfvm report`'s text: a header saying what the run recorded and what it lost, then
//! perf's table ([`crate::callgraph`]) for each event; or two profiles compared.

use crate::callgraph::{self, Options};
use crate::counts::scaled;
use crate::format::thousands;
use crate::profile::{tvd, Profile};
use crate::record::{Record, SampledEvent};
use crate::resolve::Resolver;
use std::fmt::Write as _;

/// What the run recorded and what it lost, as `#` lines: the command, mode and period (with
/// several events, each event's period and samples), the backend and policy, samples
/// dropped, notifications lost and periods throttled, what each event counted where the
/// agent said (scaled as perf does where it was multiplexed), whether the run was cut
/// short; then perf's `# Total Lost Samples`.
pub fn header(r: &Record) -> String {
    let n = r.notifications;
    let what = match &r.events[..] {
        [one] => format!("period {}", one.period),
        several => format!("{} events", several.len()),
    };
    let mut out = format!(
        "# perfvm record of '{}': {} mode, {what}\n# backend: {}\n# policy: {}\n",
        r.command_line(),
        r.mode.name(),
        r.backend,
        r.policy
    );
    let _ = writeln!(
        out,
        "# lost: {} samples dropped (not buffered or not kept), {} overflow notifications lost; {} periods throttled",
        thousands(r.samples_dropped),
        thousands(n.lost),
        thousands(n.throttled)
    );
    for (i, e) in r.events.iter().enumerate() {
        let sampled = r.samples_of(i).fold(0u64, |sum, s| sum.saturating_add(s.period));
        let counted = counted(e, sampled);
        let _ = match (r.events.len(), counted) {
            (1, Some(counted)) => writeln!(out, "# the event {counted}"),
            (1, None) => Ok(()),
            (_, counted) => writeln!(
                out,
                "# {}: period {}, samples: {}{}",
                e.name,
                e.period,
                thousands(r.samples_of(i).count() as u64),
                counted.map_or_else(String::new, |c| format!("; {c}"))
            ),
        };
    }
    if let (true, Some(how)) = (r.callgraph, &r.unwinding) {
        let _ = writeln!(out, "# call chains: {how}");
    }
    if r.partial {
        out.push_str("# partial: the run was cut short (SIGINT, SIGTERM or --timeout): the samples until then\n");
    }
    let _ = write!(out, "#\n# Total Lost Samples: {}\n#\n", r.samples_dropped.saturating_add(n.lost));
    out
}

/// What `e` counted over the workload and how much of it its samples (standing for
/// `sampled` events) cover; a multiplexed event's count is what it counted on a counter,
/// with perf's running share and its estimate for the whole workload.
fn counted(e: &SampledEvent, sampled: u64) -> Option<String> {
    let count = e.count?;
    let counted = match e.running_share() {
        None => format!("counted {} over the workload", thousands(count)),
        Some(running) => format!(
            "counted {} while on a counter, {:.2}% of the workload (scaled: {})",
            thousands(count),
            100.0 * running,
            thousands(scaled(count, e.time_enabled, e.time_running))
        ),
    };
    let share = 100.0 * sampled as f64 / count.max(1) as f64;
    Some(format!("{counted}; the samples stand for {} of them ({share:.2}%)", thousands(sampled)))
}

/// The whole report: [`header`], then a table for each event, as perf shows each event of a
/// file apart.
pub fn render(r: &Record, resolver: &Resolver, options: &Options) -> String {
    let tables: Vec<String> =
        (0..r.events.len()).map(|i| callgraph::render(&Profile::build(&r.of_event(i), resolver), options)).collect();
    header(r) + &tables.join("\n")
}

/// A profile to compare, with the name of its file.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// The file's name.
    pub name: &'a str,
    /// Its record.
    pub record: &'a Record,
    /// Its profile.
    pub profile: &'a Profile,
}

/// Two profiles' per-function shares side by side, and their total variation distance.
pub fn compare(a: Side, b: Side) -> String {
    let (sa, sb) = (a.profile.shares(), b.profile.shares());
    let mut names: Vec<&String> = sa.keys().chain(sb.keys()).collect();
    names.sort();
    names.dedup();
    names.sort_by(|x, y| sa.get(*y).unwrap_or(&0.0).total_cmp(sa.get(*x).unwrap_or(&0.0)));
    let mut out = String::new();
    for (tag, s) in [("A", a), ("B", b)] {
        let r = s.record;
        let _ =
            writeln!(out, "# {tag}: {} ({} {} samples, {})", s.name, r.sample_count(), r.event().name, r.mode.name());
    }
    let _ = writeln!(out, "#\n# {:<24} {:>9} {:>9} {:>9}", "Symbol", "A", "B", "B-A");
    for s in names {
        let (x, y) = (sa.get(s).copied().unwrap_or(0.0), sb.get(s).copied().unwrap_or(0.0));
        let _ = writeln!(out, "  {:<24} {:>8.2}% {:>8.2}% {:>+8.2}%", s, 100.0 * x, 100.0 * y, 100.0 * (y - x));
    }
    let _ = writeln!(out, "#\n# total variation distance: {:.4}", tvd(a.profile, b.profile));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    #[test]
    fn the_header_states_losses_the_agents_count_and_a_cut_short_run() {
        let mut r = testdata::record(&[(0, 0, 0, 0x110, &[]), (0, 0, 0, 0x210, &[])]);
        let plain = header(&r);
        assert!(plain.starts_with("# perfvm record of 'ftest': sampled mode, period 1000\n"), "{plain}");
        assert!(plain.contains("# lost: 0 samples dropped (not buffered or not kept), 0 overflow notifications lost; 0 periods throttled\n"), "{plain}");
        assert!(plain.ends_with("#\n# Total Lost Samples: 0\n#\n") && !plain.contains("partial"), "{plain}");
        r.samples_dropped = 12;
        r.notifications.lost = 1349;
        r.notifications.throttled = 60240;
        r.events[0].count = Some(8000);
        r.partial = true;
        let h = header(&r);
        assert!(h.contains("# lost: 12 samples dropped (not buffered or not kept), 1,349 overflow notifications lost; 60,240 periods throttled\n"), "{h}");
        assert!(
            h.contains("# the event counted 8,000 over the workload; the samples stand for 2,000 of them (25.00%)\n"),
            "{h}"
        );
        assert!(h.contains("# partial: the run was cut short"), "{h}");
        assert!(h.contains("# Total Lost Samples: 1361\n"), "{h}");
    }

    /// The flat table, perf's default columns.
    fn flat() -> Options {
        Options {
            keys: crate::DEFAULT_KEYS.to_vec(),
            children: false,
            graph: false,
            samples: false,
            percent_limit: None,
        }
    }

    #[test]
    fn the_event_count_is_the_sum_of_the_sample_periods() {
        let mut r = testdata::record(&[(0, 0, 0, 0x110, &[]), (0, 0, 0, 0x110, &[]), (0, 0, 0, 0x210, &[])]);
        r.samples[2].period = 7000;
        let text = render(&r, &testdata::resolver(), &flat());
        assert!(text.contains("# Samples: 3 of event 'cycles'\n# Event count (approx.): 9000\n"), "{text}");
        assert!(text.contains("    77.78%  ftest            ftest            [.] foo\n"), "{text}");
    }

    #[test]
    fn each_event_has_its_section_and_a_multiplexed_count_is_scaled() {
        let mut r = testdata::record(&[(0, 0, 0, 0x110, &[]), (0, 0, 0, 0x210, &[]), (0, 0, 0, 0x410, &[])]);
        r.events[0].count = Some(2000);
        r.events.push(SampledEvent {
            count: Some(3000),
            time_enabled: 900,
            time_running: 300,
            ..SampledEvent::new("instructions", 0xc0, 1000)
        });
        r.samples[2].event = 1;
        let text = render(&r, &testdata::resolver(), &flat());
        assert!(text.starts_with("# perfvm record of 'ftest': sampled mode, 2 events\n"), "{text}");
        assert!(text.contains("# cycles: period 1000, samples: 2; counted 2,000 over the workload; the samples stand for 2,000 of them (100.00%)\n"), "{text}");
        assert!(text.contains("# instructions: period 1000, samples: 1; counted 3,000 while on a counter, 33.33% of the workload (scaled: 9,000); the samples stand for 1,000 of them (33.33%)\n"), "{text}");
        let (cycles, instructions) =
            text.split_once("\n# Samples: 1 of event 'instructions'\n# Event count (approx.): 1000\n").unwrap();
        assert!(cycles.contains("# Samples: 2 of event 'cycles'\n# Event count (approx.): 2000\n"), "{text}");
        assert!(!cycles.contains("[.] bar") && cycles.contains("[.] qux") && cycles.contains("[.] foo"), "{text}");
        assert!(instructions.contains("   100.00%  ftest            ftest            [.] bar\n"), "{text}");
    }

    #[test]
    fn compare_shows_shares_and_tvd() {
        let a = testdata::record(&[(0, 0, 0, 0x110, &[]), (0, 0, 0, 0x210, &[])]);
        let b = testdata::record(&[
            (0, 0, 0, 0x110, &[]),
            (0, 0, 0, 0x110, &[]),
            (0, 0, 0, 0x110, &[]),
            (0, 0, 0, 0x210, &[]),
        ]);
        let (pa, pb) = (Profile::build(&a, &testdata::resolver()), Profile::build(&b, &testdata::resolver()));
        let text = compare(
            Side { name: "a.json", record: &a, profile: &pa },
            Side { name: "b.json", record: &b, profile: &pb },
        );
        assert!(
            text.starts_with("# A: a.json (2 cycles samples, sampled)\n# B: b.json (4 cycles samples, sampled)\n"),
            "{text}"
        );
        assert!(text.contains("  qux                         50.00%    75.00%   +25.00%\n"), "{text}");
        assert!(text.ends_with("# total variation distance: 0.2500\n"), "{text}");
    }
}
