//! `perfvm report`: a record file's table (with Children and Self columns and call graphs
//! when it has call chains, grouped by `--sort` keys), a flamegraph, or two profiles side by
//! side with their total variation distance (and a differential flamegraph). The tables
//! are the profile library's; this parses the flags and prints.

use crate::cli::ReportArgs;
use crate::output::{emit, first_event, load};
use crate::Failure;
use profile::callgraph::Options;
use profile::keys::{parse_keys, Key, DEFAULT_KEYS};
use profile::report::{self, Side};
use profile::{Profile, Record};

/// `-i` when not given, as `record -o` writes by default.
const DEFAULT_INPUT: &str = "perfvm.data.json";

/// `perfvm report`: 0 once the report is printed.
pub fn run(args: ReportArgs) -> Result<i32, Failure> {
    let keys = match &args.sort {
        Some(text) => parse_keys(text).map_err(Failure::usage)?,
        None => DEFAULT_KEYS.to_vec(),
    };
    if let Some(limit) = args.percent_limit {
        if !(0.0..=100.0).contains(&limit) {
            return Err(Failure::usage("--percent-limit must be between 0 and 100"));
        }
    }
    // Fail on the flamegraph's path before printing a report.
    if let Some(svg) = &args.flamegraph {
        crate::output::check_writable(svg)?;
    }
    if let Some(files) = &args.compare {
        if args.sort.is_some() || args.call_graph || args.no_children {
            return Err(Failure::usage("--compare compares symbols: it takes no --sort, -g or --no-children"));
        }
        return compare(&args, files);
    }
    let input = args.input.as_deref().unwrap_or(DEFAULT_INPUT);
    let (record, resolver) = load(input, args.event.as_deref(), keys.contains(&Key::Srcline))?;
    let chains = record.callgraph || record.samples.iter().any(|s| !s.callchain.is_empty());
    if args.call_graph && !chains {
        eprintln!("perfvm: note: {input} has no call chains (record it with -g): showing the flat table");
    }
    let options = Options {
        keys,
        children: chains && !args.no_children,
        graph: args.call_graph && chains,
        samples: args.show_nr_samples,
        percent_limit: args.percent_limit,
    };
    emit(&report::render(&record, &resolver, &options))?;
    if let Some(svg) = &args.flamegraph {
        let one = first_event(&record, input, "the flamegraph");
        let event = &one.event().name;
        let title = format!("perfvm: {} ({} samples of {event})", one.command_line(), one.sample_count());
        write_flamegraph(svg, title, event, &Profile::build(&one, &resolver).folded())?;
    }
    Ok(0)
}

/// `--compare`: A from `-i` or the first file, B the other.
fn compare(args: &ReportArgs, files: &[String]) -> Result<i32, Failure> {
    let (a, b) = match (args.input.as_deref(), files) {
        (Some(_), [_, _]) => {
            return Err(Failure::usage("give -i A --compare B or --compare A B, not -i and two files"))
        }
        (input, [b]) => (input.unwrap_or(DEFAULT_INPUT), b.as_str()),
        (None, [a, b]) => (a.as_str(), b.as_str()),
        _ => unreachable!("clap takes one or two files for --compare"),
    };
    let event = args.event.as_deref();
    let one_event = |path: &str| -> Result<(Record, Profile), Failure> {
        let (record, resolver) = load(path, event, false)?;
        let one = first_event(&record, path, "--compare");
        let profile = Profile::build(&one, &resolver);
        Ok((one, profile))
    };
    let ((ra, pa), (rb, pb)) = (one_event(a)?, one_event(b)?);
    let (sa, sb) = (Side { name: a, record: &ra, profile: &pa }, Side { name: b, record: &rb, profile: &pb });
    emit(&report::compare(sa, sb))?;
    if let Some(svg) = &args.flamegraph {
        let title = format!("perfvm: {b} against {a} (red: grew, blue: shrank)");
        write_flamegraph(svg, title, &rb.event().name, &differential(&pa, &pb)?)?;
    }
    Ok(0)
}

/// Collapsed stacks with A's and B's weight on each line (A scaled to B's total), the input
/// of a differential flamegraph.
fn differential(a: &Profile, b: &Profile) -> Result<String, Failure> {
    let options = inferno::differential::Options { normalize: true, strip_hex: false };
    let mut out = Vec::new();
    inferno::differential::from_readers(options, a.folded().as_bytes(), b.folded().as_bytes(), &mut out)
        .map_err(|e| Failure::failed(format!("differential flamegraph: {e}")))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Write a flamegraph of collapsed stacks weighted in `event`s; without any, an SVG that
/// says so (inferno would leave an error page and fail).
fn write_flamegraph(path: &str, title: String, event: &str, folded: &str) -> Result<(), Failure> {
    if folded.trim().is_empty() {
        crate::output::write_file(path, no_samples_svg(&title).as_bytes())?;
        eprintln!("perfvm: no samples: wrote an empty flamegraph {path}");
        return Ok(());
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = title;
    options.count_name = event.to_owned();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, folded.lines(), &mut svg)
        .map_err(|e| Failure::failed(format!("flamegraph {path}: {e}")))?;
    crate::output::write_file(path, &svg)?;
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
