//! The 16550 UART at 0x3f8 (vm-superio), printing to the console or capturing it.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use vm_superio::{serial::NoEvents, Serial, Trigger};

/// Interrupts from the UART are not wired: our guests poll the line-status register.
#[derive(Debug)]
pub struct NoInterrupt;

impl Trigger for NoInterrupt {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Where guest console bytes go. Capture is bounded so a chatty guest cannot eat host memory.
#[derive(Debug, Clone)]
pub struct Console {
    inner: Arc<Mutex<ConsoleInner>>,
}

#[derive(Debug)]
struct ConsoleInner {
    to_stdout: bool,
    captured: Vec<u8>,
    dropped: u64,
    first_byte: Option<Instant>,
}

/// Most console bytes kept in capture mode.
pub const CAPTURE_LIMIT: usize = 16 << 20;

impl Console {
    /// Print guest output on stdout as it comes.
    pub fn stdout() -> Self {
        Self::new(true)
    }

    /// Keep guest output in memory (for `--json`).
    pub fn capture() -> Self {
        Self::new(false)
    }

    fn new(to_stdout: bool) -> Self {
        let inner = ConsoleInner { to_stdout, captured: Vec::new(), dropped: 0, first_byte: None };
        Console { inner: Arc::new(Mutex::new(inner)) }
    }

    /// Everything captured so far.
    pub fn captured(&self) -> Vec<u8> {
        self.inner.lock().unwrap().captured.clone()
    }

    /// Bytes dropped because the capture buffer was full.
    pub fn dropped(&self) -> u64 {
        self.inner.lock().unwrap().dropped
    }

    /// When the guest wrote its first byte.
    pub fn first_byte(&self) -> Option<Instant> {
        self.inner.lock().unwrap().first_byte
    }
}

impl Write for Console {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut inner = self.inner.lock().unwrap();
        inner.first_byte.get_or_insert_with(Instant::now);
        if inner.to_stdout {
            let mut out = io::stdout().lock();
            out.write_all(buf)?;
            if buf.contains(&b'\n') {
                out.flush()?;
            }
        } else {
            let room = CAPTURE_LIMIT.saturating_sub(inner.captured.len());
            let keep = buf.len().min(room);
            inner.captured.extend_from_slice(&buf[..keep]);
            inner.dropped += (buf.len() - keep) as u64;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.inner.lock().unwrap().to_stdout {
            io::stdout().flush()?;
        }
        Ok(())
    }
}

/// The UART device.
#[derive(Debug)]
pub struct SerialPort {
    uart: Serial<NoInterrupt, NoEvents, Console>,
}

impl SerialPort {
    /// A UART whose output goes to `console`; it raises no interrupts.
    pub fn new(console: Console) -> Self {
        SerialPort { uart: Serial::new(NoInterrupt, console) }
    }

    /// A guest IN of the register at `offset` from the base port.
    pub fn read(&mut self, offset: u8) -> u8 {
        self.uart.read(offset)
    }

    /// A guest OUT of `value` to the register at `offset` from the base port.
    pub fn write(&mut self, offset: u8, value: u8) {
        // A console write error (closed stdout) must not stop the guest.
        let _ = self.uart.write(offset, value);
    }

    /// Where the output goes.
    pub fn console(&self) -> &Console {
        self.uart.writer()
    }
}
