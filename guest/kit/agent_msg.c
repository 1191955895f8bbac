/* Messages to the VMM over the agent port (perfvm_agent.h): header + payload in guest
 * memory, its address in one 32-bit OUT to PERFVM_PORT_AGENT. */
#include "kit.h"
#include "agent.h"
#include "sched.h"

/* For the small messages (marks, values, task names). */
static uint8_t msg_buf[256] __attribute__((aligned(16)));
static char task_names[SCHED_MAX_TASKS + 1][28];

void agent_send_msg(void *msg, uint16_t type, uint32_t payload_len)
{
	struct agent_msg_header *h = msg;
	h->magic = PERFVM_AGENT_MAGIC;
	h->type = type;
	h->vcpu = (uint16_t)smp_processor_id();
	h->len = payload_len;
	h->reserved = 0;
	barrier(); /* the message is in memory before the VMM looks at it */
	outl(PERFVM_PORT_AGENT, (uint32_t)(uintptr_t)msg);
}

void agent_send(uint16_t type, const void *payload, uint32_t len)
{
	if (len > sizeof(msg_buf) - sizeof(struct agent_msg_header))
		return;
	uint64_t fl = irq_save(); /* one buffer for every task */
	memcpy(msg_buf + sizeof(struct agent_msg_header), payload, len);
	agent_send_msg(msg_buf, type, len);
	irq_restore(fl);
}

static void copy_str(char *dst, const char *src, size_t size)
{
	size_t i = 0;
	for (; src && src[i] && i + 1 < size; i++)
		dst[i] = src[i];
	for (; i < size; i++)
		dst[i] = 0;
}

void agent_send_value(const char *key, uint64_t v)
{
	struct agent_value m;
	copy_str(m.key, key, sizeof(m.key));
	m.value = v;
	agent_send(AGENT_MSG_VALUE, &m, sizeof(m));
}

void agent_name_task(uint32_t id, const char *name)
{
	struct agent_task m;
	m.id = id;
	copy_str(m.name, name, sizeof(m.name));
	if (id <= SCHED_MAX_TASKS)
		copy_str(task_names[id], name, sizeof(task_names[id]));
	agent_send(AGENT_MSG_TASK, &m, sizeof(m));
}

const char *agent_task_name(uint32_t id)
{
	return id <= SCHED_MAX_TASKS ? task_names[id] : "";
}

void agent_mark(uint32_t kind)
{
	struct agent_mark m = { .kind = kind, .reserved = 0, .tsc = rdtsc() };
	agent_send(AGENT_MSG_MARK, &m, sizeof(m));
}

/* The layouts perfvm_agent.h promises the VMM (crates/vmm/src/devices/agent.rs). */
_Static_assert(sizeof(struct agent_msg_header) == 16, "agent header");
_Static_assert(sizeof(struct agent_count) == 32, "agent_count");
_Static_assert(sizeof(struct agent_counts) == 8, "agent_counts");
_Static_assert(sizeof(struct agent_sample) == 16, "agent_sample");
_Static_assert(sizeof(struct agent_samples) == 8, "agent_samples");
_Static_assert(sizeof(struct agent_sample2) == 24, "agent_sample2");
_Static_assert(sizeof(struct agent_samples2) == 8, "agent_samples2");
_Static_assert(sizeof(struct agent_buffer) == 16, "agent_buffer");
_Static_assert(sizeof(struct agent_mark) == 16, "agent_mark");
_Static_assert(sizeof(struct agent_value) == 56, "agent_value");
_Static_assert(sizeof(struct agent_task) == 32, "agent_task");
