/* Streaming JSON Lines parser (see jsonl.h): one byte at a time through a pushdown
 * state machine, so a line of any length costs no memory. Whitespace is JSON's (space,
 * tab, CR), so CRLF line ends work; a '\n' ends a line and may appear nowhere inside a
 * value. Lines of whitespace only are skipped. */
#include "text/jsonl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

enum {
  S_LINE,      /* line start: whitespace, '{', or '\n' (a blank line) */
  S_OBJ_FIRST, /* after '{': a key or '}' */
  S_OBJ_KEY,   /* after ',' in an object: a key */
  S_COLON,     /* after a key */
  S_VALUE,     /* a value must start */
  S_ARR_FIRST, /* after '[': a value or ']' */
  S_AFTER,     /* after a value inside a container: ',' or the closing bracket */
  S_STRING,
  S_ESC,       /* after a backslash */
  S_HEX,       /* inside \uXXXX */
  S_NUM_MINUS, /* after '-' */
  S_NUM_ZERO,  /* after a leading 0 */
  S_NUM_INT,
  S_NUM_DOT,   /* after '.' */
  S_NUM_FRAC,
  S_NUM_E,     /* after 'e' or 'E' */
  S_NUM_ESIGN, /* after the exponent's sign */
  S_NUM_EXP,
  S_LIT,       /* inside true, false or null */
  S_END,       /* after the line's object: whitespace, then '\n' */
};

enum { CONSUMED = 0, AGAIN = 1, FAIL = -1 };

int atoll_jsonl_init(atoll_jsonl *p, const char *name, const char *field, atoll_err *err) {
  memset(p, 0, sizeof *p);
  p->name = name;
  p->line = 1;
  size_t len = strlen(field);
  if (len == 0 || len > ATOLL_JSONL_MAX_FIELD)
    return atoll_fail(err, "--jsonl-field: must be 1 to %d bytes, got %zu", ATOLL_JSONL_MAX_FIELD, len);
  memcpy(p->field, field, len + 1);
  p->field_len = len;
  return 0;
}

static int bad(const atoll_jsonl *p, atoll_err *err, const char *what, int c) {
  if (c < 0)
    return atoll_fail(err, "%s:%" PRIu64 ": not JSON: %s", p->name, p->line, what);
  if (c == '\n')
    return atoll_fail(err, "%s:%" PRIu64 ": not JSON: %s, got the end of the line", p->name, p->line, what);
  if (c > 0x20 && c < 0x7f)
    return atoll_fail(err, "%s:%" PRIu64 ": not JSON: %s, got '%c'", p->name, p->line, what, c);
  return atoll_fail(err, "%s:%" PRIu64 ": not JSON: %s, got byte 0x%02x", p->name, p->line, what, c);
}

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\r'; }

static int is_object(const atoll_jsonl *p) { return p->stack[(p->depth - 1) / 8] >> ((p->depth - 1) % 8) & 1; }

/* One decoded byte of a string: compared with the field name, emitted, or dropped. */
static void put(atoll_jsonl *p, uint8_t b, uint8_t *out, size_t *o) {
  if (p->is_key) {
    if (p->key_at_top) {
      if (p->key_pos >= p->field_len || (uint8_t)p->field[p->key_pos] != b) p->key_match = 0;
      p->key_pos++;
    }
  } else if (p->emitting) {
    out[(*o)++] = b;
    p->last = b;
    p->doc_bytes++;
  }
}

static void put_code(atoll_jsonl *p, uint32_t c, uint8_t *out, size_t *o) {
  if (c < 0x80) {
    put(p, (uint8_t)c, out, o);
  } else if (c < 0x800) {
    put(p, (uint8_t)(0xc0 | c >> 6), out, o);
    put(p, (uint8_t)(0x80 | (c & 0x3f)), out, o);
  } else if (c < 0x10000) {
    put(p, (uint8_t)(0xe0 | c >> 12), out, o);
    put(p, (uint8_t)(0x80 | (c >> 6 & 0x3f)), out, o);
    put(p, (uint8_t)(0x80 | (c & 0x3f)), out, o);
  } else {
    put(p, (uint8_t)(0xf0 | c >> 18), out, o);
    put(p, (uint8_t)(0x80 | (c >> 12 & 0x3f)), out, o);
    put(p, (uint8_t)(0x80 | (c >> 6 & 0x3f)), out, o);
    put(p, (uint8_t)(0x80 | (c & 0x3f)), out, o);
  }
}

/* A high surrogate not followed by a low one becomes U+FFFD. */
static void flush_high(atoll_jsonl *p, uint8_t *out, size_t *o) {
  if (p->high) put_code(p, 0xfffd, out, o);
  p->high = 0;
}

static void code_unit(atoll_jsonl *p, uint32_t c, uint8_t *out, size_t *o) {
  if (c >= 0xdc00 && c <= 0xdfff && p->high) {
    put_code(p, 0x10000 + ((p->high - 0xd800) << 10) + (c - 0xdc00), out, o);
    p->high = 0;
    return;
  }
  flush_high(p, out, o);
  if (c >= 0xd800 && c <= 0xdbff)
    p->high = c;
  else
    put_code(p, c >= 0xdc00 && c <= 0xdfff ? 0xfffd : c, out, o);
}

/* A value is complete: back to the container, or the line's object is done. */
static void value_done(atoll_jsonl *p) { p->state = p->depth == 0 ? S_END : S_AFTER; }

static int push(atoll_jsonl *p, int object, atoll_err *err) {
  if (p->depth == ATOLL_JSONL_MAX_DEPTH)
    return atoll_fail(err, "%s:%" PRIu64 ": JSON nested deeper than %d", p->name, p->line,
                      ATOLL_JSONL_MAX_DEPTH);
  uint8_t bit = (uint8_t)(1u << (p->depth % 8));
  p->stack[p->depth / 8] = object ? p->stack[p->depth / 8] | bit : p->stack[p->depth / 8] & ~bit;
  p->depth++;
  p->state = object ? S_OBJ_FIRST : S_ARR_FIRST;
  return 0;
}

static int end_line(atoll_jsonl *p, uint8_t *out, size_t *o, atoll_err *err) {
  if (!p->found)
    return atoll_fail(err, "%s:%" PRIu64 ": no \"%s\" field in this line's object (--jsonl-field)",
                      p->name, p->line, p->field);
  if (p->doc_bytes > 0 && p->last != '\n') out[(*o)++] = '\n'; /* documents end with a newline */
  if (p->doc_bytes > 0) p->doc_ended = 1; /* an empty one adds no text, so no boundary */
  p->documents++;
  p->found = 0;
  p->doc_bytes = 0;
  p->state = S_LINE;
  return 0;
}

static const char *kind_of(int c) {
  if (c == '{') return "an object";
  if (c == '[') return "an array";
  return "a number";
}

static int start_value(atoll_jsonl *p, int c, atoll_err *err) {
  /* true, false and null are named once read whole (so "text": two is not JSON) */
  if (p->value_is_field && c != '"' && c && strchr("{[-0123456789", c))
    return atoll_fail(err, "%s:%" PRIu64 ": \"%s\" holds %s, expected a string", p->name, p->line,
                      p->field, kind_of(c));
  int field = p->value_is_field;
  p->value_is_field = 0;
  p->field_literal = field;
  switch (c) {
    case '"':
      p->state = S_STRING;
      p->is_key = 0;
      p->emitting = field;
      return CONSUMED;
    case '{': return push(p, 1, err) ? FAIL : CONSUMED;
    case '[': return push(p, 0, err) ? FAIL : CONSUMED;
    case 't': p->literal = "true"; break;
    case 'f': p->literal = "false"; break;
    case 'n': p->literal = "null"; break;
    case '-': p->state = S_NUM_MINUS; return CONSUMED;
    case '0': p->state = S_NUM_ZERO; return CONSUMED;
    default:
      if (c >= '1' && c <= '9') {
        p->state = S_NUM_INT;
        return CONSUMED;
      }
      return bad(p, err, "expected a value", c);
  }
  p->state = S_LIT;
  p->lit_pos = 1;
  return CONSUMED;
}

static int hex_value(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int string_byte(atoll_jsonl *p, int c, uint8_t *out, size_t *o, atoll_err *err) {
  if (c == '"') {
    flush_high(p, out, o);
    if (!p->is_key) {
      p->emitting = 0;
      value_done(p);
      return CONSUMED;
    }
    p->is_key = 0;
    p->state = S_COLON;
    if (p->key_at_top && p->key_match && p->key_pos == p->field_len) {
      if (p->found)
        return atoll_fail(err, "%s:%" PRIu64 ": \"%s\" appears twice in one object", p->name,
                          p->line, p->field);
      p->found = p->value_is_field = 1;
    }
    return CONSUMED;
  }
  if (c == '\\') {
    p->state = S_ESC;
    return CONSUMED;
  }
  if (c == '\n') return bad(p, err, "the line ends inside a string", -1);
  if (c < 0x20)
    return atoll_fail(err, "%s:%" PRIu64 ": not JSON: control byte 0x%02x inside a string (must be "
                      "escaped)", p->name, p->line, c);
  flush_high(p, out, o);
  put(p, (uint8_t)c, out, o);
  return CONSUMED;
}

static int escape_byte(atoll_jsonl *p, int c, uint8_t *out, size_t *o, atoll_err *err) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  p->state = S_STRING;
  if (c == 'u') {
    p->state = S_HEX;
    p->hex_left = 4;
    p->code = 0;
    return CONSUMED;
  }
  const char *at = c ? strchr(from, c) : NULL;
  if (!at) return bad(p, err, "bad escape in a string", c);
  flush_high(p, out, o);
  put(p, (uint8_t)to[at - from], out, o);
  return CONSUMED;
}

/* Numbers: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; the byte after one is read again. */
static int number_byte(atoll_jsonl *p, int c, atoll_err *err) {
  int digit = c >= '0' && c <= '9';
  switch (p->state) {
    case S_NUM_MINUS:
      if (!digit) return bad(p, err, "expected a digit after '-'", c);
      p->state = c == '0' ? S_NUM_ZERO : S_NUM_INT;
      return CONSUMED;
    case S_NUM_INT:
      if (digit) return CONSUMED;
      /* fall through */
    case S_NUM_ZERO:
      if (c == '.') p->state = S_NUM_DOT;
      else if (c == 'e' || c == 'E') p->state = S_NUM_E;
      else break;
      return CONSUMED;
    case S_NUM_DOT:
      if (!digit) return bad(p, err, "expected a digit after '.'", c);
      p->state = S_NUM_FRAC;
      return CONSUMED;
    case S_NUM_FRAC:
      if (digit) return CONSUMED;
      if (c != 'e' && c != 'E') break;
      p->state = S_NUM_E;
      return CONSUMED;
    case S_NUM_E:
      if (c == '+' || c == '-') {
        p->state = S_NUM_ESIGN;
        return CONSUMED;
      }
      /* fall through */
    case S_NUM_ESIGN:
      if (!digit) return bad(p, err, "expected a digit in the exponent", c);
      p->state = S_NUM_EXP;
      return CONSUMED;
    case S_NUM_EXP:
      if (digit) return CONSUMED;
      break;
  }
  value_done(p);
  return AGAIN;
}

static int close_bracket(atoll_jsonl *p, int c, atoll_err *err) {
  if (c != (is_object(p) ? '}' : ']'))
    return bad(p, err, is_object(p) ? "expected ',' or '}'" : "expected ',' or ']'", c);
  p->depth--;
  value_done(p);
  return CONSUMED;
}

/* One input byte: CONSUMED, AGAIN (read it again in the new state) or FAIL. */
static int step(atoll_jsonl *p, int c, uint8_t *out, size_t *o, atoll_err *err) {
  switch (p->state) {
    case S_STRING: return string_byte(p, c, out, o, err);
    case S_ESC: return escape_byte(p, c, out, o, err);
    case S_HEX: {
      int v = hex_value(c);
      if (v < 0) return bad(p, err, "expected a hex digit in \\u escape", c);
      p->code = p->code << 4 | (uint32_t)v;
      if (--p->hex_left == 0) {
        p->state = S_STRING;
        code_unit(p, p->code, out, o);
      }
      return CONSUMED;
    }
    case S_NUM_MINUS: case S_NUM_ZERO: case S_NUM_INT: case S_NUM_DOT:
    case S_NUM_FRAC: case S_NUM_E: case S_NUM_ESIGN: case S_NUM_EXP:
      return number_byte(p, c, err);
    case S_LIT:
      if (p->literal[p->lit_pos] != c) return bad(p, err, "expected true, false or null", c);
      if (p->literal[++p->lit_pos] != 0) return CONSUMED;
      if (p->field_literal)
        return atoll_fail(err, "%s:%" PRIu64 ": \"%s\" holds %s, expected a string", p->name,
                          p->line, p->field, p->literal);
      value_done(p);
      return CONSUMED;
  }
  if (is_ws(c)) return CONSUMED;
  switch (p->state) {
    case S_LINE:
      if (c == '\n') {
        p->line++;
        return CONSUMED;
      }
      if (c != '{') return bad(p, err, "expected a JSON object ('{') at the start of the line", c);
      return push(p, 1, err) ? FAIL : CONSUMED;
    case S_END:
      if (c != '\n') return bad(p, err, "expected the end of the line after the object", c);
      if (end_line(p, out, o, err)) return FAIL;
      p->line++;
      return CONSUMED;
    case S_OBJ_FIRST:
      if (c == '}') return close_bracket(p, c, err);
      /* fall through */
    case S_OBJ_KEY:
      if (c != '"') return bad(p, err, "expected a key (a string)", c);
      p->state = S_STRING;
      p->is_key = 1;
      p->key_at_top = p->depth == 1;
      p->key_pos = 0;
      p->key_match = 1;
      return CONSUMED;
    case S_COLON:
      if (c != ':') return bad(p, err, "expected ':' after a key", c);
      p->state = S_VALUE;
      return CONSUMED;
    case S_ARR_FIRST:
      if (c == ']') return close_bracket(p, c, err);
      /* fall through */
    case S_VALUE:
      return start_value(p, c, err);
    case S_AFTER:
      if (c == ',') {
        p->state = is_object(p) ? S_OBJ_KEY : S_VALUE;
        return CONSUMED;
      }
      return close_bracket(p, c, err);
  }
  return bad(p, err, "internal state", c);
}

int atoll_jsonl_feed(atoll_jsonl *p, const uint8_t *in, size_t n, size_t *used, uint8_t *out,
                     size_t cap, size_t *out_len, atoll_err *err) {
  size_t i = 0, o = *out_len;
  int rc = 0;
  while (i < n && cap - o >= ATOLL_JSONL_SLACK) {
    /* plain string bytes of the text, copied in a run */
    if (p->state == S_STRING && p->emitting && !p->high) {
      size_t room = cap - o - ATOLL_JSONL_SLACK + 1, k = 0;
      while (k < room && i + k < n && in[i + k] >= 0x20 && in[i + k] != '"' && in[i + k] != '\\') k++;
      if (k > 0) {
        memcpy(out + o, in + i, k);
        o += k;
        p->doc_bytes += k;
        p->last = in[i + k - 1];
        i += k;
        continue;
      }
    }
    int r = step(p, in[i], out, &o, err);
    if (r == FAIL) {
      rc = -1;
      break;
    }
    if (r == CONSUMED) i++;
    if (p->stop_at_doc && p->doc_ended) break;
  }
  *used = i;
  *out_len = o;
  return rc;
}

int atoll_jsonl_finish(atoll_jsonl *p, uint8_t *out, size_t cap, size_t *out_len, atoll_err *err) {
  (void)cap;
  if (p->state == S_LINE) return 0;
  if (p->state == S_END) return end_line(p, out, out_len, err);
  return atoll_fail(err, "%s:%" PRIu64 ": not JSON: the file ends inside the line's object "
                    "(truncated?)", p->name, p->line);
}
