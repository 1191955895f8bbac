//! The guest agent's samples carry the guest TSC at the PMI and, with `record -g`, a
//! frame-pointer call chain: checked end to end on ftest, emulated and native.

use std::path::{Path, PathBuf};
use std::time::Instant;
use vmm::config::PmuSettings;
use vmm::host::pvm::native::NativeMode;
use vmm::{Vm, VmConfig};

fn skip(reason: &str) {
    vmm::vstate::kvm::skip_test("agent_samples", reason);
}

fn run(kernel: &Path, native: NativeMode, orders: &str) -> vmm::RunReport {
    let config = VmConfig {
        kernel: kernel.to_path_buf(),
        kernel_arg0: "ftest".into(),
        cmdline: format!("{orders} --"),
        capture_console: true,
        native,
        pmu: Some(PmuSettings::default()),
        ..Default::default()
    };
    let report = Vm::build(&config).unwrap().run(Instant::now());
    assert_eq!(report.end.exit_code(), 0, "{}", String::from_utf8_lossy(&report.console.captured()));
    report
}

#[test]
fn samples_have_time_and_frame_pointer_call_chains() {
    if let Some(reason) = vmm::vstate::kvm::unavailable_reason() {
        return skip(&format!("needs /dev/kvm: {reason}"));
    }
    let kernel = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../guest/build/ftest.elf");
    if !kernel.exists() {
        return skip("guest/build/ftest.elf not built (cargo build builds it)");
    }
    let mut modes = vec![(NativeMode::Off, "20000000")];
    match vmm::host::pvm::native::host_support() {
        Ok(()) => modes.push((NativeMode::On, "50000000")),
        Err(reason) => skip(&format!("(native half) needs native mode: {reason}")),
    }
    for (native, period) in modes {
        let report = run(&kernel, native, &format!("record -e 0x003c -c {period} -g"));
        let agent = &report.agent;
        let samples = &agent.samples;
        assert!(samples.len() >= 20, "{native:?}: {} samples", samples.len());
        // Sample times are guest TSCs placed through the START mark: within the workload's
        // TSC span from it.
        let start = agent.marks.iter().find(|m| m.kind == vmm::guest_abi::MarkKind::Start).unwrap();
        let end = agent.marks.iter().find(|m| m.kind == vmm::guest_abi::MarkKind::End).unwrap();
        let rate = pmu::tsc::TscRate::from_khz(report.tsc_khz).unwrap();
        let end_ns = start.host_ns + rate.delta_ns(i128::from(end.tsc - start.tsc)) as u64;
        assert!(samples.windows(2).all(|w| w[0].time_ns <= w[1].time_ns), "{native:?}: in time order");
        let within = |s: &vmm::profiling::Sample| (start.host_ns..=end_ns).contains(&s.time_ns);
        assert!(samples.iter().all(within), "{native:?}: within the workload");
        // ftest's functions are called from main, main from agent_run, that from kit_start,
        // and kit_start from _start: every full chain ends at the same return into _start.
        let full: Vec<_> = samples.iter().filter(|s| s.callchain.len() >= 3).collect();
        assert!(full.len() * 10 >= samples.len() * 9, "{native:?}: {} of {} with a chain", full.len(), samples.len());
        let root = *full[0].callchain.last().unwrap();
        assert!(full.iter().all(|s| *s.callchain.last().unwrap() == root), "{native:?}: one root");
        assert!(samples.iter().all(|s| s.callchain.len() <= 32), "{native:?}: bounded depth");
        let image = 0x10_0000..0x100_0000;
        assert!(
            full.iter().flat_map(|s| &s.callchain).all(|a| image.contains(a)),
            "{native:?}: addresses in the image"
        );
        // Without -g: time, no chains.
        let plain = run(&kernel, native, &format!("record -e 0x003c -c {period}"));
        assert!(
            !plain.agent.samples.is_empty()
                && plain.agent.samples.iter().all(|s| s.callchain.is_empty() && s.time_ns > 0)
        );
    }
}
