/* rdmsr/wrmsr/rdpmc that report a fault (-1) instead of killing the guest. */
#include "kit.h"

int rdmsr_safe(uint32_t msr, uint64_t *val)
{
	uint32_t lo = 0, hi = 0;
	exception_clear();
	asm volatile("1: rdmsr\n2:\n\t" EX_TABLE("1b", "2b")
		     : "+a"(lo), "+d"(hi) : "c"(msr) : "memory");
	if (exception_vector() >= 0)
		return -1;
	*val = lo | (uint64_t)hi << 32;
	return 0;
}

int wrmsr_safe(uint32_t msr, uint64_t val)
{
	exception_clear();
	asm volatile("1: wrmsr\n2:\n\t" EX_TABLE("1b", "2b")
		     : : "c"(msr), "a"((uint32_t)val), "d"((uint32_t)(val >> 32)) : "memory");
	return exception_vector() >= 0 ? -1 : 0;
}

int rdpmc_safe(uint32_t counter, uint64_t *val)
{
	uint32_t lo = 0, hi = 0;
	exception_clear();
	asm volatile("1: rdpmc\n2:\n\t" EX_TABLE("1b", "2b")
		     : "+a"(lo), "+d"(hi) : "c"(counter) : "memory");
	if (exception_vector() >= 0)
		return -1;
	*val = lo | (uint64_t)hi << 32;
	return 0;
}
