/* atoll: the command-line tool.
 *
 *   atoll train   [--config FILE] [--resume DIR] [--key value ...]   (src/cli/train_cli.c)
 *   atoll prepare --text FILE|DIR... --out DIR [--val-fraction F] [--jsonl-field KEY] [--tokenizer FILE]
 *   atoll sample  --ckpt DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S] [--keep-special]
 *                 [--device cpu|cuda] [--threads N]
 *   atoll export  --ckpt DIR --to hf --out DIR   (src/cli/export_cli.c)
 *   atoll eval    (--ckpt DIR | --hf DIR) --data DIR [--json] ...   (src/cli/eval_cli.c)
 *   atoll simulate [--mode dp|diloco|both] ...   (src/cli/simulate_cli.c)
 *
 * This file: the dispatch, atoll prepare and atoll sample. The CLI is the only place
 * that exits the process or touches process-wide state (signal handlers, thread counts). */
#include "atoll/atoll.h"
#include "cli/eval_cli.h"
#include "cli/export_cli.h"
#include "cli/openblas_core.h"
#include "ops/cpu_features.h"
#include "cli/net_cli.h"
#include "cli/plan_cli.h"
#include "cli/simulate_cli.h"
#include "cli/tokenizer_cli.h"
#include "cli/train_cli.h"
#include "core/fs.h"
#include "data/token_file.h"
#include "train/config.h"
#include "train/device.h"
#ifdef ATOLL_HAVE_CUDA
#include "ops/ops_cuda.h" /* atoll_cuda_open: --device cuda */
#endif
#ifdef ATOLL_HAVE_NCCL
#include "comm/nccl.h" /* atoll_nccl_coll_open: --dp-comm nccl */
#endif

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* openblas_set_num_threads is OpenBLAS's own API, not part of CBLAS */
void openblas_set_num_threads(int n);

static int die(const atoll_err *err) {
  fprintf(stderr, "atoll: error: %s\n", err->msg);
  return 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: atoll <command> [options]\n\n"
          "commands:\n"
          "  train     train a GPT-style model (atoll train --help)\n"
          "  prepare   tokenize text files into token shards (atoll prepare --help)\n"
          "  sample    generate text from a checkpoint (atoll sample --help)\n"
          "  plan      plan a training run on a cluster: layout, memory, time (atoll plan --help)\n"
          "  simulate  simulate a run too large for this machine: failures, islands, goodput (atoll simulate --help)\n"
          "  export    write a checkpoint for other tools: --to hf (atoll export --help)\n"
          "  eval      the validation loss of a checkpoint or a Hugging Face model (atoll eval --help)\n"
          "  tokenizer train or run a byte-level BPE tokenizer (atoll tokenizer --help)\n"
          "  coordinator  coordinate islands that train as separate jobs (docs/islands.md)\n"
          "  keys      make a CURVE keypair for an island or a coordinator\n");
}

/* ------------------------------------------------------------------ prepare --- */

/* Files and directories (walked: src/text/text_input.h) into outdir; tokenizer: a
 * tokenizer.json, or NULL for bytes. */
static int prepare_files(char **args, int nargs, const char *outdir, double val_fraction,
                         const char *field, const char *tokenizer, atoll_err *err) {
  int nfiles = 0;
  atoll_prepare_input in = {.jsonl_field = field, .progress = 1, .nfiles_read = &nfiles,
                            .tokenizer = tokenizer};
  int rc = atoll_prepare_inputs((const char *const *)args, nargs, &in, outdir, val_fraction, err);
  if (rc == 0) fprintf(stderr, "atoll prepare: %d file(s) -> %s\n", nfiles, outdir);
  return rc;
}

static int cmd_prepare(int argc, char **argv) {
  atoll_err err = {{0}};
  char **texts = malloc(sizeof(char *) * (size_t)(argc + 1));
  if (!texts) {
    atoll_fail(&err, "out of memory reading the flags");
    return die(&err);
  }
  int ntexts = 0;
  const char *out = NULL, *field = "text", *tokenizer = NULL;
  double val_fraction = 0.05;
  int in_text = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("usage: atoll prepare --text FILE|DIR... --out DIR [--val-fraction F] [--jsonl-field KEY]\n"
             "                     [--tokenizer FILE]\n"
             "  byte-level tokenizer (vocabulary 256), or --tokenizer's tokenizer.json (atoll tokenizer\n"
             "  train; kept as DIR/tokenizer.json); writes DIR/train_NNN.bin, DIR/val_NNN.bin\n"
             "  and DIR/manifest.json (format: docs/formats.md). The last F (default 0.05)\n"
             "  of each file goes to the validation split. A directory stands for the files\n"
             "  below it (sorted, depth first); gzip files are decompressed; *.jsonl and\n"
             "  *.jsonl.gz hold one JSON object per line, whose KEY (default \"text\") is the text.\n");
      free(texts);
      return 0;
    }
    if (strcmp(a, "--text") == 0) {
      in_text = 1;
    } else if (strcmp(a, "--jsonl-field") == 0) {
      in_text = 0;
      if (i + 1 >= argc || !argv[i + 1][0]) {
        atoll_fail(&err, "--jsonl-field: missing value (a JSON key, e.g. text)");
        free(texts);
        return die(&err);
      }
      field = argv[++i];
    } else if (strcmp(a, "--out") == 0 || strcmp(a, "--val-fraction") == 0 ||
               strcmp(a, "--tokenizer") == 0) {
      in_text = 0;
      if (i + 1 >= argc) {
        atoll_fail(&err, "%s: missing value", a);
        free(texts);
        return die(&err);
      }
      if (a[2] == 'o') {
        out = argv[++i];
      } else if (a[2] == 't') {
        tokenizer = argv[++i];
      } else {
        char *end;
        val_fraction = strtod(argv[++i], &end);
        if (*end || end == argv[i]) {
          atoll_fail(&err, "--val-fraction: expected a number, got '%s'", argv[i]);
          free(texts);
          return die(&err);
        }
      }
    } else if (in_text && strncmp(a, "--", 2) != 0) {
      texts[ntexts++] = argv[i];
    } else {
      atoll_fail(&err, "%s: unknown flag for prepare (see atoll prepare --help)", a);
      free(texts);
      return die(&err);
    }
  }
  if (!ntexts || !out) {
    atoll_fail(&err, "%s: prepare needs --text FILE... and --out DIR", !ntexts ? "--text" : "--out");
    free(texts);
    return die(&err);
  }
  int rc = prepare_files(texts, ntexts, out, val_fraction, field, tokenizer, &err);
  free(texts);
  if (rc) return die(&err);
  fprintf(stderr, "atoll prepare: done (see %s/manifest.json)\n", out);
  return 0;
}

/* ------------------------------------------------------------------- sample --- */

static int cmd_sample(int argc, char **argv) {
  atoll_err err = {{0}};
  atoll_sample_opts o = {.ckpt = NULL, .prompt = "", .tokens = 200, .temperature = 0.8f, .top_k = 40, .seed = 1};
  atoll_config threads; /* --threads: read, checked and applied as train's */
  atoll_config_defaults(&threads);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      printf("usage: atoll sample --ckpt DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
             "                    [--tokenizer FILE] [--keep-special] [--device cpu|cuda] [--threads N]\n"
             "  DIR: a checkpoint, a run's checkpoints/ directory or a run directory (its latest)\n"
             "  the prompt is encoded and the output decoded with the checkpoint's tokenizer\n"
             "  (DIR/tokenizer.json; --tokenizer FILE must be that same tokenizer); special added\n"
             "  tokens are generated but not printed, as Hugging Face's decode does, unless --keep-special\n"
             "  --threads N: OpenMP and OpenBLAS threads, as train's (0: all cores)\n"
             "  defaults: --tokens 200 --temperature 0.8 --top-k 40 --seed 1 --threads 0\n");
      return atoll_flush_file(stdout, "stdout", &err) ? die(&err) : 0;
    }
    if (strcmp(a, "--keep-special") == 0) {
      o.keep_special = 1;
      continue;
    }
    if (strncmp(a, "--", 2) != 0) { /* e.g. a value after the switch --keep-special */
      atoll_fail(&err, "%s: unexpected argument (sample takes --flag VALUE pairs; --keep-special takes no value)", a);
      return die(&err);
    }
    if (i + 1 >= argc) {
      atoll_fail(&err, "%s: missing value", a);
      return die(&err);
    }
    const char *v = argv[++i];
    char *end = NULL;
    const char *range = "";
    errno = 0;
    if (strcmp(a, "--ckpt") == 0) {
      o.ckpt = v;
      continue;
    } else if (strcmp(a, "--prompt") == 0) {
      o.prompt = v;
      continue;
    } else if (strcmp(a, "--tokenizer") == 0) {
      o.tokenizer = v;
      continue;
    } else if (strcmp(a, "--device") == 0) {
      o.device = v;
      continue;
    } else if (strcmp(a, "--threads") == 0) {
      if (atoll_config_set(&threads, "threads", v, &err)) return die(&err);
      continue;
    } else if (strcmp(a, "--tokens") == 0) {
      long t = strtol(v, &end, 10);
      if (t > INT_MAX || t < INT_MIN) errno = ERANGE, range = " up to 2147483647"; /* (int) wraps 4294967297 to 1 */
      o.tokens = (int)t;
    } else if (strcmp(a, "--temperature") == 0) {
      o.temperature = strtof(v, &end);
    } else if (strcmp(a, "--top-k") == 0) {
      long k = strtol(v, &end, 10);
      if (k > INT_MAX || k < INT_MIN) errno = ERANGE, range = " up to 2147483647";
      o.top_k = (int)k;
    } else if (strcmp(a, "--seed") == 0) {
      o.seed = strtoull(v, &end, 10);
      if (v[0] == '-') errno = ERANGE; /* strtoull would wrap a negative seed */
    } else {
      atoll_fail(&err, "%s: unknown flag for sample (see atoll sample --help)", a);
      return die(&err);
    }
    if (errno || end == v || *end) {
      atoll_fail(&err, "%s: expected a number%s, got '%s'", a, range, v);
      return die(&err);
    }
  }
  if (!o.ckpt) {
    atoll_fail(&err, "--ckpt: sample needs a checkpoint directory");
    return die(&err);
  }
  char dir[PATH_MAX];
  if (atoll_ckpt_resolve(o.ckpt, dir, sizeof dir, &err)) return die(&err);
  o.ckpt = dir;
  if (threads.run.threads > 0) {
    omp_set_num_threads(threads.run.threads);
    openblas_set_num_threads(threads.run.threads);
  }
  if (atoll_sample(&o, stdout, &err)) return die(&err);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
#ifdef ATOLL_HAVE_CUDA
  atoll_device_set_cuda(atoll_cuda_open); /* without it, --device cuda says "built without CUDA" */
#endif
#ifdef ATOLL_HAVE_NCCL
  atoll_device_set_nccl(atoll_nccl_coll_open); /* without it, --dp-comm nccl says "built without NCCL" */
#endif
  (void)atoll_cpu(); /* an unknown ATOLL_MAX_ISA is the first thing said */
  atoll_cli_fix_openblas_core(argv); /* may re-execute the program with OPENBLAS_CORETYPE set */
  atoll_cli_report_openblas_core();
  const char *cmd = argv[1];
  atoll_err guard_err = {{0}};
  /* the program, not the library, takes SIGBUS: a token file cut short while mapped
   * ends the run with one line naming it (src/data/token_file.c) */
  if (atoll_token_file_guard_install(&guard_err)) return die(&guard_err);
  if (strcmp(cmd, "train") == 0) return atoll_train_main(argc - 2, argv + 2);
  if (strcmp(cmd, "prepare") == 0) return cmd_prepare(argc - 2, argv + 2);
  if (strcmp(cmd, "sample") == 0) return cmd_sample(argc - 2, argv + 2);
  if (strcmp(cmd, "plan") == 0) return atoll_plan_main(argc - 2, argv + 2);
  if (strcmp(cmd, "simulate") == 0) return atoll_simulate_main(argc - 2, argv + 2);
  if (strcmp(cmd, "export") == 0) return atoll_export_main(argc - 2, argv + 2);
  if (strcmp(cmd, "eval") == 0) return atoll_eval_main(argc - 2, argv + 2);
  if (strcmp(cmd, "tokenizer") == 0) return atoll_cli_tokenizer(argc - 2, argv + 2);
  if (strcmp(cmd, "coordinator") == 0) return atoll_coordinator_main(argc - 2, argv + 2);
  if (strcmp(cmd, "keys") == 0) return atoll_keys_main(argc - 2, argv + 2);
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "atoll: error: %s: unknown command (commands: train, prepare, sample, eval, plan, simulate, export, tokenizer, coordinator, keys)\n", cmd);
  return 2;
}
