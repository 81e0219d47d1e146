/* atoll prepare: turns text into token files with the byte-level tokenizer
 * (token = byte value, vocabulary 256), or with a tokenizer.json (--tokenizer: its
 * ids, a copy of it in DIR, its kind and hash in the manifest).
 *
 * The inputs are the sources FILE_OR_DIR arguments stand for, read by
 * src/text/text_input.h (plain text, gzip, JSON Lines) in two streaming passes, so
 * memory stays bounded whatever their size: the first counts and checks every source
 * before anything is written, the second writes. Each source's last val_fraction of
 * bytes of text, moved forward to the start of the next line when there is one, goes
 * to the validation split and the rest to training; sources are concatenated in the
 * order given. Every split is written as DIR/<split>_000.bin, _001.bin, ... of at
 * most FILE_TOKENS tokens each, then DIR/manifest.json describes the result.
 *
 * A tokenizer encodes passages (docs/glossary.md), each as if alone: a source's
 * training part, its validation part, and with JSON Lines each document (its part on
 * each side of the cut). The reader's pieces end anywhere: a split holds the passage's
 * bytes it has not encoded yet and encodes up to a safe cut (atoll_tokenizer_cut)
 * once it holds over ENCODE_PIECE bytes, the rest when the passage ends. A tokenizer
 * whose post_processor puts special tokens around a text (TemplateProcessing: Llama's
 * BOS) gets them around each passage that holds text, as tokenizers' encode would.
 *
 * The whole set is written into DIR.atoll-new next to DIR and swapped in at the end
 * (rename with RENAME_EXCHANGE, then the old set removed), so a killed prepare leaves
 * either the old set or the new one, never a mix. DIR may only hold prepare's own
 * files, and no input may lie inside DIR. */
#define _GNU_SOURCE /* renameat2 */
#include "text/text_input.h"
#include "data/token_file.h"

#include "core/fs.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/text_pieces.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_TOKENS ((uint64_t)64 << 20) /* 64 Mi tokens per token file at most */
#define CHUNK 4096                         /* bytes converted to tokens per writer call */
#define ENCODE_PIECE ((size_t)1 << 20)     /* text encoded at once by a tokenizer (about) */

/* One source: what the first pass found, and where the second cut it. */
typedef struct {
  atoll_text_source in;
  uint64_t cut; /* [0, cut) of its text trains, [cut, text_bytes) validates */
  uint64_t train_tokens, val_tokens; /* its tokens in each split (a source's end ends a passage) */
} source;

/* One split being written: rolls over to a new token file every FILE_TOKENS tokens. */
typedef struct {
  const char *dir;
  const char *split;
  int nfiles;  /* token files started so far */
  int open;     /* whether w holds an unfinished token file */
  atoll_token_file_writer w;
  uint64_t tokens;
  atoll_tokenizer *tok; /* NULL: bytes */
  uint32_t vocab;
  atoll_tokens ids;     /* a piece's ids */
  atoll_text_pieces text; /* the current passage's bytes not encoded yet */
  int in_passage;         /* the passage's first bytes came (its template prefix went out) */
} split_out;

/* ------------------------------------------------------------- sources --- */

/* The first pass: every source scanned (and so checked) before anything is written;
 * *out holds n sources even on failure. */
static int scan_sources(source **out, const char *const *files, int nfiles, const char *field,
                        atoll_text_progress *pg, atoll_err *err) {
  *out = calloc((size_t)nfiles, sizeof **out);
  if (!*out) return atoll_fail(err, "prepare: out of memory");
  uint64_t total = 0;
  for (int i = 0; i < nfiles; i++) {
    if (atoll_text_scan(&(*out)[i].in, files[i], field, atoll_text_progress_add, pg, err) != 0)
      return -1;
    total += (*out)[i].in.text_bytes;
  }
  if (total == 0) return atoll_fail(err, "prepare: input is empty (%d file(s), 0 bytes)", nfiles);
  return 0;
}

/* ---------------------------------------------------------------- output --- */

/* Appends tokens (ids, or with bytes set, the byte values of bytes) to the split. */
static int split_put_tokens(split_out *o, const int32_t *ids, const uint8_t *bytes, size_t n, atoll_err *err) {
  int32_t tok[CHUNK];
  while (n > 0) {
    if (!o->open) {
      char path[1024];
      if (atoll_token_file_path(path, sizeof path, o->dir, o->split, o->nfiles, err) != 0) return -1;
      if (atoll_token_file_writer_open(&o->w, path, o->vocab, err) != 0) return -1;
      o->open = 1;
      o->nfiles++;
    }
    uint64_t room = FILE_TOKENS - o->w.ntokens;
    size_t take = n < CHUNK ? n : CHUNK;
    if (take > room) take = (size_t)room;
    if (bytes)
      for (size_t i = 0; i < take; i++) tok[i] = bytes[i];
    if (atoll_token_file_writer_put(&o->w, bytes ? tok : ids, take, err) != 0) {
      o->open = 0; /* the writer aborted itself */
      return -1;
    }
    o->tokens += take;
    if (bytes) bytes += take;
    else ids += take;
    n -= take;
    if (o->w.ntokens == FILE_TOKENS) {
      o->open = 0;
      if (atoll_token_file_writer_finish(&o->w, err) != 0) return -1;
    }
  }
  return 0;
}

/* A piece of the current passage (text_pieces.h), encoded and written. */
typedef struct {
  split_out *o;
  atoll_err *err;
} encode_ctx;

static int encode_piece(void *ctx, const uint8_t *text, size_t n) {
  encode_ctx *c = ctx;
  c->o->ids.n = 0;
  if (atoll_tokenizer_encode(c->o->tok, text, n, &c->o->ids, c->err) != 0 ||
      split_put_tokens(c->o, c->o->ids.ids, NULL, c->o->ids.n, c->err) != 0)
    return -1;
  return 0;
}

/* Appends n bytes of the current passage: bytes go out as they are; with a tokenizer
 * they are held, and encoded up to a safe cut once over ENCODE_PIECE bytes are held.
 * Text without a safe cut is held until one comes or the passage ends. */
static int split_put(split_out *o, const uint8_t *p, size_t n, atoll_err *err) {
  if (!o->tok) return split_put_tokens(o, NULL, p, n, err);
  if (n && !o->in_passage) { /* the template's ids before a text (BOS), as tokenizers' encode gives them */
    const int32_t *pre;
    int npre = atoll_tokenizer_prefix(o->tok, &pre);
    if (npre && split_put_tokens(o, pre, NULL, (size_t)npre, err) != 0) return -1;
    o->in_passage = 1;
  }
  encode_ctx c = {o, err};
  o->text.piece = ENCODE_PIECE;
  o->text.tok = o->tok;
  int rc = atoll_text_pieces_add(&o->text, p, n, encode_piece, &c);
  if (rc == -2) return atoll_fail(err, "prepare: out of memory holding %zu bytes of text to encode", o->text.n + n);
  return rc;
}

/* The current passage ends: what is held is encoded. */
static int split_end_passage(split_out *o, atoll_err *err) {
  encode_ctx c = {o, err};
  if (!o->tok || atoll_text_pieces_end(&o->text, encode_piece, &c) != 0) return o->tok ? -1 : 0;
  const int32_t *post;
  int npost = atoll_tokenizer_suffix(o->tok, &post), was = o->in_passage;
  o->in_passage = 0;
  return was && npost ? split_put_tokens(o, post, NULL, (size_t)npost, err) : 0;
}

static int split_finish(split_out *o, atoll_err *err) {
  if (!o->open) return 0;
  o->open = 0;
  return atoll_token_file_writer_finish(&o->w, err);
}

/* Sends one source's text to the splits: its last val_fraction of bytes, moved forward
 * to just after the next newline when there is one, to val, the rest to train. The
 * cut is found while streaming: the first pass told where the text's last newline is.
 * With a tokenizer, the cut, each JSON Lines document's end and the source's end end
 * a passage (the reader's pieces then stop at documents' ends). */
static int write_source(source *s, const char *field, double vf, split_out *train, split_out *val,
                        atoll_text_progress *pg, atoll_err *err) {
  uint64_t size = s->in.text_bytes, nval = (uint64_t)((double)size * vf);
  uint64_t nominal = size - nval, pos = 0;
  int seek_nl = 0, in_val = 0; /* past nominal, looking for a newline; cut found */
  uint8_t prev = 0;
  s->cut = size;
  atoll_text_reader *r = NULL;
  if (atoll_text_reader_open(&r, &s->in, field, err) != 0) return -1;
  int rc = 0;
  for (;;) {
    const uint8_t *p;
    size_t n;
    int doc_end = 0;
    rc = train->tok ? atoll_text_reader_next_doc(r, &p, &n, &doc_end, err) : atoll_text_reader_next(r, &p, &n, err);
    if (rc != 0) break;
    atoll_text_progress_add(pg, atoll_text_reader_take_read(r));
    atoll_text_progress_text(pg, n);
    if (n == 0 && !doc_end) break;
    while (n > 0 && rc == 0) {
      size_t take = n;
      if (in_val) {
        rc = split_put(val, p, n, err);
      } else if (seek_nl) {
        const uint8_t *nl = memchr(p, '\n', n);
        if (nl) take = (size_t)(nl - p) + 1, in_val = 1;
        rc = split_put(train, p, take, err);
      } else {
        if (take > nominal - pos) take = (size_t)(nominal - pos);
        rc = take ? split_put(train, p, take, err) : 0;
        if (take) prev = p[take - 1];
        if (pos + take == nominal && nval > 0) {
          /* at a line start already, or no newline left: cut here */
          if (prev == '\n' || s->in.newline_end <= nominal) in_val = 1;
          else seek_nl = 1;
        }
      }
      pos += take;
      if (in_val && s->cut == size) {
        s->cut = pos;
        if (rc == 0) rc = split_end_passage(train, err);
      }
      p += take;
      n -= take;
    }
    if (rc == 0 && doc_end) rc = split_end_passage(in_val ? val : train, err);
    if (rc != 0) break;
  }
  atoll_text_reader_close(r);
  if (rc == 0) rc = split_end_passage(train, err);
  if (rc == 0) rc = split_end_passage(val, err);
  return rc;
}

/* The second pass: each source streamed into both splits, in the order given. */
static int write_sources(source *src, int n, const char *field, double vf, split_out *train,
                         split_out *val, atoll_text_progress *pg, atoll_err *err) {
  pg->what = "writing";
  uint64_t nval = 0;
  for (int i = 0; i < n; i++) {
    uint64_t t0 = train->tokens, v0 = val->tokens;
    if (write_source(&src[i], field, vf, train, val, pg, err) != 0) return -1;
    src[i].train_tokens = train->tokens - t0;
    src[i].val_tokens = val->tokens - v0;
    nval += src[i].in.text_bytes - src[i].cut;
  }
  if (nval == 0) {
    uint64_t total = 0;
    int moved = 0; /* a source had a val part, which the move to a line break emptied */
    for (int i = 0; i < n; i++) {
      total += src[i].in.text_bytes;
      moved |= (uint64_t)((double)src[i].in.text_bytes * vf) > 0;
    }
    if (moved)
      return atoll_fail(err, "prepare: validation split would be empty: it starts after the first line break "
                        "in the last val_fraction %g of each input, and in this text (%" PRIu64 " bytes) that "
                        "line break is the last byte; add text with more lines", vf, total);
    return atoll_fail(err, "prepare: validation split would be empty (val_fraction %g of %" PRIu64 " bytes); %s",
                      vf, total, vf < 0.5 ? "raise val_fraction or add text" : "add text");
  }
  if (split_finish(train, err) != 0) return -1;
  return split_finish(val, err);
}

/* ------------------------------------------------------------- manifest --- */

/* "<split>_hashes": the hash of each token file as written, read back from disk. */
static int add_hashes(cJSON *root, const split_out *o, atoll_err *err) {
  char key[64], path[1024], hex[17];
  snprintf(key, sizeof key, "%s_hashes", o->split);
  cJSON *arr = cJSON_AddArrayToObject(root, key);
  if (!arr) return atoll_fail(err, "prepare: out of memory");
  for (int k = 0; k < o->nfiles; k++) {
    atoll_token_file tf;
    if (atoll_token_file_path(path, sizeof path, o->dir, o->split, k, err) != 0 ||
        atoll_token_file_open(&tf, path, err) != 0)
      return -1;
    snprintf(hex, sizeof hex, "%016" PRIx64, tf.hash);
    atoll_token_file_close(&tf);
    if (!cJSON_AddItemToArray(arr, cJSON_CreateString(hex)))
      return atoll_fail(err, "prepare: out of memory");
  }
  return 0;
}

static int add_source(cJSON *files, const source *s) {
  cJSON *f = cJSON_CreateObject();
  if (!f || !cJSON_AddItemToArray(files, f)) {
    cJSON_Delete(f);
    return -1;
  }
  const atoll_text_source *in = &s->in;
  int ok = cJSON_AddStringToObject(f, "path", in->path) &&
           cJSON_AddNumberToObject(f, "bytes", (double)in->text_bytes) &&
           cJSON_AddNumberToObject(f, "train_bytes", (double)s->cut) &&
           cJSON_AddNumberToObject(f, "val_bytes", (double)(in->text_bytes - s->cut)) &&
           cJSON_AddNumberToObject(f, "train_tokens", (double)s->train_tokens) &&
           cJSON_AddNumberToObject(f, "val_tokens", (double)s->val_tokens);
  /* plain text keeps the entry it always had */
  if (ok && atoll_text_source_streamed(in))
    ok = cJSON_AddStringToObject(f, "format", in->jsonl ? (in->gzip ? "jsonl+gzip" : "jsonl") : "gzip") &&
         cJSON_AddNumberToObject(f, "stored_bytes", (double)in->stored_bytes);
  if (ok && in->jsonl) ok = cJSON_AddNumberToObject(f, "documents", (double)in->documents) != NULL;
  return ok ? 0 : -1;
}

/* The bytes of text in the training (val 0) or validation split (val 1): what bits per
 * byte divide by. */
static uint64_t split_bytes(const source *src, int n, int val) {
  uint64_t b = 0;
  for (int i = 0; i < n; i++) b += val ? src[i].in.text_bytes - src[i].cut : src[i].cut;
  return b;
}

/* Fills root; -1 when an allocation failed (err is set by add_hashes only). */
static int manifest_fill(cJSON *root, const source *src, int n, double vf, const split_out *train,
                         const split_out *val, atoll_err *err) {
  char hash[17];
  if (train->tok) atoll_tokenizer_hash_hex(train->tok, hash);
  int ok = cJSON_AddNumberToObject(root, "version", 2) &&
           cJSON_AddStringToObject(root, "tokenizer", train->tok ? atoll_tokenizer_kind(train->tok) : "bytes") &&
           (!train->tok || cJSON_AddStringToObject(root, "tokenizer_hash", hash)) &&
           cJSON_AddNumberToObject(root, "vocab", train->vocab) &&
           cJSON_AddNumberToObject(root, "val_fraction", vf) &&
           cJSON_AddNumberToObject(root, "train_tokens", (double)train->tokens) &&
           cJSON_AddNumberToObject(root, "train_files", train->nfiles) &&
           cJSON_AddNumberToObject(root, "val_tokens", (double)val->tokens) &&
           cJSON_AddNumberToObject(root, "val_files", val->nfiles) &&
           cJSON_AddNumberToObject(root, "train_bytes", (double)split_bytes(src, n, 0)) &&
           cJSON_AddNumberToObject(root, "val_bytes", (double)split_bytes(src, n, 1));
  if (!ok) return atoll_fail(err, "prepare: out of memory");
  if (add_hashes(root, train, err) != 0 || add_hashes(root, val, err) != 0) return -1;
  cJSON *files = cJSON_AddArrayToObject(root, "sources");
  for (int i = 0; files && i < n; i++)
    if (add_source(files, &src[i]) != 0) files = NULL;
  return files ? 0 : atoll_fail(err, "prepare: out of memory");
}

/* Writes text to path atomically (path.tmp, fsync, rename). */
static int write_manifest(const char *dir, const source *src, int n, double vf,
                          const split_out *train, const split_out *val, atoll_err *err) {
  char path[1024];
  if (snprintf(path, sizeof path, "%s/manifest.json", dir) >= (int)sizeof path)
    return atoll_fail(err, "%.200s: path too long", dir);
  cJSON *root = cJSON_CreateObject();
  if (!root) return atoll_fail(err, "%s: out of memory", path);
  char *text = NULL;
  if (manifest_fill(root, src, n, vf, train, val, err) == 0) {
    text = cJSON_Print(root);
    if (!text) atoll_fail(err, "%s: out of memory", path);
  }
  cJSON_Delete(root);
  if (!text) return -1;
  int rc = atoll_write_file_atomic(path, text, strlen(text), err);
  cJSON_free(text);
  return rc;
}

/* Two prepares writing the same DIR would trip over each other's DIR.atoll-new: each
 * takes an exclusive lock on the directory that holds DIR (no file of its own to leave
 * behind) and waits for an earlier one to finish; then the later set replaces the
 * earlier, whole. Returns the locked descriptor, or -1 with err set. */
static int lock_parent(const char *out, atoll_err *err) {
  char parent[1000];
  atoll_parent_dir(out, parent, sizeof parent);
  if (atoll_mkdir_p(parent, err) != 0) return -1;
  int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return atoll_fail(err, "--out %s: cannot open %s: %s", out, parent, strerror(errno));
  while (flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    int why = errno;
    close(fd);
    return atoll_fail(err, "--out %s: cannot lock %s: %s", out, parent, strerror(why));
  }
  return fd;
}

/* ----------------------------------------------------------------- entry --- */

/* ------------------------------------------------------------ the swap --- */

/* Whether name is one prepare writes: train_NNN.bin, val_NNN.bin, manifest.json, or
 * one of those plus ".tmp", or the manifest's ".manifest.json.tmp-PID" (left by a
 * killed writer). */
static int is_prepare_output(const char *name) {
  /* ".NAME.tmp-PID": atoll_write_file_atomic's temporary, left by a killed writer */
  const char *t = name[0] == '.' ? strstr(name, ".tmp-") : NULL;
  if (t && t[5] && strspn(t + 5, "0123456789") == strlen(t + 5)) {
    char base[256];
    snprintf(base, sizeof base, "%.*s", (int)(t - name - 1), name + 1);
    return is_prepare_output(base);
  }
  size_t len = strlen(name);
  if (len > 4 && strcmp(name + len - 4, ".tmp") == 0) len -= 4;
  if (len == 13 && strncmp(name, "manifest.json", 13) == 0) return 1;
  if (len == 14 && strncmp(name, "tokenizer.json", 14) == 0) return 1;
  const char *rest = strncmp(name, "train_", 6) == 0 ? name + 6
                     : strncmp(name, "val_", 4) == 0  ? name + 4
                                                      : NULL;
  if (!rest) return 0;
  size_t digits = strspn(rest, "0123456789");
  return digits >= 3 && (size_t)(rest - name) + digits + 4 == len &&
         strncmp(rest + digits, ".bin", 4) == 0;
}

static int remove_entry(const char *dir, const char *name, atoll_err *err) {
  char path[2048];
  if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
    return atoll_fail(err, "%.200s: path too long", dir);
  if (unlink(path) != 0) return atoll_fail(err, "%s: cannot remove: %s", path, strerror(errno));
  return 0;
}

/* Checks that dir holds only prepare's files (a missing dir passes); with remove, then
 * deletes it. Anything else in it is refused, never deleted. */
static int clear_prepare_dir(const char *dir, int remove, atoll_err *err) {
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return 0;
    if (errno == ENOTDIR) return atoll_fail(err, "--out %s: exists and is not a directory", dir);
    return atoll_fail(err, "--out %s: cannot read: %s", dir, strerror(errno));
  }
  int rc = 0;
  for (struct dirent *e; rc == 0 && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (!is_prepare_output(e->d_name))
      rc = atoll_fail(err, "--out %s: holds %s, which atoll prepare did not write; choose an "
                      "empty directory or one that prepare made", dir, e->d_name);
    else if (remove)
      rc = remove_entry(dir, e->d_name, err);
  }
  closedir(d);
  if (rc == 0 && remove && rmdir(dir) != 0)
    return atoll_fail(err, "%s: cannot remove: %s", dir, strerror(errno));
  return rc;
}

/* An input inside --out would be read back as text by the next prepare of the same
 * directory (and be lost in the swap): refused. */
static int check_inputs_outside(const char *const *files, int n, const char *outdir,
                                atoll_err *err) {
  char *out = realpath(outdir, NULL);
  if (!out) return errno == ENOENT ? 0 : atoll_fail(err, "--out %s: %s", outdir, strerror(errno));
  size_t len = strlen(out);
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    char *in = realpath(files[i], NULL);
    if (in && strncmp(in, out, len) == 0 && (in[len] == '/' || len == 1))
      rc = atoll_fail(err, "--out %s: input %s lies inside it, so prepare would read its own "
                      "token files as text; choose an --out outside the --text directories",
                      outdir, files[i]);
    free(in);
  }
  free(out);
  return rc;
}

/* out = outdir without trailing slashes; tmp and old are the names next to it. */
static int out_names(const char *outdir, char *out, char *tmp, char *old, atoll_err *err) {
  size_t len = strlen(outdir);
  while (len > 1 && outdir[len - 1] == '/') len--;
  if (len >= 1000) return atoll_fail(err, "--out %.200s...: path too long", outdir);
  snprintf(out, 1000, "%.*s", (int)len, outdir);
  const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
  if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
    return atoll_fail(err, "--out %s: name the directory itself (not . or .. or /)", outdir);
  snprintf(tmp, 1040, "%s.atoll-new", out);
  snprintf(old, 1040, "%s.atoll-old", out);
  return 0;
}

/* Puts the finished set tmp at out: exchanged atomically with an existing set, which
 * is then removed, or renamed into place. Where the file system cannot exchange, two
 * renames: a kill between them leaves no out (training refuses to start) and the old
 * set at old, still never a mix. */
static int swap_in(const char *tmp, const char *out, const char *old, atoll_err *err) {
  if (atoll_fsync_path(tmp, O_DIRECTORY, err) != 0) return -1;
  struct stat st;
  if (stat(out, &st) != 0) {
    if (rename(tmp, out) != 0)
      return atoll_fail(err, "%s: cannot rename to %s: %s", tmp, out, strerror(errno));
  } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) == 0) {
    if (clear_prepare_dir(tmp, 1, err) != 0) return -1;
  } else if (errno == EINVAL || errno == ENOSYS) {
    if (rename(out, old) != 0 || rename(tmp, out) != 0)
      return atoll_fail(err, "--out %s: cannot swap in %s: %s", out, tmp, strerror(errno));
    if (clear_prepare_dir(old, 1, err) != 0) return -1;
  } else {
    return atoll_fail(err, "--out %s: cannot swap in %s: %s", out, tmp, strerror(errno));
  }
  return atoll_sync_parent_dir(out, err);
}

/* ----------------------------------------------------------------- entry --- */

static void split_free(split_out *o) {
  if (o->open) atoll_token_file_writer_abort(&o->w);
  atoll_tokens_free(&o->ids);
  atoll_text_pieces_free(&o->text);
}

static int write_set(const char *dir, source *src, int n, const char *field, double vf,
                     atoll_tokenizer *tok, atoll_text_progress *pg, atoll_err *err) {
  uint32_t vocab = tok ? (uint32_t)atoll_tokenizer_vocab(tok) : ATOLL_BYTE_VOCAB;
  split_out train = {.dir = dir, .split = "train", .tok = tok, .vocab = vocab};
  split_out val = {.dir = dir, .split = "val", .tok = tok, .vocab = vocab};
  char path[1100];
  if (tok && snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path)
    return atoll_fail(err, "%.200s: path too long", dir);
  int rc = -1;
  if (atoll_mkdir_p(dir, err) == 0 && write_sources(src, n, field, vf, &train, &val, pg, err) == 0 &&
      (!tok || atoll_tokenizer_write_json(tok, path, err) == 0))
    rc = write_manifest(dir, src, n, vf, &train, &val, err);
  split_free(&train);
  split_free(&val);
  return rc;
}

/* Reads the sources (first pass), writes the set into tmp (second) and swaps it in. */
static int prepare_locked(const char *const *files, int nfiles, const atoll_prepare_input *in,
                          const char *out, const char *tmp, const char *old, double vf,
                          atoll_tokenizer *tok, atoll_err *err) {
  if (clear_prepare_dir(out, 0, err) != 0 || clear_prepare_dir(tmp, 1, err) != 0 ||
      clear_prepare_dir(old, 1, err) != 0)
    return -1;
  const char *field = in && in->jsonl_field ? in->jsonl_field : "text";
  uint64_t work = 0;
  for (int i = 0; i < nfiles; i++) work += atoll_text_work_bytes(files[i]);
  atoll_text_progress pg;
  atoll_text_progress_start(&pg, in && in->progress, work);
  source *src = NULL;
  int rc = scan_sources(&src, files, nfiles, field, &pg, err);
  if (rc == 0) rc = write_set(tmp, src, nfiles, field, vf, tok, &pg, err);
  if (rc == 0) rc = swap_in(tmp, out, old, err);
  if (rc != 0) clear_prepare_dir(tmp, 1, NULL); /* a partial set; the old one is untouched */
  atoll_text_progress_end(&pg, rc == 0);
  free(src);
  return rc;
}

int atoll_prepare_inputs(const char *const *paths, int npaths, const atoll_prepare_input *in,
                         const char *outdir, double val_fraction, atoll_err *err) {
  if (!(val_fraction > 0.0 && val_fraction <= 0.5)) /* also rejects NaN */
    return atoll_fail(err, "prepare: val_fraction %g outside (0, 0.5]: training needs a validation split", val_fraction);
  if (npaths <= 0) return atoll_fail(err, "prepare: no input files");
  char out[1000], tmp[1040], old[1040];
  if (out_names(outdir, out, tmp, old, err) != 0 || check_inputs_outside(paths, npaths, out, err))
    return -1;
  atoll_tokenizer *tok = NULL;
  if (in && in->tokenizer && atoll_tokenizer_load(&tok, in->tokenizer, err) != 0) return -1;
  atoll_text_list files = {0};
  int rc = atoll_text_list_expand(&files, paths, npaths, out, err);
  if (rc == 0) rc = check_inputs_outside((const char *const *)files.paths, files.n, out, err);
  int lock = rc == 0 ? lock_parent(out, err) : -1;
  if (lock >= 0) {
    rc = prepare_locked((const char *const *)files.paths, files.n, in, out, tmp, old, val_fraction, tok,
                        err);
    close(lock); /* releases the lock */
  } else {
    rc = -1;
  }
  if (rc == 0 && in && in->nfiles_read) *in->nfiles_read = files.n;
  atoll_text_list_free(&files);
  atoll_tokenizer_free(tok);
  return rc;
}

int atoll_prepare(const char *const *files, int nfiles, const char *outdir, double val_fraction,
                  atoll_err *err) {
  for (int i = 0; i < nfiles; i++) { /* files only, as this function always took */
    struct stat st;
    if (stat(files[i], &st) == 0 && S_ISDIR(st.st_mode))
      return atoll_fail(err, "%s: is a directory, expected a text file", files[i]);
  }
  return atoll_prepare_inputs(files, nfiles, NULL, outdir, val_fraction, err);
}
