/* The CPU backend's optimizer kernels (src/ops/optim_cpu.c). */
#ifndef ATOLL_OPS_OPTIM_CPU_H
#define ATOLL_OPS_OPTIM_CPU_H

#include "ops/ops.h"

#include <stddef.h>

/* Sum of squares of g[begin, end) in double (for the global gradient norm); the same
 * bits at any OpenMP thread count. */
double atoll_sumsq(const float *g, size_t begin, size_t end);

/* The CPU table's entries (src/ops/ops.h: sumsq, adamw, sgd). */
double atoll_sumsq_cpu(const float *g, size_t n);
void atoll_adamw_span_cpu(float *p, const float *g, float *m, float *v, size_t n, const atoll_adamw_span *a);
void atoll_sgd_span_cpu(float *p, const float *g, size_t n, float decay, float step);

#endif
