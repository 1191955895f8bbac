//! perf report's tables over weighted stacks: `Overhead` (where samples were taken) or
//! `Children` and `Self` (the share of samples whose stack holds the entry, and of those
//! taken in it), with, under each entry, its call graph in perf's graph form.

use crate::stacks::{label, Key, Stack};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// What the table shows.
#[derive(Debug, Clone, Copy)]
pub struct Mode {
    /// Children and Self columns (the stacks have callers); else one Overhead column.
    pub children: bool,
    /// The call graph under each entry.
    pub graph: bool,
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
}

/// The entries, heaviest first (by Children in children mode, else by Self).
fn entries(stacks: &[Stack], keys: &[Key], mode: Mode) -> Vec<Entry> {
    let mut sums: BTreeMap<Vec<String>, (u64, u64)> = BTreeMap::new();
    for s in stacks {
        let leaf = s.frames.len() - 1;
        sums.entry(s.key(leaf, keys)).or_default().1 += s.weight;
        if mode.children {
            let held: BTreeSet<Vec<String>> = (0..s.frames.len()).map(|i| s.key(i, keys)).collect();
            for key in held {
                sums.entry(key).or_default().0 += s.weight;
            }
        }
    }
    let mut entries: Vec<Entry> =
        sums.into_iter().map(|(key, (children, self_weight))| Entry { key, children, self_weight }).collect();
    let order = |e: &Entry| if mode.children { (e.children, e.self_weight) } else { (e.self_weight, 0) };
    entries.sort_by(|a, b| order(b).cmp(&order(a)).then_with(|| a.key.cmp(&b.key)));
    entries
}

/// The report table (after perf's `# Samples` and `# Event count` lines) of `stacks`
/// grouped by `keys`.
pub fn render(stacks: &[Stack], keys: &[Key], mode: Mode, event: &str, samples: u64, event_count: u64) -> String {
    let total = stacks.iter().map(|s| s.weight).sum::<u64>();
    let entries = entries(stacks, keys, mode);
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
    let mut out = format!("# Samples: {samples} of event '{event}'\n# Event count (approx.): {event_count}\n#\n");
    let lead = if mode.children { "# Children      Self  " } else { "# Overhead  " };
    let _ = writeln!(out, "{lead}{}", columns(keys.iter().map(|k| k.header().to_owned()).collect()));
    let dots = if mode.children { "# ........  ........  " } else { "# ........  " };
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(i, &w)| ".".repeat(if i + 1 == widths.len() { w.max(22) } else { w }))
        .collect();
    let _ = writeln!(out, "{dots}{}\n#", columns(rule));
    let pct = |w: u64| 100.0 * w as f64 / total.max(1) as f64;
    for e in &entries {
        let cells = columns(keys.iter().enumerate().map(|(i, &k)| shown(k, &e.key[i])).collect());
        if mode.children {
            let _ = writeln!(out, "  {:>7.2}%  {:>7.2}%  {cells}", pct(e.children), pct(e.self_weight));
        } else {
            let _ = writeln!(out, "  {:>7.2}%  {cells}", pct(e.self_weight));
        }
        if mode.graph {
            out.push_str(&graph(stacks, keys, &e.key, mode.children, total));
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

/// The call graph of the entry `key`, as perf draws it. Children mode (perf's caller
/// order): the samples taken in the entry show their whole chain from the outermost caller,
/// the samples taken below it the chain from the entry down. Otherwise (callee order): the
/// samples taken in the entry, from it up through its callers.
fn graph(stacks: &[Stack], keys: &[Key], key: &[String], children: bool, total: u64) -> String {
    let mut root = Node::default();
    for s in stacks {
        let leaf = s.frames.len() - 1;
        let labels = || s.frames.iter().map(|f| label(f, keys));
        let path: Vec<String> = if s.key(leaf, keys) == key {
            if children {
                labels().collect()
            } else {
                labels().rev().collect()
            }
        } else if children {
            match (0..leaf).find(|&i| s.key(i, keys) == key) {
                Some(first) => labels().skip(first).collect(),
                None => continue,
            }
        } else {
            continue;
        };
        root.insert(&path, s.weight);
    }
    root.prune(total as f64 * GRAPH_THRESHOLD);
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
    use crate::stacks::{from_profile, DEFAULT_KEYS};
    use crate::testdata;

    /// main calls foo (which runs qux) and bar; foo also runs itself.
    fn stacks() -> Vec<Stack> {
        let file = testdata::record(
            &[],
            &[("ftest", "qux", 5, &["main", "foo"]), ("ftest", "foo", 2, &["main"]), ("ftest", "bar", 3, &["main"])],
        );
        from_profile(&file.profile)
    }

    const CHILDREN: Mode = Mode { children: true, graph: false };

    #[test]
    fn children_is_the_share_of_stacks_holding_the_entry_self_where_it_ran() {
        let e = entries(&stacks(), &[Key::Sym], CHILDREN);
        let got: Vec<(&str, u64, u64)> = e.iter().map(|e| (e.key[0].as_str(), e.children, e.self_weight)).collect();
        assert_eq!(got, [("main", 10, 0), ("foo", 7, 2), ("qux", 5, 5), ("bar", 3, 3)]);
        // Without children, only where samples were taken.
        let e = entries(&stacks(), &[Key::Sym], Mode { children: false, graph: false });
        let got: Vec<(&str, u64)> = e.iter().map(|e| (e.key[0].as_str(), e.self_weight)).collect();
        assert_eq!(got, [("qux", 5), ("bar", 3), ("foo", 2)]);
    }

    #[test]
    fn recursion_counts_once_in_children() {
        let file = testdata::record(&[], &[("ftest", "fib", 4, &["main", "fib", "fib"])]);
        let e = entries(&from_profile(&file.profile), &[Key::Sym], CHILDREN);
        assert_eq!(e[0].key, ["fib"]);
        assert_eq!((e[0].children, e[0].self_weight), (4, 4));
    }

    #[test]
    fn the_table_has_perfs_children_and_self_columns() {
        let table = render(&stacks(), &DEFAULT_KEYS, CHILDREN, "cycles", 10, 10_000);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "# Samples: 10 of event 'cycles'");
        assert_eq!(lines[3], "# Children      Self  Command          Shared Object    Symbol");
        assert_eq!(lines[6], "   100.00%     0.00%  ftest            ftest            [.] main");
        assert_eq!(lines[7], "    70.00%    20.00%  ftest            ftest            [.] foo");
        assert_eq!(lines.len(), 10, "{table}");
    }

    #[test]
    fn caller_graph_under_each_entry() {
        let table = render(&stacks(), &[Key::Sym], Mode { children: true, graph: true }, "cycles", 10, 10);
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
        let table = render(&stacks(), &[Key::Sym], Mode { children: false, graph: true }, "cycles", 10, 10);
        let qux = "    50.00%  [.] qux\n\
                   \x20           |\n\
                   \x20           ---qux\n\
                   \x20              foo\n\
                   \x20              main\n\n";
        assert!(table.contains(qux), "{table}");
    }

    #[test]
    fn small_branches_are_pruned() {
        let mut rows: Vec<(&str, &str, u64, &[&str])> = vec![("ftest", "qux", 1000, &["main"])];
        rows.push(("ftest", "qux", 1, &["other"]));
        let file = testdata::record(&[], &rows);
        let table =
            render(&from_profile(&file.profile), &[Key::Sym], Mode { children: false, graph: true }, "cycles", 1001, 1);
        assert!(table.contains("main") && !table.contains("other"), "under 0.5%: {table}");
    }
}
