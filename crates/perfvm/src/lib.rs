//! The `perfvm` command line as a library (the binary is `main.rs`; `perfvm-bench` builds
//! on it): parsing (`cli`, `config`, `guests`), the session layer that boots guests and
//! assembles their records and counts (`session`), the commands over it (`commands`, as
//! perf's builtin-*.c over util/session.c), and printing (`output`, `stats_text`).

mod atomic_file;
// clap's derive types: their help text is their documentation.
#[allow(missing_docs)]
pub mod cli;
pub mod commands;
pub mod config;
mod failure;
pub mod guests;
pub mod output;
pub mod session;
pub mod stats_text;

pub use failure::Failure;
