//! A record's samples as weighted stacks, and the `report --sort` keys that group their
//! frames: from the profile rows (symbols as record wrote them) or, for source lines, from
//! the sampled addresses symbolized again.

use crate::profile::Profile;
use crate::record::RecordFile;
use crate::resolve::Resolver;

/// A column of `report --sort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Comm,
    Dso,
    Sym,
    Srcline,
}

impl Key {
    /// The column header, as perf prints it.
    pub fn header(self) -> &'static str {
        match self {
            Key::Comm => "Command",
            Key::Dso => "Shared Object",
            Key::Sym => "Symbol",
            Key::Srcline => "Source:Line",
        }
    }
}

/// perf report's default: `comm,dso,sym`.
pub const DEFAULT_KEYS: [Key; 3] = [Key::Comm, Key::Dso, Key::Sym];

/// `comm,dso,sym,srcline` (any order, no repeats) into keys; the error is one line.
pub fn parse_keys(text: &str) -> Result<Vec<Key>, String> {
    let mut keys = Vec::new();
    for word in text.split(',').map(str::trim) {
        let key = match word {
            "comm" => Key::Comm,
            "dso" => Key::Dso,
            "sym" => Key::Sym,
            "srcline" => Key::Srcline,
            "" => return Err(format!("--sort '{text}': an empty key")),
            other => return Err(format!("--sort: unknown key '{other}' (comm, dso, sym, srcline)")),
        };
        if keys.contains(&key) {
            return Err(format!("--sort: '{word}' given twice"));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// One frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub symbol: String,
    /// `file:line`, empty where not resolved (stacks from the profile rows).
    pub srcline: String,
}

/// Samples of one command with one stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub command: String,
    pub object: String,
    pub weight: u64,
    /// Outermost caller first, the sampled function last (never empty).
    pub frames: Vec<Frame>,
}

impl Stack {
    /// The values of `keys` for frame `i`.
    pub fn key(&self, i: usize, keys: &[Key]) -> Vec<String> {
        let f = &self.frames[i];
        keys.iter()
            .map(|k| match k {
                Key::Comm => self.command.clone(),
                Key::Dso => self.object.clone(),
                Key::Sym => f.symbol.clone(),
                Key::Srcline => f.srcline.clone(),
            })
            .collect()
    }
}

/// How a call-graph node names frame `f`: its symbol, with its source line when the keys
/// hold srcline.
pub fn label(f: &Frame, keys: &[Key]) -> String {
    match (keys.contains(&Key::Sym), keys.contains(&Key::Srcline)) {
        (true, true) => format!("{} {}", f.symbol, f.srcline),
        (false, true) => f.srcline.clone(),
        _ => f.symbol.clone(),
    }
}

/// The profile rows as stacks (their callers, then their symbol).
pub fn from_profile(profile: &Profile) -> Vec<Stack> {
    profile
        .rows
        .iter()
        .map(|r| Stack {
            command: r.command.clone(),
            object: r.object.clone(),
            weight: r.weight,
            frames: r
                .callers
                .iter()
                .chain(std::iter::once(&r.symbol))
                .map(|s| Frame { symbol: s.clone(), srcline: String::new() })
                .collect(),
        })
        .collect()
}

/// The record's samples as stacks of resolved addresses: each sample of the sample list
/// (weight 1, as the profile counts them) or, without one (the reference), each address
/// with its weight. A return address's source line is its call's (the byte before it).
pub fn from_samples(file: &RecordFile, r: &Resolver) -> Vec<Stack> {
    let frame = |addr: u64, line_addr: u64| Frame { symbol: r.symbol(addr), srcline: r.srcline(line_addr) };
    let stack = |task: u32, weight: u64, frames: Vec<Frame>| Stack {
        command: r.command(task),
        object: r.object().to_owned(),
        weight,
        frames,
    };
    if file.sample_list.is_empty() {
        return file.rips.iter().map(|&(ip, task, w)| stack(task, w, vec![frame(ip, ip)])).collect();
    }
    file.sample_list
        .iter()
        .map(|s| {
            let mut frames: Vec<Frame> =
                s.callchain.iter().rev().map(|&ret| frame(ret, ret.saturating_sub(1))).collect();
            frames.push(frame(s.ip, s.ip));
            stack(s.task, 1, frames)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::Symbols;
    use crate::testdata;

    #[test]
    fn sort_keys_parse_or_say_why() {
        assert_eq!(parse_keys("sym,srcline").unwrap(), [Key::Sym, Key::Srcline]);
        assert_eq!(parse_keys("comm, dso,sym").unwrap(), DEFAULT_KEYS);
        assert_eq!(parse_keys("sym,pid").unwrap_err(), "--sort: unknown key 'pid' (comm, dso, sym, srcline)");
        assert!(parse_keys("sym,,dso").unwrap_err().contains("empty key"));
        assert!(parse_keys("sym,sym").unwrap_err().contains("twice"));
    }

    #[test]
    fn profile_rows_become_stacks_leaf_last() {
        let file = testdata::record(&[], &[("ftest", "qux", 3, &["main", "foo"])]);
        let stacks = from_profile(&file.profile);
        let names: Vec<&str> = stacks[0].frames.iter().map(|f| f.symbol.as_str()).collect();
        assert_eq!(names, ["main", "foo", "qux"]);
        assert_eq!(stacks[0].weight, 3);
        assert_eq!(stacks[0].key(2, &[Key::Comm, Key::Sym]), ["ftest", "qux"]);
    }

    #[test]
    fn samples_become_stacks_of_resolved_addresses() {
        let file = testdata::record(
            &[(0, 0, 0, 0x110, &[0x215, 0x321]), (0, 0, 0, 0x999, &[])],
            &[("ftest", "qux", 1, &["main", "foo"]), ("ftest", "[unknown]", 1, &[])],
        );
        let symbols = Symbols::from_list(vec![
            (0x100, 0x40, "qux".into()),
            (0x200, 0x40, "foo".into()),
            (0x300, 0x80, "main".into()),
        ]);
        let stacks = from_samples(&file, &Resolver::from_parts(&file, symbols, None));
        let names: Vec<Vec<&str>> =
            stacks.iter().map(|s| s.frames.iter().map(|f| f.symbol.as_str()).collect()).collect();
        assert_eq!(names, [vec!["main", "foo", "qux"], vec!["[unknown]"]]);
        assert!(stacks.iter().all(|s| s.weight == 1 && s.command == "ftest" && s.object == "ftest"));
        assert_eq!(stacks[0].frames[0].srcline, "??:0");
        assert_eq!(label(&stacks[0].frames[0], &[Key::Sym, Key::Srcline]), "main ??:0");
    }
}
