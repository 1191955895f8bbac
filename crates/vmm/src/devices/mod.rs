//! Port-IO devices and the bus that routes guest IN/OUT to them.

mod agent;
pub mod console_input;
mod debug_exit;
mod fw_cfg;
mod i8042;
mod rtc;
mod serial;
mod shutdown;

pub use agent::{
    AgentData, AgentPort, AGENT_PORT, COUNT_FIXED, COUNT_UNSUPPORTED, DEFAULT_MAX_SAMPLES, MAX_AGENT_MSG, MAX_CALLCHAIN,
};
pub use debug_exit::DebugExit;
pub use fw_cfg::FwCfg;
pub use i8042::{I8042, I8042_COMMAND_PORT, I8042_DATA_PORT};
pub use rtc::{Rtc, RTC_DATA_PORT, RTC_INDEX_PORT};
pub use serial::{Console, SerialIrq, SerialPort, POWER_OFF_LINES, SERIAL_IRQ};
pub use shutdown::ShutdownPort;

use std::collections::BTreeMap;

/// What a device asks of the VM after an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceAction {
    /// Nothing: the guest runs on.
    Continue,
    /// The guest asked to end the VM with this status.
    Exit(i32),
    /// The guest asked for an NMI on itself after this many more single-stepped
    /// instructions (0: before its next instruction).
    Nmi(u32),
    /// The guest offers its paravirtual PMU page at this address (0: withdraws it).
    PvRegister(u64),
    /// The guest rang the PV doorbell.
    PvDoorbell,
    /// The guest pulsed the CPU reset line (i8042 command 0xFE): a reboot.
    Reset,
    /// The guest said it powers off (Linux's power-off line on the console).
    PowerOff,
}

/// COM1's eight registers.
pub const SERIAL_PORTS: std::ops::RangeInclusive<u16> = 0x3f8..=0x3ff;
/// isa-debug-exit, at QEMU's usual `iobase=0xf4`.
pub const DEBUG_EXIT_PORT: u16 = 0xf4;
/// fw_cfg item selector (16-bit writes).
pub const FW_CFG_SELECTOR: u16 = 0x510;
/// fw_cfg data (byte reads of the selected item).
pub const FW_CFG_DATA: u16 = 0x511;
/// The Bochs/QEMU shutdown port.
pub const SHUTDOWN_PORT: u16 = 0x8900;
/// A write of v asks the VMM to inject an NMI into the writing vCPU after v more retired
/// instructions when single-stepping (exact backend), else at once (request-order tests).
pub const NMI_REQUEST_PORT: u16 = 0x50c;
/// Native mode: the guest set vif.if_ = 1 with an interrupt pending; the exit itself lets
/// the host deliver it (PERFVM_PORT_VIF_PENDING).
pub const VIF_PENDING_PORT: u16 = 0x80;

/// All port-IO devices of a VM. Ports nobody claims read as all-ones and drop writes,
/// as on a PC with nothing decoding them; they are counted for `--stats`.
#[derive(Debug)]
pub struct PioBus {
    /// COM1, the guest console.
    pub serial: SerialPort,
    /// The fw_cfg device.
    pub fw_cfg: FwCfg,
    /// The perf agent channel, when the VM has guest memory to read messages from.
    pub agent: Option<AgentPort>,
    debug_exit: DebugExit,
    shutdown: ShutdownPort,
    /// The PC devices a Linux guest needs (i8042 reset, CMOS clock); None for perfvm's own
    /// guests, whose ports stay as they were.
    pub pc: Option<PcDevices>,
    /// Accesses to unclaimed ports, by port.
    pub unclaimed: BTreeMap<u16, u64>,
}

/// Legacy PC devices for Linux guests.
#[derive(Debug, Default)]
pub struct PcDevices {
    /// The keyboard controller (reset line).
    pub i8042: I8042,
    /// The CMOS clock.
    pub rtc: Rtc,
}

impl PioBus {
    /// A bus with these devices, the debug-exit and shutdown ports, and no agent port yet.
    pub fn new(serial: SerialPort, fw_cfg: FwCfg) -> Self {
        PioBus {
            serial,
            fw_cfg,
            agent: None,
            debug_exit: DebugExit,
            shutdown: ShutdownPort::default(),
            pc: None,
            unclaimed: BTreeMap::new(),
        }
    }

    /// Guest IN: fill `data`.
    pub fn read(&mut self, port: u16, data: &mut [u8]) {
        match port {
            p if SERIAL_PORTS.contains(&p) => {
                data.fill(0);
                data[0] = self.serial.read((p - SERIAL_PORTS.start()) as u8);
            }
            FW_CFG_DATA => self.fw_cfg.read_data(data),
            I8042_DATA_PORT | I8042_COMMAND_PORT if self.pc.is_some() => {
                data.fill(0);
                data[0] = self.pc.as_ref().unwrap().i8042.read(port);
            }
            RTC_INDEX_PORT | RTC_DATA_PORT if self.pc.is_some() => {
                data.fill(0);
                data[0] = self.pc.as_mut().unwrap().rtc.read(port);
            }
            _ => {
                *self.unclaimed.entry(port).or_default() += 1;
                data.fill(0xff);
            }
        }
    }

    /// Guest OUT of `data`.
    pub fn write(&mut self, port: u16, data: &[u8]) -> DeviceAction {
        match port {
            p if SERIAL_PORTS.contains(&p) => {
                self.serial.write((p - SERIAL_PORTS.start()) as u8, data[0]);
                if self.pc.is_some() && self.serial.console().take_power_off() {
                    return DeviceAction::PowerOff;
                }
                DeviceAction::Continue
            }
            I8042_DATA_PORT | I8042_COMMAND_PORT if self.pc.is_some() => {
                self.pc.as_ref().unwrap().i8042.write(port, data[0])
            }
            RTC_INDEX_PORT | RTC_DATA_PORT if self.pc.is_some() => {
                self.pc.as_mut().unwrap().rtc.write(port, data[0]);
                DeviceAction::Continue
            }
            DEBUG_EXIT_PORT => self.debug_exit.write(data),
            FW_CFG_SELECTOR => {
                self.fw_cfg.select(data);
                DeviceAction::Continue
            }
            FW_CFG_DATA => DeviceAction::Continue,
            SHUTDOWN_PORT => self.shutdown.write(data),
            crate::vpmu::pv::REGISTER_PORT => DeviceAction::PvRegister(u64::from(le_u32(data))),
            crate::vpmu::pv::DOORBELL_PORT => DeviceAction::PvDoorbell,
            NMI_REQUEST_PORT => DeviceAction::Nmi(le_u32(data)),
            AGENT_PORT if self.agent.is_some() => {
                self.agent.as_mut().unwrap().write(data);
                DeviceAction::Continue
            }
            _ => {
                *self.unclaimed.entry(port).or_default() += 1;
                DeviceAction::Continue
            }
        }
    }
}

/// Up to four little-endian bytes as a u32.
pub(crate) fn le_u32(data: &[u8]) -> u32 {
    let mut v = [0u8; 4];
    let n = data.len().min(4);
    v[..n].copy_from_slice(&data[..n]);
    u32::from_le_bytes(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bus() -> PioBus {
        PioBus::new(SerialPort::new(Console::capture()), FwCfg::new(2, 256 << 20))
    }

    #[test]
    fn unclaimed_ports_read_ones_and_are_counted() {
        let mut bus = bus();
        let mut data = [0u8; 2];
        bus.read(0x21, &mut data);
        assert_eq!(data, [0xff, 0xff]);
        assert_eq!(bus.write(0x21, &[0xff]), DeviceAction::Continue);
        assert_eq!(bus.write(0xa1, &[0xff]), DeviceAction::Continue);
        assert_eq!(bus.unclaimed.get(&0x21), Some(&2));
        assert_eq!(bus.unclaimed.get(&0xa1), Some(&1));
    }

    #[test]
    fn pc_devices_only_for_linux() {
        let mut bus = bus();
        let mut status = [0u8];
        bus.read(I8042_COMMAND_PORT, &mut status);
        assert_eq!(status, [0xff], "no i8042 for perfvm's guests");
        assert_eq!(bus.write(I8042_COMMAND_PORT, &[0xfe]), DeviceAction::Continue);
        bus.pc = Some(PcDevices::default());
        bus.read(I8042_COMMAND_PORT, &mut status);
        assert_eq!(status, [0]);
        assert_eq!(bus.write(I8042_COMMAND_PORT, &[0xfe]), DeviceAction::Reset);
        bus.write(RTC_INDEX_PORT, &[0x0a]);
        bus.read(RTC_DATA_PORT, &mut status);
        assert_eq!(status[0] & 0x80, 0, "RTC not updating");
        bus.serial.console().watch_power_off();
        for line in [&b"[   12.5] reboot: Power down\n"[..], b"[   53.4] reboot: System halted\n"] {
            let mut last = DeviceAction::Continue;
            for b in line {
                last = bus.write(0x3f8, &[*b]);
            }
            assert_eq!(last, DeviceAction::PowerOff, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn debug_exit_status_is_qemu_compatible() {
        let mut bus = bus();
        assert_eq!(bus.write(DEBUG_EXIT_PORT, &[0]), DeviceAction::Exit(1));
        assert_eq!(bus.write(DEBUG_EXIT_PORT, &[5]), DeviceAction::Exit(11));
        assert_eq!(bus.write(DEBUG_EXIT_PORT, &[0x10, 0, 0, 0]), DeviceAction::Exit(33));
    }

    #[test]
    fn serial_prints_and_reports_transmitter_empty() {
        let mut bus = bus();
        let mut lsr = [0u8];
        bus.read(0x3fd, &mut lsr);
        assert_ne!(lsr[0] & 0x20, 0, "THR empty must be set");
        for b in b"hi\n" {
            bus.write(0x3f8, &[*b]);
        }
        // Divisor latch: DLAB on, write divisor, DLAB off — nothing printed.
        bus.write(0x3fb, &[0x80]);
        bus.write(0x3f8, &[0x01]);
        bus.write(0x3f9, &[0x00]);
        bus.write(0x3fb, &[0x03]);
        assert_eq!(bus.serial.console().captured(), b"hi\n");
    }

    #[test]
    fn shutdown_port_needs_whole_word() {
        let mut bus = bus();
        for b in b"Shutdow" {
            assert_eq!(bus.write(SHUTDOWN_PORT, &[*b]), DeviceAction::Continue);
        }
        assert_eq!(bus.write(SHUTDOWN_PORT, b"n"), DeviceAction::Exit(0));
        for b in b"ShutXShutdow" {
            assert_eq!(bus.write(SHUTDOWN_PORT, &[*b]), DeviceAction::Continue);
        }
        assert_eq!(bus.write(SHUTDOWN_PORT, b"n"), DeviceAction::Exit(0));
    }
}
