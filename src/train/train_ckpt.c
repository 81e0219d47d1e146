/* Checkpoints of a (possibly data-, tensor- and pipeline-parallel, possibly sharded)
 * run.
 *
 * On disk a checkpoint always holds the whole model and the whole AdamW state, in the
 * whole model's layout order, whatever the layout that wrote it. Saving gathers to
 * rank 0 the runs each rank owns (its part's owned tensors, src/model/layout.c,
 * inside its ZeRO shard: the shard pieces), which writes; loading has every rank read the
 * files and cut its own part and shard. So a run saved at one layout (any world size,
 * ZeRO stage, --tp, --pp) resumes at any other: resharding is just a different choice
 * of part on load. */
#include "train/agree.h"
#include "train/run.h"
#include "parallel/islands_net.h"

#include "core/fatal.h"

#include "ckpt/checkpoint.h"
#include "core/mem.h"
#include "core/rng.h"
#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cJSON *rng_to_json(const atoll_rng *r) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < 4; i++) {
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)r->s[i]);
    cJSON *x = cJSON_CreateString(buf);
    if (!x || !cJSON_AddItemToArray(a, x)) {
      cJSON_Delete(x);
      cJSON_Delete(a);
      a = NULL;
    }
  }
  return a;
}

static int rng_from_json(atoll_rng *r, const cJSON *a, const char *dir, atoll_err *err) {
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 4)
    return atoll_fail(err, "%s/state.json: rng must be an array of 4 strings", dir);
  for (int i = 0; i < 4; i++) {
    const cJSON *x = cJSON_GetArrayItem(a, i);
    char *end = NULL;
    if (!cJSON_IsString(x)) return atoll_fail(err, "%s/state.json: rng[%d] is not a string", dir, i);
    errno = 0;
    r->s[i] = strtoull(x->valuestring, &end, 10);
    if (errno || !*x->valuestring || *end) return atoll_fail(err, "%s/state.json: rng[%d] is not an integer", dir, i);
  }
  return 0;
}

/* Data-parallel rank j's shard of a part's flat buffer of `total` floats (the ZeRO
 * rule, atoll_dp_shard_start): also its slice of the DiLoCo outer state. */
static void shard_of(size_t total, int dp, int j, size_t *b, size_t *e) {
  *b = atoll_dp_shard_start(total, dp, j);
  *e = atoll_dp_shard_start(total, dp, j + 1);
}

/* The runs of the whole model's buffer that one rank contributes to a checkpoint (its
 * shard piece): the tensors its part owns, inside its ZeRO shard, as (part offset,
 * whole offset, length). */
typedef struct {
  size_t lo, hi; /* the shard, in part offsets */
  const atoll_layout *lay;
  size_t *runs;  /* 3 per run */
  size_t n, cap, floats;
  int failed;    /* out of memory */
} run_list;

static void add_run(void *ctx, const atoll_tensor *ten, size_t part_off, size_t whole_off, size_t n) {
  run_list *rl = ctx;
  if (!atoll_layout_owns(rl->lay, ten)) return;
  size_t b = part_off > rl->lo ? part_off : rl->lo, e = part_off + n < rl->hi ? part_off + n : rl->hi;
  if (e <= b) return;
  whole_off += b - part_off;
  size_t *last = rl->n ? rl->runs + 3 * (rl->n - 1) : NULL;
  if (last && last[0] + last[2] == b && last[1] + last[2] == whole_off) { /* adjacent: merge */
    last[2] += e - b;
  } else {
    if (rl->n == rl->cap) {
      size_t cap = rl->cap ? 2 * rl->cap : 64;
      size_t *runs = realloc(rl->runs, 3 * cap * sizeof(size_t));
      if (!runs) {
        rl->failed = 1;
        return;
      }
      rl->runs = runs;
      rl->cap = cap;
    }
    size_t *r = rl->runs + 3 * rl->n++;
    r[0] = b;
    r[1] = whole_off;
    r[2] = e - b;
  }
  rl->floats += e - b;
}

/* The runs of world rank w (any rank: rank 0 recomputes every rank's to unpack). */
static int rank_runs(atoll_run *r, int w, run_list *rl) {
  const atoll_mesh *mh = &r->mesh;
  int island, pp_rank, dp_rank, tp_rank;
  atoll_mesh_coords(mh, w, &island, &pp_rank, &dp_rank, &tp_rank);
  atoll_part part = {mh->tp, tp_rank, pp_rank, mh->pp, r->chunks, 0};
  atoll_layout lay;
  atoll_err err;
  memset(rl, 0, sizeof *rl);
  if (atoll_layout_init_part(&lay, &r->cfg->model, &part, &err)) return -1;
  shard_of(lay.nparams, mh->dp, dp_rank, &rl->lo, &rl->hi);
  rl->lay = &lay;
  atoll_layout_runs(&lay, &r->whole, add_run, rl);
  rl->lay = NULL;
  atoll_layout_free(&lay);
  return rl->failed ? -1 : 0;
}

/* Gathers island k's copy of a buffer of this rank's part to world rank 0 as the whole
 * model's buffer: every rank of island k sends the values of its runs, taken from src
 * (which holds the part's values from offset src_begin on). Returns the whole buffer on
 * world rank 0 (caller frees with atoll_mem_free), NULL elsewhere or when out of
 * memory. */
static float *gather_island(atoll_run *r, int k, const float *src, size_t src_begin) {
  size_t whole_n = r->whole.nparams;
  run_list mine = {0};
  int ok = r->mesh.island != k || rank_runs(r, r->rank, &mine) == 0;
  size_t *counts = calloc((size_t)r->world_size, sizeof(size_t));
  size_t floats = ok ? mine.floats : 0;
  if (counts) atoll_allgather_bytes(r->world, &floats, counts, sizeof(size_t));
  size_t total = 0, at = 0;
  for (int w = 0; counts && w < r->world_size; w++) {
    if (w < r->rank) at += counts[w];
    total += counts[w];
  }
  float *packed = atoll_mem_alloc((total ? total : 1) * sizeof(float));
  float *full = r->rank == 0 ? atoll_mem_alloc(whole_n * sizeof(float)) : NULL;
  ok = ok && counts && packed && (r->rank != 0 || full);
  /* all ranks go on to the gather only if every one could (never a hang) */
  ok = atoll_allreduce_sum_double(r->world, ok ? 0.0 : 1.0) == 0 && total == whole_n;
  if (ok) {
    for (size_t i = 0; i < mine.n; i++) {
      const size_t *r = mine.runs + 3 * i;
      memcpy(packed + at, src + (r[0] - src_begin), r[2] * sizeof(float));
      at += r[2];
    }
    atoll_gather_to_root(r->world, packed, total, counts, 0);
  }
  if (r->rank == 0 && ok) {
    at = 0;
    for (int w = 0; w < r->world_size; w++) {
      if (!counts[w]) continue;
      run_list rl;
      if (rank_runs(r, w, &rl)) ok = 0;
      for (size_t i = 0; ok && i < rl.n; i++) {
        const size_t *r = rl.runs + 3 * i;
        memcpy(full + r[1], packed + at, r[2] * sizeof(float));
        at += r[2];
      }
      free(rl.runs);
    }
  }
  free(mine.runs);
  free(counts);
  atoll_mem_free(packed);
  if (r->rank != 0 || !ok) {
    atoll_mem_free(full);
    return NULL;
  }
  return full;
}

/* Copies this rank's part out of a whole-model buffer (a checkpoint's; run.h). */
typedef struct {
  float *part;
  const float *whole;
} extract_ctx;

static void extract_run(void *ctx, const atoll_tensor *ten, size_t part_off, size_t whole_off, size_t n) {
  (void)ten;
  extract_ctx *x = ctx;
  memcpy(x->part + part_off, x->whole + whole_off, n * sizeof(float));
}

void atoll_run_cut_part(const atoll_run *r, float *part, const float *whole) {
  extract_ctx x = {part, whole};
  atoll_layout_runs(r->lay, &r->whole, extract_run, &x);
}

float *atoll_run_params(atoll_run *r) { return r->host_params ? r->host_params : atoll_model_params(r->model); }

/* The settings as a checkpoint records them: --data as an absolute path, so that a
 * resume from another working directory reads the same corpus (a relative one named
 * whatever that directory held under the name). The run itself, and the ranks'
 * agreement on settings, keep the path as given. */
static void record_absolute(cJSON *o, const char *key, const char *path, size_t field_size) {
  char *abs = o && path[0] && path[0] != '/' ? realpath(path, NULL) : NULL;
  /* a path the config's field cannot hold would make the checkpoint unreadable */
  if (abs && strlen(abs) < field_size) cJSON_ReplaceItemInObjectCaseSensitive(o, key, cJSON_CreateString(abs));
  free(abs);
}

/* (--tensorboard too: a resume goes on writing into the same directory) */
static cJSON *recorded_config(const atoll_config *c) {
  cJSON *o = atoll_config_to_json(c);
  record_absolute(o, "data", c->data.dir, sizeof c->data.dir);
  record_absolute(o, "tensorboard", c->run.tensorboard, sizeof c->run.tensorboard);
  return o;
}

/* Adds item to o under key; on failure deletes item and returns 0. */
static int add_item(cJSON *o, const char *key, cJSON *item) {
  if (item && cJSON_AddItemToObject(o, key, item)) return 1;
  cJSON_Delete(item);
  return 0;
}

/* state.json's content, or NULL when out of memory (never a partial state: it would
 * not resume). */
static int add_late_tokens(cJSON *state, const atoll_diloco *d) {
  int n = atoll_diloco_fragments(d), any = 0;
  for (int f = 0; f < n; f++) any |= atoll_diloco_late_tokens(d, f) > 0;
  if (!any) return 1;
  cJSON *a = cJSON_AddArrayToObject(state, "island_late_tokens");
  for (int f = 0; a && f < n; f++)
    if (!cJSON_AddItemToArray(a, cJSON_CreateNumber(atoll_diloco_late_tokens(d, f)))) return 0;
  return a != NULL;
}

/* state.json's island_late_tokens (absent: none kept): one weight per fragment,
 * each 0 or positive and at most 2^53, handed to DiLoCo before it loads the gradient. */
static int read_late_tokens(atoll_run *r, const cJSON *state, const char *dir, atoll_err *err) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(state, "island_late_tokens");
  if (!a || !r->net || !r->diloco) return 0;
  int n = atoll_diloco_fragments(r->diloco);
  if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
    return atoll_fail(err, "%s/state.json: island_late_tokens must be an array of %d number(s), one per fragment", dir, n);
  for (int f = 0; f < n; f++) {
    const cJSON *t = cJSON_GetArrayItem(a, f);
    if (!cJSON_IsNumber(t) || !(t->valuedouble >= 0) || t->valuedouble > 9007199254740992.0)
      return atoll_fail(err, "%s/state.json: island_late_tokens[%d] is not a number between 0 and 2^53", dir, f);
    atoll_diloco_set_late_tokens(r->diloco, f, t->valuedouble);
  }
  return 0;
}

static cJSON *state_json(const atoll_run *r, const atoll_train_state *st, int step, uint64_t hash) {
  cJSON *state = cJSON_CreateObject();
  int ok = state && cJSON_AddNumberToObject(state, "step", step) &&
           add_item(state, "config", recorded_config(r->cfg)) && add_item(state, "rng", rng_to_json(&st->rng));
  cJSON *data = ok ? cJSON_AddObjectToObject(state, "data") : NULL;
  char seed[32], weights_hash[32];
  snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->cfg->run.seed);
  snprintf(weights_hash, sizeof weights_hash, "%016llx", (unsigned long long)hash);
  ok = data && cJSON_AddStringToObject(data, "seed", seed) &&
       cJSON_AddNumberToObject(data, "next_step", step) && /* step s's batch is window set (seed, s) */
       cJSON_AddNumberToObject(state, "train_loss", st->last_loss) &&
       cJSON_AddNumberToObject(state, "adam_steps", (double)st->adam_step0 + step) &&
       cJSON_AddNumberToObject(state, "first_step", st->first_step) &&
       cJSON_AddNumberToObject(state, "world_size", r->world_size) &&
       cJSON_AddNumberToObject(state, "global_batch_sequences", atoll_run_global_batch(r)) &&
       cJSON_AddNumberToObject(state, "shard", r->cfg->parallel.zero_stage) && /* the key before "zero_stage"; kept for readers */
       cJSON_AddNumberToObject(state, "zero_stage", r->cfg->parallel.zero_stage) &&
       cJSON_AddNumberToObject(state, "islands", r->mesh.islands) &&
       cJSON_AddStringToObject(state, "weights_hash", weights_hash) &&
       add_item(state, "tokenizer", atoll_tokenizer_record_json(&r->tokenizer));
  /* an island of a networked run: the revision its global weights are (a resume at the
   * run's revision exchanges at once; behind it, it joins) */
  if (ok && r->net) ok = cJSON_AddNumberToObject(state, "island_revision", (double)atoll_islands_net_revision(r->net)) != NULL;
  /* and the weights of its kept late contributions, per fragment (their outer gradient
   * is late.safetensors); absent when it keeps none */
  if (ok && r->net && r->diloco) ok = add_late_tokens(state, r->diloco);
  /* and its phase in tokens or seconds so far (phase.h): a resume mid-phase goes on with it */
  if (ok && r->net && r->diloco && (r->cfg->islands.phase_tokens > 0 || r->cfg->islands.phase_seconds > 0))
    ok = atoll_phase_to_json(state, &st->phase, atoll_diloco_phase_skipped(r->diloco), st->steps_taken, st->steps_skipped);
  if (!ok) {
    cJSON_Delete(state);
    return NULL;
  }
  return state;
}

#define MAX_ISLAND_FILES 64
#define MAX_FILES (MAX_ISLAND_FILES + 4)

/* A checkpoint being gathered to world rank 0 (atoll_ckpt_io's put). */
typedef struct {
  atoll_run *r;
  float *main[3];                /* model weights, exp_avg, exp_avg_sq */
  int nfiles;                    /* further files */
  char names[MAX_FILES][32];
  atoll_st_buffer buffers[MAX_FILES][3];
  int nbuffers[MAX_FILES];
  int failed;                    /* rank 0: out of memory or too many files */
} ckpt_writer;

/* The slot a put fills on rank 0, or NULL when there is none. */
static float **writer_slot(ckpt_writer *w, const char *file, const char *prefix) {
  if (!file) return &w->main[!prefix ? 0 : strcmp(prefix, "exp_avg.") == 0 ? 1 : 2];
  int f = 0;
  while (f < w->nfiles && strcmp(w->names[f], file) != 0) f++;
  if (f == w->nfiles) {
    if (f == MAX_FILES || strlen(file) >= sizeof w->names[f]) return NULL;
    snprintf(w->names[w->nfiles++], sizeof w->names[f], "%s", file);
  }
  if (w->nbuffers[f] == 3) return NULL;
  atoll_st_buffer *buf = &w->buffers[f][w->nbuffers[f]++];
  buf->prefix = prefix;
  buf->data = NULL;
  return (float **)&buf->data;
}

static void writer_put(void *ctx, const char *file, const char *prefix, int island, const float *src, size_t begin) {
  ckpt_writer *w = ctx;
  float *whole = gather_island(w->r, island, src, begin);
  if (w->r->rank != 0) return;
  float **slot = writer_slot(w, file, prefix);
  if (!whole || !slot) {
    w->failed = 1;
    atoll_mem_free(whole);
    return;
  }
  atoll_mem_free(*slot); /* a later put replaces an earlier one (DiLoCo's global weights) */
  *slot = whole;
}

static void writer_free(ckpt_writer *w) {
  for (int i = 0; i < 3; i++) atoll_mem_free(w->main[i]);
  for (int f = 0; f < w->nfiles; f++)
    for (int i = 0; i < w->nbuffers[f]; i++) atoll_mem_free((void *)w->buffers[f][i].data);
}

/* Rank 0 writes what was gathered, and prunes old checkpoints. */
static int writer_write(ckpt_writer *w, const atoll_train_state *st, int step, uint64_t hash, atoll_err *err) {
  atoll_run *r = w->r;
  if (w->failed || !w->main[0] || !w->main[1] || !w->main[2])
    return atoll_fail(err, "out of memory gathering the checkpoint");
  atoll_ckpt_extra extras[MAX_FILES + 1];
  int nextras = w->nfiles;
  for (int f = 0; f < w->nfiles; f++) extras[f] = (atoll_ckpt_extra){w->names[f], w->buffers[f], w->nbuffers[f], NULL};
  if (r->tokenizer_json) /* the tokenizer travels with the weights (sample, export) */
    extras[nextras++] = (atoll_ckpt_extra){"tokenizer.json", NULL, 0, r->tokenizer_json};
  char dir[1200];
  atoll_ckpt_dirname(r->ckpt_root, step, dir, sizeof dir);
  /* an island's last commit answered, so that state.json names its revision (a failed
   * one: no checkpoint of weights nobody committed) */
  if (r->net && atoll_islands_net_settle(r->net, err)) return -1;
  cJSON *state = state_json(r, st, step, hash);
  if (!state) return atoll_fail(err, "out of memory building the checkpoint's state.json");
  int rc = atoll_ckpt_save_ex(dir, &r->whole, w->main[0], w->main[1], w->main[2], extras, nextras, state, err);
  cJSON_Delete(state);
  /* the checkpoint just written survives whatever else is there */
  return rc ? rc : atoll_ckpt_prune_ex(r->ckpt_root, r->cfg->run.keep, step, err);
}

/* The island file of island k, or -1: with several islands in the job, this rank's
 * island; an island of a networked run, its --island-id. */
static int own_island_file(const atoll_run *r) {
  return r->mesh.islands > 1 ? r->mesh.island : r->net ? r->cfg->islands.id : -1;
}

/* The loop's own state: the weights and AdamW moments; with several islands, island 0's
 * moments in the model's files and each island's weights and moments in
 * island_K.safetensors (an island of a networked run: its own, K its --island-id, since
 * the model's files hold the global weights). */
static void put_own_state(const atoll_ckpt_io *io, atoll_run *r, const atoll_train_state *st) {
  float *params = atoll_run_params(r);
  io->put(io->ctx, NULL, NULL, 0, params, 0);
  io->put(io->ctx, NULL, "exp_avg.", 0, st->m, st->begin);
  io->put(io->ctx, NULL, "exp_avg_sq.", 0, st->v, st->begin);
  int n = r->mesh.islands > 1 ? r->mesh.islands : r->net ? 1 : 0;
  for (int k = 0; k < n; k++) {
    char file[32];
    snprintf(file, sizeof file, "island_%d.safetensors", r->mesh.islands > 1 ? k : own_island_file(r));
    io->put(io->ctx, file, "weights.", k, params, 0);
    io->put(io->ctx, file, "exp_avg.", k, st->m, st->begin);
    io->put(io->ctx, file, "exp_avg_sq.", k, st->v, st->begin);
  }
}

/* Collective. World rank 0 gathers and writes; every rank learns the outcome. The loop
 * puts its own state, then each strategy its own (DiLoCo: the global weights become the
 * model's weights, and outer.safetensors the outer momentum). */
int atoll_run_save(atoll_run *r, const atoll_train_state *st, int step, atoll_err *err) {
  int islands = r->mesh.islands;
  if (islands > MAX_ISLAND_FILES)
    return atoll_fail(err, "--islands %d: checkpoints support up to %d islands", islands, MAX_ISLAND_FILES);
  uint64_t hash;
  atoll_dp_gather_weights(r->dp);
  int rc = atoll_run_check_weights(r, &hash, err);
  atoll_dp_release_weights(r->dp);
  ckpt_writer w = {.r = r};
  atoll_ckpt_io io = {.ctx = &w, .put = writer_put};
  if (rc == 0) {
    put_own_state(&io, r, st);
    atoll_strategies_save(&r->strategies, &io);
    if (r->rank == 0) rc = writer_write(&w, st, step, hash, err);
  }
  writer_free(&w);
  /* every rank learns whether rank 0's write worked */
  int ok = rc == 0;
  atoll_broadcast(r->world, &ok, sizeof ok, 0);
  if (!ok && rc == 0) return atoll_fail(err, "rank 0 could not write checkpoint step %d (see its message)", step);
  return rc;
}

/* A resumed run at another layout (world size, --tp, --pp) must not change the
 * sequences per step by accident: unless --global-batch was changed on purpose, the
 * new layout must train the checkpoint's global batch. */
static int check_global_batch(atoll_run *r, const cJSON *state, const char *dir, atoll_err *err) {
  const cJSON *saved = cJSON_GetObjectItemCaseSensitive(state, "global_batch_sequences");
  const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(state, "config");
  const cJSON *saved_gb = cJSON_GetObjectItemCaseSensitive(cfg, "global-batch");
  if (!cJSON_IsNumber(saved)) return 0; /* a checkpoint from before this check */
  double now = atoll_run_global_batch(r);
  int changed_on_purpose = cJSON_IsNumber(saved_gb) && saved_gb->valuedouble != r->cfg->data.global_batch;
  if (now == saved->valuedouble || changed_on_purpose) return 0;
  return atoll_fail(err,
                    "--resume %s: the checkpoint trained %.0f sequences per step, this layout %.0f (batch %d x %d micro-batches x %d replicas); pass --global-batch %.0f to keep it (or --global-batch %.0f to change it)",
                    dir, saved->valuedouble, now, r->cfg->data.batch, r->micro_batches, r->replicas, saved->valuedouble, now);
}

/* A checkpoint trained on one tokenizer's ids resumes only on data of the same
 * tokenizer (a checkpoint without a record is a byte-token one). */
static int check_tokenizer(atoll_run *r, const cJSON *state, const char *dir, atoll_err *err) {
  char what[1300];
  snprintf(what, sizeof what, "%s/state.json", dir);
  atoll_tokenizer_record saved;
  if (atoll_tokenizer_record_from_json(cJSON_GetObjectItemCaseSensitive(state, "tokenizer"), what, &saved, err))
    return -1;
  char lead[1300];
  snprintf(lead, sizeof lead, "--resume %s: the checkpoint was trained on", dir);
  return atoll_tokenizer_same_ids(&saved, &r->tokenizer, r->cfg->data.dir, lead,
                                  "prepare the data with the checkpoint's tokenizer", err);
}

int atoll_run_tokenizer(atoll_run *r, atoll_err *err) {
  const atoll_config *c = r->cfg;
  if (atoll_data_tokenizer(c->data.dir, &r->tokenizer, err)) return -1;
  if (strcmp(r->tokenizer.kind, "bytes") == 0) return 0; /* token files' own vocabulary is checked */
  if (r->tokenizer.vocab > c->model.vocab)
    return atoll_fail(err, "--vocab %d: smaller than the vocabulary of --data %s's tokenizer (%s, %d ids); pass --vocab %d or more",
                      c->model.vocab, c->data.dir, r->tokenizer.kind, r->tokenizer.vocab, r->tokenizer.vocab);
  char path[1100], what[1100];
  snprintf(path, sizeof path, "%s/tokenizer.json", c->data.dir);
  snprintf(what, sizeof what, "%s/manifest.json", c->data.dir);
  atoll_tokenizer *t = NULL;
  if (atoll_tokenizer_load_checked(path, &r->tokenizer, what, &t, err)) return -1;
  r->tokenizer_json = atoll_tokenizer_to_json(t);
  atoll_tokenizer_free(t);
  return r->tokenizer_json ? 0 : atoll_fail(err, "%s: out of memory", path);
}

/* A checkpoint being read (atoll_ckpt_io's get), with whole-model and part scratch. */
typedef struct {
  atoll_run *r;
  const char *dir;
  float *whole, *part;
} ckpt_reader;

static int reader_get(void *ctx, const char *file, const char *prefix, float *dst, size_t begin, size_t end,
                      atoll_err *err) {
  ckpt_reader *rd = ctx;
  atoll_st_read_buffer buffer = {prefix, rd->whole};
  int rc = file ? atoll_ckpt_load_extra(rd->dir, &rd->r->whole, file, &buffer, 1, err)
                : atoll_ckpt_load(rd->dir, &rd->r->whole, rd->whole, NULL, NULL, err); /* the model's weights */
  if (rc) return -1;
  atoll_run_cut_part(rd->r, rd->part, rd->whole);
  memcpy(dst, rd->part + begin, (end - begin) * sizeof(float));
  return 0;
}

/* What state.json says about the run: its step, and that it fits this one. */
static int check_state(atoll_run *r, atoll_train_state *st, const cJSON *state, const char *dir, int *step,
                       atoll_err *err) {
  const cJSON *saved_step = cJSON_GetObjectItemCaseSensitive(state, "step");
  const cJSON *saved = cJSON_GetObjectItemCaseSensitive(state, "islands");
  int islands = r->mesh.islands, saved_islands = cJSON_IsNumber(saved) ? saved->valueint : 1;
  if (!cJSON_IsNumber(saved_step)) return atoll_fail(err, "%s/state.json: step missing", dir);
  if (saved_islands != islands)
    return atoll_fail(err, "--islands %d: the checkpoint %s was saved with %d island%s (each island's own state is in it)",
                      islands, dir, saved_islands, saved_islands == 1 ? "" : "s");
  if (rng_from_json(&st->rng, cJSON_GetObjectItemCaseSensitive(state, "rng"), dir, err)) return -1;
  const cJSON *cfg_saved = cJSON_GetObjectItemCaseSensitive(state, "config");
  const cJSON *saved_id = cfg_saved ? cJSON_GetObjectItemCaseSensitive(cfg_saved, "island-id") : NULL;
  if (r->net && cJSON_IsNumber(saved_id) && saved_id->valuedouble != r->cfg->islands.id)
    return atoll_fail(err, "--island-id %d: the checkpoint %s was written by island %g (each island resumes from its own)",
                      r->cfg->islands.id, dir, saved_id->valuedouble);
  const cJSON *rev = cJSON_GetObjectItemCaseSensitive(state, "island_revision");
  if (rev && (!cJSON_IsNumber(rev) || rev->valuedouble < 0 || rev->valuedouble > 9e15 || rev->valuedouble != floor(rev->valuedouble)))
    return atoll_fail(err, "%s/state.json: island_revision is not a whole number between 0 and 9e15", dir);
  /* (absent: an older checkpoint, or not an island of a networked run; a joining resume) */
  if (rev && r->net) atoll_islands_net_resume_revision(r->net, (uint64_t)rev->valuedouble);
  if (read_late_tokens(r, state, dir, err)) return -1;
  int phase_skipped = 0;
  if (r->net && r->diloco) {
    if (atoll_phase_from_json(state, dir, saved_step->valueint, r->cfg->islands.sync_every, &st->phase, &phase_skipped,
                              &st->steps_taken, &st->steps_skipped, err))
      return -1;
    atoll_diloco_set_phase_skipped(r->diloco, phase_skipped);
  }
  if (check_tokenizer(r, state, dir, err)) return -1;
  *step = saved_step->valueint;
  /* absent in older checkpoints: their moments started at step 0 */
  const cJSON *adam = cJSON_GetObjectItemCaseSensitive(state, "adam_steps");
  st->adam_step0 = 0;
  if (cJSON_IsNumber(adam)) {
    /* below the step for a run started with --init-step 1 and fresh moments */
    if (adam->valuedouble < 0 || adam->valuedouble > 2e9 || adam->valuedouble != (int)adam->valuedouble)
      return atoll_fail(err, "%s/state.json: adam_steps %g is not a whole number between 0 and 2e9", dir,
                        adam->valuedouble);
    st->adam_step0 = (int)adam->valuedouble - *step;
  }
  /* absent in older checkpoints: every run began at step 0 */
  const cJSON *first = cJSON_GetObjectItemCaseSensitive(state, "first_step");
  st->first_step = 0;
  if (first) {
    if (!cJSON_IsNumber(first) || first->valuedouble < 0 || first->valuedouble > *step ||
        first->valuedouble != (int)first->valuedouble)
      return atoll_fail(err, "%s/state.json: first_step is not a whole number between 0 and the step %d", dir, *step);
    st->first_step = (int)first->valuedouble;
  }
  if (r->diloco) atoll_diloco_set_first_step(r->diloco, st->first_step);
  return check_global_batch(r, state, dir, err);
}

/* Every rank reads the files (the whole model) and keeps its own part: resharding
 * across world sizes, ZeRO stages, tensor and pipeline layouts is a different choice
 * of part. The loop reads its own state (with several islands, this island's file),
 * then each strategy its own. DiLoCo checkpoints need the same number of islands. */
int atoll_run_load(atoll_run *r, atoll_train_state *st, const char *dir, int *start_step, atoll_err *err) {
  cJSON *state = NULL;
  if (atoll_ckpt_read_state(dir, &state, err)) return -1;
  int rc = -1, step = 0;
  size_t part_n = r->lay->nparams, whole_n = r->whole.nparams;
  /* whole-model buffers as read: weights, m, v; the part cut from m, v; scratch */
  float *wp = atoll_mem_alloc(whole_n * sizeof(float)), *wm = atoll_mem_alloc(whole_n * sizeof(float));
  float *wv = atoll_mem_alloc(whole_n * sizeof(float));
  float *pm = atoll_mem_alloc(part_n * sizeof(float)), *pv = atoll_mem_alloc(part_n * sizeof(float));
  float *px = atoll_mem_alloc(part_n * sizeof(float));
  if (!wp || !wm || !wv || !pm || !pv || !px) {
    atoll_fail(err, "out of memory loading the checkpoint");
    goto done;
  }
  if (check_state(r, st, state, dir, &step, err)) goto done;
  char file[64], path[4200];
  snprintf(file, sizeof file, "island_%d.safetensors", own_island_file(r));
  snprintf(path, sizeof path, "%s/%s", dir, file);
  /* (a networked island's checkpoint written before it had its own file, and before
   * island_revision: the global weights) */
  int own_file = r->net && access(path, F_OK) == 0;
  if (r->net && !own_file && cJSON_GetObjectItemCaseSensitive(state, "island_revision")) {
    atoll_fail(err, "%s: this island's own weights are missing (the checkpoint of island %d has no %s)", dir,
               own_island_file(r), file);
    goto done;
  }
  if (r->mesh.islands == 1 && !own_file) {
    if (atoll_ckpt_load(dir, &r->whole, wp, wm, wv, err)) goto done;
  } else {
    atoll_st_read_buffer island[3] = {{"weights.", wp}, {"exp_avg.", wm}, {"exp_avg_sq.", wv}};
    if (atoll_ckpt_load_extra(dir, &r->whole, file, island, 3, err)) goto done;
  }
  atoll_run_cut_part(r, atoll_run_params(r), wp);
  atoll_run_cut_part(r, pm, wm);
  atoll_run_cut_part(r, pv, wv);
  memcpy(st->m, pm + st->begin, (st->end - st->begin) * sizeof(float));
  memcpy(st->v, pv + st->begin, (st->end - st->begin) * sizeof(float));
  ckpt_reader rd = {r, dir, wp, px};
  atoll_ckpt_io io = {.ctx = &rd, .get = reader_get};
  if (atoll_strategies_load(&r->strategies, &io, step, err)) goto done;
  *start_step = step;
  rc = 0;
done:
  atoll_mem_free(wp);
  atoll_mem_free(wm);
  atoll_mem_free(wv);
  atoll_mem_free(pm);
  atoll_mem_free(pv);
  atoll_mem_free(px);
  cJSON_Delete(state);
  return rc;
}
