/* Tests for src/ckpt's safetensors files: writing (exact bytes, BF16, several buffers,
 * refusals), reading, every malformed header and truncated file rejected with its
 * message, and Python's safetensors reading what atoll writes. Layouts are built by
 * hand (tests/ckpt_fixture.h); checkpoint directories are test_ckpt.c. */
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

int main(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/atoll_test_safetensors_XXXXXX");
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
  rm_rf(g_tmp);
  CHECK_DONE();
}
