/* hello: the smallest useful guest; shows the boot info and the command line arrived. */
#include "kit.h"

int main(int argc, char **argv)
{
	printf("Hello from perfvm guest (vcpu %u of %u, %lu MiB)\n", smp_processor_id(), nr_vcpus,
	       (unsigned long)(mem_size >> 20));
	for (int i = 0; i < argc; i++)
		printf("argv[%d]=%s\n", i, argv[i]);
	return 0;
}
