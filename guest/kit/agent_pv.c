/*
 * The perf agent's paravirtual PMU page (include/agent_pv.h, contract in perfvm_pv.h):
 * registration, the doorbell with a WRMSR fallback. The exitless read is inline in the
 * header.
 */
#include "kit.h"
#include "agent_pv.h"

struct pv_page_v5 agent_pv_page5 __attribute__((aligned(4096)));
int agent_pv_mode;
int agent_pv_sampling;
int agent_pv_vmm_samples;

static uint32_t offer(uint32_t version, uint32_t size)
{
	memset(&agent_pv_page5, 0, sizeof(agent_pv_page5));
	agent_pv_page.v1.guest_version = version;
	agent_pv_page.v1.size = size;
	barrier();
	outl(PERFVM_PORT_PV_REGISTER, (uint32_t)(uintptr_t)&agent_pv_page5);
	barrier();
	return agent_pv_page.v1.flags;
}

uint32_t agent_pv_register(void)
{
	uint32_t flags = offer(5, sizeof(struct pv_page_v5));
	if (!(flags & PV_F_ACCEPTED) && agent_pv_page.v1.host_version == 4)
		flags = offer(4, sizeof(struct pv_page_v3)); /* an older VMM */
	if (!(flags & PV_F_ACCEPTED) && agent_pv_page.v1.host_version == 3)
		flags = offer(3, sizeof(struct pv_page_v3)); /* an older VMM */
	if (!(flags & PV_F_ACCEPTED) && agent_pv_page.v1.host_version == 2)
		flags = offer(2, sizeof(struct pv_page_v2));
	agent_pv_sampling = (flags & PV_F_ACCEPTED) && (flags & PV_F_AUTO_RELOAD);
	agent_pv_vmm_samples = agent_pv_sampling && (flags & PV_F_VMM_SAMPLES);
	if (!(flags & PV_F_ACCEPTED))
		agent_pv_mode = AGENT_PV_OFF;
	else
		agent_pv_mode = flags & PV_F_EXITLESS_READS ? AGENT_PV_READS : AGENT_PV_BATCH;
	return flags;
}

void agent_pv_unregister(void)
{
	if (!agent_pv_mode)
		return;
	agent_pv_mode = AGENT_PV_OFF;
	agent_pv_sampling = 0;
	agent_pv_vmm_samples = 0;
	outl(PERFVM_PORT_PV_REGISTER, 0);
}

/* The doorbell went unanswered: do what the VMM would have done, with WRMSRs. */
uint32_t agent_pv_lost(uint32_t n)
{
	struct pv_page_v1 *p = &agent_pv_page.v1;
	uint32_t done = 0;
	agent_pv_mode = AGENT_PV_OFF;
	agent_pv_sampling = 0;
	agent_pv_vmm_samples = 0;
	p->batch_fault = 0;
	for (; done < n; done++) {
		if (wrmsr_safe(p->batch[done].msr, p->batch[done].value) < 0) {
			p->batch_fault = done + 1;
			break;
		}
	}
	p->batch_done = done;
	return done;
}

uint32_t agent_pv_submit(uint32_t n)
{
	if (!agent_pv_mode)
		return agent_pv_lost(n);
	agent_pv_ring(n);
	uint32_t done = agent_pv_page.v1.batch_done;
	return done == AGENT_PV_NO_ANSWER ? agent_pv_lost(n) : done;
}
