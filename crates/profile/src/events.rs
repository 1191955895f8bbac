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

/// A named architectural event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// perf's name for it (`r01c2` for an encoding without one).
    pub name: &'static str,
    /// Its EVENTSEL\[15:0\]: unit mask and event select.
    pub raw: u16,
}

/// The named events with their other names (`perfvm list`).
pub fn named() -> impl Iterator<Item = (Event, &'static [&'static str])> {
    events().map(|(names, raw)| (Event { name: names[0], raw }, &names[1..]))
}

/// Every event name `-e` accepts.
pub fn available() -> String {
    events().map(|(names, _)| names[0]).collect::<Vec<_>>().join(", ")
}

/// Parse one event: a name, or a raw `rUUEE` as perf writes it.
pub fn parse(spec: &str) -> Result<Event, String> {
    let spec = spec.trim();
    if let Some((names, raw)) = events().find(|(names, _)| names.contains(&spec)) {
        return Ok(Event { name: names[0], raw });
    }
    if let Some(hex) = spec.strip_prefix('r') {
        if let Ok(raw) = u16::from_str_radix(hex, 16) {
            return Ok(by_raw(raw));
        }
    }
    Err(format!("unknown event '{spec}' (available: {}, or rUUEE)", available()))
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
pub fn agent_code(event: Event, vendor: Vendor) -> String {
    let code = format!("{:#06x}", event.raw);
    match (vendor, architectural(event.raw)) {
        (Vendor::Amd, Some(arch)) => {
            let (select, umask) = arch.amd_select();
            format!("{code}=0x{umask:02x}{select:03x}")
        }
        _ => code,
    }
}

/// The event with this encoding (a raw name if it has none).
pub fn by_raw(raw: u16) -> Event {
    match events().find(|&(_, r)| r == raw) {
        Some((names, raw)) => Event { name: names[0], raw },
        None => Event { name: Box::leak(format!("r{raw:04x}").into_boxed_str()), raw },
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
    }
}
