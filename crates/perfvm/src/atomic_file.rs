//! Replacing a file so that a crash or SIGKILL at any moment leaves either the old or the
//! new complete file: write a temporary file beside it, sync it, rename it over the target.
//! `record` keeps the profile it replaces as FILE.old, as perf keeps perf.data.old.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Keep the file being replaced as `<path>.old`?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Previous {
    /// Drop it.
    Discard,
    /// Keep it as `<path>.old` (a complete file too: a hard link, not a copy in progress).
    KeepOld,
}

/// Put `bytes` at `path` atomically (see the module doc). A path that is a device, a FIFO
/// or a terminal (`-o /dev/stdout`, `/dev/full`) is written in place: a rename would
/// replace the device node itself. A symbolic link's target is replaced, not the link.
pub fn replace(path: &Path, bytes: &[u8], previous: Previous) -> io::Result<()> {
    let resolved = fs::canonicalize(path).ok();
    let path = resolved.as_deref().unwrap_or(path);
    if fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        let mut out = fs::OpenOptions::new().write(true).truncate(true).open(path)?;
        return out.write_all(bytes).and_then(|()| out.flush());
    }
    let temp = sibling(path, &format!(".tmp.{}", std::process::id()));
    let written = write_synced(&temp, bytes);
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    if previous == Previous::KeepOld && path.is_file() {
        // Link, then rename: FILE itself never goes missing, and FILE.old is whole.
        let old = sibling(path, ".old");
        let old_temp = sibling(path, &format!(".old.tmp.{}", std::process::id()));
        let _ = fs::remove_file(&old_temp);
        if fs::hard_link(path, &old_temp).is_err() {
            fs::copy(path, &old_temp)?;
        }
        fs::rename(&old_temp, &old)?;
    }
    if let Err(e) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    // The rename is durable once the directory is synced too.
    if let Ok(dir) = File::open(parent(path)) {
        let _ = dir.sync_all();
    }
    Ok(())
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// `path` with `suffix` appended to its name, in the same directory (a rename within one
/// file system is atomic; across file systems it is not).
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    parent(path).join(name)
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("perfvm-atomic-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replaces_and_keeps_the_old_file() {
        let d = dir("keep");
        let f = d.join("perf.json");
        replace(&f, b"one", Previous::KeepOld).unwrap();
        assert!(!d.join("perf.json.old").exists());
        replace(&f, b"two", Previous::KeepOld).unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"two");
        assert_eq!(fs::read(d.join("perf.json.old")).unwrap(), b"one");
        replace(&f, b"three", Previous::Discard).unwrap();
        assert_eq!(fs::read(d.join("perf.json.old")).unwrap(), b"one");
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(&d).unwrap().count(), 2);
    }

    #[test]
    fn a_failed_write_leaves_the_target_alone() {
        let d = dir("fail");
        let f = d.join("out.svg");
        replace(&f, b"good", Previous::Discard).unwrap();
        // A directory where the file should be: rename fails, the temp file is removed.
        let target = d.join("sub");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("x"), b"").unwrap();
        assert!(replace(&target, b"new", Previous::Discard).is_err());
        assert_eq!(fs::read(&f).unwrap(), b"good");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 2);
    }

    #[test]
    fn a_device_is_written_in_place_never_renamed_over() {
        let e = replace(Path::new("/dev/full"), b"x", Previous::KeepOld).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert!(!fs::symlink_metadata("/dev/full").unwrap().is_file(), "/dev/full replaced");
        assert!(!Path::new("/dev/full.old").exists());
    }

    #[test]
    fn a_symbolic_link_keeps_pointing_at_the_new_file() {
        let d = dir("link");
        replace(&d.join("real.json"), b"one", Previous::Discard).unwrap();
        std::os::unix::fs::symlink(d.join("real.json"), d.join("link.json")).unwrap();
        replace(&d.join("link.json"), b"two", Previous::KeepOld).unwrap();
        assert!(fs::symlink_metadata(d.join("link.json")).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(d.join("link.json")).unwrap(), b"two");
        assert_eq!(fs::read(d.join("real.json.old")).unwrap(), b"one");
    }

    #[test]
    fn a_bare_file_name_lives_in_the_current_directory() {
        assert_eq!(sibling(Path::new("perf.json"), ".old"), Path::new("./perf.json.old"));
    }
}
