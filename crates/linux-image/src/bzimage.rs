//! A bzImage's setup header (Documentation/x86/boot.rst) and its compressed payload.

use crate::ImageError;
use linux_loader::loader::bootparam::setup_header;
use vm_memory::ByteValued;

/// Offset of the setup header in the image (and in `boot_params`).
pub const SETUP_HEADER_OFFSET: usize = 0x1f1;
/// "HdrS" at 0x202: the boot protocol's signature.
pub const HDRS_MAGIC: u32 = 0x5372_6448;
/// Offset of the signature in the image.
const HDRS_OFFSET: usize = 0x202;
/// Oldest protocol with payload_offset/payload_length (2.08) and the 64-bit entry we use.
const MIN_VERSION: u16 = 0x0208;

/// The setup header as bytes can be read into it.
#[derive(Debug, Clone, Copy, Default)]
#[repr(transparent)]
pub struct Header(pub setup_header);

// SAFETY: setup_header is repr(C, packed) plain old data: any bytes are a valid value.
unsafe impl ByteValued for Header {}

/// A parsed bzImage.
#[derive(Debug, Clone)]
pub struct BzImage<'a> {
    /// Its setup header, as the image carries it.
    pub header: setup_header,
    /// The compressed kernel (payload_offset/payload_length inside the protected-mode part).
    pub payload: &'a [u8],
}

/// Whether `bytes` start like a bzImage ("HdrS" at 0x202).
pub fn is_bzimage(bytes: &[u8]) -> bool {
    bytes.get(HDRS_OFFSET..HDRS_OFFSET + 4) == Some(&HDRS_MAGIC.to_le_bytes()[..])
}

/// Parse the setup header and find the payload, checking every offset against the file.
pub fn parse(bytes: &[u8]) -> Result<BzImage<'_>, ImageError> {
    if !is_bzimage(bytes) {
        return Err(ImageError::Header("no HdrS signature at 0x202".into()));
    }
    let size = std::mem::size_of::<setup_header>();
    let raw = bytes
        .get(SETUP_HEADER_OFFSET..SETUP_HEADER_OFFSET + size)
        .ok_or_else(|| ImageError::Header("file ends inside the setup header".into()))?;
    let header = Header::from_slice(raw).ok_or_else(|| ImageError::Header("setup header size".into()))?.0;
    let version = header.version;
    if version < MIN_VERSION {
        return Err(ImageError::Header(format!(
            "boot protocol {}.{:02} is older than 2.08",
            version >> 8,
            version & 0xff
        )));
    }
    let xloadflags = header.xloadflags;
    if version >= 0x020c && xloadflags & linux_loader::loader::bootparam::XLF_KERNEL_64 == 0 {
        return Err(ImageError::Header("not a 64-bit kernel (XLF_KERNEL_64 clear)".into()));
    }
    // setup_sects 0 means 4 (boot.rst); the protected-mode kernel follows the setup code.
    let setup_sects = match header.setup_sects {
        0 => 4,
        n => usize::from(n),
    };
    let pm_start = (setup_sects + 1) * 512;
    let (offset, length) = (header.payload_offset as usize, header.payload_length as usize);
    let payload = pm_start
        .checked_add(offset)
        .and_then(|start| Some(start..start.checked_add(length)?))
        .and_then(|range| bytes.get(range))
        .ok_or_else(|| {
            ImageError::Header(format!(
                "payload [{:#x}, +{length:#x}) is outside the file ({:#x} bytes)",
                pm_start + offset,
                bytes.len()
            ))
        })?;
    if payload.is_empty() {
        return Err(ImageError::Header("empty payload".into()));
    }
    Ok(BzImage { header, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake bzImage: `setup_sects` 1 (plus the boot sector), protocol 2.15, 64-bit, and
    /// `payload` right after the setup code.
    pub fn fake_bzimage(payload: &[u8]) -> Vec<u8> {
        let mut image = vec![0u8; 1024];
        let mut h = setup_header {
            setup_sects: 1,
            boot_flag: 0xaa55,
            header: HDRS_MAGIC,
            version: 0x020f,
            loadflags: 1,
            cmdline_size: 2047,
            initrd_addr_max: 0x7fff_ffff,
            kernel_alignment: 0x20_0000,
            xloadflags: linux_loader::loader::bootparam::XLF_KERNEL_64,
            payload_offset: 0x40,
            payload_length: payload.len() as u32,
            init_size: 0x100_0000,
            ..Default::default()
        };
        h.pref_address = 0x100_0000;
        let bytes = Header(h);
        image[SETUP_HEADER_OFFSET..SETUP_HEADER_OFFSET + std::mem::size_of::<setup_header>()]
            .copy_from_slice(bytes.as_slice());
        image.resize(1024 + 0x40, 0);
        image.extend_from_slice(payload);
        image
    }

    #[test]
    fn finds_the_payload() {
        let image = fake_bzimage(b"payload!");
        assert!(is_bzimage(&image));
        let bz = parse(&image).unwrap();
        assert_eq!(bz.payload, b"payload!");
        let version = bz.header.version;
        assert_eq!(version, 0x020f);
    }

    #[test]
    fn rejects_what_does_not_hold_together() {
        assert!(!is_bzimage(b"\x7fELF"));
        let mut image = fake_bzimage(b"payload!");
        image.truncate(image.len() - 1);
        assert!(matches!(parse(&image), Err(ImageError::Header(m)) if m.contains("outside the file")));
        let mut old = fake_bzimage(b"x");
        old[0x206] = 0x04; // version 2.04
        old[0x207] = 0x02;
        assert!(matches!(parse(&old), Err(ImageError::Header(m)) if m.contains("older than 2.08")));
        let mut k32 = fake_bzimage(b"x");
        k32[0x236] = 0; // xloadflags
        assert!(matches!(parse(&k32), Err(ImageError::Header(m)) if m.contains("64-bit")));
    }
}
