/* Text generation: the model's forward pass over the last `context` tokens, then a
 * draw from the softmax of the last position's logits (temperature, top-k). A key/value
 * cache (src/model/decode.c) runs only each new token's row while the text fits the
 * context; past it the window slides, every position changes, and each token re-reads
 * the last `context` tokens, as without a cache. The prompt is encoded, and the tokens
 * decoded, with the checkpoint's tokenizer (state.json's record; CKPT/tokenizer.json
 * unless it is the byte tokenizer); the ids its post_processor puts before a text (BOS)
 * go before the prompt's, as prepare put them before each passage. */

#include "ckpt/checkpoint.h"
#include "data/data_tokenizer.h"
#include "core/fs.h"
#include "core/rng.h"
#include "model/decode.h"
#include "model/model.h"
#include "train/config.h"
#include "ops/device_select.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int load_shape(const char *dir, atoll_shape *shape, atoll_tokenizer_record *rec, atoll_err *err) {
  cJSON *state = NULL;
  if (atoll_ckpt_read_state(dir, &state, err)) return -1;
  atoll_config c;
  atoll_config_defaults(&c);
  char source[PATH_MAX + 16];
  snprintf(source, sizeof source, "%s/state.json", dir);
  int rc = atoll_config_apply_json(&c, cJSON_GetObjectItemCaseSensitive(state, "config"), source, err);
  if (rc == 0)
    rc = atoll_tokenizer_record_from_json(cJSON_GetObjectItemCaseSensitive(state, "tokenizer"), source, rec, err);
  cJSON_Delete(state);
  if (rc) return -1;
  *shape = c.model;
  return atoll_shape_check(shape, err);
}

/* The checkpoint's tokenizer: its copy (or the byte tokenizer), and --tokenizer, when
 * given, must be the same one. */
static int load_tokenizer(const char *dir, const char *given, const atoll_tokenizer_record *rec,
                          atoll_tokenizer **t, atoll_err *err) {
  char what[PATH_MAX + 64], path[PATH_MAX + 16];
  snprintf(what, sizeof what, "the checkpoint %s (state.json)", dir);
  if (given) {
    if (atoll_tokenizer_load(t, given, err)) return -1;
    atoll_tokenizer_record mine;
    atoll_tokenizer_record_of(*t, &mine);
    if (strcmp(mine.hash, rec->hash) != 0) {
      atoll_tokenizer_free(*t);
      *t = NULL;
      return atoll_fail(err, "--tokenizer %s: tokenizer %s %s is not the one the checkpoint %s was trained with (%s %s)",
                        given, mine.kind, mine.hash, dir, rec->kind, rec->hash);
    }
    return 0;
  }
  if (strcmp(rec->kind, "bytes") == 0) return atoll_tokenizer_bytes(t, err);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  return atoll_tokenizer_load_checked(path, rec, what, t, err);
}

/* Every prompt id must be inside the model's vocabulary, or its embedding row would be
 * read out of bounds. */
static int check_prompt(const int32_t *ids, size_t n, int bytes, int given, int vocab, atoll_err *err) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= vocab)
      return atoll_fail(err, "--prompt: %s %d at %s %zu%s is not a token of this model (vocabulary %d: ids 0..%d)",
                        bytes ? "byte" : "token", ids[i], bytes ? "offset" : "position", i,
                        given ? "" : " (the default prompt, a newline)", vocab, vocab - 1);
  return 0;
}

/* Draws a token from logits[V] with temperature and top-k. */
static int draw(const float *logits, int vocab, float temperature, int top_k, atoll_rng *rng, float *probs) {
  if (temperature <= 0.0f) {
    int best = 0;
    for (int v = 1; v < vocab; v++)
      if (logits[v] > logits[best]) best = v;
    return best;
  }
  float cutoff = -INFINITY;
  if (top_k > 0 && top_k < vocab) {
    /* the k-th largest logit: copy and partially select */
    memcpy(probs, logits, sizeof(float) * vocab);
    for (int i = 0; i < top_k; i++) {
      int best = i;
      for (int v = i + 1; v < vocab; v++)
        if (probs[v] > probs[best]) best = v;
      float tmp = probs[i];
      probs[i] = probs[best];
      probs[best] = tmp;
    }
    cutoff = probs[top_k - 1];
  }
  float mx = -INFINITY;
  for (int v = 0; v < vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
  double sum = 0.0;
  for (int v = 0; v < vocab; v++) {
    probs[v] = logits[v] >= cutoff ? expf((logits[v] - mx) / temperature) : 0.0f;
    sum += probs[v];
  }
  double r = atoll_rng_uniform(rng) * sum, acc = 0.0;
  for (int v = 0; v < vocab; v++) {
    acc += probs[v];
    if (r < acc && probs[v] > 0) return v;
  }
  for (int v = vocab - 1; v >= 0; v--)
    if (probs[v] > 0) return v;
  return 0;
}

/* The checkpoint's weights in a model on `device` (batch 1 x 1: the passes run in the
 * decoder); through a host buffer when the device's memory is not the host's. */
static int load_model(const char *dir, const atoll_shape *shape, const char *device, atoll_model **out,
                      atoll_err *err) {
  const atoll_ops *ops;
  char desc[256];
  atoll_part whole = atoll_part_whole();
  *out = NULL;
  if (atoll_device_select(device, 0, shape, 0, &ops, desc, sizeof desc, err) ||
      atoll_model_create_on(out, shape, &whole, 1, 1, 1, ops, err))
    return -1;
  const atoll_layout *lay = atoll_model_layout(*out);
  float *host = ops->device ? malloc(sizeof(float) * lay->nparams) : atoll_model_params(*out);
  int rc = host ? atoll_ckpt_load(dir, lay, host, NULL, NULL, err) : atoll_fail(err, "out of memory");
  if (rc == 0 && ops->device) ops->to_device(atoll_model_params(*out), host, sizeof(float) * lay->nparams);
  if (ops->device) free(host);
  if (rc) {
    atoll_model_destroy(*out);
    *out = NULL;
  }
  return rc;
}

int atoll_sample(const atoll_sample_opts *o, FILE *out, atoll_err *err) {
  char dir[PATH_MAX];
  if (atoll_ckpt_resolve(o->ckpt, dir, sizeof dir, err)) return -1;
  if (o->tokens < 0) return atoll_fail(err, "--tokens: must be >= 0, got %d", o->tokens);
  if (o->top_k < 0) return atoll_fail(err, "--top-k: must be >= 0, got %d", o->top_k);
  if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
    return atoll_fail(err, "--temperature: must be a finite number >= 0");
  atoll_shape shape;
  atoll_tokenizer_record rec;
  if (load_shape(dir, &shape, &rec, err)) return -1;
  atoll_tokenizer *tok = NULL;
  if (load_tokenizer(dir, o->tokenizer, &rec, &tok, err)) return -1;
  const char *prompt = o->prompt && o->prompt[0] ? o->prompt : "\n";
  size_t plen = strlen(prompt);
  atoll_tokens ids = {0};
  const int32_t *bos; /* the template's ids before a text (Llama's BOS), as in training data (prepare) */
  int nbos = atoll_tokenizer_prefix(tok, &bos);
  if (nbos) {
    ids.ids = malloc((size_t)nbos * sizeof *ids.ids);
    if (!ids.ids) {
      atoll_tokenizer_free(tok);
      return atoll_fail(err, "sample: out of memory");
    }
    memcpy(ids.ids, bos, (size_t)nbos * sizeof *bos);
    ids.n = ids.cap = (size_t)nbos;
  }
  if (atoll_tokenizer_encode(tok, (const uint8_t *)prompt, plen, &ids, err) ||
      check_prompt(ids.ids, ids.n, strcmp(atoll_tokenizer_kind(tok), "bytes") == 0, o->prompt && o->prompt[0],
                   shape.vocab, err)) {
    atoll_tokens_free(&ids);
    atoll_tokenizer_free(tok);
    return -1;
  }
  plen = ids.n;
  if (getenv("ATOLL_TEST_PROMPT_IDS")) { /* a test hook: the ids the model is given (tests/cli/test_tokenizer.sh) */
    fprintf(stderr, "prompt ids:");
    for (size_t i = 0; i < ids.n; i++) fprintf(stderr, " %d", ids.ids[i]);
    fprintf(stderr, "\n");
  }
  atoll_model *m = NULL;
  if (load_model(dir, &shape, o->device ? o->device : "cpu", &m, err)) {
    atoll_tokens_free(&ids);
    atoll_tokenizer_free(tok);
    return -1;
  }
  /* the text so far, of which only the last `context` tokens are ever read: the buffer
   * holds the prompt and up to 4 contexts more, then keeps its last context (so a huge
   * --tokens needs no memory beyond that) */
  size_t ctx = (size_t)shape.context, cap = plen + (o->tokens < 4 * shape.context ? (size_t)o->tokens : 4 * ctx);
  int32_t *seq = malloc(sizeof(int32_t) * cap);
  float *probs = malloc(sizeof(float) * shape.vocab);
  if (!seq || !probs) {
    free(seq);
    free(probs);
    atoll_model_destroy(m);
    atoll_tokens_free(&ids);
    atoll_tokenizer_free(tok);
    return atoll_fail(err, "out of memory");
  }
  memcpy(seq, ids.ids, plen * sizeof *seq);
  atoll_tokens_free(&ids);
  if (o->prompt && o->prompt[0]) fputs(prompt, out);
  atoll_rng rng;
  atoll_rng_seed(&rng, o->seed);
  atoll_decoder *dec = NULL;
  if (atoll_decoder_create(&dec, m, err)) {
    free(seq);
    free(probs);
    atoll_model_destroy(m);
    atoll_tokenizer_free(tok);
    return -1;
  }
  size_t n = plen;
  const char *out_name = out == stdout ? "stdout" : "output";
  int slid = 0, failed = 0; /* a write to out failed (err says why): a full disk, a closed pipe */
  for (int k = 0; k < o->tokens && !failed; k++) {
    if (n == cap) { /* full: keep the last context */
      memmove(seq, seq + n - ctx, ctx * sizeof *seq);
      n = ctx;
      slid = 1;
    }
    size_t win = n < ctx ? n : ctx;
    if (n > ctx || slid) atoll_decoder_reset(dec); /* the window slid: positions changed */
    size_t cached = (size_t)atoll_decoder_pos(dec);
    const float *logits = atoll_decoder_step(dec, seq + (n - win) + cached, (int)(win - cached));
    int id = draw(logits, shape.vocab, o->temperature, o->top_k, &rng, probs);
    seq[n++] = id;
    if (!o->keep_special && atoll_tokenizer_is_special(tok, id)) continue;
    size_t len = 0;
    const uint8_t *bytes = atoll_tokenizer_token(tok, id, &len);
    if (bytes) fwrite(bytes, 1, len, out);
    else fputc('?', out); /* an id of the model's vocabulary beyond the tokenizer's (--vocab padding) */
    failed = atoll_flush_file(out, out_name, err) != 0; /* each token reaches out now */
  }
  if (!failed) {
    fputc('\n', out);
    failed = atoll_flush_file(out, out_name, err) != 0;
  }
  atoll_decoder_destroy(dec);
  free(seq);
  free(probs);
  atoll_model_destroy(m);
  atoll_tokenizer_free(tok);
  /* a full disk, a closed pipe or stdout: an error, not text silently lost (status 0) */
  return failed ? -1 : 0;
}
