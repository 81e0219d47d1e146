/* A library user's whole path through the public header alone (include/atoll/atoll.h):
 * prepare text, configure, train, find the checkpoint, sample from it. atoll_train_run
 * takes no test hooks (they stay internal, src/core/hooks.h): its type is checked below,
 * and the name atoll_test_hooks is free here (declaring it would clash with a public
 * declaration). Nothing here may need an internal header. Also: a long error message keeps
 * its reason, and each section of atoll_config holds the keys it names (the flags and
 * JSON keys are the same as before the sections). */
#include "atoll/atoll.h"

#include "check.h"

#include <stdlib.h>
#include <string.h>

/* The public entry has exactly this type: no hooks parameter. */
_Static_assert(_Generic(&atoll_train_run,
                        int (*)(const atoll_config *, atoll_comm *, const char *, const volatile sig_atomic_t *,
                                atoll_err *): 1,
                        default: 0),
               "atoll_train_run has the hook-free public signature");
/* The test hooks' type is not part of the public header. */
typedef int atoll_test_hooks;

static int set(atoll_config *c, const char *key, const char *value) {
  atoll_err err = {{0}};
  if (atoll_config_set(c, key, value, &err)) {
    fprintf(stderr, "atoll_config_set %s: %s\n", key, err.msg);
    return -1;
  }
  return 0;
}

/* An error message longer than atoll_err holds (a 1500-byte path) keeps its reason:
 * the path is cut in the middle, its start and end kept, not the message's end. */
static void test_long_message(void) {
  char path[1600] = "/start";
  while (strlen(path) < 1500) strcat(path, "/nested_directory");
  strcat(path, "/state.json");
  atoll_err err = {{0}};
  CHECK(atoll_fail(&err, "%s: cannot open: %s", path, "No such file or directory") == -1);
  size_t n = strlen(err.msg);
  const char *reason = ": cannot open: No such file or directory";
  CHECK(n < sizeof err.msg && n > sizeof err.msg - 8); /* the path keeps what room there is */
  CHECK(n > strlen(reason) && strcmp(err.msg + n - strlen(reason), reason) == 0);
  CHECK(strncmp(err.msg, "/start/nested_directory", 23) == 0 && strstr(err.msg, "...") != NULL);
  CHECK(strstr(err.msg, "/nested_directory/state.json:") != NULL);
  /* a message made from its own previous text, as callers that add context do */
  CHECK(atoll_fail(&err, "resume: %s", err.msg) == -1);
  CHECK(strncmp(err.msg, "resume: ", 8) == 0 && strstr(err.msg, reason) != NULL);
  /* short messages are untouched */
  atoll_fail(&err, "%s: %d", "a b", 7);
  CHECK(strcmp(err.msg, "a b: 7") == 0);
}

/* One key of each kind per section, by flag and by JSON (underscores allowed there),
 * lands in the section's field; the flag and JSON spellings are unchanged. */
static void test_sections(void) {
  atoll_config c;
  atoll_config_defaults(&c);
  const char *kv[][2] = {{"optimizer", "sgd"},  {"lr", "0.25"},          {"data", "d"},        {"eval-data", "v=w"},
                         {"batch", "3"},        {"global-batch", "12"},  {"steps", "9"},       {"seed", "77"},
                         {"out", "o"},          {"move-newer", "m"},     {"stop-after", "5"},  {"parallel", "ddp"},
                         {"zero", "2"},         {"tp", "2"},             {"grad-dtype", "bf16"}, {"islands", "4"},
                         {"island-data", "files"}, {"island-key", "k"},  {"island-listen", "tcp://a:1"},
                         {"island-id", "3"},    {"device", "shadow"},    {"precision", "bf16"}, {"init-from", "i"},
                         {"init-optim", "1"},   {"init-from-hf", "h"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) CHECK(set(&c, kv[i][0], kv[i][1]) == 0);
  CHECK(strcmp(c.optim.name, "sgd") == 0 && c.optim.adamw.lr == 0.25f);
  CHECK(strcmp(c.data.dir, "d") == 0 && strcmp(c.data.eval_sets, "v=w") == 0);
  CHECK(c.data.batch == 3 && c.data.global_batch == 12);
  CHECK(c.run.steps == 9 && c.run.seed == 77 && strcmp(c.run.out, "o") == 0);
  CHECK(strcmp(c.run.move_newer, "m") == 0 && c.run.stop_after == 5);
  CHECK(strcmp(c.parallel.mode, "ddp") == 0 && c.parallel.zero_stage == 2 && c.parallel.tp == 2);
  CHECK(strcmp(c.parallel.grad_dtype, "bf16") == 0);
  CHECK(c.islands.count == 4 && strcmp(c.islands.data, "files") == 0 && strcmp(c.islands.key, "k") == 0);
  CHECK(strcmp(c.islands.listen, "tcp://a:1") == 0 && c.islands.id == 3);
  CHECK(strcmp(c.device.type, "shadow") == 0 && strcmp(c.device.precision, "bf16") == 0);
  CHECK(strcmp(c.init.from, "i") == 0 && c.init.optim == 1 && strcmp(c.init.from_hf, "h") == 0);
  const char *json = "{\"sync_every\": 6, \"outer-dtype\": \"int8\", \"net_timeout\": 2.5, \"keep\": 2, "
                     "\"sequence_parallel\": 1, \"peak-tflops\": 3, \"kv_heads\": 1}";
  atoll_err err = {{0}};
  CHECK(atoll_config_apply_text(&c, json, strlen(json), "sections.json", &err) == 0);
  CHECK(c.islands.sync_every == 6 && strcmp(c.islands.outer_dtype, "int8") == 0 && c.islands.net_timeout == 2.5f);
  CHECK(c.run.keep == 2 && c.parallel.sequence_parallel == 1 && c.device.peak_tflops == 3.0f && c.model.kv_heads == 1);
  /* nothing else moved: the keys not given keep their defaults */
  CHECK(c.data.seq == 0 && c.data.accum == 1 && c.parallel.pp == 1 && strcmp(c.parallel.schedule, "1f1b") == 0);
  CHECK(c.islands.net_streams == 4 && strcmp(c.islands.outer_optimizer, "nesterov") == 0 && c.init.step == 0);
}

int main(void) {
  test_long_message();
  test_sections();
  char dir[] = "/tmp/atoll_api_XXXXXX", text[256], data[256], out[256], latest[512];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(text, sizeof text, "%s/text.txt", dir);
  snprintf(data, sizeof data, "%s/data", dir);
  snprintf(out, sizeof out, "%s/run", dir);
  FILE *f = fopen(text, "w");
  CHECK(f != NULL);
  if (!f) return 1;
  for (int i = 0; i < 400; i++) fprintf(f, "line %d: the quick brown fox jumps over the lazy dog.\n", i);
  fclose(f);

  atoll_err err = {{0}};
  const char *files[] = {text};
  CHECK(atoll_prepare(files, 1, data, 0.1, &err) == 0);

  atoll_config c;
  atoll_config_defaults(&c);
  const char *kv[][2] = {{"layers", "1"}, {"heads", "2"}, {"dim", "32"},  {"context", "32"}, {"batch", "4"},
                         {"steps", "3"},  {"warmup", "1"}, {"eval-batches", "1"}, {"threads", "1"},
                         {"data", data},  {"out", out}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) CHECK(set(&c, kv[i][0], kv[i][1]) == 0);
  CHECK(atoll_config_check(&c, &err) == 0);

  atoll_comm *world = NULL;
  CHECK(atoll_comm_init(&world, NULL, NULL, &err) == 0);
  int rc = atoll_train_run(&c, world, NULL, NULL, &err);
  if (rc) fprintf(stderr, "atoll_train_run: %s\n", err.msg);
  CHECK(rc == 0);

  char root[300];
  snprintf(root, sizeof root, "%s/checkpoints", out);
  CHECK(atoll_ckpt_find_latest(root, latest, sizeof latest, &err) == 0);
  CHECK(strstr(latest, "step_00000003") != NULL);

  FILE *gen = tmpfile();
  atoll_sample_opts o = {.ckpt = out, .prompt = "line ", .tokens = 20, .temperature = 0.8f, .top_k = 10, .seed = 1};
  int sampled = gen ? atoll_sample(&o, gen, &err) : -1;
  if (sampled) fprintf(stderr, "atoll_sample: %s\n", err.msg);
  CHECK(sampled == 0);
  CHECK(gen && ftell(gen) >= 25); /* the prompt and 20 generated bytes */
  if (gen) fclose(gen);

  atoll_comm_free(world);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  return check_failures;
}
