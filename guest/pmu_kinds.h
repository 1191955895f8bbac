/* pmu_arch's instruction-kind table (pmu_kinds.c). */
#ifndef PMU_KINDS_H
#define PMU_KINDS_H
#include "pmu.h"

void check_instruction_kinds(const struct pmu_caps *caps, int exact);

#endif
