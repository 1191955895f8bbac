//! The i8042 keyboard controller, as far as Linux's reboot needs it (Firecracker has the
//! same): the status port reads "nothing pending, ready for a command", and the command
//! 0xFE (pulse the reset line) resets the machine, which ends the run. There is no keyboard:
//! without ACPI or PNP, Linux's i8042 driver does not probe the ports.

use super::DeviceAction;

/// Data port.
pub const I8042_DATA_PORT: u16 = 0x60;
/// Status (read) and command (write) port.
pub const I8042_COMMAND_PORT: u16 = 0x64;
/// "Pulse output line 0 low": the CPU reset line.
const CMD_RESET_CPU: u8 = 0xfe;

/// The controller: stateless.
#[derive(Debug, Default)]
pub struct I8042;

impl I8042 {
    /// A guest IN: no data, status "input and output buffers empty".
    pub fn read(&self, _port: u16) -> u8 {
        0
    }

    /// A guest OUT: 0xFE on the command port resets the machine; the rest is ignored.
    pub fn write(&self, port: u16, value: u8) -> DeviceAction {
        if port == I8042_COMMAND_PORT && value == CMD_RESET_CPU {
            DeviceAction::Reset
        } else {
            DeviceAction::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_command_resets_and_status_is_idle() {
        let kbd = I8042;
        assert_eq!(kbd.read(I8042_COMMAND_PORT) & 0x03, 0, "no output pending, input buffer empty");
        assert_eq!(kbd.write(I8042_COMMAND_PORT, 0xfe), DeviceAction::Reset);
        assert_eq!(kbd.write(I8042_COMMAND_PORT, 0xad), DeviceAction::Continue);
        assert_eq!(kbd.write(I8042_DATA_PORT, 0xfe), DeviceAction::Continue);
    }
}
