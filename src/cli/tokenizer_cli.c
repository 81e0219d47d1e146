/* atoll tokenizer: train, inspect and run tokenizers from the command line.
 *
 *   atoll tokenizer train  --text FILE|DIR... --vocab-size N --out tokenizer.json [--jsonl-field KEY]
 *   atoll tokenizer bytes  --out tokenizer.json
 *   atoll tokenizer info   --tokenizer FILE
 *   atoll tokenizer encode --tokenizer FILE [--text FILE] [--stats]
 *   atoll tokenizer decode --tokenizer FILE [--ids FILE] [--keep-special]
 */
#include "cli/tokenizer_cli.h"
#include "core/clock.h"
#include "core/fs.h"
#include "text/text_input.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fail(const atoll_err *err) {
  fprintf(stderr, "atoll: error: %s\n", err->msg);
  return 1;
}

static void help(FILE *f) {
  fprintf(f,
          "usage: atoll tokenizer <train|bytes|info|encode|decode> [options]\n\n"
          "  train  --text FILE|DIR... --vocab-size N --out FILE [--jsonl-field KEY]\n"
          "         byte-level BPE with GPT-2's pre-tokenization, written as Hugging Face\n"
          "         tokenizer.json; reads --text as atoll prepare does: a DIR stands for the\n"
          "         files below it, gzip is decompressed, *.jsonl and *.jsonl.gz give each\n"
          "         line's KEY (default \"text\")\n"
          "  bytes  --out FILE          the byte tokenizer (256 ids = bytes) as tokenizer.json\n"
          "  info   --tokenizer FILE    kind, vocabulary, merges and hash\n"
          "  encode --tokenizer FILE [--text FILE] [--stats]\n"
          "         ids of the file (default stdin), space-separated, with the special\n"
          "         tokens tokenizer.json's post_processor puts around a text (BOS), as\n"
          "         Hugging Face's encode does; --stats prints only bytes, tokens and\n"
          "         encoding speed\n"
          "  decode --tokenizer FILE [--ids FILE] [--keep-special]\n"
          "         the bytes of whitespace-separated ids (default stdin); special added\n"
          "         tokens are left out, as Hugging Face's decode does, unless --keep-special\n");
}

/* Reads all of path ("-" or NULL: stdin; a pipe such as --text <(cmd) is read as stdin is). */
static int slurp(const char *path, char **out, size_t *len, atoll_err *err) {
  struct stat st;
  int piped = path && strcmp(path, "-") != 0 && stat(path, &st) == 0 && S_ISFIFO(st.st_mode);
  if (path && strcmp(path, "-") != 0 && !piped) return atoll_read_file(path, (size_t)1 << 40, out, len, err);
  FILE *in = piped ? fopen(path, "rb") : stdin;
  const char *name = piped ? path : "stdin";
  if (!in) return atoll_fail(err, "%s: cannot open: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  for (;;) {
    if (!b) {
      if (piped) fclose(in);
      return atoll_fail(err, "%s: out of memory", name);
    }
    size_t got = fread(b + n, 1, cap - n - 1, in);
    n += got;
    if (got == 0) break;
    if (n + 1 == cap) {
      char *g = realloc(b, cap *= 2);
      if (!g) free(b);
      b = g;
    }
  }
  int bad = ferror(in), why = errno;
  if (piped) fclose(in);
  if (bad) {
    free(b);
    return atoll_fail(err, "%s: cannot read: %s", name, strerror(why));
  }
  b[n] = 0;
  *out = b;
  *len = n;
  return 0;
}

/* atoll tokenizer train: the --text arguments become sources exactly as atoll prepare's
 * do (src/text/text_input.h: directories walked, gzip decompressed, JSON Lines reduced
 * to --jsonl-field's text), so a tokenizer learns the text prepare will encode. */
static int cmd_train(int argc, char **argv) {
  atoll_err err = {{0}};
  atoll_text_list files = {0};
  const char **args = malloc(sizeof(char *) * (size_t)(argc + 1));
  int nargs = 0, in_text = 0, rc = 1;
  long vocab = -1;
  const char *out = NULL, *field = "text";
  if (!args) {
    atoll_fail(&err, "out of memory reading the flags");
    goto done;
  }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--text") == 0) {
      in_text = 1;
    } else if (strcmp(a, "--jsonl-field") == 0) {
      in_text = 0;
      if (i + 1 >= argc || !argv[i + 1][0]) {
        atoll_fail(&err, "--jsonl-field: missing value (a JSON key, e.g. text)");
        goto done;
      }
      field = argv[++i];
    } else if (strcmp(a, "--vocab-size") == 0 || strcmp(a, "--out") == 0) {
      in_text = 0;
      if (i + 1 >= argc) {
        atoll_fail(&err, "%s: missing value", a);
        goto done;
      }
      if (a[2] == 'o') {
        out = argv[++i];
      } else {
        char *end;
        errno = 0;
        vocab = strtol(argv[++i], &end, 10);
        if (*end || end == argv[i] || errno || vocab < 256 || vocab > ATOLL_TOKENIZER_MAX_VOCAB) {
          atoll_fail(&err, "--vocab-size: expected an integer in [256, %d], got '%s'", ATOLL_TOKENIZER_MAX_VOCAB,
                     argv[i]);
          goto done;
        }
      }
    } else if (in_text && strncmp(a, "--", 2) != 0) {
      args[nargs++] = a;
    } else {
      atoll_fail(&err, "%s: unknown flag for tokenizer train (see atoll tokenizer --help)", a);
      goto done;
    }
  }
  if (!nargs || vocab < 0 || !out) {
    atoll_fail(&err, "%s: tokenizer train needs --text FILE|DIR..., --vocab-size N and --out FILE",
               !nargs ? "--text" : vocab < 0 ? "--vocab-size" : "--out");
    goto done;
  }
  if (atoll_text_list_expand(&files, args, nargs, NULL, &err) != 0) goto done;
  atoll_tokenizer *t = NULL;
  atoll_bpe_train_stats st;
  double t0 = atoll_seconds();
  if (atoll_bpe_train_inputs(&t, (const char *const *)files.paths, files.n, field, (int)vocab, &st, &err) != 0)
    goto done;
  double secs = atoll_seconds() - t0;
  if (atoll_tokenizer_write_json(t, out, &err) == 0) {
    char hex[17];
    atoll_tokenizer_hash_hex(t, hex);
    fprintf(stderr,
            "atoll tokenizer train: %d file(s), %.1f MB, %llu distinct words; vocabulary %d (%d merges) -> %s\n"
            "  %.2f s (read %.2f, count words %.2f, merge %.2f): %.2f MB/s; hash %s\n",
            files.n, st.bytes / 1e6, (unsigned long long)st.words, atoll_tokenizer_vocab(t),
            atoll_tokenizer_merges(t), out, secs, st.read_s, st.count_s, st.merge_s,
            secs > 0 ? st.bytes / 1e6 / secs : 0.0, hex);
    rc = 0;
  }
  atoll_tokenizer_free(t);
done:
  atoll_text_list_free(&files);
  free(args);
  return rc ? fail(&err) : 0;
}

/* Flags of the other subcommands: --tokenizer, --text, --ids, --out, --stats, --keep-special. */
typedef struct {
  const char *tokenizer, *text, *ids, *out;
  int stats, keep_special;
} flags;

static int parse_flags(const char *cmd, int argc, char **argv, flags *f, atoll_err *err) {
  memset(f, 0, sizeof *f);
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char **slot = strcmp(a, "--tokenizer") == 0 ? &f->tokenizer
                        : strcmp(a, "--text") == 0    ? &f->text
                        : strcmp(a, "--ids") == 0     ? &f->ids
                        : strcmp(a, "--out") == 0     ? &f->out
                                                      : NULL;
    if (strcmp(a, "--stats") == 0) {
      f->stats = 1;
    } else if (strcmp(a, "--keep-special") == 0) {
      f->keep_special = 1;
    } else if (!slot) {
      return atoll_fail(err, "%s: unknown flag for tokenizer %s (see atoll tokenizer --help)", a, cmd);
    } else if (i + 1 >= argc) {
      return atoll_fail(err, "%s: missing value", a);
    } else {
      *slot = argv[++i];
    }
  }
  return 0;
}

static int cmd_encode(const flags *f, atoll_tokenizer *t, atoll_err *err) {
  char *text = NULL;
  size_t len = 0;
  if (slurp(f->text, &text, &len, err) != 0) return -1;
  atoll_tokens ids = {0};
  double t0 = atoll_seconds();
  int rc = atoll_tokenizer_encode(t, (const uint8_t *)text, len, &ids, err);
  double secs = atoll_seconds() - t0;
  free(text);
  if (rc == 0 && f->stats) {
    printf("bytes %zu tokens %zu seconds %.6f MB/s %.3f\n", len, ids.n, secs, secs > 0 ? len / 1e6 / secs : 0.0);
  } else if (rc == 0) {
    const int32_t *pre, *post;
    int npre = atoll_tokenizer_prefix(t, &pre), npost = atoll_tokenizer_suffix(t, &post), k = 0;
    for (int i = 0; i < npre; i++) printf(k++ ? " %d" : "%d", pre[i]);
    for (size_t i = 0; i < ids.n; i++) printf(k++ ? " %d" : "%d", ids.ids[i]);
    for (int i = 0; i < npost; i++) printf(k++ ? " %d" : "%d", post[i]);
    printf("\n");
  }
  atoll_tokens_free(&ids);
  if (rc == 0) rc = atoll_flush_file(stdout, "stdout", err);
  return rc;
}

static int cmd_decode(const flags *f, atoll_tokenizer *t, atoll_err *err) {
  char *text = NULL;
  size_t len = 0;
  if (slurp(f->ids, &text, &len, err) != 0) return -1;
  atoll_tokens ids = {0};
  int rc = 0;
  for (char *p = text; rc == 0;) {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v >= atoll_tokenizer_vocab(t)) {
      size_t word = strcspn(p, " \n\t\r");
      rc = atoll_fail(err, "%s: '%.*s' at byte %zu is not a token id of this tokenizer (0..%d)",
                      f->ids ? f->ids : "stdin", (int)(word < 20 ? word : 20), p, (size_t)(p - text),
                      atoll_tokenizer_vocab(t) - 1);
      break;
    }
    if (ids.n == ids.cap) {
      size_t cap = ids.cap ? 2 * ids.cap : 1024;
      int32_t *g = realloc(ids.ids, cap * sizeof *g);
      if (!g) {
        rc = atoll_fail(err, "decode: out of memory");
        break;
      }
      ids.ids = g;
      ids.cap = cap;
    }
    ids.ids[ids.n++] = (int32_t)v;
    p = end;
  }
  free(text);
  uint8_t *bytes = NULL;
  size_t n = 0;
  if (rc == 0)
    rc = f->keep_special ? atoll_tokenizer_decode(t, ids.ids, ids.n, &bytes, &n, err)
                         : atoll_tokenizer_decode_text(t, ids.ids, ids.n, &bytes, &n, err);
  if (rc == 0) fwrite(bytes, 1, n, stdout); /* a short write leaves ferror set: the flush reports it */
  if (rc == 0) rc = atoll_flush_file(stdout, "stdout", err);
  free(bytes);
  atoll_tokens_free(&ids);
  return rc;
}

int atoll_cli_tokenizer(int argc, char **argv) {
  atoll_err err = {{0}};
  if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
    help(argc < 1 ? stderr : stdout);
    return argc < 1 ? 2 : 0;
  }
  const char *cmd = argv[0];
  if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1);
  int known = strcmp(cmd, "bytes") == 0 || strcmp(cmd, "info") == 0 || strcmp(cmd, "encode") == 0 ||
              strcmp(cmd, "decode") == 0;
  if (!known) {
    atoll_fail(&err, "tokenizer %s: unknown subcommand (train, bytes, info, encode, decode)", cmd);
    return fail(&err);
  }
  flags f;
  if (parse_flags(cmd, argc - 1, argv + 1, &f, &err) != 0) return fail(&err);
  atoll_tokenizer *t = NULL;
  int rc = 0;
  if (strcmp(cmd, "bytes") == 0) {
    if (!f.out) {
      atoll_fail(&err, "--out: tokenizer bytes needs --out FILE");
      return fail(&err);
    }
    rc = atoll_tokenizer_bytes(&t, &err);
    if (rc == 0) rc = atoll_tokenizer_write_json(t, f.out, &err);
  } else if (!f.tokenizer) {
    atoll_fail(&err, "--tokenizer: tokenizer %s needs --tokenizer FILE", cmd);
    return fail(&err);
  } else if ((rc = atoll_tokenizer_load(&t, f.tokenizer, &err)) == 0) {
    if (strcmp(cmd, "info") == 0) {
      char hex[17];
      atoll_tokenizer_hash_hex(t, hex);
      printf("kind %s vocab %d merges %d hash %s\n", atoll_tokenizer_kind(t), atoll_tokenizer_vocab(t),
             atoll_tokenizer_merges(t), hex);
    } else if (strcmp(cmd, "encode") == 0) {
      rc = cmd_encode(&f, t, &err);
    } else {
      rc = cmd_decode(&f, t, &err);
    }
  }
  atoll_tokenizer_free(t);
  return rc ? fail(&err) : 0;
}
