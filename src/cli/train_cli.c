/* atoll train (src/cli/train_cli.c): the settings of a run, then the run.
 *
 * A rank's settings come, later ones overriding, from the resumed checkpoint
 * (--resume, or an island's own run directory), --config FILE, the coordinator's run
 * settings (an island started without --islands asks for them) and the flags; the
 * ranks agree on each step that may fail on one of them only (src/train/agree.c).
 * Then the default corpus, the data's vocabulary, the signal handlers, and
 * atoll_train_run_hooked. */
#include "cli/train_cli.h"

#include "atoll/atoll.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hf.h"
#include "cli/test_hooks.h"
#include "comm/comm.h"
#include "core/fs.h"
#include "core/stop_signal.h"
#include "data/data_tokenizer.h"
#include "model/layout.h"
#include "net/ask.h"
#include "net/wire.h"
#include "parallel/outer_lr.h"
#include "train/agree.h"
#include "train/config.h"
#include "train/device.h"
#include "train/run.h"
#include "train/run_settings.h"
#ifdef ATOLL_HAVE_CUDA
#include "ops/ops_cuda.h" /* atoll_cuda_open_set_sync */
#endif

#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_CORPUS "/usr/share/games/fortunes"

/* openblas_set_num_threads is OpenBLAS's own API, not part of CBLAS */
void openblas_set_num_threads(int n);

static volatile sig_atomic_t stop_flag = 0;

static int die(const atoll_err *err) {
  fprintf(stderr, "atoll: error: %s\n", err->msg);
  return 1;
}

/* An error only rank 0 can meet (preparing the default corpus): it reports it. */
static int die_on(int rank, const atoll_err *err) { return rank == 0 ? die(err) : 1; }

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void train_help(void) {
  printf("usage: atoll train [--config FILE] [--resume DIR] [--key value ...]\n\n"
         "Settings (flags override --config FILE, a JSON object with the same keys;\n"
         "with --resume the checkpoint's settings are the starting point):\n");
  atoll_config_print_help(stdout);
  printf("\nWrites OUT/metrics.jsonl, OUT/summary.json and OUT/checkpoints/step_NNNNNNNN.\n"
         "Without --data, the default corpus (%s) is prepared into data/fortunes.\n",
         DEFAULT_CORPUS);
}

/* With --resume, the block design cannot change either: another arch's tensors would not
 * fit, another epsilon, rotary base or head tie would silently change the function. */
static int check_resume_arch(const atoll_shape *c, const atoll_shape *k, const char *dir, atoll_err *err) {
  const char *ca = c->arch[0] ? c->arch : "gpt2", *ka = k->arch[0] ? k->arch : "gpt2";
  if (strcmp(ca, ka) != 0)
    return atoll_fail(err, "--arch %s: the checkpoint %s has arch=%s; a resumed run keeps the model's shape", ca, dir, ka);
  if (!atoll_shape_llama(c)) return 0;
  if (atoll_shape_kv_heads(c) != atoll_shape_kv_heads(k) || atoll_shape_hidden(c) != atoll_shape_hidden(k) ||
      atoll_shape_tied(c) != atoll_shape_tied(k) || atoll_shape_norm_eps(c) != atoll_shape_norm_eps(k) ||
      !atoll_shape_rope_same(c, k) || c->qkv_bias != k->qkv_bias || atoll_shape_head_dim(c) != atoll_shape_head_dim(k))
    return atoll_fail(err, "--kv-heads/--head-dim/--multiple-of/--tie/--norm-eps/--rope-theta/--rope-scaling/--qkv-bias: differ from the checkpoint %s's "
                      "(kv-heads=%d, head-dim=%d, multiple-of=%d, tie=%d, norm-eps=%g, rope-theta=%g, qkv-bias=%d); a resumed run keeps the model's shape",
                      dir, k->kv_heads, k->head_dim, k->multiple_of, k->tie, k->norm_eps, k->rope_theta, k->qkv_bias);
  return 0;
}

/* With --resume, the shape cannot change: the weights would not fit. */
static int check_resume_shape(const atoll_config *c, const atoll_config *ck, const char *dir, atoll_err *err) {
  const char *names[] = {"layers", "heads", "dim", "context", "vocab"};
  const int a[] = {c->model.layers, c->model.heads, c->model.dim, c->model.context, c->model.vocab};
  const int b[] = {ck->model.layers, ck->model.heads, ck->model.dim, ck->model.context, ck->model.vocab};
  for (int i = 0; i < 5; i++)
    if (a[i] != b[i])
      return atoll_fail(err, "--%s %d: the checkpoint %s has %s=%d; a resumed run keeps the model's shape",
                        names[i], a[i], dir, names[i], b[i]);
  return check_resume_arch(&c->model, &ck->model, dir, err);
}

/* Prepares the default corpus on first use, so `atoll train` works with no data. */
static int ensure_default_data(const atoll_config *c, int data_given, atoll_err *err) {
  if (data_given || is_dir(c->data.dir)) return 0;
  if (!is_dir(DEFAULT_CORPUS))
    return atoll_fail(err, "--data %s: no such directory, and the default corpus %s is missing "
                           "(install Debian's fortunes package: scripts/setup.sh)",
                      c->data.dir, DEFAULT_CORPUS);
  fprintf(stderr, "atoll train: preparing the default corpus %s into %s\n", DEFAULT_CORPUS, c->data.dir);
  const char *arg = DEFAULT_CORPUS;
  int nfiles = 0;
  atoll_prepare_input in = {.progress = 1, .nfiles_read = &nfiles};
  if (atoll_prepare_inputs(&arg, 1, &in, c->data.dir, 0.05, err)) return -1;
  fprintf(stderr, "atoll prepare: %d file(s) -> %s\n", nfiles, c->data.dir);
  return 0;
}

/* --vocab follows the data's tokenizer: a BPE data directory raises the default (256)
 * to its vocabulary; a --vocab given that is smaller is refused. A resumed run keeps
 * its checkpoint's (training checks it against the data). */
static int adopt_data_vocab(atoll_config *c, int vocab_flag, const char *resume, atoll_err *err) {
  atoll_tokenizer_record rec;
  if (resume || !is_dir(c->data.dir)) return 0;
  if (atoll_data_tokenizer(c->data.dir, &rec, err)) return -1;
  if (strcmp(rec.kind, "bytes") == 0 || rec.vocab <= c->model.vocab) return 0; /* bytes: as before */
  if (vocab_flag || c->model.vocab != ATOLL_BYTE_VOCAB)
    return atoll_fail(err, "--vocab %d: smaller than the vocabulary of --data %s's tokenizer (%s, %d ids); pass --vocab %d or more",
                      c->model.vocab, c->data.dir, rec.kind, rec.vocab, rec.vocab);
  c->model.vocab = rec.vocab;
  return atoll_config_check(c, err);
}

/* A resumed run continues in the run directory its checkpoint sits in
 * (RUN/checkpoints/step_N), not in the --out its settings recorded: a run directory
 * copied or moved elsewhere (or resumed from another working directory, the recorded
 * --out being relative) wrote into the original. A checkpoint outside a run's
 * checkpoints/ keeps the recorded --out; --out on the command line wins either way. */
static void run_dir_of(const char *ckpt_dir, char *out, size_t outsz) {
  char parent[PATH_MAX];
  atoll_parent_dir(ckpt_dir, parent, sizeof parent);
  const char *base = strrchr(parent, '/');
  base = base ? base + 1 : parent;
  if (strcmp(base, "checkpoints") != 0) return;
  char run[PATH_MAX];
  atoll_parent_dir(parent, run, sizeof run);
  /* never a cut path, which would name another directory: "" makes --out required */
  if (strlen(run) >= outsz) out[0] = 0;
  else memcpy(out, run, strlen(run) + 1);
}

/* --config FILE's settings, then the flags'. */
static int apply_given(int argc, char **argv, const char *config_file, atoll_config *cfg, atoll_err *err) {
  if (config_file) {
    size_t len = 0;
    char *text = NULL;
    if (atoll_read_file(config_file, 64u << 20, &text, &len, err)) return -1;
    int rc = atoll_config_apply_text(cfg, text, len, config_file, err);
    free(text);
    if (rc) return -1;
  }
  int eval_sets = 0;
  for (int i = 0; i < argc; i += 2) {
    const char *key = argv[i] + 2;
    if (strcmp(key, "config") == 0) continue;
    if (strcmp(key, "eval-data") == 0 && eval_sets++) { /* the flag again: one more set */
      char joined[sizeof cfg->data.eval_sets];
      if (snprintf(joined, sizeof joined, "%s,%s", cfg->data.eval_sets, argv[i + 1]) >= (int)sizeof joined)
        return atoll_fail(err, "--eval-data %s: the sets' names and directories exceed %zu bytes together", argv[i + 1],
                          sizeof joined - 1);
      if (atoll_config_set(cfg, key, joined, err)) return -1;
      continue;
    }
    if (atoll_config_set(cfg, key, argv[i + 1], err)) return -1;
  }
  return 0;
}

/* --init-from-hf DIR: the model's shape is DIR/config.json's; a shape key the flags or
 * --config give must say the same (src/ckpt/hf_shape.c). */
static int take_hf_shape(int argc, char **argv, const char *config_file, atoll_config *cfg, atoll_err *err) {
  atoll_config given;
  atoll_config_defaults(&given);
  atoll_hf_shape_unset(&given.model);
  if (apply_given(argc, argv, config_file, &given, err)) return -1;
  return atoll_hf_take_shape(cfg->init.from_hf, &cfg->model, &given.model, err);
}

/* The settings, later ones overriding: the checkpoint's (--resume), --config FILE's,
 * the flags'. resume: a checkpoint or run directory; its resolved checkpoint goes to
 * ckpt_dir. */
static int apply_settings(int argc, char **argv, const char *config_file, const char *resume, atoll_config *cfg,
                          char *ckpt_dir, size_t ckpt_dir_size, int *data_from_ckpt, atoll_err *err) {
  atoll_config from_ckpt = *cfg;
  if (resume) {
    if (atoll_ckpt_resolve(resume, ckpt_dir, ckpt_dir_size, err)) return -1;
    cJSON *state = NULL;
    if (atoll_ckpt_read_state(ckpt_dir, &state, err)) return -1;
    char source[PATH_MAX + 16];
    snprintf(source, sizeof source, "%s/state.json", ckpt_dir);
    int rc = atoll_config_apply_json(cfg, cJSON_GetObjectItemCaseSensitive(state, "config"), source, err);
    cJSON_Delete(state);
    if (rc) return -1;
    run_dir_of(ckpt_dir, cfg->run.out, sizeof cfg->run.out);
    from_ckpt = *cfg;
  }
  if (apply_given(argc, argv, config_file, cfg, err)) return -1;
  if (!resume && cfg->init.from_hf[0] && take_hf_shape(argc, argv, config_file, cfg, err)) return -1;
  if (resume && !cfg->run.out[0])
    return atoll_fail(err, "--resume %s: its run directory's path is longer than %zu bytes; pass --out",
                      ckpt_dir, sizeof cfg->run.out - 1);
  if (resume && check_resume_shape(cfg, &from_ckpt, ckpt_dir, err)) return -1;
  int data_flag = 0;
  for (int i = 0; i < argc; i += 2) data_flag |= strcmp(argv[i], "--data") == 0;
  *data_from_ckpt = resume && !data_flag && strcmp(cfg->data.dir, from_ckpt.data.dir) == 0;
  /* --outer-lr not given (nor in --config or the resumed checkpoint's settings): by H */
  if (cfg->islands.outer_lr < 0) cfg->islands.outer_lr = atoll_diloco_default_outer_lr(cfg->islands.sync_every);
  return atoll_config_check(cfg, err);
}

static int cmd_train_ranks(int argc, char **argv, atoll_comm *world, const atoll_test_hooks *hooks,
                           const atoll_err *hooks_err);

/* Training runs on every rank of the MPI world (one without a launcher). Each rank
 * reads its own flags, files and environment, so any of them may fail on one rank
 * only: the ranks agree on each such phase before the next collective, and on the
 * settings themselves. Errors during training end the whole job (MPI_Abort) so that no
 * rank is left waiting. The test hooks are read from the environment here, once. */
int atoll_train_main(int argc, char **argv) {
  atoll_err err = {{0}}, hooks_err = {{0}};
  atoll_test_hooks hooks;
  int bad_hooks = atoll_test_hooks_from_env(&hooks, &hooks_err);
  atoll_comm *world = NULL;
  if (atoll_comm_init(&world, NULL, NULL, &err)) return die(bad_hooks ? &hooks_err : &err);
  /* ring tuning on the world before anything splits it (every communicator inherits it) */
  if (!bad_hooks) atoll_comm_set_tuning(world, hooks.comm_segment, hooks.comm_window);
#ifdef ATOLL_HAVE_CUDA
  if (!bad_hooks) atoll_cuda_open_set_sync(hooks.cuda_sync); /* ATOLL_CUDA_SYNC=1 */
#endif
  int rc = cmd_train_ranks(argc, argv, world, &hooks, bad_hooks ? &hooks_err : NULL);
  atoll_comm_free(world);
  return rc;
}

/* The exit status for an agreed failure: only the rank that reports it prints. */
static int agreed_exit(int rc, const atoll_err *err) { return rc == ATOLL_TRAIN_QUIET ? 1 : die(err); }

/* An island (--join) started again with its first command, whose --out holds its
 * checkpoints: it continues from them, as with --resume OUT (a killed island restarts
 * with the command that started it). Returns OUT, or NULL (not an island, nothing to
 * continue, settings that do not parse: those are reported by the normal path, and
 * --init-from: a run started from other weights is left to holds_run's refusal). */
static const char *island_own_run(int argc, char **argv, const char *config_file) {
  static char out[sizeof ((atoll_config *)0)->run.out];
  for (int i = 0; i + 1 < argc; i += 2)
    if (strcmp(argv[i], "--init-from") == 0 || strcmp(argv[i], "--init-from-hf") == 0) return NULL;
  atoll_config probe;
  atoll_config_defaults(&probe);
  atoll_err ignored;
  if (apply_given(argc, argv, config_file, &probe, &ignored) || !probe.islands.join[0] || !probe.run.out[0]) return NULL;
  char root[sizeof probe.run.out + 16], latest[PATH_MAX];
  snprintf(root, sizeof root, "%s/checkpoints", probe.run.out);
  if (atoll_ckpt_find_latest(root, latest, sizeof latest, &ignored) != 0) return NULL;
  snprintf(out, sizeof out, "%s", probe.run.out);
  return out;
}

/* An island started without --islands (docs/islands.md, "Few flags") asks its
 * coordinator for the run's settings and its slot before anything else: the run's
 * settings go under its own flags, and its slot is its --island-id unless given.
 * Returns 0 (done, or not such an island: the normal path reports bad settings), or -1.
 * *run: the run's settings (free it), NULL without. */
static int island_asks(int argc, char **argv, const char *config_file, int rank, atoll_config *cfg, char **run,
                       atoll_err *err) {
  *run = NULL;
  atoll_config probe;
  atoll_config_defaults(&probe);
  probe.islands.count = 0, probe.islands.id = -1; /* (not given: they stay so) */
  atoll_err ignored;
  if (apply_given(argc, argv, config_file, &probe, &ignored) || !probe.islands.join[0] || probe.islands.count != 0 ||
      !probe.islands.key[0] || !probe.islands.coordinator_key[0])
    return 0;
  uint32_t slot;
  int open;
  const atoll_islands_config *pi = &probe.islands;
  if (atoll_net_ask(pi->join, pi->key, pi->coordinator_key, (uint32_t)rank, pi->net_timeout, NULL, &slot, &open, run, err))
    return -1;
  if (*run && atoll_run_settings_apply(cfg, *run, err)) return -1;
  if (open) { /* an open run: its key's slot, no fixed number of islands, the data in units */
    if (slot == ATOLL_WIRE_NO_SLOT)
      return atoll_fail(err, "--join %s: the open run's coordinator has no island slot left for this island's key", probe.islands.join);
    if (probe.islands.id >= 0 && probe.islands.id != (int)slot)
      return atoll_fail(err, "--island-id %d: the open run's coordinator gave this island's key slot %u; leave the flag out",
                        probe.islands.id, slot);
    cfg->islands.id = (int)slot;
    cfg->islands.count = 1;
    cfg->islands.units = 1;
    return 0;
  }
  if (probe.islands.id < 0) {
    if (slot == ATOLL_WIRE_NO_SLOT)
      return atoll_fail(err, "--join %s: the coordinator has no island slot for this island's key (allowed after it started?); give --island-id",
                        probe.islands.join);
    cfg->islands.id = (int)slot;
  }
  if (probe.islands.id < 0 && cfg->islands.count >= 2 && cfg->islands.id >= cfg->islands.count)
    return atoll_fail(err, "--join %s: this island's key is island slot %d in the coordinator's allow-list, but its run has %d islands",
                      probe.islands.join, cfg->islands.id, cfg->islands.count);
  if (cfg->islands.count < 2)
    return atoll_fail(err, "--join %s: the coordinator does not say how many islands (%s); give --islands", probe.islands.join,
                      *run ? "its --run FILE has no \"islands\"" : "it was started without --run FILE");
  return 0;
}

/* This rank's settings from its flags, --config and --resume: 0, -1 (err), or 1 for
 * --help. */
static int read_train_settings(int argc, char **argv, int rank, atoll_config *cfg, const char **resume, int *data_given,
                               int *data_from_ckpt, char *ckpt_dir, size_t ckpt_dir_size, atoll_err *err) {
  const char *config_file = NULL;
  *resume = NULL;
  *data_given = 0;
  /* first pass: find --config and --resume, validate flag syntax */
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    if (strncmp(argv[i], "--", 2) != 0)
      return atoll_fail(err, "%s: unexpected argument (flags are --key value)", argv[i]);
    if (strchr(argv[i], '='))
      return atoll_fail(err, "%s: flags are --key value, with a space, not '='", argv[i]);
    if (i + 1 >= argc) return atoll_fail(err, "%s: missing value", argv[i]);
    if (strcmp(argv[i], "--config") == 0) config_file = argv[i + 1];
    if (strcmp(argv[i], "--resume") == 0) *resume = argv[i + 1];
    if (strcmp(argv[i], "--data") == 0) *data_given = 1;
    i++;
  }
  if (!*resume && (*resume = island_own_run(argc, argv, config_file)) && rank == 0)
    fprintf(stderr, "atoll train: --out %s holds this island's run: it continues from its latest checkpoint (as with --resume)\n",
            *resume);
  if (*resume) *data_given = 1; /* the checkpoint names its data */
  for (int i = 0; *resume && i + 1 < argc; i += 2) /* a resumed run continues its own weights */
    if (strcmp(argv[i], "--init-from") == 0 || strcmp(argv[i], "--init-from-hf") == 0)
      return atoll_fail(err, "%s: conflicts with --resume (a resumed run continues from its checkpoint)", argv[i]);
  char *run = NULL;
  if (!*resume && island_asks(argc, argv, config_file, rank, cfg, &run, err)) {
    free(run);
    return -1;
  }
  atoll_config run_only = *cfg;
  int rc = apply_settings(argc, argv, config_file, *resume, cfg, ckpt_dir, ckpt_dir_size, data_from_ckpt, err);
  if (rc == 0 && run) rc = atoll_run_settings_agree(&run_only, cfg, run, err);
  if (rc == 0 && run && rank == 0 && cfg->islands.units)
    fprintf(stderr, "atoll train: the coordinator %s gave the run's settings (%zu bytes); this island is island slot %d of an open run (data in units)\n",
            cfg->islands.join, strlen(run), cfg->islands.id);
  else if (rc == 0 && run && rank == 0)
    fprintf(stderr, "atoll train: the coordinator %s gave the run's settings (%zu bytes); this island is island slot %d of %d\n",
            cfg->islands.join, strlen(run), cfg->islands.id, cfg->islands.count);
  free(run);
  return rc;
}

/* Checkpoints record --data as an absolute path (train_ckpt.c); those from before
 * recorded it as given, and a relative one is read against this working directory,
 * which may hold another corpus under that name: say which directory it now names. */
static int check_recorded_data(const atoll_config *c, int data_from_ckpt, const char *ckpt_dir, int rank,
                               atoll_err *err) {
  if (!data_from_ckpt) return 0;
  if (c->data.dir[0] == '/') /* rank 0's path: another node may keep its copy elsewhere */
    return is_dir(c->data.dir) ? 0
                           : atoll_fail(err, "--data %s (recorded in %s/state.json): no such directory here; pass --data",
                                        c->data.dir, ckpt_dir);
  char *abs = realpath(c->data.dir, NULL);
  if (!abs)
    return atoll_fail(err, "--data %s (recorded relative in %s/state.json, read from the working directory): %s; pass --data",
                      c->data.dir, ckpt_dir, strerror(errno));
  if (rank == 0)
    fprintf(stderr, "atoll train: the checkpoint records --data %s, relative: reading %s (pass --data to choose)\n",
            c->data.dir, abs);
  free(abs);
  return 0;
}

static int cmd_train_ranks(int argc, char **argv, atoll_comm *world, const atoll_test_hooks *hooks,
                           const atoll_err *hooks_err) {
  atoll_err err = {{0}};
  int rank = atoll_comm_rank(world);
  atoll_config cfg;
  atoll_config_defaults(&cfg);
  const char *resume = NULL;
  int data_given = 0, data_from_ckpt = 0;
  char ckpt_dir[PATH_MAX] = "";
  int rc = -1;
  if (hooks_err)
    err = *hooks_err;
  else
    rc = read_train_settings(argc, argv, rank, &cfg, &resume, &data_given, &data_from_ckpt, ckpt_dir, sizeof ckpt_dir, &err);
  if (rc == 1) {
    train_help();
    return 0;
  }
  if ((rc = atoll_train_agree(world, rc, &err))) return agreed_exit(rc, &err);
  if ((rc = atoll_train_agree(world, atoll_device_check(&cfg, &err), &err))) return agreed_exit(rc, &err);
  if ((rc = atoll_train_agree(world, atoll_run_check_layout(&cfg, atoll_comm_size(world), &err), &err)))
    return agreed_exit(rc, &err);
  /* rank 0 prepares the default corpus; the others wait for it */
  int prep = rank == 0 ? ensure_default_data(&cfg, data_given, &err) : 0;
  atoll_broadcast(world, &prep, sizeof prep, 0);
  if (prep) return die_on(rank, &err);
  if ((rc = atoll_train_agree(world, check_recorded_data(&cfg, data_from_ckpt, ckpt_dir, rank, &err), &err)))
    return agreed_exit(rc, &err);
  int vocab_flag = 0;
  for (int i = 0; i < argc; i++) vocab_flag |= strcmp(argv[i], "--vocab") == 0;
  if ((rc = atoll_train_agree(world, adopt_data_vocab(&cfg, vocab_flag, resume, &err), &err)))
    return agreed_exit(rc, &err);
  if ((rc = atoll_train_check_same(world, &cfg, resume ? ckpt_dir : NULL, &err))) return agreed_exit(rc, &err);

  if (cfg.run.threads > 0) {
    omp_set_num_threads(cfg.run.threads);
    openblas_set_num_threads(cfg.run.threads);
  }
  /* SIGINT, SIGTERM and SIGHUP (a closed terminal or ssh session) save and stop; the
   * handler runs on its own stack (src/core/stop_signal.c: oneDNN borrows rsp) */
  if (atoll_stop_signals_install(&stop_flag, &err)) return die(&err);

  rc = atoll_train_run_hooked(&cfg, hooks, world, resume ? ckpt_dir : NULL, &stop_flag, &err);
  /* a wait a stop signal ended (e.g. an island's for its coordinator) is a signal stop;
   * another error after the signal (a checkpoint that could not be written) is not */
  if (rc == ATOLL_TRAIN_QUIET && stop_flag) return 130;
  if (rc < 0 && stop_flag && strstr(err.msg, "stopped by a signal")) return die(&err), 130;
  if (rc == ATOLL_TRAIN_QUIET) return 1;
  if (rc < 0) return die(&err);
  if (rc == 1) return 130;
  if (rank == 0) fprintf(stderr, "atoll train: done; summary in %s/summary.json\n", cfg.run.out);
  return 0;
}
