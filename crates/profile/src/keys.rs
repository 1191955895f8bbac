//! The `report --sort` keys that group a profile's frames into table entries.

use crate::profile::{Profile, Stack};

/// A column of `report --sort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// The task's command.
    Comm,
    /// The shared object.
    Dso,
    /// The function.
    Sym,
    /// The source line (`file:line`).
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

impl Profile {
    /// The values of `keys` for frame `i` of `stack`.
    pub fn key(&self, stack: &Stack, i: usize, keys: &[Key]) -> Vec<String> {
        let frame = &self.frames[stack.frames[i]];
        keys.iter()
            .map(|k| match k {
                Key::Comm => self.command(stack.task).to_owned(),
                Key::Dso => self.dso.clone(),
                Key::Sym => self.functions[frame.function].name.clone(),
                Key::Srcline => frame.srcline(),
            })
            .collect()
    }

    /// How a call-graph node names a frame: its function, with its source line when the
    /// keys hold srcline.
    pub fn label(&self, frame: usize, keys: &[Key]) -> String {
        let f = &self.frames[frame];
        let name = &self.functions[f.function].name;
        match (keys.contains(&Key::Sym), keys.contains(&Key::Srcline)) {
            (true, true) => format!("{name} {}", f.srcline()),
            (false, true) => f.srcline(),
            _ => name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn keys_and_labels_of_a_frame() {
        let file = testdata::record(&[(0, 0, 0, 0x110, &[0x215, 0x321])]);
        let p = Profile::build(&file, &testdata::resolver());
        let s = &p.stacks[0];
        assert_eq!(p.key(s, 2, &[Key::Comm, Key::Sym]), ["ftest", "qux"]);
        assert_eq!(p.key(s, 0, &[Key::Dso, Key::Srcline]), ["ftest", "??:0"]);
        assert_eq!(p.label(s.frames[0], &[Key::Sym, Key::Srcline]), "main ??:0");
        assert_eq!(p.label(s.frames[1], &DEFAULT_KEYS), "foo");
    }
}
