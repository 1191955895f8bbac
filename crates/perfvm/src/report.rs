//! `perfvm report`: the overhead table of a record file (with Children and Self columns and
//! call graphs when it has call chains, grouped by `--sort` keys), a flamegraph, or two
//! profiles side by side with their total variation distance (and a differential flamegraph).

use crate::callgraph;
use crate::cli::ReportArgs;
use crate::profile::tvd;
use crate::record::RecordFile;
use crate::resolve::Resolver;
use crate::stacks::{self, Key, DEFAULT_KEYS};
use crate::Failure;
use std::io::Write;
use std::path::Path;

/// `-i` when not given, as `record -o` writes by default.
const DEFAULT_INPUT: &str = "perfvm.data.json";

pub fn run(args: ReportArgs) -> Result<i32, Failure> {
    let keys = match &args.sort {
        Some(text) => stacks::parse_keys(text).map_err(Failure::usage)?,
        None => DEFAULT_KEYS.to_vec(),
    };
    if args.compare.is_some() && (args.sort.is_some() || args.call_graph || args.no_children) {
        return Err(Failure::usage("--compare compares symbols: it takes no --sort, -g or --no-children"));
    }
    if let Some(files) = &args.compare {
        let (a, b) = match (args.input.as_deref(), files.as_slice()) {
            (Some(_), [_, _]) => {
                return Err(Failure::usage("give -i A --compare B or --compare A B, not -i and two files"))
            }
            (input, [b]) => (input.unwrap_or(DEFAULT_INPUT), b.as_str()),
            (None, [a, b]) => (a.as_str(), b.as_str()),
            _ => unreachable!("clap takes one or two files for --compare"),
        };
        let (file_a, file_b) = (load(a)?, load(b)?);
        print!("{}", compare(&file_a, a, &file_b, b));
        if let Some(svg) = &args.flamegraph {
            let title = format!("perfvm: {b} against {a} (red: grew, blue: shrank)");
            write_flamegraph(svg, title, &differential(&file_a, &file_b)?)?;
        }
        return Ok(0);
    }
    let input = args.input.as_deref().unwrap_or(DEFAULT_INPUT);
    let file = load(input)?;
    let chains = file.callgraph || file.profile.rows.iter().any(|r| !r.callers.is_empty());
    if args.call_graph && !chains {
        return Err(Failure::usage(format!("-g: {input} has no call chains (record it with -g)")));
    }
    let table = if !chains && keys == DEFAULT_KEYS {
        file.profile.render(&file.event, file.samples, file.sampled_event_count())
    } else {
        let stacks = if keys.contains(&Key::Srcline) {
            let (resolver, warnings) = Resolver::new(&file, true);
            for w in warnings {
                eprintln!("perfvm: warning: {w}");
            }
            stacks::from_samples(&file, &resolver)
        } else {
            stacks::from_profile(&file.profile)
        };
        let mode = callgraph::Mode { children: chains && !args.no_children, graph: args.call_graph };
        callgraph::render(&stacks, &keys, mode, &file.event, file.samples, file.sampled_event_count())
    };
    emit(&format!("{}{table}", header(&file)))?;
    if let Some(svg) = &args.flamegraph {
        let title = format!("perfvm: {} ({} samples of {})", command(&file), file.samples, file.event);
        write_flamegraph(svg, title, &file.profile.folded())?;
    }
    Ok(0)
}

/// Write the report on stdout; a reader that stops early (`| head`) is not an error.
fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::usage(format!("cannot write the report: {e}")))
        }
        _ => Ok(()),
    }
}

fn load(path: &str) -> Result<RecordFile, Failure> {
    RecordFile::load(Path::new(path)).map_err(Failure::usage)
}

/// Collapsed stacks with A's and B's weight on each line (A scaled to B's total), the input
/// of a differential flamegraph.
fn differential(a: &RecordFile, b: &RecordFile) -> Result<String, Failure> {
    let options = inferno::differential::Options { normalize: true, strip_hex: false };
    let mut out = Vec::new();
    inferno::differential::from_readers(
        options,
        a.profile.folded().as_bytes(),
        b.profile.folded().as_bytes(),
        &mut out,
    )
    .map_err(|e| Failure::usage(format!("differential flamegraph: {e}")))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Write a flamegraph of collapsed stacks; without any, an SVG that says so (inferno would
/// leave an error page and fail).
fn write_flamegraph(path: &str, title: String, folded: &str) -> Result<(), Failure> {
    let cannot_write = |e: std::io::Error| Failure::usage(format!("cannot write {path}: {e}"));
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(cannot_write)?);
    if folded.trim().is_empty() {
        out.write_all(no_samples_svg(&title).as_bytes()).and_then(|()| out.flush()).map_err(cannot_write)?;
        eprintln!("perfvm: no samples: wrote an empty flamegraph {path}");
        return Ok(());
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = title;
    inferno::flamegraph::from_lines(&mut options, folded.lines(), out)
        .map_err(|e| Failure::usage(format!("flamegraph: {e}")))?;
    eprintln!("perfvm: wrote flamegraph {path}");
    Ok(())
}

/// A flamegraph-sized SVG with the title and "no samples".
fn no_samples_svg(title: &str) -> String {
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"90\" viewBox=\"0 0 1200 90\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#f8f8f8\"/>\n\
         <text x=\"600\" y=\"28\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"17\">{}</text>\n\
         <text x=\"600\" y=\"62\" text-anchor=\"middle\" font-family=\"Verdana\" font-size=\"14\">no samples: nothing to draw</text>\n\
         </svg>\n",
        xml_escape(title)
    )
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The command as the user ran it: guest and workload arguments.
fn command(f: &RecordFile) -> String {
    std::iter::once(f.guest.as_str()).chain(f.args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
}

fn header(f: &RecordFile) -> String {
    format!(
        "# perfvm record of '{}': {} mode, period {}, {}\n# backend: {}\n# policy: {}\n#\n",
        command(f),
        f.mode,
        f.period,
        if f.samples_dropped > 0 {
            format!("{} samples dropped", f.samples_dropped)
        } else {
            "no samples dropped".into()
        },
        f.backend,
        f.policy
    )
}

/// Two profiles' per-symbol shares side by side, and their TVD.
pub fn compare(a: &RecordFile, name_a: &str, b: &RecordFile, name_b: &str) -> String {
    let (sa, sb) = (a.profile.shares(), b.profile.shares());
    let mut symbols: Vec<&String> = sa.keys().chain(sb.keys()).collect();
    symbols.sort();
    symbols.dedup();
    symbols.sort_by(|x, y| sa.get(*y).unwrap_or(&0.0).total_cmp(sa.get(*x).unwrap_or(&0.0)));
    let mut out = format!(
        "# A: {name_a} ({} {} samples, {})\n# B: {name_b} ({} {} samples, {})\n#\n",
        a.samples, a.event, a.mode, b.samples, b.event, b.mode
    );
    out.push_str(&format!("# {:<24} {:>9} {:>9} {:>9}\n", "Symbol", "A", "B", "B-A"));
    for s in symbols {
        let (x, y) = (sa.get(s).copied().unwrap_or(0.0), sb.get(s).copied().unwrap_or(0.0));
        out.push_str(&format!("  {:<24} {:>8.2}% {:>8.2}% {:>+8.2}%\n", s, 100.0 * x, 100.0 * y, 100.0 * (y - x)));
    }
    out.push_str(&format!("#\n# total variation distance: {:.4}\n", tvd(&a.profile, &b.profile)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_flamegraph_is_escaped_svg() {
        let svg = no_samples_svg("perfvm: a<b> & \"c\"");
        assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"), "{svg}");
        assert!(svg.contains("perfvm: a&lt;b&gt; &amp; &quot;c&quot;") && svg.contains("no samples"), "{svg}");
    }
}
