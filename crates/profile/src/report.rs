//! `perfvm report`'s text: a header saying what the run recorded and what it lost, then
//! perf's table ([`crate::callgraph`]); or two profiles compared.

use crate::callgraph::{self, Options};
use crate::format::thousands;
use crate::profile::{tvd, Profile};
use crate::record::Record;
use std::fmt::Write as _;

/// What the run recorded and what it lost, as `#` lines: the command, mode and period, the
/// backend and policy, samples dropped, notifications lost and periods throttled, what the
/// event counted where the agent said, whether the run was cut short; then perf's
/// `# Total Lost Samples`.
pub fn header(r: &Record) -> String {
    let n = r.notifications;
    let mut out = format!(
        "# perfvm record of '{}': {} mode, period {}\n# backend: {}\n# policy: {}\n",
        r.command_line(),
        r.mode.name(),
        r.period,
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
    if let Some(count) = r.event_count {
        let share = 100.0 * r.event_total() as f64 / count.max(1) as f64;
        let _ = writeln!(
            out,
            "# the event counted {} over the workload; the samples stand for {} of them ({share:.2}%)",
            thousands(count),
            thousands(r.event_total())
        );
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

/// The whole report: [`header`], then the table.
pub fn render(r: &Record, p: &Profile, options: &Options) -> String {
    header(r) + &callgraph::render(p, options)
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
        let _ = writeln!(out, "# {tag}: {} ({} {} samples, {})", s.name, r.sample_count(), r.event, r.mode.name());
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
        r.event_count = Some(8000);
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

    #[test]
    fn the_event_count_is_the_sum_of_the_sample_periods() {
        let mut r = testdata::record(&[(0, 0, 0, 0x110, &[]), (0, 0, 0, 0x110, &[]), (0, 0, 0, 0x210, &[])]);
        r.samples[2].period = 7000;
        let p = Profile::build(&r, &testdata::resolver());
        let options = Options {
            keys: crate::DEFAULT_KEYS.to_vec(),
            children: false,
            graph: false,
            samples: false,
            percent_limit: None,
        };
        let text = render(&r, &p, &options);
        assert!(text.contains("# Samples: 3 of event 'cycles'\n# Event count (approx.): 9000\n"), "{text}");
        assert!(text.contains("    77.78%  ftest            ftest            [.] foo\n"), "{text}");
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
