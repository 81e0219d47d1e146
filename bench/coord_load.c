/* coord_load: a real coordinator (atoll coordinator) under many light clients, in one
 * process: each client is its own ZeroMQ DEALER socket with its own CURVE key pair, and
 * speaks the islands' wire protocol (src/net/wire.h) without a model behind it.
 *
 *   coord_load --setup DIR --clients N
 *       writes a coordinator's keys (DIR/key.secret, DIR/key.pub), N client key pairs
 *       (DIR/clients/cNNNN.secret) and their public keys in DIR/allowed/cNNNN.pub; then
 *       start the coordinator with --keys DIR (it reads allowed/ at its start)
 *   coord_load --endpoint tcp://HOST:PORT --keys DIR --clients N [--seconds S]
 *              [--rtt ready|hello|none] [--exchange 0|1] [--coordinator-pid PID]
 *              [--admit-timeout S] [--exchange-timeout S]
 *
 * Phases, one after another, every admitted client heartbeating each second throughout:
 *   (a) register: one HELLO from each client at once; admission time = from its HELLO
 *       to its WELCOME. A client refused because the coordinator is full gets one ERROR
 *       naming the maximum ("holds its most members (256)"): counted as refused.
 *   (b) steady state for --seconds S (default 10; 0: none): each admitted client asks
 *       one question a second, spread over the second, and its round trip is timed:
 *       --rtt ready (default): READY for a new step each time, answered by WAIT while
 *       fewer than --min-islands are live (start the coordinator with --min-islands above
 *       N); the first READY of each client is a warm-up, not timed (the coordinator
 *       answers none until every member is ready). --rtt hello: the HELLO again,
 *       answered by WELCOME (the path of a heartbeat, plus the probe). none: heartbeats only.
 *   (c) --exchange 1: one exchange of all admitted clients with a fake contribution:
 *       READY -> QUORUM -> DONE -> GO -> COMMIT (one hash for all) -> COMMITTED. Merge
 *       latency = from the last READY sent to the last COMMITTED received. Needs a
 *       coordinator whose --min-islands the admitted clients reach, so not with --rtt
 *       ready (whose coordinator must not open an exchange): use a second coordinator.
 *
 * With --coordinator-pid, the coordinator's CPU time per phase (/proc/PID/stat) and its
 * peak and current resident memory (VmHWM, VmRSS of /proc/PID/status) are read too.
 * Output: one JSON line on stdout (times in ms; "steady_cpu_pct": coordinator CPU as a
 * share of one core over phase b; "self_cpu_s": this process's own). Status 0 when it ran (whatever the counts), 1 on a
 * failure to run, 2 on a bad flag. At most 1024 clients: a HELLO's island id is below
 * ATOLL_WIRE_MAX_MEMBERS (1024; island i is client i). Used by bench/coord_load.sh and
 * tests/net/test_coord_load.sh. */
#include "coord_load.h"

#include "net/keys.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <zmq.h>

static int bad(const char *flag, const char *val, const char *want) {
  fprintf(stderr, "coord_load: error: %s %s: expected %s\n", flag, val, want);
  return 2;
}

/* A number in [lo, hi] (whole: an integer): 0, or 2 with one line. */
static int number(const char *flag, const char *val, double lo, double hi, int whole, double *out) {
  char *end;
  errno = 0;
  double v = strtod(val, &end);
  if (!*val || *end || errno || !(v >= lo && v <= hi) || (whole && v != floor(v))) {
    char want[96];
    snprintf(want, sizeof want, "%s from %g to %g", whole ? "a whole number" : "a number", lo, hi);
    return bad(flag, val, want);
  }
  *out = v;
  return 0;
}

/* "Z85\n" into a new file of mode 0600 (a secret key; the coordinator refuses others). */
static int write_key(const char *path, const char *z85) {
  FILE *f = fopen(path, "wx");
  if (!f || chmod(path, 0600) || fprintf(f, "%s\n", z85) < 0 || fclose(f)) {
    fprintf(stderr, "coord_load: %s: %s\n", path, errno == EEXIST ? "exists (use a new --setup directory)" : strerror(errno));
    return -1;
  }
  return 0;
}

static int setup(const char *dir, int clients) {
  atoll_err err;
  char path[4200];
  if (atoll_keys_generate(dir, &err)) return fprintf(stderr, "coord_load: %s\n", err.msg), 1;
  if (atoll_key_path(path, sizeof path, dir, "clients", &err) || mkdir(path, 0700))
    return fprintf(stderr, "coord_load: %s/clients: %s\n", dir, strerror(errno)), 1;
  for (int i = 0; i < clients; i++) {
    char pub[ATOLL_KEY_Z85 + 1], sec[ATOLL_KEY_Z85 + 1], name[40];
    if (zmq_curve_keypair(pub, sec)) return fprintf(stderr, "coord_load: zmq_curve_keypair: %s\n", zmq_strerror(zmq_errno())), 1;
    snprintf(name, sizeof name, "clients/c%04d.secret", i);
    if (atoll_key_path(path, sizeof path, dir, name, &err) || write_key(path, sec)) return 1;
    snprintf(name, sizeof name, "allowed/c%04d.pub", i);
    if (atoll_key_path(path, sizeof path, dir, name, &err) || write_key(path, pub)) return 1;
  }
  printf("coord_load: %d client keys in %s/clients, allowed in %s/allowed\n", clients, dir, dir);
  return 0;
}

static void num(FILE *f, const char *name, double v, int comma) {
  if (isnan(v)) fprintf(f, "\"%s\":null", name);
  else fprintf(f, "\"%s\":%.3f", name, v);
  if (comma) fputc(',', f);
}

static void report(cl_run *r) {
  const cl_config *cfg = r->cfg;
  static const char *rtt[] = {"none", "ready", "hello"};
  int refused_once = 0, extra = 0;
  for (int i = 0; i < cfg->clients; i++) {
    const cl_client *c = &r->c[i];
    if (c->state == C_REFUSED) refused_once += c->errors == 1 && c->errors_max == 1;
    if (c->state == C_ADMITTED) extra += c->errors_max;
  }
  FILE *f = stdout;
  fprintf(f, "{\"clients\":%d,\"admitted\":%d,\"refused\":%d,\"refused_one_error\":%d,\"admitted_told_full\":%d,"
             "\"unanswered\":%d,\"other_errors\":%d,",
          cfg->clients, r->admitted, r->refused, refused_once, extra, r->unanswered, r->other_errors);
  fputs("\"refusal\":\"", f); /* (a JSON string: quotes, backslashes and controls escaped) */
  for (const char *p = r->refusal; *p; p++)
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if ((unsigned char)*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  fputs("\",", f);
  num(f, "register_s", r->t_register, 1);
  cl_samples_json(f, "admit_ms", &r->admit);
  fprintf(f, ",\"steady_s\":%.3f,\"rtt\":\"%s\",\"rtt_clients_answered\":%d,\"rtt_unanswered\":%d,", r->t_steady,
          rtt[cfg->rtt], r->rtt_clients, r->rtt_unanswered);
  cl_samples_json(f, "rtt_ms", &r->rtt);
  fprintf(f, ",\"exchange\":%d,\"x_members\":%d,\"x_committed\":%d,\"x_aborts\":%d,\"x_quorum_bytes\":%zu,", cfg->exchange,
          r->x_members, r->x_committed, r->x_aborts, r->x_quorum_bytes);
  num(f, "x_quorum_ms", cfg->exchange ? r->x_quorum * 1e3 : NAN, 1);
  num(f, "x_go_ms", cfg->exchange ? r->x_go * 1e3 : NAN, 1);
  num(f, "merge_ms", cfg->exchange ? r->x_merge * 1e3 : NAN, 1);
  int pid = cfg->coordinator_pid;
  fprintf(f, "\"coordinator_pid\":%d,", pid);
  num(f, "register_cpu_s", pid ? r->cpu_register : NAN, 1);
  num(f, "steady_cpu_s", pid ? r->cpu_steady : NAN, 1);
  num(f, "steady_cpu_pct", pid && r->t_steady > 0 ? 100 * r->cpu_steady / r->t_steady : NAN, 1);
  num(f, "exchange_cpu_s", pid && cfg->exchange ? r->cpu_exchange : NAN, 1);
  struct rusage ru; /* (this process's own CPU: its clients' CURVE work shares the cores with the coordinator) */
  getrusage(RUSAGE_SELF, &ru);
  num(f, "self_cpu_s", (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6, 1);
  fprintf(f, "\"vmhwm_kb\":%ld,\"vmrss_kb\":%ld}\n", pid ? cl_proc_kb(pid, "VmHWM") : -1, pid ? cl_proc_kb(pid, "VmRSS") : -1);
  fflush(f);
}

int main(int argc, char **argv) {
  cl_config cfg = {.seconds = 10, .rtt = RTT_READY, .admit_timeout = 30, .exchange_timeout = 30};
  const char *setup_dir = NULL;
  double v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("usage: coord_load --setup DIR --clients N\n"
             "       coord_load --endpoint tcp://HOST:PORT --keys DIR --clients N [--seconds S] [--rtt ready|hello|none]\n"
             "                  [--exchange 0|1] [--coordinator-pid PID] [--admit-timeout S] [--exchange-timeout S]\n"
             "  (the phases and the JSON it prints: the comment at the top of bench/coord_load.c)\n");
      return 0;
    }
    if (i + 1 >= argc) return fprintf(stderr, "coord_load: error: %s: missing value or unknown flag (see --help)\n", a), 2;
    const char *val = argv[++i];
    int rc = 0;
    if (strcmp(a, "--setup") == 0) setup_dir = val;
    else if (strcmp(a, "--endpoint") == 0) cfg.endpoint = val;
    else if (strcmp(a, "--keys") == 0) cfg.keys = val;
    else if (strcmp(a, "--clients") == 0) {
      if (!(rc = number(a, val, 1, 1e9, 1, &v)) && v > ATOLL_WIRE_MAX_MEMBERS) {
        fprintf(stderr, "coord_load: error: --clients %s: at most %d (client i is island i, and a HELLO's island id is below ATOLL_WIRE_MAX_MEMBERS)\n",
                val, ATOLL_WIRE_MAX_MEMBERS);
        rc = 2;
      }
      if (!rc) cfg.clients = (int)v;
    } else if (strcmp(a, "--seconds") == 0) {
      if (!(rc = number(a, val, 0, 86400, 0, &v))) cfg.seconds = v;
    } else if (strcmp(a, "--admit-timeout") == 0) {
      if (!(rc = number(a, val, 0.1, 86400, 0, &v))) cfg.admit_timeout = v;
    } else if (strcmp(a, "--exchange-timeout") == 0) {
      if (!(rc = number(a, val, 0.1, 86400, 0, &v))) cfg.exchange_timeout = v;
    } else if (strcmp(a, "--coordinator-pid") == 0) {
      if (!(rc = number(a, val, 1, 4194304, 1, &v))) cfg.coordinator_pid = (int)v;
    } else if (strcmp(a, "--exchange") == 0) {
      if (strcmp(val, "0") && strcmp(val, "1")) rc = bad(a, val, "0 or 1");
      cfg.exchange = val[0] == '1';
    } else if (strcmp(a, "--rtt") == 0) {
      if (strcmp(val, "ready") == 0) cfg.rtt = RTT_READY;
      else if (strcmp(val, "hello") == 0) cfg.rtt = RTT_HELLO;
      else if (strcmp(val, "none") == 0) cfg.rtt = RTT_NONE;
      else rc = bad(a, val, "ready, hello or none");
    } else {
      return fprintf(stderr, "coord_load: error: %s: unknown flag (see --help)\n", a), 2;
    }
    if (rc) return rc;
  }
  if (!cfg.clients) return fprintf(stderr, "coord_load: error: --clients N is needed\n"), 2;
  if (setup_dir) return setup(setup_dir, cfg.clients);
  if (!cfg.endpoint || !cfg.keys)
    return fprintf(stderr, "coord_load: error: %s is needed (or --setup DIR to make the keys)\n", cfg.endpoint ? "--keys DIR" : "--endpoint tcp://HOST:PORT"), 2;
  if (cfg.exchange && cfg.rtt == RTT_READY && cfg.seconds > 0)
    return fprintf(stderr, "coord_load: error: --exchange 1 with --rtt ready: the READY round trips need a coordinator that opens no exchange (--min-islands above N); give --rtt hello, none or --seconds 0\n"), 2;
  if (cfg.coordinator_pid && isnan(cl_proc_cpu(cfg.coordinator_pid)))
    return fprintf(stderr, "coord_load: error: --coordinator-pid %d: no /proc/%d/stat to read\n", cfg.coordinator_pid, cfg.coordinator_pid), 2;
  cl_run r = {.cfg = &cfg};
  int rc = cl_open(&r) || cl_register(&r) || cl_steady(&r) || cl_exchange(&r);
  if (!rc) report(&r);
  cl_close(&r);
  return rc ? 1 : 0;
}
