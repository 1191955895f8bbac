//! Native execution on this host's `kvm_pvm` (the VIF mode, ../shared/pvm-native/README.md):
//! a vCPU with a registered VIF page runs CPL0 guest code at host speed instead of through
//! the host's instruction emulator. This module decides the mode of a VM (`--native`),
//! probes host support once per process, and registers or drops a vCPU's VIF page.

use crate::arch::x86_64::layout::VIF_BASE;
use crate::host::HostCaps;
use crate::loader::{BootProtocol, KernelImage};
use kvm_bindings::{kvm_msr_entry, Msrs};
use kvm_ioctls::VcpuFd;
use serde::Serialize;
use std::sync::OnceLock;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// The host's VIF registration MSR: `gpa | 1` registers, 0 returns to emulation.
pub const VIF_MSR: u32 = 0x4b56_4d10;
const VIF_ENABLE: u64 = 1;
/// What a registered VIF MSR reads back beside the address.
const VIF_ACTIVE: u64 = 0x400;
/// Set to `fail` to make the support probe fail (tests of the fallback paths).
pub const PROBE_ENV: &str = "PERFVM_NATIVE_PROBE";

/// `--native`: when the vCPUs run natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NativeMode {
    /// Native when the host supports it and the guest carries the VIF note.
    #[default]
    Auto,
    /// Native for any 64-bit guest; an error where that cannot be.
    On,
    /// Always emulated.
    Off,
}

/// How a VM's vCPUs execute, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Execution {
    /// The vCPUs run natively (the VIF mode).
    pub native: bool,
    /// How they run: native, emulated (kvm_pvm's CPL0 emulator) or hardware (VMX/SVM).
    pub mode: &'static str,
    /// Why the mode was chosen, for `--stats` and `--json`.
    pub reason: String,
    /// Guest code runs at host speed when not counted: natively, or in hardware.
    #[serde(skip)]
    full_speed: bool,
}

impl Execution {
    /// The mode's name as shown to users.
    pub fn name(&self) -> &'static str {
        self.mode
    }

    /// Whether guest code runs at host speed (natively, or in hardware) when not counted.
    pub fn full_speed(&self) -> bool {
        self.full_speed
    }

    fn new(host: &HostCaps, native: bool, reason: String) -> Self {
        let full_speed = native || !host.emulates_kernel();
        Execution { native, mode: host.execution_name(native), reason, full_speed }
    }
}

/// Why this host does not run vCPUs natively.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// `PERFVM_NATIVE_PROBE=fail`.
    #[error("the native-mode probe was made to fail ({PROBE_ENV}=fail)")]
    ProbeMadeToFail,
    /// The probe's scratch VM could not be set up.
    #[error(transparent)]
    Scratch(#[from] crate::vstate::kvm::ScratchError),
    /// The host refused the VIF page.
    #[error("the host does not take the VIF MSR {VIF_MSR:#x}: {0}")]
    NoVif(VifError),
}

/// Why a vCPU's VIF page was not registered or dropped.
#[derive(Debug, thiserror::Error)]
pub enum VifError {
    /// KVM_SET_MSRS wrote no MSR.
    #[error("KVM_SET_MSRS refused it")]
    Refused,
    /// The MSR does not read back as registered.
    #[error("VIF MSR reads back {0:#x}")]
    ReadsBack(u64),
    /// KVM_SET_MSRS or KVM_GET_MSRS failed.
    #[error("{0}")]
    Kvm(#[from] kvm_ioctls::Error),
}

/// Why `--native on` cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum NativeOnError {
    /// Linux toggles IF with cli/sti and pushf/popf: natively it would lose interrupts.
    #[error("--native on: Linux does not follow the VIF convention")]
    Linux,
    /// A multiboot guest starts in 32-bit mode.
    #[error("--native on needs a 64-bit ELF guest (multiboot guests start in 32-bit mode)")]
    NotElf64,
    /// The host cannot.
    #[error("--native on: {0}")]
    NoSupport(&'static NativeError),
    /// A hardware host has no VIF mode; it runs guest code at full speed anyway.
    #[error("--native on: {0} runs guest code in hardware and has no native (VIF) mode")]
    Hardware(&'static str),
}

/// Whether this host runs vCPUs natively, probed once per process: one `KVM_SET_MSRS` of
/// the VIF MSR on a scratch vCPU.
pub fn host_support() -> Result<(), &'static NativeError> {
    static PROBE: OnceLock<Result<(), NativeError>> = OnceLock::new();
    PROBE.get_or_init(probe).as_ref().map(|_| ())
}

fn probe() -> Result<(), NativeError> {
    if std::env::var(PROBE_ENV).is_ok_and(|v| v == "fail") {
        return Err(NativeError::ProbeMadeToFail);
    }
    // The host takes the MSR only for an address backed by guest memory.
    let scratch = crate::vstate::kvm::ScratchVm::new(VIF_BASE as usize + 0x1000)?;
    register_vif(&scratch.vcpu, VIF_BASE).map_err(NativeError::NoVif)
}

/// Decide the execution mode of a VM running `image` on `host`.
pub fn decide(mode: NativeMode, image: &KernelImage, host: &HostCaps) -> Result<Execution, NativeOnError> {
    let not_native = |reason: String| Ok(Execution::new(host, false, reason));
    if !host.emulates_kernel() {
        return match mode {
            NativeMode::On => Err(NativeOnError::Hardware(host.flavour.module())),
            _ => not_native(format!("{} runs guest code in hardware", host.flavour.module())),
        };
    }
    if mode == NativeMode::Off {
        return not_native("--native off".into());
    }
    if image.protocol == BootProtocol::Linux64 {
        // Linux toggles IF with cli/sti and pushf/popf: natively it would lose interrupts.
        return match mode {
            NativeMode::On => Err(NativeOnError::Linux),
            _ => not_native("Linux kernel (no VIF convention)".into()),
        };
    }
    let long_mode = image.protocol == BootProtocol::Direct64;
    let support = host_support();
    match (mode, long_mode, support) {
        (NativeMode::On, false, _) => Err(NativeOnError::NotElf64),
        (NativeMode::On, true, Err(why)) => Err(NativeOnError::NoSupport(why)),
        (NativeMode::On, true, Ok(())) => Ok(Execution::new(host, true, "--native on".into())),
        (_, false, _) => not_native("32-bit multiboot entry".into()),
        (_, true, Err(why)) => not_native(why.to_string()),
        (_, true, Ok(())) if !image.vif_note => not_native("the guest has no perfvm VIF note".into()),
        (_, true, Ok(())) => Ok(Execution::new(host, true, "host support and the guest's VIF note".into())),
    }
}

/// Whether the guest's VIF page at `gpa` says interrupts are on (`vif.if_`, its first byte).
pub fn vif_interrupts_on(mem: &GuestMemoryMmap, gpa: u64) -> bool {
    mem.read_obj::<u8>(GuestAddress(gpa)).is_ok_and(|v| v != 0)
}

/// The guest's interrupt flag natively: the VIF page's `if_` byte.
#[derive(Debug)]
pub struct VifFlag<'a> {
    /// Guest memory holding the page.
    pub mem: &'a GuestMemoryMmap,
    /// Guest-physical address of the vCPU's VIF page.
    pub gpa: u64,
}

impl crate::vstate::softint::InterruptFlag for VifFlag<'_> {
    fn get(&mut self, _regs: &kvm_bindings::kvm_regs) -> bool {
        vif_interrupts_on(self.mem, self.gpa)
    }
    fn set(&mut self, _regs: &mut kvm_bindings::kvm_regs, on: bool) {
        let _ = self.mem.write_obj(u8::from(on), GuestAddress(self.gpa));
    }
}

/// Guest-physical address of vCPU `index`'s VIF page.
pub fn vif_page(index: u32) -> u64 {
    VIF_BASE + u64::from(index) * 0x1000
}

fn set_vif_msr(vcpu: &VcpuFd, value: u64) -> Result<(), VifError> {
    let msrs = Msrs::from_entries(&[kvm_msr_entry { index: VIF_MSR, data: value, ..Default::default() }])
        .expect("one MSR fits");
    match vcpu.set_msrs(&msrs)? {
        1 => Ok(()),
        _ => Err(VifError::Refused),
    }
}

/// Register the VIF page at `gpa`: the vCPU runs natively from its next entry.
pub fn register_vif(vcpu: &VcpuFd, gpa: u64) -> Result<(), VifError> {
    set_vif_msr(vcpu, gpa | VIF_ENABLE)?;
    let mut msrs = Msrs::from_entries(&[kvm_msr_entry { index: VIF_MSR, ..Default::default() }]).expect("one MSR");
    match vcpu.get_msrs(&mut msrs)? {
        1 if msrs.as_slice()[0].data & VIF_ACTIVE != 0 => Ok(()),
        _ => Err(VifError::ReadsBack(msrs.as_slice()[0].data)),
    }
}

/// Register the VIF page at `gpa` again, without reading it back (one ioctl: the exact
/// backend's native blocks, `register_vif` having checked it once).
pub fn register_vif_unchecked(vcpu: &VcpuFd, gpa: u64) -> Result<(), VifError> {
    set_vif_msr(vcpu, gpa | VIF_ENABLE)
}

/// Drop the VIF page: the vCPU is emulated from its next entry (single-stepping needs it).
pub fn drop_vif(vcpu: &VcpuFd) -> Result<(), VifError> {
    set_vif_msr(vcpu, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::x86_64::identity::CpuVendor;
    use crate::host::Flavour;
    use crate::loader::Segment;

    const PVM: HostCaps =
        HostCaps { flavour: Flavour::Pvm, vif: true, kvm_pmu_disable: false, cpu_vendor: CpuVendor::Intel };

    fn image(protocol: BootProtocol, vif_note: bool) -> KernelImage {
        let segments = vec![Segment { paddr: 0x100000, file_offset: 0, filesz: 1, memsz: 1 }];
        KernelImage { protocol, entry: 0x100000, segments, end: 0x100001, vif_note, linux: None }
    }

    #[test]
    fn off_never_probes_and_stays_emulated() {
        let e = decide(NativeMode::Off, &image(BootProtocol::Direct64, true), &PVM).unwrap();
        assert!(!e.native);
        assert_eq!(e.reason, "--native off");
    }

    #[test]
    fn multiboot_cannot_run_natively() {
        let auto = decide(NativeMode::Auto, &image(BootProtocol::Multiboot, true), &PVM).unwrap();
        assert!(!auto.native);
        assert!(auto.reason.contains("32-bit"));
        let on = decide(NativeMode::On, &image(BootProtocol::Multiboot, true), &PVM).unwrap_err();
        assert!(on.to_string().contains("64-bit ELF"), "{on}");
    }

    #[test]
    fn hardware_hosts_run_in_hardware() {
        let svm = HostCaps { flavour: Flavour::Svm, vif: false, kvm_pmu_disable: true, cpu_vendor: CpuVendor::Amd };
        let e = decide(NativeMode::Auto, &image(BootProtocol::Direct64, true), &svm).unwrap();
        assert_eq!((e.native, e.name()), (false, "hardware"));
        let on = decide(NativeMode::On, &image(BootProtocol::Direct64, true), &svm).unwrap_err();
        assert!(on.to_string().contains("kvm_amd runs guest code in hardware"), "{on}");
    }

    #[test]
    fn vif_pages_are_one_per_vcpu_in_the_boot_area() {
        assert_eq!(vif_page(0), VIF_BASE);
        assert_eq!(vif_page(7), VIF_BASE + 7 * 0x1000);
        assert!(
            vif_page(crate::arch::x86_64::layout::MAX_VCPUS - 1) + 0x1000 <= crate::arch::x86_64::layout::BOOT_AREA_END
        );
    }
}
