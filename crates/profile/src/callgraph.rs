//! perf report's tables over weighted stacks: `Overhead` (where samples were taken) or
//! `Children` and `Self` (the share of samples whose stack holds the entry, and of those
//! taken in it), with, under each entry, its call graph in perf's graph form.

use crate::keys::Key;
use crate::profile::Profile;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// What the table shows.
#[derive(Debug, Clone)]
pub struct Options {
    /// The columns entries are grouped by.
    pub keys: Vec<Key>,
    /// Children and Self columns (the stacks have callers); else one Overhead column.
    pub children: bool,
    /// The call graph under each entry.
    pub graph: bool,
    /// A Samples column (`-n`).
    pub samples: bool,
    /// Entries under this share of all events (percent) are left out, and so are call-graph
    /// branches (`--percent-limit`; perf's default for branches, 0.5%, otherwise).
    pub percent_limit: Option<f64>,
}

/// Call-graph branches under this share of all samples are left out (perf's default
/// threshold, 0.5%).
const GRAPH_THRESHOLD: f64 = 0.005;

/// Indent of a call graph under its entry.
const GRAPH_INDENT: usize = 12;

/// An entry of the table.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    key: Vec<String>,
    children: u64,
    self_weight: u64,
    /// Samples taken in the entry.
    samples: u64,
}

/// The entries, heaviest first (by Children in children mode, else by Self).
fn entries(p: &Profile, keys: &[Key], children: bool) -> Vec<Entry> {
    let mut sums: BTreeMap<Vec<String>, (u64, u64, u64)> = BTreeMap::new();
    for s in &p.stacks {
        let leaf = s.frames.len() - 1;
        let sum = sums.entry(p.key(s, leaf, keys)).or_default();
        sum.1 += s.weight;
        sum.2 += s.samples;
        if children {
            let held: BTreeSet<Vec<String>> = (0..s.frames.len()).map(|i| p.key(s, i, keys)).collect();
            for key in held {
                sums.entry(key).or_default().0 += s.weight;
            }
        }
    }
    let mut entries: Vec<Entry> = sums
        .into_iter()
        .map(|(key, (children, self_weight, samples))| Entry { key, children, self_weight, samples })
        .collect();
    let order = |e: &Entry| if children { (e.children, e.self_weight) } else { (e.self_weight, 0) };
    entries.sort_by(|a, b| order(b).cmp(&order(a)).then_with(|| a.key.cmp(&b.key)));
    entries
}

/// The report table (after perf's `# Samples` and `# Event count` lines) of `profile`.
pub fn render(p: &Profile, o: &Options) -> String {
    let keys = &o.keys;
    let total = p.total_weight();
    let pct = |w: u64| 100.0 * w as f64 / total.max(1) as f64;
    let mut entries = entries(p, keys, o.children);
    if let Some(limit) = o.percent_limit {
        entries.retain(|e| pct(if o.children { e.children } else { e.self_weight }) >= limit);
    }
    let shown = |k: Key, v: &str| if k == Key::Sym { format!("[.] {v}") } else { v.to_owned() };
    let widths: Vec<usize> = keys
        .iter()
        .enumerate()
        .map(|(i, &k)| {
            let min = if matches!(k, Key::Comm | Key::Dso) { 15 } else { k.header().len() };
            entries.iter().map(|e| shown(k, &e.key[i]).len()).fold(min, usize::max)
        })
        .collect();
    let columns = |cells: Vec<String>| {
        let last = cells.len() - 1;
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| if i == last { c.clone() } else { format!("{c:<w$}", w = widths[i]) })
            .collect();
        padded.join("  ")
    };
    let mut out =
        format!("# Samples: {} of event '{}'\n# Event count (approx.): {total}\n#\n", p.total_samples(), p.event);
    let mut lead = String::from(if o.children { "# Children      Self  " } else { "# Overhead  " });
    let mut dots = String::from(if o.children { "# ........  ........  " } else { "# ........  " });
    if o.samples {
        lead.push_str("     Samples  ");
        dots.push_str("............  ");
    }
    let _ = writeln!(out, "{lead}{}", columns(keys.iter().map(|k| k.header().to_owned()).collect()));
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, &w)| ".".repeat(if i + 1 == widths.len() { w.max(22) } else { w }))
        .collect();
    let _ = writeln!(out, "{dots}{}\n#", columns(rule));
    let threshold = o.percent_limit.map_or(GRAPH_THRESHOLD, |l| l / 100.0);
    for e in &entries {
        let cells = columns(keys.iter().enumerate().map(|(i, &k)| shown(k, &e.key[i])).collect());
        let mut row = if o.children {
            format!("  {:>7.2}%  {:>7.2}%  ", pct(e.children), pct(e.self_weight))
        } else {
            format!("  {:>7.2}%  ", pct(e.self_weight))
        };
        if o.samples {
            let _ = write!(row, "{:>12}  ", e.samples);
        }
        let _ = writeln!(out, "{row}{cells}");
        if o.graph {
            out.push_str(&graph(p, keys, &e.key, o.children, total as f64 * threshold));
            out.push('\n');
        }
    }
    out
}

/// A call-graph node: a frame, the samples through it, what follows it.
#[derive(Debug, Default)]
struct Node {
    label: String,
    weight: u64,
    next: Vec<Node>,
}

impl Node {
    fn insert(&mut self, path: &[String], weight: u64) {
        self.weight += weight;
        let Some((first, rest)) = path.split_first() else { return };
        let i = match self.next.iter().position(|n| n.label == *first) {
            Some(i) => i,
            None => {
                self.next.push(Node { label: first.clone(), ..Node::default() });
                self.next.len() - 1
            }
        };
        self.next[i].insert(rest, weight);
    }

    /// Drop branches under `min` and order the rest heaviest first.
    fn prune(&mut self, min: f64) {
        self.next.retain(|n| n.weight as f64 >= min);
        self.next.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.label.cmp(&b.label)));
        for n in &mut self.next {
            n.prune(min);
        }
    }
}

/// The call graph of the entry `key`, as perf draws it, branches under `min` events left
/// out. Children mode (perf's caller order): the samples taken in the entry show their
/// whole chain from the outermost caller, the samples taken below it the chain from the
/// entry down. Otherwise (callee order): the samples taken in the entry, from it up through
/// its callers.
fn graph(p: &Profile, keys: &[Key], key: &[String], children: bool, min: f64) -> String {
    let total = p.total_weight();
    let mut root = Node::default();
    for s in &p.stacks {
        let leaf = s.frames.len() - 1;
        let labels = || s.frames.iter().map(|&f| p.label(f, keys));
        let path: Vec<String> = if p.key(s, leaf, keys) == key {
            if children {
                labels().collect()
            } else {
                labels().rev().collect()
            }
        } else if children {
            match (0..leaf).find(|&i| p.key(s, i, keys) == key) {
                Some(first) => labels().skip(first).collect(),
                None => continue,
            }
        } else {
            continue;
        };
        root.insert(&path, s.weight);
    }
    root.prune(min);
    let indent = " ".repeat(GRAPH_INDENT);
    let mut out = String::new();
    match root.next.as_slice() {
        [only] if only.weight == root.weight => {
            let _ = writeln!(out, "{indent}|\n{indent}---{}", only.label);
            body(&mut out, only, &format!("{indent}   "), total);
        }
        _ => branches(&mut out, &root.next, &indent, total),
    }
    out
}

/// What follows `node`: a single path continues straight down; else one branch per callee
/// (or caller) with its share of all samples.
fn body(out: &mut String, node: &Node, indent: &str, total: u64) {
    match node.next.as_slice() {
        [] => {}
        [only] if only.weight == node.weight => {
            let _ = writeln!(out, "{indent}{}", only.label);
            body(out, only, indent, total);
        }
        next => branches(out, next, indent, total),
    }
}

fn branches(out: &mut String, nodes: &[Node], indent: &str, total: u64) {
    for (i, n) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        let pct = format!("{:.2}%", 100.0 * n.weight as f64 / total.max(1) as f64);
        let _ = writeln!(out, "{indent}|");
        let _ = writeln!(out, "{indent}{}--{pct}--{}", if last { " " } else { "|" }, n.label);
        let below = format!("{indent}{}{}", if last { " " } else { "|" }, " ".repeat(pct.len() + 4));
        body(out, n, &below, total);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::DEFAULT_KEYS;
    use crate::testdata::{self, main_foo_qux_bar};

    fn options(keys: &[Key], children: bool, graph: bool) -> Options {
        Options { keys: keys.to_vec(), children, graph, samples: false, percent_limit: None }
    }

    #[test]
    fn children_is_the_share_of_stacks_holding_the_entry_self_where_it_ran() {
        let e = entries(&main_foo_qux_bar(), &[Key::Sym], true);
        let got: Vec<(&str, u64, u64)> =
            e.iter().map(|e| (e.key[0].as_str(), e.children / 1000, e.self_weight / 1000)).collect();
        assert_eq!(got, [("main", 10, 0), ("foo", 7, 2), ("qux", 5, 5), ("bar", 3, 3)]);
        // Without children, only where samples were taken.
        let e = entries(&main_foo_qux_bar(), &[Key::Sym], false);
        let got: Vec<(&str, u64, u64)> = e.iter().map(|e| (e.key[0].as_str(), e.self_weight, e.samples)).collect();
        assert_eq!(got, [("qux", 5000, 5), ("bar", 3000, 3), ("foo", 2000, 2)]);
    }

    #[test]
    fn recursion_counts_once_in_children() {
        let p = testdata::profile(&[(0x510, &[0x520, 0x520, 0x321], 4)]);
        let e = entries(&p, &[Key::Sym], true);
        assert_eq!(e[0].key, ["fib"]);
        assert_eq!((e[0].children, e[0].self_weight), (4000, 4000));
    }

    #[test]
    fn the_table_has_perfs_children_and_self_columns() {
        let table = render(&main_foo_qux_bar(), &options(&DEFAULT_KEYS, true, false));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "# Samples: 10 of event 'cycles'");
        assert_eq!(lines[1], "# Event count (approx.): 10000");
        assert_eq!(lines[3], "# Children      Self  Command          Shared Object    Symbol");
        assert_eq!(lines[6], "   100.00%     0.00%  ftest            ftest            [.] main");
        assert_eq!(lines[7], "    70.00%    20.00%  ftest            ftest            [.] foo");
        assert_eq!(lines.len(), 10, "{table}");
    }

    #[test]
    fn caller_graph_under_each_entry() {
        let table = render(&main_foo_qux_bar(), &options(&[Key::Sym], true, true));
        let main = "   100.00%     0.00%  [.] main\n\
                    \x20           |\n\
                    \x20           ---main\n\
                    \x20              |\n\
                    \x20              |--70.00%--foo\n\
                    \x20              |          |\n\
                    \x20              |           --50.00%--qux\n\
                    \x20              |\n\
                    \x20               --30.00%--bar\n\n";
        assert!(table.contains(main), "{table}");
        // foo: its own samples with their callers (main), and what runs below it.
        let foo = "    70.00%    20.00%  [.] foo\n\
                   \x20           |\n\
                   \x20           |--50.00%--foo\n\
                   \x20           |          qux\n\
                   \x20           |\n\
                   \x20            --20.00%--main\n\
                   \x20                      foo\n\n";
        assert!(table.contains(foo), "{table}");
    }

    #[test]
    fn callee_graph_without_children() {
        let table = render(&main_foo_qux_bar(), &options(&[Key::Sym], false, true));
        let qux = "    50.00%  [.] qux\n\
                   \x20           |\n\
                   \x20           ---qux\n\
                   \x20              foo\n\
                   \x20              main\n\n";
        assert!(table.contains(qux), "{table}");
    }

    #[test]
    fn small_branches_are_pruned() {
        let p = testdata::profile(&[(0x110, &[0x321], 1000), (0x110, &[0x215], 1)]);
        let table = render(&p, &options(&[Key::Sym], false, true));
        assert!(table.contains("main") && !table.contains("foo"), "under 0.5%: {table}");
    }
}

#[cfg(test)]
mod habit_tests {
    use super::*;
    use crate::testdata::main_foo_qux_bar;

    #[test]
    fn show_nr_samples_adds_perfs_samples_column() {
        let o = Options { keys: vec![Key::Sym], children: false, graph: false, samples: true, percent_limit: None };
        let table = render(&main_foo_qux_bar(), &o);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[3], "# Overhead       Samples  Symbol");
        assert_eq!(lines[4], "# ........  ............  ......................");
        assert_eq!(lines[6], "    50.00%             5  [.] qux");
        let o = Options { children: true, ..o };
        let table = render(&main_foo_qux_bar(), &o);
        assert!(table.contains("\n    70.00%    20.00%             2  [.] foo\n"), "{table}");
    }

    #[test]
    fn percent_limit_hides_small_entries_and_branches() {
        let o =
            Options { keys: vec![Key::Sym], children: false, graph: false, samples: false, percent_limit: Some(25.0) };
        let table = render(&main_foo_qux_bar(), &o);
        assert!(table.contains("[.] qux") && table.contains("[.] bar") && !table.contains("[.] foo"), "{table}");
        let o = Options { children: true, graph: true, percent_limit: Some(40.0), ..o };
        let table = render(&main_foo_qux_bar(), &o);
        assert!(table.contains("[.] main") && table.contains("[.] qux") && !table.contains("[.] bar"), "{table}");
        assert!(!table.contains("--bar"), "branches under the limit too: {table}");
    }
}
