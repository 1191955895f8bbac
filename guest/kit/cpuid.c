/* CPUID as the VMM configured it (KVM_SET_CPUID2). Emulated, the instruction answers that.
 * Native, this host's CPUID instruction does not (leaf 0xA, the vPMU, reads 0), so the answer
 * comes from the VMM's per-vCPU table in memory (perfvm_boot.h, struct perfvm_cpuid_entry). */
#include "kit.h"

struct cpuid_regs cpuid_count(uint32_t leaf, uint32_t subleaf)
{
	const struct perfvm_boot_info *bi = boot_info;
	if (!bi || bi->version < 2 || !(bi->flags & PERFVM_BOOT_F_NATIVE) || !bi->cpuid_table)
		return hw_cpuid_count(leaf, subleaf);
	const struct perfvm_cpuid_entry *t =
		(const struct perfvm_cpuid_entry *)(uintptr_t)(bi->cpuid_table + smp_processor_id() * 4096ull);
	for (uint32_t i = 0; i < bi->cpuid_entries; i++)
		if (t[i].leaf == leaf && (!(t[i].flags & PERFVM_CPUID_F_SUBLEAF) || t[i].subleaf == subleaf))
			return (struct cpuid_regs){ t[i].eax, t[i].ebx, t[i].ecx, t[i].edx };
	return (struct cpuid_regs){ 0, 0, 0, 0 };
}

unsigned vpmu_backend(void)
{
	struct cpuid_regs sig = cpuid(PERFVM_CPUID_SIGNATURE);
	if (sig.ebx != PERFVM_CPUID_SIGNATURE_EBX || sig.ecx != PERFVM_CPUID_SIGNATURE_ECX ||
	    sig.edx != PERFVM_CPUID_SIGNATURE_EDX || sig.eax < PERFVM_CPUID_VPMU)
		return PERFVM_BACKEND_NONE;
	return cpuid(PERFVM_CPUID_VPMU).eax;
}
