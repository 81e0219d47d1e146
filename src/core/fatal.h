/* The one fatal path. Library code returns errors (atoll_err); it ends the process only
 * where continuing is impossible and no caller could recover: a collective whose peer
 * never answered (the job must end on every rank, src/comm), a device error that leaves
 * the GPU state unknown (src/ops/cuda). atoll_fatal prints "atoll: error: MESSAGE" on
 * stderr and calls the installed handler (src/comm installs one that ends every rank of
 * the job with MPI_Abort); without one it exits with status 1. */
#ifndef ATOLL_FATAL_H
#define ATOLL_FATAL_H

#ifdef __cplusplus
extern "C" {
#define _Noreturn [[noreturn]]
#endif

typedef void (*atoll_fatal_handler)(int code);

/* Installs the handler that ends the job (NULL: exit). */
void atoll_set_fatal_handler(atoll_fatal_handler fn);

_Noreturn void atoll_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#undef _Noreturn
#endif

#endif
