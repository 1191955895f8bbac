//! Console input for a Linux guest: a thread reads the VMM's stdin and feeds the UART's
//! receive FIFO (which raises its interrupt). The vCPUs never wait on stdin; a full FIFO
//! makes the reader wait for the guest, and end of input (or an unreadable stdin, as under
//! a test harness) ends the reader.

use crate::vstate::vcpu::Shared;
use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// How long the reader waits for the guest to drain a full receive FIFO.
const FULL_FIFO_WAIT: Duration = Duration::from_millis(5);

/// Start the reader for the VM whose devices are in `shared`.
pub fn start(shared: Arc<Shared>) {
    let spawned = std::thread::Builder::new().name("console-in".into()).spawn(move || {
        if let Err(e) = crate::confine::confine_thread(crate::confine::ThreadKind::Helper) {
            eprintln!("perfvm: {e}: no console input");
            return;
        }
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 64];
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut rest = &buf[..n];
            while !rest.is_empty() {
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                let taken = shared.bus.lock().unwrap().serial.input(rest);
                rest = &rest[taken..];
                if taken == 0 {
                    std::thread::sleep(FULL_FIFO_WAIT);
                }
            }
        }
    });
    // Without a reader the guest just gets no input.
    drop(spawned);
}
