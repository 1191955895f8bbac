/* triple: with an empty IDT, #UD cannot be delivered, nor can the #GP or #DF that follow,
 * so the CPU shuts down (triple fault), which the VMM reports. */
#include "kit.h"

int main(int argc, char **argv)
{
	struct { uint16_t limit; uint64_t base; } __attribute__((packed)) empty = { 0, 0 };
	puts("triple: loading an empty IDT and executing ud2");
	asm volatile("lidt %0; ud2" : : "m"(empty) : "memory");
	return 1;
}
