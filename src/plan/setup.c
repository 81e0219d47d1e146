/* atoll plan's options turned into a plan: numbers with units (16M, 400Gbps, 10us,
 * 80GiB), the model (a catalog entry, possibly changed, or a shape), the cluster, the
 * sizes the user fixed and the training settings. */
#include "plan/setup.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *get(const atoll_plan_opts *o, const char *key) { return atoll_plan_opt(o, key); }

/* ------------------------------------------------------------------ values --- */

int atoll_plan_parse_double(const char *key, const char *s, double *out, atoll_err *err) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v)) return atoll_fail(err, "--%s: expected a number, got '%s'", key, s);
  *out = v;
  return 0;
}

int atoll_plan_parse_int(const char *key, const char *s, long min, long max, int *out, atoll_err *err) {
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
  unit U[] = {{"", dflt_unit}, {"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"min", 60}, {"h", 3600}};
  return parse_unit(key, s, U, 7, 0, out, "a time like 10us, 30ms or 10min", err);
}

/* One of a flag's named values. */
typedef struct {
  const char *name;
  int value;
} choice;

static int parse_choice(const char *key, const char *s, const choice *choices, int n, const char *expect, int *out,
                        atoll_err *err) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, choices[i].name) == 0) {
      *out = choices[i].value;
      return 0;
    }
  return atoll_fail(err, "--%s %s: %s", key, s, expect);
}

static int parse_mem(const char *key, const char *s, double *out, atoll_err *err) {
  static const unit U[] = {{"", GIB},           {"GiB", GIB}, {"GB", 1e9},
                           {"TiB", 1024 * GIB}, {"TB", 1e12}, {"MiB", GIB / 1024}};
  return parse_unit(key, s, U, 6, 1, out, "a size like 80GiB (bare numbers: GiB)", err);
}

/* ------------------------------------------------------------------- build --- */

int atoll_plan_setup_assumption(atoll_plan_cluster *c, atoll_plan_assume *a, const char *kv, atoll_err *err) {
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
      {"clock_eff", &c->acc.clock_eff, 1, 1},
      {"mm_k_over", &c->acc.mm_k_over, 1, 1e6},
      {"attn_fused", &a->attn_fused, 1, 1},
      {"seq_par", &a->seq_par, 1, 1},
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
           T[i].p == &c->acc.clock_eff ||
           T[i].p == &a->link_eff || T[i].p == &a->diloco_util) &&
          v <= 0)
        return atoll_fail(err, "--set %s: must be positive", kv);
      *T[i].p = v * T[i].scale;
      return 0;
    }
  return atoll_fail(err,
                    "--set %s: unknown assumption '%s' (eta_mm, clock_eff, mm_k_over, attn_fused, seq_par, eta_attn, "
                    "attn_hd_half, attn_block, elem_bw, "
                    "layer_overhead, reserved, link_eff, tp_overlap, cp_overlap, dp_overlap, adam_bytes, "
                    "diloco_bytes, diloco_util, tp_regather)",
                    kv, name);
}

/* Which shape flags the user gave. */
typedef struct {
  int seq, ctx, kv, ffn, vocab, tied;
} shape_given;

/* What a shape flag leaves unsaid: a custom shape takes its architecture's defaults; a
 * catalog model changed by --heads keeps MHA where it had no more KV heads than heads. */
static void model_defaults(const atoll_plan_opts *o, atoll_plan_model *m, const shape_given *g) {
  int gpt2 = m->arch == ATOLL_ARCH_GPT2;
  if (!get(o, "model")) {
    if (!g->kv) m->kv_heads = m->heads;
    if (!g->ffn) m->ffn = 4 * m->dim;
    if (!g->vocab) m->vocab = gpt2 ? 50257 : 128256;
    if (!g->tied) m->tied = gpt2;
    if (!g->seq) m->seq = gpt2 ? 1024 : 8192;
  } else if (get(o, "heads") && !g->kv && (gpt2 || m->kv_heads > m->heads)) {
    m->kv_heads = m->heads;
  }
  if (gpt2 && !g->kv) m->kv_heads = m->heads;
  if (gpt2 && get(o, "dim") && !g->ffn && get(o, "model")) m->ffn = 4 * m->dim;
  if (!g->ctx && !get(o, "model")) m->context = m->seq;
}

static int build_model(const atoll_plan_opts *o, atoll_plan_model *m, atoll_err *err) {
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
    static const choice ARCHS[] = {{"llama", ATOLL_ARCH_LLAMA}, {"gpt2", ATOLL_ARCH_GPT2}};
    int arch = ATOLL_ARCH_LLAMA;
    if (parse_choice("arch", s, ARCHS, 2, "unknown architecture (known: llama, gpt2)", &arch, err)) return -1;
    m->arch = (atoll_plan_arch)arch;
    custom = 1;
  }
  struct {
    const char *key;
    int *field;
    long min, max;
  } ints[] = {{"layers", &m->layers, 1, 100000},      {"dim", &m->dim, 1, 1 << 20}, {"heads", &m->heads, 1, 1 << 16},
              {"kv-heads", &m->kv_heads, 1, 1 << 16}, {"ffn", &m->ffn, 1, 1 << 24}, {"vocab", &m->vocab, 2, 1 << 24},
              {"context", &m->context, 1, 1 << 24},   {"seq", &m->seq, 1, 1 << 24}, {"tied", &m->tied, 0, 1}};
  shape_given g = {0};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    if (!(s = get(o, ints[i].key))) continue;
    if (atoll_plan_parse_int(ints[i].key, s, ints[i].min, ints[i].max, ints[i].field, err)) return -1;
    if (strcmp(ints[i].key, "seq") == 0)
      g.seq = 1;
    else if (strcmp(ints[i].key, "context") == 0)
      g.ctx = 1, custom = 1;
    else if (strcmp(ints[i].key, "kv-heads") == 0)
      g.kv = 1, custom = 1;
    else if (strcmp(ints[i].key, "ffn") == 0)
      g.ffn = 1, custom = 1;
    else if (strcmp(ints[i].key, "vocab") == 0)
      g.vocab = 1, custom = 1;
    else if (strcmp(ints[i].key, "tied") == 0)
      g.tied = 1, custom = 1;
    else
      custom = 1;
  }
  model_defaults(o, m, &g);
  if (custom && get(o, "model")) {
    char base[64];
    snprintf(base, sizeof base, "%s", m->name);
    snprintf(m->name, sizeof m->name, "%.50s (modified)", base);
  }
  return atoll_plan_model_check(m, err);
}

/* The accelerator, its node and network, islands, and the assumptions (--set). */
static int build_cluster(const atoll_plan_opts *o, atoll_plan_cpu_fn cpu, atoll_plan_setup *p, atoll_err *err) {
  const char *s;
  atoll_plan_accel acc;
  if (atoll_plan_accel_find((s = get(o, "accel")) ? s : "h100", &acc, err)) return -1;
  if (acc.is_cpu && cpu(o, &acc, p->cpu_note, sizeof p->cpu_note, err)) return -1;
  if (!acc.is_cpu && get(o, "threads"))
    return atoll_fail(err, "--threads: only with --accel cpu (threads per process of a CPU cluster)");
  if (!acc.is_cpu && (get(o, "measure") || get(o, "cpu-gflops") || get(o, "bench-results")))
    return atoll_fail(err, "--measure, --cpu-gflops and --bench-results apply to --accel cpu only");
  if ((s = get(o, "memory")) && parse_mem("memory", s, &acc.mem_bytes, err)) return -1;
  atoll_plan_cluster *c = &p->cluster;
  atoll_plan_cluster_default(c, &acc, acc.gpus_per_node);
  atoll_plan_assume_defaults(&p->assume);
  for (int i = 0; i < o->nsets; i++)
    if (atoll_plan_setup_assumption(c, &p->assume, o->sets[i], err)) return -1;
  if ((s = get(o, "gpus-per-node")) && atoll_plan_parse_int("gpus-per-node", s, 1, 1 << 16, &c->gpus_per_node, err)) return -1;
  if ((s = get(o, "intra-bw")) && parse_bw("intra-bw", s, &c->intra_bw, err)) return -1;
  if ((s = get(o, "inter-bw")) && parse_bw("inter-bw", s, &c->inter_bw, err)) return -1;
  if ((s = get(o, "intra-latency")) && parse_time("intra-latency", s, 1e-6, &c->intra_lat, err)) return -1;
  if ((s = get(o, "inter-latency")) && parse_time("inter-latency", s, 1e-6, &c->inter_lat, err)) return -1;
  if ((s = get(o, "islands")) && atoll_plan_parse_int("islands", s, 1, 1 << 16, &c->islands, err)) return -1;
  if ((s = get(o, "wan-bw")) && parse_bw("wan-bw", s, &c->wan_bw, err)) return -1;
  if ((s = get(o, "wan-latency")) && parse_time("wan-latency", s, 1e-3, &c->wan_lat, err)) return -1;
  if ((s = get(o, "diloco-h")) && atoll_plan_parse_int("diloco-h", s, 1, 1 << 30, &c->diloco_h, err)) return -1;
  return 0;
}

/* The sizes the user fixed, and the cluster's device count (default: what they need,
 * else one node per island). */
static int build_fixed(const atoll_plan_opts *o, atoll_plan_setup *p, atoll_err *err) {
  const char *s;
  atoll_plan_cluster *c = &p->cluster;
  atoll_plan_fixed *f = &p->fixed;
  atoll_plan_fixed_none(f);
  struct {
    const char *key;
    int *field;
    long min, max;
  } fx[] = {{"dp", &f->dp, 1, 1 << 30},       {"tp", &f->tp, 1, 1 << 16}, {"pp", &f->pp, 1, 1 << 20},
            {"cp", &f->cp, 1, 1 << 20},       {"zero", &f->zero_stage, 0, 3},   {"microbatch", &f->mb, 1, 1 << 20},
            {"interleave", &f->chunks, 1, 1 << 16}};
  for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++)
    if ((s = get(o, fx[i].key)) && atoll_plan_parse_int(fx[i].key, s, fx[i].min, fx[i].max, fx[i].field, err)) return -1;
  static const choice SYNCS[] = {{"diloco", 0}, {"every-step", 1}};
  static const choice RECOMPUTES[] = {
      {"none", ATOLL_RECOMPUTE_NONE}, {"selective", ATOLL_RECOMPUTE_SELECTIVE}, {"full", ATOLL_RECOMPUTE_FULL}};
  if ((s = get(o, "island-sync")) &&
      parse_choice("island-sync", s, SYNCS, 2, "expected diloco or every-step", &f->island_sync, err))
    return -1;
  if ((s = get(o, "recompute")) &&
      parse_choice("recompute", s, RECOMPUTES, 3, "expected none, selective or full", &f->recompute, err))
    return -1;
  if ((s = get(o, "gpus"))) {
    if (atoll_plan_parse_int("gpus", s, 1, 1 << 30, &c->gpus, err)) return -1;
  } else if (f->dp && f->tp && f->pp && f->cp) {
    double n = (double)f->dp * f->tp * f->pp * f->cp * c->islands;
    if (n > (1 << 30)) return atoll_fail(err, "--dp x --tp x --pp x --cp: %.0f devices is too many", n);
    c->gpus = (int)n;
  } else {
    c->gpus = c->gpus_per_node * c->islands;
  }
  return 0;
}

/* Sequence length, precision, global batch and token budget. */
static int build_train(const atoll_plan_opts *o, atoll_plan_setup *p, atoll_err *err) {
  const char *s;
  atoll_plan_train *t = &p->train;
  t->seq = p->model.seq;
  t->precision = p->cluster.acc.is_cpu ? ATOLL_PREC_FP32 : ATOLL_PREC_BF16;
  if ((s = get(o, "precision"))) {
    static const choice PRECISIONS[] = {{"bf16", ATOLL_PREC_BF16}, {"fp32", ATOLL_PREC_FP32}};
    int precision = ATOLL_PREC_BF16;
    if (parse_choice("precision", s, PRECISIONS, 2, "expected bf16 or fp32", &precision, err)) return -1;
    t->precision = (atoll_plan_precision)precision;
  }
  if ((s = get(o, "grad-dtype"))) {
    static const choice GRAD_DTYPES[] = {{"bf16", 2}, {"fp32", 4}};
    int bytes = 4;
    if (parse_choice("grad-dtype", s, GRAD_DTYPES, 2, "expected bf16 or fp32", &bytes, err)) return -1;
    t->grad_bytes = bytes;
  } else if (p->cluster.acc.is_cpu) {
    t->grad_bytes = 4; /* atoll train's default (--grad-dtype fp32) at either precision */
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
    if (t->token_budget > 1e18) return atoll_fail(err, "--tokens %s: more than 1e18 tokens", s);
  } else {
    t->token_budget = p->model.token_budget > 0 && !strstr(p->model.name, "(modified)")
                          ? p->model.token_budget
                          : 20.0 * atoll_plan_params(&p->model);
  }
  return 0;
}

/* Failure rates, checkpoint storage and restarts (failure.c); defaults from Llama 3. */
static int build_failure(const atoll_plan_opts *o, atoll_plan_failure *f, atoll_err *err) {
  const char *s;
  atoll_plan_failure_defaults(f);
  struct {
    const char *key, *what;
    double *field;
  } rates[] = {{"fail-accel", "interruptions per 1000 accelerator-days", &f->accel_per_kday},
               {"fail-node", "interruptions per 1000 node-days", &f->node_per_kday},
               {"planned-stops", "planned stops per 1000 node-days", &f->planned_per_kday}};
  for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
    if (!(s = get(o, rates[i].key))) continue;
    if (atoll_plan_parse_double(rates[i].key, s, rates[i].field, err)) return -1;
    if (*rates[i].field < 0 || *rates[i].field > 1e6)
      return atoll_fail(err, "--%s %s: expected %s, from 0 to 1e6", rates[i].key, s, rates[i].what);
  }
  if ((s = get(o, "ckpt-bw")) && parse_bw("ckpt-bw", s, &f->ckpt_bw, err)) return -1;
  if ((s = get(o, "restart")) && parse_time("restart", s, 1, &f->restart_s, err)) return -1;
  if (f->restart_s > 30 * 86400.0) return atoll_fail(err, "--restart %s: more than 30 days", s);
  if ((s = get(o, "ckpt-every"))) {
    if (parse_time("ckpt-every", s, 1, &f->ckpt_every_s, err)) return -1;
    if (!(f->ckpt_every_s > 0) || f->ckpt_every_s > 365 * 86400.0)
      return atoll_fail(err, "--ckpt-every %s: expected a time above 0 and at most a year", s);
  }
  return 0;
}

int atoll_plan_setup_build(const atoll_plan_opts *o, atoll_plan_cpu_fn cpu, atoll_plan_setup *p, atoll_err *err) {
  memset(p, 0, sizeof *p);
  if (build_model(o, &p->model, err) || build_cluster(o, cpu, p, err) || build_fixed(o, p, err) ||
      build_train(o, p, err) || build_failure(o, &p->failure, err))
    return -1;
  return 0;
}
