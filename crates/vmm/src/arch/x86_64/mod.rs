//! x86-64 guest setup: the guest-physical layout of the boot structures (`layout`), the boot
//! structures and initial registers (`boot`), CPUID (`cpuid`), the CPU the guest is told it
//! runs on (`identity`) and perfvm's own CPUID leaves (`perfvm_leaf`).

pub mod boot;
pub mod cpuid;
pub mod identity;
pub mod layout;
pub mod perfvm_leaf;
