/* fw_cfg reads; the lock keeps select+read of one vCPU from interleaving with another's. */
#include "kit.h"

static struct spinlock lock;

void fw_cfg_read(uint16_t key, void *buf, unsigned len)
{
	uint8_t *p = buf;
	spin_lock(&lock);
	outw(PERFVM_PORT_FW_CFG_SEL, key);
	for (unsigned i = 0; i < len; i++)
		p[i] = inb(PERFVM_PORT_FW_CFG_DAT);
	spin_unlock(&lock);
}
