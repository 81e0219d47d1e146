/* Tokenizer records of data directories and checkpoints (data/data_tokenizer.h). */
#include "data/data_tokenizer.h"

#include "core/json_text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void atoll_tokenizer_record_of(const atoll_tokenizer *t, atoll_tokenizer_record *rec) {
  memset(rec, 0, sizeof *rec);
  snprintf(rec->kind, sizeof rec->kind, "%s", atoll_tokenizer_kind(t));
  atoll_tokenizer_hash_hex(t, rec->hash);
  rec->vocab = atoll_tokenizer_vocab(t);
}

void atoll_tokenizer_record_bytes(atoll_tokenizer_record *rec) {
  atoll_tokenizer *t = NULL;
  atoll_err ignored;
  memset(rec, 0, sizeof *rec);
  snprintf(rec->kind, sizeof rec->kind, "bytes");
  rec->vocab = ATOLL_BYTE_VOCAB;
  if (atoll_tokenizer_bytes(&t, &ignored) == 0) atoll_tokenizer_hash_hex(t, rec->hash);
  atoll_tokenizer_free(t);
}

static int is_hex16(const char *s) { return s && strlen(s) == 16 && strspn(s, "0123456789abcdef") == 16; }

int atoll_tokenizer_record_from_json(const cJSON *o, const char *what, atoll_tokenizer_record *rec,
                                     atoll_err *err) {
  atoll_tokenizer_record_bytes(rec);
  if (!o) return 0;
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
  const cJSON *hash = cJSON_GetObjectItemCaseSensitive(o, "hash");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(o, "vocab");
  if (!cJSON_IsString(kind) || (strcmp(kind->valuestring, "bytes") && strcmp(kind->valuestring, "bpe")) ||
      !is_hex16(cJSON_GetStringValue(hash)) || !cJSON_IsNumber(vocab) || vocab->valuedouble < 256 ||
      vocab->valuedouble > ATOLL_TOKENIZER_MAX_VOCAB)
    return atoll_fail(err, "%s: \"tokenizer\" must be {\"kind\": \"bytes\"|\"bpe\", \"hash\": 16 hex digits, \"vocab\": N}",
                      what);
  snprintf(rec->kind, sizeof rec->kind, "%s", kind->valuestring);
  snprintf(rec->hash, sizeof rec->hash, "%s", hash->valuestring);
  rec->vocab = (int)vocab->valuedouble;
  return 0;
}

cJSON *atoll_tokenizer_record_json(const atoll_tokenizer_record *rec) {
  cJSON *o = cJSON_CreateObject();
  if (!o || !cJSON_AddStringToObject(o, "kind", rec->kind) || !cJSON_AddStringToObject(o, "hash", rec->hash) ||
      !cJSON_AddNumberToObject(o, "vocab", rec->vocab)) {
    cJSON_Delete(o);
    return NULL;
  }
  return o;
}

int atoll_data_tokenizer(const char *dir, atoll_tokenizer_record *rec, atoll_err *err) {
  atoll_tokenizer_record_bytes(rec);
  char path[1200];
  if (snprintf(path, sizeof path, "%s/manifest.json", dir) >= (int)sizeof path)
    return atoll_fail(err, "%.200s: path too long", dir);
  struct stat st;
  if (stat(path, &st) != 0 && errno == ENOENT) return 0;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return atoll_fail(err, "%s: not a regular file", path);
  cJSON *root = atoll_json_read_whole(path, (size_t)1 << 26, err);
  if (!root) return -1;
  int rc = 0;
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
  const cJSON *hash = cJSON_GetObjectItemCaseSensitive(root, "tokenizer_hash");
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(root, "vocab");
  if (!cJSON_IsObject(root)) {
    rc = atoll_fail(err, "%s: not a JSON object", path);
  } else if (hash) { /* written with --tokenizer */
    cJSON *o = cJSON_CreateObject();
    if (!o) {
      rc = atoll_fail(err, "%s: out of memory", path);
    } else {
      cJSON_AddItemToObject(o, "kind", cJSON_Duplicate(kind, 1));
      cJSON_AddItemToObject(o, "hash", cJSON_Duplicate(hash, 1));
      cJSON_AddItemToObject(o, "vocab", cJSON_Duplicate(vocab, 1));
      rc = atoll_tokenizer_record_from_json(o, path, rec, err);
      cJSON_Delete(o);
    }
  } else if (kind && !(cJSON_IsString(kind) && strcmp(kind->valuestring, "bytes") == 0)) {
    rc = atoll_fail(err, "%s: tokenizer %s without a \"tokenizer_hash\"", path,
                    cJSON_IsString(kind) ? kind->valuestring : "(not a string)");
  }
  cJSON_Delete(root);
  return rc;
}

int atoll_tokenizer_load_checked(const char *file, const atoll_tokenizer_record *rec, const char *what,
                                 atoll_tokenizer **t, atoll_err *err) {
  if (atoll_tokenizer_load(t, file, err) != 0) return -1;
  char hex[17];
  atoll_tokenizer_hash_hex(*t, hex);
  if (strcmp(hex, rec->hash) != 0 || strcmp(atoll_tokenizer_kind(*t), rec->kind) != 0) {
    atoll_fail(err, "%s: tokenizer %s %s is not the one %s records (%s %s)", file, atoll_tokenizer_kind(*t), hex,
               what, rec->kind, rec->hash);
    atoll_tokenizer_free(*t);
    *t = NULL;
    return -1;
  }
  return 0;
}

int atoll_tokenizer_same_ids(const atoll_tokenizer_record *model, const atoll_tokenizer_record *data,
                             const char *data_dir, const char *lead, const char *fix, atoll_err *err) {
  if (strcmp(model->hash, data->hash) == 0) return 0;
  return atoll_fail(err, "%s tokenizer %s %s (vocabulary %d), but --data %s holds ids of tokenizer %s %s (vocabulary %d); %s",
                    lead, model->kind, model->hash, model->vocab, data_dir, data->kind, data->hash, data->vocab, fix);
}
