//! Every file-controlled size is bounded (docs/SECURITY.md): a guest image or initrd larger
//! than the guest's memory, a record file over 1 GiB, a filter file over 1 MiB are refused
//! in one line with exit 2, before they are read (the files here are sparse).

mod common;
use common::*;

/// A sparse file of `len` bytes.
fn sparse(name: &str, len: u64) -> String {
    let path = temp_file(name, b"");
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len).unwrap();
    path
}

#[test]
fn a_guest_image_or_initrd_larger_than_memory_is_refused() {
    let big = sparse("big-kernel", (64 << 20) + 1);
    assert_usage_error(
        &perfvm(&["run", "--mem", "64", &big]),
        "over the 67108864-byte bound on a guest image or initrd",
    );
    let big = sparse("big-initrd", (64 << 20) + 1);
    let o = perfvm(&["run", "--mem", "64", "--initrd", &big, "hello"]);
    assert_usage_error(&o, "--initrd");
    assert!(stderr(&o).contains("over the 67108864-byte bound"), "{}", stderr(&o));
}

#[test]
fn an_endless_guest_image_is_cut_off() {
    assert_usage_error(&perfvm(&["run", "--mem", "64", "/dev/zero"]), "more than 67108864 bytes");
}

#[test]
fn a_huge_record_file_is_refused() {
    let big = sparse("huge.json", (1 << 30) + 1);
    assert_usage_error(&perfvm(&["report", "-i", &big]), "over the 1073741824-byte bound on record files");
    assert_usage_error(&perfvm(&["script", "-i", &big]), "bound on record files");
}

#[test]
fn a_huge_filter_file_is_refused() {
    let big = sparse("huge.toml", (1 << 20) + 1);
    assert_usage_error(&perfvm(&["run", "hello", "--pmu-filter", &big]), "over the 1048576-byte bound on filter files");
}

#[test]
fn a_deeply_nested_file_is_one_line() {
    let deep = temp_file("deep.json", "[".repeat(100_000).as_bytes());
    assert_usage_error(&perfvm(&["report", "-i", &deep]), "deep.json");
    let deep = temp_file("deep.toml", format!("action = \"allow\"\nevents = {}", "[".repeat(100_000)).as_bytes());
    assert_usage_error(&perfvm(&["run", "hello", "--pmu-filter", &deep]), "deep.toml");
}
