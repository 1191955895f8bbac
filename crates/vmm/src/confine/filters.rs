//! The allowlists, per thread kind: the smallest that passes the test suite and `perfvm
//! bench` (found with `strace -f`; docs/SECURITY.md). Anything else traps (sigsys.rs).
//!
//! Filters stack: a thread created by a confined thread keeps its creator's filter and adds
//! its own, so the VMM thread's list holds what its vCPU threads need (it confines itself
//! before it spawns them, and builds further VMs afterwards: `stat -r`, bench).

use super::{ConfineError, ThreadKind};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// Every thread: memory, locks, time, signals' return, its own end, the descriptors it has.
const COMMON: &[i64] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_close,
    libc::SYS_futex,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigprocmask,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_rseq,
    libc::SYS_set_robust_list,
    libc::SYS_getrandom,
];

/// vCPU threads, besides COMMON and the ioctls below: the vPMU's host perf events (opened,
/// set to signal their thread, read), KVM's statistics file.
const VCPU: &[i64] = &[libc::SYS_perf_event_open, libc::SYS_fcntl, libc::SYS_pread64];

/// The VMM thread, besides COMMON, VCPU and the ioctls: building VMs, reading guests and
/// record files, writing results atomically (atomic_file.rs), signal handlers, threads.
const VMM: &[i64] = &[
    libc::SYS_openat,
    libc::SYS_newfstatat,
    libc::SYS_fstat,
    libc::SYS_statx,
    libc::SYS_lseek,
    libc::SYS_readlink,
    libc::SYS_getdents64,
    libc::SYS_getcwd,
    libc::SYS_mkdir,
    libc::SYS_mkdirat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_link,
    libc::SYS_linkat,
    libc::SYS_unlink,
    libc::SYS_unlinkat,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_copy_file_range, // fs::copy: FILE.old where a hard link is refused
    libc::SYS_sendfile,
    libc::SYS_fchmod,
    libc::SYS_dup,
    libc::SYS_dup2,
    libc::SYS_dup3,
    libc::SYS_pipe2,
    libc::SYS_poll,
    libc::SYS_ppoll,
    libc::SYS_rt_sigaction,
    libc::SYS_prlimit64,
    libc::SYS_capget, // threads it creates check what they hold (privileges.rs)
    libc::SYS_capset, // and give it up; capset cannot raise what a thread holds
    libc::SYS_clone3, // answered ENOSYS by the second filter: glibc falls back to clone
];

/// ioctl request "types" (bits 8-15): KVM's (0xAE) and perf events' ('$').
const KVMIO: u64 = 0xae;
const PERF_IOC: u64 = 0x24;
/// KVM_IRQ_LINE (_IOW(KVMIO, 0x61, struct kvm_irq_level)): the console reader raises the
/// UART's interrupt with it.
const KVM_IRQ_LINE: u64 = 0x4008_ae61;
/// Terminal requests the VMM thread makes on stdio: TCGETS (isatty), TIOCGWINSZ, FIONBIO.
const TTY_REQUESTS: &[u64] = &[0x5401, 0x5413, 0x5421];
/// clone flags of a thread (what pthread_create passes): nothing else, so no fork.
const THREAD_CLONE_FLAGS: u64 = (libc::CLONE_VM
    | libc::CLONE_FS
    | libc::CLONE_FILES
    | libc::CLONE_SIGHAND
    | libc::CLONE_THREAD
    | libc::CLONE_SYSVSEM
    | libc::CLONE_SETTLS
    | libc::CLONE_PARENT_SETTID
    | libc::CLONE_CHILD_CLEARTID) as u64;

fn rule(conditions: Vec<Cond>) -> SeccompRule {
    SeccompRule::new(conditions).expect("a rule with conditions")
}

fn cond(arg: u8, op: Op, value: u64) -> Cond {
    Cond::new(arg, Len::Qword, op, value).expect("a valid argument index")
}

/// ioctl requests of `types`, plus the exact `requests`.
fn ioctl_rules(types: &[u64], requests: &[u64]) -> Vec<SeccompRule> {
    let by_type = types.iter().map(|t| rule(vec![cond(1, Op::MaskedEq(0xff00), t << 8)]));
    by_type.chain(requests.iter().map(|r| rule(vec![cond(1, Op::Eq, *r)]))).collect()
}

/// The rules of `kind`'s allowlist: syscall -> conditions (empty: any arguments).
pub fn rules(kind: ThreadKind) -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = COMMON.iter().map(|&s| (s, vec![])).collect();
    // Signals only to this process's own threads (kicks, abort).
    let pid = u64::from(std::process::id());
    map.insert(libc::SYS_tgkill, vec![rule(vec![cond(0, Op::Eq, pid)])]);
    match kind {
        ThreadKind::Helper => {
            map.insert(libc::SYS_ioctl, ioctl_rules(&[], &[KVM_IRQ_LINE]));
            // Rust's std, built with debug assertions, checks that an fd it closes is open.
            map.insert(libc::SYS_fcntl, vec![rule(vec![cond(1, Op::Eq, libc::F_GETFD as u64)])]);
        }
        ThreadKind::Vcpu => {
            map.extend(VCPU.iter().map(|&s| (s, vec![])));
            map.insert(libc::SYS_ioctl, ioctl_rules(&[KVMIO, PERF_IOC], &[]));
        }
        ThreadKind::Vmm => {
            map.extend(VCPU.iter().chain(VMM).map(|&s| (s, vec![])));
            map.insert(libc::SYS_ioctl, ioctl_rules(&[KVMIO, PERF_IOC], TTY_REQUESTS));
            map.insert(libc::SYS_clone, vec![rule(vec![cond(0, Op::Eq, THREAD_CLONE_FLAGS)])]);
            // New threads name themselves and set no_new_privs before their own filter.
            let prctl = [libc::PR_SET_NAME, libc::PR_SET_NO_NEW_PRIVS];
            map.insert(libc::SYS_prctl, prctl.iter().map(|&o| rule(vec![cond(0, Op::Eq, o as u64)])).collect());
            // ... and add that filter (a filter added can only narrow what is allowed).
            let add_filter = u64::from(libc::SECCOMP_SET_MODE_FILTER);
            map.insert(libc::SYS_seccomp, vec![rule(vec![cond(0, Op::Eq, add_filter)])]);
        }
    }
    map
}

/// The BPF programs to install for `kind`, in order.
pub fn filter_for(kind: ThreadKind) -> Result<Vec<BpfProgram>, ConfineError> {
    let compile = |rules, mismatch, matched| -> Result<BpfProgram, ConfineError> {
        SeccompFilter::new(rules, mismatch, matched, TargetArch::x86_64)
            .and_then(BpfProgram::try_from)
            .map_err(|source| ConfineError::Compile { thread: kind.name(), source })
    };
    let mut programs = Vec::new();
    if kind == ThreadKind::Vmm {
        // clone3 passes its flags in memory, out of a filter's reach: refuse it (ENOSYS),
        // and glibc creates threads with clone, whose flags the allowlist checks.
        let clone3 = BTreeMap::from([(libc::SYS_clone3, vec![])]);
        programs.push(compile(clone3, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32))?);
    }
    programs.push(compile(rules(kind), SeccompAction::Trap, SeccompAction::Allow)?);
    Ok(programs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_compiles_and_the_lists_nest() {
        for kind in [ThreadKind::Vmm, ThreadKind::Vcpu, ThreadKind::Helper] {
            assert!(!filter_for(kind).unwrap().last().unwrap().is_empty());
        }
        let (vmm, vcpu, helper) = (rules(ThreadKind::Vmm), rules(ThreadKind::Vcpu), rules(ThreadKind::Helper));
        // What a vCPU or helper thread may do, its VMM thread (whose filter it inherits) may.
        assert!(vcpu.keys().chain(helper.keys()).all(|s| vmm.contains_key(s)));
        for forbidden in [libc::SYS_execve, libc::SYS_socket, libc::SYS_ptrace, libc::SYS_fork, libc::SYS_getppid] {
            assert!(!vmm.contains_key(&forbidden), "syscall {forbidden} allowed");
        }
        assert!(!vcpu.contains_key(&libc::SYS_openat) && !helper.contains_key(&libc::SYS_perf_event_open));
    }

    #[test]
    fn a_confined_helper_may_raise_an_interrupt_line() {
        // In a thread of its own: the filter stays with it. A forbidden call would kill
        // the test binary with SIGSYS; an allowed one fails on the missing descriptor.
        let errno = std::thread::spawn(|| {
            super::super::confine_thread(ThreadKind::Helper).unwrap();
            // SAFETY: an ioctl on no descriptor.
            let rc = unsafe { libc::ioctl(-1, KVM_IRQ_LINE as libc::c_ulong, 0usize) };
            (rc, std::io::Error::last_os_error().raw_os_error())
        })
        .join()
        .unwrap();
        assert_eq!(errno, (-1, Some(libc::EBADF)));
    }
}
