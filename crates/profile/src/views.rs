//! Every view of one profile tells the same story: the same share of the events taken in
//! each function, and the same caller of each frame (a return address at the very end of
//! its caller included), whether read from report's tables and call graphs, script's text,
//! the folded stacks, speedscope or pprof.

use crate::callgraph::Options;
use crate::keys::Key;
use crate::record::Record;
use crate::testdata;
use crate::{callgraph, pprof, script, speedscope, Profile};
use std::collections::{BTreeMap, BTreeSet};

/// Shares per function, and (caller, callee) pairs.
type View = (BTreeMap<String, f64>, BTreeSet<(String, String)>);

/// Samples with several periods, chains through returns at a function's last byte
/// (foo's at 0x240, main's at 0x380), recursion, an unknown address and two tasks.
fn record() -> Record {
    let specs: &[(u32, u64, &[u64], u64, usize)] = &[
        (0, 0x110, &[0x215, 0x321], 1000, 5),
        (0, 0x118, &[0x215, 0x321], 3000, 1),
        (0, 0x210, &[0x321], 1000, 2),
        (0, 0x410, &[0x380], 2000, 2),
        (0, 0x120, &[0x240, 0x380], 1000, 3),
        (0, 0x510, &[0x520, 0x520, 0x321], 1000, 2),
        (0, 0x999, &[], 1000, 1),
        (1, 0x410, &[0x380], 1000, 1),
    ];
    let mut file = testdata::record(&[]);
    for &(task, ip, chain, period, n) in specs {
        for _ in 0..n {
            let time_ns = file.samples.len() as u64 * 1000;
            file.samples.push(crate::Sample {
                event: 0,
                time_ns,
                vcpu: 0,
                task,
                ip,
                period,
                callchain: chain.to_vec(),
            });
        }
    }
    file.tasks = [(1, "worker".to_owned())].into();
    file.callgraph = true;
    file
}

fn normalize(weights: BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let total: f64 = weights.values().sum();
    weights.into_iter().map(|(k, v)| (k, v / total)).collect()
}

/// Shares and callers from stacks given outermost first with their weights.
fn from_stacks(stacks: impl IntoIterator<Item = (Vec<String>, f64)>) -> View {
    let (mut shares, mut callers) = (BTreeMap::new(), BTreeSet::new());
    for (frames, w) in stacks {
        *shares.entry(frames.last().unwrap().clone()).or_insert(0.0) += w;
        for pair in frames.windows(2) {
            callers.insert((pair[0].clone(), pair[1].clone()));
        }
    }
    (normalize(shares), callers)
}

fn folded_view(p: &Profile) -> View {
    from_stacks(p.folded().lines().map(|l| {
        let (stack, w) = l.rsplit_once(' ').unwrap();
        (stack.split(';').skip(1).map(str::to_owned).collect(), w.parse().unwrap())
    }))
}

fn script_view(file: &Record, p: &Profile) -> View {
    let text = script::render(file, p, script::Options { srcline: false, callchain: true });
    let function = |frame: &str| frame.split_whitespace().nth(1).unwrap().split('+').next().unwrap().to_owned();
    let mut stacks: Vec<(Vec<String>, f64)> = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(frame) = line.strip_prefix('\t') {
            stacks.last_mut().unwrap().0.push(function(frame));
        } else {
            // A heading; without a chain, the address follows on the same line.
            let (left, right) = line.rsplit_once(" cycles:").unwrap();
            let period: f64 = left.split_whitespace().last().unwrap().parse().unwrap();
            let frames = if right.trim().is_empty() { vec![] } else { vec![function(right)] };
            stacks.push((frames, period));
        }
    }
    from_stacks(stacks.into_iter().map(|(frames, w)| (frames.into_iter().rev().collect(), w)))
}

fn speedscope_view(file: &Record, p: &Profile) -> View {
    let doc = speedscope::export(file, p, "x.json");
    let names: Vec<String> =
        doc["shared"]["frames"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap().to_owned()).collect();
    let mut stacks = Vec::new();
    for profile in doc["profiles"].as_array().unwrap() {
        for (s, w) in profile["samples"].as_array().unwrap().iter().zip(profile["weights"].as_array().unwrap()) {
            let frames = s.as_array().unwrap().iter().map(|i| names[i.as_u64().unwrap() as usize].clone()).collect();
            stacks.push((frames, w.as_f64().unwrap()));
        }
    }
    from_stacks(stacks)
}

fn pprof_view(file: &Record, p: &Profile) -> View {
    let pb = pprof::decode(&pprof::export(file, p)).unwrap();
    let name = |loc: u64| {
        let f = pb.location[loc as usize - 1].line[0].function_id;
        pb.string_table[pb.function[f as usize - 1].name as usize].clone()
    };
    from_stacks(pb.sample.iter().map(|s| (s.location_id.iter().rev().map(|&l| name(l)).collect(), s.value[1] as f64)))
}

/// Self shares from report's Overhead (or Self) column.
fn report_shares(p: &Profile, children: bool) -> BTreeMap<String, f64> {
    let options = Options { keys: vec![Key::Sym], children, graph: false, samples: false, percent_limit: None };
    let table = callgraph::render(p, &options);
    let rows = table.lines().filter(|l| l.contains("[.] "));
    normalize(
        rows.map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            let share: f64 = cells[if children { 1 } else { 0 }].trim_end_matches('%').parse().unwrap();
            (cells.last().unwrap().to_string(), share)
        })
        .filter(|(_, share)| *share > 0.0)
        .collect(),
    )
}

/// The functions in each entry's callee graph (report --no-children -g): the entry and
/// everything above it.
fn report_graph_names(p: &Profile) -> BTreeMap<String, BTreeSet<String>> {
    let options = Options { keys: vec![Key::Sym], children: false, graph: true, samples: false, percent_limit: None };
    let table = callgraph::render(p, &options);
    let mut graphs = BTreeMap::new();
    for block in table.split("\n\n") {
        let Some(head) = block.lines().find(|l| l.contains("[.] ")) else { continue };
        let entry = head.rsplit("[.] ").next().unwrap().to_owned();
        let words = block.lines().skip_while(|l| !l.contains("[.] ")).skip(1);
        let names = words.map(|l| l.trim().trim_start_matches(['|', '-', ' ']).rsplit("--").next().unwrap().to_owned());
        graphs.insert(entry, names.filter(|n| !n.is_empty()).collect());
    }
    graphs
}

fn ancestors(callers: &BTreeSet<(String, String)>, of: &str) -> BTreeSet<String> {
    let mut found: BTreeSet<String> = [of.to_owned()].into();
    loop {
        let more: Vec<String> =
            callers.iter().filter(|(_, callee)| found.contains(callee)).map(|(c, _)| c.clone()).collect();
        let before = found.len();
        found.extend(more);
        if found.len() == before {
            return found;
        }
    }
}

#[test]
fn every_view_gives_the_same_self_shares_and_callers() {
    let file = record();
    let p = Profile::build(&file, &testdata::resolver());
    let (shares, callers) = folded_view(&p);
    assert!((shares["qux"] - 11_000.0 / 21_000.0).abs() < 1e-12, "weighted by period: {shares:?}");
    assert!(callers.contains(&("main".into(), "bar".into())), "main's last byte calls bar: {callers:?}");
    assert!(callers.contains(&("foo".into(), "qux".into())) && callers.contains(&("fib".into(), "fib".into())));
    assert!(!callers.iter().any(|(c, _)| c == "[unknown]"), "every return address resolved: {callers:?}");
    for (view, (s, c)) in [
        ("script", script_view(&file, &p)),
        ("speedscope", speedscope_view(&file, &p)),
        ("pprof", pprof_view(&file, &p)),
    ] {
        assert_eq!(c, callers, "{view}'s callers");
        assert_eq!(s.keys().collect::<Vec<_>>(), shares.keys().collect::<Vec<_>>(), "{view}'s functions");
        for (f, share) in &shares {
            assert!((s[f] - share).abs() < 1e-12, "{view}: {f} {} against {share}", s[f]);
        }
    }
    for children in [false, true] {
        let s = report_shares(&p, children);
        for (f, share) in &shares {
            assert!((s[f] - share).abs() < 0.0001, "report (children {children}): {f} {} against {share}", s[f]);
        }
    }
    for (entry, names) in report_graph_names(&p) {
        assert_eq!(names, ancestors(&callers, &entry), "report -g of {entry}");
    }
    assert_eq!(p.shares().into_keys().collect::<Vec<_>>(), shares.keys().cloned().collect::<Vec<_>>());
}
