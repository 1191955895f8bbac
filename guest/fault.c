/* fault: an exception nobody expects must be reported by the kit, then exit(3). */
#include "kit.h"

int main(int argc, char **argv)
{
	puts("fault: executing ud2");
	asm volatile("ud2");
	puts("fault: survived ud2?!");
	return 1;
}
