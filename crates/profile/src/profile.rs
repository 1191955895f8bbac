//! The one aggregation: a record's samples resolved once (each address through
//! [`Resolver`], so the return-address rule holds for every view) and merged into stacks
//! weighted by their periods. Every view of a record is drawn from a [`Profile`].

use crate::record::{Mode, Record};
use crate::resolve::{Resolver, Site};
use crate::srcline::{self, Location};
use std::collections::{BTreeMap, HashMap};

/// How an address without a function shows.
pub const UNKNOWN: &str = "[unknown]";

/// A function of the guest ELF (or [`UNKNOWN`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Its symbol.
    pub name: String,
    /// Where it starts (None for [`UNKNOWN`]).
    pub start: Option<u64>,
    /// Where it is defined, where the DWARF says (read only when lines were asked for).
    pub definition: Option<Location>,
}

/// One address of the samples, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The address as sampled (a return address as the chain holds it).
    pub addr: u64,
    /// Where it came from, which decided where it was looked up.
    pub site: Site,
    /// Index in [`Profile::functions`].
    pub function: usize,
    /// Its source line (a return address: its call's), where lines were read.
    pub location: Option<Location>,
}

impl Frame {
    /// `file:line` as perf shows it, or `??:0`.
    pub fn srcline(&self) -> String {
        self.location.as_ref().map_or_else(|| srcline::UNKNOWN.to_owned(), Location::short)
    }
}

/// Samples of one task with one chain of addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    /// The guest task.
    pub task: u32,
    /// Indices in [`Profile::frames`], the outermost caller first and the sampled address
    /// last (never empty).
    pub frames: Vec<usize>,
    /// Samples merged here (the reference: instructions).
    pub samples: u64,
    /// The sum of their periods: the events they stand for.
    pub weight: u64,
}

impl Stack {
    /// The frame where the samples were taken.
    pub fn leaf(&self) -> usize {
        self.frames[self.frames.len() - 1]
    }
}

/// A record's samples, resolved and merged.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    /// The sampled event (of a record of several: their names, comma-separated, as perf
    /// names a group; views of one event take [`Record::of_event`]).
    pub event: String,
    /// The shared object every address belongs to: the guest.
    pub dso: String,
    /// The guest ELF's path.
    pub elf: String,
    /// Distinct functions.
    pub functions: Vec<Function>,
    /// Distinct (address, site) pairs.
    pub frames: Vec<Frame>,
    /// Distinct (task, chain) pairs, in the order first sampled.
    pub stacks: Vec<Stack>,
    /// For each sample of the record, in order, the index of its stack.
    pub sample_stacks: Vec<usize>,
    commands: BTreeMap<u32, String>,
}

/// Interning tables while a profile is built.
#[derive(Default)]
struct Tables {
    functions: HashMap<(String, Option<u64>), usize>,
    frames: HashMap<(u64, Site), usize>,
    stacks: HashMap<(u32, Vec<usize>), usize>,
}

impl Profile {
    /// Resolve every address of `record` once and merge its samples into stacks.
    pub fn build(record: &Record, resolver: &Resolver) -> Profile {
        let event = record.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(",");
        let mut p = Profile { event, dso: record.dso(), elf: record.elf.clone(), ..Default::default() };
        let mut t = Tables::default();
        for s in &record.samples {
            let mut frames: Vec<usize> =
                s.callchain.iter().rev().map(|&ret| p.frame(&mut t, resolver, ret, Site::Return)).collect();
            frames.push(p.frame(&mut t, resolver, s.ip, Site::Sampled));
            let samples = if record.mode == Mode::Reference { s.period } else { 1 };
            let next = p.stacks.len();
            let i = *t.stacks.entry((s.task, frames.clone())).or_insert(next);
            if i == next {
                p.stacks.push(Stack { task: s.task, frames, samples: 0, weight: 0 });
                p.commands.entry(s.task).or_insert_with(|| record.command(s.task));
            }
            let stack = &mut p.stacks[i];
            stack.samples = stack.samples.saturating_add(samples);
            stack.weight = stack.weight.saturating_add(s.period);
            p.sample_stacks.push(i);
        }
        p
    }

    fn frame(&mut self, t: &mut Tables, r: &Resolver, addr: u64, site: Site) -> usize {
        if let Some(&i) = t.frames.get(&(addr, site)) {
            return i;
        }
        let (name, start) = match r.function(addr, site) {
            Some((name, start)) => (name.to_owned(), Some(start)),
            None => (UNKNOWN.to_owned(), None),
        };
        let next = self.functions.len();
        let function = *t.functions.entry((name.clone(), start)).or_insert(next);
        if function == next {
            let definition = start.and_then(|s| r.definition(s));
            self.functions.push(Function { name, start, definition });
        }
        self.frames.push(Frame { addr, site, function, location: r.location(addr, site) });
        t.frames.insert((addr, site), self.frames.len() - 1);
        self.frames.len() - 1
    }

    /// The command a task ran as.
    pub fn command(&self, task: u32) -> &str {
        self.commands.get(&task).map_or(UNKNOWN, String::as_str)
    }

    /// The function name of a frame.
    pub fn function_name(&self, frame: usize) -> &str {
        &self.functions[self.frames[frame].function].name
    }

    /// The events all samples stand for.
    pub fn total_weight(&self) -> u64 {
        self.stacks.iter().fold(0u64, |sum, s| sum.saturating_add(s.weight))
    }

    /// The samples (the reference: instructions).
    pub fn total_samples(&self) -> u64 {
        self.stacks.iter().fold(0u64, |sum, s| sum.saturating_add(s.samples))
    }

    /// Where the samples were taken: weight per function name (commands merged).
    pub fn self_weights(&self) -> BTreeMap<&str, u64> {
        let mut weights: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &self.stacks {
            *weights.entry(self.function_name(s.leaf())).or_default() += s.weight;
        }
        weights
    }

    /// The share of the events taken in each function.
    pub fn shares(&self) -> BTreeMap<String, f64> {
        let total = self.total_weight().max(1) as f64;
        self.self_weights().into_iter().map(|(name, w)| (name.to_owned(), w as f64 / total)).collect()
    }

    /// Collapsed stacks, `command;outermost;...;leaf weight` per line, weighted by period,
    /// heaviest first: the input of flamegraph tools.
    pub fn folded(&self) -> String {
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        for s in &self.stacks {
            let mut line = self.command(s.task).to_owned();
            for &f in &s.frames {
                line.push(';');
                line.push_str(self.function_name(f));
            }
            *lines.entry(line).or_default() += s.weight;
        }
        let mut lines: Vec<(String, u64)> = lines.into_iter().collect();
        lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        lines.into_iter().map(|(stack, w)| format!("{stack} {w}\n")).collect()
    }
}

/// Total variation distance between the per-function shares of two profiles: half the sum
/// of absolute differences, 0 for identical distributions, 1 for disjoint ones.
pub fn tvd(a: &Profile, b: &Profile) -> f64 {
    tvd_of_shares(&a.shares(), &b.shares())
}

/// Total variation distance between two per-function share maps (each summing to 1).
pub fn tvd_of_shares(pa: &BTreeMap<String, f64>, pb: &BTreeMap<String, f64>) -> f64 {
    let names: std::collections::BTreeSet<&String> = pa.keys().chain(pb.keys()).collect();
    0.5 * names.iter().map(|s| (pa.get(*s).unwrap_or(&0.0) - pb.get(*s).unwrap_or(&0.0)).abs()).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    #[test]
    fn samples_merge_into_stacks_weighted_by_period() {
        let mut file = testdata::record(&[
            (1, 0, 0, 0x110, &[0x215, 0x321]),
            (2, 0, 0, 0x118, &[0x215, 0x321]),
            (3, 0, 0, 0x999, &[]),
        ]);
        file.samples[1].period = 3000;
        let p = Profile::build(&file, &testdata::resolver());
        let names = |s: &Stack| s.frames.iter().map(|&f| p.function_name(f)).collect::<Vec<_>>();
        assert_eq!(names(&p.stacks[0]), ["main", "foo", "qux"]);
        assert_eq!(names(&p.stacks[2]), ["[unknown]"]);
        assert_eq!((p.stacks[0].samples, p.stacks[0].weight), (1, 1000));
        assert_eq!((p.total_samples(), p.total_weight()), (3, 5000));
        assert_eq!(p.sample_stacks, [0, 1, 2]);
        assert!((p.shares()["qux"] - 0.8).abs() < 1e-12);
        assert_eq!(p.folded(), "ftest;main;foo;qux 4000\nftest;[unknown] 1000\n");
        assert_eq!(p.frames.iter().filter(|f| f.addr == 0x215).count(), 1, "each address resolved once");
    }

    #[test]
    fn total_variation_distance() {
        let profile = |ips: &[u64]| {
            let samples: Vec<testdata::SampleSpec> = ips.iter().map(|&ip| (0, 0, 0, ip, &[][..])).collect();
            Profile::build(&testdata::record(&samples), &testdata::resolver())
        };
        let (a, b, c) = (profile(&[0x110, 0x210]), profile(&[0x110, 0x110, 0x110, 0x210]), profile(&[0x999]));
        assert!(tvd(&a, &a).abs() < 1e-12);
        assert!((tvd(&a, &b) - 0.25).abs() < 1e-12);
        assert!((tvd(&a, &c) - 1.0).abs() < 1e-12);
    }
}
