//! [`PmuEventFilter`]: which events the guest may count, with the semantics of KVM's
//! `KVM_SET_PMU_EVENT_FILTER` (Linux `arch/x86/kvm/pmu.c`, `check_pmu_event_filter`).
//!
//! # Semantics
//!
//! * A **GP counter** is allowed when its EVENTSEL's `(event select, unit mask)` pair is in
//!   `events` under [`FilterAction::Allow`], or is *not* in `events` under
//!   [`FilterAction::Deny`]. Only the event select and the unit mask (bits 15:8) take part
//!   (KVM masks the rest away, including CMASK, INV, EDGE, USR/OS). The event select is the
//!   vendor's (KVM `EVENTSEL_EVENT`): Intel's bits 7:0, AMD's 12 bits 7:0 and 35:32 (so
//!   AMD event 0x1C0 is `(0x1C0, umask)`). An Intel PMU never matches an entry above 0xFF.
//! * A **fixed counter** `j` obeys `fixed_counter_bitmap` alone: under `Allow` it counts iff
//!   bit `j` is set, under `Deny` iff bit `j` is clear. `events` does not affect fixed
//!   counters (KVM `is_fixed_event_allowed`; the bitmap "has higher priority" than the list,
//!   and in KVM's code it is the only input). Bits of counters that do not exist are
//!   accepted and ignored, as by KVM.
//! * A denied counter **never counts and never raises a PMI**: no host event is created for
//!   it (an event it had is stopped, then parked or closed per the policy). The guest still
//!   reads and writes its MSRs exactly as without a filter: no #GP, values are kept. This
//!   is what KVM does, and it lets a guest not notice the filter except by missing counts.
//! * The decision is taken whenever the counter is (re)programmed: EVENTSEL, FIXED_CTR_CTRL
//!   or GLOBAL_CTRL change, and [`crate::Pmu::set_event_filter`].
//!
//! # File format
//!
//! TOML:
//!
//! ```toml
//! action = "allow"            # or "deny"
//! fixed_counters = 0b011      # bitmap, optional (default 0)
//! events = [ { event = 0xc0, umask = 0x00 }, { event = 0x3c } ]   # umask optional, default 0
//! ```
//!
//! JSON (JSON has no hex literals, so numbers may also be strings `"0xc0"`, `"0b11"`, `"12"`;
//! TOML accepts such strings too):
//!
//! ```json
//! { "action": "allow", "fixed_counters": 3,
//!   "events": [ { "event": 192, "umask": 0 }, { "event": "0x3c" } ] }
//! ```
//!
//! `action` is required; `events` defaults to empty (under `allow`: no GP event counts);
//! `fixed_counters` defaults to 0 (under `allow`: no fixed counter counts; under `deny`:
//! all do). Unknown keys, an action other than `"allow"`/`"deny"`, an `event` or `umask`
//! outside 0..=0xff and a bitmap outside 32 bits are errors naming the line and column.
//!
//! An optional `vendor = "amd"` (or `"intel"`, the default) says whose event selects the
//! file lists: with `"amd"`, `event` may be 0..=0xfff (AMD's 12-bit event select). It
//! changes nothing else; the filter itself is vendor-neutral.
//!
//! ```
//! use pmu::{FilterAction, PmuEventFilter};
//!
//! let f = PmuEventFilter::from_toml_str(r#"
//!     action = "deny"
//!     events = [ { event = 0xc4 } ]
//! "#).unwrap();
//! assert_eq!(f.action, FilterAction::Deny);
//! assert!(!f.allows_gp(0xc4, 0x00));
//! assert!(f.allows_gp(0xc0, 0x00));
//! assert!(f.allows_fixed(0), "deny with an empty bitmap denies no fixed counter");
//!
//! let e = PmuEventFilter::from_toml_str("action = \"allow\"\nevents = [ { event = 0x100 } ]\n")
//!     .unwrap_err();
//! assert_eq!((e.line, e.column), (2, 22));
//!
//! let amd = PmuEventFilter::from_toml_str("action = \"allow\"\nvendor = \"amd\"\nevents = [ { event = 0x1c0 } ]\n")
//!     .unwrap();
//! assert!(amd.allows_gp(0x1c0, 0x00));
//! ```

use crate::vendor::Vendor;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;
use std::path::Path;
use thiserror::Error;

/// What [`PmuEventFilter::events`] lists (KVM `KVM_PMU_EVENT_ALLOW` / `KVM_PMU_EVENT_DENY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterAction {
    /// Only the listed GP events count; fixed counters count iff their bitmap bit is set.
    Allow,
    /// The listed GP events never count; fixed counters count iff their bitmap bit is clear.
    Deny,
}

/// A PMU event filter (KVM `struct kvm_pmu_event_filter`, without masked events).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PmuEventFilter {
    /// Whether `events` is an allow list or a deny list.
    pub action: FilterAction,
    /// `(event select, unit mask)` pairs: the event select as the vendor defines it (Intel
    /// EVENTSEL bits 7:0; AMD PERF_CTL bits 7:0 and 35:32 as one 12-bit number), the unit
    /// mask from bits 15:8.
    pub events: Vec<(u16, u8)>,
    /// Bit `j`: fixed counter `j` (see the module docs for how `action` applies).
    pub fixed_counter_bitmap: u32,
}

impl PmuEventFilter {
    /// A filter that lets exactly `events` count on GP counters, and fixed counters whose bit
    /// is set in `fixed_counter_bitmap`.
    pub fn allow(events: impl IntoIterator<Item = (u16, u8)>, fixed_counter_bitmap: u32) -> Self {
        PmuEventFilter { action: FilterAction::Allow, events: events.into_iter().collect(), fixed_counter_bitmap }
    }

    /// A filter that keeps `events` from counting on GP counters, and fixed counters whose
    /// bit is set in `fixed_counter_bitmap`.
    pub fn deny(events: impl IntoIterator<Item = (u16, u8)>, fixed_counter_bitmap: u32) -> Self {
        PmuEventFilter { action: FilterAction::Deny, events: events.into_iter().collect(), fixed_counter_bitmap }
    }

    /// Whether a GP counter programmed with `event` (the vendor's event select) and `umask`
    /// may count (KVM `is_gp_event_allowed`).
    pub fn allows_gp(&self, event: u16, umask: u8) -> bool {
        let listed = self.events.contains(&(event, umask));
        listed == (self.action == FilterAction::Allow)
    }

    /// Whether fixed counter `j` may count (KVM `is_fixed_event_allowed`).
    pub fn allows_fixed(&self, j: u8) -> bool {
        let bit = u32::from(j) < u32::BITS && self.fixed_counter_bitmap >> j & 1 == 1;
        bit == (self.action == FilterAction::Allow)
    }

    /// Parses the TOML file format (see the module docs).
    pub fn from_toml_str(text: &str) -> Result<Self, FilterError> {
        let wide = toml::from_str::<VendorProbe>(text).is_ok_and(|p| p.wide());
        let parsed = if wide {
            toml::from_str::<RawFilter<EventSelectAmd>>(text).map(RawFilter::into_filter)
        } else {
            toml::from_str::<RawFilter<EventSelect>>(text).map(RawFilter::into_filter)
        };
        parsed.map_err(|e| {
            let (line, column) = e.span().map_or((1, 1), |span| line_column(text, span.start));
            FilterError { format: FilterFormat::Toml, line, column, message: e.message().trim_end().to_owned() }
        })
    }

    /// Parses the JSON file format (see the module docs).
    pub fn from_json_str(text: &str) -> Result<Self, FilterError> {
        let wide = serde_json::from_str::<VendorProbe>(text).is_ok_and(|p| p.wide());
        let parsed = if wide {
            serde_json::from_str::<RawFilter<EventSelectAmd>>(text).map(RawFilter::into_filter)
        } else {
            serde_json::from_str::<RawFilter<EventSelect>>(text).map(RawFilter::into_filter)
        };
        parsed.map_err(|e| FilterError {
            format: FilterFormat::Json,
            line: e.line(),
            column: e.column(),
            message: strip_json_position(&e.to_string()),
        })
    }

    /// Parses `text` in `format`.
    pub fn parse(text: &str, format: FilterFormat) -> Result<Self, FilterError> {
        match format {
            FilterFormat::Toml => Self::from_toml_str(text),
            FilterFormat::Json => Self::from_json_str(text),
        }
    }
}

/// The two file formats of a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterFormat {
    /// TOML ([`PmuEventFilter::from_toml_str`]).
    Toml,
    /// JSON ([`PmuEventFilter::from_json_str`]).
    Json,
}

impl FilterFormat {
    /// The format a file name implies: `.json` (any case) is JSON, anything else TOML.
    pub fn from_path(path: &Path) -> FilterFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => FilterFormat::Json,
            _ => FilterFormat::Toml,
        }
    }
}

impl fmt::Display for FilterFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FilterFormat::Toml => "TOML",
            FilterFormat::Json => "JSON",
        })
    }
}

/// A filter file that cannot be used, with where the problem is (1-based line and column;
/// line 1, column 1 when the parser gives no position, e.g. a missing required key in TOML).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("Invalid {format} event filter at line {line}, column {column}: {message}")]
pub struct FilterError {
    /// Format being parsed.
    pub format: FilterFormat,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..floor_char_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn floor_char_boundary(text: &str, offset: usize) -> usize {
    let mut i = offset.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// serde_json's Display appends " at line L column C"; the position has its own fields.
fn strip_json_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

/// First pass over a file: only its `vendor`, which decides how wide `event` may be. Any
/// error here (syntax, a bad vendor) is left to the full parse, which reports it.
#[derive(Deserialize)]
struct VendorProbe {
    #[serde(default)]
    vendor: Option<Vendor>,
}

impl VendorProbe {
    /// 12-bit event selects.
    fn wide(&self) -> bool {
        self.vendor == Some(Vendor::Amd)
    }
}

/// The file format as serde sees it, with event selects of type `E` (8 or 12 bits).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilter<E> {
    action: RawAction,
    /// Checked here so that a bad value is reported with its position.
    #[serde(default)]
    #[allow(dead_code)]
    vendor: Option<Vendor>,
    #[serde(default)]
    fixed_counters: Bitmap,
    #[serde(default = "Vec::new")]
    events: Vec<RawEvent<E>>,
}

impl<E: Into<u16>> RawFilter<E> {
    fn into_filter(self) -> PmuEventFilter {
        PmuEventFilter {
            action: self.action.0,
            events: self.events.into_iter().map(|e| (e.event.into(), e.umask.0)).collect(),
            fixed_counter_bitmap: self.fixed_counters.0,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent<E> {
    event: E,
    #[serde(default)]
    umask: Umask,
}

struct RawAction(FilterAction);

impl<'de> Deserialize<'de> for RawAction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = RawAction;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"allow\" or \"deny\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawAction, E> {
                match s {
                    "allow" => Ok(RawAction(FilterAction::Allow)),
                    "deny" => Ok(RawAction(FilterAction::Deny)),
                    _ => Err(E::custom(format_args!("unknown action `{s}`, expected \"allow\" or \"deny\""))),
                }
            }
        }
        d.deserialize_str(V)
    }
}

/// An unsigned integer no larger than `max`, given as a number or as a string in decimal,
/// `0x` hex or `0b` binary.
fn deserialize_uint<'de, D: Deserializer<'de>>(d: D, what: &'static str, max: u64) -> Result<u64, D::Error> {
    struct V {
        what: &'static str,
        max: u64,
    }
    impl V {
        fn check<E: de::Error>(&self, v: u64) -> Result<u64, E> {
            if v > self.max {
                Err(E::custom(format_args!("{} {v:#x} is out of range (0..={:#x})", self.what, self.max)))
            } else {
                Ok(v)
            }
        }
    }
    impl Visitor<'_> for V {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{} as an integer in 0..={:#x}", self.what, self.max)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            self.check(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            match u64::try_from(v) {
                Ok(v) => self.check(v),
                Err(_) => Err(E::custom(format_args!("{} {v} is negative (expected 0..={:#x})", self.what, self.max))),
            }
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<u64, E> {
            let t = s.trim();
            let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or(t.strip_prefix("0X")) {
                (h, 16)
            } else if let Some(b) = t.strip_prefix("0b").or(t.strip_prefix("0B")) {
                (b, 2)
            } else {
                (t, 10)
            };
            let v = u64::from_str_radix(&digits.replace('_', ""), radix)
                .map_err(|_| E::custom(format_args!("{} `{s}` is not an integer", self.what)))?;
            self.check(v)
        }
    }
    d.deserialize_any(V { what, max })
}

macro_rules! uint_field {
    ($name:ident, $t:ty, $what:literal) => {
        uint_field!($name, $t, $what, <$t>::MAX);
    };
    ($name:ident, $t:ty, $what:literal, $max:expr) => {
        #[derive(Default)]
        struct $name($t);
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = deserialize_uint(d, $what, u64::from($max))?;
                Ok($name(<$t>::try_from(v).expect("range checked")))
            }
        }
    };
}

impl From<EventSelect> for u16 {
    fn from(v: EventSelect) -> u16 {
        v.0.into()
    }
}

impl From<EventSelectAmd> for u16 {
    fn from(v: EventSelectAmd) -> u16 {
        v.0
    }
}

uint_field!(EventSelect, u8, "event");
uint_field!(EventSelectAmd, u16, "event", 0xFFFu16);
uint_field!(Umask, u8, "umask");
uint_field!(Bitmap, u32, "fixed_counters");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gp_rules_follow_kvm() {
        let allow = PmuEventFilter::allow([(0xC0, 0x00)], 0);
        assert!(allow.allows_gp(0xC0, 0x00));
        assert!(!allow.allows_gp(0xC0, 0x01), "umask is part of the key");
        assert!(!allow.allows_gp(0xC4, 0x00));
        let deny = PmuEventFilter::deny([(0xC0, 0x00)], 0);
        assert!(!deny.allows_gp(0xC0, 0x00));
        assert!(deny.allows_gp(0xC0, 0x01));
        assert!(deny.allows_gp(0xC4, 0x00));
        assert!(!PmuEventFilter::allow([], 0).allows_gp(0x3C, 0));
        assert!(PmuEventFilter::deny([], 0).allows_gp(0x3C, 0));
    }

    #[test]
    fn fixed_rules_follow_the_bitmap_only() {
        for bitmap in 0..8u32 {
            let allow = PmuEventFilter::allow([(0xC0, 0), (0x3C, 0), (0x3C, 1)], bitmap);
            let deny = PmuEventFilter::deny([(0xC0, 0), (0x3C, 0), (0x3C, 1)], bitmap);
            for j in 0..3u8 {
                let set = bitmap >> j & 1 == 1;
                assert_eq!(allow.allows_fixed(j), set, "allow {bitmap:#b} ctr {j}");
                assert_eq!(deny.allows_fixed(j), !set, "deny {bitmap:#b} ctr {j}");
            }
        }
        assert!(!PmuEventFilter::allow([], u32::MAX).allows_fixed(200));
        assert!(PmuEventFilter::deny([], u32::MAX).allows_fixed(200));
    }

    #[test]
    fn toml_full() {
        let f = PmuEventFilter::from_toml_str(
            "action = \"allow\"            # or \"deny\"\n\
             fixed_counters = 0b011\n\
             events = [ { event = 0xc0, umask = 0x00 }, { event = 0x3c }, { event = \"0x2e\", umask = 79 } ]\n",
        )
        .unwrap();
        assert_eq!(f, PmuEventFilter::allow([(0xC0, 0), (0x3C, 0), (0x2E, 0x4F)], 0b011));
    }

    #[test]
    fn toml_array_of_tables() {
        let f = PmuEventFilter::from_toml_str(
            "action = \"deny\"\n[[events]]\nevent = 0xc4\n[[events]]\nevent = 0x2e\numask = 0x41\n",
        )
        .unwrap();
        assert_eq!(f, PmuEventFilter::deny([(0xC4, 0), (0x2E, 0x41)], 0));
    }

    #[test]
    fn toml_defaults() {
        let f = PmuEventFilter::from_toml_str("action = \"deny\"").unwrap();
        assert_eq!(f, PmuEventFilter::deny([], 0));
    }

    fn toml_err(s: &str) -> FilterError {
        PmuEventFilter::from_toml_str(s).unwrap_err()
    }

    fn json_err(s: &str) -> FilterError {
        PmuEventFilter::from_json_str(s).unwrap_err()
    }

    #[test]
    fn toml_errors_name_the_line() {
        let e = toml_err("action = \"allow\"\nevents = [\n  { event = 0xc0 },\n  { event = 0x1c0 },\n]\n");
        assert_eq!((e.line, e.column), (4, 13), "{e}");
        assert!(e.message.contains("event 0x1c0 is out of range"), "{e}");

        let e = toml_err("action = \"allow\"\nevents = [ { event = 0xc0, umask = 256 } ]\n");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("umask 0x100"), "{e}");

        let e = toml_err("action = \"maybe\"\n");
        assert_eq!((e.line, e.column), (1, 10), "{e}");
        assert!(e.message.contains("unknown action `maybe`"), "{e}");

        let e = toml_err("action = \"deny\"\n\nfixed_counter = 1\n");
        assert_eq!((e.line, e.column), (3, 1), "{e}");
        assert!(e.message.contains("unknown field `fixed_counter`"), "{e}");

        let e = toml_err("action = \"deny\"\nevents = [ { event = 1, mask = 2 } ]\n");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("unknown field `mask`"), "{e}");

        let e = toml_err("action = \"deny\"\nfixed_counters = 0x1_0000_0000\n");
        assert_eq!(e.line, 2, "{e}");

        let e = toml_err("action = \"deny\"\nevents = [ { event = -1 } ]\n");
        assert!(e.message.contains("negative"), "{e}");

        let e = toml_err("action = \"deny\"\nevents = [ { event = \"c0\" } ]\n");
        assert!(e.message.contains("not an integer"), "{e}");

        let e = toml_err("action = \"deny\"\nevents = [ { umask = 1 } ]\n");
        assert!(e.message.contains("missing field `event`"), "{e}");

        let e = toml_err("events = []\n");
        assert!(e.message.contains("missing field `action`"), "{e}");

        let e = toml_err("action = \"deny\"\naction = \"allow\"\n");
        assert_eq!(e.line, 2, "{e}");

        let e = toml_err("action = deny\n");
        assert_eq!(e.line, 1, "{e}");
        assert_eq!(e.format, FilterFormat::Toml);
        assert!(e.to_string().starts_with("Invalid TOML event filter at line 1"), "{e}");
    }

    #[test]
    fn amd_event_selects_are_twelve_bits() {
        let f = PmuEventFilter::from_toml_str(
            "action = \"deny\"\nvendor = \"amd\"\nevents = [ { event = 0x1c0 }, { event = 0x60, umask = 0xff } ]\n",
        )
        .unwrap();
        assert_eq!(f, PmuEventFilter::deny([(0x1C0, 0), (0x60, 0xFF)], 0));
        assert!(!f.allows_gp(0x1C0, 0) && f.allows_gp(0xC0, 0), "0x1C0 is not 0xC0");
        let e = toml_err("action = \"deny\"\nvendor = \"amd\"\nevents = [ { event = 0x1000 } ]\n");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("event 0x1000 is out of range (0..=0xfff)"), "{e}");
        let e = toml_err("action = \"deny\"\nvendor = \"intel\"\nevents = [ { event = 0x1c0 } ]\n");
        assert!(e.message.contains("event 0x1c0 is out of range (0..=0xff)"), "{e}");
        let e = toml_err("action = \"deny\"\nvendor = \"arm\"\n");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("unknown variant `arm`"), "{e}");
        // The vendor may come after the events.
        let f = PmuEventFilter::from_json_str(
            r#"{ "action": "allow", "events": [ { "event": "0x120" } ], "vendor": "amd" }"#,
        )
        .unwrap();
        assert_eq!(f, PmuEventFilter::allow([(0x120, 0)], 0));
        let e =
            json_err("{\n  \"action\": \"allow\",\n  \"events\": [ { \"event\": 4096 } ],\n  \"vendor\": \"amd\"\n}");
        assert_eq!(e.line, 3, "{e}");
    }

    #[test]
    fn json_full() {
        let f = PmuEventFilter::from_json_str(
            r#"{ "action": "allow", "fixed_counters": 3,
                 "events": [ { "event": 192, "umask": 0 }, { "event": "0x3c" } ] }"#,
        )
        .unwrap();
        assert_eq!(f, PmuEventFilter::allow([(0xC0, 0), (0x3C, 0)], 3));
        let f = PmuEventFilter::from_json_str(r#"{"action":"deny"}"#).unwrap();
        assert_eq!(f, PmuEventFilter::deny([], 0));
    }

    #[test]
    fn json_errors_name_the_line() {
        let e = json_err("{\n  \"action\": \"allow\",\n  \"events\": [ { \"event\": 256 } ]\n}");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("event 0x100 is out of range"), "{e}");
        assert!(!e.message.contains(" at line "), "position only once: {e}");

        let e = json_err("{\n  \"action\": \"permit\"\n}");
        assert_eq!(e.line, 2, "{e}");
        assert!(e.message.contains("unknown action `permit`"), "{e}");

        let e = json_err("{\n  \"action\": \"deny\",\n  \"extra\": 1\n}");
        assert_eq!(e.line, 3, "{e}");
        assert!(e.message.contains("unknown field `extra`"), "{e}");

        let e = json_err("{\n  \"action\": \"deny\",\n  \"events\": [ { \"event\": \"0x1ff\" } ]\n}");
        assert_eq!(e.line, 3, "{e}");

        let e = json_err("{ \"action\": \"deny\", ");
        assert_eq!(e.line, 1, "{e}");
        assert_eq!(e.format, FilterFormat::Json);
        assert!(e.to_string().starts_with("Invalid JSON event filter at line 1"), "{e}");
    }

    #[test]
    fn format_from_path() {
        assert_eq!(FilterFormat::from_path(Path::new("f.json")), FilterFormat::Json);
        assert_eq!(FilterFormat::from_path(Path::new("F.JSON")), FilterFormat::Json);
        assert_eq!(FilterFormat::from_path(Path::new("f.toml")), FilterFormat::Toml);
        assert_eq!(FilterFormat::from_path(Path::new("filter")), FilterFormat::Toml);
        assert_eq!(
            PmuEventFilter::parse("{\"action\":\"deny\"}", FilterFormat::Json),
            PmuEventFilter::parse("action = 'deny'", FilterFormat::Toml)
        );
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("abc", 0), (1, 1));
        assert_eq!(line_column("a\nbc", 3), (2, 2));
        assert_eq!(line_column("é\nxé", 6), (2, 3));
        assert_eq!(line_column("é\nxé", 5), (2, 2), "inside a character");
        assert_eq!(line_column("ab", 99), (1, 3));
    }
}
