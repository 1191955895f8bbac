/* mbtest: a multiboot v1 kernel (32-bit, mb/ mini kit): checks the loader's magic and
 * prints the memory sizes, the command line and what fw_cfg reports. */
#include "mbkit.h"

int mb_main(uint32_t magic, struct multiboot_info *mbi)
{
	if (magic != MULTIBOOT_BOOTLOADER_MAGIC) {
		mb_printf("mbtest: bad magic 0x%x\n", magic);
		return 1;
	}
	if (mbi->flags & MB_INFO_MEMORY)
		mb_printf("mbtest: magic ok, mem_lower=%uK mem_upper=%uK\n", mbi->mem_lower, mbi->mem_upper);
	else
		mb_printf("mbtest: magic ok, no memory info (flags 0x%x)\n", mbi->flags);
	if (mbi->flags & MB_INFO_CMDLINE)
		mb_printf("mbtest: cmdline=%s\n", (const char *)mbi->cmdline);
	else
		mb_printf("mbtest: no cmdline\n");

	char sig[5] = { 0 };
	uint16_t cpus = 0;
	fw_cfg_read(0x0000, sig, 4); /* FW_CFG_SIGNATURE */
	fw_cfg_read(0x0005, &cpus, 2); /* FW_CFG_NB_CPUS */
	mb_printf("mbtest: fw_cfg %s cpus=%u\n", sig, cpus);
	return 0;
}
