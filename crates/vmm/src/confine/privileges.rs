//! Privileges a confined thread gives up: new ones through exec (no_new_privs), the
//! capabilities it has no use for once /dev/kvm is open (when run as root), and core dumps
//! (guest memory would be in them) unless PERFVM_CORE_DUMPS=1 asks for them.

use super::{ConfineError, ThreadKind};

/// Capabilities the VMM thread (and so its vCPU threads) keeps: host perf events beyond
/// perf_event_paranoid and their locked pages (CAP_PERFMON, CAP_IPC_LOCK), and writing the
/// files the user names wherever root could (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
/// CAP_FOWNER for FILE.old's hard link). Helper threads keep none.
const VMM_KEEPS: &[u32] = &[1, 2, 3, 14, 38]; // DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, IPC_LOCK, PERFMON

/// no_new_privs on the calling thread (inherited by threads it creates).
pub fn set_no_new_privs() -> Result<(), ConfineError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(ConfineError::NoNewPrivs(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// RLIMIT_CORE 0 for the process unless PERFVM_CORE_DUMPS=1.
pub fn limit_core_dumps() {
    if std::env::var("PERFVM_CORE_DUMPS").as_deref() == Ok("1") {
        return;
    }
    let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit reads the struct we pass.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// CAP_SYS_ADMIN, which Debian's kernels ask of perf_event_open at perf_event_paranoid 3
/// (their default: "no perf for the unprivileged", where CAP_PERFMON is not enough).
const CAP_SYS_ADMIN: u32 = 21;
/// The paranoid level above which the kernel wants CAP_SYS_ADMIN for any perf event.
const PERF_PARANOID_ANY: i32 = 2;

/// The capability mask (two 32-bit words) a thread of `kind` keeps, where the kernel's
/// perf_event_paranoid is `paranoid`: the VMM's perf events need CAP_SYS_ADMIN above
/// level 2, which it then keeps (its seccomp filters still bound what it can call).
fn kept(kind: ThreadKind, paranoid: i32) -> [u32; 2] {
    let mut mask = [0u32; 2];
    if kind != ThreadKind::Helper {
        let admin = (paranoid > PERF_PARANOID_ANY).then_some(CAP_SYS_ADMIN);
        for cap in VMM_KEEPS.iter().copied().chain(admin) {
            mask[(cap / 32) as usize] |= 1 << (cap % 32);
        }
    }
    mask
}

/// The kernel's perf_event_paranoid (2, its default, where it cannot be read).
fn perf_event_paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// Keep only `kind`'s capabilities on the calling thread: out of the bounding set first
/// (while CAP_SETPCAP is still there), then effective, permitted and inheritable. Without
/// capabilities (not root) there is nothing to drop.
pub fn drop_capabilities(kind: ThreadKind) -> Result<(), ConfineError> {
    let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget fills two CapData for version 3.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(ConfineError::Capget(std::io::Error::last_os_error()));
    }
    let keep = kept(kind, perf_event_paranoid());
    if data.iter().zip(keep).all(|(d, k)| d.permitted & !k == 0 && d.inheritable == 0) {
        return Ok(()); // not root, or already dropped (inherited from the VMM thread)
    }
    let last: u32 =
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(40);
    // The bounding set (what an exec could regain) from the VMM thread, whose later threads
    // inherit it; a helper started before it merely drops what it holds.
    for cap in (0..=last).filter(|_| kind == ThreadKind::Vmm) {
        if keep[(cap / 32) as usize] & (1 << (cap % 32)) == 0 {
            // SAFETY: prctl with integer arguments; fails harmlessly without CAP_SETPCAP.
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        }
    }
    if kind == ThreadKind::Vmm {
        // SAFETY: prctl with integer arguments (ambient capabilities are inherited from the VMM
        // thread too).
        unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) };
    }
    for (d, k) in data.iter_mut().zip(keep) {
        d.effective &= k;
        d.permitted &= k;
        d.inheritable = 0;
    }
    let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    // SAFETY: capset reads two CapData for version 3.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(ConfineError::Capset(std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_keep_nothing_and_the_vmm_keeps_perfmon() {
        assert_eq!(kept(ThreadKind::Helper, 2), [0, 0]);
        assert_eq!(kept(ThreadKind::Vcpu, 2)[1], 1 << (38 - 32));
        assert_eq!(kept(ThreadKind::Vmm, 2)[0] & (1 << 21), 0, "CAP_SYS_ADMIN dropped");
        assert_ne!(kept(ThreadKind::Vmm, 3)[0] & (1 << 21), 0, "kept for perf events at Debian's level 3");
        assert_eq!(kept(ThreadKind::Helper, 3), [0, 0]);
    }
}
