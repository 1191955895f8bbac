//! The one place that wires a VM: KVM objects, guest memory, the image and boot data,
//! CPUID and identity, the vPMUs and the MSR filter, devices and vCPUs.

use crate::arch::x86_64::boot::{self, BootParams};
use crate::arch::x86_64::layout::{MAX_MEM_MIB, MAX_VCPUS, MIN_MEM_MIB};
use crate::backends::clock::ClockSource;
use crate::backends::exact::ExactSource;
use crate::backends::perf::{EventBudget, PerfMode, PerfSource};
use crate::backends::Backend;
use crate::config::{BackendKind, PmuSettings, VmConfig};
use crate::devices::{AgentPort, Console, FwCfg, PcDevices, PioBus, SerialIrq, SerialPort, SERIAL_IRQ};
use crate::error::{ioctl, memory, VmError};
use crate::host::pvm::native;
use crate::loader::{load_guest, BootProtocol, KernelImage};
use crate::vpmu::rdpmc_traps::RdpmcTraps;
use crate::vpmu::report::PmuReport;
use crate::vpmu::{VcpuPmu, VpmuOptions};
use crate::vstate::kvm::open_kvm;
use crate::vstate::vcpu::{Shared, Vcpu, VcpuCommon};
use crate::vstate::vm::Vm;
use kvm_bindings::{kvm_enable_cap, KVM_CAP_X86_USER_SPACE_MSR, KVM_MSR_EXIT_REASON_FILTER};
use kvm_bindings::{kvm_mp_state, kvm_userspace_memory_region, CpuId, KVM_MAX_CPUID_ENTRIES, KVM_MP_STATE_RUNNABLE};
use kvm_ioctls::{MsrFilterDefaultAction, MsrFilterRange, MsrFilterRangeFlags};
use kvm_ioctls::{VcpuFd, VmFd};
use pmu::{Pmu, PmuConfig, Policy};
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Check the configuration and the guest image without touching KVM.
pub fn prepare(config: &VmConfig) -> Result<(KernelImage, Vec<u8>), VmError> {
    if !(1..=MAX_VCPUS).contains(&config.vcpus) {
        return Err(VmError::Config(format!("--vcpus must be between 1 and {MAX_VCPUS}")));
    }
    if !(MIN_MEM_MIB..=MAX_MEM_MIB).contains(&config.mem_mib) {
        return Err(VmError::Config(format!("--mem must be between {MIN_MEM_MIB} and {MAX_MEM_MIB} MiB")));
    }
    let path = config.kernel.display().to_string();
    // Neither the image nor the initrd can be larger than the guest's memory.
    let bound = config.mem_mib << 20;
    let read = |file: &std::path::Path, what: &str| {
        profile::bounded::read(file, bound, "a guest image or initrd (--mem)").map_err(|e| VmError::GuestFile {
            path: format!("{what}{}", file.display()),
            reason: match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".into(),
                _ => e.to_string(),
            },
        })
    };
    let bytes = read(&config.kernel, "")?;
    let initrd = config.initrd.as_deref().map(|f| read(f, "--initrd ")).transpose()?;
    load_guest(bytes, initrd, config.mem_mib << 20).map_err(|source| VmError::Load { path, source })
}

/// Build the VM: KVM objects, memory, image, boot data, devices, vCPUs.
pub fn build(config: &VmConfig) -> Result<Vm, VmError> {
    let (image, bytes) = prepare(config)?;
    let kvm = open_kvm()?;
    let host = crate::host::caps();
    let execution = native::decide(config.native, &image, host)?;
    let vm = kvm.create_vm().map_err(ioctl("KVM_CREATE_VM"))?;
    host.disable_kvm_pmu(&vm).map_err(ioctl("KVM_CAP_PMU_CAPABILITY"))?;
    let mem_size = config.mem_mib << 20;
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), mem_size as usize)])?;
    for (slot, region) in mem.iter().enumerate() {
        let host = mem.get_host_address(region.start_addr()).map_err(memory("guest memory"))?;
        let region = kvm_userspace_memory_region {
            slot: slot as u32,
            guest_phys_addr: region.start_addr().0,
            memory_size: region.len(),
            userspace_addr: host as u64,
            flags: 0,
        };
        // SAFETY: the region maps memory owned by `mem`, which outlives the VM fd (both in Vm).
        unsafe { vm.set_user_memory_region(region) }.map_err(ioctl("KVM_SET_USER_MEMORY_REGION"))?;
    }
    vm.set_tss_address(crate::arch::x86_64::layout::KVM_TSS_ADDR as usize).map_err(ioctl("KVM_SET_TSS_ADDR"))?;
    vm.create_irq_chip().map_err(ioctl("KVM_CREATE_IRQCHIP"))?;
    let linux = image.protocol == BootProtocol::Linux64;
    if linux {
        // The PC timer Linux calibrates against and ticks with until the LAPIC timer runs.
        let pit = kvm_bindings::kvm_pit_config { flags: kvm_bindings::KVM_PIT_SPEAKER_DUMMY, ..Default::default() };
        vm.create_pit2(pit).map_err(ioctl("KVM_CREATE_PIT2"))?;
    }
    boot::load_image(&mem, &image, &bytes).map_err(memory("loading the kernel"))?;
    // The CFI is read once per VM, only for call chains that use it.
    let dwarf = config.sampling.is_some_and(|s| s.callchain == Some(crate::profiling::sampler::CallGraph::Dwarf));
    let unwinder = dwarf.then(|| crate::profiling::unwind::GuestUnwinder::from_elf(&bytes).map(Arc::new)).flatten();
    // RDPMC gives the VMM no exit on any host (KVM #GPs it, or answers from its own PMU):
    // a guest gets its RDPMC instructions trapped wherever its symbols show them (Linux reads
    // every counter so), with the trap the host exits on (`HostCaps::rdpmc_trap`). In
    // kvm_pvm's native mode the trap's INT3 would be a #BP the guest takes itself: there
    // RDPMC stays a #GP.
    let rdpmc_traps = Arc::new(match !execution.native && config.pmu.is_some() {
        true => RdpmcTraps::find(&bytes, host.rdpmc_trap()),
        false => RdpmcTraps::default(),
    });
    rdpmc_traps.plant(&mem).map_err(memory("trapping the kernel's RDPMC instructions"))?;
    drop(bytes);

    let cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).map_err(ioctl("KVM_GET_SUPPORTED_CPUID"))?;
    // Guests learn how their vPMU counts from perfvm's own leaf.
    let backend = crate::arch::x86_64::perfvm_leaf::Backend::from(config.pmu.as_ref().map(|p| p.backend));
    let guest_cpuid = crate::arch::x86_64::perfvm_leaf::with_leaves(&cpuid, backend);
    let mut fds = Vec::new();
    for index in 0..config.vcpus {
        fds.push(vm.create_vcpu(u64::from(index)).map_err(ioctl("KVM_CREATE_VCPU"))?);
    }
    let tsc_khz = fds[0].get_tsc_khz().map(u64::from).unwrap_or(0);
    let long_mode = image.protocol != BootProtocol::Multiboot;
    let per_vcpu = config.pmu.as_ref().map_or(0, |s| usize::from(s.gp_counters) + usize::from(pmu::MAX_FIXED_COUNTERS));
    let budget = EventBudget::new(
        config.pmu.as_ref().and_then(|s| s.max_host_events).unwrap_or(per_vcpu * config.vcpus as usize),
    );
    let vendor = config.cpu_vendor.pmu_vendor();
    let mut pmus = match &config.pmu {
        Some(settings) => build_pmus(settings, vendor, config.vcpus, tsc_khz, long_mode, execution.native, &budget)?,
        None => Vec::new(),
    };
    // A Linux guest's user mode needs the SYSCALL repair on kvm_pvm, the host whose native
    // mode the probe finds (docs/LINUX.md, "SYSCALL"); PERFVM_SYSCALL_REPAIR=0 or 1 overrides
    // that (tests/syscall_probe.rs runs the probe guest both ways).
    let syscall_repair = image.protocol == BootProtocol::Linux64
        && match std::env::var("PERFVM_SYSCALL_REPAIR").as_deref() {
            Ok("0") => false,
            Ok("1") => true,
            _ => host.needs_syscall_repair(),
        };
    route_msrs(&vm, pmus.first(), syscall_repair, host)?;
    let mut cpu = crate::arch::x86_64::identity::CpuReport {
        pmu: match pmus.first() {
            Some(p) => describe_pmu(p.model().caps()),
            None => "none (--pmu off)".into(),
        },
        ..Default::default()
    };
    let mut cpuid_entries = 0;
    for (index, fd) in fds.iter().enumerate() {
        let caps = pmus.get(index).map(|p| *p.model().caps());
        let vcpu_cpuid = setup_vcpu(fd, &guest_cpuid, index as u32, &image, caps.as_ref(), config.cpu_vendor, tsc_khz)?;
        cpu.vendor = crate::arch::x86_64::identity::vendor_string(vcpu_cpuid.as_slice());
        let table = crate::arch::x86_64::layout::CPUID_TABLE_BASE + index as u64 * 0x1000;
        cpuid_entries = crate::arch::x86_64::cpuid::write_table(&mem, table, &vcpu_cpuid)
            .map_err(memory("writing the CPUID table"))?;
        if execution.native {
            native::register_vif(fd, native::vif_page(index as u32)).map_err(VmError::Vif)?;
        }
    }
    let pmu_report = pmus.first().map(|p| PmuReport::new(config.pmu.as_ref().unwrap(), p, budget.clone()));
    let cmdline = if config.cmdline.is_empty() {
        config.kernel_arg0.clone()
    } else {
        format!("{} {}", config.kernel_arg0, config.cmdline)
    };
    let vif_base = execution.native.then_some(crate::arch::x86_64::layout::VIF_BASE);
    let exact = config.pmu.as_ref().filter(|p| p.backend == BackendKind::Exact);
    let stepped = exact.is_some();
    let blocks = exact.is_some_and(|p| p.runs_blocks(config.vcpus));
    let hardware = !host.emulates_kernel();
    let params = BootParams {
        mem_size,
        cmdline,
        nr_vcpus: config.vcpus,
        tsc_khz,
        vif_base,
        cpuid_entries,
        stepped,
        blocks,
        hardware,
    };
    boot::write_boot_data(&mem, image.protocol, &params).map_err(memory("writing boot data"))?;
    let vm = Arc::new(vm);
    let kernel_cmdline = match &image.linux {
        Some(boot) => Some(write_linux_boot(&mem, boot, mem_size, config, &cpuid, tsc_khz, host)?),
        None => None,
    };

    let console = if config.capture_console { Console::capture() } else { Console::stdout() };
    let serial = match linux {
        true => SerialPort::with_irq(console.clone(), SerialIrq::Line(vm.clone(), SERIAL_IRQ)),
        false => SerialPort::new(console.clone()),
    };
    let mut bus = PioBus::new(serial, FwCfg::new(config.vcpus as u16, mem_size));
    if linux {
        bus.pc = Some(PcDevices::default());
        console.watch_power_off();
    }
    // Sample times and the agent's marks count from here.
    let epoch = std::time::Instant::now();
    let agent = AgentPort::new(mem.clone(), config.max_samples, tsc_khz);
    let in_workload = agent.in_workload.clone();
    bus.agent = Some(agent);
    let (tx, ends) = mpsc::channel();
    let shared = Arc::new(Shared { bus: Mutex::new(bus), stop: AtomicBool::new(false), ends: Mutex::new(tx) });
    if linux {
        crate::devices::console_input::start(shared.clone());
    }
    for pmu in &mut pmus {
        pmu.set_rdpmc_traps(rdpmc_traps.clone());
    }
    let mut pmus = pmus.drain(..).map(Some).collect::<Vec<_>>();
    pmus.resize_with(fds.len(), || None);
    let common = VcpuCommon {
        shared: shared.clone(),
        vm: vm.clone(),
        mem: mem.clone(),
        order: config.request_order,
        count_syscalls: config.count_syscalls,
        native: execution.native,
        in_workload: in_workload.clone(),
        sampling: config.sampling,
        unwinder,
        epoch,
        tsc_khz,
        rdpmc_traps,
    };
    let vcpus = fds
        .into_iter()
        .zip(pmus)
        .enumerate()
        .map(|(i, (fd, pmu))| Vcpu::new(i as u32, fd, pmu, common.clone()))
        .collect();
    Ok(Vm {
        _kvm: kvm,
        _vm: vm,
        _mem: mem,
        pmu_report,
        vcpus,
        shared,
        ends,
        console,
        timeout: config.timeout,
        nmi_interval: config.nmi_interval,
        in_workload,
        execution,
        cpu,
        tsc_khz,
        kernel_cmdline,
    })
}

/// A Linux guest's boot data: command line (perfvm's defaults, then the user's), boot_params
/// with the e820 map and the initrd, and the MP table. Returns the command line.
fn write_linux_boot(
    mem: &GuestMemoryMmap,
    boot: &crate::loader::linux::LinuxBoot,
    mem_size: u64,
    config: &VmConfig,
    host_cpuid: &CpuId,
    tsc_khz: u64,
    host: &crate::host::HostCaps,
) -> Result<String, VmError> {
    use crate::loader::linux::{acpi, mptable, params};
    let mut machine = host.linux_cmdline(host_cpuid.as_slice());
    // The Intel identity tells the TSC rate in CPUID 0x15/0x16; Linux reads those only on
    // Intel, so the AMD identity says it on the command line.
    let amd_tsc = (config.cpu_vendor == crate::arch::x86_64::identity::CpuVendor::Amd && tsc_khz > 0)
        .then(|| params::tsc_early_khz(tsc_khz.saturating_mul(host.linux_tsc_scale(tsc_khz))));
    machine.extend(amd_tsc);
    let cmdline = params::compose_cmdline(&machine, &config.cmdline);
    let rsdp = acpi::write(mem, config.vcpus as u8).map_err(memory("writing the ACPI tables"))?;
    params::write(mem, boot, mem_size, &cmdline, rsdp).map_err(|e| VmError::Config(e.to_string()))?;
    mptable::write(mem, config.vcpus as u8).map_err(memory("writing the MP table"))?;
    Ok(cmdline)
}

/// The PMU the guest sees, in a few words (`--stats`).
fn describe_pmu(caps: &pmu::PmuCaps) -> String {
    match caps.vendor() {
        pmu::Vendor::Intel => format!("Intel architectural perfmon v{}", caps.cpuid_0xa()[0] & 0xff),
        pmu::Vendor::Amd => format!("AMD PerfMonV2, {} core counters", caps.gp_counters()),
    }
}

/// One PMU per vCPU, sharing a per-VM cap on host events.
fn build_pmus(
    settings: &PmuSettings,
    vendor: pmu::Vendor,
    vcpus: u32,
    tsc_khz: u64,
    long_mode: bool,
    native: bool,
    budget: &std::sync::Arc<EventBudget>,
) -> Result<Vec<VcpuPmu>, VmError> {
    // Probe the host PMU only for the backend that uses it.
    let mode = (settings.backend == BackendKind::Perf).then(|| PerfMode::detect(tsc_khz));
    let config = PmuConfig {
        vendor,
        amd_perfmon: pmu::AmdPerfMon::PerfMonV2,
        gp_counters: settings.gp_counters,
        policy: settings.policy,
        filter: settings.filter.clone(),
        pebs: settings.pebs,
        ..Default::default()
    };
    (0..vcpus)
        .map(|index| {
            let backend = match settings.backend {
                BackendKind::Perf => match (mode.expect("probed for perf"), settings.policy) {
                    // Every counter counts the same clock: share one (legacy keeps an event
                    // per counter, as the baseline it is).
                    (PerfMode::SoftwareClock { tsc_khz }, Policy::Reuse { .. }) => {
                        Backend::Clock(ClockSource::new(tsc_khz, budget.clone()))
                    }
                    (mode, _) => Backend::Perf(PerfSource::new(mode, budget.clone())),
                },
                BackendKind::Exact => Backend::Exact(ExactSource::new()),
            };
            let exact = settings.backend == BackendKind::Exact;
            let throttled = settings.backend == BackendKind::Perf && settings.pmi_max_percent < 100;
            let options = VpmuOptions {
                long_mode,
                vif: native.then(|| native::vif_page(index)),
                throttle: throttled.then(|| {
                    let exit_ns = crate::vpmu::transition::roundtrip_ns(native).unwrap_or(0);
                    crate::vpmu::throttle::Throttle::new(settings.pmi_max_percent, exit_ns)
                }),
                pv_offered: settings.pv,
                pv_samples: settings.pv_samples,
                trace_rips: settings.trace_rips && exact,
                count_retired: settings.count_retired && exact,
                blocks: exact && settings.runs_blocks(vcpus),
                tsc_khz,
            };
            Ok(VcpuPmu::new(Pmu::new(config.clone(), backend)?, options))
        })
        .collect()
}

/// Send every PMU MSR of both vendors and the ones CPUID does not advertise to user space
/// (KVM MSR filter: a clear bit denies KVM's own handling, and with
/// KVM_MSR_EXIT_REASON_FILTER a denied access exits to us).
fn route_msrs(vm: &VmFd, pmu: Option<&VcpuPmu>, linux: bool, host: &crate::host::HostCaps) -> Result<(), VmError> {
    let mut cap = kvm_enable_cap { cap: KVM_CAP_X86_USER_SPACE_MSR, ..Default::default() };
    cap.args[0] = u64::from(KVM_MSR_EXIT_REASON_FILTER);
    vm.enable_cap(&cap).map_err(ioctl("KVM_CAP_X86_USER_SPACE_MSR"))?;
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    if let Some(p) = pmu {
        // Every PMU MSR of either vendor goes to the model, which #GPs what this PMU lacks
        // (KVM's own fallback reads 0 from some of them, e.g. the P6 and K7 counters).
        ranges.extend(crate::arch::x86_64::identity::PMU_MSR_RANGES);
        let covered = |msr: u32| ranges.iter().any(|&(base, n)| (base..base + n).contains(&msr));
        let own: Vec<(u32, u32)> =
            p.model().msr_ranges().iter().map(|r| (r.base.0, r.count)).filter(|&(base, _)| !covered(base)).collect();
        ranges.extend(own);
    }
    // MSRs the host's KVM would take that its CPUID no longer advertises: they #GP here.
    ranges.extend(host.unadvertised_msrs().iter().map(|&msr| (msr, 1)));
    ranges.extend(crate::arch::x86_64::identity::LBR_MSR_RANGES);
    let denied: std::collections::BTreeSet<u32> = ranges.iter().flat_map(|&(base, n)| base..base + n).collect();
    let grouped = filter_ranges(&denied);
    let mut filter: Vec<MsrFilterRange> = grouped
        .iter()
        .map(|(base, msr_count, bitmap)| MsrFilterRange {
            flags: MsrFilterRangeFlags::READ | MsrFilterRangeFlags::WRITE,
            base: *base,
            msr_count: *msr_count,
            bitmap,
        })
        .collect();
    // A Linux guest's LSTAR writes come here, for the SYSCALL entry's repair (syscall_entry.rs),
    // when it is on.
    let deny_one = [0u8; 1];
    if linux {
        filter.push(MsrFilterRange {
            flags: MsrFilterRangeFlags::WRITE,
            base: crate::host::pvm::syscall_entry::MSR_LSTAR,
            msr_count: 1,
            bitmap: &deny_one,
        });
    }
    vm.set_msr_filter(MsrFilterDefaultAction::ALLOW, &filter).map_err(ioctl("KVM_X86_SET_MSR_FILTER"))?;
    Ok(())
}

/// MSRs this close share one filter range (KVM takes at most 16 ranges).
const FILTER_GROUP_GAP: u32 = 128;

/// The filter ranges that send exactly the `denied` MSRs to the VMM: (base, count, bitmap),
/// MSRs within [`FILTER_GROUP_GAP`] of each other in one range whose bitmap allows (bit
/// set: KVM handles it) the MSRs between them.
fn filter_ranges(denied: &std::collections::BTreeSet<u32>) -> Vec<(u32, u32, Vec<u8>)> {
    let mut groups: Vec<(u32, u32)> = Vec::new();
    for &msr in denied {
        match groups.last_mut() {
            Some((_, last)) if msr - *last <= FILTER_GROUP_GAP => *last = msr,
            _ => groups.push((msr, msr)),
        }
    }
    groups
        .into_iter()
        .map(|(first, last)| {
            let count = last - first + 1;
            let mut bitmap = vec![0xffu8; count.div_ceil(8) as usize];
            for msr in denied.range(first..=last) {
                let bit = msr - first;
                bitmap[(bit / 8) as usize] &= !(1 << (bit % 8));
            }
            (first, count, bitmap)
        })
        .collect()
}

/// Give vCPU `index` its CPUID and entry state; returns the CPUID it got.
fn setup_vcpu(
    fd: &VcpuFd,
    supported: &CpuId,
    index: u32,
    image: &KernelImage,
    pmu: Option<&pmu::PmuCaps>,
    vendor: crate::arch::x86_64::identity::CpuVendor,
    tsc_khz: u64,
) -> Result<CpuId, VmError> {
    let host = crate::host::caps();
    let mut cpuid = crate::arch::x86_64::cpuid::for_vcpu(supported, index, pmu, vendor, host);
    let scale = if image.protocol == BootProtocol::Linux64 { host.linux_tsc_scale(tsc_khz) } else { 1 };
    crate::arch::x86_64::cpuid::add_tsc_leaves(&mut cpuid, vendor, tsc_khz, scale);
    fd.set_cpuid2(&cpuid).map_err(ioctl("KVM_SET_CPUID2"))?;
    let mut sregs = fd.get_sregs().map_err(ioctl("KVM_GET_SREGS"))?;
    boot::setup_sregs(&mut sregs, image.protocol);
    fd.set_sregs(&sregs).map_err(ioctl("KVM_SET_SREGS"))?;
    fd.set_regs(&boot::entry_regs(image.protocol, image.entry, index)).map_err(ioctl("KVM_SET_REGS"))?;
    let fpu = kvm_bindings::kvm_fpu { fcw: 0x37f, mxcsr: 0x1f80, ..Default::default() };
    fd.set_fpu(&fpu).map_err(ioctl("KVM_SET_FPU"))?;
    // Direct boot starts every vCPU at the entry; multiboot APs wait for INIT/SIPI.
    if image.protocol == BootProtocol::Direct64 && index > 0 {
        fd.set_mp_state(kvm_mp_state { mp_state: KVM_MP_STATE_RUNNABLE }).map_err(ioctl("KVM_SET_MP_STATE"))?;
    }
    Ok(cpuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearby_msrs_share_a_filter_range_that_allows_the_ones_between() {
        let denied = [0x40, 0x41, 0x48, 0x60, 0x1c9, 0x186].into_iter().collect();
        let ranges = filter_ranges(&denied);
        assert_eq!(ranges.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(), [(0x40, 0x21), (0x186, 0x44)]);
        let (base, _, bitmap) = &ranges[0];
        let allowed = |msr: u32| bitmap[((msr - base) / 8) as usize] & (1 << ((msr - base) % 8)) != 0;
        assert!(!allowed(0x40) && !allowed(0x41) && !allowed(0x48) && !allowed(0x60));
        assert!(allowed(0x42) && allowed(0x47) && allowed(0x5f));
    }

    #[test]
    fn every_msr_perfvm_routes_fits_kvms_sixteen_ranges() {
        let mut denied: std::collections::BTreeSet<u32> = crate::arch::x86_64::identity::PMU_MSR_RANGES
            .iter()
            .chain(&crate::arch::x86_64::identity::LBR_MSR_RANGES)
            .flat_map(|&(base, n)| base..base + n)
            .collect();
        denied.extend(crate::host::pvm::emulator_cpuid::UNADVERTISED_MSRS);
        assert!(filter_ranges(&denied).len() < 16, "one left for LSTAR");
    }
}
