//! Build the guest kit (guest/, C + asm, with the machine's gcc) so `cargo build` yields the
//! guest images, and tell the CLI where they are.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let guest = manifest.join("../../guest").canonicalize().expect("guest/ directory");
    println!("cargo:rerun-if-changed={}", guest.display());
    for sub in ["kit", "include", "Makefile", "link.ld"] {
        println!("cargo:rerun-if-changed={}", guest.join(sub).display());
    }
    if let Ok(entries) = std::fs::read_dir(&guest) {
        for e in entries.flatten() {
            println!("cargo:rerun-if-changed={}", e.path().display());
        }
    }
    let status = Command::new("make").arg("-s").arg("-C").arg(&guest).status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("building the guest kit failed ({s}); run `make -C guest` to see why"),
        Err(e) => panic!("cannot run make for the guest kit: {e} (install make and gcc)"),
    }
    println!("cargo:rustc-env=PERFVM_GUEST_DIR={}", guest.join("build").display());
    println!("cargo:rustc-env=PERFVM_GUEST_DIR_FOR_TESTS={}", guest.join("build").display());
}
