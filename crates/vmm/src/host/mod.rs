//! The host seam: which KVM perfvm runs on, probed once per process, and the answers to
//! every question whose answer differs between hosts. Nothing outside this module asks
//! "is this kvm_pvm"; it asks [`caps`] what the host does.
//!
//! | | kvm_pvm (this project's dev host) | kvm_amd / kvm_intel |
//! | --- | --- | --- |
//! | guest kernel code | emulated by KVM (native with a VIF page, `pvm`) | hardware |
//! | CPUID | leaves 1, 7, 0xD, 0x80000001 from the hardware | KVM_SET_CPUID2's |
//! | the VMM's RDPMC trap | INT3, an emulation failure | `OUT imm8, AL`, a port exit |
//! | user-mode SYSCALL of a Linux guest | needs the VMM's repair | hardware |
//! | KVM's in-kernel PMU | left alone (RDPMC #GPs) | disabled (`KVM_PMU_CAP_DISABLE`) |
//! | the guest TSC | dilated for Linux (kernel code is slow) | the host's rate |

pub mod pvm;

use crate::arch::x86_64::identity::CpuVendor;
use crate::vpmu::rdpmc_traps::TrapForm;
use kvm_bindings::{kvm_cpuid_entry2, kvm_enable_cap, KVM_CAP_PMU_CAPABILITY, KVM_PMU_CAP_DISABLE};
use kvm_ioctls::{Kvm, VmFd};
use serde::Serialize;
use std::sync::OnceLock;

/// The kind of KVM: which module provides /dev/kvm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flavour {
    /// `kvm_pvm`: guests run under a paravirtual hypervisor, kernel code emulated (or native
    /// in the VIF mode).
    Pvm,
    /// `kvm_intel`: VMX.
    Vmx,
    /// `kvm_amd`: SVM.
    Svm,
}

impl Flavour {
    /// The KVM module's name.
    pub fn module(self) -> &'static str {
        match self {
            Flavour::Pvm => "kvm_pvm",
            Flavour::Vmx => "kvm_intel",
            Flavour::Svm => "kvm_amd",
        }
    }
}

/// What this host's KVM is and does, probed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HostCaps {
    /// Which KVM.
    pub flavour: Flavour,
    /// kvm_pvm takes a VIF page: vCPUs can run natively (`pvm::native`).
    pub vif: bool,
    /// KVM can switch its own PMU off for a VM (`KVM_CAP_PMU_CAPABILITY`).
    pub kvm_pmu_disable: bool,
    /// The host CPU's vendor.
    pub cpu_vendor: CpuVendor,
}

/// The host, probed at the first call (from the VMM thread, before it is confined).
pub fn caps() -> &'static HostCaps {
    static CAPS: OnceLock<HostCaps> = OnceLock::new();
    CAPS.get_or_init(probe)
}

fn probe() -> HostCaps {
    let flavour = flavour_from_modules(|m| std::path::Path::new(&format!("/sys/module/{m}")).exists())
        .unwrap_or_else(flavour_from_cpuid);
    let vif = flavour == Flavour::Pvm && pvm::native::host_support().is_ok();
    let kvm_pmu_disable = crate::vstate::kvm::open_kvm()
        .is_ok_and(|kvm: Kvm| kvm.check_extension_raw(KVM_CAP_PMU_CAPABILITY.into()) as u32 & KVM_PMU_CAP_DISABLE != 0);
    HostCaps { flavour, vif, kvm_pmu_disable, cpu_vendor: host_vendor() }
}

/// The host CPU's vendor, from CPUID leaf 0 (anything not AMD's or Hygon's is taken as Intel).
fn host_vendor() -> CpuVendor {
    // SAFETY: CPUID is available on every x86-64 CPU and only reads registers.
    #[allow(unused_unsafe)]
    let leaf0 = unsafe { std::arch::x86_64::__cpuid(0) };
    let amd = CpuVendor::Amd.vendor_regs();
    match [leaf0.ebx, leaf0.edx, leaf0.ecx] {
        regs if regs == amd => CpuVendor::Amd,
        regs if &regs.map(u32::to_le_bytes).concat() == b"HygonGenuine" => CpuVendor::Amd,
        _ => CpuVendor::Intel,
    }
}

/// The flavour by the KVM module loaded (`loaded` says whether /sys/module/NAME exists).
fn flavour_from_modules(loaded: impl Fn(&str) -> bool) -> Option<Flavour> {
    [Flavour::Pvm, Flavour::Svm, Flavour::Vmx].into_iter().find(|f| loaded(f.module()))
}

/// Without /sys (a container): the hardware virtualization the CPU says it has; neither
/// means a paravirtual host.
fn flavour_from_cpuid() -> Flavour {
    // SAFETY: CPUID is available on every x86-64 CPU and only reads registers.
    #[allow(unused_unsafe)]
    let (leaf1, ext1) = unsafe { (std::arch::x86_64::__cpuid(1), std::arch::x86_64::__cpuid(0x8000_0001)) };
    match (leaf1.ecx & 1 << 5 != 0, ext1.ecx & 1 << 2 != 0) {
        (true, _) => Flavour::Vmx,
        (_, true) => Flavour::Svm,
        _ => Flavour::Pvm,
    }
}

impl HostCaps {
    /// kvm_pvm with its VIF mode on an Intel CPU, for unit tests of what follows from it.
    #[cfg(test)]
    pub(crate) fn pvm() -> Self {
        HostCaps { flavour: Flavour::Pvm, vif: true, kvm_pmu_disable: false, cpu_vendor: CpuVendor::Intel }
    }

    /// Guest kernel code runs in KVM's instruction emulator (unless native).
    pub fn emulates_kernel(&self) -> bool {
        self.flavour == Flavour::Pvm
    }

    /// Hide from a vCPU's CPUID `entries` (with `vendor`'s identity) what the host cannot
    /// run: on kvm_pvm what its CPL0 emulator rejects (`pvm::emulator_cpuid`); a hardware
    /// host's features pass through as KVM offers them.
    pub fn limit_cpuid(&self, entries: &mut [kvm_cpuid_entry2], vendor: CpuVendor) {
        if self.flavour == Flavour::Pvm {
            pvm::emulator_cpuid::hide(entries, vendor);
        }
    }

    /// MSRs that #GP because the host's CPUID no longer advertises them but its KVM would
    /// take them (kvm_pvm's speculation controls); the filter routes them to the VMM.
    pub fn unadvertised_msrs(&self) -> &'static [u32] {
        match self.flavour {
            Flavour::Pvm => &pvm::emulator_cpuid::UNADVERTISED_MSRS,
            Flavour::Vmx | Flavour::Svm => &[],
        }
    }

    /// The host's words on a Linux guest's command line, given KVM's supported CPUID
    /// `supported`: on kvm_pvm a cheaper boot and `clearcpuid=` for the features it shows
    /// from the hardware whatever KVM_SET_CPUID2 says; nothing on hardware hosts.
    pub fn linux_cmdline(&self, supported: &[kvm_cpuid_entry2]) -> Vec<String> {
        if self.flavour != Flavour::Pvm {
            return Vec::new();
        }
        let mut leaves = pvm::emulator_cpuid::hardware_leaves();
        leaves.extend_from_slice(supported);
        let clearcpuid = pvm::emulator_cpuid::linux_clearcpuid(&leaves);
        std::iter::once(pvm::linux::EMULATED_CMDLINE.to_owned()).chain(clearcpuid).collect()
    }

    /// What the VMM plants over a guest's RDPMC to get an exit (`rdpmc_traps`): an INT3
    /// where the host's emulator stops on it, a port write where guest code runs in hardware.
    pub fn rdpmc_trap(&self) -> TrapForm {
        match self.flavour {
            Flavour::Pvm => TrapForm::Int3,
            Flavour::Vmx | Flavour::Svm => TrapForm::PortOut,
        }
    }

    /// Single-steps are the CPU's TF traps (VMX, SVM), with what follows from that: KVM sets
    /// TF only at the RIP guest debug was set at (the VMM re-arms a step after it moves RIP),
    /// SYSCALL's FMASK clears it (the VMM runs SYSCALL), and a TF the guest saved while
    /// stepped outlives stepping (the VMM drops its trap). kvm_pvm's emulator steps itself.
    pub fn steps_by_cpu_tf(&self) -> bool {
        !self.emulates_kernel()
    }

    /// Whether an execution breakpoint in guest debug's DR0-DR3 stops guest kernel code
    /// that runs without single-stepping, so the exact backend's block engine can run the
    /// guest to a block's end (`backends::exact::blocks`). kvm_pvm's emulator stops there
    /// (measured: the exact suites with `--exact-engine blocks`). On SVM and VMX KVM loads
    /// the breakpoints into the VMCB/VMCS, but the only such host perfvm has run, kvm_amd
    /// under QEMU 7.2 TCG, never arms a nested guest's breakpoints (docs/DESIGN.md), so
    /// there a block ends at a port write the VMM plants (`blocks::EndBy::Trap`), and the
    /// watched exception handlers' entries carry one while stepping (`vpmu::planted`).
    pub fn stops_at_breakpoints(&self) -> bool {
        self.emulates_kernel()
    }

    /// A Linux guest's user-mode SYSCALL needs the VMM's repair (kvm_pvm with native mode,
    /// `pvm::syscall_entry`).
    pub fn needs_syscall_repair(&self) -> bool {
        self.flavour == Flavour::Pvm && self.vif
    }

    /// How much faster than it runs a Linux guest is told its TSC runs: dilated where kernel
    /// code is emulated (`pvm::linux::tsc_scale`), the truth on hardware.
    pub fn linux_tsc_scale(&self, tsc_khz: u64) -> u64 {
        match self.emulates_kernel() {
            true => pvm::linux::tsc_scale(tsc_khz),
            false => 1,
        }
    }

    /// The identity a guest gets without `--cpu-vendor`: the host's own vendor where guest
    /// code runs in hardware (no cross-vendor surprises); Intel on kvm_pvm, whose emulator
    /// shows either the same way.
    pub fn default_identity(&self) -> CpuVendor {
        match self.flavour {
            Flavour::Pvm => CpuVendor::Intel,
            Flavour::Vmx | Flavour::Svm => self.cpu_vendor,
        }
    }

    /// How vCPUs not in the VIF mode execute, as `--stats` names it.
    pub fn execution_name(&self, native: bool) -> &'static str {
        match (native, self.emulates_kernel()) {
            (true, _) => "native",
            (false, true) => "emulated",
            (false, false) => "hardware",
        }
    }

    /// Switch KVM's own PMU off for `vm` (before any vCPU exists), so that every PMU MSR and
    /// RDPMC is the VMM's: an RDPMC KVM would answer from counters nobody programs #GPs
    /// instead. Where the kernel lacks the capability (before Linux 5.18) KVM keeps a PMU
    /// whose MSRs the filter still routes here, and a stray RDPMC reads KVM's counters.
    /// kvm_pvm is left as it is (its RDPMC #GPs already).
    pub fn disable_kvm_pmu(&self, vm: &VmFd) -> Result<bool, kvm_ioctls::Error> {
        if self.flavour == Flavour::Pvm || !self.kvm_pmu_disable {
            return Ok(false);
        }
        let mut cap = kvm_enable_cap { cap: KVM_CAP_PMU_CAPABILITY, ..Default::default() };
        cap.args[0] = u64::from(KVM_PMU_CAP_DISABLE);
        vm.enable_cap(&cap).map(|()| true)
    }
}

/// Whether `config` run in `mode` executes guest code at full speed: natively on kvm_pvm
/// (`auto` asks the guest image), or in hardware on kvm_intel / kvm_amd, where every mode is.
pub fn runs_at_full_speed(config: &crate::VmConfig, mode: pvm::native::NativeMode) -> bool {
    use pvm::native::NativeMode;
    if !caps().emulates_kernel() {
        return true;
    }
    match mode {
        NativeMode::Off => false,
        NativeMode::On => true,
        NativeMode::Auto => crate::builder::prepare(config)
            .ok()
            .and_then(|(image, _)| pvm::native::decide(mode, &image, caps()).ok())
            .is_some_and(|e| e.native),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaded_module_names_the_flavour() {
        assert_eq!(flavour_from_modules(|m| m == "kvm_pvm"), Some(Flavour::Pvm));
        assert_eq!(flavour_from_modules(|m| m == "kvm_amd"), Some(Flavour::Svm));
        assert_eq!(flavour_from_modules(|m| m == "kvm_intel"), Some(Flavour::Vmx));
        assert_eq!(flavour_from_modules(|_| false), None);
        // kvm_pvm can be loaded beside a hardware module: it is the one /dev/kvm is.
        assert_eq!(flavour_from_modules(|m| m == "kvm_pvm" || m == "kvm_intel"), Some(Flavour::Pvm));
    }

    #[test]
    fn each_flavour_answers_the_seam_questions() {
        let pvm = HostCaps { flavour: Flavour::Pvm, vif: true, kvm_pmu_disable: false, cpu_vendor: CpuVendor::Amd };
        let svm = HostCaps { flavour: Flavour::Svm, vif: false, kvm_pmu_disable: true, cpu_vendor: CpuVendor::Amd };
        assert!(pvm.emulates_kernel() && pvm.needs_syscall_repair() && !pvm.unadvertised_msrs().is_empty());
        assert!(!svm.emulates_kernel() && !svm.needs_syscall_repair() && svm.unadvertised_msrs().is_empty());
        assert!(svm.linux_cmdline(&[]).is_empty(), "a hardware host's Linux boots as a user has it");
        assert!(pvm.linux_cmdline(&[])[0].starts_with("mitigations=off"));
        assert_eq!((pvm.rdpmc_trap(), svm.rdpmc_trap()), (TrapForm::Int3, TrapForm::PortOut));
        assert_eq!((pvm.linux_tsc_scale(2_500_000), svm.linux_tsc_scale(2_500_000)), (13, 1));
        assert_eq!(
            [pvm.execution_name(false), pvm.execution_name(true), svm.execution_name(false)],
            ["emulated", "native", "hardware"]
        );
        assert_eq!((pvm.default_identity(), svm.default_identity()), (CpuVendor::Intel, CpuVendor::Amd));
        let pvm_without_vif = HostCaps { vif: false, ..pvm };
        assert!(!pvm_without_vif.needs_syscall_repair());
    }
}
