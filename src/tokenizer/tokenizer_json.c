/* Hugging Face tokenizer.json, read and written (docs/formats.md, "Tokenizers"):
 * model BPE (vocab: symbol string -> id, merges: "left right"), ByteLevel
 * pre-tokenizer (add_prefix_space false, use_regex true) and decoder. Token strings
 * are written in ByteLevel's alphabet: each byte one code point (atoll_byte_symbol).
 * Other pipelines (pipeline.c) are read, and written back as cJSON prints what it read. */
#include "core/fs.h"
#include "core/json_text.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE ((size_t)1 << 30)

/* ------------------------------------------------------------------ write --- */

/* The token's bytes as a string of ByteLevel symbols (UTF-8, NUL-terminated). */
static void symbols(const uint8_t *b, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t cp = atoll_byte_symbol(b[i]);
    if (cp < 0x80) {
      out[k++] = (char)cp;
    } else {
      out[k++] = (char)(0xC0 | (cp >> 6));
      out[k++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  out[k] = 0;
}

static cJSON *byte_level(int prefix) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "type", "ByteLevel");
  cJSON_AddBoolToObject(o, "add_prefix_space", prefix);
  cJSON_AddBoolToObject(o, "trim_offsets", 1);
  cJSON_AddBoolToObject(o, "use_regex", 1);
  return o;
}

/* "added_tokens" in Hugging Face's form; NULL when out of memory. */
static cJSON *add_added(cJSON *root, const atoll_tokenizer *t) {
  cJSON *arr = cJSON_AddArrayToObject(root, "added_tokens");
  for (int k = 0; arr && k < t->nadded; k++) {
    const atoll_added_token *a = &t->added[k];
    char *text = malloc((size_t)a->len + 1);
    cJSON *o = cJSON_CreateObject();
    if (!text || !o || !cJSON_AddItemToArray(arr, o)) {
      free(text);
      cJSON_Delete(o);
      return NULL;
    }
    memcpy(text, t->added_bytes + a->off, a->len);
    text[a->len] = 0;
    int ok = cJSON_AddNumberToObject(o, "id", a->id) && cJSON_AddStringToObject(o, "content", text) &&
             cJSON_AddBoolToObject(o, "single_word", 0) && cJSON_AddBoolToObject(o, "lstrip", 0) &&
             cJSON_AddBoolToObject(o, "rstrip", 0) && cJSON_AddBoolToObject(o, "normalized", a->normalized) &&
             cJSON_AddBoolToObject(o, "special", a->special);
    free(text);
    if (!ok) return NULL;
  }
  return arr;
}

char *atoll_tokenizer_to_json(const atoll_tokenizer *t) {
  if (t->json) { /* a pipeline atoll does not write: the file as it was read */
    char *copy = malloc(t->json_len + 1);
    if (copy) memcpy(copy, t->json, t->json_len), copy[t->json_len] = 0;
    return copy;
  }
  size_t longest = 0;
  for (int i = 0; i < t->vocab; i++)
    if (t->tok_off[i + 1] - t->tok_off[i] > longest) longest = t->tok_off[i + 1] - t->tok_off[i];
  char *a = malloc(4 * longest + 8), *b = malloc(4 * longest + 8), *pair = malloc(8 * longest + 16);
  cJSON *root = cJSON_CreateObject(), *model = NULL, *vocab = NULL, *merges = NULL;
  char *text = NULL;
  if (!a || !b || !pair || !root) goto done;
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  if (!add_added(root, t)) goto done;
  cJSON_AddNullToObject(root, "normalizer");
  cJSON_AddItemToObject(root, "pre_tokenizer", byte_level(0));
  cJSON_AddNullToObject(root, "post_processor");
  cJSON_AddItemToObject(root, "decoder", byte_level(1));
  model = cJSON_AddObjectToObject(root, "model");
  if (!model) goto done;
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddNullToObject(model, "unk_token");
  cJSON_AddNullToObject(model, "continuing_subword_prefix");
  cJSON_AddNullToObject(model, "end_of_word_suffix");
  cJSON_AddBoolToObject(model, "fuse_unk", 0);
  cJSON_AddBoolToObject(model, "byte_fallback", 0);
  cJSON_AddBoolToObject(model, "ignore_merges", 0);
  vocab = cJSON_AddObjectToObject(model, "vocab");
  merges = cJSON_AddArrayToObject(model, "merges");
  if (!vocab || !merges) goto done;
  for (int i = 0; i < t->model_vocab; i++) {
    symbols(t->tok_bytes + t->tok_off[i], t->tok_off[i + 1] - t->tok_off[i], a);
    if (!cJSON_AddNumberToObject(vocab, a, i)) goto done;
  }
  for (int r = 0; r < t->nmerges; r++) {
    int32_t l = t->merge_left[r], rr = t->merge_right[r];
    symbols(t->tok_bytes + t->tok_off[l], t->tok_off[l + 1] - t->tok_off[l], a);
    symbols(t->tok_bytes + t->tok_off[rr], t->tok_off[rr + 1] - t->tok_off[rr], b);
    snprintf(pair, 8 * longest + 16, "%s %s", a, b);
    if (!cJSON_AddItemToArray(merges, cJSON_CreateString(pair))) goto done;
  }
  text = cJSON_PrintBuffered(root, (int)(64 + 32 * (size_t)t->vocab), 1);
done:
  cJSON_Delete(root);
  free(a);
  free(b);
  free(pair);
  return text;
}

int atoll_tokenizer_write_json(const atoll_tokenizer *t, const char *path, atoll_err *err) {
  char *text = atoll_tokenizer_to_json(t);
  if (!text) return atoll_fail(err, "%s: out of memory", path);
  int rc = atoll_write_file_atomic(path, text, strlen(text), err);
  free(text);
  return rc;
}

/* ------------------------------------------------------------------- read --- */

/* A ByteLevel symbol string to bytes; -1 when a character is not a byte's symbol. */
long atoll_symbols_to_bytes(const char *s, uint8_t *out) {
  size_t n = strlen(s), k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    i += (size_t)atoll_utf8_next((const uint8_t *)s + i, n - i, &cp);
    int b = cp == 0xFFFFFFFFu ? -1 : atoll_symbol_byte(cp);
    if (b < 0) return -1;
    out[k++] = (uint8_t)b;
  }
  return (long)k;
}

/* s for a one-line message: at most 40 bytes, control bytes as \xNN. */
const char *atoll_tok_quote(const char *s, char out[200]) {
  size_t k = 0;
  for (size_t i = 0; s[i] && i < 40; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c == 0x7F) k += (size_t)snprintf(out + k, 5, "\\x%02X", c);
    else out[k++] = (char)c;
  }
  if (strlen(s) > 40) k += (size_t)snprintf(out + k, 4, "...");
  out[k] = 0;
  return out;
}

static int is_null_or_absent(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return !v || cJSON_IsNull(v);
}

static int is_false_or_absent(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return !v || cJSON_IsNull(v) || cJSON_IsFalse(v);
}

static int empty_or_absent(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && !v->valuestring[0]);
}

static int is_type(const cJSON *o, const char *type) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "type");
  return cJSON_IsObject(o) && cJSON_IsString(v) && strcmp(v->valuestring, type) == 0;
}

/* The model's options; the pipeline around it is pipeline.c's. */
static int check_model(const cJSON *root, const char *name, atoll_err *err) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsObject(model)) return atoll_fail(err, "%s: model: missing or not an object", name);
  if (!is_type(model, "BPE")) return atoll_fail(err, "%s: model: type must be \"BPE\"", name);
  if (!is_null_or_absent(model, "dropout")) return atoll_fail(err, "%s: model: dropout must be null", name);
  if (!empty_or_absent(model, "continuing_subword_prefix") || !empty_or_absent(model, "end_of_word_suffix"))
    return atoll_fail(err, "%s: model: continuing_subword_prefix and end_of_word_suffix must be null", name);
  return 0;
}

/* GPT-2's pipeline (t->pipe NULL): ByteLevel pre-tokenizer (checked by pipeline.c),
 * post_processor and decoder null or ByteLevel, no byte fallback, no unk_token. */
static int check_gpt2(const cJSON *root, const char *name, atoll_err *err) {
  const cJSON *post = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
  if (post && !cJSON_IsNull(post) && !is_type(post, "ByteLevel") && !is_type(post, "TemplateProcessing") &&
      !is_type(post, "Sequence"))
    return atoll_fail(err, "%s: post_processor: type must be ByteLevel, TemplateProcessing or a Sequence of those", name);
  const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
  if (dec && !cJSON_IsNull(dec) && !is_type(dec, "ByteLevel"))
    return atoll_fail(err, "%s: decoder: must be null or ByteLevel", name);
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!is_null_or_absent(model, "unk_token")) return atoll_fail(err, "%s: model: unk_token must be null", name);
  if (!is_false_or_absent(model, "byte_fallback"))
    return atoll_fail(err, "%s: model: byte_fallback must be false with a ByteLevel pre-tokenizer", name);
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  if (!cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space")))
    return atoll_fail(err, "%s: pre_tokenizer: add_prefix_space must be false", name);
  const cJSON *regex = cJSON_GetObjectItemCaseSensitive(pre, "use_regex");
  if (regex && !cJSON_IsTrue(regex)) return atoll_fail(err, "%s: pre_tokenizer: use_regex must be true", name);
  return 0;
}

static int read_vocab(atoll_tokenizer *t, const cJSON *vocab, atoll_bytemap *map, const char *name,
                      atoll_err *err) {
  if (!cJSON_IsObject(vocab)) return atoll_fail(err, "%s: model.vocab: missing or not an object", name);
  int n = cJSON_GetArraySize(vocab);
  if (n < 256 || n > ATOLL_TOKENIZER_MAX_VOCAB)
    return atoll_fail(err, "%s: model.vocab: %d tokens, expected 256 to %d", name, n, ATOLL_TOKENIZER_MAX_VOCAB);
  size_t total = 0;
  int chars = t->pipe && !t->pipe->byte_level;
  for (const cJSON *e = vocab->child; e; e = e->next) total += strlen(e->string);
  t->vocab = n;
  t->model_vocab = n;
  t->tok_off = calloc((size_t)n + 1, sizeof *t->tok_off);
  t->tok_bytes = malloc(total + 1);
  uint32_t *len = calloc((size_t)n, sizeof *len);
  uint8_t *buf = malloc(total + 1);
  int rc = -1;
  if (!t->tok_off || !t->tok_bytes || !len || !buf || total > UINT32_MAX) {
    atoll_fail(err, "%s: out of memory", name);
    goto done;
  }
  const cJSON *e;
  char q[200];
  /* ids first (lengths), then offsets in id order, then bytes */
  for (e = vocab->child; e; e = e->next) {
    double id = e->valuedouble;
    if (!cJSON_IsNumber(e) || !(id >= 0 && id < n) || id != (double)(int)id) {
      atoll_fail(err, "%s: model.vocab: token \"%s\" has id %s, expected an integer in [0, %d)", name,
                 atoll_tok_quote(e->string, q), cJSON_IsNumber(e) ? "out of range" : "that is not a number", n);
      goto done;
    }
    long k = chars ? (long)strlen(e->string) : atoll_symbols_to_bytes(e->string, buf);
    if (k <= 0) {
      atoll_fail(err, "%s: model.vocab: token %d \"%s\" is %s", name, (int)id, atoll_tok_quote(e->string, q),
                 k == 0 ? "empty" : "not made of byte-level symbols");
      goto done;
    }
    if (len[(int)id]) {
      atoll_fail(err, "%s: model.vocab: id %d is given to two tokens", name, (int)id);
      goto done;
    }
    len[(int)id] = (uint32_t)k;
  }
  for (int i = 0; i < n; i++) t->tok_off[i + 1] = t->tok_off[i] + len[i];
  for (e = vocab->child; e; e = e->next) {
    int id = (int)e->valuedouble;
    if (chars) memcpy(t->tok_bytes + t->tok_off[id], e->string, len[id]);
    else atoll_symbols_to_bytes(e->string, t->tok_bytes + t->tok_off[id]);
    int added;
    int64_t m = atoll_bytemap_put(map, t->tok_bytes + t->tok_off[id], len[id],
                                  atoll_bytes_hash(t->tok_bytes + t->tok_off[id], len[id]), id, &added);
    if (m < 0) {
      atoll_fail(err, "%s: out of memory", name);
      goto done;
    }
    if (!added) {
      atoll_fail(err, "%s: model.vocab: token \"%s\" is listed twice (ids %d and %d)", name, atoll_tok_quote(e->string, q),
                 (int)map->val[m], id);
      goto done;
    }
  }
  rc = 0;
done:
  free(len);
  free(buf);
  return rc;
}

/* One merge's two token strings: "left right" or ["left", "right"]. */
static int merge_parts(const cJSON *m, char *tmp, size_t tmpsz, const char **l, const char **r) {
  if (cJSON_IsString(m)) {
    const char *sp = strchr(m->valuestring, ' ');
    size_t len = strlen(m->valuestring);
    if (!sp || strchr(sp + 1, ' ') || len >= tmpsz) return -1;
    memcpy(tmp, m->valuestring, len + 1);
    tmp[sp - m->valuestring] = 0;
    *l = tmp;
    *r = tmp + (sp - m->valuestring) + 1;
    return 0;
  }
  if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
      cJSON_IsString(m->child->next)) {
    *l = m->child->valuestring;
    *r = m->child->next->valuestring;
    return 0;
  }
  return -1;
}

/* The id of the token spelled s; -1 when there is none. buf (cap bytes) takes its
 * bytes, one per character of s at most: a longer s is no token (the array form of a
 * merge hands over the file's strings, of any length). */
static int lookup(const atoll_bytemap *map, int chars, const char *s, uint8_t *buf, size_t cap) {
  if (strlen(s) > cap) return -1;
  long k = chars ? (long)strlen(s) : atoll_symbols_to_bytes(s, buf);
  if (chars) memcpy(buf, s, (size_t)k);
  if (k <= 0) return -1;
  int64_t e = atoll_bytemap_find(map, buf, (size_t)k, atoll_bytes_hash(buf, (size_t)k));
  return e < 0 ? -1 : (int)map->val[e];
}

static int read_merges(atoll_tokenizer *t, const cJSON *merges, const atoll_bytemap *map,
                       const char *name, atoll_err *err) {
  if (!cJSON_IsArray(merges)) return atoll_fail(err, "%s: model.merges: missing or not an array", name);
  int n = cJSON_GetArraySize(merges);
  size_t longest = 0;
  for (int i = 0; i < t->vocab; i++)
    if (t->tok_off[i + 1] - t->tok_off[i] > longest) longest = t->tok_off[i + 1] - t->tok_off[i];
  size_t bufsz = 8 * longest + 16;
  char *tmp = malloc(bufsz);
  uint8_t *buf = malloc(bufsz);
  t->nmerges = n;
  t->merge_left = malloc(((size_t)n + 1) * sizeof(int32_t));
  t->merge_right = malloc(((size_t)n + 1) * sizeof(int32_t));
  t->merge_result = malloc(((size_t)n + 1) * sizeof(int32_t));
  int rc = -1, r = 0;
  if (!tmp || !buf || !t->merge_left || !t->merge_right || !t->merge_result) {
    atoll_fail(err, "%s: out of memory", name);
    goto done;
  }
  for (const cJSON *m = merges->child; m; m = m->next, r++) {
    const char *ls, *rs;
    if (merge_parts(m, tmp, bufsz, &ls, &rs) != 0) {
      atoll_fail(err, "%s: model.merges: merge %d is not \"left right\" or [\"left\", \"right\"] of known tokens", name, r);
      goto done;
    }
    int chars = t->pipe && !t->pipe->byte_level;
    int li = lookup(map, chars, ls, buf, bufsz), ri = lookup(map, chars, rs, buf, bufsz);
    if (li < 0 || ri < 0) {
      atoll_fail(err, "%s: model.merges: merge %d names a token that is not in the vocabulary", name, r);
      goto done;
    }
    size_t ll = t->tok_off[li + 1] - t->tok_off[li], rl = t->tok_off[ri + 1] - t->tok_off[ri];
    memcpy(buf, t->tok_bytes + t->tok_off[li], ll);
    memcpy(buf + ll, t->tok_bytes + t->tok_off[ri], rl);
    int64_t e = atoll_bytemap_find(map, buf, ll + rl, atoll_bytes_hash(buf, ll + rl));
    if (e < 0) {
      atoll_fail(err, "%s: model.merges: merge %d makes a token that is not in the vocabulary", name, r);
      goto done;
    }
    t->merge_left[r] = li;
    t->merge_right[r] = ri;
    t->merge_result[r] = (int32_t)map->val[e];
  }
  rc = 0;
done:
  free(tmp);
  free(buf);
  return rc;
}

/* Refuses what cJSON would read into a string other than tokenizers does: a raw
 * control byte (JSON requires it escaped; cJSON keeps it, and a NUL cuts the C string
 * short) and the escape \u0000 (cJSON ends the string there, so a token "a\u0000b"
 * would silently be read as "a"). Scans strings only: elsewhere such bytes are not
 * JSON, and the parser refuses them. */
static int check_strings(const char *text, size_t len, const char *name, atoll_err *err) {
  int in = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)text[i];
    if (!in) {
      in = c == '"';
    } else if (c < 0x20) {
      return atoll_fail(err, "%s: byte %zu: raw control byte 0x%02X inside a string (JSON needs it escaped)", name,
                        i, c);
    } else if (c == '"') {
      in = 0;
    } else if (c == '\\') {
      if (i + 6 <= len && memcmp(text + i, "\\u0000", 6) == 0)
        return atoll_fail(err, "%s: byte %zu: a string holds \\u0000 (NUL): not supported (byte 0 is spelled "
                          "\"\u0100\" in byte-level symbols)", name, i);
      i++; /* the escaped character does not end the string */
    }
  }
  return 0;
}

int atoll_tokenizer_parse(atoll_tokenizer **out, const char *text, size_t len, const char *name,
                          atoll_err *err) {
  *out = NULL;
  if (check_strings(text, len, name, err)) return -1;
  atoll_err why;
  cJSON *root = atoll_json_parse_whole(text, len, name, &why);
  if (!root) return atoll_fail(err, "%s (a tokenizer.json was expected)", why.msg);
  if (atoll_json_unique_keys(root, name, err)) {
    cJSON_Delete(root);
    return -1;
  }
  atoll_tokenizer *t = calloc(1, sizeof *t);
  atoll_bytemap map = {0};
  int rc = -1;
  if (!t) {
    atoll_fail(err, "%s: out of memory", name);
  } else if (!cJSON_IsObject(root)) {
    atoll_fail(err, "%s: not a JSON object (a tokenizer.json was expected)", name);
  } else if (check_model(root, name, err) == 0 && atoll_pipeline_read(t, root, name, err) == 0 &&
             (t->pipe || check_gpt2(root, name, err) == 0)) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (read_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), &map, name, err) == 0 &&
        read_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"), &map, name, err) == 0 &&
        atoll_added_tokens_read(t, root, &map, name, err) == 0 && atoll_pipeline_post(t, root, name, err) == 0 &&
        (!t->pipe || atoll_pipe_vocab(t, &map, root, len, name, err) == 0) && atoll_tokenizer_finish(t, name, err) == 0)
      rc = 0;
  }
  cJSON_Delete(root);
  atoll_bytemap_free(&map); /* (a pipeline's was moved into t) */
  if (rc != 0) {
    atoll_tokenizer_free(t);
    return -1;
  }
  *out = t;
  return 0;
}

int atoll_tokenizer_load(atoll_tokenizer **out, const char *path, atoll_err *err) {
  *out = NULL;
  char *text = NULL;
  size_t len = 0;
  struct stat st; /* a FIFO would block the open for ever */
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    return atoll_fail(err, "%s: not a regular file (a tokenizer.json was expected)", path);
  if (atoll_read_file(path, MAX_FILE, &text, &len, err) != 0) return -1;
  int rc = atoll_tokenizer_parse(out, text, len, path, err);
  free(text);
  return rc;
}
