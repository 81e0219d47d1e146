/* Tests for src/ckpt's checkpoint directories: atomic save and load, shape
 * mismatches, replace, a failed or killed save, state.json errors, find_latest and
 * prune. Layouts are built by hand (tests/ckpt_fixture.h), so that these tests do not
 * depend on src/model/layout.c, except test_ckpt_real_layout, which checks the two
 * against each other. The safetensors format itself is test_safetensors.c; run
 * directories test_run_dir.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "check.h"
#include "ckpt/checkpoint.h"
#include "ckpt/safetensors.h"
#include "ckpt_fixture.h"
#include "model/layout.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ checkpoints --- */

static void test_ckpt_roundtrip(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs a = bufs_new(tl.lay.nparams), b = bufs_new(tl.lay.nparams);
  bufs_random(&a);
  char root[512], dir[512];
  path_in(root, sizeof root, "run/checkpoints"); /* parent does not exist yet */
  atoll_ckpt_dirname(root, 42, dir, sizeof dir);
  CHECK(contains(dir, "run/checkpoints/step_00000042"));
  cJSON *state = make_state(42);
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, a.p, a.m, a.v, state, &err), &err);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, b.p, b.m, b.v, &err), &err);
  CHECK(bufs_equal(&a, &b));

  cJSON *got = NULL;
  CHECK_OK(atoll_ckpt_read_state(dir, &got, &err), &err);
  CHECK(got && cJSON_GetObjectItem(got, "step")->valuedouble == 42);
  CHECK(got && cJSON_IsString(cJSON_GetObjectItem(got, "rng")));
  CHECK(got && cJSON_Compare(cJSON_GetObjectItem(got, "config"),
                             cJSON_GetObjectItem(state, "config"), 1));
  CHECK(got && strcmp(cJSON_GetObjectItem(got, "format")->valuestring, "atoll-checkpoint") == 0);
  CHECK(got && cJSON_GetObjectItem(got, "version")->valuedouble == ATOLL_CKPT_VERSION);
  cJSON_Delete(got);

  /* model.safetensors carries the config as a string and the format tag. */
  char path[1024];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  cJSON *meta = NULL;
  CHECK_OK(atoll_st_read(path, &tl.lay, "", b.p, &meta, &err), &err);
  const cJSON *fmt = cJSON_GetObjectItem(meta, "format"), *cfg = cJSON_GetObjectItem(meta, "config");
  CHECK(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "atoll") == 0);
  cJSON *cfgj = cJSON_IsString(cfg) ? cJSON_Parse(cfg->valuestring) : NULL;
  CHECK(cfgj && cJSON_Compare(cfgj, cJSON_GetObjectItem(state, "config"), 1));
  cJSON_Delete(cfgj);
  cJSON_Delete(meta);
  /* The optimizer file names its tensors exp_avg.* / exp_avg_sq.*. */
  snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
  atoll_st_read_buffer parts[2] = {{"exp_avg.", b.m}, {"exp_avg_sq.", b.v}};
  CHECK_OK(atoll_st_read_buffers(path, &tl.lay, parts, 2, NULL, &err), &err);

  /* Weights only. */
  memset(b.p, 0, b.n * 4);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, b.p, NULL, NULL, &err), &err);
  CHECK(memcmp(a.p, b.p, b.n * 4) == 0);
  CHECK(atoll_ckpt_load(dir, &tl.lay, b.p, b.m, NULL, &err) != 0);

  /* A checkpoint saved without moments loads weights only. */
  char dir2[512];
  atoll_ckpt_dirname(root, 43, dir2, sizeof dir2);
  cJSON_SetNumberValue(cJSON_GetObjectItem(state, "step"), 43);
  CHECK_OK(atoll_ckpt_save(dir2, &tl.lay, a.p, NULL, NULL, state, &err), &err);
  CHECK_OK(atoll_ckpt_load(dir2, &tl.lay, b.p, NULL, NULL, &err), &err);
  CHECK(atoll_ckpt_load(dir2, &tl.lay, b.p, b.m, b.v, &err) != 0);
  CHECK_MSG(err, "no optimizer state");

  /* No temporary directories are left behind. */
  CHECK(!has_hidden(root));
  cJSON_Delete(state);
  bufs_free(&a), bufs_free(&b);
}

/* A checkpoint for another model shape fails naming the tensor and both shapes. */
static void test_ckpt_shape_mismatch(void) {
  test_layout tl, other;
  layout4(&tl);
  layout4(&other);
  other.t[2].shape[1] = 12; /* h.0.attn.qkv.weight [3, 11] -> [3, 12] */
  other.t[2].numel = 36;
  for (int i = 3; i < other.lay.ntensors; i++) other.t[i].offset += 3;
  other.lay.nparams += 3;
  atoll_err err = {{0}};
  bufs a = bufs_new(tl.lay.nparams), b = bufs_new(other.lay.nparams);
  bufs_random(&a);
  char dir[512];
  path_in(dir, sizeof dir, "shape/ckpt");
  cJSON *state = make_state(1);
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, a.p, a.m, a.v, state, &err), &err);
  CHECK(atoll_ckpt_load(dir, &other.lay, b.p, b.m, b.v, &err) != 0);
  char want[1024];
  snprintf(want, sizeof want,
           "%s/model.safetensors: tensor h.0.attn.qkv.weight has shape [3, 11], expected [3, 12]",
           dir);
  CHECK(strcmp(err.msg, want) == 0);
  if (strcmp(err.msg, want) != 0) fprintf(stderr, "  got: %s\n  want: %s\n", err.msg, want);
  /* Fewer tensors in the model: the first one not present is named. */
  test_layout more;
  layout4(&more);
  add_tensor(&more, "h.1.ln_1.bias", 1, 13, 0);
  bufs c = bufs_new(more.lay.nparams);
  CHECK(atoll_ckpt_load(dir, &more.lay, c.p, c.m, c.v, &err) != 0);
  CHECK_MSG(err, "tensor h.1.ln_1.bias is missing");
  cJSON_Delete(state);
  bufs_free(&a), bufs_free(&b), bufs_free(&c);
}

static void save_replace_case(int exchange) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs a = bufs_new(tl.lay.nparams), b = bufs_new(tl.lay.nparams), c = bufs_new(tl.lay.nparams);
  bufs_random(&a);
  bufs_random(&b);
  char parent[512], dir[600];
  snprintf(parent, sizeof parent, "%s/replace%d", g_tmp, exchange);
  snprintf(dir, sizeof dir, "%s/ckpt/", parent); /* trailing slash is fine */
  atoll_ckpt_set_exchange(exchange);
  cJSON *s1 = make_state(10), *s2 = make_state(11);
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, a.p, a.m, a.v, s1, &err), &err);
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, s2, &err), &err);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err);
  CHECK(bufs_equal(&b, &c));
  cJSON *got = NULL;
  CHECK_OK(atoll_ckpt_read_state(dir, &got, &err), &err);
  CHECK(got && cJSON_GetObjectItem(got, "step")->valuedouble == 11);
  cJSON_Delete(got);
  CHECK(!has_hidden(parent));
  atoll_ckpt_set_exchange(1);
  cJSON_Delete(s1), cJSON_Delete(s2);
  bufs_free(&a), bufs_free(&b), bufs_free(&c);
}

static void test_ckpt_replace(void) {
  save_replace_case(1);
  save_replace_case(0);
}

/* A save that fails leaves the existing checkpoint as it was, and no temp dir. */
static void test_ckpt_failed_save(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs a = bufs_new(tl.lay.nparams), b = bufs_new(tl.lay.nparams), c = bufs_new(tl.lay.nparams);
  bufs_random(&a);
  bufs_random(&b);
  char parent[512], dir[512];
  path_in(parent, sizeof parent, "failsave");
  path_in(dir, sizeof dir, "failsave/ckpt");
  cJSON *s1 = make_state(5), *s2 = make_state(6);
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, a.p, a.m, a.v, s1, &err), &err);

  /* 1: NaN in the second moment (model.safetensors is already written in the temp
   * dir when optimizer.safetensors fails). */
  b.v[7] = NAN;
  CHECK(atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, s2, &err) != 0);
  CHECK_MSG(err, "exp_avg_sq.wte");
  b.v[7] = 1;
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err);
  CHECK(bufs_equal(&a, &c));
  CHECK(!has_hidden(parent));

  /* 2: a real write error: the file size limit makes fwrite/fflush fail. */
  struct rlimit old, small;
  getrlimit(RLIMIT_FSIZE, &old);
  small = old;
  small.rlim_cur = 600; /* bytes: model.safetensors (~1 KB) cannot be written */
  signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &small) == 0) {
    int rc = atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, s2, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(rc != 0);
    CHECK_MSG(err, "write failed");
    CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err);
    CHECK(bufs_equal(&a, &c));
    CHECK(!has_hidden(parent));
  } else {
    printf("note: cannot lower RLIMIT_FSIZE; skipping the write-error case\n");
  }
  signal(SIGXFSZ, SIG_DFL);

  /* 3: bad state (no step) fails before touching anything. */
  cJSON *nostep = cJSON_CreateObject();
  CHECK(atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, nostep, &err) != 0);
  CHECK_MSG(err, "step");
  cJSON_Delete(nostep);

  /* 4: a non-empty directory that is not a checkpoint is never replaced. */
  char other[512], file[600];
  path_in(other, sizeof other, "failsave/notackpt");
  mkdir(other, 0755);
  snprintf(file, sizeof file, "%s/precious.txt", other);
  write_bytes(file, "x", 1);
  CHECK(atoll_ckpt_save(other, &tl.lay, b.p, b.m, b.v, s2, &err) != 0);
  CHECK_MSG(err, "not a checkpoint");
  CHECK(exists(file));
  CHECK(!has_hidden(parent));
  cJSON_Delete(s1), cJSON_Delete(s2);
  bufs_free(&a), bufs_free(&b), bufs_free(&c);
}

/* kill -9 a process that keeps re-saving one checkpoint: afterwards the directory
 * always loads, and holds one of the two states in full. */
static void test_ckpt_kill(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs x[2] = {bufs_new(tl.lay.nparams), bufs_new(tl.lay.nparams)};
  bufs c = bufs_new(tl.lay.nparams);
  bufs_random(&x[0]);
  bufs_random(&x[1]);
  char parent[512], dir[512];
  path_in(parent, sizeof parent, "kill");
  path_in(dir, sizeof dir, "kill/step_00000001");
  cJSON *st[2] = {make_state(100), make_state(200)};
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, x[0].p, x[0].m, x[0].v, st[0], &err), &err);
  int bad = 0, rounds = 25;
  for (int r = 0; r < rounds; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int k = 1;; k++) atoll_ckpt_save(dir, &tl.lay, x[k & 1].p, x[k & 1].m, x[k & 1].v, st[k & 1], NULL);
    }
    struct timespec ts = {0, 200000L + 397000L * r};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cJSON *s = NULL;
    if (atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err) != 0 ||
        atoll_ckpt_read_state(dir, &s, &err) != 0) {
      fprintf(stderr, "round %d: %s\n", r, err.msg);
      bad++;
      continue;
    }
    int which = (int)cJSON_GetObjectItem(s, "step")->valuedouble == 200;
    if (!bufs_equal(&c, &x[which])) bad++;
    cJSON_Delete(s);
  }
  CHECK(bad == 0);
  /* Leftovers of the killed processes are cleaned up by prune. */
  CHECK_OK(atoll_ckpt_prune(parent, 1, &err), &err);
  CHECK(!has_hidden(parent));
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err);
  cJSON_Delete(st[0]), cJSON_Delete(st[1]);
  bufs_free(&x[0]), bufs_free(&x[1]), bufs_free(&c);
}

static void test_ckpt_state_errors(void) {
  atoll_err err = {{0}};
  cJSON *s = NULL;
  char dir[512], want[1024];
  path_in(dir, sizeof dir, "states/missing");
  CHECK(atoll_ckpt_read_state(dir, &s, &err) != 0);
  CHECK_MSG(err, "no such checkpoint directory");
  path_in(dir, sizeof dir, "states");
  mkdir(dir, 0755);
  CHECK(atoll_ckpt_read_state(dir, &s, &err) != 0);
  snprintf(want, sizeof want, "%s: not a checkpoint (no state.json)", dir);
  CHECK(strcmp(err.msg, want) == 0);
  struct {
    const char *text, *keyword;
  } cases[] = {
      {"{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": ", "invalid JSON"},
      {"[]", "not a JSON object"},
      {"{\"format\": \"other\", \"version\": 1, \"step\": 3}", "not an atoll checkpoint"},
      {"{\"version\": 1, \"step\": 3}", "not an atoll checkpoint"},
      {"{\"format\": \"atoll-checkpoint\", \"version\": 3, \"step\": 3}", "unsupported version 3"},
      {"{\"format\": \"atoll-checkpoint\", \"version\": 0, \"step\": 3}", "unsupported version 0"},
      {"{\"format\": \"atoll-checkpoint\", \"step\": 3}", "version"},
      {"{\"format\": \"atoll-checkpoint\", \"version\": 1}", "missing \"step\""},
      {"{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": -1}", "integer >= 0"},
      {"{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 2.5}", "integer >= 0"},
      {"{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 3}\n{\"step\": 9}", "unexpected content after"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char sub[600];
    snprintf(sub, sizeof sub, "%s/c%zu", dir, i);
    write_state_file(sub, cases[i].text);
    s = NULL;
    int rc = atoll_ckpt_read_state(sub, &s, &err);
    if (rc == 0 || !contains(err.msg, sub) || !contains(err.msg, cases[i].keyword)) {
      fprintf(stderr, "%s:%d: state case %zu: rc %d, message \"%s\"\n", __FILE__, __LINE__, i, rc,
              err.msg);
      check_failures++;
    }
    CHECK(s == NULL);
  }
  char sub[600];
  snprintf(sub, sizeof sub, "%s/good", dir);
  write_state_file(sub, "{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 0}");
  CHECK_OK(atoll_ckpt_read_state(sub, &s, &err), &err);
  cJSON_Delete(s);
  /* state.json alone is not loadable: the weights are missing. */
  test_layout tl;
  layout4(&tl);
  float *p = malloc(tl.lay.nparams * 4);
  CHECK(atoll_ckpt_load(sub, &tl.lay, p, NULL, NULL, &err) != 0);
  CHECK_MSG(err, "model.safetensors");
  free(p);
}

static void test_ckpt_find_prune(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs b = bufs_new(tl.lay.nparams), c = bufs_new(tl.lay.nparams);
  bufs_random(&b);
  char root[512], out[1024], want[1024], junk[1024];
  path_in(root, sizeof root, "find");
  CHECK(atoll_ckpt_find_latest(root, out, sizeof out, &err) != 0);
  CHECK_MSG(err, root);
  mkdir(root, 0755);
  CHECK(atoll_ckpt_find_latest(root, out, sizeof out, &err) != 0);
  CHECK_MSG(err, "no checkpoint found");

  save_step(root, 5, &tl, &b);
  save_step(root, 20, &tl, &b);
  save_step(root, 10, &tl, &b);
  save_step(root, 15, &tl, &b);
  /* Things that are not complete checkpoints, with higher numbers. */
  snprintf(junk, sizeof junk, "%s/step_00000030", root); /* no state.json */
  mkdir(junk, 0755);
  snprintf(junk, sizeof junk, "%s/.tmp-step_00000040-999999999", root); /* killed save */
  write_state_file(junk, "{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 40}");
  snprintf(junk, sizeof junk, "%s/.old-step_00000050-1", root); /* pid 1 is alive */
  write_state_file(junk, "{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 50}");
  snprintf(junk, sizeof junk, "%s/step_0000060", root); /* 7 digits */
  write_state_file(junk, "{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 60}");
  snprintf(junk, sizeof junk, "%s/step_0000007x", root);
  write_state_file(junk, "{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 70}");

  CHECK_OK(atoll_ckpt_find_latest(root, out, sizeof out, &err), &err);
  snprintf(want, sizeof want, "%s/step_00000020", root);
  CHECK(strcmp(out, want) == 0);
  CHECK_OK(atoll_ckpt_load(out, &tl.lay, c.p, c.m, c.v, &err), &err);
  CHECK(bufs_equal(&b, &c));
  /* A checkpoint directory given directly is its own latest. */
  CHECK_OK(atoll_ckpt_find_latest(want, out, sizeof out, &err), &err);
  CHECK(strcmp(out, want) == 0);
  /* Too small an output buffer is an error, not a truncated path. */
  char tiny[8];
  CHECK(atoll_ckpt_find_latest(root, tiny, sizeof tiny, &err) != 0);

  CHECK(atoll_ckpt_prune(root, 0, &err) != 0);
  CHECK_OK(atoll_ckpt_prune(root, 2, &err), &err);
  char p[1024];
  int steps[] = {5, 10, 15, 20}, kept[] = {0, 0, 1, 1};
  for (int i = 0; i < 4; i++) {
    atoll_ckpt_dirname(root, steps[i], p, sizeof p);
    CHECK(exists(p) == kept[i]);
  }
  snprintf(p, sizeof p, "%s/.tmp-step_00000040-999999999", root);
  CHECK(!exists(p)); /* its process is gone */
  snprintf(p, sizeof p, "%s/.old-step_00000050-1", root);
  CHECK(exists(p)); /* its process may still be saving */
  snprintf(p, sizeof p, "%s/step_00000030", root);
  CHECK(exists(p)); /* not a checkpoint: not ours to delete */
  CHECK_OK(atoll_ckpt_prune(root, 1, &err), &err);
  atoll_ckpt_dirname(root, 15, p, sizeof p);
  CHECK(!exists(p));
  CHECK_OK(atoll_ckpt_find_latest(root, out, sizeof out, &err), &err);
  CHECK(strcmp(out, want) == 0);
  /* Pruning a missing root is fine. */
  path_in(p, sizeof p, "find/none");
  CHECK_OK(atoll_ckpt_prune(p, 3, &err), &err);
  bufs_free(&b), bufs_free(&c);
}

/* With the model's real layout (src/model/layout.c): round trip, and the messages a
 * checkpoint of another shape gets. */
static void test_ckpt_real_layout(void) {
  atoll_shape s2 = {.layers = 2, .heads = 2, .dim = 16, .context = 8, .vocab = 32};
  atoll_shape wide = s2, deep = s2;
  wide.dim = 32;
  deep.layers = 3;
  atoll_layout lay, lwide, ldeep;
  atoll_err err = {{0}};
  if (atoll_layout_init(&lay, &s2, &err) != 0 || atoll_layout_init(&lwide, &wide, &err) != 0 ||
      atoll_layout_init(&ldeep, &deep, &err) != 0) {
    fprintf(stderr, "%s:%d: atoll_layout_init failed: %s\n", __FILE__, __LINE__, err.msg);
    check_failures++;
    return;
  }
  CHECK_OK(atoll_st_layout_check(&lay, "layout", &err), &err);
  bufs a = bufs_new(lay.nparams), b = bufs_new(lay.nparams), w = bufs_new(lwide.nparams),
       d = bufs_new(ldeep.nparams);
  bufs_random(&a);
  bufs_random(&d);
  char dir[512], deepdir[512], want[1024];
  path_in(dir, sizeof dir, "real/step_00000007");
  path_in(deepdir, sizeof deepdir, "real/deep");
  cJSON *state = make_state(7);
  CHECK_OK(atoll_ckpt_save(dir, &lay, a.p, a.m, a.v, state, &err), &err);
  CHECK_OK(atoll_ckpt_load(dir, &lay, b.p, b.m, b.v, &err), &err);
  CHECK(bufs_equal(&a, &b));
  CHECK(atoll_ckpt_load(dir, &lwide, w.p, w.m, w.v, &err) != 0);
  snprintf(want, sizeof want, "%s/model.safetensors: tensor %s has shape [32, 16], expected [32, 32]",
           dir, lay.tensors[0].name);
  CHECK(strcmp(err.msg, want) == 0);
  if (strcmp(err.msg, want) != 0) fprintf(stderr, "  got: %s\n  want: %s\n", err.msg, want);
  CHECK(atoll_ckpt_load(dir, &ldeep, d.p, d.m, d.v, &err) != 0);
  CHECK_MSG(err, "tensor h.2.");
  CHECK_MSG(err, "is missing");
  CHECK_OK(atoll_ckpt_save(deepdir, &ldeep, d.p, d.m, d.v, state, &err), &err);
  CHECK(atoll_ckpt_load(deepdir, &lay, b.p, b.m, b.v, &err) != 0);
  CHECK_MSG(err, "extra tensor h.2.");
  cJSON_Delete(state);
  bufs_free(&a), bufs_free(&b), bufs_free(&w), bufs_free(&d);
  atoll_layout_free(&lay), atoll_layout_free(&lwide), atoll_layout_free(&ldeep);
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/atoll_test_ckpt_XXXXXX");
  if (!mkdtemp(g_tmp)) {
    perror("mkdtemp");
    return 1;
  }
  test_ckpt_roundtrip();
  test_ckpt_shape_mismatch();
  test_ckpt_replace();
  test_ckpt_failed_save();
  test_ckpt_kill();
  test_ckpt_state_errors();
  test_ckpt_find_prune();
  test_ckpt_real_layout();
  rm_rf(g_tmp);
  CHECK_DONE();
}
