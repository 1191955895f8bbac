/* The ELF note that declares this guest follows the native-mode VIF convention
 * (perfvm_boot.h): owner "perfvm", type PERFVM_NOTE_VIF, a 4-byte descriptor holding
 * PERFVM_NOTE_VIF_VERSION. link.ld puts .note.perfvm in the text segment and in a PT_NOTE
 * program header, where the VMM's loader looks for it. */
#include "perfvm_boot.h"

	.section .note.perfvm, "a", @note
	.balign 4
	.long 2f - 1f                /* namesz, with the NUL */
	.long 4f - 3f                /* descsz */
	.long PERFVM_NOTE_VIF        /* type */
1:	.asciz PERFVM_NOTE_NAME
2:	.balign 4
3:	.long PERFVM_NOTE_VIF_VERSION
4:	.balign 4

	.section .note.GNU-stack, "", @progbits /* no executable stack */
