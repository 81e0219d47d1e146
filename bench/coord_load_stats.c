/* coord_load's measures (coord_load.h): percentiles of samples, a process's CPU time
 * and memory read from /proc. */
#include "coord_load.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cl_samples_add(cl_samples *s, double v) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 1024;
    double *grown = realloc(s->v, cap * sizeof *grown);
    if (!grown) return -1;
    s->v = grown, s->cap = cap;
  }
  s->v[s->n++] = v;
  return 0;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least q of them at or below it (NAN: none). */
double cl_percentile(cl_samples *s, double q) {
  if (s->n == 0) return NAN;
  qsort(s->v, s->n, sizeof *s->v, by_value);
  size_t k = (size_t)ceil(q * (double)s->n);
  return s->v[k == 0 ? 0 : k - 1];
}

void cl_samples_json(FILE *f, const char *name, cl_samples *s) {
  double p50 = cl_percentile(s, 0.50), p99 = cl_percentile(s, 0.99), mx = cl_percentile(s, 1.0);
  if (s->n == 0) {
    fprintf(f, "\"%s\":{\"n\":0}", name);
    return;
  }
  fprintf(f, "\"%s\":{\"n\":%zu,\"p50\":%.3f,\"p99\":%.3f,\"max\":%.3f}", name, s->n, p50 * 1e3, p99 * 1e3, mx * 1e3);
}

/* /proc/PID/stat: utime and stime (fields 14 and 15) in clock ticks; the command name
 * (field 2) is in parentheses and may hold spaces, so fields count from its last ')'. */
double cl_proc_cpu(int pid) {
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return NAN;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (!p) return NAN;
  unsigned long long ut = 0, st = 0;
  /* after ')': state (3), then fields 4 to 13, then utime (14) and stime (15) */
  if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return NAN;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* A "Name:   N kB" line of /proc/PID/status, in kB (-1: none). */
long cl_proc_kb(int pid, const char *name) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kb = -1;
  size_t len = strlen(name);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, name, len) == 0 && line[len] == ':') {
      kb = strtol(line + len + 1, NULL, 10);
      break;
    }
  fclose(f);
  return kb;
}
