/* mbsmp: a multiboot kernel that starts vCPU 1 the way firmware does, INIT-SIPI-SIPI
 * through the LAPIC, with a real-mode trampoline at 0x7000 (mb/trampoline.S). The VMM
 * leaves multiboot APs waiting for SIPI. Run with --vcpus 2. */
#include "mbkit.h"

#define TRAMP_ADDR 0x7000 /* the VMM's page tables live here, unused with paging off */
#define LAPIC 0xfee00000u
#define APIC_SVR 0x0f0
#define APIC_ICR_LO 0x300
#define APIC_ICR_HI 0x310
#define ICR_INIT 0x00000500u
#define ICR_STARTUP 0x00000600u
#define ICR_LEVEL_ASSERT 0x00004000u
#define ICR_TRIGGER_LEVEL 0x00008000u
#define ICR_BUSY 0x00001000u

extern const char mb_tramp_start[], mb_tramp_end[];
static volatile int ap_up;

static void lapic_write(uint32_t reg, uint32_t v) { *(volatile uint32_t *)(LAPIC + reg) = v; }
static uint32_t lapic_read(uint32_t reg) { return *(volatile uint32_t *)(LAPIC + reg); }

static void send_ipi(uint32_t apic_id, uint32_t icr)
{
	lapic_write(APIC_ICR_HI, apic_id << 24);
	lapic_write(APIC_ICR_LO, icr);
	for (int i = 0; i < 1000 && (lapic_read(APIC_ICR_LO) & ICR_BUSY); i++)
		pause();
}

static void delay(int n)
{
	for (volatile int i = 0; i < n; i++)
		;
}

void mb_ap_main(void);
void mb_ap_main(void)
{
	mb_printf("mbsmp: ap up (apic id %u)\n", lapic_read(0x20) >> 24);
	__atomic_store_n(&ap_up, 1, __ATOMIC_RELEASE);
}

int mb_main(uint32_t magic, struct multiboot_info *mbi)
{
	uint16_t cpus = 0;
	if (magic != MULTIBOOT_BOOTLOADER_MAGIC) {
		mb_printf("mbsmp: bad magic 0x%x\n", magic);
		return 1;
	}
	fw_cfg_read(0x0005, &cpus, 2);
	if (cpus < 2) {
		mb_printf("mbsmp: needs 2 vcpus, have %u\n", cpus);
		return 1;
	}
	volatile char *dst = (volatile char *)TRAMP_ADDR;
	for (const char *p = mb_tramp_start; p < mb_tramp_end; p++)
		*dst++ = *p;

	lapic_write(APIC_SVR, 0x1ff); /* software-enable the LAPIC */
	send_ipi(1, ICR_INIT | ICR_LEVEL_ASSERT | ICR_TRIGGER_LEVEL);
	send_ipi(1, ICR_INIT | ICR_TRIGGER_LEVEL); /* de-assert */
	delay(100);
	for (int i = 0; i < 2 && !ap_up; i++) { /* the second SIPI only if the first was lost */
		send_ipi(1, ICR_STARTUP | (TRAMP_ADDR >> 12));
		delay(100);
	}
	for (int i = 0; i < 2000000 && !__atomic_load_n(&ap_up, __ATOMIC_ACQUIRE); i++)
		pause();
	if (!ap_up) {
		mb_printf("mbsmp: ap did not come up\n");
		return 1;
	}
	mb_printf("mbsmp: bsp saw the ap, done\n");
	return 0;
}
