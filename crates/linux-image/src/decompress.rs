//! The bzImage payload's decompressors, chosen by the payload's magic bytes: gzip (flate2),
//! LZ4 in the kernel's legacy framing (lz4_flex), zstd (ruzstd), xz and lzma (xz2,
//! liblzma: the kernel's xz uses the x86 BCJ filter), or an uncompressed ELF.

use crate::ImageError;
use std::io::Read;

/// The compressions a payload can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Uncompressed (CONFIG_KERNEL_UNCOMPRESSED): the payload is the ELF.
    None,
    /// gzip.
    Gzip,
    /// LZ4, legacy frame format (`lz4 -l`).
    Lz4,
    /// zstd.
    Zstd,
    /// xz.
    Xz,
    /// lzma (LZMA alone).
    Lzma,
    /// bzip2 (recognized, not supported).
    Bzip2,
    /// lzo (recognized, not supported).
    Lzo,
}

impl Compression {
    /// Its name, as the kernel's config calls it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
            Compression::Lzma => "lzma",
            Compression::Bzip2 => "bzip2",
            Compression::Lzo => "lzo",
        }
    }
}

/// The kernel's LZ4 legacy frame magic.
const LZ4_LEGACY_MAGIC: u32 = 0x184c_2102;
/// Largest uncompressed LZ4 legacy block (8 MiB).
const LZ4_LEGACY_BLOCK: usize = 8 << 20;
/// Largest decompressed kernel accepted: a bound against a hostile size field.
pub const MAX_KERNEL: usize = 1 << 30;

/// Which compression `payload` has, from its first bytes.
pub fn detect(payload: &[u8]) -> Option<Compression> {
    let starts = |magic: &[u8]| payload.starts_with(magic);
    Some(match () {
        _ if starts(b"\x7fELF") => Compression::None,
        _ if starts(&[0x1f, 0x8b]) => Compression::Gzip,
        _ if starts(&LZ4_LEGACY_MAGIC.to_le_bytes()) => Compression::Lz4,
        _ if starts(&[0x28, 0xb5, 0x2f, 0xfd]) => Compression::Zstd,
        _ if starts(&[0xfd, b'7', b'z', b'X', b'Z', 0]) => Compression::Xz,
        _ if starts(&[0x5d, 0, 0]) => Compression::Lzma,
        _ if starts(b"BZh") => Compression::Bzip2,
        _ if starts(&[0x89, b'L', b'Z', b'O']) => Compression::Lzo,
        _ => return None,
    })
}

/// Decompress a bzImage payload. The kernel's build appends the decompressed size as the
/// payload's last 4 bytes (little endian); it bounds the output and checks the result.
pub fn decompress(payload: &[u8]) -> Result<(Compression, Vec<u8>), ImageError> {
    let kind = detect(payload).ok_or(ImageError::UnknownCompression)?;
    let corrupt = |e: &dyn std::fmt::Display| ImageError::Corrupt { kind: kind.name(), reason: e.to_string() };
    if kind == Compression::None {
        return Ok((kind, payload.to_vec()));
    }
    let size = match payload.len().checked_sub(4) {
        Some(at) => u32::from_le_bytes(payload[at..].try_into().expect("4 bytes")) as usize,
        None => return Err(corrupt(&"payload too short")),
    };
    if size > MAX_KERNEL {
        return Err(corrupt(&format!("decompressed size {size:#x} is over {MAX_KERNEL:#x}")));
    }
    let mut out = Vec::with_capacity(size);
    // The stream without the appended size (gzip's own trailer ends with it).
    let stream = &payload[..payload.len() - 4];
    match kind {
        Compression::Gzip => {
            let mut d = flate2::read::GzDecoder::new(payload);
            (&mut d).take(size as u64 + 1).read_to_end(&mut out).map_err(|e| corrupt(&e))?;
        }
        Compression::Lz4 => lz4_legacy(stream, size, &mut out).map_err(|e| corrupt(&e))?,
        Compression::Zstd => {
            let d = ruzstd::decoding::StreamingDecoder::new(stream).map_err(|e| corrupt(&e))?;
            d.take(size as u64 + 1).read_to_end(&mut out).map_err(|e| corrupt(&e))?;
        }
        Compression::Xz | Compression::Lzma => {
            let decoder = match kind {
                Compression::Xz => xz2::stream::Stream::new_stream_decoder(u64::MAX, 0),
                _ => xz2::stream::Stream::new_lzma_decoder(u64::MAX),
            }
            .map_err(|e| corrupt(&e))?;
            let d = xz2::read::XzDecoder::new_stream(stream, decoder);
            d.take(size as u64 + 1).read_to_end(&mut out).map_err(|e| corrupt(&e))?;
        }
        Compression::Bzip2 | Compression::Lzo => return Err(ImageError::UnsupportedCompression(kind.name())),
        Compression::None => unreachable!("returned above"),
    }
    if out.len() != size {
        return Err(corrupt(&format!("decompressed {:#x} bytes where the image says {size:#x}", out.len())));
    }
    Ok((kind, out))
}

/// What is wrong with an LZ4 legacy payload.
#[derive(Debug, thiserror::Error)]
enum Lz4Error {
    #[error("truncated block header")]
    TruncatedHeader,
    #[error("block runs past the payload")]
    PastPayload,
    #[error("{0}")]
    Block(#[from] lz4_flex::block::DecompressError),
    #[error("empty block")]
    EmptyBlock,
}

/// LZ4 legacy frames: the magic, then blocks of (u32 compressed size, data), each up to 8 MiB
/// uncompressed; another magic may start a new frame. Stops once `size` bytes are out (the
/// appended size is not a block).
fn lz4_legacy(payload: &[u8], size: usize, out: &mut Vec<u8>) -> Result<(), Lz4Error> {
    let mut at = 0;
    let word = |at: usize| payload.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    while out.len() < size {
        let n = word(at).ok_or(Lz4Error::TruncatedHeader)?;
        at += 4;
        if n == LZ4_LEGACY_MAGIC {
            continue;
        }
        let block = payload.get(at..at + n as usize).ok_or(Lz4Error::PastPayload)?;
        at += n as usize;
        let start = out.len();
        out.resize(start + LZ4_LEGACY_BLOCK.min(size - start), 0);
        let got = lz4_flex::block::decompress_into(block, &mut out[start..])?;
        out.truncate(start + got);
        if got == 0 {
            return Err(Lz4Error::EmptyBlock);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A fake kernel: an ELF magic and some compressible text.
    fn kernel() -> Vec<u8> {
        let mut k = b"\x7fELF".to_vec();
        for i in 0..5000u32 {
            k.extend_from_slice(format!("line {i} of a kernel\n").as_bytes());
        }
        k
    }

    fn with_size(mut compressed: Vec<u8>, size: usize) -> Vec<u8> {
        compressed.extend_from_slice(&(size as u32).to_le_bytes());
        compressed
    }

    /// The kernel's `lz4 -l` framing around lz4_flex's blocks, in two blocks.
    pub fn lz4_legacy_payload(data: &[u8]) -> Vec<u8> {
        let mut p = LZ4_LEGACY_MAGIC.to_le_bytes().to_vec();
        for chunk in data.chunks(data.len() / 2 + 1) {
            let block = lz4_flex::block::compress(chunk);
            p.extend_from_slice(&(block.len() as u32).to_le_bytes());
            p.extend_from_slice(&block);
        }
        with_size(p, data.len())
    }

    #[test]
    fn gzip_and_lz4_and_xz_round_trip() {
        let k = kernel();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&k).unwrap();
        let gz = gz.finish().unwrap(); // gzip's own trailer ends with the size, as the kernel's
        assert_eq!(decompress(&gz).unwrap(), (Compression::Gzip, k.clone()));
        assert_eq!(decompress(&lz4_legacy_payload(&k)).unwrap(), (Compression::Lz4, k.clone()));
        let mut xz = xz2::write::XzEncoder::new(Vec::new(), 1);
        xz.write_all(&k).unwrap();
        let xz = with_size(xz.finish().unwrap(), k.len());
        assert_eq!(decompress(&xz).unwrap(), (Compression::Xz, k.clone()));
        assert_eq!(decompress(&k).unwrap(), (Compression::None, k.clone()));
    }

    #[test]
    fn corrupt_and_unknown_payloads_are_errors() {
        let k = kernel();
        let mut lz4 = lz4_legacy_payload(&k);
        let mid = lz4.len() / 2;
        lz4[mid..mid + 64].fill(0xff);
        assert!(matches!(decompress(&lz4), Err(ImageError::Corrupt { kind: "lz4", .. })));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&k).unwrap();
        let mut gz = gz.finish().unwrap();
        gz.truncate(gz.len() / 2);
        assert!(matches!(decompress(&gz), Err(ImageError::Corrupt { kind: "gzip", .. })));
        assert!(matches!(decompress(b"what is this"), Err(ImageError::UnknownCompression)));
        assert!(matches!(decompress(b"BZh91AY&SY...."), Err(ImageError::UnsupportedCompression("bzip2"))));
        let huge = with_size(LZ4_LEGACY_MAGIC.to_le_bytes().to_vec(), usize::MAX >> 33);
        assert!(matches!(decompress(&huge), Err(ImageError::Corrupt { .. })));
    }
}
