/* Ending the VM with a status the VMM reports (see guest/README.md). */
#include "kit.h"

void exit(int code)
{
	if (code == 0) {
		/* Bochs/QEMU shutdown port: the VM powers off cleanly, status 0. */
		for (const char *s = "Shutdown"; *s; s++)
			outb(PERFVM_PORT_SHUTDOWN, *s);
	} else {
		/* isa-debug-exit: the VM ends with status (code << 1) | 1. */
		outb(PERFVM_PORT_DEBUG_EXIT, code);
	}
	cpu_park(); /* no exit device */
}
