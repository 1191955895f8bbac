//! QEMU's isa-debug-exit: a write of `v` ends the VM with status `(v << 1) | 1`.

use super::DeviceAction;

/// The isa-debug-exit device; it has no state.
#[derive(Debug, Default)]
pub struct DebugExit;

impl DebugExit {
    /// A guest OUT of `data` (up to four little-endian bytes): the VM ends.
    pub fn write(&self, data: &[u8]) -> DeviceAction {
        let mut bytes = [0u8; 4];
        let n = data.len().min(4);
        bytes[..n].copy_from_slice(&data[..n]);
        let value = u32::from_le_bytes(bytes);
        DeviceAction::Exit(((value << 1) | 1) as i32)
    }
}
