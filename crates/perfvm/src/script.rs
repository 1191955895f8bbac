//! `perfvm script`: every sample of a record file, one per line as `perf script` prints
//! them (call chains as perf's indented frames), or exported for a profile viewer.

use crate::cli::{ScriptArgs, ScriptFormat};
use crate::record::{RecordFile, Sample};
use crate::resolve::Resolver;
use crate::Failure;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// What to print of each sample.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `file:line` under each address (perf script's `-F +srcline`).
    pub srcline: bool,
    /// The call chain, when the record has one.
    pub callchain: bool,
}

pub fn run(args: ScriptArgs) -> Result<i32, Failure> {
    let file = RecordFile::load(Path::new(&args.input)).map_err(Failure::usage)?;
    // Fail on the output before any work or warning.
    let cannot_write = |path: &str, e: std::io::Error| Failure::usage(format!("cannot write {path}: {e}"));
    let output = match &args.output {
        Some(path) => Some((path, std::fs::File::create(path).map_err(|e| cannot_write(path, e))?)),
        None => None,
    };
    let speedscope = args.format == ScriptFormat::Speedscope;
    if !speedscope && file.sample_list.is_empty() && file.mode == "reference" {
        eprintln!(
            "perfvm: {} is a reference record (every retired instruction attributed, no individual samples): see perfvm report",
            args.input
        );
        return Ok(0);
    }
    // Speedscope frames carry the function's file and line wherever the DWARF has them.
    let (resolver, warnings) = Resolver::new(&file, args.srcline || speedscope);
    for w in warnings {
        eprintln!("perfvm: warning: {w}");
    }
    let text = if speedscope {
        let doc = crate::speedscope::export(&file, &resolver, &args.input);
        serde_json::to_string(&doc).map_err(|e| Failure::usage(format!("speedscope export: {e}")))? + "\n"
    } else {
        render(&file, &resolver, Options { srcline: args.srcline, callchain: !args.hide_call_graph })
    };
    match output {
        Some((path, mut out)) => {
            out.write_all(text.as_bytes()).map_err(|e| cannot_write(path, e))?;
            if speedscope {
                eprintln!("perfvm: wrote {path} (open it at https://www.speedscope.app)");
            }
        }
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                // `perfvm script | head` closes the pipe early: not an error.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    return Err(Failure::usage(format!("cannot write the output: {e}")))
                }
                _ => {}
            }
        }
    }
    Ok(0)
}

/// Every sample as `perf script` prints it by default:
/// `comm tid [cpu] secs.usecs: period event:  ip sym+off (dso)`; with a call chain the
/// frames (the sample's address, then the return addresses) follow on lines of their own,
/// and a blank line ends the sample.
pub fn render(file: &RecordFile, resolver: &Resolver, options: Options) -> String {
    let mut out = String::new();
    for s in &file.sample_list {
        sample(&mut out, file, resolver, s, options);
    }
    out
}

fn sample(out: &mut String, file: &RecordFile, resolver: &Resolver, s: &Sample, options: Options) {
    let comm = resolver.command(s.task);
    let time = format!("{:5}.{:06}", s.time_ns / 1_000_000_000, s.time_ns % 1_000_000_000 / 1000);
    let chain = options.callchain && !s.callchain.is_empty();
    if chain {
        // perf leaves the command unpadded when frames follow.
        let _ = writeln!(out, "{comm} {:7} [{:03}] {time}: {:10} {}:", s.task, s.vcpu, s.period, file.event);
        frame(out, file, resolver, s.ip, s.ip, options, "\t");
        for &ret in &s.callchain {
            // A return address's line is the call's: the instruction before it.
            frame(out, file, resolver, ret, ret.saturating_sub(1), options, "\t");
        }
        out.push('\n');
    } else {
        let _ = write!(out, "{comm:>16} {:7} [{:03}] {time}: {:10} {}: ", s.task, s.vcpu, s.period, file.event);
        frame(out, file, resolver, s.ip, s.ip, options, " ");
    }
}

/// `prefix` + `addr sym+off (dso)`, and the source line of `line_addr` below it.
fn frame(out: &mut String, file: &RecordFile, r: &Resolver, addr: u64, line_addr: u64, o: Options, prefix: &str) {
    let _ = writeln!(out, "{prefix}{addr:16x} {} ({})", r.symbol_offset(addr), file.elf);
    if o.srcline {
        let _ = writeln!(out, "  {}", r.srcline(line_addr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::Symbols;
    use crate::testdata;

    fn resolver(file: &RecordFile) -> Resolver {
        let symbols = Symbols::from_list(vec![
            (0x100, 0x40, "qux".into()),
            (0x200, 0x40, "foo".into()),
            (0x300, 0x80, "main".into()),
        ]);
        Resolver::from_parts(file, symbols, None)
    }

    const PLAIN: Options = Options { srcline: false, callchain: true };

    #[test]
    fn one_line_per_sample_like_perf_script() {
        let file = testdata::record(
            &[(1_234_567_890, 0, 0, 0x116, &[]), (2_000_001_000, 1, 0, 0x999, &[])],
            &[("ftest", "qux", 1, &[]), ("ftest", "[unknown]", 1, &[])],
        );
        let text = render(&file, &resolver(&file), PLAIN);
        let lines: Vec<&str> = text.lines().collect();
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
        let file = testdata::record(
            &[(5_000, 2, 0, 0x110, &[0x215, 0x321]), (6_000, 2, 0, 0x205, &[0x330])],
            &[("ftest", "qux", 1, &["main", "foo"]), ("ftest", "foo", 1, &["main"])],
        );
        let text = render(&file, &resolver(&file), PLAIN);
        let expected = "ftest       0 [002]     0.000005:       1000 cycles:\n\
                        \t             110 qux+0x10 (/nonexistent/ftest.elf)\n\
                        \t             215 foo+0x15 (/nonexistent/ftest.elf)\n\
                        \t             321 main+0x21 (/nonexistent/ftest.elf)\n\
                        \n\
                        ftest       0 [002]     0.000006:       1000 cycles:\n\
                        \t             205 foo+0x5 (/nonexistent/ftest.elf)\n\
                        \t             330 main+0x30 (/nonexistent/ftest.elf)\n\
                        \n";
        assert_eq!(text, expected);
        // -G: one line per sample again.
        let hidden = render(&file, &resolver(&file), Options { srcline: false, callchain: false });
        assert_eq!(hidden.lines().count(), 2, "{hidden}");
        assert!(hidden.lines().all(|l| l.contains("cycles: ") && l.ends_with("(/nonexistent/ftest.elf)")), "{hidden}");
    }

    #[test]
    fn srclines_follow_each_address() {
        let file = testdata::record(&[(0, 0, 0, 0x110, &[0x215])], &[("ftest", "qux", 1, &["foo"])]);
        let text = render(&file, &resolver(&file), Options { srcline: true, callchain: true });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[2], "  ??:0", "no DWARF here: perf's unknown line: {text}");
        assert_eq!(lines[4], "  ??:0", "{text}");
        assert_eq!(lines.len(), 6, "{text}");
    }

    #[test]
    fn real_guest_lines_name_ftest_c() {
        let Some((file, r)) = testdata::real_ftest("real_guest_lines_name_ftest_c") else { return };
        let text = render(&file, &r, Options { srcline: true, callchain: true });
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains(" qux+0x4 (") && lines[3].contains(" main+0x20 ("), "{text}");
        for l in [lines[2], lines[4]] {
            let (f, n) = l.trim().split_once(':').unwrap();
            assert!(f == "ftest.c" && n.parse::<u32>().unwrap() > 0, "{text}");
        }
    }
}
