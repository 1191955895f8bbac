/* kvm-unit-tests style result reporting. */
#ifndef KIT_HARNESS_H
#define KIT_HARNESS_H
#include "serial.h"

/* Prints "PASS: <prefixes: >msg" or "FAIL: ..."; returns pass. */
int report(int pass, const char *fmt, ...) KIT_PRINTF(2, 3);
void report_skip(const char *fmt, ...) KIT_PRINTF(1, 2);
void report_info(const char *fmt, ...) KIT_PRINTF(1, 2);
void report_prefix_push(const char *prefix);
void report_prefix_pop(void);
/* Prints "N passed, M failed[, K skipped]" as the last line; returns 0 if none failed, else 1. */
int report_summary(void);

#endif
