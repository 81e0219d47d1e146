/* libFuzzer target: an `atoll plan --config` file's text (not NUL-terminated) goes
 * through atoll_plan_opts_read_config and, if accepted, atoll_plan_setup_build and the
 * evaluation of the smallest layout (one device). Nothing may crash or leak; a
 * rejection must carry a message. The cpu accelerator keeps the catalog's figures:
 * under the fuzzer nothing measures this machine or reads a benchmark file (catalog_cpu
 * below stands in for src/cli/plan_cpu.c). Built by tests/fuzz/run_fuzz.sh. */
#include "plan/setup.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int catalog_cpu(const atoll_plan_opts *o, atoll_plan_accel *a, char *note, size_t note_size, atoll_err *err) {
  (void)o, (void)a, (void)err;
  snprintf(note, note_size, "cpu: the catalog's figures (fuzzing)");
  return 0;
}

static void plan_one_device(const atoll_plan_setup *p) {
  atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume, &p->failure};
  atoll_plan_layout lay = {1, 1, 1, 1, 0, 1, 1, ATOLL_RECOMPUTE_NONE, 0};
  atoll_plan_result r;
  atoll_plan_evaluate(&ctx, &lay, &r);
  if (!r.valid && r.why[0] == 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  atoll_plan_opts opts;
  atoll_err err;
  memset(&opts, 0, sizeof opts);
  memset(&err, 0, sizeof err);
  if (atoll_plan_opts_read_config(&opts, (const char *)data, size, "fuzz", &err) != 0) {
    if (err.msg[0] == 0) abort();
    atoll_plan_opts_free(&opts);
    return 0;
  }
  atoll_plan_setup *p = malloc(sizeof *p);
  if (p) {
    memset(&err, 0, sizeof err);
    if (atoll_plan_setup_build(&opts, catalog_cpu, p, &err) != 0) {
      if (err.msg[0] == 0) abort();
    } else {
      plan_one_device(p);
    }
    free(p);
  }
  atoll_plan_opts_free(&opts);
  return 0;
}
