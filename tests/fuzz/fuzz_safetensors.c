/* libFuzzer target: atoll_st_parse on arbitrary bytes must either fail with a one-line
 * message naming the file, or succeed with tensors that lie inside the input and
 * tile the data section. The same bytes as a sharded checkpoint's
 * model.safetensors.index.json (atoll_hf_index_parse, src/ckpt/hf_index.c): a one-line
 * failure and an empty index, or an index whose every tensor maps to one of its shards,
 * each a plain *.safetensors file name. Built by tests/fuzz/run_fuzz.sh. */
#include "ckpt/hf.h"
#include "ckpt/safetensors.h"

#include <stdlib.h>
#include <string.h>

static void check_parsed(const atoll_st_file *f, const uint8_t *buf, size_t size) {
  uint64_t covered = 0;
  if (f->data < buf || f->data_size > size || f->data + f->data_size != buf + size) abort();
  for (int i = 0; i < f->ntensors; i++) {
    const atoll_st_tensor *t = &f->tensors[i];
    uint64_t nbytes = t->end - t->begin;
    if (t->begin > t->end || t->end > f->data_size || t->data != f->data + t->begin) abort();
    if (nbytes != t->numel * atoll_st_dtype_size(t->dtype) || !atoll_st_dtype_name(t->dtype)) abort();
    if (!t->name || atoll_st_file_find(f, t->name) != t) abort();
    if (nbytes) { /* touch both ends so that ASan checks the range */
      volatile uint8_t first = t->data[0], last = t->data[nbytes - 1];
      (void)first, (void)last;
    }
    covered += nbytes;
  }
  if (covered != f->data_size) abort();
}

static void check_index(const uint8_t *data, size_t size) {
  atoll_hf_index x;
  atoll_err err;
  memset(&err, 0, sizeof err);
  if (atoll_hf_index_parse((const char *)data, size, "fuzz", &x, &err) != 0) {
    if (strncmp(err.msg, "fuzz: ", 6) != 0 || x.json || x.nnames || x.nshards || x.names) abort();
    return;
  }
  if (x.nnames < 1 || x.nshards < 1 || x.nshards > x.nnames) abort();
  for (int i = 0; i < x.nshards; i++) {
    size_t n = strlen(x.shards[i]);
    if (n < 13 || strchr(x.shards[i], '/') || strcmp(x.shards[i] + n - 12, ".safetensors") != 0) abort();
  }
  for (int i = 0; i < x.nnames; i++)
    if (x.shard_of[i] < 0 || x.shard_of[i] >= x.nshards || atoll_hf_index_find(&x, x.names[i]) != x.shard_of[i])
      abort();
  atoll_hf_index_free(&x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_index(data, size);
  atoll_st_file f;
  atoll_err err;
  memset(&err, 0, sizeof err);
  if (atoll_st_parse(data, size, "fuzz", &f, &err) == 0) {
    check_parsed(&f, data, size);
    atoll_st_file_free(&f);
  } else if (strncmp(err.msg, "fuzz: ", 6) != 0 || f.ntensors != 0 || f.header != NULL) {
    abort();
  }
  return 0;
}
