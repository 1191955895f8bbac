//! Finding a guest kernel by path or by the name of a guest built from guest/.

use std::path::{Path, PathBuf};

/// Where `cargo build` put the guest kit's images (overridable at run time).
pub fn guest_dir() -> PathBuf {
    std::env::var_os("PERFVM_GUEST_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("PERFVM_GUEST_DIR")))
}

/// Names of the built-in guests.
pub fn builtin_guests() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(guest_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".elf").map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// A path that exists wins; otherwise a bare name is looked up among the built-in guests.
/// A miss returns the path as given, so the loader reports it as missing.
pub fn resolve(guest: &str) -> PathBuf {
    let as_path = Path::new(guest);
    if as_path.exists() || guest.contains('/') {
        return as_path.to_path_buf();
    }
    let built = guest_dir().join(format!("{guest}.elf"));
    if built.exists() {
        built
    } else {
        as_path.to_path_buf()
    }
}
