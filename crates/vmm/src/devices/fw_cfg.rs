//! A minimal QEMU fw_cfg (legacy IO interface): 16-bit selector at 0x510, data bytes at 0x511.

use std::collections::BTreeMap;

/// Item "QEMU", which firmware checks for.
pub const FW_CFG_SIGNATURE: u16 = 0x00;
/// Item: interface version (1: the legacy IO interface only).
pub const FW_CFG_ID: u16 = 0x01;
/// Item: guest RAM, bytes (u64).
pub const FW_CFG_RAM_SIZE: u16 = 0x03;
/// Item: number of vCPUs (u16).
pub const FW_CFG_NB_CPUS: u16 = 0x05;
/// Item 0x11, named MAX_RAM here; it reads as a zero u64.
pub const FW_CFG_MAX_RAM: u16 = 0x11;

/// The fw_cfg device: its items and the read position in the selected one.
#[derive(Debug)]
pub struct FwCfg {
    items: BTreeMap<u16, Vec<u8>>,
    selected: u16,
    offset: usize,
}

impl FwCfg {
    /// The items of a VM with `nr_cpus` vCPUs and `ram_size` bytes of RAM; item 0 selected.
    pub fn new(nr_cpus: u16, ram_size: u64) -> Self {
        let items = BTreeMap::from([
            (FW_CFG_SIGNATURE, b"QEMU".to_vec()),
            (FW_CFG_ID, 1u32.to_le_bytes().to_vec()),
            (FW_CFG_RAM_SIZE, ram_size.to_le_bytes().to_vec()),
            (FW_CFG_NB_CPUS, nr_cpus.to_le_bytes().to_vec()),
            (FW_CFG_MAX_RAM, 0u64.to_le_bytes().to_vec()),
        ]);
        FwCfg { items, selected: 0, offset: 0 }
    }

    /// Selecting an item rewinds its data.
    pub fn select(&mut self, data: &[u8]) {
        let mut key = [0u8; 2];
        let n = data.len().min(2);
        key[..n].copy_from_slice(&data[..n]);
        self.selected = u16::from_le_bytes(key);
        self.offset = 0;
    }

    /// Bytes past the end of an item (or of an unknown item) read as zero, as in QEMU.
    pub fn read_data(&mut self, data: &mut [u8]) {
        let item = self.items.get(&self.selected).map(Vec::as_slice).unwrap_or(&[]);
        for byte in data.iter_mut() {
            *byte = item.get(self.offset).copied().unwrap_or(0);
            self.offset += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(cfg: &mut FwCfg, key: u16, len: usize) -> Vec<u8> {
        cfg.select(&key.to_le_bytes());
        let mut out = vec![0u8; len];
        for b in out.iter_mut() {
            let mut one = [0u8];
            cfg.read_data(&mut one);
            *b = one[0];
        }
        out
    }

    #[test]
    fn items_read_little_endian() {
        let mut cfg = FwCfg::new(2, 256 << 20);
        assert_eq!(read(&mut cfg, FW_CFG_SIGNATURE, 4), b"QEMU");
        assert_eq!(read(&mut cfg, FW_CFG_NB_CPUS, 2), vec![2, 0]);
        assert_eq!(read(&mut cfg, FW_CFG_RAM_SIZE, 8), (256u64 << 20).to_le_bytes());
        assert_eq!(read(&mut cfg, FW_CFG_MAX_RAM, 8), vec![0; 8]);
        assert_eq!(read(&mut cfg, 0x1234, 3), vec![0; 3]);
        // Reading past the end yields zeroes; reselecting rewinds.
        assert_eq!(read(&mut cfg, FW_CFG_SIGNATURE, 6), b"QEMU\0\0");
    }
}
