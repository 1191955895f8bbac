//! Host resources come back when a VM ends: file descriptors (KVM, vCPU and every host perf
//! event) return to their count before the VM was built.

use std::path::PathBuf;
use std::time::Instant;
use vmm::config::PmuSettings;
use vmm::{Vm, VmConfig};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn guest(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../guest/build").join(format!("{name}.elf"));
    path.exists().then_some(path)
}

#[test]
fn fds_return_to_baseline_after_each_vm() {
    if let Some(reason) = vmm::vstate::kvm::unavailable_reason() {
        vmm::vstate::kvm::skip_test("fds_return_to_baseline_after_each_vm", &format!("needs /dev/kvm: {reason}"));
        return;
    }
    let Some(kernel) = guest("pmu_arch") else {
        vmm::vstate::kvm::skip_test(
            "fds_return_to_baseline_after_each_vm",
            "guest/build/pmu_arch.elf not built (cargo build builds it)",
        );
        return;
    };
    let before = open_fds();
    for policy in [pmu::Policy::Legacy, pmu::Policy::default()] {
        let config = VmConfig {
            kernel: kernel.clone(),
            kernel_arg0: "pmu_arch".into(),
            capture_console: true,
            pmu: Some(PmuSettings { policy, ..Default::default() }),
            ..Default::default()
        };
        let report = Vm::build(&config).unwrap().run(Instant::now());
        assert_eq!(report.end.exit_code(), 0, "{}", String::from_utf8_lossy(&report.console.captured()));
        let pmu = report.stats.pmu.as_ref().unwrap();
        assert!(pmu.model.events_created > 0, "the guest programmed counters");
        assert!(pmu.host_events_created > 0, "they made host events");
        assert!(pmu.host_events_peak <= pmu.host_events_cap);
        drop(report);
        assert_eq!(open_fds(), before, "fds after a {policy:?} VM");
    }
}
