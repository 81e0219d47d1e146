/* The tokenizer (src/tokenizer/): pre-tokenization cases, the encoder against a slow
 * reference (lowest rank first, leftmost of equals), the trainer against a slow
 * reference (recount every pair at every merge), decode(encode(x)) == x for arbitrary
 * bytes, tokenizer.json written and read back (merges in either form), the byte
 * tokenizer, and corrupt and hostile files (a 100 kB token in a merge, raw control bytes
 * in strings, a key twice, deep nesting) refused with one line. Agreement with Hugging Face is tests/cli/test_tokenizer.sh. */
#include "check.h"
#include "core/rng.h"
#include "tokenizer/tokenizer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static const char *tmp_path(const char *name) {
  static char p[512];
  snprintf(p, sizeof p, "%s/%s", tmpdir, name);
  return p;
}

static void write_text(const char *path, const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(text, 1, n, f);
  fclose(f);
}

/* ------------------------------------------------------------ pre-tokens --- */

static void check_pretokens(const char *text, const char *const *want) {
  size_t n = strlen(text), pos = 0;
  int i = 0;
  while (pos < n) {
    size_t end = atoll_pretoken_end((const uint8_t *)text, n, pos);
    if (!want[i] || strlen(want[i]) != end - pos || memcmp(want[i], text + pos, end - pos) != 0) {
      fprintf(stderr, "pre-token %d of \"%s\": got \"%.*s\", want \"%s\"\n", i, text, (int)(end - pos),
              text + pos, want[i] ? want[i] : "(end)");
      check_failures++;
      return;
    }
    pos = end;
    i++;
  }
  CHECK(want[i] == NULL);
}

static void test_pretokens(void) {
  check_pretokens("Hello world's  end\n", (const char *[]){"Hello", " world", "'s", " ", " end", "\n", NULL});
  check_pretokens("I'm 42!!  \t x", (const char *[]){"I", "'m", " 42", "!!", "  \t", " x", NULL});
  check_pretokens("a\n\nb", (const char *[]){"a", "\n", "\n", "b", NULL});
  check_pretokens("x  ", (const char *[]){"x", "  ", NULL});
  check_pretokens("'quoted' 'll", (const char *[]){"'", "quoted", "'", " '", "ll", NULL});
  check_pretokens("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac 3\xc2\xbd", /* café 日本 3½ */
                  (const char *[]){"caf\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac", " 3\xc2\xbd", NULL});
  /* invalid UTF-8 bytes are "other": they join punctuation runs */
  check_pretokens("a\xff\xfe!b \x80", (const char *[]){"a", "\xff\xfe!", "b", " \x80", NULL});
  /* U+00A0 is whitespace, but only U+0020 is the optional space before a word */
  check_pretokens("a\xc2\xa0\xc2\xa0" "b", (const char *[]){"a", "\xc2\xa0", "\xc2\xa0", "b", NULL});
}

/* ------------------------------------------------------- slow references --- */

/* Encodes one word by repeatedly merging the lowest-ranked pair, leftmost first. */
static size_t ref_encode_word(const atoll_tokenizer *t, const uint8_t *w, size_t n, int32_t *ids) {
  for (size_t i = 0; i < n; i++) ids[i] = t->byte_id[w[i]];
  for (;;) {
    int32_t best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < n; i++) {
      int32_t r = atoll_pair_rank(t, ids[i], ids[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
    }
    if (best < 0) return n;
    ids[at] = t->merge_result[best];
    memmove(ids + at + 1, ids + at + 2, (n - at - 2) * sizeof *ids);
    n--;
  }
}

static void ref_encode(const atoll_tokenizer *t, const uint8_t *text, size_t n, atoll_tokens *out) {
  out->n = 0;
  if (out->cap < n + 1) {
    out->ids = realloc(out->ids, (n + 1) * sizeof *out->ids);
    out->cap = n + 1;
  }
  for (size_t pos = 0; pos < n;) {
    size_t end = atoll_pretoken_end(text, n, pos);
    out->n += ref_encode_word(t, text + pos, end - pos, out->ids + out->n);
    pos = end;
  }
}

/* The trainer by brute force: count every pair of every word at every merge. */
typedef struct {
  int32_t *sym;
  size_t len;
  int64_t count;
} ref_word;

static int ref_train_check(const atoll_tokenizer *t, const uint8_t *text, size_t n) {
  size_t cap = 0, nw = 0;
  ref_word *words = NULL;
  for (size_t pos = 0; pos < n;) {
    size_t end = atoll_pretoken_end(text, n, pos), w;
    for (w = 0; w < nw; w++) {
      if (words[w].len != end - pos) continue;
      size_t i = 0;
      while (i < words[w].len && words[w].sym[i] == text[pos + i]) i++;
      if (i == words[w].len) break;
    }
    if (w == nw) {
      if (nw == cap) words = realloc(words, (cap = cap ? 2 * cap : 256) * sizeof *words);
      words[nw].len = end - pos;
      words[nw].count = 0;
      words[nw].sym = malloc(words[nw].len * sizeof(int32_t));
      for (size_t i = 0; i < words[nw].len; i++) words[nw].sym[i] = text[pos + i];
      nw++;
    }
    words[w].count++;
    pos = end;
  }
  int ok = 1;
  int64_t *counts = calloc((size_t)t->vocab * t->vocab, sizeof *counts);
  for (int r = 0; r < t->nmerges && ok; r++) {
    memset(counts, 0, (size_t)t->vocab * t->vocab * sizeof *counts);
    int32_t ba = -1, bb = -1;
    int64_t best = 0;
    for (size_t w = 0; w < nw; w++)
      for (size_t i = 0; i + 1 < words[w].len; i++)
        counts[(size_t)words[w].sym[i] * t->vocab + words[w].sym[i + 1]] += words[w].count;
    for (int32_t a = 0; a < t->vocab; a++)
      for (int32_t b = 0; b < t->vocab; b++)
        if (counts[(size_t)a * t->vocab + b] > best) best = counts[(size_t)a * t->vocab + b], ba = a, bb = b;
    if (ba != t->merge_left[r] || bb != t->merge_right[r]) {
      fprintf(stderr, "merge %d: trainer chose (%d, %d), reference (%d, %d) with count %lld\n", r,
              t->merge_left[r], t->merge_right[r], ba, bb, (long long)best);
      ok = 0;
    }
    int32_t x = t->merge_result[r];
    for (size_t w = 0; w < nw; w++) {
      size_t k = 0;
      for (size_t i = 0; i < words[w].len;) {
        if (i + 1 < words[w].len && words[w].sym[i] == ba && words[w].sym[i + 1] == bb) {
          words[w].sym[k++] = x;
          i += 2;
        } else {
          words[w].sym[k++] = words[w].sym[i++];
        }
      }
      words[w].len = k;
    }
  }
  for (size_t w = 0; w < nw; w++) free(words[w].sym);
  free(words);
  free(counts);
  return ok;
}

/* ------------------------------------------------------------ test data --- */

/* Random text from pieces that exercise every class and invalid UTF-8. */
static size_t random_text(atoll_rng *rng, uint8_t *buf, size_t max) {
  static const char *pieces[] = {"the", " the", "ing", " and", "e", "t", "'s", "'ll", " ", "  ", "\n", "\t",
                                 "0", "42", "!", "?!", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x99\x82",
                                 "\xc2\xa0", "\xff", "\x80", "\xc3", "\xe6\x97", "\xed\xa0\x80", "\x00"};
  size_t n = 0;
  while (n < max) {
    uint64_t r = atoll_rng_next(rng);
    if (r % 8 == 0) {
      buf[n++] = (uint8_t)(r >> 8); /* any byte */
      continue;
    }
    const char *p = pieces[(r >> 8) % (sizeof pieces / sizeof *pieces)];
    size_t l = p[0] ? strlen(p) : 1;
    if (n + l > max) break;
    memcpy(buf + n, p, l);
    n += l;
  }
  return n;
}

static atoll_tokenizer *train_on(const char *name, const char *text, size_t n, int vocab) {
  write_text(tmp_path(name), text, n);
  const char *files[] = {tmp_path(name)};
  atoll_tokenizer *t = NULL;
  atoll_err err;
  CHECK_OK(atoll_bpe_train(&t, files, 1, vocab, NULL, &err), &err);
  return t;
}

static char *corpus(size_t *n) {
  /* some real text when the fortunes are installed, always some random text */
  char *text = NULL;
  size_t len = 0;
  FILE *f = fopen("/usr/share/games/fortunes/art", "rb");
  text = malloc(200000 + 60000);
  if (f) {
    len = fread(text, 1, 200000, f);
    fclose(f);
  }
  atoll_rng rng;
  atoll_rng_seed(&rng, 7);
  len += random_text(&rng, (uint8_t *)text + len, 60000);
  *n = len;
  return text;
}

/* ---------------------------------------------------------------- tests --- */

static void test_encode_roundtrip(atoll_tokenizer *t) {
  atoll_rng rng;
  atoll_rng_seed(&rng, 16);
  uint8_t *buf = malloc(20000), *back = NULL;
  atoll_tokens ids = {0}, ref = {0};
  atoll_err err;
  int bad_ref = 0, bad_round = 0;
  for (int trial = 0; trial < 300; trial++) {
    size_t n = random_text(&rng, buf, 1 + atoll_rng_next(&rng) % (trial < 290 ? 2000 : 20000));
    if (trial == 295) { /* long words: beyond the stack buffers and the cache */
      memset(buf, ' ', 5000);
      memset(buf + 5000, 'a', 5000);
      memset(buf + 10000, '!', 5000);
      n = 15000;
    }
    ids.n = 0;
    CHECK_OK(atoll_tokenizer_encode(t, buf, n, &ids, &err), &err);
    ref_encode(t, buf, n, &ref);
    if (ref.n != ids.n || memcmp(ref.ids, ids.ids, ids.n * sizeof *ids.ids) != 0) bad_ref++;
    size_t len = 0;
    CHECK_OK(atoll_tokenizer_decode(t, ids.ids, ids.n, &back, &len, &err), &err);
    if (len != n || memcmp(back, buf, n) != 0) bad_round++;
  }
  CHECK(bad_ref == 0);
  CHECK(bad_round == 0);
  /* the merges shorten text: fewer tokens than bytes */
  size_t n = random_text(&rng, buf, 20000);
  ids.n = 0;
  CHECK_OK(atoll_tokenizer_encode(t, buf, n, &ids, &err), &err);
  CHECK(ids.n < n);
  int32_t out_of_range = t->vocab;
  size_t len;
  CHECK(atoll_tokenizer_decode(t, &out_of_range, 1, &back, &len, &err) != 0);
  free(buf);
  free(back);
  atoll_tokens_free(&ids);
  atoll_tokens_free(&ref);
}

/* Encoding in pieces cut at atoll_tokenizer_safe_cut gives the whole's ids. */
static void test_safe_cut(atoll_tokenizer *t, const char *text, size_t n) {
  atoll_tokens whole = {0}, pieces = {0};
  atoll_err err;
  CHECK_OK(atoll_tokenizer_encode(t, (const uint8_t *)text, n, &whole, &err), &err);
  size_t cuts = 0;
  for (size_t at = 0; at < n;) {
    size_t cut = atoll_tokenizer_safe_cut((const uint8_t *)text + at, n - at, 1 + (at * 7919) % 3000);
    CHECK(cut > 0 && cut <= n - at);
    CHECK_OK(atoll_tokenizer_encode(t, (const uint8_t *)text + at, cut, &pieces, &err), &err);
    at += cut;
    cuts++;
  }
  CHECK(cuts > 20);
  CHECK(whole.n == pieces.n && memcmp(whole.ids, pieces.ids, whole.n * sizeof *whole.ids) == 0);
  /* every cut it offers in a text dense with newlines and whitespace */
  static const char *bits[] = {"a", " ", "\n", "\n\n", " \n", "\t", "x'", "'s", "9", "\xc3\xa9", "\xc2\xa0", "\xff", "!"};
  char dense[3000];
  size_t dn = 0;
  atoll_rng rng;
  atoll_rng_seed(&rng, 3);
  while (dn < sizeof dense - 4) {
    const char *b = bits[atoll_rng_next(&rng) % (sizeof bits / sizeof *bits)];
    memcpy(dense + dn, b, strlen(b));
    dn += strlen(b);
  }
  /* the pre-tokens, not only the ids (a cut could split what no merge joins) */
  uint8_t ends[3000] = {0};
  const uint8_t *d = (const uint8_t *)dense;
  for (size_t pos = 0; pos < dn;) ends[pos = atoll_pretoken_end(d, dn, pos)] = 1;
  int bad = 0;
  for (size_t want = 0; want < dn; want++) {
    size_t cut = atoll_tokenizer_safe_cut(d, dn, want), pos = 0;
    if (cut == dn) continue;
    bad += !ends[cut];
    while (pos < cut) { /* the first piece alone ends where the whole's pre-tokens do */
      pos = atoll_pretoken_end(d, cut, pos);
      bad += !ends[pos];
    }
  }
  CHECK(bad == 0);
  atoll_tokens_free(&whole);
  atoll_tokens_free(&pieces);
}

static void test_json_roundtrip(atoll_tokenizer *t) {
  atoll_err err;
  CHECK_OK(atoll_tokenizer_write_json(t, tmp_path("tok.json"), &err), &err);
  atoll_tokenizer *u = NULL;
  CHECK_OK(atoll_tokenizer_load(&u, tmp_path("tok.json"), &err), &err);
  if (!u) return;
  CHECK(atoll_tokenizer_hash(u) == atoll_tokenizer_hash(t));
  CHECK(u->vocab == t->vocab && u->nmerges == t->nmerges);
  CHECK(strcmp(atoll_tokenizer_kind(u), "bpe") == 0);
  for (int r = 0; r < t->nmerges; r++)
    CHECK(u->merge_left[r] == t->merge_left[r] && u->merge_right[r] == t->merge_right[r] &&
          u->merge_result[r] == t->merge_result[r]);
  atoll_tokenizer_free(u);
}

static void test_bytes(void) {
  atoll_tokenizer *b = NULL, *c = NULL;
  atoll_err err;
  CHECK_OK(atoll_tokenizer_bytes(&b, &err), &err);
  CHECK(strcmp(atoll_tokenizer_kind(b), "bytes") == 0 && atoll_tokenizer_vocab(b) == 256);
  atoll_tokens ids = {0};
  const uint8_t text[] = "h\xc3\xa9 \xff\x00!";
  CHECK_OK(atoll_tokenizer_encode(b, text, sizeof text, &ids, &err), &err);
  CHECK(ids.n == sizeof text);
  for (size_t i = 0; i < ids.n && i < sizeof text; i++) CHECK(ids.ids[i] == text[i]);
  CHECK_OK(atoll_tokenizer_write_json(b, tmp_path("bytes.json"), &err), &err);
  CHECK_OK(atoll_tokenizer_load(&c, tmp_path("bytes.json"), &err), &err);
  CHECK(c && strcmp(atoll_tokenizer_kind(c), "bytes") == 0 && atoll_tokenizer_hash(c) == atoll_tokenizer_hash(b));
  /* the byte symbols: printable bytes are themselves, the rest U+0100.. in order */
  CHECK(atoll_byte_symbol('!') == '!' && atoll_byte_symbol(' ') == 0x120 && atoll_byte_symbol(0) == 0x100);
  for (int x = 0; x < 256; x++) CHECK(atoll_symbol_byte(atoll_byte_symbol((uint8_t)x)) == x);
  atoll_tokens_free(&ids);
  atoll_tokenizer_free(b);
  atoll_tokenizer_free(c);
}

/* Replaces the first occurrence of from in text by to (a new string). */
static char *replace(const char *text, const char *from, const char *to) {
  const char *at = strstr(text, from);
  if (!at) {
    fprintf(stderr, "corruption: '%s' not found in the file\n", from);
    check_failures++;
    return strdup(text);
  }
  size_t n = strlen(text) - strlen(from) + strlen(to);
  char *out = malloc(n + 1);
  size_t pre = (size_t)(at - text);
  memcpy(out, text, pre);
  strcpy(out + pre, to);
  strcat(out, at + strlen(from));
  return out;
}

/* Parses text (n bytes) and expects a refusal of one line that names the file and holds want. */
static void expect_refused(const char *what, const char *text, size_t n, const char *want) {
  atoll_err err;
  atoll_tokenizer *u = NULL;
  int rc = atoll_tokenizer_parse(&u, text, n, "bad.json", &err);
  if (rc == 0 || u || !strstr(err.msg, "bad.json") || strchr(err.msg, '\n') || !strstr(err.msg, want)) {
    fprintf(stderr, "%s: rc %d, message: %s (expected '%s')\n", what, rc, rc ? err.msg : "(none)", want);
    check_failures++;
  }
  atoll_tokenizer_free(u);
}

/* Strings of the file taken as hostile: merges in the array form (whose strings have no
 * bound: a long one overflowed the lookup's buffer), a raw NUL (cut the token short), a
 * deep nesting. */
static void test_hostile_strings(const char *good) {
  atoll_err err;
  atoll_tokenizer *t = NULL, *u = NULL;
  CHECK_OK(atoll_tokenizer_parse(&t, good, strlen(good), "good.json", &err), &err);
  /* every merge "l r" as ["l", "r"]: the same tokenizer */
  char *arr = malloc(2 * strlen(good) + 1);
  size_t k = 0;
  const char *m = strstr(good, "\"merges\":");
  memcpy(arr, good, (size_t)(m - good));
  k = (size_t)(m - good);
  int in = 0;
  for (const char *p = m; *p; p++) { /* merges are last in the model: "l r" -> ["l","r"] up to its ']' */
    if (!in && *p == ']') {
      strcpy(arr + k, p);
      k += strlen(p);
      break;
    }
    if (in && *p == '\\') { /* an escape: two bytes as they are */
      arr[k++] = *p++;
      arr[k++] = *p;
    } else if (*p == '"' && p > m + 8) {
      arr[k++] = in ? '"' : '[';
      arr[k++] = in ? ']' : '"';
      in = !in;
    } else if (in && *p == ' ') {
      memcpy(arr + k, "\",\"", 3);
      k += 3;
    } else {
      arr[k++] = *p;
    }
  }
  arr[k] = 0;
  CHECK_OK(atoll_tokenizer_parse(&u, arr, k, "arrays.json", &err), &err);
  CHECK(u && t && atoll_tokenizer_hash(u) == atoll_tokenizer_hash(t));
  atoll_tokenizer_free(u);
  /* a first merge of a 100 kB token, left or right, in the array form: no token, refused */
  size_t longn = 100000, pre = (size_t)(strchr(strstr(arr, "\"merges\":"), '[') + 1 - arr);
  char *aaa = malloc(longn + 1), *lng = malloc(k + longn + 16);
  memset(aaa, 'A', longn);
  aaa[longn] = 0;
  snprintf(lng, k + longn + 16, "%.*s[\"%s\",\"b\"],%s", (int)pre, arr, aaa, arr + pre);
  expect_refused("array merge of a 100 kB token", lng, strlen(lng), "merge 0 names a token that is not in the vocabulary");
  snprintf(lng, k + longn + 16, "%.*s[\"b\",\"%s\"],%s", (int)pre, arr, aaa, arr + pre);
  expect_refused("array merge, long right token", lng, strlen(lng), "merge 0 names a token that is not in the vocabulary");
  free(aaa);
  free(lng);
  free(arr);
  /* a raw NUL inside a token: "Ā<NUL>x" was read as "Ā", and the file accepted */
  char *nul = replace(good, "\"Ā\":\t0", "\"Ā@x\":\t0");
  size_t n = strlen(nul);
  strstr(nul, "Ā@x")[2] = 0; /* the @ (Ā is two bytes) */
  expect_refused("raw NUL in a token", nul, n, "raw control byte 0x00");
  free(nul);
  /* nesting far deeper than cJSON's limit: refused, not a stack overflow */
  size_t deep = 200000;
  char *d = malloc(deep);
  memset(d, '[', deep);
  expect_refused("deep nesting", d, deep, "invalid JSON");
  free(d);
  atoll_tokenizer_free(t);
}

static void test_corrupt(atoll_tokenizer *t) {
  char *good = atoll_tokenizer_to_json(t);
  atoll_err err;
  atoll_tokenizer *u = NULL;
  CHECK_OK(atoll_tokenizer_parse(&u, good, strlen(good), "good.json", &err), &err);
  atoll_tokenizer_free(u);
  /* {from, to, a word the message must hold} */
  const char *cases[][3] = {
      {"\"type\":\t\"BPE\"", "\"type\":\t\"WordPiece\"", "BPE"},
      {"\"add_prefix_space\":\tfalse", "\"add_prefix_space\":\ttrue", "add_prefix_space"},
      {"\"use_regex\":\ttrue", "\"use_regex\":\tfalse", "use_regex"},
      {"\"added_tokens\":\t[]", "\"added_tokens\":\t[{\"id\":0}]", "added_tokens"},
      {"\"normalizer\":\tnull", "\"normalizer\":\t{\"type\":\"NFKC\"}", "normalizer"},
      {"\"dropout\":\tnull", "\"dropout\":\t0.1", "dropout"},
      {"\"byte_fallback\":\tfalse", "\"byte_fallback\":\ttrue", "byte_fallback"},
      {"\"Ā\":\t0", "\"Ā\":\t1", "two tokens"},
      {"\"Ā\":\t0", "\"Ā\":\t-1", "id"},
      {"\"Ā\":\t0", "\"Ā\":\t0.5", "id"},
      {"\"Ā\":\t0", "\"Ā\":\t\"0\"", "not a number"},
      {"\"Ā\":\t0", "\"\xe4\xb8\x80\":\t0", "byte-level"},
      {"\"Ā\":\t0", "\"\":\t0", "empty"},
      {"\"Ā\":\t0", "\"ā\":\t0", "key 'ā' appears more than once"},
      /* a key twice anywhere: cJSON reads the first, tokenizers (serde) the last or none */
      {"\"normalizer\":\tnull", "\"normalizer\":\tnull, \"normalizer\":\t{\"type\":\"NFC\"}", "more than once"},
      /* raw control bytes inside strings: JSON needs them escaped (tokenizers refuses them) */
      {"\"Ā\":\t0", "\"Ā\x01\":\t0", "raw control byte 0x01"},
      {"\"type\":\t\"BPE\"", "\"type\":\t\"BPE\n\"", "raw control byte 0x0A"},
      {"\"merges\":\t[\"", "\"merges\":\t[\"Ā \", \"", "merge 0"},
      {"\"merges\":\t[\"", "\"merges\":\t[\"\xe4\xb8\x80 \xe4\xb8\x80\", \"", "merge 0"},
      {"\"merges\":\t[\"", "\"merges\":\t[\"Ā Ā\", \"", "not in the vocabulary"},
      {"\"merges\":\t[\"", "\"merges\":\t[7, \"", "merge 0"},
      {"\"merges\":\t[", "\"merges\":\t{\"x\":[", "JSON"},
      {"\"merges\":", "\"merges_\":", "merges"},
      {"\"vocab\":", "\"vocab_\":", "vocab"},
      {"\"model\":", "\"model_\":", "model"},
      {"\"pre_tokenizer\":\t{", "\"pre_tokenizer\":\tnull, \"x\":\t{", "pre_tokenizer"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char *bad = replace(good, cases[i][0], cases[i][1]);
    u = NULL;
    int rc = atoll_tokenizer_parse(&u, bad, strlen(bad), "bad.json", &err);
    if (rc == 0 || u || !strstr(err.msg, "bad.json") || strchr(err.msg, '\n') || !strstr(err.msg, cases[i][2])) {
      fprintf(stderr, "corruption %zu (%s -> %s): rc %d, message: %s\n", i, cases[i][0], cases[i][1], rc,
              rc ? err.msg : "(none)");
      check_failures++;
    }
    atoll_tokenizer_free(u);
    free(bad);
  }
  test_hostile_strings(good);
  /* truncated anywhere: refused, one line */
  size_t n = strlen(good);
  for (size_t cut = 0; cut < n; cut += n / 97 + 1) {
    u = NULL;
    int rc = atoll_tokenizer_parse(&u, good, cut, "cut.json", &err);
    CHECK(rc != 0 && !u && !strchr(err.msg, '\n') && strstr(err.msg, "cut.json"));
  }
  /* anything after the object: refused, naming the byte (a second object, junk, a NUL) */
  const char *tails[] = {"{}", "x", "\n]"};
  for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
    size_t tl = strlen(tails[i]);
    char *two = malloc(n + tl + 1);
    memcpy(two, good, n);
    memcpy(two + n, tails[i], tl + 1);
    u = NULL;
    int rc = atoll_tokenizer_parse(&u, two, n + tl, "tail.json", &err);
    CHECK(rc != 0 && !u && strstr(err.msg, "tail.json: unexpected content after the JSON object"));
    free(two);
  }
  {
    char *nul = malloc(n + 2);
    memcpy(nul, good, n);
    nul[n] = '\0', nul[n + 1] = ' ';
    u = NULL;
    CHECK(atoll_tokenizer_parse(&u, nul, n + 2, "nul.json", &err) != 0 && !u && strstr(err.msg, "unexpected content"));
    free(nul);
  }
  /* a missing file names itself */
  CHECK(atoll_tokenizer_load(&u, tmp_path("missing.json"), &err) != 0 && strstr(err.msg, "missing.json"));
  free(good);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/atoll_test_tokenizer_XXXXXX");
  if (!mkdtemp(tmpdir)) return 1;
  test_pretokens();
  test_bytes();
  size_t n;
  char *text = corpus(&n);
  atoll_tokenizer *t = train_on("corpus.txt", text, n, 600);
  if (t) {
    CHECK(t->vocab == 600);
    CHECK(ref_train_check(t, (const uint8_t *)text, n));
    atoll_tokenizer *again = train_on("corpus2.txt", text, n, 600);
    CHECK(again && atoll_tokenizer_hash(again) == atoll_tokenizer_hash(t)); /* deterministic */
    atoll_tokenizer_free(again);
    test_encode_roundtrip(t);
    test_safe_cut(t, text, n);
    test_json_roundtrip(t);
    test_corrupt(t);
  }
  /* the first merge of "abababab cdcd" is (a, b): 4 occurrences */
  atoll_tokenizer *s = train_on("small.txt", "abababab cdcd", 13, 257);
  CHECK(s && s->nmerges == 1 && s->merge_left[0] == 'a' && s->merge_right[0] == 'b');
  atoll_tokenizer *z = NULL;
  atoll_err err;
  const char *files[] = {tmp_path("small.txt")};
  CHECK(atoll_bpe_train(&z, files, 1, 255, NULL, &err) != 0 && strstr(err.msg, "vocab"));
  atoll_tokenizer_free(s);
  atoll_tokenizer_free(t);
  free(text);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  CHECK_DONE();
}
