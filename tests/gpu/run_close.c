/* Are two training runs close? The device script's comparer (tests/gpu/run_device.sh),
 * in C because the GPU machine may have no Python.
 *
 *   run_close weights A.safetensors B.safetensors TOL
 *       every F32 tensor of A is in B with the same shape (and no other in B);
 *       error = max |a - b| / max |a| over all of them; passes when error <= TOL.
 *       TOL 0 asks for bit-identical data (compared bytewise: NaNs too).
 *   run_close losses A/metrics.jsonl B/metrics.jsonl TOL
 *       the same steps in both; per step |loss_a - loss_b| / |loss_a| <= TOL.
 *
 * Prints one line (the worst error, and where) and exits 0 when close, 1 when not, 2 on
 * bad input (a missing or malformed file). tests/gpu/test_run_close.sh shows that it
 * fails where it should, on the CPU. */
#include "atoll/atoll.h"
#include "ckpt/safetensors.h"
#include "core/fs.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE ((size_t)1 << 34)

static int usage(void) {
  fprintf(stderr, "usage: run_close weights A.safetensors B.safetensors TOL\n"
                  "       run_close losses A/metrics.jsonl B/metrics.jsonl TOL\n");
  return 2;
}

static float f32_at(const uint8_t *p, uint64_t i) {
  float x;
  memcpy(&x, p + 4 * i, sizeof x); /* tensor data is not aligned in general */
  return x;
}

static int load_st(const char *path, char **buf, atoll_st_file *f, atoll_err *err) {
  size_t len;
  if (atoll_read_file(path, MAX_FILE, buf, &len, err)) return -1;
  return atoll_st_parse((const uint8_t *)*buf, len, path, f, err);
}

static int weights(const char *pa, const char *pb, double tol) {
  atoll_err err = {{0}};
  char *ba = NULL, *bb = NULL;
  atoll_st_file a = {0}, b = {0};
  if (load_st(pa, &ba, &a, &err) || load_st(pb, &bb, &b, &err)) {
    fprintf(stderr, "run_close: %s\n", err.msg);
    return 2;
  }
  double scale = 0.0, worst = 0.0;
  const char *worst_name = "-";
  int rc = 0, compared = 0, identical = 1;
  for (int i = 0; i < a.ntensors && rc == 0; i++) {
    const atoll_st_tensor *ta = &a.tensors[i], *tb = atoll_st_file_find(&b, ta->name);
    if (!tb || ta->dtype != tb->dtype || ta->ndim != tb->ndim ||
        memcmp(ta->shape, tb->shape, sizeof(int64_t) * (size_t)ta->ndim) != 0) {
      printf("run_close: %s: tensor %s is missing or has another dtype/shape in %s\n", pa, ta->name, pb);
      rc = 1;
      break;
    }
    if (ta->dtype != ATOLL_ST_F32) continue;
    compared++;
    if (memcmp(ta->data, tb->data, ta->end - ta->begin) != 0) identical = 0;
    for (uint64_t k = 0; k < ta->numel; k++) {
      double x = f32_at(ta->data, k), y = f32_at(tb->data, k), d = fabs(x - y);
      if (isnan(d)) d = INFINITY;
      if (fabs(x) > scale) scale = fabs(x);
      if (d > worst) {
        worst = d;
        worst_name = ta->name;
      }
    }
  }
  if (rc == 0 && a.ntensors != b.ntensors) {
    printf("run_close: %s has %d tensors, %s %d\n", pa, a.ntensors, pb, b.ntensors);
    rc = 1;
  }
  if (rc == 0) {
    double e = worst / (scale > 0 ? scale : 1.0);
    int ok = tol == 0.0 ? identical : e <= tol;
    printf("run_close: weights %s: %d tensors, %s, max |diff| / max |a| = %.3g (worst in %s), tolerance %.3g\n",
           ok ? "close" : "DIFFER", compared, identical ? "bit-identical" : "not bit-identical", e, worst_name,
           tol);
    rc = ok ? 0 : 1;
  }
  atoll_st_file_free(&a);
  atoll_st_file_free(&b);
  free(ba);
  free(bb);
  return rc;
}

/* step -> loss of one metrics.jsonl; steps[i] ascending as written. */
typedef struct {
  int n;
  int *step;
  double *loss;
} losses;

static int load_losses(const char *path, losses *out) {
  atoll_err err = {{0}};
  char *buf;
  size_t len;
  if (atoll_read_file(path, MAX_FILE, &buf, &len, &err)) {
    fprintf(stderr, "run_close: %s\n", err.msg);
    return -1;
  }
  int cap = 0;
  out->n = 0;
  out->step = NULL;
  out->loss = NULL;
  int lineno = 0;
  for (char *line = buf, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    lineno++;
    if (!*line) continue;
    cJSON *o = cJSON_Parse(line);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step"), *l = cJSON_GetObjectItemCaseSensitive(o, "loss");
    if (!cJSON_IsNumber(s) || !cJSON_IsNumber(l)) {
      fprintf(stderr, "run_close: %s:%d: not a metrics line with step and loss\n", path, lineno);
      cJSON_Delete(o);
      free(buf);
      return -1;
    }
    if (out->n == cap) {
      cap = cap ? 2 * cap : 64;
      out->step = realloc(out->step, sizeof(int) * (size_t)cap);
      out->loss = realloc(out->loss, sizeof(double) * (size_t)cap);
      if (!out->step || !out->loss) {
        fprintf(stderr, "run_close: out of memory\n");
        exit(2);
      }
    }
    out->step[out->n] = s->valueint;
    out->loss[out->n] = l->valuedouble;
    out->n++;
    cJSON_Delete(o);
  }
  free(buf);
  return 0;
}

static int loss_curves(const char *pa, const char *pb, double tol) {
  losses a, b;
  if (load_losses(pa, &a) || load_losses(pb, &b)) return 2;
  int rc = 0;
  if (a.n == 0 || a.n != b.n) {
    printf("run_close: %s has %d steps, %s %d\n", pa, a.n, pb, b.n);
    rc = 1;
  }
  double worst = 0.0;
  int worst_i = 0;
  for (int i = 0; i < a.n && rc == 0; i++) {
    if (a.step[i] != b.step[i]) {
      printf("run_close: line %d is step %d in %s, step %d in %s\n", i + 1, a.step[i], pa, b.step[i], pb);
      rc = 1;
      break;
    }
    double e = fabs(a.loss[i] - b.loss[i]) / (fabs(a.loss[i]) > 0 ? fabs(a.loss[i]) : 1.0);
    if (isnan(e)) e = INFINITY;
    if (e > worst || i == 0) {
      worst = e;
      worst_i = i;
    }
  }
  if (rc == 0) {
    int ok = worst <= tol;
    printf("run_close: losses %s: %d steps, worst relative difference %.3g at step %d (%.6f vs %.6f), "
           "tolerance %.3g\n",
           ok ? "close" : "DIFFER", a.n, worst, a.step[worst_i], a.loss[worst_i], b.loss[worst_i], tol);
    rc = ok ? 0 : 1;
  }
  free(a.step);
  free(a.loss);
  free(b.step);
  free(b.loss);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 5) return usage();
  char *end;
  double tol = strtod(argv[4], &end);
  if (end == argv[4] || *end || !(tol >= 0)) return usage();
  if (strcmp(argv[1], "weights") == 0) return weights(argv[2], argv[3], tol);
  if (strcmp(argv[1], "losses") == 0) return loss_curves(argv[2], argv[3], tol);
  return usage();
}
