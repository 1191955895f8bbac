//! A forbidden system call traps (SECCOMP_RET_TRAP) into this SIGSYS handler: it writes one
//! line naming the thread and the system call, then makes the same call again. The kernel
//! delivers that second SIGSYS with the handler reset (SIGSYS is blocked in its own
//! handler), so the process dies of SIGSYS, as a parent or shell sees it.

use super::{ConfineError, ThreadKind};
use std::cell::Cell;
use std::sync::Once;

thread_local! {
    /// The calling thread's kind, for the message (const: safe to read in a handler).
    static KIND: Cell<Option<ThreadKind>> = const { Cell::new(None) };
}

/// Install the handler (once per process) and remember this thread's kind.
pub fn install(kind: ThreadKind) -> Result<(), ConfineError> {
    KIND.with(|k| k.set(Some(kind)));
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with our SA_SIGINFO handler and an empty mask.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigsys as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut()) != 0 {
                result = Err(ConfineError::Sigsys(std::io::Error::last_os_error()));
            }
        }
    });
    result
}

/// The line the handler writes, into `buf`; its length.
fn message(buf: &mut [u8; 256], kind: Option<ThreadKind>, nr: i64) -> usize {
    let mut n = 0;
    let mut put = |s: &[u8]| {
        let k = s.len().min(buf.len() - n);
        buf[n..n + k].copy_from_slice(&s[..k]);
        n += k;
    };
    put(b"perfvm: seccomp: the ");
    put(kind.map_or("unknown", ThreadKind::name).as_bytes());
    put(b" thread made system call ");
    let mut digits = [0u8; 20];
    let (mut i, mut v) = (digits.len(), nr.unsigned_abs());
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    put(&digits[i..]);
    put(b", which its filter forbids: killed by SIGSYS (--seccomp off runs unconfined; see docs/SECURITY.md)\n");
    n
}

extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to an SA_SIGINFO handler; for
    // SIGSYS the int at offset 24 of siginfo is si_syscall (asm-generic/siginfo.h, x86-64).
    unsafe {
        let nr = i64::from(*(info as *const u8).add(24).cast::<libc::c_int>());
        let mut buf = [0u8; 256];
        let len = message(&mut buf, KIND.with(Cell::get), nr);
        libc::write(2, buf.as_ptr().cast(), len);
        let g = &(*(context as *mut libc::ucontext_t)).uc_mcontext.gregs;
        let arg = |r: libc::c_int| g[r as usize];
        // The same call again: trapped once more with SIGSYS blocked, it kills the process.
        libc::syscall(
            nr,
            arg(libc::REG_RDI),
            arg(libc::REG_RSI),
            arg(libc::REG_RDX),
            arg(libc::REG_R10),
            arg(libc::REG_R8),
            arg(libc::REG_R9),
        );
        libc::_exit(128 + libc::SIGSYS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_the_thread_and_the_call() {
        let mut buf = [0u8; 256];
        let n = message(&mut buf, Some(ThreadKind::Vcpu), 110);
        let line = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(line.starts_with("perfvm: seccomp: the vcpu thread made system call 110, which its filter forbids"));
        assert_eq!(line.lines().count(), 1);
    }
}
