/* What atoll prepare reads (src/text/text_input.c, src/text/jsonl.c): the JSON Lines
 * parser's text and errors (PATH:LINE) fed whole and in pieces of every small size,
 * gzip (multi-member, corrupt, truncated, misnamed), the directory walk's order,
 * and prepare end to end: a gzipped or JSON Lines copy of a text gives the same token
 * files as the text itself, CRLF lines the same as LF. */
#include "check.h"
#include "text/jsonl.h"
#include "text/text_input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[256];

static const char *at(const char *name) {
  static char p[4][512];
  static int k = 0;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
  return p[k];
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, n, f) != n) {
    perror(path);
    exit(2);
  }
  fclose(f);
}

static void write_gz(const char *path, const void *data, size_t n) {
  gzFile g = gzopen(path, "wb");
  if (!g || gzwrite(g, data, (unsigned)n) != (int)n) exit(2);
  gzclose(g);
}

static size_t read_bytes(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(buf, 1, cap, f);
  fclose(f);
  return n;
}

/* ------------------------------------------------------------ JSON Lines --- */

/* Parses in, fed `piece` bytes at a time into an output of `cap` bytes; returns the
 * text's length, or -1 with err set. */
static long parse(const char *in, size_t n, size_t piece, size_t cap, char *text, size_t text_cap,
                  atoll_err *err) {
  atoll_jsonl p;
  if (atoll_jsonl_init(&p, "f.jsonl", "text", err) != 0) return -1;
  uint8_t out[4096];
  size_t pos = 0, len = 0;
  for (;;) {
    size_t olen = 0;
    int done = pos == n;
    if (!done) {
      size_t take = n - pos < piece ? n - pos : piece, used;
      if (atoll_jsonl_feed(&p, (const uint8_t *)in + pos, take, &used, out, cap, &olen, err) != 0) return -1;
      pos += used;
    } else if (atoll_jsonl_finish(&p, out, cap, &olen, err) != 0) {
      return -1;
    }
    if (len + olen > text_cap) return -2;
    memcpy(text + len, out, olen);
    len += olen;
    if (done) return (long)len;
  }
}

/* Whole and in pieces of 1..9 bytes into outputs as small as allowed: the same text. */
static void expect_text(const char *in, size_t n, const char *want, size_t want_len) {
  static char got[1 << 16];
  atoll_err err = {{0}};
  long len = parse(in, n, n ? n : 1, 4096, got, sizeof got, &err);
  if (len != (long)want_len || memcmp(got, want, want_len) != 0) {
    fprintf(stderr, "jsonl %.60s: got %ld bytes '%.*s' (%s), want '%s'\n", in, len,
            len > 0 ? (int)len : 0, got, err.msg, want);
    check_failures++;
    return;
  }
  for (size_t piece = 1; piece < 10; piece++) {
    long l2 = parse(in, n, piece, ATOLL_JSONL_SLACK + piece % 3, got, sizeof got, &err);
    if (l2 != len || memcmp(got, want, want_len) != 0) {
      fprintf(stderr, "jsonl %.60s: in pieces of %zu: %ld bytes (%s)\n", in, piece, l2, err.msg);
      check_failures++;
    }
  }
}

#define TEXT(in, want) expect_text(in, sizeof(in) - 1, want, sizeof(want) - 1)

/* Must fail with a message holding `word`, the same whole and byte by byte. */
static void expect_error(const char *in, const char *word) {
  static char got[1 << 16];
  atoll_err e1 = {{0}}, e2 = {{0}};
  long a = parse(in, strlen(in), strlen(in) + 1, 4096, got, sizeof got, &e1);
  long b = parse(in, strlen(in), 1, ATOLL_JSONL_SLACK, got, sizeof got, &e2);
  if (a != -1 || b != -1 || !strstr(e1.msg, word) || strcmp(e1.msg, e2.msg) != 0) {
    fprintf(stderr, "jsonl %.60s: want an error with '%s', got %ld/%ld: '%s' / '%s'\n", in, word, a,
            b, e1.msg, e2.msg);
    check_failures++;
  }
}

static void test_jsonl_text(void) {
  TEXT("{\"text\":\"a\"}\n{\"text\":\"b\\n\"}\n", "a\nb\n");
  TEXT("{\"text\": \"a\"}\r\n{\"text\" :\"b\"}\r\n", "a\nb\n"); /* CRLF */
  TEXT("\n  \n{\"text\":\"a\"}\n\r\n\t\n", "a\n");                /* blank lines */
  TEXT("{\"text\":\"no newline at the end\"}", "no newline at the end\n");
  TEXT("", "");
  TEXT("{\"text\":\"\"}\n{\"text\":\"x\"}\n", "x\n"); /* an empty document adds nothing */
  TEXT("{\"text\":\"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20ac\\ud83d\\ude00\"}\n",
       "q\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\n");
  TEXT("{\"text\":\"\\ud800x\\udc00\\ud800\\ud800\\udc00\\ud800\"}\n", /* lone surrogates: U+FFFD */
       "\xef\xbf\xbdx\xef\xbf\xbd\xef\xbf\xbd\xf0\x90\x80\x80\xef\xbf\xbd\n");
  TEXT("{\"text\":\"\\u0000\"}\n", "\0\n");
  TEXT("{\"meta\":{\"text\":\"no\"},\"text\":\"yes\",\"arr\":[1,-2.5e+3,0,0.5E-2,true,false,null,"
       "{\"text\":1},[],{}]}\n",
       "yes\n");
  TEXT("{\"\\u0074ext\":\"escaped key\"}\n", "escaped key\n");
  TEXT("{\"tex\":\"x\",\"texts\":\"y\",\"\":\"z\",\"text\":\"w\"}\n", "w\n");
  TEXT("{\"text\":\"raw UTF-8 caf\xc3\xa9 and bytes \xff kept\"}\n", "raw UTF-8 caf\xc3\xa9 and bytes \xff kept\n");
}

static void test_jsonl_errors(void) {
  expect_error("{\"text\":\"a\"}\nnot json\n", "f.jsonl:2: not JSON");
  expect_error("{\"text\":\"a\"}\n\n{\"id\":1}\n", "f.jsonl:3: no \"text\" field");
  expect_error("{\"text\": 5}\n", "holds a number");
  expect_error("{\"text\": -1}\n", "holds a number");
  expect_error("{\"text\": null}\n", "holds null");
  expect_error("{\"text\": nul}\n", "not JSON: expected true, false or null");
  expect_error("{\"text\": {}}\n", "holds an object");
  expect_error("{\"text\": [\"a\"]}\n", "holds an array");
  expect_error("{\"text\": true}\n", "holds true");
  expect_error("{\"text\":\"a\",\"text\":\"b\"}\n", "appears twice");
  expect_error("[{\"text\":\"a\"}]\n", "f.jsonl:1: not JSON: expected a JSON object");
  expect_error("\"text\"\n", "expected a JSON object");
  expect_error("{\"text\":\"a\"} x\n", "end of the line");
  expect_error("{\"text\":\"a\"}{\"text\":\"b\"}\n", "end of the line");
  expect_error("{\"text\":\"a\nb\"}\n", "f.jsonl:1: not JSON: the line ends inside a string");
  expect_error("{\"text\":\"a", "f.jsonl:1: not JSON: the file ends inside");
  expect_error("{\"text\":\"a\"\n}\n", "f.jsonl:1: not JSON");
  expect_error("{\"text\":\"a\",\"n\":01}\n", "expected ',' or '}'");
  expect_error("{\"text\":\"a\",\"n\":1.}\n", "digit after '.'");
  expect_error("{\"text\":\"a\",\"n\":-}\n", "digit after '-'");
  expect_error("{\"text\":\"a\",\"n\":1e}\n", "exponent");
  expect_error("{\"text\":\"a\",\"n\":+1}\n", "expected a value");
  expect_error("{\"text\":\"a\",\"n\":tru}\n", "true, false or null");
  expect_error("{\"text\":\"a\tb\"}\n", "control byte 0x09");
  expect_error("{\"text\":\"a\\x\"}\n", "bad escape");
  expect_error("{\"text\":\"\\u12g4\"}\n", "hex digit");
  expect_error("{\"text\":\"a\",}\n", "expected a key");
  expect_error("{\"text\" \"a\"}\n", "expected ':'");
  expect_error("{\"text\":\"a\",\"b\":[1,]}\n", "expected a value");
  expect_error("{\"text\":\"a\",\"b\":[1}\n", "expected ',' or ']'");
  expect_error("{text:\"a\"}\n", "expected a key");
  expect_error("{\"text\":\"a\"}\n\n\n{\"text\":\"a\"} \x01\n", "f.jsonl:4: not JSON");
  /* nesting beyond the limit */
  char deep[600] = "{\"text\":\"a\",\"d\":";
  size_t len = strlen(deep);
  for (int i = 0; i < ATOLL_JSONL_MAX_DEPTH + 2; i++) deep[len++] = '[';
  deep[len] = 0;
  expect_error(deep, "nested deeper than");
  atoll_jsonl p;
  atoll_err err = {{0}};
  CHECK(atoll_jsonl_init(&p, "f", "", &err) == -1 && strstr(err.msg, "--jsonl-field"));
}

/* A document of 4 MiB goes through an output of 16 bytes: memory does not follow the line. */
static void test_jsonl_long_line(void) {
  size_t n = (size_t)4 << 20;
  char *in = malloc(n + 32), *want = malloc(n);
  size_t k = (size_t)sprintf(in, "{\"text\":\"");
  for (size_t i = 0; i < n; i++) in[k + i] = want[i] = (char)('a' + i % 26);
  k += n;
  k += (size_t)sprintf(in + k, "\"}\n");
  atoll_jsonl p;
  atoll_err err = {{0}};
  CHECK_OK(atoll_jsonl_init(&p, "long", "text", &err), &err);
  size_t pos = 0, got = 0, same = 1;
  uint8_t out[16];
  while (pos < k) {
    size_t used, olen = 0;
    if (atoll_jsonl_feed(&p, (uint8_t *)in + pos, k - pos, &used, out, sizeof out, &olen, &err) != 0) break;
    for (size_t i = 0; i < olen; i++) same &= got + i < n ? out[i] == (uint8_t)want[got + i] : out[i] == '\n';
    pos += used;
    got += olen;
  }
  CHECK(pos == k && got == n + 1 && same && p.documents == 1);
  free(in);
  free(want);
}

/* ---------------------------------------------------------------- readers --- */

/* The text a scanned source yields through the reader, into buf. */
static long read_all(const atoll_text_source *s, char *buf, size_t cap, atoll_err *err) {
  atoll_text_reader *r;
  if (atoll_text_reader_open(&r, s, "text", err) != 0) return -1;
  size_t len = 0;
  long rc = 0;
  for (;;) {
    const uint8_t *p;
    size_t n;
    if (atoll_text_reader_next(r, &p, &n, err) != 0) {
      rc = -1;
      break;
    }
    if (n == 0) break;
    if (len + n > cap) {
      rc = -2;
      break;
    }
    memcpy(buf + len, p, n);
    len += n;
  }
  atoll_text_reader_close(r);
  return rc ? rc : (long)len;
}

static void test_gzip(void) {
  static char text[300000], got[700000], gz[700000];
  for (size_t i = 0; i < sizeof text; i++) text[i] = i % 61 == 60 ? '\n' : (char)('a' + (i * 7) % 26);
  text[sizeof text - 1] = 'x'; /* no newline at the very end */
  write_gz(at("one.gz"), text, sizeof text);
  atoll_text_source s;
  atoll_err err = {{0}};
  CHECK_OK(atoll_text_scan(&s, at("one.gz"), "text", NULL, NULL, &err), &err);
  CHECK(s.gzip && !s.jsonl && s.text_bytes == sizeof text);
  uint64_t last_nl = 0;
  for (size_t i = 0; i < sizeof text; i++)
    if (text[i] == '\n') last_nl = i + 1;
  CHECK(s.newline_end == last_nl);
  CHECK(read_all(&s, got, sizeof got, &err) == (long)sizeof text && memcmp(got, text, sizeof text) == 0);

  /* two members one after the other (cat a.gz b.gz) read as their texts joined */
  size_t n1 = read_bytes(at("one.gz"), gz, sizeof gz);
  memcpy(gz + n1, gz, n1);
  write_bytes(at("two.gz"), gz, 2 * n1);
  CHECK_OK(atoll_text_scan(&s, at("two.gz"), "text", NULL, NULL, &err), &err);
  CHECK(s.text_bytes == 2 * sizeof text);
  CHECK(read_all(&s, got, sizeof got, &err) == 2 * (long)sizeof text &&
        memcmp(got + sizeof text, text, sizeof text) == 0);

  /* damaged: a flipped byte in the compressed data, a cut-off end, garbage after */
  gz[n1 / 2] ^= 0x55;
  write_bytes(at("bad.gz"), gz, n1);
  CHECK(atoll_text_scan(&s, at("bad.gz"), "text", NULL, NULL, &err) == -1 &&
        strstr(err.msg, "bad.gz: corrupt gzip data"));
  gz[n1 / 2] ^= 0x55;
  write_bytes(at("cut.gz"), gz, n1 - 20);
  CHECK(atoll_text_scan(&s, at("cut.gz"), "text", NULL, NULL, &err) == -1 &&
        strstr(err.msg, "cut.gz: truncated gzip data"));
  memcpy(gz + n1, "garbage!", 8);
  write_bytes(at("tail.gz"), gz, n1 + 8);
  CHECK(atoll_text_scan(&s, at("tail.gz"), "text", NULL, NULL, &err) == -1 &&
        strstr(err.msg, "tail.gz: corrupt gzip data"));
  write_bytes(at("plain.gz"), "just text\n", 10);
  CHECK(atoll_text_scan(&s, at("plain.gz"), "text", NULL, NULL, &err) == -1 && strstr(err.msg, "not gzip"));
  write_bytes(at("empty.gz"), "", 0);
  CHECK(atoll_text_scan(&s, at("empty.gz"), "text", NULL, NULL, &err) == -1 && strstr(err.msg, "not gzip"));
  /* gzip data under another name is still decompressed (the magic decides) */
  write_bytes(at("hidden_gzip.txt"), gz, n1);
  CHECK_OK(atoll_text_scan(&s, at("hidden_gzip.txt"), "text", NULL, NULL, &err), &err);
  CHECK(s.gzip && s.text_bytes == sizeof text);
}

static void test_sources(void) {
  atoll_text_source s;
  atoll_err err = {{0}};
  write_bytes(at("empty.txt"), "", 0);
  CHECK_OK(atoll_text_scan(&s, at("empty.txt"), "text", NULL, NULL, &err), &err);
  CHECK(s.text_bytes == 0 && s.newline_end == 0);
  write_bytes(at("empty.jsonl"), "", 0);
  CHECK_OK(atoll_text_scan(&s, at("empty.jsonl"), "text", NULL, NULL, &err), &err);
  CHECK(s.text_bytes == 0 && s.documents == 0);
  write_bytes(at("crlf.txt"), "a\r\nb\r\nc", 7);
  CHECK_OK(atoll_text_scan(&s, at("crlf.txt"), "text", NULL, NULL, &err), &err);
  CHECK(s.text_bytes == 7 && s.newline_end == 6);
  /* the JSON Lines error names the gzip file and the line of its text */
  const char *bad = "{\"text\":\"a\"}\n{\"body\":\"b\"}\n";
  write_gz(at("bad.jsonl.gz"), bad, strlen(bad));
  CHECK(atoll_text_scan(&s, at("bad.jsonl.gz"), "text", NULL, NULL, &err) == -1 &&
        strstr(err.msg, "bad.jsonl.gz:2: no \"text\" field"));
  CHECK(atoll_text_scan(&s, at("bad.jsonl.gz"), "body", NULL, NULL, &err) == -1 &&
        strstr(err.msg, "bad.jsonl.gz:1: no \"body\" field"));
  /* a file that grows between the passes is an error, not silently cut */
  write_bytes(at("grows.txt"), "abc\n", 4);
  CHECK_OK(atoll_text_scan(&s, at("grows.txt"), "text", NULL, NULL, &err), &err);
  write_bytes(at("grows.txt"), "abc\nmore\n", 9);
  char buf[64];
  CHECK(read_all(&s, buf, sizeof buf, &err) == -1 && strstr(err.msg, "changed while prepare read it"));
}

/* ---------------------------------------------------------------- listing --- */

static void test_listing(void) {
  const char *dirs[] = {"tree", "tree/a", "tree/a/deep", "tree/empty", "tree/out", "tree/out.atoll-new"};
  for (int i = 0; i < 6; i++) mkdir(at(dirs[i]), 0755);
  const char *files[] = {"tree/b.txt", "tree/a-b.txt", "tree/a/x.txt", "tree/a/deep/y.gz", "tree/.hidden",
                         "tree/z.dat", "tree/out/train_000.bin", "tree/out.atoll-new/q", "tree/A.txt"};
  for (int i = 0; i < 9; i++) write_bytes(at(files[i]), "t\n", 2);
  symlink(at("tree/b.txt"), at("tree/link.txt"));
  atoll_text_list l = {0};
  atoll_err err = {{0}};
  const char *args[] = {at("tree")};
  CHECK_OK(atoll_text_list_expand(&l, args, 1, at("tree/out"), &err), &err);
  const char *want[] = {"tree/A.txt", "tree/a/deep/y.gz", "tree/a/x.txt", "tree/a-b.txt", "tree/b.txt"};
  CHECK(l.n == 5);
  for (int i = 0; i < l.n && i < 5; i++) {
    if (strcmp(l.paths[i], at(want[i])) != 0) {
      fprintf(stderr, "listing[%d] = %s, want %s\n", i, l.paths[i], want[i]);
      check_failures++;
    }
  }
  atoll_text_list_free(&l);
  /* a file argument stands for itself, a missing one too (its scan says why) */
  const char *two[] = {at("tree/b.txt"), at("missing.txt")};
  CHECK_OK(atoll_text_list_expand(&l, two, 2, NULL, &err), &err);
  CHECK(l.n == 2);
  atoll_text_list_free(&l);
  const char *empty[] = {at("tree/empty")};
  CHECK(atoll_text_list_expand(&l, empty, 1, NULL, &err) == -1 && strstr(err.msg, "holds no text files"));
  atoll_text_list_free(&l);
}

/* ---------------------------------------------------------------- prepare --- */

/* All token bytes of a split (headers dropped), concatenated. */
static size_t split_bytes(const char *dir, const char *split, char *buf, size_t cap) {
  size_t len = 0;
  for (int k = 0;; k++) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s_%03d.bin", dir, split, k);
    static char file[1 << 20];
    size_t n = read_bytes(path, file, sizeof file);
    if (n < 32) return len;
    if (len + n - 32 > cap) return 0;
    memcpy(buf + len, file + 32, n - 32);
    len += n - 32;
  }
}

static int same_sets(const char *a, const char *b) {
  static char x[1 << 20], y[1 << 20];
  const char *splits[] = {"train", "val"};
  for (int i = 0; i < 2; i++) {
    size_t nx = split_bytes(a, splits[i], x, sizeof x), ny = split_bytes(b, splits[i], y, sizeof y);
    if (nx == 0 || nx != ny || memcmp(x, y, nx) != 0) return 0;
  }
  return 1;
}

static int prep(const char *in, const char *out, const char *field, atoll_err *err) {
  const char *args[] = {in};
  atoll_prepare_input opt = {.jsonl_field = field};
  return atoll_prepare_inputs(args, 1, &opt, out, 0.2, err);
}

static void test_prepare(void) {
  /* a text with lines; its gzip; a JSON Lines file with one line per line of text */
  static char text[20000], jsonl[120000];
  size_t tn = 0, jn = 0;
  for (int line = 0; tn < sizeof text - 100; line++) {
    int words = 1 + line % 7;
    size_t start = tn;
    for (int w = 0; w < words; w++) tn += (size_t)sprintf(text + tn, "%sw%d", w ? " " : "", line * 31 % 97 + w);
    jn += (size_t)sprintf(jsonl + jn, "{\"id\": %d, \"body\": \"%.*s\", \"n\": [1.5e3]}\r\n", line,
                          (int)(tn - start), text + start);
    text[tn++] = '\n';
  }
  write_bytes(at("t.txt"), text, tn);
  write_gz(at("t.txt.gz"), text, tn);
  write_bytes(at("t.jsonl"), jsonl, jn);
  write_gz(at("t.jsonl.gz"), jsonl, jn);
  atoll_err err = {{0}};
  CHECK_OK(prep(at("t.txt"), at("p_txt"), NULL, &err), &err);
  CHECK_OK(prep(at("t.txt.gz"), at("p_gz"), NULL, &err), &err);
  CHECK_OK(prep(at("t.jsonl"), at("p_jsonl"), "body", &err), &err);
  CHECK_OK(prep(at("t.jsonl.gz"), at("p_jsonl_gz"), "body", &err), &err);
  CHECK(same_sets(at("p_txt"), at("p_gz")));
  CHECK(same_sets(at("p_txt"), at("p_jsonl")));
  CHECK(same_sets(at("p_txt"), at("p_jsonl_gz")));
  /* the wrong field: one line naming the file and line, nothing written */
  CHECK(prep(at("t.jsonl"), at("p_bad"), "text", &err) == -1 && strstr(err.msg, "t.jsonl:1: no \"text\" field"));
  struct stat st;
  CHECK(stat(at("p_bad"), &st) != 0 && stat(at("p_bad.atoll-new"), &st) != 0);
  /* empty files add nothing; only empty files is an error */
  mkdir(at("empties"), 0755);
  write_bytes(at("empties/a.txt"), "", 0);
  write_bytes(at("empties/b.jsonl"), "\n\n", 2);
  CHECK(prep(at("empties"), at("p_empty"), NULL, &err) == -1 && strstr(err.msg, "input is empty"));
  write_bytes(at("empties/c.txt"), text, tn);
  CHECK_OK(prep(at("empties"), at("p_empties"), NULL, &err), &err);
  CHECK(same_sets(at("p_txt"), at("p_empties")));
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/atoll_test_text_input_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 2;
  }
  test_jsonl_text();
  test_jsonl_errors();
  test_jsonl_long_line();
  test_gzip();
  test_sources();
  test_listing();
  test_prepare();
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (check_failures == 0 && !getenv("KEEP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  CHECK_DONE();
}
