//! A profile: sample weight per (command, symbol), as `perf report` shows it, with shares,
//! total variation distance between profiles, and collapsed stacks for flamegraphs.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Weighted samples per (command, shared object, symbol).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    pub rows: Vec<ProfileRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProfileRow {
    pub command: String,
    pub object: String,
    pub symbol: String,
    pub weight: u64,
    /// The call chain above `symbol`, outermost caller first (empty without `-g`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<String>,
}

impl Profile {
    /// Sum weights of identical rows (same chain) and sort by weight, heaviest first.
    pub fn from_rows(rows: impl IntoIterator<Item = ProfileRow>) -> Profile {
        let mut merged: BTreeMap<(String, String, Vec<String>, String), u64> = BTreeMap::new();
        for r in rows {
            *merged.entry((r.command, r.object, r.callers, r.symbol)).or_default() += r.weight;
        }
        let mut rows: Vec<ProfileRow> = merged
            .into_iter()
            .map(|((command, object, callers, symbol), weight)| ProfileRow { command, object, symbol, weight, callers })
            .collect();
        rows.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.symbol.cmp(&b.symbol)));
        Profile { rows }
    }

    pub fn total(&self) -> u64 {
        self.rows.iter().map(|r| r.weight).sum()
    }

    /// Share of the total per symbol (commands merged).
    pub fn shares(&self) -> BTreeMap<String, f64> {
        let total = self.total().max(1) as f64;
        let mut shares = BTreeMap::new();
        for r in &self.rows {
            *shares.entry(r.symbol.clone()).or_default() += r.weight as f64 / total;
        }
        shares
    }

    /// The perf-report table; `event_count` is what perf shows as the event count: the sum
    /// of the sample periods.
    pub fn render(&self, event: &str, samples: u64, event_count: u64) -> String {
        let total = self.total().max(1) as f64;
        let mut out = format!("# Samples: {samples} of event '{event}'\n# Event count (approx.): {event_count}\n#\n");
        out.push_str("# Overhead  Command          Shared Object    Symbol\n");
        out.push_str("# ........  ...............  ...............  ......................\n#\n");
        for r in &self.rows {
            out.push_str(&format!(
                "  {:>7.2}%  {:<15}  {:<15}  [.] {}\n",
                100.0 * r.weight as f64 / total,
                r.command,
                r.object,
                r.symbol
            ));
        }
        out
    }

    /// Collapsed stacks (`command;caller;...;symbol weight`), the input format of flamegraph
    /// tools.
    pub fn folded(&self) -> String {
        self.rows
            .iter()
            .map(|r| {
                let chain: String = r.callers.iter().map(|c| format!("{c};")).collect();
                format!("{};{chain}{} {}\n", r.command, r.symbol, r.weight)
            })
            .collect()
    }
}

/// Total variation distance between the per-symbol shares of two profiles: half the sum of
/// absolute differences, 0 for identical distributions, 1 for disjoint ones.
pub fn tvd(a: &Profile, b: &Profile) -> f64 {
    let (pa, pb) = (a.shares(), b.shares());
    let symbols: std::collections::BTreeSet<&String> = pa.keys().chain(pb.keys()).collect();
    0.5 * symbols.iter().map(|s| (pa.get(*s).unwrap_or(&0.0) - pb.get(*s).unwrap_or(&0.0)).abs()).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(symbol: &str, weight: u64) -> ProfileRow {
        ProfileRow { command: "ftest".into(), object: "ftest".into(), symbol: symbol.into(), weight, callers: vec![] }
    }

    #[test]
    fn merge_sort_and_shares() {
        let p = Profile::from_rows([row("foo", 1), row("qux", 3), row("foo", 1), row("bar", 5)]);
        assert_eq!(p.rows.iter().map(|r| r.symbol.as_str()).collect::<Vec<_>>(), ["bar", "qux", "foo"]);
        assert_eq!(p.total(), 10);
        assert!((p.shares()["bar"] - 0.5).abs() < 1e-12);
        let table = p.render("cycles", 10, 10_000);
        assert!(table.contains("# Samples: 10 of event 'cycles'\n# Event count (approx.): 10000\n"), "{table}");
        assert!(table.contains("  50.00%  ftest            ftest            [.] bar"), "{table}");
        assert_eq!(p.folded().lines().next(), Some("ftest;bar 5"));
    }

    #[test]
    fn total_variation_distance() {
        let a = Profile::from_rows([row("x", 1), row("y", 1)]);
        let b = Profile::from_rows([row("x", 3), row("y", 1)]);
        let c = Profile::from_rows([row("z", 7)]);
        assert!(tvd(&a, &a).abs() < 1e-12);
        assert!((tvd(&a, &b) - 0.25).abs() < 1e-12);
        assert!((tvd(&a, &c) - 1.0).abs() < 1e-12);
    }
}
