/* spin: never ends on its own, with interrupts off (for the VMM's --timeout). */
#include "kit.h"

int main(int argc, char **argv)
{
	puts("spinning");
	irq_disable();
	for (;;)
		pause();
}
