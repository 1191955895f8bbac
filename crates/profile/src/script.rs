//! `perfvm script`'s text: every sample of a record as `perf script` prints them, call chains
//! as perf's indented frames, each address resolved once by the record's [`Profile`].

use crate::profile::{Profile, UNKNOWN};
use crate::record::{Record, Sample};
use std::fmt::Write as _;

/// What to print of each sample.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `file:line` under each address (perf script's `-F +srcline`).
    pub srcline: bool,
    /// The call chain, when the record has one.
    pub callchain: bool,
}

/// Every sample as `perf script` prints it by default:
/// `comm tid [cpu] secs.usecs: period event:  ip sym+off (dso)`; with a call chain the
/// frames (the sample's address, then the return addresses) follow on lines of their own,
/// and a blank line ends the sample.
pub fn render(record: &Record, p: &Profile, options: Options) -> String {
    let mut out = String::new();
    for (s, &stack) in record.samples.iter().zip(&p.sample_stacks) {
        sample(&mut out, record, p, s, &p.stacks[stack].frames, options);
    }
    out
}

/// One sample; `frames` are its stack's, outermost first.
fn sample(out: &mut String, record: &Record, p: &Profile, s: &Sample, frames: &[usize], options: Options) {
    let comm = p.command(s.task);
    let event = &record.events[s.event].name;
    let time = format!("{:5}.{:06}", s.time_ns / 1_000_000_000, s.time_ns % 1_000_000_000 / 1000);
    if options.callchain && frames.len() > 1 {
        // perf leaves the command unpadded when frames follow.
        let _ = writeln!(out, "{comm} {:7} [{:03}] {time}: {:10} {event}:", s.task, s.vcpu, s.period);
        for &f in frames.iter().rev() {
            frame(out, p, f, options, "\t");
        }
        out.push('\n');
    } else {
        let _ = write!(out, "{comm:>16} {:7} [{:03}] {time}: {:10} {event}: ", s.task, s.vcpu, s.period);
        frame(out, p, frames[frames.len() - 1], options, " ");
    }
}

/// `prefix` + `addr sym+off (elf)`, and its source line below it (a return address: its
/// call's line, as the profile resolved it).
fn frame(out: &mut String, p: &Profile, f: usize, o: Options, prefix: &str) {
    let frame = &p.frames[f];
    let function = &p.functions[frame.function];
    let _ = match function.start {
        Some(start) => {
            writeln!(out, "{prefix}{:16x} {}+{:#x} ({})", frame.addr, function.name, frame.addr - start, p.elf)
        }
        None => writeln!(out, "{prefix}{:16x} {UNKNOWN} ({})", frame.addr, p.elf),
    };
    if o.srcline {
        let _ = writeln!(out, "  {}", frame.srcline());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    fn text(file: &Record, options: Options) -> String {
        render(file, &Profile::build(file, &testdata::resolver()), options)
    }

    const PLAIN: Options = Options { srcline: false, callchain: true };

    #[test]
    fn one_line_per_sample_like_perf_script() {
        let file = testdata::record(&[(1_234_567_890, 0, 0, 0x116, &[]), (2_000_001_000, 1, 0, 0x999, &[])]);
        let out = text(&file, PLAIN);
        let lines: Vec<&str> = out.lines().collect();
        // perf: "%16s %7d [%03d] %5lu.%06lu: %10lu %s: " then ' ' and the ip as "%16lx".
        assert_eq!(
            lines,
            [
                "           ftest       0 [000]     1.234567:       1000 cycles:               116 qux+0x16 (/nonexistent/ftest.elf)",
                "           ftest       0 [001]     2.000001:       1000 cycles:               999 [unknown] (/nonexistent/ftest.elf)",
            ]
        );
    }

    #[test]
    fn call_chains_are_indented_frames_ending_in_a_blank_line() {
        let file = testdata::record(&[(5_000, 2, 0, 0x110, &[0x215, 0x321]), (6_000, 2, 0, 0x205, &[0x330])]);
        let out = text(&file, PLAIN);
        let expected = "ftest       0 [002]     0.000005:       1000 cycles:\n\
                        \t             110 qux+0x10 (/nonexistent/ftest.elf)\n\
                        \t             215 foo+0x15 (/nonexistent/ftest.elf)\n\
                        \t             321 main+0x21 (/nonexistent/ftest.elf)\n\
                        \n\
                        ftest       0 [002]     0.000006:       1000 cycles:\n\
                        \t             205 foo+0x5 (/nonexistent/ftest.elf)\n\
                        \t             330 main+0x30 (/nonexistent/ftest.elf)\n\
                        \n";
        assert_eq!(out, expected);
        // -G: one line per sample again.
        let hidden = text(&file, Options { srcline: false, callchain: false });
        assert_eq!(hidden.lines().count(), 2, "{hidden}");
        assert!(hidden.lines().all(|l| l.contains("cycles: ") && l.ends_with("(/nonexistent/ftest.elf)")), "{hidden}");
    }

    #[test]
    fn a_return_address_past_its_callers_end_names_the_caller() {
        // foo ends with a call: its return address is main's first byte (0x300).
        let file = testdata::record(&[(0, 0, 0, 0x110, &[0x240, 0x300])]);
        let out = text(&file, PLAIN);
        assert!(out.contains("             240 foo+0x40 ("), "{out}");
        assert!(out.contains("             300 [unknown] ("), "0x2ff is no function: {out}");
    }

    #[test]
    fn srclines_follow_each_address() {
        let file = testdata::record(&[(0, 0, 0, 0x110, &[0x215])]);
        let out = text(&file, Options { srcline: true, callchain: true });
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[2], "  ??:0", "no DWARF here: perf's unknown line: {out}");
        assert_eq!(lines[4], "  ??:0", "{out}");
        assert_eq!(lines.len(), 6, "{out}");
    }

    #[test]
    fn real_guest_lines_name_ftest_c() {
        let Some((file, r)) = testdata::real_ftest("real_guest_lines_name_ftest_c") else { return };
        let out = render(&file, &Profile::build(&file, &r), Options { srcline: true, callchain: true });
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[1].contains(" qux+0x4 (") && lines[3].contains(" main+0x"), "{out}");
        for l in [lines[2], lines[4]] {
            let (f, n) = l.trim().split_once(':').unwrap();
            assert!(f == "ftest.c" && n.parse::<u32>().unwrap() > 0, "{out}");
        }
    }
}
