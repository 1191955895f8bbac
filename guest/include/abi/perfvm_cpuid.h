/*
 * perfvm's own CPUID leaves: the contract between the VMM (crates/vmm/src/arch/x86_64/cpuid.rs,
 * `perfvm_leaves`) and any guest, so a guest learns from the VMM how its vPMU counts instead
 * of being told on its command line. Outside KVM's 0x40000000 range, at the next hypervisor
 * base (as a second hypervisor interface sits beside KVM's or Hyper-V's).
 */
#ifndef PERFVM_CPUID_H
#define PERFVM_CPUID_H

/* EAX: the last perfvm leaf; EBX, ECX, EDX: "perfvm" padded with NULs. */
#define PERFVM_CPUID_SIGNATURE      0x40000100u
#define PERFVM_CPUID_SIGNATURE_EBX  0x66726570u /* "perf" */
#define PERFVM_CPUID_SIGNATURE_ECX  0x00006d76u /* "vm\0\0" */
#define PERFVM_CPUID_SIGNATURE_EDX  0x00000000u
/* EAX: the vPMU's backend (PERFVM_BACKEND_*); EBX, ECX, EDX: 0 (reserved). */
#define PERFVM_CPUID_VPMU           0x40000101u

#define PERFVM_BACKEND_NONE  0u /* --pmu off */
#define PERFVM_BACKEND_PERF  1u /* host perf events: counts are ranges */
#define PERFVM_BACKEND_EXACT 2u /* single-stepped: instructions and branches exact */

#endif
