//! Reading a file the user names (a guest image, an initrd, a record or filter file) with a
//! bound on its size: a file over it is refused before it is read, and one that grows or
//! never ends (a pipe, /dev/zero) is cut off one byte past the bound. docs/SECURITY.md
//! names each bound.

use std::io::{self, Read};
use std::path::Path;

/// The whole of `path`, or an `InvalidInput` error (bad input: exit 2) where it holds more
/// than `limit` bytes; `what` names the bound in the message.
pub fn read(path: &Path, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let too_big = |size: String| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("{size} bytes, over the {limit}-byte bound on {what}"))
    };
    let meta = file.metadata()?;
    if meta.is_file() && meta.len() > limit {
        return Err(too_big(meta.len().to_string()));
    }
    let mut bytes = Vec::with_capacity(if meta.is_file() { meta.len() as usize } else { 0 });
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_big(format!("more than {limit}")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_bound_and_endless_files() {
        let path = std::env::temp_dir().join(format!("perfvm-bounded-{}", std::process::id()));
        std::fs::write(&path, [7u8; 100]).unwrap();
        assert_eq!(read(&path, 100, "x").unwrap().len(), 100);
        let e = read(&path, 99, "test files").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(e.to_string(), "100 bytes, over the 99-byte bound on test files");
        let _ = std::fs::remove_file(&path);
        let e = read(Path::new("/dev/zero"), 4096, "endless files").unwrap_err();
        assert_eq!(e.to_string(), "more than 4096 bytes, over the 4096-byte bound on endless files");
    }
}
