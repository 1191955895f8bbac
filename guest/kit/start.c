/* kit_start: per-vCPU C entry. vCPU 0 sets up the shared state and runs main(argc, argv)
 * (under the perf agent when argv[1] is stat or record); the others wait for that and run
 * ap_main(idx). */
#include "kit.h"
#include "agent.h"

struct perfvm_boot_info *boot_info;
unsigned nr_vcpus = 1;
uint64_t mem_size;
uint64_t tsc_khz;

#define MAX_ARGS 64
static char cmdline[PERFVM_CMDLINE_MAX];
static char *argv[MAX_ARGS + 1];
static volatile int kit_ready;

__attribute__((weak)) void ap_main(unsigned idx)
{
	(void)idx;
	cpu_park();
}

int kit_full_speed;
unsigned long kit_blocks_scale = 1;

unsigned long size_arg(int argc, char **argv, int i, unsigned long emulated, unsigned long native)
{
	if (i < argc)
		return strtoul(argv[i], 0, 0);
	return kit_size(emulated, native);
}

/* Split the command line in place on blanks; argv[0] is the guest's name, as in QEMU. */
static int parse_cmdline(const char *src, uint32_t len)
{
	int argc = 0;
	if (len >= sizeof(cmdline))
		len = sizeof(cmdline) - 1;
	memcpy(cmdline, src, len);
	cmdline[len] = 0;
	for (char *p = cmdline; *p && argc < MAX_ARGS;) {
		while (*p == ' ' || *p == '\t')
			*p++ = 0;
		if (!*p)
			break;
		argv[argc++] = p;
		while (*p && *p != ' ' && *p != '\t')
			p++;
	}
	argv[argc] = 0;
	return argc;
}

void kit_start(unsigned idx, struct perfvm_boot_info *bi) __attribute__((noreturn));
void kit_start(unsigned idx, struct perfvm_boot_info *bi)
{
	if (idx != 0) {
		while (!__atomic_load_n(&kit_ready, __ATOMIC_ACQUIRE))
			pause();
		idt_load();
		ap_main(idx);
		cpu_park();
	}

	/* The execution mode first: nothing enables interrupts before this (every vCPU starts
	 * with IF = 0 and vif.if_ = 0), and the APs read it after kit_ready. */
	if (bi && bi->magic == PERFVM_BOOT_MAGIC && bi->version >= 2 && (bi->flags & PERFVM_BOOT_F_NATIVE) &&
	    bi->vif_base) {
		kit_vif_base = (uintptr_t)bi->vif_base;
		kit_native = 1;
	}
	int fast = bi && bi->magic == PERFVM_BOOT_MAGIC && (kit_native || (bi->flags & PERFVM_BOOT_F_HARDWARE));
	kit_full_speed = fast && !(bi->flags & PERFVM_BOOT_F_STEPPED);
	if (fast && (bi->flags & PERFVM_BOOT_F_STEPPED) && (bi->flags & PERFVM_BOOT_F_BLOCKS))
		kit_blocks_scale = KIT_BLOCKS_SCALE;
	serial_init();
	idt_init();
	idt_load();
	int argc = 0;
	if (bi && bi->magic == PERFVM_BOOT_MAGIC) {
		boot_info = bi;
		nr_vcpus = bi->nr_vcpus ? bi->nr_vcpus : 1;
		mem_size = bi->mem_size;
		tsc_khz = bi->tsc_khz;
		if (bi->cmdline)
			argc = parse_cmdline((const char *)(uintptr_t)bi->cmdline, bi->cmdline_len);
	} else {
		printf("kit: bad boot info at %p (magic %x), using defaults\n", (void *)bi,
		       bi ? bi->magic : 0);
	}
	__atomic_store_n(&kit_ready, 1, __ATOMIC_RELEASE);
	if (agent_wanted(argc, argv)) /* `<guest> stat|record ... -- <args>`: see agent.h */
		exit(agent_run(argc, argv, main));
	exit(main(argc, argv));
}
