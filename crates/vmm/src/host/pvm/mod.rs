//! What only kvm_pvm needs: its native (VIF) mode, the instructions its CPL0 emulator
//! rejects and the CPU features it cannot run, the SYSCALL entry its native user mode
//! breaks, the returns to user mode that would escape single-stepping, and a Linux guest's
//! slower clock and cheaper boot. The host seam (`host::caps`) says when each applies.

pub mod complete;
pub mod emulator_cpuid;
pub mod linux;
pub mod native;
pub mod syscall_entry;
pub mod user_return;
