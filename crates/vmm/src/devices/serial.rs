//! The 16550 UART at 0x3f8 (vm-superio), printing to the console or capturing it. For a
//! Linux guest it raises IRQ 4 through the in-kernel irqchip and takes input (stdin).

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use vm_superio::{serial::NoEvents, Serial, Trigger};

/// COM1's ISA interrupt line.
pub const SERIAL_IRQ: u32 = 4;

/// The UART's interrupt: none (perfvm's own guests poll the line-status register), or an
/// edge on an ISA line of the in-kernel irqchip (Linux's 8250 driver).
#[derive(Debug, Clone)]
pub enum SerialIrq {
    /// Not wired.
    None,
    /// A pulse on this GSI of this VM's irqchip.
    Line(Arc<kvm_ioctls::VmFd>, u32),
}

impl Trigger for SerialIrq {
    type E = io::Error;
    fn trigger(&self) -> io::Result<()> {
        if let SerialIrq::Line(vm, gsi) = self {
            vm.set_irq_line(*gsi, true).map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
            vm.set_irq_line(*gsi, false).map_err(|e| io::Error::from_raw_os_error(e.errno()))?;
        }
        Ok(())
    }
}

/// The lines Linux prints (at KERN_EMERG) as it powers off or halts. The machine has no ACPI
/// power-off register, so Linux turns `poweroff -f` into a halt ("System halted") and waits
/// forever with interrupts off; the VMM ends the run at either line
/// (`Console::watch_power_off`).
pub const POWER_OFF_LINES: [&[u8]; 2] = [b"reboot: Power down", b"reboot: System halted"];
/// Longest console line kept for that match.
const WATCH_LINE_MAX: usize = 256;

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
    /// Watch for `POWER_OFF_LINES`: the current line, when watching.
    line: Option<Vec<u8>>,
    /// `POWER_OFF_LINES` was printed.
    powered_off: bool,
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
        let inner = ConsoleInner {
            to_stdout,
            captured: Vec::new(),
            dropped: 0,
            first_byte: None,
            line: None,
            powered_off: false,
        };
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

    /// Watch the output for Linux's power-off line (`POWER_OFF_LINES`).
    pub fn watch_power_off(&self) {
        self.inner.lock().unwrap().line.get_or_insert_with(Vec::new);
    }

    /// Whether the power-off line has been printed since the last call.
    pub fn take_power_off(&self) -> bool {
        std::mem::take(&mut self.inner.lock().unwrap().powered_off)
    }
}

impl ConsoleInner {
    fn watch(&mut self, buf: &[u8]) {
        let Some(line) = &mut self.line else { return };
        for &b in buf {
            if b == b'\n' {
                self.powered_off |= POWER_OFF_LINES.iter().any(|end| line.windows(end.len()).any(|w| w == *end));
                line.clear();
            } else if line.len() < WATCH_LINE_MAX {
                line.push(b);
            }
        }
    }
}

impl Write for Console {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut inner = self.inner.lock().unwrap();
        inner.first_byte.get_or_insert_with(Instant::now);
        inner.watch(buf);
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
    uart: Serial<SerialIrq, NoEvents, Console>,
    /// Raising the interrupt failed once (reported then).
    irq_failed: bool,
}

impl SerialPort {
    /// A UART whose output goes to `console`; it raises no interrupts.
    pub fn new(console: Console) -> Self {
        Self::with_irq(console, SerialIrq::None)
    }

    /// A UART whose output goes to `console` and whose interrupt is `irq`.
    pub fn with_irq(console: Console, irq: SerialIrq) -> Self {
        SerialPort { uart: Serial::new(irq, console), irq_failed: false }
    }

    /// Input from the host: as much of `bytes` as the receive FIFO takes (0 when full).
    pub fn input(&mut self, bytes: &[u8]) -> usize {
        self.uart.enqueue_raw_bytes(bytes).unwrap_or(0)
    }

    /// A guest IN of the register at `offset` from the base port.
    pub fn read(&mut self, offset: u8) -> u8 {
        self.uart.read(offset)
    }

    /// A guest OUT of `value` to the register at `offset` from the base port.
    pub fn write(&mut self, offset: u8, value: u8) {
        match self.uart.write(offset, value) {
            // The guest would wait forever for an interrupt that never comes: say so, once.
            Err(vm_superio::serial::Error::Trigger(e)) if !self.irq_failed => {
                self.irq_failed = true;
                eprintln!("perfvm: the UART's interrupt (IRQ {SERIAL_IRQ}) cannot be raised: {e}");
            }
            // A console write error (closed stdout) must not stop the guest.
            _ => {}
        }
    }

    /// Where the output goes.
    pub fn console(&self) -> &Console {
        self.uart.writer()
    }
}
