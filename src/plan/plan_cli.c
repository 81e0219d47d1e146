/* atoll plan: flags and --config FILE (a JSON object with the same keys, dashes or
 * underscores; flags override the file), then one of: a layout search (the default),
 * --fewest, --sweep, --calibrate, --list. See `atoll plan --help` and docs/plan.md.
 * Like the rest of the CLI, this is the only planner code that touches process-wide
 * state (thread counts for --measure) and decides exit statuses. */
#include "plan/plan_cli.h"
#include "plan/plan.h"

#include <cblas.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void openblas_set_num_threads(int n); /* OpenBLAS's own API */

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ----------------------------------------------------------------- options --- */

typedef enum { V_NONE, V_STR } vkind;

typedef struct {
  const char *key;
  vkind kind;
  const char *arg;
  const char *help;
} opt_spec;

static const opt_spec OPTS[] = {
    {"model", V_STR, "NAME", "model from the catalog (--list); shape flags below modify it"},
    {"arch", V_STR, "llama|gpt2", "architecture of a custom shape (default llama)"},
    {"layers", V_STR, "N", "transformer blocks"},
    {"dim", V_STR, "N", "model width"},
    {"heads", V_STR, "N", "attention heads (must divide --dim)"},
    {"kv-heads", V_STR, "N", "key/value heads (GQA; default: --heads)"},
    {"ffn", V_STR, "N", "MLP hidden width (default 4 x dim)"},
    {"vocab", V_STR, "N", "vocabulary size (default 128256 llama, 50257 gpt2)"},
    {"context", V_STR, "N", "positions of a gpt2 model (default: --seq)"},
    {"tied", V_STR, "0|1", "LM head tied to the embedding (default: gpt2 1, llama 0)"},
    {"seq", V_STR, "N", "training sequence length (default: the model's)"},
    {"accel", V_STR, "NAME", "accelerator (--list; default h100)"},
    {"gpus", V_STR, "N", "devices in the cluster, all islands (default: one node)"},
    {"gpus-per-node", V_STR, "N", "devices per node (default: the accelerator's)"},
    {"memory", V_STR, "SIZE", "memory per device, e.g. 80GiB (default: the accelerator's)"},
    {"intra-bw", V_STR, "BW", "per device, per direction, inside a node, e.g. 450GB/s"},
    {"inter-bw", V_STR, "BW", "per device between nodes, e.g. 400Gbps or 50GB/s"},
    {"intra-latency", V_STR, "TIME", "per ring step inside a node (default 5us)"},
    {"inter-latency", V_STR, "TIME", "per ring step between nodes (default 10us)"},
    {"islands", V_STR, "N", "DiLoCo islands the devices are split into (default 1)"},
    {"wan-bw", V_STR, "BW", "WAN bandwidth per island (default 10Gbps)"},
    {"wan-latency", V_STR, "TIME", "WAN latency per ring step (default 30ms)"},
    {"diloco-h", V_STR, "N", "inner steps between DiLoCo outer syncs (default 500)"},
    {"island-sync", V_STR, "diloco|every-step", "fix how islands sync (default: the faster)"},
    {"batch", V_STR, "N", "global batch in sequences per optimizer step"},
    {"batch-tokens", V_STR, "N", "global batch in tokens (e.g. 16M; rounded to sequences)"},
    {"tokens", V_STR, "N", "token budget of the run (e.g. 15.6T; default: the model's, or 20 per parameter)"},
    {"precision", V_STR, "bf16|fp32", "bf16 mixed precision (GPUs) or fp32 (cpu)"},
    {"dp", V_STR, "N", "fix the data-parallel size (per island)"},
    {"tp", V_STR, "N", "fix the tensor-parallel size"},
    {"pp", V_STR, "N", "fix the pipeline-parallel size"},
    {"cp", V_STR, "N", "fix the context-parallel size"},
    {"zero", V_STR, "0..3", "fix the ZeRO stage"},
    {"microbatch", V_STR, "N", "fix the sequences per micro-batch"},
    {"interleave", V_STR, "N", "fix the model chunks per pipeline rank (interleaved 1F1B)"},
    {"recompute", V_STR, "none|selective|full", "fix the activation recomputation"},
    {"top", V_STR, "N", "layouts shown (default 5)"},
    {"explain", V_NONE, "", "say in plain words why the best layout wins"},
    {"json", V_NONE, "", "print JSON instead of tables"},
    {"fewest", V_NONE, "", "fewest devices that hold the model (DP 1, one sequence per step)"},
    {"sweep", V_STR, "auto|N,N,...", "best layout and days to train by device count"},
    {"calibrate", V_STR, "SUMMARY", "plan an atoll CPU run and compare with its summary.json"},
    {"tolerance", V_STR, "F", "with --calibrate: fail when |predicted/measured - 1| > F"},
    {"measure", V_NONE, "", "cpu: measure this machine's sgemm and elementwise rates now (~1 s)"},
    {"cpu-gflops", V_STR, "X", "cpu: sgemm GFLOP/s of the machine (instead of measuring)"},
    {"bench-results", V_STR, "FILE", "cpu: read the sgemm peak from bench/run.sh's results"},
    {"threads", V_STR, "N", "cpu: threads per process (default: all cores)"},
    {"set", V_STR, "NAME=VALUE", "change an assumption (repeatable; names in the assumptions block)"},
    {"config", V_STR, "FILE", "JSON object with the same keys"},
    {"list", V_NONE, "", "list the catalog of models and accelerators"},
};
#define NOPTS (int)(sizeof OPTS / sizeof OPTS[0])
#define MAX_SETS 32

typedef struct {
  const char *val[NOPTS];
  int given[NOPTS];
  const char *sets[MAX_SETS];
  int nsets;
  char *owned[NOPTS + MAX_SETS]; /* strings made from JSON values */
  int nowned;
} options;

static int opt_index(const char *key) {
  char norm[64];
  size_t n = strlen(key);
  if (n >= sizeof norm) return -1;
  for (size_t i = 0; i <= n; i++) norm[i] = key[i] == '_' ? '-' : key[i];
  for (int i = 0; i < NOPTS; i++)
    if (strcmp(OPTS[i].key, norm) == 0) return i;
  return -1;
}

static const char *get(const options *o, const char *key) {
  int i = opt_index(key);
  return i >= 0 && o->given[i] ? (o->val[i] ? o->val[i] : "") : NULL;
}

static int set_opt(options *o, int i, const char *v, atoll_err *err) {
  if (strcmp(OPTS[i].key, "set") == 0) {
    if (o->nsets == MAX_SETS) return atoll_fail(err, "--set: at most %d assumptions", MAX_SETS);
    o->sets[o->nsets++] = v;
    return 0;
  }
  o->given[i] = 1;
  o->val[i] = v;
  return 0;
}

static char *slurp(const char *path, atoll_err *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    atoll_fail(err, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap + 1);
  if (buf) n = fread(buf, 1, cap, f);
  int big = buf && n == cap && fgetc(f) != EOF;
  fclose(f);
  if (!buf || big) {
    free(buf);
    atoll_fail(err, "%s: config file larger than 1 MiB", path);
    return NULL;
  }
  buf[n] = 0;
  return buf;
}

static int apply_config(options *o, const char *path, atoll_err *err) {
  char *text = slurp(path, err);
  if (!text) return -1;
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithOpts(text, &end, 0);
  size_t at = end && end >= text ? (size_t)(end - text) : 0;
  free(text);
  if (!j) return atoll_fail(err, "%s: invalid JSON near byte %zu", path, at);
  int rc = 0;
  if (!cJSON_IsObject(j)) {
    rc = atoll_fail(err, "%s: expected a JSON object of settings", path);
    goto done;
  }
  for (const cJSON *it = j->child; it; it = it->next) {
    const char *key = it->string ? it->string : "";
    int i = opt_index(key);
    if (i < 0 || strcmp(OPTS[i].key, "config") == 0) {
      rc = atoll_fail(err, "%s: unknown key '%s' (see atoll plan --help)", path, key);
      goto done;
    }
    char buf[1100];
    if (OPTS[i].kind == V_NONE) {
      if (!cJSON_IsBool(it)) {
        rc = atoll_fail(err, "%s: %s must be true or false", path, OPTS[i].key);
        goto done;
      }
      if (cJSON_IsTrue(it)) o->given[i] = 1, o->val[i] = NULL;
      continue;
    }
    const cJSON *items[MAX_SETS];
    int nitems = 0;
    if (strcmp(OPTS[i].key, "set") == 0 && cJSON_IsArray(it)) {
      for (const cJSON *e = it->child; e && nitems < MAX_SETS; e = e->next) items[nitems++] = e;
    } else {
      items[nitems++] = it;
    }
    for (int k = 0; k < nitems; k++) {
      const cJSON *v = items[k];
      if (cJSON_IsString(v))
        snprintf(buf, sizeof buf, "%s", v->valuestring);
      else if (cJSON_IsNumber(v))
        snprintf(buf, sizeof buf, "%.17g", v->valuedouble);
      else if (cJSON_IsBool(v))
        snprintf(buf, sizeof buf, "%d", cJSON_IsTrue(v));
      else {
        rc = atoll_fail(err, "%s: %s must be a number or a string", path, OPTS[i].key);
        goto done;
      }
      char *s = strdup(buf);
      o->owned[o->nowned++] = s;
      if ((rc = set_opt(o, i, s, err))) goto done;
    }
  }
done:
  cJSON_Delete(j);
  return rc;
}

static int parse_args(options *o, int argc, char **argv, atoll_err *err) {
  memset(o, 0, sizeof *o);
  /* --config first, so that flags override it */
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--config") == 0) {
      if (i + 1 >= argc) return atoll_fail(err, "--config: missing value");
      if (apply_config(o, argv[i + 1], err)) return -1;
    }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) return atoll_fail(err, "%s: unexpected argument (flags are --key value)", a);
    int k = opt_index(a + 2);
    if (k < 0) return atoll_fail(err, "%s: unknown flag for plan (see atoll plan --help)", a);
    if (OPTS[k].kind == V_NONE) {
      o->given[k] = 1;
      o->val[k] = NULL;
      continue;
    }
    if (i + 1 >= argc) return atoll_fail(err, "%s: missing value", a);
    if (strcmp(OPTS[k].key, "config") == 0) {
      i++;
      continue;
    }
    if (set_opt(o, k, argv[++i], err)) return -1;
  }
  return 0;
}

static void free_options(options *o) {
  for (int i = 0; i < o->nowned; i++) free(o->owned[i]);
}

/* ------------------------------------------------------------------ values --- */

static int parse_double(const char *key, const char *s, double *out, atoll_err *err) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v)) return atoll_fail(err, "--%s: expected a number, got '%s'", key, s);
  *out = v;
  return 0;
}

static int parse_int(const char *key, const char *s, long min, long max, int *out, atoll_err *err) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end) return atoll_fail(err, "--%s: expected an integer, got '%s'", key, s);
  if (v < min || v > max) return atoll_fail(err, "--%s: must be in [%ld, %ld], got %ld", key, min, max, v);
  *out = (int)v;
  return 0;
}

/* A number with an optional unit; units[] pairs a suffix with its multiplier. */
typedef struct {
  const char *suffix;
  double mult;
} unit;

static int parse_unit(const char *key, const char *s, const unit *units, int nunits, double min, double *out,
                      const char *expect, atoll_err *err) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !isfinite(v)) return atoll_fail(err, "--%s: expected %s, got '%s'", key, expect, s);
  while (*end == ' ') end++;
  double mult = 0;
  for (int i = 0; i < nunits; i++)
    if (strcmp(end, units[i].suffix) == 0) {
      mult = units[i].mult;
      break;
    }
  if (mult == 0) return atoll_fail(err, "--%s: expected %s, got '%s'", key, expect, s);
  v *= mult;
  if (!(v >= min)) return atoll_fail(err, "--%s: must be at least %g, got '%s'", key, min, s);
  *out = v;
  return 0;
}

static int parse_count(const char *key, const char *s, double min, double *out, atoll_err *err) {
  static const unit U[] = {{"", 1},    {"K", 1e3}, {"k", 1e3},  {"M", 1e6},
                           {"B", 1e9}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}};
  return parse_unit(key, s, U, 8, min, out, "a count like 16M or 15.6T", err);
}

static int parse_bw(const char *key, const char *s, double *out, atoll_err *err) {
  static const unit U[] = {{"", 1e9},          {"GB/s", 1e9},       {"GBps", 1e9},       {"MB/s", 1e6},
                           {"TB/s", 1e12},     {"Gb/s", 1e9 / 8},   {"Gbps", 1e9 / 8},   {"Gbit/s", 1e9 / 8},
                           {"Mb/s", 1e6 / 8},  {"Mbps", 1e6 / 8},   {"Mbit/s", 1e6 / 8}, {"Tb/s", 1e12 / 8},
                           {"Tbps", 1e12 / 8}, {"Tbit/s", 1e12 / 8}};
  return parse_unit(key, s, U, (int)(sizeof U / sizeof U[0]), 1, out,
                    "a bandwidth like 50GB/s or 400Gbps (bare numbers: GB/s)", err);
}

static int parse_time(const char *key, const char *s, double dflt_unit, double *out, atoll_err *err) {
  unit U[] = {{"", dflt_unit}, {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}};
  return parse_unit(key, s, U, 5, 0, out, "a time like 10us or 30ms", err);
}

static int parse_mem(const char *key, const char *s, double *out, atoll_err *err) {
  static const unit U[] = {{"", GIB},           {"GiB", GIB}, {"GB", 1e9},
                           {"TiB", 1024 * GIB}, {"TB", 1e12}, {"MiB", GIB / 1024}};
  return parse_unit(key, s, U, 6, 1, out, "a size like 80GiB (bare numbers: GiB)", err);
}

/* ------------------------------------------------------------------- build --- */

typedef struct {
  atoll_plan_model model;
  atoll_plan_cluster cluster;
  atoll_plan_train train;
  atoll_plan_assume assume;
  atoll_plan_fixed fixed;
  char cpu_note[160];
} plan_setup;

static double meminfo_total(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  double kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemTotal: %lf kB", &kb) == 1) break;
  fclose(f);
  return kb * 1024;
}

static void set_threads(int n) {
  if (n <= 0) {
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c > 0 ? (int)c : 1;
  }
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

/* The cpu accelerator's figures: --cpu-gflops, --measure, --bench-results (or
 * bench/results.json when present), else the catalog's measured default. */
static int setup_cpu(const options *o, atoll_plan_accel *a, char *note, size_t nn, atoll_err *err) {
  const char *s;
  int threads = 0;
  if ((s = get(o, "threads")) && parse_int("threads", s, 0, 4096, &threads, err)) return -1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int th = threads > 0 ? threads : (cores > 0 ? (int)cores : 1);
  double mem = meminfo_total();
  if (mem > 0) a->mem_bytes = mem;
  if ((s = get(o, "cpu-gflops"))) {
    double g = 0;
    if (parse_double("cpu-gflops", s, &g, err)) return -1;
    if (!(g > 0)) return atoll_fail(err, "--cpu-gflops: must be positive, got %s", s);
    atoll_plan_cpu_set(a, g * 1e9, 0);
    snprintf(note, nn, "cpu peak %.1f GFLOP/s (--cpu-gflops)", g);
  } else if (get(o, "measure")) {
    set_threads(threads);
    atoll_plan_cpu_measure m;
    if (atoll_plan_measure_cpu(&m, err)) return -1;
    atoll_plan_cpu_set(a, m.sgemm_flops, m.elem_bw);
    snprintf(note, nn, "cpu measured now with %d thread%s: sgemm %.1f GFLOP/s, elementwise %.1f GB/s", m.threads,
             m.threads == 1 ? "" : "s", m.sgemm_flops / 1e9, m.elem_bw / 1e9);
  } else {
    const char *path = get(o, "bench-results");
    double g = 0;
    int bth = 0;
    if (path) {
      if (atoll_plan_read_bench(path, &g, &bth, err)) return -1;
    } else if (access("bench/results.json", R_OK) == 0) {
      atoll_err ignore;
      if (atoll_plan_read_bench("bench/results.json", &g, &bth, &ignore)) g = 0;
      path = "bench/results.json";
    }
    if (g > 0) {
      /* scaled from the benchmark's thread count to this plan's */
      double scaled = bth > 0 ? g * th / bth : g;
      atoll_plan_cpu_set(a, scaled * 1e9, 0);
      if (bth > 0 && bth != th)
        snprintf(note, nn, "cpu peak %.1f GFLOP/s: %s's %.1f at %d thread%s, scaled to %d", scaled, path, g, bth,
                 bth == 1 ? "" : "s", th);
      else
        snprintf(note, nn, "cpu peak %.1f GFLOP/s from %s", g, path);
    } else {
      /* the catalog's figure is for 2 cores: scale per core */
      atoll_plan_cpu_set(a, a->peak_flops / 2 * th, 0);
      snprintf(note, nn, "cpu peak %.0f GFLOP/s: atoll's measured 100 GFLOP/s per core x %d (use --measure)",
               a->peak_flops / 1e9, th);
    }
  }
  return 0;
}

static int apply_assumption(atoll_plan_cluster *c, atoll_plan_assume *a, const char *kv, atoll_err *err) {
  const char *eq = strchr(kv, '=');
  if (!eq || eq == kv) return atoll_fail(err, "--set %s: expected NAME=VALUE", kv);
  char name[64];
  size_t n = (size_t)(eq - kv);
  if (n >= sizeof name) n = sizeof name - 1;
  memcpy(name, kv, n);
  name[n] = 0;
  double v;
  char *end;
  errno = 0;
  v = strtod(eq + 1, &end);
  if (errno || end == eq + 1 || *end || !isfinite(v) || v < 0)
    return atoll_fail(err, "--set %s: expected a non-negative number after '='", kv);
  struct {
    const char *name;
    double *p;
    double scale, max;
  } T[] = {
      {"eta_mm", &c->acc.eta_mm, 1, 1},
      {"eta_attn", &c->acc.eta_attn, 1, 1},
      {"attn_hd_half", &c->acc.attn_hd_half, 1, 1e6},
      {"attn_block", &c->acc.attn_block, 1, 1e6},
      {"elem_bw", &c->acc.elem_bw, 1e9, 1e9},
      {"layer_overhead", &c->acc.layer_overhead, 1e-6, 1e9},
      {"reserved", &c->acc.reserved, GIB, 1e9},
      {"link_eff", &a->link_eff, 1, 1},
      {"tp_overlap", &a->tp_overlap, 1, 1},
      {"cp_overlap", &a->cp_overlap, 1, 1},
      {"dp_overlap", &a->dp_overlap, 1, 1},
      {"adam_bytes", &a->adam_bytes, 1, 1e6},
      {"diloco_bytes", &a->diloco_bytes, 1, 64},
      {"diloco_util", &a->diloco_util, 1, 0.9999},
      {"tp_regather", &a->tp_regather, 1, 1},
  };
  for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
    if (strcmp(T[i].name, name) == 0) {
      if (v > T[i].max) return atoll_fail(err, "--set %s: must be at most %g", kv, T[i].max);
      if ((T[i].p == &c->acc.eta_mm || T[i].p == &c->acc.eta_attn || T[i].p == &c->acc.elem_bw ||
           T[i].p == &a->link_eff || T[i].p == &a->diloco_util) &&
          v <= 0)
        return atoll_fail(err, "--set %s: must be positive", kv);
      *T[i].p = v * T[i].scale;
      return 0;
    }
  return atoll_fail(err,
                    "--set %s: unknown assumption '%s' (eta_mm, eta_attn, attn_hd_half, attn_block, elem_bw, "
                    "layer_overhead, reserved, link_eff, tp_overlap, cp_overlap, dp_overlap, adam_bytes, "
                    "diloco_bytes, diloco_util, tp_regather)",
                    kv, name);
}

static int build_model(const options *o, atoll_plan_model *m, atoll_err *err) {
  const char *s = get(o, "model");
  int custom = 0;
  memset(m, 0, sizeof *m);
  if (s) {
    if (atoll_plan_model_find(s, m, err)) return -1;
  } else {
    if (!get(o, "layers") || !get(o, "dim") || !get(o, "heads")) {
      char list[256] = "";
      for (int i = 0; i < atoll_plan_model_count(); i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", atoll_plan_model_at(i)->name);
      return atoll_fail(err, "--model: give a model (known: %s) or a shape (--layers --dim --heads ...)", list);
    }
    snprintf(m->name, sizeof m->name, "custom");
    m->arch = ATOLL_ARCH_LLAMA;
    m->source = "command line";
  }
  if ((s = get(o, "arch"))) {
    if (strcmp(s, "llama") == 0)
      m->arch = ATOLL_ARCH_LLAMA;
    else if (strcmp(s, "gpt2") == 0)
      m->arch = ATOLL_ARCH_GPT2;
    else
      return atoll_fail(err, "--arch %s: unknown architecture (known: llama, gpt2)", s);
    custom = 1;
  }
  struct {
    const char *key;
    int *field;
    long min, max;
  } ints[] = {{"layers", &m->layers, 1, 100000},      {"dim", &m->dim, 1, 1 << 20}, {"heads", &m->heads, 1, 1 << 16},
              {"kv-heads", &m->kv_heads, 1, 1 << 16}, {"ffn", &m->ffn, 1, 1 << 24}, {"vocab", &m->vocab, 2, 1 << 24},
              {"context", &m->context, 1, 1 << 24},   {"seq", &m->seq, 1, 1 << 24}, {"tied", &m->tied, 0, 1}};
  int seq_given = 0, ctx_given = 0, kv_given = 0, ffn_given = 0, vocab_given = 0, tied_given = 0;
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    if (!(s = get(o, ints[i].key))) continue;
    if (parse_int(ints[i].key, s, ints[i].min, ints[i].max, ints[i].field, err)) return -1;
    if (strcmp(ints[i].key, "seq") == 0)
      seq_given = 1;
    else if (strcmp(ints[i].key, "context") == 0)
      ctx_given = 1, custom = 1;
    else if (strcmp(ints[i].key, "kv-heads") == 0)
      kv_given = 1, custom = 1;
    else if (strcmp(ints[i].key, "ffn") == 0)
      ffn_given = 1, custom = 1;
    else if (strcmp(ints[i].key, "vocab") == 0)
      vocab_given = 1, custom = 1;
    else if (strcmp(ints[i].key, "tied") == 0)
      tied_given = 1, custom = 1;
    else
      custom = 1;
  }
  int gpt2 = m->arch == ATOLL_ARCH_GPT2;
  if (!get(o, "model")) {
    if (!kv_given) m->kv_heads = m->heads;
    if (!ffn_given) m->ffn = 4 * m->dim;
    if (!vocab_given) m->vocab = gpt2 ? 50257 : 128256;
    if (!tied_given) m->tied = gpt2;
    if (!seq_given) m->seq = gpt2 ? 1024 : 8192;
  } else if (get(o, "heads") && !kv_given && (gpt2 || m->kv_heads > m->heads)) {
    m->kv_heads = m->heads;
  }
  if (gpt2 && !kv_given) m->kv_heads = m->heads;
  if (gpt2 && get(o, "dim") && !ffn_given && get(o, "model")) m->ffn = 4 * m->dim;
  if (!ctx_given && !get(o, "model")) m->context = m->seq;
  if (custom && get(o, "model")) {
    char base[64];
    snprintf(base, sizeof base, "%s", m->name);
    snprintf(m->name, sizeof m->name, "%.50s (modified)", base);
  }
  return atoll_plan_model_check(m, err);
}

static int build(const options *o, plan_setup *p, atoll_err *err) {
  memset(p, 0, sizeof *p);
  const char *s;
  if (build_model(o, &p->model, err)) return -1;
  atoll_plan_accel acc;
  if (atoll_plan_accel_find((s = get(o, "accel")) ? s : "h100", &acc, err)) return -1;
  if (acc.is_cpu && setup_cpu(o, &acc, p->cpu_note, sizeof p->cpu_note, err)) return -1;
  if (!acc.is_cpu && (get(o, "measure") || get(o, "cpu-gflops") || get(o, "bench-results")))
    return atoll_fail(err, "--measure, --cpu-gflops and --bench-results apply to --accel cpu only");
  if ((s = get(o, "memory")) && parse_mem("memory", s, &acc.mem_bytes, err)) return -1;
  atoll_plan_cluster *c = &p->cluster;
  atoll_plan_cluster_default(c, &acc, acc.gpus_per_node);
  atoll_plan_assume_defaults(&p->assume);
  for (int i = 0; i < o->nsets; i++)
    if (apply_assumption(c, &p->assume, o->sets[i], err)) return -1;
  if ((s = get(o, "gpus-per-node")) && parse_int("gpus-per-node", s, 1, 1 << 16, &c->gpus_per_node, err)) return -1;
  if ((s = get(o, "intra-bw")) && parse_bw("intra-bw", s, &c->intra_bw, err)) return -1;
  if ((s = get(o, "inter-bw")) && parse_bw("inter-bw", s, &c->inter_bw, err)) return -1;
  if ((s = get(o, "intra-latency")) && parse_time("intra-latency", s, 1e-6, &c->intra_lat, err)) return -1;
  if ((s = get(o, "inter-latency")) && parse_time("inter-latency", s, 1e-6, &c->inter_lat, err)) return -1;
  if ((s = get(o, "islands")) && parse_int("islands", s, 1, 1 << 16, &c->islands, err)) return -1;
  if ((s = get(o, "wan-bw")) && parse_bw("wan-bw", s, &c->wan_bw, err)) return -1;
  if ((s = get(o, "wan-latency")) && parse_time("wan-latency", s, 1e-3, &c->wan_lat, err)) return -1;
  if ((s = get(o, "diloco-h")) && parse_int("diloco-h", s, 1, 1 << 30, &c->diloco_h, err)) return -1;

  atoll_plan_fixed *f = &p->fixed;
  atoll_plan_fixed_none(f);
  struct {
    const char *key;
    int *field;
    long min, max;
  } fx[] = {{"dp", &f->dp, 1, 1 << 30},       {"tp", &f->tp, 1, 1 << 16}, {"pp", &f->pp, 1, 1 << 20},
            {"cp", &f->cp, 1, 1 << 20},       {"zero", &f->zero, 0, 3},   {"microbatch", &f->mb, 1, 1 << 20},
            {"interleave", &f->v, 1, 1 << 16}};
  for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++)
    if ((s = get(o, fx[i].key)) && parse_int(fx[i].key, s, fx[i].min, fx[i].max, fx[i].field, err)) return -1;
  if ((s = get(o, "island-sync"))) {
    if (strcmp(s, "diloco") == 0)
      f->island_sync = 0;
    else if (strcmp(s, "every-step") == 0)
      f->island_sync = 1;
    else
      return atoll_fail(err, "--island-sync %s: expected diloco or every-step", s);
  }
  if ((s = get(o, "recompute"))) {
    if (strcmp(s, "none") == 0)
      f->recompute = ATOLL_RECOMPUTE_NONE;
    else if (strcmp(s, "selective") == 0)
      f->recompute = ATOLL_RECOMPUTE_SELECTIVE;
    else if (strcmp(s, "full") == 0)
      f->recompute = ATOLL_RECOMPUTE_FULL;
    else
      return atoll_fail(err, "--recompute %s: expected none, selective or full", s);
  }
  if ((s = get(o, "gpus"))) {
    if (parse_int("gpus", s, 1, 1 << 30, &c->gpus, err)) return -1;
  } else if (f->dp && f->tp && f->pp && f->cp) {
    double n = (double)f->dp * f->tp * f->pp * f->cp * c->islands;
    if (n > (1 << 30)) return atoll_fail(err, "--dp x --tp x --pp x --cp: %.0f devices is too many", n);
    c->gpus = (int)n;
  } else {
    c->gpus = c->gpus_per_node * c->islands;
  }

  atoll_plan_train *t = &p->train;
  t->seq = p->model.seq;
  t->precision = acc.is_cpu ? ATOLL_PREC_FP32 : ATOLL_PREC_BF16;
  if ((s = get(o, "precision"))) {
    if (strcmp(s, "bf16") == 0)
      t->precision = ATOLL_PREC_BF16;
    else if (strcmp(s, "fp32") == 0)
      t->precision = ATOLL_PREC_FP32;
    else
      return atoll_fail(err, "--precision %s: expected bf16 or fp32", s);
  }
  if (get(o, "batch") && get(o, "batch-tokens")) return atoll_fail(err, "--batch and --batch-tokens: give one of them");
  if ((s = get(o, "batch"))) {
    double b = 0;
    if (parse_count("batch", s, 1, &b, err)) return -1;
    t->batch_tokens = floor(b) * t->seq;
  } else if ((s = get(o, "batch-tokens"))) {
    if (parse_count("batch-tokens", s, 1, &t->batch_tokens, err)) return -1;
    if (t->batch_tokens < t->seq)
      return atoll_fail(err, "--batch-tokens %s: less than one sequence of %d tokens", s, t->seq);
    t->batch_tokens = floor(t->batch_tokens / t->seq + 0.5) * t->seq;
  } else {
    /* the model's batch at its own sequence length: keep the sequence count */
    double b = p->model.batch_tokens > 0 ? p->model.batch_tokens : 512.0 * t->seq;
    t->batch_tokens = b;
  }
  if (t->batch_tokens / t->seq > 1e9) return atoll_fail(err, "batch: more than 1e9 sequences per step");
  if ((s = get(o, "tokens"))) {
    if (parse_count("tokens", s, 1, &t->token_budget, err)) return -1;
  } else {
    t->token_budget = p->model.token_budget > 0 && !strstr(p->model.name, "(modified)")
                          ? p->model.token_budget
                          : 20.0 * atoll_plan_params(&p->model);
  }
  return 0;
}

/* ------------------------------------------------------------------- output --- */

static void help(void) {
  printf("usage: atoll plan [--model NAME | --layers N --dim N --heads N ...] [--accel NAME] [--gpus N] [options]\n\n"
         "Says how to train a model on a cluster: the best parallel layouts (DP x TP x PP x CP with ZeRO stage,\n"
         "micro-batch, interleaving, recomputation), memory per GPU, bytes per link, step time, MFU and days\n"
         "for the token budget. Flags override --config FILE (a JSON object with the same keys). docs/plan.md\n"
         "explains the model and every assumption.\n\n");
  for (int i = 0; i < NOPTS; i++) {
    char left[64];
    snprintf(left, sizeof left, "--%s %s", OPTS[i].key, OPTS[i].arg);
    printf("  %-34s %s\n", left, OPTS[i].help);
  }
  printf("\nexamples:\n"
         "  atoll plan --model llama3-405b --accel h100 --gpus 16384 --explain\n"
         "  atoll plan --model llama3-405b --accel h100 --tp 8 --pp 16 --cp 1 --dp 64\n"
         "  atoll plan --model llama3-405b --accel h100 --fewest\n"
         "  atoll plan --model llama3-405b --accel h100 --sweep auto\n"
         "  atoll plan --calibrate runs/default/summary.json --measure\n");
}

static void list_catalog(void) {
  char a[32];
  printf("models:\n");
  for (int i = 0; i < atoll_plan_model_count(); i++) {
    const atoll_plan_model *m = atoll_plan_model_at(i);
    printf("  %-12s %7s params  %-5s L %-3d d %-5d heads %-3d kv %-3d ffn %-5d vocab %-6d seq %-5d  %s\n", m->name,
           atoll_plan_fmt_count(atoll_plan_params(m), a, sizeof a), m->arch == ATOLL_ARCH_LLAMA ? "llama" : "gpt2",
           m->layers, m->dim, m->heads, m->kv_heads, m->ffn, m->vocab, m->seq, m->source);
  }
  printf("accelerators:\n");
  for (int i = 0; i < atoll_plan_accel_count(); i++) {
    const atoll_plan_accel *x = atoll_plan_accel_at(i);
    if (x->is_cpu)
      printf("  %-10s %s: peak measured (--measure, --cpu-gflops, bench/results.json), memory from /proc/meminfo\n",
             x->name, x->desc);
    else
      printf("  %-10s %-24s %6.0f TFLOP/s bf16  %4.0f GiB  %5.2f TB/s  %d/node  NVLink %3.0f GB/s  NIC %3.0f GB/s\n",
             x->name, x->desc, x->peak_flops / 1e12, x->mem_bytes / GIB, x->hbm_bw / 1e12, x->gpus_per_node,
             x->intra_bw / 1e9, x->inter_bw / 1e9);
  }
}

static void print_json(cJSON *j) {
  char *s = cJSON_Print(j);
  printf("%s\n", s);
  free(s);
}

static int nothing_fits(const plan_setup *p, const atoll_plan_ctx *ctx, const atoll_plan_ranking *rk, atoll_err *err) {
  const atoll_plan_result *s = &rk->smallest;
  char a[32], b[32], extra[160] = "";
  atoll_plan_result few;
  atoll_err e2;
  if (atoll_plan_fewest(ctx, &few, &e2) == 0 && few.gpus > p->cluster.gpus)
    snprintf(extra, sizeof extra, "; at one sequence per step it needs at least %d of them (atoll plan --fewest)",
             few.gpus);
  return atoll_fail(
      err,
      "no layout of %s fits on %d x %s: the lightest (dp %d x tp %d x pp %d x cp %d, ZeRO-%d, recompute %s) "
      "needs %s per device, which has %s%s",
      p->model.name, p->cluster.gpus, p->cluster.acc.name, s->lay.dp, s->lay.tp, s->lay.pp, s->lay.cp, s->lay.zero,
      atoll_plan_recompute_name(s->lay.recompute), atoll_plan_fmt_bytes(s->mem_total, a, sizeof a),
      atoll_plan_fmt_bytes(p->cluster.acc.mem_bytes, b, sizeof b), extra);
}

static int run_search(const options *o, plan_setup *p, atoll_err *err) {
  atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume};
  int top = 5;
  const char *s;
  if ((s = get(o, "top")) && parse_int("top", s, 1, 1000000, &top, err)) return -1;
  atoll_plan_ranking rk;
  if (atoll_plan_search(&ctx, &p->fixed, &rk, err)) return -1;
  if (rk.nfit == 0) {
    int rc = nothing_fits(p, &ctx, &rk, err);
    atoll_plan_ranking_free(&rk);
    return rc;
  }
  int n = rk.nbest < top ? rk.nbest : top;
  if (get(o, "json")) {
    cJSON *j = atoll_plan_context_json(&ctx);
    cJSON *arr = cJSON_AddArrayToObject(j, "layouts");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, atoll_plan_result_json(&ctx, &rk.best[i]));
    cJSON_AddNumberToObject(j, "meshes_that_fit", rk.nbest);
    cJSON_AddNumberToObject(j, "layouts_evaluated", (double)rk.evaluated);
    if (p->cpu_note[0]) cJSON_AddStringToObject(j, "cpu", p->cpu_note);
    print_json(j);
    cJSON_Delete(j);
  } else {
    atoll_plan_print_header(stdout, &ctx);
    if (p->cpu_note[0]) printf("         %s\n", p->cpu_note);
    int used = rk.best[0].gpus;
    if (used < p->cluster.gpus)
      printf("note     the fixed layout uses %d of the cluster's %d devices\n", used, p->cluster.gpus);
    printf("\n%d of %ld layouts fit; the best %d of %d meshes (each with its best ZeRO stage, micro-batch, interleave, "
           "recompute):\n",
           rk.nfit, rk.evaluated, n, rk.nbest);
    atoll_plan_print_table(stdout, &ctx, rk.best, n);
    atoll_plan_print_detail(stdout, &ctx, &rk.best[0]);
    if (get(o, "explain")) atoll_plan_print_explain(stdout, &ctx, &rk);
    atoll_plan_print_assumptions(stdout, &ctx);
  }
  atoll_plan_ranking_free(&rk);
  return 0;
}

static int run_fewest(const options *o, plan_setup *p, atoll_err *err) {
  atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume};
  atoll_plan_result r;
  if (atoll_plan_fewest(&ctx, &r, err)) return -1;
  char a[32], b[32];
  double state = atoll_plan_params(&p->model) * 16;
  if (get(o, "json")) {
    cJSON *j = atoll_plan_context_json(&ctx);
    cJSON_AddNumberToObject(j, "fewest_gpus", r.gpus);
    cJSON_AddNumberToObject(j, "training_state_bytes", state);
    cJSON_AddItemToObject(j, "layout", atoll_plan_result_json(&ctx, &r));
    print_json(j);
    cJSON_Delete(j);
    return 0;
  }
  printf("fewest %s devices that hold %s for training (data parallel 1, one %d-token sequence per step): %d\n",
         p->cluster.acc.name, p->model.name, p->train.seq, r.gpus);
  printf("  layout: tp %d (inside a node of %d) x pp %d, recompute %s; stages of %d blocks (last %d + LM head)\n",
         r.lay.tp, p->cluster.gpus_per_node, r.lay.pp, atoll_plan_recompute_name(r.lay.recompute), r.stage_layers_first,
         r.stage_layers_last);
  char q[7][32];
  printf("  memory per device: %s of %s = weights %s + gradients %s + optimizer %s + activations %s + reserved %s\n",
         atoll_plan_fmt_bytes(r.mem_total, q[0], 32), atoll_plan_fmt_bytes(p->cluster.acc.mem_bytes, q[1], 32),
         atoll_plan_fmt_bytes(r.mem_weights, q[2], 32), atoll_plan_fmt_bytes(r.mem_grads, q[3], 32),
         atoll_plan_fmt_bytes(r.mem_optim, q[4], 32), atoll_plan_fmt_bytes(r.mem_act, q[5], 32),
         atoll_plan_fmt_bytes(r.mem_reserved, q[6], 32));
  printf("  why: weights, gradients and AdamW state alone are 16 bytes x %s parameters = %s, %.1f devices' worth;\n"
         "       with the runtime's reserve, the embedding on the first stage and whole blocks per stage, %d are "
         "needed.\n",
         atoll_plan_fmt_count(atoll_plan_params(&p->model), a, sizeof a), atoll_plan_fmt_bytes(state, b, sizeof b),
         state / p->cluster.acc.mem_bytes, r.gpus);
  printf(
      "  such a run: one sequence per step, %s per step, %.0f TFLOP/s per GPU (MFU %.1f%%; idle %.0f%% of the time in\n"
      "  the pipeline bubble, as one sequence passes through %d stages in turn);\n"
      "  at that rate the %s-token budget takes %.0f years. Hence thousands of GPUs: see --sweep.\n",
      atoll_plan_fmt_seconds(r.step_s, a, sizeof a), r.tflops_per_gpu, 100 * r.mfu, 100 * r.bubble / (1 + r.bubble),
      r.lay.pp, atoll_plan_fmt_count(p->train.token_budget, b, sizeof b), r.days / 365.25);
  return 0;
}

static int run_sweep(const options *o, plan_setup *p, const char *list, atoll_err *err) {
  int counts[64], n = 0;
  if (strcmp(list, "auto") == 0) {
    atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume};
    atoll_plan_result few;
    int start = 1;
    if (atoll_plan_fewest(&ctx, &few, err) == 0) start = few.gpus;
    int g = 1;
    while (g < start) g *= 2;
    for (; g <= (1 << 17) && n < 64; g *= 2) counts[n++] = g;
  } else {
    const char *s = list;
    while (*s && n < 64) {
      char *end;
      errno = 0;
      long v = strtol(s, &end, 10);
      if (errno || end == s || v < 1 || v > (1 << 30) || (*end && *end != ','))
        return atoll_fail(err, "--sweep %s: expected auto or device counts like 1024,4096,16384", list);
      counts[n++] = (int)v;
      s = *end ? end + 1 : end;
    }
  }
  atoll_plan_ctx ctx = {&p->model, &p->cluster, &p->train, &p->assume};
  atoll_plan_result *rs = calloc((size_t)n, sizeof *rs);
  if (!rs) return atoll_fail(err, "out of memory");
  atoll_plan_sweep(&ctx, counts, n, rs, err);
  if (get(o, "json")) {
    cJSON *j = atoll_plan_context_json(&ctx);
    cJSON *arr = cJSON_AddArrayToObject(j, "sweep");
    for (int i = 0; i < n; i++) {
      cJSON *e = rs[i].valid && rs[i].fits ? atoll_plan_result_json(&ctx, &rs[i]) : cJSON_CreateObject();
      cJSON_AddNumberToObject(e, "cluster_gpus", counts[i]);
      if (!(rs[i].valid && rs[i].fits)) cJSON_AddStringToObject(e, "note", rs[i].why);
      cJSON_AddItemToArray(arr, e);
    }
    print_json(j);
    cJSON_Delete(j);
    free(rs);
    return 0;
  }
  atoll_plan_print_header(stdout, &ctx);
  char a[32], b[32];
  printf("\n   GPUs   best layout (dp x tp x pp x cp)  zero   step    TFLOP/s   MFU       days\n");
  for (int i = 0; i < n; i++) {
    const atoll_plan_result *r = &rs[i];
    if (!(r->valid && r->fits)) {
      printf("%7d   %s\n", counts[i], r->why);
      continue;
    }
    char name[64];
    snprintf(name, sizeof name, "%d x %d x %d x %d", r->lay.dp, r->lay.tp, r->lay.pp, r->lay.cp);
    char dd[32];
    printf("%7d   %-31s %4d %9s %8.0f %5.1f%% %10s\n", counts[i], name, r->lay.zero,
           atoll_plan_fmt_seconds(r->step_s, a, sizeof a), r->tflops_per_gpu, 100 * r->mfu,
           atoll_plan_fmt_days(r->days, dd, sizeof dd));
  }
  printf("\nGradient descent is sequential in steps, not within one: each step's %s tokens split across the GPUs,\n"
         "so days fall almost in proportion to GPUs until the batch runs out of sequences to share (a data-parallel\n"
         "rank needs at least one) or communication and the pipeline bubble eat the gain. That, not memory, is why\n"
         "runs use 10,000+ GPUs: the model fits on about a hundred, but would take years to train there.\n",
         atoll_plan_fmt_count(p->train.batch_tokens, b, sizeof b));
  free(rs);
  return 0;
}

static int run_calibrate(const options *o, const char *path, atoll_err *err) {
  atoll_plan_calibration cal;
  if (atoll_plan_calibrate_read(path, &cal, err)) return -1;
  options o2 = *o;
  char th[32];
  int ti = opt_index("threads");
  if (!o2.given[ti]) {
    snprintf(th, sizeof th, "%d", cal.threads);
    o2.given[ti] = 1, o2.val[ti] = th;
  }
  double tol = -1;
  const char *s;
  if ((s = get(o, "tolerance")) && parse_double("tolerance", s, &tol, err)) return -1;
  atoll_plan_accel acc;
  atoll_plan_accel_find("cpu", &acc, err);
  char note[256];
  if (setup_cpu(&o2, &acc, note, sizeof note, err)) return -1;
  atoll_plan_cluster c;
  int world = cal.layout.dp * cal.layout.tp * cal.layout.pp;
  /* ranks that oversubscribe the cores each get their share of them: the cpu entry is
   * one process's rate, and the run is taken to have been made on this machine (as
   * the benchmark the rate comes from) */
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int per_rank = cal.threads > 0 ? cal.threads : (int)(cores > 0 ? cores : 1);
  double share = cores > 0 && (double)world * per_rank > (double)cores ? (double)cores / ((double)world * per_rank) : 1.0;
  if (share < 1.0) {
    size_t len = strlen(note);
    snprintf(note + len, sizeof note - len, "; %d ranks x %d thread%s on %ld cores: x %.2f each", world, per_rank,
             per_rank == 1 ? "" : "s", cores, share);
  }
  atoll_plan_cluster_default(&c, &acc, world);
  c.gpus_per_node = world;
  atoll_plan_assume a;
  atoll_plan_assume_defaults(&a);
  a.tp_regather = 0; /* atoll keeps the gathered inputs of the column-parallel products */
  for (int i = 0; i < o->nsets; i++)
    if (apply_assumption(&c, &a, o->sets[i], err)) return -1;
  c.acc.peak_flops *= share; /* after --set: a given elem_bw is one process's too */
  c.acc.elem_bw *= share;
  atoll_plan_calibrate_predict(&cal, &c, &a);
  const atoll_plan_result *r = &cal.result;
  atoll_plan_ctx ctx = {&cal.model, &c, &cal.train, &a};
  if (get(o, "json")) {
    cJSON *j = atoll_plan_context_json(&ctx);
    cJSON_AddStringToObject(j, "summary", path);
    cJSON_AddStringToObject(j, "cpu", note);
    cJSON_AddNumberToObject(j, "core_share", share);
    cJSON_AddNumberToObject(j, "measured_step_seconds", cal.measured_step_s);
    cJSON_AddNumberToObject(j, "predicted_step_seconds", cal.predicted_step_s);
    cJSON_AddNumberToObject(j, "gap", cal.gap);
    cJSON_AddItemToObject(j, "layout", atoll_plan_result_json(&ctx, r));
    print_json(j);
    cJSON_Delete(j);
  } else {
    char e1[32];
    printf("calibration against %s\n", path);
    printf("  run    %s, %d layer%s, width %d, %d heads, vocab %d; micro-batch %d x %d tokens, %d micro-batch%s, %d "
           "process%s (DP %d x TP %d x PP %d)\n",
           cal.model.name, cal.model.layers, cal.model.layers == 1 ? "" : "s", cal.model.dim, cal.model.heads,
           cal.model.vocab, cal.layout.mb, cal.train.seq, r->micro_batches, r->micro_batches == 1 ? "" : "es", world,
           world == 1 ? "" : "es", cal.layout.dp, cal.layout.tp, cal.layout.pp);
    printf("  %s\n", note);
    /* the modelled stage's blocks (all of them without a pipeline) */
    int stage_layers = cal.layout.pp == 1 ? cal.model.layers
                       : r->stage_layers_first > r->stage_layers_last ? r->stage_layers_first : r->stage_layers_last;
    double nb = (double)r->micro_batches * stage_layers;
    char q[8][32];
    printf(
        "  predicted step %s = blocks %s (matmuls %s, attention %s, elementwise %s, overhead %s)\n"
        "                 + LM head and loss %s + optimizer %s\n",
        atoll_plan_fmt_seconds(cal.predicted_step_s, q[0], 32),
        atoll_plan_fmt_seconds(nb * r->t_layer_compute, q[1], 32), atoll_plan_fmt_seconds(nb * r->t_layer_mm, q[2], 32),
        atoll_plan_fmt_seconds(nb * r->t_layer_attn, q[3], 32), atoll_plan_fmt_seconds(nb * r->t_layer_elem, q[4], 32),
        atoll_plan_fmt_seconds(nb * (r->t_layer_compute - r->t_layer_mm - r->t_layer_attn - r->t_layer_elem), q[5], 32),
        atoll_plan_fmt_seconds(r->micro_batches * r->t_head_mb, q[6], 32),
        atoll_plan_fmt_seconds(r->t_optim, q[7], 32));
    printf("  measured step  %s (median_step_seconds)\n", atoll_plan_fmt_seconds(cal.measured_step_s, e1, sizeof e1));
    printf("  gap            %+.1f%% (predicted / measured - 1)\n", 100 * cal.gap);
  }
  if (tol >= 0 && fabs(cal.gap) > tol)
    return atoll_fail(
        err, "--calibrate %s: predicted %.4g s per step, measured %.4g s: gap %+.1f%% exceeds the tolerance %.0f%%",
        path, cal.predicted_step_s, cal.measured_step_s, 100 * cal.gap, 100 * tol);
  return 0;
}

int atoll_plan_main(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      help();
      return 0;
    }
  atoll_err err = {{0}};
  options o;
  plan_setup *p = NULL;
  int rc = 1;
  if (parse_args(&o, argc, argv, &err)) goto out;
  if (get(&o, "list")) {
    list_catalog();
    rc = 0;
    goto out;
  }
  const char *cal = get(&o, "calibrate");
  if (cal) {
    rc = run_calibrate(&o, cal, &err) ? 1 : 0;
    goto out;
  }
  p = malloc(sizeof *p);
  if (!p || build(&o, p, &err)) goto out;
  const char *sweep = get(&o, "sweep");
  if (get(&o, "fewest") && sweep) {
    atoll_fail(&err, "--fewest and --sweep: give one of them");
    goto out;
  }
  if (get(&o, "fewest"))
    rc = run_fewest(&o, p, &err) ? 1 : 0;
  else if (sweep)
    rc = run_sweep(&o, p, sweep, &err) ? 1 : 0;
  else
    rc = run_search(&o, p, &err) ? 1 : 0;
out:
  if (rc) fprintf(stderr, "atoll: error: %s\n", err.msg[0] ? err.msg : "plan failed");
  free(p);
  free_options(&o);
  return rc;
}
