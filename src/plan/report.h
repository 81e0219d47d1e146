/* Formatting that report.c and explain.c share (src/plan/report.c). */
#ifndef ATOLL_PLAN_REPORT_H
#define ATOLL_PLAN_REPORT_H

#include "atoll/plan.h"

#include <stddef.h>

/* b bytes in decimal units (kB, MB, GB: traffic, as links are specified) into buf */
const char *atoll_plan_fmt_gb(double b, char *buf, size_t n);

/* "dp D x tp T x pp P x cp C" of r's layout into buf */
void atoll_plan_layout_name(const atoll_plan_result *r, char *buf, size_t n);

#endif
