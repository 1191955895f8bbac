//! The commands, one file each (perf's builtin-*.c): flags checked, the session layer
//! asked, the results printed or written.

pub mod bench;
pub mod list;
pub mod record;
pub mod report;
pub mod run;
pub mod script;
pub mod stat;
