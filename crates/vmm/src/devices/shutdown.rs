//! The Bochs/QEMU shutdown port: "Shutdown" written byte by byte powers the VM off (status 0).

use super::DeviceAction;

const WORD: &[u8] = b"Shutdown";

/// The shutdown port: how much of "Shutdown" has been written so far.
#[derive(Debug, Default)]
pub struct ShutdownPort {
    matched: usize,
}

impl ShutdownPort {
    /// A guest OUT of `data`: the VM ends once the whole word has been written.
    pub fn write(&mut self, data: &[u8]) -> DeviceAction {
        for &b in data {
            self.matched = if b == WORD[self.matched] { self.matched + 1 } else { usize::from(b == WORD[0]) };
            if self.matched == WORD.len() {
                self.matched = 0;
                return DeviceAction::Exit(0);
            }
        }
        DeviceAction::Continue
    }
}
