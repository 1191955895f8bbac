/* exitcode N: ends the VM through exit(N) (0x.. and 0.. accepted, as strtoul base 0). */
#include "kit.h"

int main(int argc, char **argv)
{
	if (argc < 2) {
		puts("usage: exitcode N");
		return 1;
	}
	return (int)strtoul(argv[1], 0, 0);
}
