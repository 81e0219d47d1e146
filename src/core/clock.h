/* Monotonic time and medians (src/core/clock.c). */
#ifndef ATOLL_CORE_CLOCK_H
#define ATOLL_CORE_CLOCK_H

#include <stddef.h>


/* Monotonic seconds (for intervals only). */
double atoll_seconds(void);
/* Seconds since the Unix epoch (the wall clock: to line up the records of processes). */
double atoll_wall_seconds(void);
/* Median of v[0, n); sorts v in place. 0 for n = 0. */
double atoll_median(double *v, size_t n);

#endif
