//! How a command fails: one line on stderr and perf's exit conventions (bad input 2, a
//! failure to read or write or of perfvm itself 1, a signal 128 + its number).

use std::io;
use thiserror::Error;

/// A failure reported as one line on stderr with an exit code.
#[derive(Debug, Error)]
pub enum Failure {
    /// Bad input: a flag or value, or a file the user named that is missing or malformed
    /// (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Reading or writing failed for another reason, or perfvm itself did (exit 1).
    #[error("{0}")]
    Failed(String),
    /// The run ended with a status of its own (the guest's, or the VMM's end).
    #[error("{message}")]
    Status {
        /// The exit code.
        code: i32,
        /// What happened.
        message: String,
    },
    /// SIGINT or SIGTERM stopped the work (exit 130 or 143, as a shell reports it).
    #[error("{what} interrupted by {}", vmm::vstate::exit::stop_signal_name(*signal))]
    Interrupted {
        /// What was stopped.
        what: String,
        /// The signal.
        signal: i32,
    },
}

impl Failure {
    /// Bad input from the user.
    pub fn usage(message: impl Into<String>) -> Self {
        Failure::Usage(message.into())
    }

    /// A failure of I/O or of perfvm itself.
    pub fn failed(message: impl Into<String>) -> Self {
        Failure::Failed(message.into())
    }

    /// SIGINT or SIGTERM stopped `what`.
    pub fn interrupted(what: &str, signal: i32) -> Self {
        Failure::Interrupted { what: what.to_owned(), signal }
    }

    /// `action` (e.g. "cannot write") on `path` failed with `e`: the user's input where the
    /// path itself is wrong (missing, or a directory), an I/O failure otherwise.
    pub fn io(action: &str, path: &str, e: &io::Error) -> Self {
        let message = format!("{action} {path}: {e}");
        match e.kind() {
            io::ErrorKind::NotFound
            | io::ErrorKind::NotADirectory
            | io::ErrorKind::IsADirectory
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::InvalidFilename => Failure::Usage(message),
            _ => Failure::Failed(message),
        }
    }

    /// The process exit code.
    pub fn code(&self) -> i32 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Failed(_) => 1,
            Failure::Status { code, .. } => *code,
            Failure::Interrupted { signal, .. } => 128 + signal,
        }
    }
}

impl From<profile::LoadError> for Failure {
    fn from(e: profile::LoadError) -> Self {
        match &e {
            profile::LoadError::Read { path, source } => Failure::io("cannot read", path, source),
            _ => Failure::Usage(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_perfs_conventions() {
        assert_eq!(Failure::usage("x").code(), 2);
        assert_eq!(Failure::failed("x").code(), 1);
        assert_eq!(Failure::interrupted("bench", libc::SIGINT).to_string(), "bench interrupted by SIGINT");
        assert_eq!(Failure::interrupted("bench", libc::SIGTERM).code(), 143);
        let missing = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(Failure::io("cannot write", "/x/y", &missing).code(), 2);
        let full = io::Error::from_raw_os_error(libc::ENOSPC);
        let f = Failure::io("cannot write", "/dev/full", &full);
        assert_eq!((f.code(), f.to_string().starts_with("cannot write /dev/full: ")), (1, true));
    }
}
