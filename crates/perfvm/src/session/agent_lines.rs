//! The guest perf agent's chatter (its `agent: ...` console lines) goes to stderr, where perf
//! prints its own; the workload's output stays on stdout. The VMM mirrors the guest console
//! on stdout as it comes, so while a guest runs under `stat` or `record`, stdout is a pipe
//! that a thread splits line by line.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::thread::JoinHandle;

const AGENT: &[u8] = b"agent: ";

/// The agent's per-event totals: the `stat` table shows them again (`<not counted>` once,
/// not twice) and `record` keeps them in its file.
fn repeats_the_results(line: &[u8]) -> bool {
    [&b"agent: 0x"[..], b"agent: task ", b"agent: outside tasks "].iter().any(|p| line.starts_with(p))
}

/// Splits a byte stream into the workload's output and the agent's lines. A line that cannot
/// be the agent's is passed on as soon as that is known, so prompts without a newline show.
#[derive(Debug, Default)]
struct Splitter {
    /// The start of a line that may still be the agent's.
    pending: Vec<u8>,
    /// The current line is the workload's and is being passed through.
    passing: bool,
}

impl Splitter {
    fn feed(&mut self, mut bytes: &[u8], out: &mut impl Write, err: &mut impl Write) -> io::Result<()> {
        while !bytes.is_empty() {
            let end = bytes.iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| i + 1);
            let (piece, rest) = bytes.split_at(end);
            bytes = rest;
            if self.passing {
                out.write_all(piece)?;
            } else {
                self.pending.extend_from_slice(piece);
                let known = self.pending.len().min(AGENT.len());
                if !AGENT.starts_with(&self.pending[..known]) {
                    out.write_all(&self.pending)?;
                    self.pending.clear();
                    self.passing = true;
                } else if self.pending.ends_with(b"\n") {
                    self.agent_line(err)?;
                }
            }
            if piece.ends_with(b"\n") {
                self.passing = false;
                out.flush()?;
            }
        }
        Ok(())
    }

    fn agent_line(&mut self, err: &mut impl Write) -> io::Result<()> {
        if !repeats_the_results(&self.pending) {
            err.write_all(&self.pending)?;
        }
        self.pending.clear();
        Ok(())
    }

    /// The stream ended: a last line without its newline.
    fn finish(&mut self, out: &mut impl Write, err: &mut impl Write) -> io::Result<()> {
        if self.pending.starts_with(AGENT) {
            self.agent_line(err)?;
        }
        out.write_all(&std::mem::take(&mut self.pending))?;
        out.flush()
    }
}

/// While alive, stdout goes through a [`Splitter`]; dropping it restores stdout and waits
/// for the last line.
#[derive(Debug)]
pub struct AgentLinesToStderr {
    stdout: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl AgentLinesToStderr {
    /// Start splitting; None where stdout cannot be redirected (the console then stays
    /// whole on stdout, as before).
    pub fn start() -> Option<Self> {
        io::stdout().flush().ok()?;
        let (mut reader, writer) = io::pipe().ok()?;
        let stdout = io::stdout().as_fd().try_clone_to_owned().ok()?;
        let mut out = std::fs::File::from(stdout.try_clone().ok()?);
        // SAFETY: dup2 onto fd 1 with a pipe end we own; fd 1 stays open throughout.
        if unsafe { libc::dup2(writer.as_raw_fd(), 1) } < 0 {
            return None;
        }
        drop(writer); // fd 1 is now the pipe's only write end: restoring it ends the thread
        let thread = std::thread::Builder::new().name("agent-lines".into()).spawn(move || {
            // A helper: it only reads the pipe and writes to stdout and stderr.
            let confined = vmm::confine::confine_thread(vmm::confine::ThreadKind::Helper);
            if let Err(e) = &confined {
                let _ = writeln!(io::stderr(), "perfvm: {e}");
            }
            let (mut splitter, mut buf) = (Splitter::default(), [0u8; 4096]);
            let mut err = io::stderr();
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                // A closed stdout or stderr must not stop the guest: keep draining the pipe.
                let _ = splitter.feed(&buf[..n], &mut out, &mut err);
            }
            let _ = splitter.finish(&mut out, &mut err);
        });
        let thread = thread.expect("spawning the agent-lines thread");
        Some(AgentLinesToStderr { stdout, thread: Some(thread) })
    }
}

impl Drop for AgentLinesToStderr {
    fn drop(&mut self) {
        let _ = io::stdout().flush();
        // SAFETY: puts the saved stdout back on fd 1, which closes the pipe's write end.
        unsafe { libc::dup2(self.stdout.as_raw_fd(), 1) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `chunks`, return (stdout, stderr).
    fn split(chunks: &[&str]) -> (String, String) {
        let (mut s, mut out, mut err) = (Splitter::default(), Vec::new(), Vec::new());
        for c in chunks {
            s.feed(c.as_bytes(), &mut out, &mut err).unwrap();
        }
        s.finish(&mut out, &mut err).unwrap();
        (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    }

    #[test]
    fn agent_lines_go_to_stderr_without_the_totals() {
        let (out, err) = split(&[
            "ftest: itera",
            "tions=5\nage",
            "nt: pv page v3\nagent: 0x00c0 instructions 5 (fixed 0)\n",
            "agent: task 1 task-a 0x00c0 3\nagent: outside tasks 0x00c0 2\nagents\n\nagent: samp",
            "les 3\nprompt> ",
        ]);
        assert_eq!(out, "ftest: iterations=5\nagents\n\nprompt> ");
        assert_eq!(err, "agent: pv page v3\nagent: samples 3\n");
        assert_eq!(split(&["x\nagent: cut sho"]), ("x\n".into(), "agent: cut sho".into()));
    }
}
