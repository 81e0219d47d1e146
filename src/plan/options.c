/* atoll plan's options: the flag table (which is also --help), the command line and
 * --config FILE, a JSON object with the same keys (dashes or underscores). A config
 * file is refused whole, with one message naming it, when it is not one object, has an
 * unknown or repeated key, a value of the wrong type, or anything after the object. */
#include "plan/options.h"

#include "core/fs.h"
#include "core/json_text.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OPT_FLAG, OPT_VALUE } opt_kind; /* a flag alone, or a flag and its value */

typedef struct {
  const char *key;
  opt_kind kind;
  const char *arg;
  const char *help;
} opt_spec;

static const opt_spec OPTS[] = {
    {"model", OPT_VALUE, "NAME", "model from the catalog (--list); shape flags below modify it"},
    {"arch", OPT_VALUE, "llama|gpt2", "architecture of a custom shape (default llama)"},
    {"layers", OPT_VALUE, "N", "transformer blocks"},
    {"dim", OPT_VALUE, "N", "model width"},
    {"heads", OPT_VALUE, "N", "attention heads (must divide --dim)"},
    {"kv-heads", OPT_VALUE, "N", "key/value heads (GQA; default: --heads)"},
    {"ffn", OPT_VALUE, "N", "MLP hidden width (default 4 x dim)"},
    {"vocab", OPT_VALUE, "N", "vocabulary size (default 128256 llama, 50257 gpt2)"},
    {"context", OPT_VALUE, "N", "positions of a gpt2 model (default: --seq)"},
    {"tied", OPT_VALUE, "0|1", "LM head tied to the embedding (default: gpt2 1, llama 0)"},
    {"seq", OPT_VALUE, "N", "training sequence length (default: the model's)"},
    {"accel", OPT_VALUE, "NAME", "accelerator (--list; default h100)"},
    {"gpus", OPT_VALUE, "N", "devices in the cluster, all islands (default: one node)"},
    {"gpus-per-node", OPT_VALUE, "N", "devices per node (default: the accelerator's)"},
    {"memory", OPT_VALUE, "SIZE", "memory per device, e.g. 80GiB (default: the accelerator's)"},
    {"intra-bw", OPT_VALUE, "BW", "per device, per direction, inside a node, e.g. 450GB/s"},
    {"inter-bw", OPT_VALUE, "BW", "per device between nodes, e.g. 400Gbps or 50GB/s"},
    {"intra-latency", OPT_VALUE, "TIME", "per ring step inside a node (default 5us)"},
    {"inter-latency", OPT_VALUE, "TIME", "per ring step between nodes (default 10us)"},
    {"islands", OPT_VALUE, "N", "DiLoCo islands the devices are split into (default 1)"},
    {"wan-bw", OPT_VALUE, "BW", "WAN bandwidth per island (default 10Gbps)"},
    {"wan-latency", OPT_VALUE, "TIME", "WAN latency per ring step (default 30ms)"},
    {"diloco-h", OPT_VALUE, "N", "inner steps between DiLoCo outer syncs (default 500)"},
    {"island-sync", OPT_VALUE, "diloco|every-step", "fix how islands sync (default: the faster)"},
    {"batch", OPT_VALUE, "N", "global batch in sequences per optimizer step"},
    {"batch-tokens", OPT_VALUE, "N", "global batch in tokens (e.g. 16M; rounded to sequences)"},
    {"tokens", OPT_VALUE, "N", "token budget of the run (e.g. 15.6T; default: the model's, or 20 per parameter)"},
    {"precision", OPT_VALUE, "bf16|fp32", "bf16 mixed precision (GPUs) or fp32 (cpu)"},
    {"grad-dtype", OPT_VALUE, "bf16|fp32", "gradients on the data-parallel wire (default: as the precision; fp32 on cpu)"},
    {"dp", OPT_VALUE, "N", "fix the data-parallel size (per island)"},
    {"tp", OPT_VALUE, "N", "fix the tensor-parallel size"},
    {"pp", OPT_VALUE, "N", "fix the pipeline-parallel size"},
    {"cp", OPT_VALUE, "N", "fix the context-parallel size"},
    {"zero", OPT_VALUE, "0..3", "fix the ZeRO stage"},
    {"microbatch", OPT_VALUE, "N", "fix the sequences per micro-batch"},
    {"interleave", OPT_VALUE, "N", "fix the model chunks per pipeline rank (interleaved 1F1B)"},
    {"recompute", OPT_VALUE, "none|selective|full", "fix the activation recomputation"},
    {"fail-accel", OPT_VALUE, "RATE", "interruptions per 1000 accelerator-days (default 0.278: Llama 3's GPU faults)"},
    {"fail-node", OPT_VALUE, "RATE", "interruptions per 1000 node-days (default 1.56: Llama 3's other causes)"},
    {"planned-stops", OPT_VALUE, "RATE", "planned stops per 1000 node-days (default 0.425: Llama 3's maintenance)"},
    {"ckpt-bw", OPT_VALUE, "BW", "storage bandwidth a checkpoint is written and read at (default 2TB/s)"},
    {"restart", OPT_VALUE, "TIME", "fixed cost of a restart before reading the checkpoint (default 10min)"},
    {"ckpt-every", OPT_VALUE, "TIME", "checkpoint interval (default: Daly's optimum), e.g. 30min"},
    {"top", OPT_VALUE, "N", "layouts shown (default 5)"},
    {"explain", OPT_FLAG, "", "say in plain words why the best layout wins"},
    {"versus", OPT_VALUE, "dp=N,tp=N,pp=N,cp=N[,...]",
     "why the first beats this layout (also zero=, microbatch=, interleave=, recompute=)"},
    {"json", OPT_FLAG, "", "print JSON instead of tables"},
    {"fewest", OPT_FLAG, "", "fewest devices that hold the model (DP 1, one sequence per step)"},
    {"sweep", OPT_VALUE, "auto|N,N,...", "best layout and days to train by device count"},
    {"calibrate", OPT_VALUE, "SUMMARY", "plan an atoll CPU run and compare with its summary.json"},
    {"tolerance", OPT_VALUE, "F", "with --calibrate: fail when |predicted/measured - 1| > F"},
    {"measure", OPT_FLAG, "", "cpu: measure this machine's sgemm and elementwise rates now (~1 s)"},
    {"cpu-gflops", OPT_VALUE, "X", "cpu: sgemm GFLOP/s of the machine (instead of measuring)"},
    {"bench-results", OPT_VALUE, "FILE", "cpu: read the sgemm peak from bench/run.sh's results"},
    {"threads", OPT_VALUE, "N", "cpu: threads per process (default: all cores)"},
    {"set", OPT_VALUE, "NAME=VALUE", "change an assumption (repeatable; names in the assumptions block)"},
    {"config", OPT_VALUE, "FILE", "JSON object with the same keys"},
    {"list", OPT_FLAG, "", "list the catalog of models and accelerators"},
};
#define NOPTS (int)(sizeof OPTS / sizeof OPTS[0])
_Static_assert(sizeof OPTS / sizeof OPTS[0] <= ATOLL_PLAN_MAX_OPTS, "raise ATOLL_PLAN_MAX_OPTS");

#define CONFIG_MAX_BYTES (1 << 20)

static int opt_index(const char *key) {
  char norm[64];
  size_t len = strlen(key);
  if (len >= sizeof norm) return -1;
  for (size_t i = 0; i <= len; i++) norm[i] = key[i] == '_' ? '-' : key[i];
  for (int i = 0; i < NOPTS; i++)
    if (strcmp(OPTS[i].key, norm) == 0) return i;
  return -1;
}

const char *atoll_plan_opt(const atoll_plan_opts *o, const char *key) {
  int i = opt_index(key);
  return i >= 0 && o->given[i] ? (o->val[i] ? o->val[i] : "") : NULL;
}

void atoll_plan_opt_default(atoll_plan_opts *o, const char *key, const char *value) {
  int i = opt_index(key);
  if (i >= 0 && !o->given[i]) o->given[i] = 1, o->val[i] = value;
}

static int set_opt(atoll_plan_opts *o, int i, const char *v, atoll_err *err) {
  if (strcmp(OPTS[i].key, "set") == 0) {
    if (o->nsets == ATOLL_PLAN_MAX_SETS) return atoll_fail(err, "--set: at most %d assumptions", ATOLL_PLAN_MAX_SETS);
    o->sets[o->nsets++] = v;
    return 0;
  }
  o->given[i] = 1;
  o->val[i] = v;
  return 0;
}

/* ------------------------------------------------------------- config file --- */

/* One config value as the string its flag would take: strings as they are, numbers
 * with every digit, booleans as 0 or 1. */
static int config_value(atoll_plan_opts *o, int i, const cJSON *v, const char *path, atoll_err *err) {
  char buf[1100];
  if (cJSON_IsString(v))
    snprintf(buf, sizeof buf, "%s", v->valuestring);
  else if (cJSON_IsNumber(v))
    snprintf(buf, sizeof buf, "%.17g", v->valuedouble);
  else if (cJSON_IsBool(v))
    snprintf(buf, sizeof buf, "%d", cJSON_IsTrue(v));
  else
    return atoll_fail(err, "%s: %s must be a number or a string", path, OPTS[i].key);
  if (o->nowned == (int)(sizeof o->owned / sizeof o->owned[0]))
    return atoll_fail(err, "%s: too many values", path); /* unreachable while keys are unique */
  char *s = strdup(buf);
  if (!s) return atoll_fail(err, "%s: out of memory", path);
  o->owned[o->nowned++] = s;
  return set_opt(o, i, s, err);
}

/* One key of the config object. */
static int config_key(atoll_plan_opts *o, const cJSON *it, int *seen, const char *path, atoll_err *err) {
  const char *key = it->string ? it->string : "";
  int i = opt_index(key);
  if (i < 0 || strcmp(OPTS[i].key, "config") == 0)
    return atoll_fail(err, "%s: unknown key '%s' (see atoll plan --help)", path, key);
  /* batch_tokens and batch-tokens are one key */
  if (seen[i]) return atoll_fail(err, "%s: duplicate key '%s'", path, key);
  seen[i] = 1;
  if (OPTS[i].kind == OPT_FLAG) {
    if (!cJSON_IsBool(it)) return atoll_fail(err, "%s: %s must be true or false", path, OPTS[i].key);
    if (cJSON_IsTrue(it)) o->given[i] = 1, o->val[i] = NULL;
    return 0;
  }
  if (strcmp(OPTS[i].key, "set") != 0 || !cJSON_IsArray(it)) return config_value(o, i, it, path, err);
  if (cJSON_GetArraySize(it) > ATOLL_PLAN_MAX_SETS)
    return atoll_fail(err, "%s: set: at most %d assumptions", path, ATOLL_PLAN_MAX_SETS);
  for (const cJSON *e = it->child; e; e = e->next)
    if (config_value(o, i, e, path, err)) return -1;
  return 0;
}

int atoll_plan_opts_read_config(atoll_plan_opts *o, const char *text, size_t len, const char *path,
                                atoll_err *err) {
  cJSON *j = atoll_json_parse_whole(text, len, path, err);
  if (!j) return -1;
  int rc = 0;
  if (!cJSON_IsObject(j)) rc = atoll_fail(err, "%s: expected a JSON object of settings", path);
  int seen[ATOLL_PLAN_MAX_OPTS] = {0};
  for (const cJSON *it = rc == 0 ? j->child : NULL; it && rc == 0; it = it->next) rc = config_key(o, it, seen, path, err);
  cJSON_Delete(j);
  return rc;
}

static int apply_config_file(atoll_plan_opts *o, const char *path, atoll_err *err) {
  size_t len = 0;
  char *text = NULL; /* atoll_read_file: a directory, FIFO or device is named as such */
  if (atoll_read_file(path, CONFIG_MAX_BYTES, &text, &len, err)) return -1;
  int rc = atoll_plan_opts_read_config(o, text, len, path, err);
  free(text);
  return rc;
}

/* ------------------------------------------------------------ command line --- */

int atoll_plan_opts_parse(atoll_plan_opts *o, int argc, char **argv, atoll_err *err) {
  memset(o, 0, sizeof *o);
  /* --config first, so that flags override it */
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--config") == 0) {
      if (i + 1 >= argc) return atoll_fail(err, "--config: missing value");
      if (apply_config_file(o, argv[i + 1], err)) return -1;
    }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) != 0) return atoll_fail(err, "%s: unexpected argument (flags are --key value)", a);
    int k = opt_index(a + 2);
    if (k < 0) return atoll_fail(err, "%s: unknown flag for plan (see atoll plan --help)", a);
    if (OPTS[k].kind == OPT_FLAG) {
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

void atoll_plan_opts_free(atoll_plan_opts *o) {
  for (int i = 0; i < o->nowned; i++) free(o->owned[i]);
  o->nowned = 0;
}

void atoll_plan_opts_help(FILE *f) {
  fprintf(f,
          "usage: atoll plan [--model NAME | --layers N --dim N --heads N ...] [--accel NAME] [--gpus N] [options]\n\n"
          "Says how to train a model on a cluster: the best parallel layouts (DP x TP x PP x CP with ZeRO stage,\n"
          "micro-batch, interleaving, recomputation), memory per GPU, bytes per link, step time, MFU and days\n"
          "for the token budget. Flags override --config FILE (a JSON object with the same keys). docs/plan.md\n"
          "explains the model and every assumption.\n\n");
  for (int i = 0; i < NOPTS; i++) {
    char left[64];
    snprintf(left, sizeof left, "--%s %s", OPTS[i].key, OPTS[i].arg);
    fprintf(f, "  %-34s %s\n", left, OPTS[i].help);
  }
  fprintf(f, "\nexamples:\n"
             "  atoll plan --model llama3-405b --accel h100 --gpus 16384 --explain\n"
             "  atoll plan --model llama3-405b --accel h100 --tp 8 --pp 16 --cp 1 --dp 64\n"
             "  atoll plan --model llama3-405b --accel h100 --fewest\n"
             "  atoll plan --model llama3-405b --accel h100 --sweep auto\n"
             "  atoll plan --calibrate runs/default/summary.json --measure\n");
}
