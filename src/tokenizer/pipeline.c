/* tokenizer.json's pipeline around the BPE model (pipeline.h), read and checked: what
 * atoll does not implement exactly as Hugging Face's tokenizers does is refused with
 * one line naming the component. Supported:
 *   normalizer     null; Prepend; Replace with a {"String": ...} pattern; NFC; a Sequence of those
 *   pre_tokenizer  ByteLevel (add_prefix_space false); a Sequence of Splits (pattern
 *                  {"Regex"} or {"String"}, behavior Isolated, invert false) then
 *                  ByteLevel with use_regex false; Metaspace; null
 *   model          BPE; without ByteLevel, byte_fallback true with all 256 <0xNN> tokens
 *   decoder        ByteLevel with a ByteLevel pre-tokenizer; else a Sequence of Replace
 *                  and ByteFallback, then Fuse, then Strip (content " ", stop 0)
 *   post_processor null, ByteLevel, TemplateProcessing (special tokens around $A), a
 *                  Sequence of those. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer_internal.h"

#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *item(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static const char *type_of(const cJSON *o) {
  const cJSON *v = item(o, "type");
  if (!cJSON_IsObject(o) || !cJSON_IsString(v)) return NULL;
  for (const char *c = v->valuestring; *c; c++) /* no type has one; and error lines stay one line */
    if ((unsigned char)*c < 0x20) return "(a name with control characters)";
  return v->valuestring;
}

static int is_null(const cJSON *o) { return !o || cJSON_IsNull(o); }

/* A {"String": s} pattern's text; NULL for anything else. */
static const char *string_pattern(const cJSON *o, const char *key) {
  const cJSON *p = item(o, key), *s = item(p, "String");
  return cJSON_IsObject(p) && cJSON_IsString(s) && s->valuestring[0] ? s->valuestring : NULL;
}

static int edit_set(atoll_pipe_edit *e, const char *from, const char *to, int prepend) {
  e->nfrom = from ? strlen(from) : 0;
  e->nto = to ? strlen(to) : 0;
  e->from = from ? (uint8_t *)strdup(from) : NULL;
  e->to = to ? (uint8_t *)strdup(to) : NULL;
  e->prepend = prepend;
  return (from && !e->from) || (to && !e->to) ? -1 : 0;
}

static int read_normalizer(atoll_pipeline *p, const cJSON *n, const char *name, atoll_err *err) {
  const char *type = type_of(n);
  if (!type) return atoll_fail(err, "%s: normalizer: not an object with a \"type\"", name);
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = item(n, "normalizers");
    if (!cJSON_IsArray(list)) return atoll_fail(err, "%s: normalizer: Sequence without a \"normalizers\" array", name);
    for (const cJSON *e = list->child; e; e = e->next)
      if (read_normalizer(p, e, name, err)) return -1;
    return 0;
  }
  if (p->nnorm == ATOLL_PIPE_MAX) return atoll_fail(err, "%s: normalizer: more than %d steps", name, ATOLL_PIPE_MAX);
  atoll_pipe_edit *e = &p->norm[p->nnorm];
  if (strcmp(type, "Prepend") == 0) {
    const cJSON *s = item(n, "prepend");
    if (!cJSON_IsString(s)) return atoll_fail(err, "%s: normalizer: Prepend without a \"prepend\" string", name);
    if (edit_set(e, NULL, s->valuestring, 1)) return atoll_fail(err, "%s: out of memory", name);
  } else if (strcmp(type, "Replace") == 0) {
    const char *from = string_pattern(n, "pattern");
    const cJSON *to = item(n, "content");
    if (!from || !cJSON_IsString(to))
      return atoll_fail(err, "%s: normalizer: Replace must have a {\"String\": ...} pattern and a content "
                        "(a Regex pattern is not supported)", name);
    if (edit_set(e, from, to->valuestring, 0)) return atoll_fail(err, "%s: out of memory", name);
  } else if (strcmp(type, "NFC") == 0) {
    e->nfc = 1;
  } else {
    return atoll_fail(err, "%s: normalizer: type \"%s\" is not supported (atoll reads Sequence, Prepend, Replace and NFC)",
                      name, type);
  }
  p->nnorm++;
  return 0;
}

/* Known patterns (Llama 3 and cl100k, Qwen2) for which text cut between a newline and an
 * ASCII letter splits the same as whole: no match holds a newline followed by a letter,
 * and a match ending in the newline ends there whatever follows. */
static const char *const newline_safe[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

static int read_split(atoll_pipeline *p, const cJSON *s, const char *name, atoll_err *err) {
  const cJSON *pat = item(s, "pattern"), *rx = item(pat, "Regex"), *str = item(pat, "String");
  const cJSON *beh = item(s, "behavior"), *inv = item(s, "invert");
  if (!cJSON_IsString(rx) && !cJSON_IsString(str))
    return atoll_fail(err, "%s: pre_tokenizer: Split without a {\"Regex\": ...} or {\"String\": ...} pattern", name);
  char q[200];
  if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
    return atoll_fail(err, "%s: pre_tokenizer: Split behavior \"%s\" is not supported (atoll reads Isolated)", name,
                      cJSON_IsString(beh) ? atoll_tok_quote(beh->valuestring, q) : "?");
  if (inv && !cJSON_IsFalse(inv)) return atoll_fail(err, "%s: pre_tokenizer: Split with invert true is not supported", name);
  if (p->nsplit == ATOLL_PIPE_MAX) return atoll_fail(err, "%s: pre_tokenizer: more than %d Splits", name, ATOLL_PIPE_MAX);
  const char *text = cJSON_IsString(rx) ? rx->valuestring : str->valuestring;
  int code;
  PCRE2_SIZE at;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (cJSON_IsString(rx) ? 0 : PCRE2_LITERAL);
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)text, PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
  if (!re) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(code, msg, sizeof msg);
    return atoll_fail(err, "%s: pre_tokenizer: Split pattern \"%s\": %s (at offset %zu)", name,
                      atoll_tok_quote(text, q), (const char *)msg, (size_t)at);
  }
  p->re[p->nsplit] = re;
  p->jit[p->nsplit] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  p->md[p->nsplit] = pcre2_match_data_create_from_pattern(re, NULL);
  if (!p->md[p->nsplit]) return atoll_fail(err, "%s: out of memory", name);
  int safe = 0;
  for (size_t k = 0; k < sizeof newline_safe / sizeof *newline_safe; k++) safe |= strcmp(text, newline_safe[k]) == 0;
  p->newline_cut = (p->nsplit == 0 || p->newline_cut) && safe;
  p->nsplit++;
  return 0;
}

static int read_byte_level(const cJSON *b, int regex, const char *name, atoll_err *err) {
  if (!cJSON_IsFalse(item(b, "add_prefix_space")))
    return atoll_fail(err, "%s: pre_tokenizer: ByteLevel add_prefix_space must be false", name);
  const cJSON *r = item(b, "use_regex");
  if (regex ? (r && !cJSON_IsTrue(r)) : !cJSON_IsFalse(r))
    return atoll_fail(err, "%s: pre_tokenizer: ByteLevel use_regex must be %s", name,
                      regex ? "true" : "false after a Split");
  return 0;
}

static int read_metaspace(atoll_pipeline *p, const cJSON *m, const char *name, atoll_err *err) {
  const cJSON *rep = item(m, "replacement"), *scheme = item(m, "prepend_scheme"), *split = item(m, "split");
  if (!cJSON_IsString(rep) || !rep->valuestring[0] || strlen(rep->valuestring) > 4)
    return atoll_fail(err, "%s: pre_tokenizer: Metaspace needs a one-character \"replacement\"", name);
  p->nmeta = strlen(rep->valuestring);
  memcpy(p->meta, rep->valuestring, p->nmeta);
  const cJSON *aps = item(m, "add_prefix_space"); /* files of tokenizers before 0.14: true is "always" */
  const char *s = cJSON_IsString(scheme) ? scheme->valuestring : !scheme && cJSON_IsBool(aps) ? (cJSON_IsTrue(aps) ? "always" : "never") : "";
  p->meta_prepend = strcmp(s, "never") == 0 ? 0 : strcmp(s, "first") == 0 ? 1 : strcmp(s, "always") == 0 ? 2 : -1;
  if (p->meta_prepend < 0)
    return atoll_fail(err, "%s: pre_tokenizer: Metaspace prepend_scheme must be \"always\", \"first\" or \"never\"", name);
  p->meta_split = split ? cJSON_IsTrue(split) : 1;
  p->metaspace = 1;
  return 0;
}

static int read_pre(atoll_pipeline *p, const cJSON *pre, const char *name, atoll_err *err) {
  if (is_null(pre)) return 0;
  const char *type = type_of(pre);
  if (!type) return atoll_fail(err, "%s: pre_tokenizer: not an object with a \"type\"", name);
  if (strcmp(type, "ByteLevel") == 0) {
    p->byte_level = p->gpt2_split = 1;
    return read_byte_level(pre, 1, name, err);
  }
  if (strcmp(type, "Metaspace") == 0) return read_metaspace(p, pre, name, err);
  if (strcmp(type, "Sequence") == 0) {
    const cJSON *list = item(pre, "pretokenizers");
    if (!cJSON_IsArray(list) || !list->child)
      return atoll_fail(err, "%s: pre_tokenizer: Sequence without a \"pretokenizers\" array", name);
    for (const cJSON *e = list->child; e; e = e->next) {
      const char *t = type_of(e);
      if (t && strcmp(t, "Split") == 0 && !p->byte_level) {
        if (read_split(p, e, name, err)) return -1;
      } else if (t && strcmp(t, "ByteLevel") == 0 && !e->next && p->nsplit > 0) {
        p->byte_level = 1;
        if (read_byte_level(e, 0, name, err)) return -1;
      } else {
        return atoll_fail(err, "%s: pre_tokenizer: Sequence of \"%s\" is not supported (atoll reads Splits then "
                          "ByteLevel with use_regex false)", name, t ? t : "?");
      }
    }
    if (!p->byte_level)
      return atoll_fail(err, "%s: pre_tokenizer: a Sequence must end with ByteLevel (use_regex false)", name);
    return 0;
  }
  return atoll_fail(err, "%s: pre_tokenizer: type \"%s\" is not supported (atoll reads ByteLevel, Metaspace, and a "
                    "Sequence of Splits then ByteLevel)", name, type);
}

static int read_decoder(atoll_pipeline *p, const cJSON *d, const char *name, atoll_err *err) {
  const char *type = type_of(d);
  if (p->byte_level) {
    if (is_null(d) || (type && strcmp(type, "ByteLevel") == 0)) return 0;
    return atoll_fail(err, "%s: decoder: type \"%s\" is not supported with ByteLevel (must be null or ByteLevel)", name,
                      type ? type : "?");
  }
  if (!type || strcmp(type, "Sequence") != 0)
    return atoll_fail(err, "%s: decoder: %s%s%s is not supported without ByteLevel (atoll reads a Sequence of Replace, "
                      "ByteFallback, Fuse, Strip)", name, type ? "type \"" : "null", type ? type : "", type ? "\"" : "");
  const cJSON *list = item(d, "decoders");
  if (!cJSON_IsArray(list)) return atoll_fail(err, "%s: decoder: Sequence without a \"decoders\" array", name);
  int fused = 0, stripped = 0, fallback = 0;
  for (const cJSON *e = list->child; e; e = e->next) {
    const char *t = type_of(e);
    if (t && strcmp(t, "Replace") == 0 && !fused) {
      const char *from = string_pattern(e, "pattern");
      const cJSON *to = item(e, "content");
      if (!from || !cJSON_IsString(to))
        return atoll_fail(err, "%s: decoder: Replace must have a {\"String\": ...} pattern and a content", name);
      if (p->ndec == ATOLL_PIPE_MAX) return atoll_fail(err, "%s: decoder: more than %d steps", name, ATOLL_PIPE_MAX);
      if (edit_set(&p->dec[p->ndec++], from, to->valuestring, 0)) return atoll_fail(err, "%s: out of memory", name);
    } else if (t && strcmp(t, "ByteFallback") == 0 && !fused) {
      if (p->ndec == ATOLL_PIPE_MAX) return atoll_fail(err, "%s: decoder: more than %d steps", name, ATOLL_PIPE_MAX);
      p->ndec++; /* from NULL: byte fallback */
      fallback = 1;
    } else if (t && strcmp(t, "Fuse") == 0 && !fused) {
      fused = 1;
    } else if (t && strcmp(t, "Strip") == 0 && fused && !stripped) {
      const cJSON *c = item(e, "content"), *start = item(e, "start"), *stop = item(e, "stop");
      if (!cJSON_IsString(c) || strcmp(c->valuestring, " ") != 0 || !cJSON_IsNumber(start) || start->valuedouble < 0 ||
          start->valuedouble > 64 || !cJSON_IsNumber(stop) || stop->valuedouble != 0)
        return atoll_fail(err, "%s: decoder: Strip must have content \" \", start 0 to 64 and stop 0", name);
      p->strip = (int)start->valuedouble;
      stripped = 1;
    } else {
      return atoll_fail(err, "%s: decoder: \"%s\" here is not supported (atoll reads Replace and ByteFallback, then "
                        "Fuse, then Strip)", name, t ? t : "?");
    }
  }
  if (!fallback) return atoll_fail(err, "%s: decoder: a ByteFallback step is needed with byte_fallback", name);
  return 0;
}

static int read_model(atoll_pipeline *p, const cJSON *model, const char *name, atoll_err *err) {
  const cJSON *im = item(model, "ignore_merges"), *bf = item(model, "byte_fallback");
  p->ignore_merges = cJSON_IsTrue(im);
  if (im && !cJSON_IsBool(im) && !cJSON_IsNull(im)) return atoll_fail(err, "%s: model: ignore_merges must be true or false", name);
  if (p->byte_level && cJSON_IsTrue(bf))
    return atoll_fail(err, "%s: model: byte_fallback must be false with a ByteLevel pre-tokenizer", name);
  if (!p->byte_level && !cJSON_IsTrue(bf))
    return atoll_fail(err, "%s: pre_tokenizer: without ByteLevel, model.byte_fallback must be true (a SentencePiece "
                      "vocabulary)", name);
  const cJSON *unk = item(model, "unk_token");
  if (!is_null(unk) && (p->byte_level || !cJSON_IsString(unk)))
    return atoll_fail(err, "%s: model: unk_token must be null%s", name, p->byte_level ? "" : " or a string");
  return 0;
}

int atoll_pipeline_read(atoll_tokenizer *t, const void *root_json, const char *name, atoll_err *err) {
  const cJSON *root = root_json, *norm = item(root, "normalizer"), *pre = item(root, "pre_tokenizer");
  const cJSON *model = item(root, "model"), *dec = item(root, "decoder");
  const char *pt = type_of(pre);
  /* GPT-2's pipeline: the hand-written path (tokenizer_json.c checks the rest) */
  if (is_null(norm) && pt && strcmp(pt, "ByteLevel") == 0 && !cJSON_IsTrue(item(model, "ignore_merges"))) return 0;
  atoll_pipeline *p = calloc(1, sizeof *p);
  if (!p) return atoll_fail(err, "%s: out of memory", name);
  t->pipe = p;
  for (int b = 0; b < 256; b++) p->fallback[b] = -1;
  if (!is_null(norm) && read_normalizer(p, norm, name, err)) return -1;
  if (read_pre(p, pre, name, err) || read_model(p, model, name, err) || read_decoder(p, dec, name, err)) return -1;
  /* the hash: each part as cJSON prints it */
  const char *parts[] = {"normalizer", "pre_tokenizer", "decoder", "post_processor"};
  uint64_t h = atoll_bytes_hash((const uint8_t *)"atoll-pipeline", 14);
  for (int k = 0; k < 4; k++) {
    char *s = item(root, parts[k]) ? cJSON_PrintUnformatted(item(root, parts[k])) : NULL;
    uint64_t pair[2] = {h, s ? atoll_bytes_hash((const uint8_t *)s, strlen(s)) : 0};
    h = atoll_bytes_hash((const uint8_t *)pair, sizeof pair);
    cJSON_free(s);
  }
  p->hash = h ^ (uint64_t)p->ignore_merges;
  return 0;
}

/* The ids of TemplateProcessing's special token named s. */
static int special_ids(atoll_tokenizer *t, const cJSON *tp, const cJSON *piece, int32_t *ids, int *n, const char *name,
                       atoll_err *err) {
  const cJSON *idn = item(item(piece, "SpecialToken"), "id");
  const cJSON *spec = item(item(tp, "special_tokens"), cJSON_IsString(idn) ? idn->valuestring : "");
  const cJSON *list = item(spec, "ids");
  char q[200];
  if (!cJSON_IsString(idn) || !cJSON_IsArray(list))
    return atoll_fail(err, "%s: post_processor: TemplateProcessing: special token \"%s\" has no ids in special_tokens",
                      name, cJSON_IsString(idn) ? atoll_tok_quote(idn->valuestring, q) : "?");
  for (const cJSON *e = list->child; e; e = e->next) {
    if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= t->vocab || e->valuedouble != (int)e->valuedouble)
      return atoll_fail(err, "%s: post_processor: TemplateProcessing: an id of \"%s\" is not a token id", name,
                        atoll_tok_quote(idn->valuestring, q));
    if (*n == 4) return atoll_fail(err, "%s: post_processor: TemplateProcessing: more than 4 special ids on a side", name);
    ids[(*n)++] = (int32_t)e->valuedouble;
  }
  return 0;
}

static int read_template(atoll_tokenizer *t, atoll_pipeline *p, const cJSON *tp, const char *name, atoll_err *err) {
  const cJSON *single = item(tp, "single");
  if (!cJSON_IsArray(single)) return atoll_fail(err, "%s: post_processor: TemplateProcessing without a \"single\" array", name);
  int seen = 0;
  p->nprefix = p->nsuffix = 0;
  for (const cJSON *e = single->child; e; e = e->next) {
    const cJSON *seq = item(e, "Sequence");
    if (seq) {
      const cJSON *id = item(seq, "id");
      if (seen || !cJSON_IsString(id) || strcmp(id->valuestring, "A") != 0)
        return atoll_fail(err, "%s: post_processor: TemplateProcessing: single must hold sequence A once", name);
      seen = 1;
    } else if (item(e, "SpecialToken")) {
      if (seen ? special_ids(t, tp, e, p->suffix, &p->nsuffix, name, err)
               : special_ids(t, tp, e, p->prefix, &p->nprefix, name, err))
        return -1;
    } else {
      return atoll_fail(err, "%s: post_processor: TemplateProcessing: single holds an entry that is neither Sequence "
                        "nor SpecialToken", name);
    }
  }
  if (!seen) return atoll_fail(err, "%s: post_processor: TemplateProcessing: single must hold sequence A once", name);
  return 0;
}

static int read_post(atoll_tokenizer *t, atoll_pipeline *p, const cJSON *post, int depth, const char *name,
                     atoll_err *err) {
  if (is_null(post)) return 0;
  const char *type = type_of(post);
  if (type && strcmp(type, "ByteLevel") == 0) return 0; /* offsets only */
  if (type && strcmp(type, "TemplateProcessing") == 0) return p ? read_template(t, p, post, name, err) : 1;
  if (type && strcmp(type, "Sequence") == 0 && depth == 0) {
    const cJSON *list = item(post, "processors");
    if (!cJSON_IsArray(list)) return atoll_fail(err, "%s: post_processor: Sequence without a \"processors\" array", name);
    int rc = 0;
    for (const cJSON *e = list->child; e && rc == 0; e = e->next) rc = read_post(t, p, e, 1, name, err);
    return rc;
  }
  return atoll_fail(err, "%s: post_processor: type \"%s\" is not supported (atoll reads ByteLevel, TemplateProcessing "
                    "and a Sequence of those)", name, type ? type : "?");
}

int atoll_pipeline_post(atoll_tokenizer *t, const void *root_json, const char *name, atoll_err *err) {
  const cJSON *post = item(root_json, "post_processor");
  if (!t->pipe) { /* GPT-2's pipeline: a template makes it a pipeline of its own */
    int rc = read_post(t, NULL, post, 0, name, err);
    if (rc <= 0) return rc;
    t->pipe = calloc(1, sizeof *t->pipe);
    if (!t->pipe) return atoll_fail(err, "%s: out of memory", name);
    t->pipe->byte_level = t->pipe->gpt2_split = 1;
    for (int b = 0; b < 256; b++) t->pipe->fallback[b] = -1;
    char *s = cJSON_PrintUnformatted(post);
    t->pipe->hash = s ? atoll_bytes_hash((const uint8_t *)s, strlen(s)) : 1;
    cJSON_free(s);
  }
  return read_post(t, t->pipe, post, 0, name, err);
}

void atoll_pipeline_free(atoll_pipeline *p) {
  if (!p) return;
  for (int k = 0; k < p->nsplit; k++) {
    pcre2_match_data_free(p->md[k]);
    pcre2_code_free(p->re[k]);
  }
  for (int k = 0; k < p->nnorm; k++) free(p->norm[k].from), free(p->norm[k].to);
  for (int k = 0; k < p->ndec; k++) free(p->dec[k].from), free(p->dec[k].to);
  free(p->unmerged);
  free(p);
}

int atoll_pipe_grow(uint8_t **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  uint8_t *b = realloc(*buf, c);
  if (!b) return -1;
  *buf = b;
  *cap = c;
  return 0;
}

/* One edit of src[0, n) into *dst: Replace (every non-overlapping from, left to right)
 * or Prepend (a non-empty text only). */
static int apply_edit(const atoll_pipe_edit *e, const uint8_t *src, size_t n, uint8_t **dst, size_t *cap, size_t *len) {
  size_t k = 0;
  if (e->nfc) return atoll_nfc(src, n, dst, cap, len);
  if (e->prepend) {
    if (atoll_pipe_grow(dst, cap, n + e->nto + 1)) return -1;
    if (n) memcpy(*dst, e->to, e->nto), k = e->nto;
    memcpy(*dst + k, src, n);
    *len = k + n;
    return 0;
  }
  size_t hits = 0;
  for (size_t i = 0; i + e->nfrom <= n;)
    if (memcmp(src + i, e->from, e->nfrom) == 0) hits++, i += e->nfrom;
    else i++;
  if (atoll_pipe_grow(dst, cap, n + hits * e->nto + 1)) return -1;
  for (size_t i = 0; i < n;) {
    if (i + e->nfrom <= n && memcmp(src + i, e->from, e->nfrom) == 0) {
      memcpy(*dst + k, e->to, e->nto);
      k += e->nto;
      i += e->nfrom;
    } else {
      (*dst)[k++] = src[i++];
    }
  }
  *len = k;
  return 0;
}

int atoll_pipeline_normalize(const atoll_pipeline *p, const uint8_t *text, size_t n, uint8_t **out, size_t *cap,
                             size_t *len) {
  uint8_t *tmp = NULL;
  size_t tcap = 0, tlen = n;
  if (atoll_pipe_grow(out, cap, n + 1)) return -1;
  memcpy(*out, text, n);
  *len = n;
  for (int k = 0; k < p->nnorm; k++) {
    if (apply_edit(&p->norm[k], *out, *len, &tmp, &tcap, &tlen)) {
      free(tmp);
      return -1;
    }
    uint8_t *sw = *out;
    size_t sc = *cap;
    *out = tmp, *cap = tcap, *len = tlen;
    tmp = sw, tcap = sc;
  }
  free(tmp);
  return 0;
}
