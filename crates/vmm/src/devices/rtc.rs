//! A CMOS/RTC stub at 0x70/0x71: the host's UTC time in BCD, 24-hour mode, never "update in
//! progress" (Linux spins on that bit while reading the clock at boot; a floating bus reads
//! it set forever), and 128 bytes of CMOS RAM for whatever else the guest writes.

/// Index port (bit 7: NMI disable, ignored).
pub const RTC_INDEX_PORT: u16 = 0x70;
/// Data port.
pub const RTC_DATA_PORT: u16 = 0x71;

const REG_A: u8 = 0x0a;
const REG_B: u8 = 0x0b;
const REG_C: u8 = 0x0c;
const REG_D: u8 = 0x0d;
const CENTURY: u8 = 0x32;
/// Register A: 32.768 kHz time base, 1024 Hz rate, UIP clear.
const REG_A_VALUE: u8 = 0x26;
/// Register B: 24-hour mode, BCD, no interrupts.
const REG_B_VALUE: u8 = 0x02;
/// Register D: valid RAM and time (the battery is fine).
const REG_D_VALUE: u8 = 0x80;

/// The RTC and CMOS RAM.
#[derive(Debug)]
pub struct Rtc {
    index: u8,
    ram: [u8; 128],
}

impl Default for Rtc {
    fn default() -> Self {
        Rtc { index: 0, ram: [0; 128] }
    }
}

fn bcd(v: i32) -> u8 {
    let v = v.rem_euclid(100) as u8;
    (v / 10) << 4 | (v % 10)
}

/// The host's UTC time, broken down.
fn now() -> libc::tm {
    // SAFETY: time(NULL) has no preconditions; gmtime_r writes only into `tm`, which it
    // fully initializes on success (zeroes stay on failure).
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::gmtime_r(&t, &mut tm);
        tm
    }
}

impl Rtc {
    /// A guest IN from `port`.
    pub fn read(&mut self, port: u16) -> u8 {
        if port != RTC_DATA_PORT {
            return 0xff;
        }
        let time = |f: fn(&libc::tm) -> i32| bcd(f(&now()));
        match self.index {
            0x00 => time(|t| t.tm_sec),
            0x02 => time(|t| t.tm_min),
            0x04 => time(|t| t.tm_hour),
            0x06 => time(|t| t.tm_wday + 1),
            0x07 => time(|t| t.tm_mday),
            0x08 => time(|t| t.tm_mon + 1),
            0x09 => time(|t| t.tm_year),
            CENTURY => time(|t| (t.tm_year + 1900) / 100),
            REG_A => REG_A_VALUE,
            REG_B => REG_B_VALUE,
            REG_C => 0,
            REG_D => REG_D_VALUE,
            i => self.ram[usize::from(i & 0x7f)],
        }
    }

    /// A guest OUT of `value` to `port`.
    pub fn write(&mut self, port: u16, value: u8) {
        match port {
            RTC_INDEX_PORT => self.index = value & 0x7f,
            _ => self.ram[usize::from(self.index)] = value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(rtc: &mut Rtc, index: u8) -> u8 {
        rtc.write(RTC_INDEX_PORT, index | 0x80);
        rtc.read(RTC_DATA_PORT)
    }

    #[test]
    fn the_clock_is_never_updating_and_reads_as_bcd() {
        let mut rtc = Rtc::default();
        assert_eq!(reg(&mut rtc, REG_A) & 0x80, 0, "UIP clear");
        assert_eq!(reg(&mut rtc, REG_B) & 0x06, 0x02, "24 h, BCD");
        let year = reg(&mut rtc, 0x09);
        assert!(year >> 4 <= 9 && year & 0xf <= 9, "BCD year {year:#x}");
        assert_eq!(reg(&mut rtc, CENTURY), 0x20);
        let month = reg(&mut rtc, 0x08);
        assert!((0x01..=0x12).contains(&month), "{month:#x}");
        rtc.write(RTC_INDEX_PORT, 0x40);
        rtc.write(RTC_DATA_PORT, 0x5a);
        assert_eq!(reg(&mut rtc, 0x40), 0x5a, "CMOS RAM keeps what is written");
    }
}
