//! What only kvm_pvm needs: its native (VIF) mode, the instructions its CPL0 emulator
//! rejects, the SYSCALL entry its native user mode breaks, and the returns to user mode
//! that would escape single-stepping. The host seam (`host::caps`) says when each applies.

pub mod complete;
pub mod native;
pub mod syscall_entry;
pub mod user_return;
