/* Tests of the data module: token file format, dataset windows, atoll prepare. (About
 * 770 lines, one job: src/data/'s readers and writers, whose cases share the token-file
 * helpers at the top; the readers of input text have their own file, test_text_input.c.) */
#define _XOPEN_SOURCE 700
#include "atoll/atoll.h"
#include "check.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/token_file.h"

#include <cjson/cJSON.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[64];

/* ---------------------------------------------------------------- helpers --- */

static const char *tpath(const char *name) {
  static char buf[8][256];
  static int next = 0;
  char *p = buf[next++ % 8];
  snprintf(p, 256, "%s/%s", tmpdir, name);
  return p;
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(2);
  }
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

/* Reads a whole file; returns malloc'd bytes (NULL if missing), size in *n. */
static uint8_t *read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)len + 1);
  *n = fread(buf, 1, (size_t)len, f);
  buf[*n] = 0;
  fclose(f);
  return buf;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Error message contains both the path and the keyword, on one line. */
static int err_has(const atoll_err *e, const char *path, const char *keyword) {
  int ok = strstr(e->msg, path) && strstr(e->msg, keyword) && !strchr(e->msg, '\n');
  if (!ok) fprintf(stderr, "  message was: \"%s\" (want \"%s\", \"%s\")\n", e->msg, path, keyword);
  return ok;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Writes a token file whose token k is base + k (vocab 100000, width 4). */
static void write_counting_file(const char *path, int32_t base, int n) {
  int32_t *t = malloc((size_t)n * sizeof *t + 1);
  for (int k = 0; k < n; k++) t[k] = base + k;
  atoll_err e = {{0}};
  CHECK_OK(atoll_token_file_write(path, t, (uint64_t)n, 100000, &e), &e);
  free(t);
}

/* ---------------------------------------------------------- token file format --- */

static void test_roundtrip(uint32_t vocab, uint32_t want_width) {
  enum { N = 1000 };
  int32_t tok[N];
  atoll_rng r;
  atoll_rng_seed(&r, vocab);
  for (int i = 0; i < N; i++) tok[i] = (int32_t)(atoll_rng_next(&r) % vocab);
  tok[0] = 0;
  tok[N - 1] = (int32_t)vocab - 1;
  const char *path = tpath("rt.bin");
  atoll_err e = {{0}};
  CHECK_OK(atoll_token_file_write(path, tok, N, vocab, &e), &e);
  CHECK(!exists(tpath("rt.bin.tmp")));
  size_t size = 0;
  free(read_file(path, &size));
  CHECK(size == 32 + (size_t)N * want_width);

  atoll_token_file sh;
  CHECK_OK(atoll_token_file_open(&sh, path, &e), &e);
  CHECK(sh.vocab == vocab);
  CHECK(sh.width == want_width);
  CHECK(sh.ntokens == N);
  int same = 0;
  for (int i = 0; i < N; i++) same += atoll_token_file_token(&sh, (uint64_t)i) == tok[i];
  CHECK(same == N);
  CHECK(atoll_token_file_token(&sh, N) == -1);
  atoll_token_file_close(&sh);
  CHECK(sh.map == NULL);
}

static void test_write_rejects(void) {
  int32_t tok[3] = {1, 256, 2};
  atoll_err e = {{0}};
  const char *path = tpath("bad_write.bin");
  CHECK(atoll_token_file_write(path, tok, 3, 256, &e) == -1);
  CHECK(err_has(&e, path, "out of range"));
  CHECK(!exists(path) && !exists(tpath("bad_write.bin.tmp")));
  tok[1] = -1;
  CHECK(atoll_token_file_write(path, tok, 3, 256, &e) == -1);
  CHECK(err_has(&e, path, "-1"));
  CHECK(atoll_token_file_write(path, tok, 0, 0, &e) == -1);
  CHECK(err_has(&e, path, "vocabulary"));
  /* an empty token file is legal */
  CHECK_OK(atoll_token_file_write(path, tok, 0, 256, &e), &e);
  atoll_token_file sh;
  CHECK_OK(atoll_token_file_open(&sh, path, &e), &e);
  CHECK(sh.ntokens == 0);
  atoll_token_file_close(&sh);
}

/* Writes `good` with one mutation applied, opens it and checks the error. */
static void expect_reject(const char *name, const uint8_t *bytes, size_t n, const char *keyword) {
  const char *path = tpath(name);
  write_file(path, bytes, n);
  atoll_token_file sh;
  atoll_err e = {{0}};
  int rc = atoll_token_file_open(&sh, path, &e);
  CHECK(rc == -1);
  if (rc != -1) fprintf(stderr, "  %s was accepted\n", name);
  else CHECK(err_has(&e, path, keyword));
  CHECK(sh.map == NULL);
  atoll_token_file_close(&sh); /* must be safe after a failed open */
  /* the in-memory parser agrees */
  CHECK(atoll_token_file_parse(&sh, name, bytes, n, &e) == -1);
}

static void test_malformed(void) {
  enum { N = 100 };
  int32_t tok[N];
  for (int i = 0; i < N; i++) tok[i] = i * 37;
  atoll_err e = {{0}};
  CHECK_OK(atoll_token_file_write(tpath("good.bin"), tok, N, 5000, &e), &e); /* width 2 */
  size_t n = 0;
  uint8_t *good = read_file(tpath("good.bin"), &n);
  CHECK(n == 32 + 2 * N);
  uint8_t *b = malloc(n + 16);
  memset(b + n, 0, 16);

  memcpy(b, good, n), b[0] = 'X';
  expect_reject("magic.bin", b, n, "bad magic");
  expect_reject("header.bin", good, 20, "truncated header");
  expect_reject("tokens.bin", good, n - 5, "truncated");
  memcpy(b, good, n), put64(b + 16, N - 1);
  expect_reject("count_small.bin", b, n, "too long");
  memcpy(b, good, n), put64(b + 16, N + 1);
  expect_reject("count_big.bin", b, n, "truncated");
  memcpy(b, good, n), put64(b + 16, UINT64_MAX / 2);
  expect_reject("count_huge.bin", b, n, "truncated");
  memcpy(b, good, n);
  expect_reject("trailing.bin", b, n + 3, "too long");
  memcpy(b, good, n), put32(b + 24, 3);
  expect_reject("width3.bin", b, n, "width");
  memcpy(b, good, n), put32(b + 24, 1);
  expect_reject("width_small.bin", b, n, "width");
  memcpy(b, good, n), put32(b + 8, 2);
  expect_reject("version.bin", b, n, "version");
  memcpy(b, good, n), put32(b + 12, 0);
  expect_reject("vocab0.bin", b, n, "vocabulary");
  memcpy(b, good, n), put32(b + 12, 0x80000001u), put32(b + 24, 4);
  expect_reject("vocab_big.bin", b, n, "vocabulary");
  memcpy(b, good, n), put32(b + 28, 7);
  expect_reject("reserved.bin", b, n, "reserved");
  memcpy(b, good, n), b[32 + 2 * 57] = 5000 & 0xff, b[33 + 2 * 57] = 5000 >> 8;
  expect_reject("token_vocab.bin", b, n, "out of range");
  memcpy(b, good, n), put32(b + 12, 100); /* width 2 still allowed, tokens now too big */
  expect_reject("token_vocab100.bin", b, n, "out of range");
  expect_reject("empty.bin", b, 0, "empty");

  atoll_token_file sh;
  CHECK(atoll_token_file_open(&sh, tpath("missing.bin"), &e) == -1);
  CHECK(err_has(&e, tpath("missing.bin"), "cannot open"));
  CHECK(atoll_token_file_open(&sh, tmpdir, &e) == -1);
  CHECK(err_has(&e, tmpdir, "not a regular file"));
  /* the valid original still opens */
  CHECK_OK(atoll_token_file_open(&sh, tpath("good.bin"), &e), &e);
  CHECK(atoll_token_file_token(&sh, 57) == 57 * 37);
  atoll_token_file_close(&sh);
  free(b);
  free(good);
}

/* -------------------------------------------------------------- prepare --- */

/* Independent statement of the split rule: the last floor(size * vf) bytes, moved
 * forward to just after the next newline if there is one. */
static size_t expected_cut(const char *s, size_t size, double vf) {
  size_t nval = (size_t)((double)size * vf);
  if (nval == 0) return size;
  size_t cut = size - nval;
  if (s[cut - 1] == '\n') return cut;
  for (size_t i = cut; i < size; i++)
    if (s[i] == '\n') return i + 1;
  return cut;
}

/* Reads all tokens of a split into a malloc'd byte string. */
static uint8_t *split_bytes(const char *dir, const char *split, uint64_t *n) {
  atoll_dataset ds;
  atoll_err e = {{0}};
  *n = 0;
  if (atoll_dataset_open(&ds, dir, split, 1, &e) != 0) {
    fprintf(stderr, "  %s\n", e.msg);
    return NULL;
  }
  uint8_t *out = malloc(ds.ntokens + 1);
  for (int k = 0; k < ds.nfiles; k++)
    for (uint64_t i = 0; i < ds.files[k].ntokens; i++)
      out[(*n)++] = (uint8_t)atoll_token_file_token(&ds.files[k], i);
  CHECK(ds.vocab == ATOLL_BYTE_VOCAB);
  atoll_dataset_close(&ds);
  return out;
}

static char *make_text(const char *tag, int lines, size_t *n) {
  char *s = malloc((size_t)lines * 64);
  size_t len = 0;
  for (int i = 0; i < lines; i++)
    len += (size_t)sprintf(s + len, "%s line %d: the quick brown fox %d\n", tag, i, i * i % 97);
  *n = len;
  return s;
}

static void test_prepare(void) {
  size_t na, nb;
  char *a = make_text("alpha", 300, &na);
  char *b = make_text("beta", 120, &nb);
  write_file(tpath("a.txt"), a, na);
  write_file(tpath("b.txt"), b, nb);
  const char *files[2] = {tpath("a.txt"), tpath("b.txt")};
  const char *out = tpath("prep/sub/dir"); /* mkdir -p */
  atoll_err e = {{0}};
  CHECK_OK(atoll_prepare(files, 2, out, 0.1, &e), &e);

  uint64_t ntrain, nval;
  uint8_t *train = split_bytes(out, "train", &ntrain);
  uint8_t *val = split_bytes(out, "val", &nval);
  CHECK(ntrain + nval == na + nb);
  CHECK(nval <= (na + nb) / 10 && nval + 2 * 64 >= (na + nb) / 10); /* within a line each */
  size_t ca = expected_cut(a, na, 0.1), cb = expected_cut(b, nb, 0.1);
  CHECK(ntrain == ca + cb);
  if (train && val && ntrain == ca + cb) {
    CHECK(memcmp(train, a, ca) == 0 && memcmp(train + ca, b, cb) == 0);
    CHECK(memcmp(val, a + ca, na - ca) == 0 && memcmp(val + na - ca, b + cb, nb - cb) == 0);
    CHECK(val[0] == 'a' && a[ca - 1] == '\n'); /* val starts at a line start */
  }

  char mpath[300];
  snprintf(mpath, sizeof mpath, "%s/manifest.json", out);
  size_t mlen = 0;
  char *mtext = (char *)read_file(mpath, &mlen);
  CHECK(mtext != NULL);
  cJSON *m = mtext ? cJSON_Parse(mtext) : NULL;
  CHECK(m != NULL);
  if (m) {
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(m, "tokenizer")), "bytes") == 0);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "vocab")) == 256);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "train_tokens")) == (double)ntrain);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(m, "val_tokens")) == (double)nval);
    cJSON *src = cJSON_GetObjectItem(m, "sources");
    CHECK(cJSON_GetArraySize(src) == 2);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(src, 0), "bytes")) == na);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(src, 1), "bytes")) == nb);
    CHECK(strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(src, 1), "path")),
                 files[1]) == 0);
  }
  cJSON_Delete(m);
  free(mtext);

  /* A stale train_001.bin from an earlier, larger prepare is removed on re-run. */
  char stale[300];
  snprintf(stale, sizeof stale, "%s/train_001.bin", out);
  write_counting_file(stale, 0, 10);
  CHECK_OK(atoll_prepare(files, 2, out, 0.1, &e), &e);
  CHECK(!exists(stale));

  /* Training windows are real substrings of the training text. */
  atoll_dataset ds;
  CHECK_OK(atoll_dataset_open(&ds, out, "train", 32, &e), &e);
  int found = 0;
  for (uint64_t idx = 0; idx < 50 && train; idx++) {
    int32_t w[33];
    atoll_dataset_window(&ds, 7, 3, idx, 32, w);
    uint8_t wb[33];
    for (int j = 0; j < 33; j++) wb[j] = (uint8_t)w[j];
    for (uint64_t s = 0; s + 33 <= ntrain; s++)
      if (memcmp(train + s, wb, 33) == 0) {
        found++;
        break;
      }
  }
  CHECK(found == 50);
  atoll_dataset_close(&ds);
  free(train);
  free(val);
  free(a);
  free(b);
}

static void test_prepare_errors(void) {
  atoll_err e = {{0}};
  write_file(tpath("ok.txt"), "hello\nworld\nagain\n", 18);
  write_file(tpath("empty.txt"), "", 0);
  const char *missing[2] = {tpath("ok.txt"), tpath("nope.txt")};
  CHECK(atoll_prepare(missing, 2, tpath("p1"), 0.1, &e) == -1);
  CHECK(err_has(&e, tpath("nope.txt"), "cannot read"));
  CHECK(!exists(tpath("p1"))); /* nothing written before inputs check out */
  const char *dir[1] = {tmpdir};
  CHECK(atoll_prepare(dir, 1, tpath("p1"), 0.1, &e) == -1);
  CHECK(err_has(&e, tmpdir, "directory"));
  const char *ok[1] = {tpath("ok.txt")};
  CHECK(atoll_prepare(ok, 1, tpath("p1"), 0.7, &e) == -1);
  CHECK(err_has(&e, "val_fraction", "0.7"));
  CHECK(atoll_prepare(ok, 1, tpath("p1"), -0.1, &e) == -1);
  CHECK(atoll_prepare(ok, 1, tpath("p1"), 0.0, &e) == -1);
  CHECK(err_has(&e, "val_fraction", "validation split"));
  const char *empty[2] = {tpath("empty.txt"), tpath("empty.txt")};
  CHECK(atoll_prepare(empty, 2, tpath("p1"), 0.1, &e) == -1);
  CHECK(err_has(&e, "prepare", "empty"));
  /* An empty file among others is fine; no newline after the cut keeps the cut. */
  write_file(tpath("noline.txt"), "abcdefghij", 10);
  const char *mixed[2] = {tpath("empty.txt"), tpath("noline.txt")};
  CHECK_OK(atoll_prepare(mixed, 2, tpath("p2"), 0.5, &e), &e);
  uint64_t nt, nv;
  uint8_t *t = split_bytes(tpath("p2"), "train", &nt);
  uint8_t *v = split_bytes(tpath("p2"), "val", &nv);
  CHECK(nt == 5 && nv == 5);
  CHECK(t && v && memcmp(t, "abcde", 5) == 0 && memcmp(v, "fghij", 5) == 0);
  free(t);
  free(v);
}

/* -------------------------------------------------------------- windows --- */

/* Dataset "win": train_000 = 0..999, train_001 = 5 tokens (too short for seq 16),
 * train_002 = 50000..52999. Tokens count up, so a window's first token names its
 * start and its token file. */
static void make_window_dataset(const char *dir) {
  mkdir(dir, 0777);
  char p[300];
  snprintf(p, sizeof p, "%s/train_000.bin", dir);
  write_counting_file(p, 0, 1000);
  snprintf(p, sizeof p, "%s/train_001.bin", dir);
  write_counting_file(p, 90000, 5);
  snprintf(p, sizeof p, "%s/train_002.bin", dir);
  write_counting_file(p, 50000, 3000);
  snprintf(p, sizeof p, "%s/train_004.bin", dir); /* after a gap: ignored */
  write_counting_file(p, 70000, 3000);
}

static int consecutive(const int32_t *w, int n) {
  for (int j = 1; j < n; j++)
    if (w[j] != w[0] + j) return 0;
  return 1;
}

/* Where the joined valid-start position pos lands (first token of the window). */
static int32_t expected_first(uint64_t pos) { return pos < 984 ? (int32_t)pos : 50000 + (int32_t)(pos - 984); }

static void test_windows(void) {
  enum { SEQ = 16, DRAWS = 4000 };
  const char *dir = tpath("win");
  make_window_dataset(dir);
  atoll_dataset ds;
  atoll_err e = {{0}};
  CHECK_OK(atoll_dataset_open(&ds, dir, "train", SEQ, &e), &e);
  CHECK(ds.nfiles == 3);
  CHECK(ds.ntokens == 4005);
  CHECK(ds.vocab == 100000);

  int32_t w[SEQ + 1], w2[SEQ + 1];
  int in0 = 0, in2 = 0, bad = 0, golden = 0;
  for (uint64_t i = 0; i < DRAWS; i++) {
    atoll_dataset_window(&ds, 1234, 5, i, SEQ, w);
    if (!consecutive(w, SEQ + 1)) bad++;
    else if (w[0] >= 0 && w[0] + SEQ < 1000) in0++;
    else if (w[0] >= 50000 && w[0] + SEQ < 53000) in2++;
    else bad++;
    uint64_t h = atoll_hash64(1234, 5, i, 0x77696e646f77ull);
    golden += w[0] == expected_first(h % (984 + 2984));
  }
  CHECK(bad == 0);
  CHECK(golden == DRAWS);
  CHECK(in0 + in2 == DRAWS);
  /* proportional to valid starts: 984 / 3968 = 0.248 */
  CHECK_NEAR((double)in0 / DRAWS, 984.0 / 3968.0, 0.05);

  atoll_dataset_window(&ds, 1234, 5, 17, SEQ, w);
  atoll_dataset_window(&ds, 1234, 5, 17, SEQ, w2);
  CHECK(memcmp(w, w2, sizeof w) == 0);
  int distinct = 0;
  for (uint64_t i = 0; i < 100; i++) {
    atoll_dataset_window(&ds, 1234, 5, i, SEQ, w2);
    distinct += w2[0] != w[0] || i == 17;
  }
  CHECK(distinct >= 97);
  int seed_diff = 0, step_diff = 0;
  for (uint64_t i = 0; i < 100; i++) {
    atoll_dataset_window(&ds, 1234, 5, i, SEQ, w);
    atoll_dataset_window(&ds, 4321, 5, i, SEQ, w2);
    seed_diff += w[0] != w2[0];
    atoll_dataset_window(&ds, 1234, 6, i, SEQ, w2);
    step_diff += w[0] != w2[0];
  }
  CHECK(seed_diff >= 95 && step_diff >= 95);

  /* Same contents, reopened: same windows. */
  atoll_dataset_window(&ds, 99, 1000, 3, SEQ, w);
  atoll_dataset_close(&ds);
  CHECK_OK(atoll_dataset_open(&ds, dir, "train", SEQ, &e), &e);
  atoll_dataset_window(&ds, 99, 1000, 3, SEQ, w2);
  CHECK(memcmp(w, w2, sizeof w) == 0);

  /* Eval windows: start_i = floor(i * 3968 / count), no seed involved. */
  const uint64_t count = 7;
  int eval_ok = 0;
  for (uint64_t i = 0; i < count; i++) {
    atoll_dataset_eval_window(&ds, i, count, SEQ, w);
    atoll_dataset_eval_window(&ds, i, count, SEQ, w2);
    eval_ok += consecutive(w, SEQ + 1) && memcmp(w, w2, sizeof w) == 0 &&
               w[0] == expected_first(i * 3968 / count);
  }
  CHECK(eval_ok == (int)count);
  atoll_dataset_eval_window(&ds, 0, 1, SEQ, w);
  CHECK(w[0] == 0);
  /* the last valid start is reachable: 3968 windows, i = 3967 */
  atoll_dataset_eval_window(&ds, 3967, 3968, SEQ, w);
  CHECK(w[0] == 52999 - SEQ && w[SEQ] == 52999);
  atoll_dataset_close(&ds);
}

/* ------------------------------------------------------- dataset errors --- */

static void test_dataset_errors(void) {
  atoll_dataset ds;
  atoll_err e = {{0}};
  const char *nodir = tpath("no_such_dir");
  CHECK(atoll_dataset_open(&ds, nodir, "train", 8, &e) == -1);
  CHECK(err_has(&e, nodir, "no such directory"));

  const char *dir = tpath("short");
  mkdir(dir, 0777);
  CHECK(atoll_dataset_open(&ds, dir, "train", 8, &e) == -1);
  CHECK(err_has(&e, dir, "no train_000.bin") && err_has(&e, dir, "atoll prepare"));

  char p[300];
  snprintf(p, sizeof p, "%s/val_000.bin", dir);
  write_counting_file(p, 0, 10);
  snprintf(p, sizeof p, "%s/val_001.bin", dir);
  write_counting_file(p, 0, 8);
  CHECK(atoll_dataset_open(&ds, dir, "val", 10, &e) == -1);
  CHECK(err_has(&e, dir, "too short") && err_has(&e, "val", "18 tokens"));
  CHECK(ds.files == NULL && ds.nfiles == 0);
  CHECK_OK(atoll_dataset_open(&ds, dir, "val", 9, &e), &e); /* exactly seq+1 */
  CHECK(ds.nfiles == 2 && ds.ntokens == 18);
  int32_t w[10];
  atoll_dataset_window(&ds, 1, 2, 3, 9, w);
  CHECK(w[0] == 0 && w[9] == 9); /* the only window */
  atoll_dataset_close(&ds);

  /* token files disagreeing on vocabulary */
  int32_t tok[20] = {0};
  snprintf(p, sizeof p, "%s/mix_000.bin", dir);
  CHECK_OK(atoll_token_file_write(p, tok, 20, 256, &e), &e);
  snprintf(p, sizeof p, "%s/mix_001.bin", dir);
  CHECK_OK(atoll_token_file_write(p, tok, 20, 300, &e), &e);
  CHECK(atoll_dataset_open(&ds, dir, "mix", 4, &e) == -1);
  CHECK(err_has(&e, p, "vocabulary"));

  /* a damaged token file is reported by name */
  snprintf(p, sizeof p, "%s/bad_000.bin", dir);
  write_file(p, "ATOLLTOK", 8);
  CHECK(atoll_dataset_open(&ds, dir, "bad", 4, &e) == -1);
  CHECK(err_has(&e, p, "truncated header"));
}

/* ---------------------------------------------- distrusted input (issue 12) --- */

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_data: opening a FIFO hung\n";
  if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
  _exit(3);
}

/* A FIFO named like a token file is refused by name at once, not waited on. */
static void test_fifo(void) {
  const char *dir = tpath("fifo");
  mkdir(dir, 0777);
  char p[300];
  snprintf(p, sizeof p, "%s/train_000.bin", dir);
  CHECK(mkfifo(p, 0666) == 0);
  signal(SIGALRM, on_alarm);
  alarm(5);
  atoll_dataset ds;
  atoll_err e = {{0}};
  CHECK(atoll_dataset_open(&ds, dir, "train", 4, &e) == -1);
  alarm(0);
  CHECK(err_has(&e, p, "FIFO"));
}

/* A token file cut short while mapped: reading past its new end ends the process
 * with status 1 and a line naming the file, not with SIGBUS, once the program has
 * installed the guard; opening a token file does not install it (a library takes no
 * process-wide signal). The path the handler prints is its own copy: the caller's
 * string is wiped and freed before the fault. */
static void test_truncated_while_open(void) {
  const char *p = tpath("shrinks.bin");
  write_counting_file(p, 0, 100000);
  atoll_token_file tf;
  atoll_err e = {{0}};
  char *caller_path = strdup(p);
  /* the handler before the open: SIG_DFL, or a sanitizer's own under ASan */
  struct sigaction before, now;
  CHECK(sigaction(SIGBUS, NULL, &before) == 0);
  CHECK_OK(atoll_token_file_open(&tf, caller_path, &e), &e);
  memset(caller_path, 'x', strlen(caller_path));
  free(caller_path);
  CHECK(sigaction(SIGBUS, NULL, &now) == 0 && now.sa_handler == before.sa_handler);
  CHECK_OK(atoll_token_file_guard_install(&e), &e);
  CHECK_OK(atoll_token_file_guard_install(&e), &e); /* twice is harmless */
  CHECK(truncate(p, 32) == 0);
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    _exit(atoll_token_file_token(&tf, 99999) == 99999 ? 0 : 2);
  }
  close(fds[1]);
  char msg[512] = {0};
  size_t n = 0;
  for (ssize_t k; n < sizeof msg - 1 && (k = read(fds[0], msg + n, sizeof msg - 1 - n)) > 0;)
    n += (size_t)k;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  CHECK(n > 0 && strstr(msg, p) && strstr(msg, "shrank"));
  atoll_token_file_close(&tf);
}

static void set_number(const char *mpath, const char *key, double v, int drop_hashes) {
  size_t n = 0;
  char *text = (char *)read_file(mpath, &n);
  cJSON *m = text ? cJSON_Parse(text) : NULL;
  if (key) cJSON_ReplaceItemInObject(m, key, cJSON_CreateNumber(v));
  if (drop_hashes) { /* as written before manifests had hashes */
    cJSON_DeleteItemFromObject(m, "train_hashes");
    cJSON_DeleteItemFromObject(m, "val_hashes");
    cJSON_ReplaceItemInObject(m, "version", cJSON_CreateNumber(1));
    cJSON_AddItemToObject(m, "train_shards", cJSON_DetachItemFromObject(m, "train_files"));
    cJSON_AddItemToObject(m, "val_shards", cJSON_DetachItemFromObject(m, "val_files"));
  }
  char *out = cJSON_Print(m);
  write_file(mpath, out, strlen(out));
  cJSON_free(out);
  cJSON_Delete(m);
  free(text);
}

/* Opening checks the token files against manifest.json: counts, vocabulary, and each
 * file's hash (version 2); a version-1 manifest (no hashes) still loads. */
static void test_manifest_checks(void) {
  size_t na;
  char *a = make_text("gamma", 200, &na);
  write_file(tpath("g.txt"), a, na);
  const char *files[1] = {tpath("g.txt")};
  const char *out = tpath("manifest_dir");
  atoll_err e = {{0}};
  CHECK_OK(atoll_prepare(files, 1, out, 0.2, &e), &e);
  char val[300], mpath[300];
  snprintf(val, sizeof val, "%s/val_000.bin", out);
  snprintf(mpath, sizeof mpath, "%s/manifest.json", out);
  atoll_dataset ds;
  CHECK_OK(atoll_dataset_open(&ds, out, "val", 8, &e), &e);
  uint64_t nval = ds.ntokens;
  atoll_dataset_close(&ds);

  /* same length, one token changed: only the hash can tell */
  atoll_token_file tf;
  CHECK_OK(atoll_token_file_open(&tf, val, &e), &e);
  int32_t *tok = malloc(nval * sizeof *tok);
  for (uint64_t i = 0; i < nval; i++) tok[i] = atoll_token_file_token(&tf, i);
  atoll_token_file_close(&tf);
  tok[nval / 2] ^= 1;
  CHECK_OK(atoll_token_file_write(val, tok, nval, 256, &e), &e);
  CHECK(atoll_dataset_open(&ds, out, "val", 8, &e) == -1);
  CHECK(err_has(&e, val, "hash"));
  tok[nval / 2] ^= 1;
  CHECK_OK(atoll_token_file_write(val, tok, nval, 256, &e), &e);
  CHECK_OK(atoll_dataset_open(&ds, out, "val", 8, &e), &e);
  atoll_dataset_close(&ds);

  /* a token file from another run: its count disagrees */
  CHECK_OK(atoll_token_file_write(val, tok, nval - 1, 256, &e), &e);
  CHECK(atoll_dataset_open(&ds, out, "val", 8, &e) == -1);
  CHECK(err_has(&e, mpath, "val_tokens"));
  CHECK_OK(atoll_token_file_write(val, tok, nval, 256, &e), &e);
  set_number(mpath, "vocab", 512, 0);
  CHECK(atoll_dataset_open(&ds, out, "train", 8, &e) == -1);
  CHECK(err_has(&e, mpath, "vocab"));
  set_number(mpath, "vocab", 256, 1);
  CHECK_OK(atoll_dataset_open(&ds, out, "train", 8, &e), &e); /* version 1 */
  atoll_dataset_close(&ds);
  set_number(mpath, "val_shards", 2, 0);
  CHECK(atoll_dataset_open(&ds, out, "val", 8, &e) == -1);
  CHECK(err_has(&e, mpath, "val_shards"));
  free(tok);
  free(a);
}

/* The validation split against the model: a larger vocabulary or token is refused. */
static void test_check_vocab(void) {
  const char *dir = tpath("vocab_dir");
  mkdir(dir, 0777);
  char p[300];
  snprintf(p, sizeof p, "%s/val_000.bin", dir);
  int32_t tok[40];
  for (int i = 0; i < 40; i++) tok[i] = i * 7;
  atoll_dataset ds;
  atoll_err e = {{0}};
  CHECK_OK(atoll_token_file_write(p, tok, 40, 300, &e), &e);
  CHECK_OK(atoll_dataset_open(&ds, dir, "val", 8, &e), &e);
  CHECK(ds.max_token == 273);
  CHECK(atoll_dataset_check_vocab(&ds, 256, &e) == -1);
  CHECK(err_has(&e, p, "vocab"));
  CHECK_OK(atoll_dataset_check_vocab(&ds, 300, &e), &e);
  CHECK_OK(atoll_dataset_check_vocab(&ds, 512, &e), &e);
  ds.vocab = 256; /* a header that understates its tokens is still caught */
  CHECK(atoll_dataset_check_vocab(&ds, 256, &e) == -1);
  CHECK(err_has(&e, p, "273"));
  ds.vocab = 300;
  atoll_dataset_close(&ds);
}

/* --out may not contain the inputs (a second run would read its own token files as
 * text) nor files prepare did not write (the swap would discard them). */
static void test_prepare_out_dir(void) {
  const char *dir = tpath("texts");
  mkdir(dir, 0777);
  char in[300], foreign[300];
  snprintf(in, sizeof in, "%s/t.txt", dir);
  write_file(in, "one\ntwo\nthree\nfour\n", 19);
  const char *files[1] = {in};
  atoll_err e = {{0}};
  CHECK(atoll_prepare(files, 1, dir, 0.3, &e) == -1);
  CHECK(err_has(&e, in, "inside"));
  CHECK(exists(in));
  const char *out = tpath("texts_out");
  mkdir(out, 0777);
  snprintf(foreign, sizeof foreign, "%s/notes.md", out);
  write_file(foreign, "x", 1);
  CHECK(atoll_prepare(files, 1, out, 0.3, &e) == -1);
  CHECK(err_has(&e, out, "notes.md"));
  CHECK(exists(foreign));
  unlink(foreign);
  CHECK_OK(atoll_prepare(files, 1, out, 0.3, &e), &e);
}

/* Every file of dir (names and bytes) equals ref's. */
static int same_dir(const char *dir, const char *ref) {
  const char *names[] = {"train_000.bin", "val_000.bin", "manifest.json"};
  for (int i = 0; i < 3; i++) {
    char p[300], q[300];
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    snprintf(q, sizeof q, "%s/%s", ref, names[i]);
    size_t n1 = 0, n2 = 0;
    uint8_t *a = read_file(p, &n1), *b = read_file(q, &n2);
    int same = a && b && n1 == n2 && memcmp(a, b, n1) == 0;
    free(a);
    free(b);
    if (!same) return 0;
  }
  return 1;
}

/* A prepare killed at any moment leaves the old set or the new one, never a mix. */
static void test_prepare_killed(void) {
  size_t n = 6u << 20;
  char *text = malloc(n);
  for (size_t i = 0; i < n; i++) text[i] = i % 61 == 60 ? '\n' : (char)('a' + i % 23);
  write_file(tpath("new.txt"), text, n);
  write_file(tpath("old.txt"), text + 3, n / 2);
  free(text);
  char nf[256], of[256], out[256], ref_new[256], ref_old[256];
  snprintf(nf, sizeof nf, "%s", tpath("new.txt"));
  snprintf(of, sizeof of, "%s", tpath("old.txt"));
  snprintf(out, sizeof out, "%s", tpath("killed"));
  snprintf(ref_new, sizeof ref_new, "%s", tpath("ref_new"));
  snprintf(ref_old, sizeof ref_old, "%s", tpath("ref_old"));
  const char *newf[1] = {nf}, *oldf[1] = {of};
  atoll_err e = {{0}};
  CHECK_OK(atoll_prepare(newf, 1, ref_new, 0.1, &e), &e);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_OK(atoll_prepare(newf, 1, out, 0.1, &e), &e);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long span_us = (t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000;
  int mixed = 0;
  for (int trial = 0; trial < 12; trial++) {
    CHECK_OK(atoll_prepare(oldf, 1, out, 0.1, &e), &e);
    if (trial == 0) CHECK_OK(atoll_prepare(oldf, 1, ref_old, 0.1, &e), &e);
    pid_t pid = fork();
    if (pid == 0) _exit(atoll_prepare(newf, 1, out, 0.1, NULL) == 0 ? 0 : 1);
    nanosleep(&(struct timespec){0, span_us * (trial + 1) / 13 * 1000}, NULL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    mixed += !same_dir(out, ref_old) && !same_dir(out, ref_new);
  }
  CHECK(mixed == 0);
  CHECK_OK(atoll_prepare(newf, 1, out, 0.1, &e), &e); /* leftovers of a kill are cleared */
  CHECK(same_dir(out, ref_new));
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/atoll_test_data_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 2;
  }
  test_roundtrip(256, 1);
  test_roundtrip(5000, 2);
  test_roundtrip(65536, 2);
  test_roundtrip(65537, 4);
  test_roundtrip(100000, 4);
  test_write_rejects();
  test_malformed();
  test_prepare();
  test_prepare_errors();
  test_windows();
  test_dataset_errors();
  test_fifo();
  test_truncated_while_open();
  test_manifest_checks();
  test_check_vocab();
  test_prepare_out_dir();
  test_prepare_killed();
  rm_tree(tmpdir);
  CHECK_DONE();
}
