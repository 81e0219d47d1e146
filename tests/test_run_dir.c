/* Tests for what keeps a run directory whole (issue 12): the run directory's lock,
 * pruning that a kill cannot turn into orphans, protect_step, cleaning at start,
 * checkpoints newer than a resumed step, per-file hashes (required from version 2),
 * weights_hash and non-negative second moments checked at load, and the
 * atomic whole-file writer; the exact size limit of the whole-file reader and a parent
 * directory sync whose failure is reported; the TensorBoard event file's CRC-32C against
 * its check value, its first record's framing, a second file sorting after the first,
 * and a failed write reported (tests/cli/test_tensorboard.sh reads whole files back with
 * TensorBoard's reader). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "check.h"
#include "ckpt/checkpoint.h"
#include "ckpt/run_dir.h"
#include "ckpt_fixture.h"
#include "core/fs.h"
#include "core/rng.h"
#include "train/tb_events.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ----------------------------------------------------------------- lock --- */

/* A child holds the lock: the parent's attempt fails naming the directory and the
 * child's pid; once the child is dead (SIGKILL: no unlock) the lock can be taken. */
static void test_lock(void) {
  char dir[512];
  atoll_err err = {{0}};
  path_in(dir, sizeof dir, "locked/out"); /* created by the lock */
  int ready[2], hold[2];
  CHECK(pipe(ready) == 0 && pipe(hold) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    int fd;
    char c = atoll_run_dir_lock(dir, &fd, NULL) == 0 ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    (void)!read(hold[0], &c, 1); /* until the parent kills us */
    _exit(0);
  }
  char c = 0;
  CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
  int fd = -1;
  CHECK(atoll_run_dir_lock(dir, &fd, &err) != 0);
  CHECK(fd == -1);
  char want[1024];
  snprintf(want, sizeof want,
           "--out %s: another atoll run (pid %ld) is using it; wait for it to end or choose "
           "another --out", dir, (long)pid);
  if (strcmp(err.msg, want) != 0) {
    fprintf(stderr, "%s:%d: lock message \"%s\", expected \"%s\"\n", __FILE__, __LINE__, err.msg, want);
    check_failures++;
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  CHECK_OK(atoll_run_dir_lock(dir, &fd, &err), &err);
  CHECK(fd >= 0);
  /* Held by this process now: another attempt (another open file) fails too. */
  int fd2 = -1;
  CHECK(atoll_run_dir_lock(dir, &fd2, &err) != 0);
  CHECK_MSG(err, "is using it");
  atoll_run_dir_unlock(fd);
  CHECK_OK(atoll_run_dir_lock(dir, &fd2, &err), &err);
  atoll_run_dir_unlock(fd2);
  /* A --out that cannot be a directory is an error naming it. */
  char file[512], under[600];
  path_in(file, sizeof file, "locked/plain");
  write_bytes(file, "x", 1);
  snprintf(under, sizeof under, "%s/out", file);
  CHECK(atoll_run_dir_lock(under, &fd, &err) != 0);
  CHECK_MSG(err, "--out ");
  CHECK_MSG(err, file);
  close(ready[0]), close(ready[1]), close(hold[0]), close(hold[1]);
}

/* ---------------------------------------------------------------- prune --- */

/* A fake checkpoint: state.json among many small files, so that deleting it takes
 * long enough for a kill to land inside. */
static void fake_checkpoint(const char *root, int step) {
  char dir[512], path[1024];
  atoll_ckpt_dirname(root, step, dir, sizeof dir);
  mkdir(root, 0755);
  write_state_file(dir, "{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 1}");
  for (int i = 0; i < 150; i++) {
    snprintf(path, sizeof path, "%s/f%03d", dir, i);
    write_bytes(path, "x", 1);
  }
}

/* step_* directories under root that lack state.json. */
static int orphans(const char *root) {
  DIR *d = opendir(root);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/state.json", root, e->d_name);
    if (strncmp(e->d_name, "step_", 5) == 0 && !exists(path)) n++;
  }
  if (d) closedir(d);
  return n;
}

/* kill -9 during a prune never leaves a step_* directory without state.json (before
 * the fix, deleting in place left such orphans, never cleaned up); what it leaves is
 * hidden, and the next prune or clean removes it. */
static void test_prune_kill(void) {
  char root[512];
  atoll_err err = {{0}};
  path_in(root, sizeof root, "prunekill");
  int found = 0, rounds = 20;
  for (int r = 0; r < rounds; r++) {
    for (int s = 1; s <= 4; s++) fake_checkpoint(root, s);
    pid_t pid = fork();
    if (pid == 0) _exit(atoll_ckpt_prune(root, 1, NULL) == 0 ? 0 : 1);
    struct timespec ts = {0, 50000L + 60000L * r};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    found += orphans(root);
    CHECK_OK(atoll_ckpt_prune(root, 1, &err), &err); /* the killed pid is gone */
    CHECK(!has_hidden(root));
  }
  if (found) fprintf(stderr, "%s:%d: %d orphan step directories after %d kills\n", __FILE__, __LINE__, found, rounds);
  CHECK(found == 0);
  rm_rf(root);
}

/* Resuming an older checkpoint into a root with newer ones: the checkpoint just
 * saved survives pruning whatever its rank. */
static void test_prune_protect(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs b = bufs_new(tl.lay.nparams);
  bufs_random(&b);
  char root[512], p[1024];
  path_in(root, sizeof root, "protect");
  save_step(root, 100, &tl, &b);
  save_step(root, 200, &tl, &b);
  save_step(root, 150, &tl, &b);
  CHECK_OK(atoll_ckpt_prune_ex(root, 1, 150, &err), &err);
  int steps[] = {100, 150, 200}, kept[] = {0, 1, 1};
  for (int i = 0; i < 3; i++) {
    atoll_ckpt_dirname(root, steps[i], p, sizeof p);
    CHECK(exists(p) == kept[i]);
  }
  /* Without protection the newest alone is kept (the old behaviour). */
  CHECK_OK(atoll_ckpt_prune(root, 1, &err), &err);
  atoll_ckpt_dirname(root, 150, p, sizeof p);
  CHECK(!exists(p));
  CHECK(atoll_ckpt_prune_ex(root, 0, 150, &err) != 0);
  bufs_free(&b);
}

/* Clean at start: a published checkpoint left only as a hidden .old- copy comes back,
 * every other leftover goes (unpublished .tmp- saves too), whatever its pid (pid 1 is alive: prune would keep those). */
static void test_clean(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs b = bufs_new(tl.lay.nparams), c = bufs_new(tl.lay.nparams);
  bufs_random(&b);
  char root[512], from[1024], p[1024];
  path_in(root, sizeof root, "clean");
  CHECK_OK(atoll_ckpt_clean(root, &err), &err); /* missing root */
  save_step(root, 7, &tl, &b);
  save_step(root, 8, &tl, &b);
  /* step 8 killed between the fallback's two renames: only .old- remains. */
  atoll_ckpt_dirname(root, 8, p, sizeof p);
  snprintf(from, sizeof from, "%s/.old-step_00000008-1", root);
  CHECK(rename(p, from) == 0);
  /* step 10's save complete but killed before its rename: never published, so it goes */
  save_step(root, 10, &tl, &b);
  atoll_ckpt_dirname(root, 10, p, sizeof p);
  snprintf(from, sizeof from, "%s/.tmp-step_00000010-1", root);
  CHECK(rename(p, from) == 0);
  snprintf(p, sizeof p, "%s/.tmp-step_00000009-1", root); /* incomplete save */
  write_state_file(p, "{\"format\": \"atoll-checkpoint\", \"version\": 1, \"step\": 9}");
  snprintf(p, sizeof p, "%s/.doomed-step_00000003-1/x", root); /* killed prune */
  CHECK_OK(atoll_mkdir_p(p, &err), &err);
  snprintf(p, sizeof p, "%s/step_00000005", root); /* partial delete, old style */
  mkdir(p, 0755);
  CHECK_OK(atoll_ckpt_prune(root, 5, &err), &err);
  CHECK(has_hidden(root)); /* their pid (1) is alive */
  CHECK_OK(atoll_ckpt_clean(root, &err), &err);
  CHECK(!has_hidden(root));
  CHECK(!exists(p));
  atoll_ckpt_dirname(root, 8, p, sizeof p);
  CHECK_OK(atoll_ckpt_load(p, &tl.lay, c.p, c.m, c.v, &err), &err);
  CHECK(bufs_equal(&b, &c));
  atoll_ckpt_dirname(root, 9, p, sizeof p);
  CHECK(!exists(p)); /* no weights: not a checkpoint to bring back */
  atoll_ckpt_dirname(root, 10, p, sizeof p);
  CHECK(!exists(p)); /* complete but unpublished */
  atoll_ckpt_dirname(root, 7, p, sizeof p);
  CHECK(exists(p));
  bufs_free(&b), bufs_free(&c);
}

/* ------------------------------------------------------ newer / aside --- */

static void test_newer_move_aside(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs b = bufs_new(tl.lay.nparams), c = bufs_new(tl.lay.nparams);
  bufs_random(&b);
  char root[512], dest[512], p[1024];
  int count = -5, newest = -5;
  path_in(root, sizeof root, "aside/checkpoints");
  path_in(dest, sizeof dest, "aside/later/run");
  CHECK_OK(atoll_ckpt_newer(root, 0, &count, &newest, &err), &err);
  CHECK(count == 0 && newest == -1);
  int steps[] = {10, 20, 30, 40};
  for (int i = 0; i < 4; i++) save_step(root, steps[i], &tl, &b);
  CHECK_OK(atoll_ckpt_newer(root, 20, &count, &newest, &err), &err);
  CHECK(count == 2 && newest == 40);
  CHECK_OK(atoll_ckpt_newer(root, -1, &count, &newest, &err), &err);
  CHECK(count == 4 && newest == 40);
  CHECK_OK(atoll_ckpt_newer(root, 40, &count, &newest, &err), &err);
  CHECK(count == 0 && newest == -1);

  CHECK_OK(atoll_ckpt_move_aside(root, 20, dest, &err), &err);
  CHECK_OK(atoll_ckpt_newer(root, 20, &count, &newest, &err), &err);
  CHECK(count == 0);
  for (int i = 0; i < 4; i++) {
    atoll_ckpt_dirname(root, steps[i], p, sizeof p);
    CHECK(exists(p) == (steps[i] <= 20));
    atoll_ckpt_dirname(dest, steps[i], p, sizeof p);
    CHECK(exists(p) == (steps[i] > 20));
  }
  atoll_ckpt_dirname(dest, 40, p, sizeof p);
  CHECK_OK(atoll_ckpt_load(p, &tl.lay, c.p, c.m, c.v, &err), &err);
  CHECK(bufs_equal(&b, &c));
  /* A destination that holds something is refused, naming it; nothing moves. */
  CHECK(atoll_ckpt_move_aside(root, 5, dest, &err) != 0);
  CHECK_MSG(err, dest);
  CHECK_MSG(err, "not empty");
  atoll_ckpt_dirname(root, 10, p, sizeof p);
  CHECK(exists(p));
  bufs_free(&b), bufs_free(&c);
}

/* --------------------------------------------------------------- hashes --- */

/* Flips one bit of the first tensor's data in dir/file (a low mantissa bit: the
 * value stays finite and plausible). */
static void flip_bit(const char *dir, const char *file) {
  char path[1024];
  size_t size = 0;
  snprintf(path, sizeof path, "%s/%s", dir, file);
  uint8_t *buf = read_all(path, &size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
  buf[8 + n] ^= 1;
  write_bytes(path, buf, size);
  free(buf);
}

/* Rewrites dir/state.json without "file_hashes": as written before them when version
 * is 1, else as edited. */
static void drop_hashes(const char *dir, int version) {
  char path[1024];
  size_t size = 0;
  snprintf(path, sizeof path, "%s/state.json", dir);
  char *text = (char *)read_all(path, &size);
  text[size] = 0;
  cJSON *s = cJSON_Parse(text);
  cJSON_DeleteItemFromObject(s, "file_hashes");
  cJSON_ReplaceItemInObject(s, "version", cJSON_CreateNumber(version));
  char *out = cJSON_Print(s);
  write_bytes(path, out, strlen(out));
  cJSON_free(out), cJSON_Delete(s), free(text);
}

static void test_hashes(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs b = bufs_new(tl.lay.nparams), c = bufs_new(tl.lay.nparams);
  bufs_random(&b);
  char dir[512], want[1024];
  path_in(dir, sizeof dir, "hash/step_00000003");
  atoll_st_buffer outer[1] = {{"outer_momentum.", b.m}};
  atoll_ckpt_extra extra = {"outer.safetensors", outer, 1, NULL};
  cJSON *state = make_state(3);
  CHECK_OK(atoll_ckpt_save_ex(dir, &tl.lay, b.p, b.m, b.v, &extra, 1, state, &err), &err);
  cJSON *got = NULL;
  CHECK_OK(atoll_ckpt_read_state(dir, &got, &err), &err);
  const cJSON *h = cJSON_GetObjectItem(got, "file_hashes");
  const char *files[] = {"model.safetensors", "optimizer.safetensors", "outer.safetensors"};
  for (int i = 0; i < 3; i++) {
    const cJSON *v = cJSON_GetObjectItem(h, files[i]);
    CHECK(cJSON_IsString(v) && strlen(v->valuestring) == 16);
  }
  cJSON_Delete(got);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err); /* unchanged: loads */

  flip_bit(dir, "model.safetensors");
  CHECK(atoll_ckpt_load(dir, &tl.lay, c.p, NULL, NULL, &err) != 0);
  snprintf(want, sizeof want, "%s/model.safetensors: contents do not match the hash in "
           "state.json (the file was changed or damaged)", dir);
  CHECK(strcmp(err.msg, want) == 0);
  flip_bit(dir, "model.safetensors"); /* back as it was */
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err);

  flip_bit(dir, "optimizer.safetensors");
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, NULL, NULL, &err), &err); /* weights only */
  CHECK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err) != 0);
  CHECK_MSG(err, "optimizer.safetensors: contents do not match");
  flip_bit(dir, "optimizer.safetensors");

  atoll_st_read_buffer rd[1] = {{"outer_momentum.", c.m}};
  flip_bit(dir, "outer.safetensors");
  CHECK(atoll_ckpt_load_extra(dir, &tl.lay, "outer.safetensors", rd, 1, &err) != 0);
  CHECK_MSG(err, "outer.safetensors: contents do not match");
  flip_bit(dir, "outer.safetensors");
  CHECK_OK(atoll_ckpt_load_extra(dir, &tl.lay, "outer.safetensors", rd, 1, &err), &err);

  /* A checkpoint of version 2 always has the hashes: without them it is refused; one
   * of version 1, written before the hashes (no key), loads unchecked. */
  flip_bit(dir, "model.safetensors");
  drop_hashes(dir, 2);
  CHECK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err) != 0);
  CHECK_MSG(err, "model.safetensors: state.json has no \"file_hashes\"");
  drop_hashes(dir, 1);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err);
  /* A state carried over from a loaded checkpoint does not carry its hashes over. */
  cJSON_AddStringToObject(state, "file_hashes", "stale");
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, state, &err), &err);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err);
  cJSON_Delete(state);
  bufs_free(&b), bufs_free(&c);
}

/* state.json's weights_hash is checked against the weights loaded, where the run had
 * one whole model per rank (not under tp/pp, whose hash is of parts), and a negative
 * second moment is refused at load naming the file and tensor (it resumed, and the
 * loss turned NaN later). */
static void test_weights_hash_and_moments(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  bufs b = bufs_new(tl.lay.nparams), c = bufs_new(tl.lay.nparams);
  bufs_random(&b);
  char dir[512], hex[17];
  path_in(dir, sizeof dir, "whash/step_00000003");
  cJSON *state = make_state(3);
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)atoll_hash_floats(b.p, tl.lay.nparams));
  cJSON_AddStringToObject(state, "weights_hash", hex);
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, state, &err), &err);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err), &err);
  cJSON_ReplaceItemInObject(state, "weights_hash", cJSON_CreateString("0123456789abcdef"));
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, state, &err), &err);
  CHECK(atoll_ckpt_load(dir, &tl.lay, c.p, NULL, NULL, &err) != 0);
  CHECK_MSG(err, "model.safetensors: the weights do not match state.json's weights_hash");
  cJSON_AddNumberToObject(cJSON_GetObjectItem(state, "config"), "tp", 2); /* a hash of parts */
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, state, &err), &err);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, NULL, NULL, &err), &err);

  b.v[tl.lay.tensors[1].offset + 2] = -0.5f;
  CHECK_OK(atoll_ckpt_save(dir, &tl.lay, b.p, b.m, b.v, state, &err), &err);
  CHECK_OK(atoll_ckpt_load(dir, &tl.lay, c.p, NULL, NULL, &err), &err); /* weights only */
  CHECK(atoll_ckpt_load(dir, &tl.lay, c.p, c.m, c.v, &err) != 0);
  char want[700];
  snprintf(want, sizeof want, "optimizer.safetensors: tensor exp_avg_sq.%s: element 2 is negative", tl.lay.tensors[1].name);
  CHECK_MSG(err, want);
  cJSON_Delete(state);
  bufs_free(&b), bufs_free(&c);
}

/* ------------------------------------------------------- atomic writes --- */

static void test_write_atomic(void) {
  atoll_err err = {{0}};
  char dir[512], path[600], bad[700];
  size_t size = 0;
  path_in(dir, sizeof dir, "atomic");
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/summary.json", dir);
  CHECK_OK(atoll_write_file_atomic(path, "{\"a\": 1}\n", 9, &err), &err);
  CHECK_OK(atoll_write_file_atomic(path, "{\"b\": 2}\n", 9, &err), &err);
  char *text = (char *)read_all(path, &size);
  CHECK(text && size == 9 && memcmp(text, "{\"b\": 2}\n", 9) == 0);
  free(text);
  CHECK(!has_hidden(dir));
  /* Under a regular file (root bypasses permissions, not this). */
  snprintf(bad, sizeof bad, "%s/summary.json/x.json", dir);
  CHECK(atoll_write_file_atomic(bad, "x", 1, &err) != 0);
  CHECK_MSG(err, bad);
  /* A directory in the way: the rename fails, nothing is left behind. */
  snprintf(bad, sizeof bad, "%s/sub", dir);
  mkdir(bad, 0755);
  CHECK(atoll_write_file_atomic(bad, "x", 1, &err) != 0);
  CHECK_MSG(err, bad);
  CHECK(!has_hidden(dir));
  /* A file system that refuses the write itself. */
  CHECK(atoll_write_file_atomic("/proc/atoll_summary.json", "x", 1, &err) != 0);
  CHECK_MSG(err, "/proc/atoll_summary.json");
}

/* ------------------------------------------------------ fs helpers --- */

/* atoll_read_file's limit is exact: a file of max_bytes is read, one of max_bytes + 1
 * is refused, both below the first buffer (4096) and past a growth of it. */
static void test_read_limit(void) {
  atoll_err err = {{0}};
  char path[600];
  path_in(path, sizeof path, "limit.txt");
  const size_t sizes[] = {10, 5000};
  for (int i = 0; i < 2; i++) {
    size_t size = sizes[i], len = 0;
    char *body = malloc(size), *text = NULL;
    memset(body, 'a', size);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(body, 1, size, f) == size);
    if (f) fclose(f);
    CHECK_OK(atoll_read_file(path, size, &text, &len, &err), &err);
    CHECK(text && len == size && memcmp(text, body, size) == 0 && text[size] == 0);
    free(text), text = NULL;
    CHECK(atoll_read_file(path, size - 1, &text, &len, &err) != 0);
    CHECK_MSG(err, "larger than");
    CHECK(text == NULL);
    free(body);
  }
}

/* A directory that cannot be opened to sync the rename into it is an error the caller
 * hears, naming it (it was ignored, so a file counted as durable might not be). */
static void test_sync_parent(void) {
  atoll_err err = {{0}};
  char path[700], file[600];
  path_in(file, sizeof file, "sync_plain");
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  CHECK_OK(atoll_sync_parent_dir(file, &err), &err);
  snprintf(path, sizeof path, "%s/x.json", file); /* its "directory" is a regular file */
  CHECK(atoll_sync_parent_dir(path, &err) != 0);
  CHECK_MSG(err, file);
  path_in(path, sizeof path, "no_such_dir/x.json");
  CHECK(atoll_sync_parent_dir(path, &err) != 0);
  CHECK_MSG(err, "no_such_dir");
}

/* ------------------------------------------------------- TensorBoard --- */

static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

static void test_tensorboard(void) {
  /* the CRC-32C check value (RFC 3720's polynomial) and the empty string */
  CHECK(atoll_crc32c("123456789", 9) == 0xE3069283u);
  CHECK(atoll_crc32c("", 0) == 0);
  char dir[600];
  path_in(dir, sizeof dir, "tb");
  atoll_err err = {{0}};
  atoll_tb a, b;
  CHECK_OK(atoll_tb_open(&a, dir, 1, &err), &err);
  CHECK_OK(atoll_tb_open(&b, dir, 3, &err), &err); /* the same second: a higher number */
  CHECK(strcmp(a.path, b.path) < 0);
  atoll_tb_scalar v[2] = {{"loss", 2.5f}, {"lr", 1e-3f}};
  CHECK(atoll_tb_scalars(&a, 1.0, 1, v, 2) == 0 && atoll_tb_sync(&a) == 0);
  /* the first record: 8-byte length, its masked CRC, an Event of wall_time (field 1,
   * fixed64) and file_version "brain.Event:2" (field 3), the data's masked CRC */
  unsigned char buf[64];
  FILE *f = fopen(a.path, "rb");
  size_t got = f ? fread(buf, 1, sizeof buf, f) : 0;
  if (f) fclose(f);
  CHECK(got == sizeof buf);
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = len << 8 | buf[i];
  CHECK(len == 9 + 2 + 13);
  CHECK(le32(buf + 8) == masked(atoll_crc32c(buf, 8)));
  CHECK(buf[12] == 0x09 && buf[21] == 0x1a && buf[22] == 13 && memcmp(buf + 23, "brain.Event:2", 13) == 0);
  CHECK(le32(buf + 12 + len) == masked(atoll_crc32c(buf + 12, len)));
  atoll_tb_close(&a);
  atoll_tb_close(&b);
  /* a full disk: the write fails with its errno */
  atoll_tb full = {.f = fopen("/dev/full", "w")};
  if (full.f) {
    CHECK(atoll_tb_scalars(&full, 1.0, 1, v, 2) == -1 && errno == ENOSPC);
    atoll_tb_close(&full);
  }
  /* a directory that cannot be made is named */
  CHECK(atoll_tb_open(&a, "/proc/atoll_tb", 1, &err) != 0);
  CHECK_MSG(err, "/proc/atoll_tb");
}

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/atoll_test_run_dir_XXXXXX");
  if (!mkdtemp(g_tmp)) {
    perror("mkdtemp");
    return 1;
  }
  test_lock();
  test_prune_kill();
  test_prune_protect();
  test_clean();
  test_newer_move_aside();
  test_hashes();
  test_weights_hash_and_moments();
  test_write_atomic();
  test_read_limit();
  test_sync_parent();
  test_tensorboard();
  rm_rf(g_tmp);
  CHECK_DONE();
}
