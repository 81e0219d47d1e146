/* Tests for src/ckpt: safetensors reading/writing/validation and checkpoint
 * directories (atomic save, load, find_latest, prune). Layouts are built by hand so
 * that these tests do not depend on src/model/layout.c, except test_ckpt_real_layout,
 * which checks the two against each other. (About 940 lines: the safetensors format
 * cases and the directory cases share one hand-built fixture, tests/ckpt_fixture.h;
 * run-directory cases live in test_run_dir.c.) */
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

/* ------------------------------------------------------------- helpers --- */

/* The two-tensor layout the hand-written malformed files are made for:
 * a [2, 3] at bytes [0, 24), b [4] at [24, 40). */
static void layout_ab(test_layout *tl) {
  memset(tl, 0, sizeof *tl);
  add_tensor(tl, "a", 2, 2, 3);
  add_tensor(tl, "b", 1, 4, 0);
}

/* 0.25 * i - 3: exactly representable, checked independently by st_check.py. */
static void fill_pattern(float *v, size_t n) {
  for (size_t i = 0; i < n; i++) v[i] = 0.25f * (float)i - 3.0f;
}

/* [u64 N][header][data] with the header given as text (N = strlen, no padding). */
static uint8_t *make_st(const char *header, const void *data, size_t dsize, size_t *size) {
  size_t n = strlen(header);
  *size = 8 + n + dsize;
  uint8_t *buf = malloc(*size);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, header, n);
  if (dsize) memcpy(buf + 8 + n, data, dsize);
  return buf;
}

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* ------------------------------------------------- safetensors: writing --- */

static void test_st_roundtrip(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  size_t n = tl.lay.nparams;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  fill_random(a, n);
  a[3] = -0.0f;
  a[4] = 1e-45f; /* a denormal survives bit for bit */
  char path[512];
  path_in(path, sizeof path, "rt.safetensors");
  cJSON *meta = cJSON_CreateObject();
  cJSON_AddStringToObject(meta, "format", "atoll");
  cJSON_AddStringToObject(meta, "note", "h\xc3\xa9llo \"quoted\" \\ \n\t end");
  CHECK_OK(atoll_st_write(path, &tl.lay, "", a, meta, &err), &err);

  cJSON *got = NULL;
  memset(b, 0xAB, n * sizeof *b);
  CHECK_OK(atoll_st_read(path, &tl.lay, "", b, &got, &err), &err);
  CHECK(memcmp(a, b, n * sizeof *a) == 0);
  CHECK(got != NULL && cJSON_Compare(meta, got, 1));
  cJSON_Delete(got);

  /* Raw layout: header length a multiple of 8, data section = the flat buffer. */
  size_t size;
  uint8_t *raw = read_all(path, &size);
  uint64_t hlen = le64(raw);
  CHECK(hlen % 8 == 0);
  CHECK(size == 8 + hlen + n * 4);
  CHECK(memcmp(raw + 8 + hlen, a, n * 4) == 0);
  CHECK(raw[8] == '{' && raw[8 + hlen - 1] != 0);
  /* Independent JSON check of the offsets: consecutive, in floats * 4. */
  cJSON *hdr = cJSON_ParseWithLength((const char *)raw + 8, hlen);
  CHECK(hdr != NULL);
  for (int i = 0; hdr && i < tl.lay.ntensors; i++) {
    const atoll_tensor *t = &tl.t[i];
    cJSON *e = cJSON_GetObjectItemCaseSensitive(hdr, t->name);
    cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    CHECK(cJSON_GetArrayItem(off, 0) && cJSON_GetArrayItem(off, 0)->valuedouble == t->offset * 4.0);
    CHECK(cJSON_GetArrayItem(off, 1) &&
          cJSON_GetArrayItem(off, 1)->valuedouble == (t->offset + t->numel) * 4.0);
    cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    CHECK(cJSON_GetArraySize(shape) == t->ndim);
  }
  cJSON_Delete(hdr);
  free(raw);
  cJSON_Delete(meta);
  free(a);
  free(b);
}

/* One tensor "t" [3]: the whole file is known byte for byte. */
static void test_st_exact_bytes(void) {
  test_layout tl;
  memset(&tl, 0, sizeof tl);
  add_tensor(&tl, "t", 1, 3, 0);
  float v[3] = {1.0f, -2.0f, 0.5f};
  char path[512];
  atoll_err err = {{0}};
  path_in(path, sizeof path, "exact.safetensors");
  CHECK_OK(atoll_st_write(path, &tl.lay, "", v, NULL, &err), &err);
  /* 55 bytes of JSON padded with 1 space to 56. */
  const char *json = "{\"t\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}} ";
  CHECK(strlen(json) == 56);
  size_t size;
  uint8_t *raw = read_all(path, &size);
  CHECK(size == 8 + 56 + 12);
  CHECK(le64(raw) == 56);
  CHECK(size >= 64 && memcmp(raw + 8, json, 56) == 0);
  CHECK(size >= 76 && memcmp(raw + 64, v, 12) == 0);
  /* And atoll_st_parse reports the same numbers. */
  atoll_st_file f;
  CHECK_OK(atoll_st_parse(raw, size, path, &f, &err), &err);
  CHECK(f.header_len == 56 && f.data_size == 12 && f.ntensors == 1);
  CHECK(f.ntensors == 1 && f.tensors[0].begin == 0 && f.tensors[0].end == 12 &&
        f.tensors[0].dtype == ATOLL_ST_F32 && f.tensors[0].ndim == 1 && f.tensors[0].shape[0] == 3);
  CHECK(f.metadata == NULL);
  atoll_st_file_free(&f);
  free(raw);
}

/* BF16 (atoll export --dtype bf16): the file byte for byte, each value rounded to
 * nearest with ties to even; a finite value beyond bf16's range refused. */
static void test_st_bf16(void) {
  test_layout tl;
  memset(&tl, 0, sizeof tl);
  add_tensor(&tl, "t", 1, 4, 0);
  /* 1 + 2^-8 and 1 + 3 x 2^-8 lie halfway: to the even 1.0 (0x3F80) and 1 + 2^-6 (0x3F82);
   * -2.5 is exact (0xC020); 1 + 2^-8 + 2^-20 is past halfway (0x3F81) */
  float v[4] = {1.00390625f, 1.01171875f, -2.5f, 1.00390625f + 0x1p-20f};
  const uint8_t want[8] = {0x80, 0x3F, 0x82, 0x3F, 0x20, 0xC0, 0x81, 0x3F};
  char path[512];
  atoll_err err = {{0}};
  path_in(path, sizeof path, "bf16.safetensors");
  CHECK_OK(atoll_st_write_bf16(path, &tl.lay, v, NULL, &err), &err);
  const char *json = "{\"t\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}} ";
  size_t size, hlen = 56; /* 55 bytes of JSON padded with 1 space */
  CHECK(strlen(json) == hlen);
  uint8_t *raw = read_all(path, &size);
  CHECK(size == 8 + hlen + 8 && le64(raw) == hlen);
  CHECK(size == 8 + hlen + 8 && memcmp(raw + 8, json, hlen) == 0 && memcmp(raw + 8 + hlen, want, 8) == 0);
  free(raw);
  v[1] = 3.4e38f; /* finite in fp32, rounds past bf16's largest (3.3895e38) */
  CHECK(atoll_st_write_bf16(path, &tl.lay, v, NULL, &err) != 0 && strstr(err.msg, "beyond bf16's range"));
}

static void test_st_buffers(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  size_t n = tl.lay.nparams;
  float *m = malloc(n * 4), *v = malloc(n * 4), *m2 = malloc(n * 4), *v2 = malloc(n * 4);
  fill_random(m, n);
  fill_random(v, n);
  char path[512];
  path_in(path, sizeof path, "parts.safetensors");
  atoll_st_buffer parts[2] = {{"exp_avg.", m}, {"exp_avg_sq.", v}};
  CHECK_OK(atoll_st_write_buffers(path, &tl.lay, parts, 2, NULL, &err), &err);
  atoll_st_read_buffer rparts[2] = {{"exp_avg.", m2}, {"exp_avg_sq.", v2}};
  cJSON *meta = (cJSON *)1;
  CHECK_OK(atoll_st_read_buffers(path, &tl.lay, rparts, 2, &meta, &err), &err);
  CHECK(meta == NULL);
  CHECK(memcmp(m, m2, n * 4) == 0 && memcmp(v, v2, n * 4) == 0);
  /* The data section is the two buffers back to back. */
  size_t size;
  uint8_t *raw = read_all(path, &size);
  uint64_t hlen = le64(raw);
  CHECK(size == 8 + hlen + 2 * n * 4);
  CHECK(memcmp(raw + 8 + hlen, m, n * 4) == 0 && memcmp(raw + 8 + hlen + n * 4, v, n * 4) == 0);
  free(raw);
  /* Reading one half only: the other half's tensors are extra. */
  CHECK(atoll_st_read(path, &tl.lay, "exp_avg.", m2, NULL, &err) != 0);
  CHECK_MSG(err, path);
  CHECK_MSG(err, "extra tensor exp_avg_sq.");
  /* The same prefix twice is refused. */
  atoll_st_buffer same[2] = {{"x.", m}, {"x.", v}};
  CHECK(atoll_st_write_buffers(path, &tl.lay, same, 2, NULL, &err) != 0);
  CHECK_MSG(err, "given twice");
  free(m), free(v), free(m2), free(v2);
}

static void test_st_write_refusals(void) {
  test_layout tl;
  layout4(&tl);
  atoll_err err = {{0}};
  size_t n = tl.lay.nparams;
  float *a = calloc(n, 4);
  char path[512];
  path_in(path, sizeof path, "refuse.safetensors");
  a[tl.t[2].offset + 4] = NAN;
  CHECK(atoll_st_write(path, &tl.lay, "", a, NULL, &err) != 0);
  CHECK_MSG(err, "h.0.attn.qkv.weight");
  CHECK_MSG(err, "NaN");
  CHECK(!exists(path));
  a[tl.t[2].offset + 4] = 0;
  /* Metadata values must be strings. */
  cJSON *meta = cJSON_CreateObject();
  cJSON_AddNumberToObject(meta, "lr", 0.1);
  CHECK(atoll_st_write(path, &tl.lay, "", a, meta, &err) != 0);
  CHECK_MSG(err, "not a string");
  cJSON_Delete(meta);
  /* A layout with a gap is not a flat buffer. */
  tl.t[1].offset += 1;
  CHECK(atoll_st_write(path, &tl.lay, "", a, NULL, &err) != 0);
  CHECK_MSG(err, "not contiguous");
  tl.t[1].offset -= 1;
  /* An unwritable path. */
  CHECK(atoll_st_write("/nonexistent-dir/x.safetensors", &tl.lay, "", a, NULL, &err) != 0);
  CHECK_MSG(err, "/nonexistent-dir/x.safetensors");
  free(a);
}

/* ------------------------------------------------- safetensors: reading --- */

static const char *AB_GOOD = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}";

/* Writes header + data to bad.safetensors, reads it into layout_ab; it must fail
 * with a message naming the file and containing `keyword`. */
static void expect_read_fail(int line, const char *header, const float *data, size_t dsize,
                             const char *keyword) {
  test_layout tl;
  layout_ab(&tl);
  char path[512];
  path_in(path, sizeof path, "bad.safetensors");
  size_t size;
  uint8_t *buf = make_st(header, data, dsize, &size);
  write_bytes(path, buf, size);
  free(buf);
  float out[10];
  cJSON *meta = NULL;
  atoll_err err = {{0}};
  int rc = atoll_st_read(path, &tl.lay, "", out, &meta, &err);
  if (rc == 0 || !contains(err.msg, path) || !contains(err.msg, keyword) ||
      strchr(err.msg, '\n') || meta != NULL) {
    fprintf(stderr, "%s:%d: expected failure with \"%s\"; rc %d, message \"%s\"\n", __FILE__, line,
            keyword, rc, err.msg);
    check_failures++;
  }
  cJSON_Delete(meta);
}
#define EXPECT_READ_FAIL(h, d, n, kw) expect_read_fail(__LINE__, h, d, n, kw)

static void test_st_good_ab(void) {
  test_layout tl;
  layout_ab(&tl);
  float data[10], out[10];
  fill_pattern(data, 10);
  char path[512];
  path_in(path, sizeof path, "ab.safetensors");
  size_t size;
  uint8_t *buf = make_st(AB_GOOD, data, sizeof data, &size);
  write_bytes(path, buf, size);
  free(buf);
  atoll_err err = {{0}};
  /* A hand-made file with an unpadded header and no metadata reads fine. */
  CHECK_OK(atoll_st_read(path, &tl.lay, "", out, NULL, &err), &err);
  CHECK(memcmp(data, out, sizeof data) == 0);
  /* Tensor order in the file does not matter. */
  const char *swapped = "{\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[16,40]}}";
  float sw[10];
  memcpy(sw, data + 6, 16);
  memcpy(sw + 4, data, 24);
  buf = make_st(swapped, sw, sizeof sw, &size);
  write_bytes(path, buf, size);
  free(buf);
  memset(out, 0, sizeof out);
  CHECK_OK(atoll_st_read(path, &tl.lay, "", out, NULL, &err), &err);
  CHECK(memcmp(data, out, sizeof data) == 0);
}

static void test_st_malformed(void) {
  float d[12]; /* 40 bytes for a and b, plus some for the cases that need more */
  fill_pattern(d, 12);
  const size_t D = 40;
  /* Header JSON. */
  EXPECT_READ_FAIL("{\"a\":", d, D, "not valid JSON");
  EXPECT_READ_FAIL("[1, 2]", d, D, "not a JSON object");
  EXPECT_READ_FAIL("", d, D, "not valid JSON");
  EXPECT_READ_FAIL("{\"a\":\"\xff\xfe\"}", d, D, "UTF-8");
  /* Dtypes. */
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"Q4\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "unknown dtype Q4");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F16\",\"shape\":[2,6],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "tensor a has dtype F16, expected F32");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":3,\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "dtype is not a string");
  /* Missing fields and wrong types. */
  EXPECT_READ_FAIL("{\"a\":{\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "tensor a has no dtype");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "tensor a has no shape");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "tensor a has no data_offsets");
  EXPECT_READ_FAIL("{\"a\":[1],\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "tensor a: entry is not an object");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":\"2x3\",\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "shape is not an array");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "not a non-negative integer");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "not a non-negative integer");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                   "\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "overflows");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "not [begin, end]");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[24,0]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "begin 24 > end 0");
  /* Offsets that lie. */
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D - 4, "beyond the data section");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[20,40]}}",
                   d, D, "size mismatch");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[20,36]}}",
                   d, D, "overlap");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[28,44]}}",
                   d, D + 4, "hole");
  EXPECT_READ_FAIL(AB_GOOD, d, D + 4, "hole"); /* trailing bytes nobody owns */
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "duplicate tensor name a");
  /* Layout mismatches. */
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "tensor a has shape [3, 2], expected [2, 3]");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "tensor a has shape [6], expected [2, 3]");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}", d, 24,
                   "tensor b is missing");
  EXPECT_READ_FAIL("{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]},"
                   "\"c\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[40,44]}}",
                   d, D + 4, "extra tensor c");
  /* Metadata. */
  EXPECT_READ_FAIL("{\"__metadata__\":{\"k\":1},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "__metadata__ value of k is not a string");
  EXPECT_READ_FAIL("{\"__metadata__\":[],"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}",
                   d, D, "__metadata__ is not an object");
  /* Non-finite values. */
  float bad[10];
  memcpy(bad, d, sizeof bad);
  bad[7] = NAN;
  EXPECT_READ_FAIL(AB_GOOD, bad, D, "tensor b: element 1 is NaN");
  bad[7] = 1;
  bad[2] = -INFINITY;
  EXPECT_READ_FAIL(AB_GOOD, bad, D, "tensor a: element 2 is Inf");
}

static void test_st_header_length(void) {
  test_layout tl;
  layout_ab(&tl);
  float d[10] = {0}, out[10];
  char path[512];
  path_in(path, sizeof path, "len.safetensors");
  atoll_err err = {{0}};
  size_t size;
  uint8_t *buf = make_st(AB_GOOD, d, sizeof d, &size);
  /* Header length beyond the end of the file. */
  uint64_t n = size - 7;
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
  write_bytes(path, buf, size);
  CHECK(atoll_st_read(path, &tl.lay, "", out, NULL, &err) != 0);
  CHECK_MSG(err, path);
  CHECK_MSG(err, "beyond the end of the file");
  /* Absurd header length. */
  n = (uint64_t)1 << 40;
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
  write_bytes(path, buf, size);
  CHECK(atoll_st_read(path, &tl.lay, "", out, NULL, &err) != 0);
  CHECK_MSG(err, "absurd");
  /* Shorter than the length field, and empty. */
  write_bytes(path, buf, 5);
  CHECK(atoll_st_read(path, &tl.lay, "", out, NULL, &err) != 0);
  CHECK_MSG(err, "too short");
  write_bytes(path, buf, 0);
  CHECK(atoll_st_read(path, &tl.lay, "", out, NULL, &err) != 0);
  CHECK_MSG(err, "too short");
  free(buf);
  /* Missing file and directory. */
  CHECK(atoll_st_read(g_tmp, &tl.lay, "", out, NULL, &err) != 0);
  CHECK_MSG(err, "not a regular file");
  path_in(path, sizeof path, "nope.safetensors");
  CHECK(atoll_st_read(path, &tl.lay, "", out, NULL, &err) != 0);
  CHECK_MSG(err, "nope.safetensors: cannot open");
  /* A NUL byte inside the header. */
  buf = make_st(AB_GOOD, d, sizeof d, &size);
  buf[8 + 3] = 0;
  atoll_st_file f;
  CHECK(atoll_st_parse(buf, size, "nul", &f, &err) != 0);
  CHECK_MSG(err, "nul: header contains a NUL byte");
  free(buf);
}

/* Every proper prefix of a valid file must be rejected (and never crash; each copy
 * is its own allocation so that an overread is caught under ASan). */
static void test_st_truncated(void) {
  test_layout tl;
  layout4(&tl);
  size_t n = tl.lay.nparams;
  float *a = malloc(n * 4), *out = malloc(n * 4);
  fill_random(a, n);
  char path[512], cut[512];
  path_in(path, sizeof path, "full.safetensors");
  path_in(cut, sizeof cut, "cut.safetensors");
  atoll_err err = {{0}};
  cJSON *meta = cJSON_CreateObject();
  cJSON_AddStringToObject(meta, "k", "v");
  CHECK_OK(atoll_st_write(path, &tl.lay, "", a, meta, &err), &err);
  cJSON_Delete(meta);
  size_t size;
  uint8_t *raw = read_all(path, &size);
  int successes = 0, unnamed = 0;
  for (size_t len = 0; len < size; len++) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, raw, len);
    atoll_st_file f;
    if (atoll_st_parse(copy, len, "cut", &f, &err) == 0) {
      successes++;
      atoll_st_file_free(&f);
    } else if (!contains(err.msg, "cut: ")) {
      unnamed++;
    }
    free(copy);
    if (len % 13 == 0 || len + 8 > size) { /* through the file path too */
      write_bytes(cut, raw, len);
      if (atoll_st_read(cut, &tl.lay, "", out, NULL, &err) == 0) successes++;
      else if (!contains(err.msg, cut)) unnamed++;
    }
  }
  CHECK(successes == 0);
  CHECK(unnamed == 0);
  /* Near the end the message says why: the data section is short. */
  write_bytes(cut, raw, size - 1);
  CHECK(atoll_st_read(cut, &tl.lay, "", out, NULL, &err) != 0);
  CHECK_MSG(err, "beyond the data section");
  free(raw);
  free(a);
  free(out);
}

/* An independent reader (Python: struct + json + numpy) agrees with atoll_st_write. */
static void test_st_python(void) {
  if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    printf("note: /usr/bin/python3 with numpy not found; skipping the Python cross-check\n");
    return;
  }
  const char *src = getenv("ATOLL_SOURCE_DIR");
  char script[1024];
  if (src) {
    snprintf(script, sizeof script, "%s/tests/st_check.py", src);
  } else {
    snprintf(script, sizeof script, "%s", __FILE__);
    char *slash = strrchr(script, '/');
    if (slash) strcpy(slash + 1, "st_check.py");
  }
  if (!exists(script)) {
    printf("note: %s not found; skipping the Python cross-check\n", script);
    return;
  }
  test_layout tl;
  layout4(&tl);
  float *a = malloc(tl.lay.nparams * 4);
  fill_pattern(a, tl.lay.nparams);
  char path[512];
  atoll_err err = {{0}};
  path_in(path, sizeof path, "py.safetensors");
  cJSON *meta = cJSON_CreateObject();
  cJSON_AddStringToObject(meta, "format", "atoll");
  CHECK_OK(atoll_st_write(path, &tl.lay, "", a, meta, &err), &err);
  cJSON_Delete(meta);
  char cmd[4096];
  int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script, path);
  for (int i = 0; i < tl.lay.ntensors; i++) {
    const atoll_tensor *t = &tl.t[i];
    if (t->ndim == 1)
      len += snprintf(cmd + len, sizeof cmd - len, " '%s:%" PRId64 ":%zu'", t->name, t->shape[0],
                      t->offset);
    else
      len += snprintf(cmd + len, sizeof cmd - len, " '%s:%" PRId64 "x%" PRId64 ":%zu'", t->name,
                      t->shape[0], t->shape[1], t->offset);
  }
  fflush(stdout);
  CHECK(system(cmd) == 0);
  /* The checker itself notices a wrong value. */
  a[tl.t[1].offset + 2] += 1.0f;
  CHECK_OK(atoll_st_write(path, &tl.lay, "", a, NULL, &err), &err);
  strcat(cmd, " >/dev/null");
  CHECK(system(cmd) != 0);
  free(a);
}

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
  test_st_roundtrip();
  test_st_exact_bytes();
  test_st_bf16();
  test_st_buffers();
  test_st_write_refusals();
  test_st_good_ab();
  test_st_malformed();
  test_st_header_length();
  test_st_truncated();
  test_st_python();
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
