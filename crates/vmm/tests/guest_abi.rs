//! The VMM's Rust view of the guest ABIs (vmm::guest_abi) against the C headers in
//! guest/include: a probe built by the guest kit's Makefile with the kit's compiler prints
//! every struct's size and field offsets and the shared constants, and each must match Rust's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// `name size N` and `name.field N` lines from the probe, built first (make is incremental).
fn c_layouts() -> BTreeMap<String, u128> {
    let guest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../guest");
    let make = Command::new("make").args(["-s", "-C"]).arg(&guest).arg("build/host/abi_probe").status();
    assert!(make.is_ok_and(|s| s.success()), "building guest/build/host/abi_probe (needs make and gcc)");
    let out = Command::new(guest.join("build/host/abi_probe")).output().expect("running the ABI probe");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (key, n) = l.rsplit_once(' ').unwrap();
            (key.to_owned(), n.parse().unwrap())
        })
        .collect()
}

#[test]
fn rust_structs_match_the_c_headers() {
    let c = c_layouts();
    let mut checked = 0;
    for &(name, size, fields) in vmm::guest_abi::LAYOUTS {
        assert_eq!(c.get(&format!("{name} size")), Some(&(size as u128)), "sizeof(struct {name})");
        for &(field, offset) in fields {
            let field = field.trim_start_matches("r#");
            assert_eq!(c.get(&format!("{name}.{field}")), Some(&(offset as u128)), "offsetof(struct {name}, {field})");
            checked += 1;
        }
    }
    for &(name, value) in vmm::guest_abi::CONSTANTS {
        assert_eq!(c.get(&format!("const {name}")), Some(&u128::from(value)), "{name}");
        checked += 1;
    }
    // Everything the probe prints is something Rust has: nothing in the C headers unchecked.
    assert_eq!(checked + vmm::guest_abi::LAYOUTS.len(), c.len(), "the probe and guest_abi list the same items");
}
