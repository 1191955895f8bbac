/*
 * Prints the guest ABI structs' sizes and field offsets as the kit's compiler lays them out,
 * one "struct size N" / "struct.field N" a line, and the constants both sides use
 * ("const NAME N"): crates/vmm/tests/guest_abi.rs compares them
 * with the VMM's Rust structs (crates/vmm/src/guest_abi.rs). Built for the host with the
 * guests' code-generation flags (the same x86-64 ABI).
 */
#include <stddef.h>
#include <stdio.h>
#include "perfvm_agent.h"
#include "perfvm_boot.h"
#include "perfvm_cpuid.h"
#include "perfvm_pv.h"

#define S(s) printf(#s " size %zu\n", sizeof(struct s))
#define F(s, f) printf(#s "." #f " %zu\n", offsetof(struct s, f))
#define C(name) printf("const " #name " %llu\n", (unsigned long long)(name))

int main(void)
{
	S(agent_msg_header); F(agent_msg_header, magic); F(agent_msg_header, type); F(agent_msg_header, vcpu);
	F(agent_msg_header, len); F(agent_msg_header, reserved);
	S(agent_count); F(agent_count, event); F(agent_count, flags); F(agent_count, task); F(agent_count, value);
	F(agent_count, time_enabled); F(agent_count, time_running);
	S(agent_counts); F(agent_counts, n); F(agent_counts, entry_size);
	S(agent_sample); F(agent_sample, rip); F(agent_sample, task); F(agent_sample, event); F(agent_sample, reserved);
	S(agent_samples); F(agent_samples, n); F(agent_samples, dropped);
	S(agent_samples2); F(agent_samples2, n); F(agent_samples2, dropped);
	S(agent_sample2); F(agent_sample2, rip); F(agent_sample2, tsc); F(agent_sample2, task); F(agent_sample2, event);
	F(agent_sample2, nr); F(agent_sample2, vcpu);
	S(agent_mark); F(agent_mark, kind); F(agent_mark, reserved); F(agent_mark, tsc);
	S(agent_value); F(agent_value, key); F(agent_value, value);
	S(agent_buffer); F(agent_buffer, samples_msg); F(agent_buffer, type); F(agent_buffer, reserved);
	S(agent_task); F(agent_task, id); F(agent_task, name);
	S(perfvm_boot_info); F(perfvm_boot_info, magic); F(perfvm_boot_info, version); F(perfvm_boot_info, mem_size);
	F(perfvm_boot_info, cmdline); F(perfvm_boot_info, cmdline_len); F(perfvm_boot_info, nr_vcpus);
	F(perfvm_boot_info, tsc_khz); F(perfvm_boot_info, flags); F(perfvm_boot_info, reserved);
	F(perfvm_boot_info, vif_base); F(perfvm_boot_info, cpuid_table); F(perfvm_boot_info, cpuid_entries);
	F(perfvm_boot_info, reserved2);
	S(perfvm_cpuid_entry); F(perfvm_cpuid_entry, leaf); F(perfvm_cpuid_entry, subleaf); F(perfvm_cpuid_entry, flags);
	F(perfvm_cpuid_entry, eax); F(perfvm_cpuid_entry, ebx); F(perfvm_cpuid_entry, ecx); F(perfvm_cpuid_entry, edx);
	F(perfvm_cpuid_entry, reserved);
	C(PERFVM_AGENT_MAGIC); C(PERFVM_PORT_AGENT); C(PERFVM_AGENT_MAX_MSG); C(AGENT_CHAIN_MAX);
	C(PERFVM_BOOT_MAGIC); C(PERFVM_BOOT_VERSION); C(PERFVM_BOOT_INFO_ADDR); C(PERFVM_CMDLINE_ADDR);
	C(PERFVM_CMDLINE_MAX); C(PERFVM_VIF_BASE); C(PERFVM_CPUID_TABLE); C(PERFVM_BOOT_F_NATIVE);
	C(PERFVM_BOOT_F_STEPPED); C(PERFVM_BOOT_F_HARDWARE); C(PERFVM_BOOT_F_BLOCKS); C(PERFVM_CPUID_SIGNATURE); C(PERFVM_CPUID_SIGNATURE_EBX);
	C(PERFVM_CPUID_SIGNATURE_ECX); C(PERFVM_CPUID_SIGNATURE_EDX); C(PERFVM_CPUID_VPMU);
	C(PERFVM_BACKEND_NONE); C(PERFVM_BACKEND_PERF); C(PERFVM_BACKEND_EXACT);
	C(PERFVM_PORT_PV_REGISTER); C(PERFVM_PORT_PV_DOORBELL); C(PV_HOST_VERSION); C(PV_COUNTERS);
	C(sizeof(struct pv_page_v2)); C(sizeof(struct pv_sampling));
	C(sizeof(struct pv_vmm_sampling)); C(offsetof(struct pv_page_v5, vmm));
	return 0;
}
