/* The stop signals of a training run (SIGINT, SIGTERM, SIGHUP): their handler only sets
 * a flag, and it runs on a stack of its own, never on a stack pointer that a library
 * borrowed (src/core/stop_signal.c says which library and why). */
#ifndef ATOLL_STOP_SIGNAL_H
#define ATOLL_STOP_SIGNAL_H

#include "atoll/atoll.h"

#include <signal.h>

/* Installs the handler for the calling thread, which must be the thread that runs the
 * training loop (main): *flag becomes 1 on a stop signal, 2 on a later one. OpenMP's workers get the
 * signals blocked, so that only this thread takes them. Call it again from the same
 * thread to change the flag. */
int atoll_stop_signals_install(volatile sig_atomic_t *flag, atoll_err *err);

#endif
