/* coord_load (bench/coord_load.c): light clients that load a real coordinator. Shared by
 * its files: coord_load.c (flags, keys, the report), coord_load_run.c (the clients and
 * the phases) and coord_load_stats.c (percentiles, /proc). */
#ifndef ATOLL_BENCH_COORD_LOAD_H
#define ATOLL_BENCH_COORD_LOAD_H

#include "net/sock.h"
#include "net/wire.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
  double *v;
  size_t n, cap;
} cl_samples;

int cl_samples_add(cl_samples *s, double v); /* 0, or -1: out of memory */
double cl_percentile(cl_samples *s, double q); /* sorts s */
void cl_samples_json(FILE *f, const char *name, cl_samples *s); /* "name":{n, p50, p99, max in ms} */
double cl_proc_cpu(int pid);                   /* user + system seconds (NAN: cannot read) */
long cl_proc_kb(int pid, const char *name);    /* VmHWM, VmRSS... of /proc/PID/status in kB, or -1 */

enum { RTT_NONE, RTT_READY, RTT_HELLO };

typedef struct {
  const char *endpoint, *keys;
  int clients;
  double seconds;       /* steady state (0: none) */
  int rtt;              /* what each client asks every second in it (RTT_*) */
  int exchange;         /* 1: one full exchange after it */
  double admit_timeout, exchange_timeout;
  int coordinator_pid;  /* 0: none */
} cl_config;

enum { C_NEW, C_HELLO, C_ADMITTED, C_REFUSED };

typedef struct {
  void *s;
  atoll_sender tx;
  uint32_t island;
  int state;            /* C_* */
  double hello_at, next_beat;
  int errors, errors_max; /* ERRORs received; of them, naming the member maximum */
  int welcomes;
  /* steady state: the question in flight (READY step `asked`, or a HELLO), when */
  int pending;
  uint32_t asked;
  double asked_at, next_ask;
  int answered;
  /* the exchange: 1 READY sent, 2 DONE sent, 3 COMMIT sent, 4 COMMITTED */
  int x;
  uint64_t quorum;
  size_t quorum_bytes;
  int aborts;
} cl_client;

typedef struct {
  const cl_config *cfg;
  void *ctx;
  cl_client *c;
  void *items; /* zmq_pollitem_t[clients] */
  uint8_t coord_pub[32];
  /* results */
  cl_samples admit, rtt;
  int admitted, refused, refused_once, unanswered, other_errors;
  double t_register, t_steady, t_exchange; /* phase durations */
  double cpu0, cpu_register, cpu_steady, cpu_exchange;
  int x_members, x_committed, x_aborts;
  size_t x_quorum_bytes;
  double x_quorum, x_go, x_merge; /* from the last READY sent to the last QUORUM, GO, COMMITTED */
  int rtt_clients, rtt_unanswered;
  char refusal[ATOLL_WIRE_MAX_TEXT + 1]; /* the first refusal's text ("": none) */
} cl_run;

/* coord_load_run.c: the clients' sockets and keys (DIR/clients/cNNNN.secret), then the
 * phases; 0, or -1 with one line on stderr */
int cl_open(cl_run *r);
int cl_register(cl_run *r);
int cl_steady(cl_run *r);
int cl_exchange(cl_run *r);
void cl_close(cl_run *r);

#endif
