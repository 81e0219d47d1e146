/* atoll coordinator: the islands' coordinator process (src/net/coordinator.h). */
#include "cli/net_cli.h"
#include "cli/cli_number.h"
#include "net/coordinator.h"
#include "net/status_http.h"
#include "train/run_settings.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t stop_flag = 0;
static void on_signal(int sig) {
  (void)sig;
  stop_flag = 1;
}


int atoll_coordinator_main(int argc, char **argv) {
  atoll_coordinator_config c = {.min_islands = 1, .island_timeout = 10};
  const char *run_file = NULL;
  double v;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("usage: atoll coordinator --listen tcp://ADDR:PORT --keys DIR [--min-islands M] [--island-timeout S] [--state FILE]\n"
             "                         [--run FILE] [--quorum-grace S] [--open 1] [--status-listen HOST:PORT] [--status-linger S]\n"
             "  DIR holds the coordinator's key.secret (atoll keys --out DIR) and allowed/*.pub, the islands' public keys\n"
             "  --state FILE keeps the run's revision and members there (locked while in use; FILE.lock), so that a\n"
             "  restarted coordinator continues the run; one FILE per run. Without it nothing outlives the process.\n"
             "  The coordinator ends (status 0) once every island that registered has finished its run.\n"
             "  --run FILE: a JSON object of atoll train settings every island takes (model, steps, islands, sync-every...);\n"
             "  an island started without --islands asks for them and for its slot (its key's place in allowed/, by name)\n"
             "  --quorum-grace S: once --min-islands islands are ready for an exchange, wait at most S seconds for the\n"
             "  others; the late ones join at the first commit after they ask (0, the default: wait for every live island)\n"
             "  --open 1: an open run: any key in allowed/ (read again every 2 s) gets an island slot at its first ASK,\n"
             "  and the training data goes out in units, one per island phase (docs/islands.md, \"Open membership\");\n"
             "  --run FILE then sets no \"islands\"\n"
             "  --status-listen HOST:PORT (or PORT: 127.0.0.1): a read-only status page there: / (HTML), /status.json,\n"
             "  /metrics (Prometheus); --status-linger S keeps it up S seconds after the run ended (default 0)\n");
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "atoll: error: %s: missing value or unknown flag for coordinator\n", a);
      return 2;
    }
    const char *val = argv[++i];
    if (strcmp(a, "--listen") == 0) c.listen = val;
    else if (strcmp(a, "--keys") == 0) c.keys = val;
    else if (strcmp(a, "--state") == 0) c.state = val;
    else if (strcmp(a, "--run") == 0) run_file = val;
    else if (strcmp(a, "--status-listen") == 0) {
      atoll_err e;
      if (atoll_status_check_listen(val, &e)) {
        fprintf(stderr, "atoll: error: %s\n", e.msg);
        return 2;
      }
      c.status_listen = val;
    } else if (strcmp(a, "--status-linger") == 0) {
      if (atoll_cli_number(a, val, 0, 86400, &v)) return 2;
      c.status_linger = v;
    }
    else if (strcmp(a, "--min-islands") == 0) {
      if (atoll_cli_number(a, val, 1, 1024, &v)) return 2;
      if (v != (int)v) {
        fprintf(stderr, "atoll: error: --min-islands %s: expected a whole number\n", val);
        return 2;
      }
      c.min_islands = (int)v;
    } else if (strcmp(a, "--island-timeout") == 0) {
      if (atoll_cli_number(a, val, 0.1, 86400, &v)) return 2;
      c.island_timeout = v;
    } else if (strcmp(a, "--open") == 0) {
      if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0) {
        fprintf(stderr, "atoll: error: --open %s: expected 0 or 1\n", val);
        return 2;
      }
      c.open = val[0] == '1';
    } else if (strcmp(a, "--quorum-grace") == 0) {
      if (atoll_cli_number(a, val, 0, 86400, &v)) return 2;
      c.quorum_grace = v;
    } else if (strcmp(a, "--run-seconds") == 0) {
      if (atoll_cli_number(a, val, 0, 1e6, &v)) return 2;
      c.run_seconds = v;
    } else {
      fprintf(stderr, "atoll: error: %s: unknown flag for coordinator (see atoll coordinator --help)\n", a);
      return 2;
    }
  }
  if (!c.listen || !c.keys) {
    fprintf(stderr, "atoll: error: %s: coordinator needs it (usage: atoll coordinator --listen tcp://ADDR:PORT --keys DIR)\n",
            c.listen ? "--keys" : "--listen");
    return 2;
  }
  atoll_err err;
  char *run = NULL;
  if (run_file && atoll_run_settings_read(run_file, &run, &err)) {
    fprintf(stderr, "atoll: error: %s\n", err.msg);
    return 2;
  }
  if (c.open && (!run || atoll_run_settings_open(run_file, run, &c.phase, &c.steps, &err))) {
    if (!run) fprintf(stderr, "atoll: error: --open 1: an open run needs --run FILE (the settings every island takes)\n");
    else fprintf(stderr, "atoll: error: %s\n", err.msg);
    free(run);
    return 2;
  }
  c.run_json = run;
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  int rc = atoll_coordinator_run(&c, &stop_flag, &err);
  free(run);
  if (rc) {
    fprintf(stderr, "atoll: error: %s\n", err.msg);
    return 1;
  }
  return 0;
}
