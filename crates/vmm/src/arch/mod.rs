//! What depends on the guest's architecture: x86-64 is the only one.

pub mod x86_64;
