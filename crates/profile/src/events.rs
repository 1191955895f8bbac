//! Event names as perf spells them, and their architectural encodings (`EVENTSEL[15:0]`).

use pmu::{ArchEvent, Vendor};

/// perf's names for an architectural event; the first is canonical. Its encoding is the
/// model's (`ArchEvent::select`).
fn names(event: ArchEvent) -> &'static [&'static str] {
    match event {
        ArchEvent::CoreCycles => &["cycles", "cpu-cycles"],
        ArchEvent::Instructions => &["instructions"],
        ArchEvent::RefCycles => &["ref-cycles"],
        ArchEvent::LlcReferences => &["cache-references"],
        ArchEvent::LlcMisses => &["cache-misses"],
        ArchEvent::Branches => &["branches", "branch-instructions"],
        ArchEvent::BranchMisses => &["branch-misses"],
    }
}

/// `EVENTSEL[15:0]` of `event`: unit mask and event select.
fn raw_of(event: ArchEvent) -> u16 {
    let (select, umask) = event.select();
    u16::from(umask) << 8 | u16::from(select)
}

/// (names, raw encoding) of every architectural event, in CPUID order.
fn events() -> impl Iterator<Item = (&'static [&'static str], u16)> {
    ArchEvent::ALL.into_iter().map(|e| (names(e), raw_of(e)))
}

/// Which privilege levels an event counts at: perf's modifiers `:u` (user, CPL > 0) and
/// `:k` (kernel, CPL 0); none, or both (`:uk`), counts at every level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Levels {
    /// Every level (EVENTSEL.USR and OS).
    #[default]
    All,
    /// User mode only (USR).
    User,
    /// The kernel only (OS).
    Kernel,
}

impl Levels {
    /// The modifier as perf writes it after the name (`""`, `":u"`, `":k"`).
    pub fn suffix(self) -> &'static str {
        match self {
            Levels::All => "",
            Levels::User => ":u",
            Levels::Kernel => ":k",
        }
    }

    /// perf's modifier letters: any of `u`, `k`, once each.
    fn parse(mods: &str) -> Option<Levels> {
        let (u, k) = (mods.matches('u').count(), mods.matches('k').count());
        if mods.is_empty() || u > 1 || k > 1 || u + k != mods.len() {
            return None;
        }
        Some(match (u, k) {
            (1, 0) => Levels::User,
            (0, 1) => Levels::Kernel,
            _ => Levels::All,
        })
    }
}

/// A named architectural event, with the privilege levels it counts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// perf's name for it (`r01c2` for an encoding without one).
    pub name: &'static str,
    /// Its EVENTSEL\[15:0\]: unit mask and event select.
    pub raw: u16,
    /// Its modifiers.
    pub levels: Levels,
}

impl Event {
    /// Its name with its modifier, as perf prints it (`cycles:u`).
    pub fn display(&self) -> String {
        format!("{}{}", self.name, self.levels.suffix())
    }
}

/// The named events with their other names (`perfvm list`).
pub fn named() -> impl Iterator<Item = (Event, &'static [&'static str])> {
    events().map(|(names, raw)| (Event { name: names[0], raw, levels: Levels::All }, &names[1..]))
}

/// Every event name `-e` accepts.
pub fn available() -> String {
    events().map(|(names, _)| names[0]).collect::<Vec<_>>().join(", ")
}

/// Parse one event: a name, or a raw `rUUEE` as perf writes it, optionally followed by
/// perf's modifiers `:u`, `:k`, `:uk`.
pub fn parse(spec: &str) -> Result<Event, String> {
    let spec = spec.trim();
    let (base, levels) = match spec.split_once(':') {
        None => (spec, Levels::All),
        Some((base, mods)) => match Levels::parse(mods) {
            Some(levels) => (base, levels),
            None => return Err(format!("bad modifier ':{mods}' in '{spec}' (perfvm takes :u, :k, :uk)")),
        },
    };
    let event =
        parse_base(base).ok_or_else(|| format!("unknown event '{spec}' (available: {}, or rUUEE)", available()))?;
    Ok(Event { levels, ..event })
}

/// An event's name or `rUUEE`, without modifiers.
fn parse_base(spec: &str) -> Option<Event> {
    if let Some((names, raw)) = events().find(|(names, _)| names.contains(&spec)) {
        return Some(Event { name: names[0], raw, levels: Levels::All });
    }
    let raw = u16::from_str_radix(spec.strip_prefix('r')?, 16).ok()?;
    Some(by_raw(raw))
}

/// Parse a comma-separated list.
pub fn parse_list(list: &str) -> Result<Vec<Event>, String> {
    let events: Vec<Event> = list.split(',').filter(|s| !s.trim().is_empty()).map(parse).collect::<Result<_, _>>()?;
    if events.is_empty() {
        return Err(format!("no events given (available: {})", available()));
    }
    Ok(events)
}

/// The architectural event this encoding selects, if any (nothing counts the others).
pub fn architectural(raw: u16) -> Option<ArchEvent> {
    ArchEvent::from_select(raw as u8, (raw >> 8) as u8)
}

/// The event as the perf agent's `-e` takes it for a guest of `vendor`: Intel's `0xUUEE`;
/// under AMD, `0xUUEE=0xUUEEE` (perfvm's code, which counts and samples carry back, then
/// the AMD PERF_CTL encoding: unit mask, 12-bit event select), or the bare code for an event
/// with no AMD encoding (the agent then reports it not counted).
///
/// A modifier follows as `:u` or `:k` (the agent programs USR or OS alone; both otherwise).
pub fn agent_code(event: Event, vendor: Vendor) -> String {
    let code = format!("{:#06x}", event.raw);
    let code = match (vendor, architectural(event.raw)) {
        (Vendor::Amd, Some(arch)) => {
            let (select, umask) = arch.amd_select();
            format!("{code}=0x{umask:02x}{select:03x}")
        }
        _ => code,
    };
    code + event.levels.suffix()
}

/// The event with this encoding (a raw name if it has none).
pub fn by_raw(raw: u16) -> Event {
    match events().find(|&(_, r)| r == raw) {
        Some((names, raw)) => Event { name: names[0], raw, levels: Levels::All },
        None => Event { name: Box::leak(format!("r{raw:04x}").into_boxed_str()), raw, levels: Levels::All },
    }
}

/// Whether the event is one of the cycles events (core or reference), which a clock can
/// sample by frequency.
pub fn is_cycles(event: Event) -> bool {
    matches!(architectural(event.raw), Some(ArchEvent::CoreCycles | ArchEvent::RefCycles))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_aliases_and_raw() {
        assert_eq!(parse("cycles").unwrap().raw, 0x003c);
        assert_eq!(parse("cpu-cycles").unwrap().name, "cycles");
        assert_eq!(parse("r00c0").unwrap().name, "instructions");
        assert_eq!(parse("r1234").unwrap().name, "r1234");
        let err = parse("bogus").unwrap_err();
        assert!(err.contains("unknown event 'bogus'") && err.contains("branch-misses"), "{err}");
        assert_eq!(parse_list("cycles,instructions").unwrap().len(), 2);
        assert!(parse_list(",").is_err());
    }

    #[test]
    fn agent_codes_per_vendor() {
        use Vendor::{Amd, Intel};
        let code = |name, vendor| agent_code(parse(name).unwrap(), vendor);
        assert_eq!(code("cycles", Intel), "0x003c");
        assert_eq!(code("cycles", Amd), "0x003c=0x00076");
        assert_eq!(code("instructions", Amd), "0x00c0=0x000c0");
        assert_eq!(code("branches", Amd), "0x00c4=0x000c2");
        assert_eq!(code("branch-misses", Amd), "0x00c5=0x000c3");
        assert_eq!(code("ref-cycles", Amd), "0x013c=0x00120");
        assert_eq!(code("cache-references", Amd), "0x4f2e=0xff060");
        assert_eq!(code("r01c2", Amd), "0x01c2", "no AMD encoding: the bare code");
        assert_eq!(code("cycles:u", Intel), "0x003c:u");
        assert_eq!(code("cycles:k", Amd), "0x003c=0x00076:k");
        assert_eq!(code("cycles:uk", Intel), "0x003c");
    }

    #[test]
    fn modifiers_as_perf_takes_them() {
        let levels = |spec| parse(spec).map(|e| e.levels);
        assert_eq!(levels("cycles:u"), Ok(Levels::User));
        assert_eq!(levels("instructions:k"), Ok(Levels::Kernel));
        assert_eq!(levels("instructions:uk"), Ok(Levels::All));
        assert_eq!(levels("instructions:ku"), Ok(Levels::All));
        assert_eq!(levels("r00c0:k"), Ok(Levels::Kernel));
        assert_eq!(parse("cycles:k").unwrap().display(), "cycles:k");
        assert_eq!(parse("cycles:uk").unwrap().display(), "cycles");
        for bad in ["cycles:", "cycles:x", "cycles:uu", "cycles:p"] {
            assert!(parse(bad).unwrap_err().contains("bad modifier"), "{bad}");
        }
        assert!(parse("bogus:u").unwrap_err().contains("unknown event 'bogus:u'"));
    }
}
