//! perfvm's profile library: one model behind every view of a recorded profile.
//!
//! * [`Record`] is the file `perfvm record` writes: the raw samples of one or more events,
//!   stored once, with what resolving them needs (docs/RECORD.md); `perfvm-record-2` and
//!   `perfvm-record-1` files are converted on load.
//! * [`Resolver`] is the one resolver: an address to its function and source line from the
//!   guest ELF; a return address is looked up at the byte before it ([`Site`]).
//! * [`Profile`] is the one aggregation: every address resolved once, the samples merged
//!   into stacks weighted by their periods.
//! * The views draw from a [`Profile`]: `report`'s tables and call graphs ([`callgraph`],
//!   [`report`]), `script`'s text ([`script`]), folded stacks for flamegraphs
//!   ([`Profile::folded`]), [`speedscope`] and [`pprof`] exports.
//!
//! Beside profiles, the rest of perf's data that the CLI only prints: event names
//! ([`events`]), the perf agent's orders ([`agent`]) and `perf stat`'s model of counts
//! ([`counts`]), and `perfvm bench`'s measurements ([`measure`]) in tables built once for
//! their text and JSON ([`table`]).
//!
//! ```
//! use profile::{Profile, Record, Resolver};
//! # fn show(record: &Record) {
//! let (resolver, warnings) = Resolver::load(std::path::Path::new(&record.elf), false);
//! let profile = Profile::build(record, &resolver);
//! print!("{}", profile.folded());
//! # }
//! ```

pub mod agent;
pub mod bounded;
pub mod callgraph;
pub mod counts;
pub mod events;
pub mod format;
pub mod keys;
pub mod legacy;
pub mod measure;
pub mod pprof;
pub mod profile;
pub mod record;
pub mod report;
pub mod resolve;
pub mod script;
pub mod speedscope;
pub mod srcline;
pub mod symbols;
pub mod table;
#[cfg(test)]
mod testdata;
/// Builders of small ELF images with function symbols, for tests of this crate and its users.
pub mod testelf;
#[cfg(test)]
mod views;

pub use keys::{Key, DEFAULT_KEYS};
pub use profile::{Profile, UNKNOWN};
pub use record::{LoadError, Mode, Notifications, Record, Sample, SampledEvent, FORMAT};
pub use resolve::{Resolver, Site};
