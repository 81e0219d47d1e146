/* The islands' wire parser (src/net/wire.c, docs/islands.md "Wire format"): a message
 * of every type re-encodes to the same bytes; every shorter prefix of it is refused;
 * and each check of the header and of each payload refuses its malformed case with its
 * own reason (a DATA frame's range: never empty, inside its total). */
#include "check.h"
#include "net/wire.h"

#include <stdint.h>
#include <string.h>

static uint8_t buf[4096], again[4096];
static atoll_wire_member mem[4], mem2[4];

/* Encodes m, parses it back, re-encodes: the same bytes; every prefix is refused. */
static size_t round_trip(const atoll_wire_msg *m) {
  size_t n = atoll_wire_encode(m, buf, sizeof buf);
  CHECK(n >= ATOLL_WIRE_HEADER);
  atoll_wire_msg p;
  char why[200];
  CHECK(atoll_wire_parse(buf, n, &p, mem2, 4, why, sizeof why) == 0);
  CHECK(p.type == m->type);
  CHECK(atoll_wire_encode(&p, again, sizeof again) == n && memcmp(buf, again, n) == 0);
  for (size_t k = 0; k < n; k++) CHECK(atoll_wire_parse(buf, k, &p, mem2, 4, why, sizeof why) == -1);
  return n;
}

/* The frame in buf (n bytes) is refused, with a reason that contains `want`. */
static void refused(size_t n, const char *want) {
  atoll_wire_msg p;
  char why[200] = "";
  int rc = atoll_wire_parse(buf, n, &p, mem2, 4, why, sizeof why);
  CHECK(rc == -1);
  if (!strstr(why, want)) fprintf(stderr, "expected '%s' in '%s'\n", want, why);
  CHECK(strstr(why, want) != NULL);
}

static void put32(size_t at, uint32_t v) {
  for (int i = 0; i < 4; i++) buf[at + i] = (uint8_t)(v >> (8 * i));
}

int main(void) {
  atoll_wire_msg m = {.type = ATOLL_WIRE_HELLO};
  m.u.hello = (atoll_wire_hello){3, 10, 5, {1, 2}, 1, 2, 77, "tcp://127.0.0.1:5000", 4096, 2.5f, 123456789};
  size_t n = round_trip(&m);
  { /* the status page's progress fields come back (version 5) */
    atoll_wire_msg p;
    char why[200];
    CHECK(atoll_wire_parse(buf, n, &p, mem2, 4, why, sizeof why) == 0);
    CHECK(p.u.hello.tokens_per_step == 4096 && p.u.hello.loss == 2.5f && p.u.hello.sent_bytes == 123456789);
  }
  /* header checks, in order */
  memcpy(buf, "XTIW", 4);
  refused(n, "bad magic");
  round_trip(&m), buf[4] = 1;
  refused(n, "wire version 1");
  round_trip(&m), buf[5] = 99;
  refused(n, "unknown message type 99");
  round_trip(&m), buf[6] = 1;
  refused(n, "reserved header bits");
  round_trip(&m), put32(20, 70000);
  refused(n, "oversized");
  round_trip(&m), put32(20, (uint32_t)(n - ATOLL_WIRE_HEADER + 1));
  refused(n, "truncated (header says");
  round_trip(&m);
  buf[n] = 0;
  refused(n + 1, "trailing bytes (header says");
  refused(10, "shorter than the 24-byte header");
  /* HELLO: rank out of range (rank at payload offset 48, ranks at 52) */
  round_trip(&m), put32(ATOLL_WIRE_HEADER + 48, 2);
  refused(n, "HELLO: rank 2 of 2 out of range");
  round_trip(&m), put32(ATOLL_WIRE_HEADER, 5000);
  refused(n, "HELLO: island 5000 out of range");
  round_trip(&m), buf[n - 21] = 0x07; /* a control character in the endpoint (its last byte, before the 20 of progress) */
  refused(n, "HELLO: bad endpoint");

  /* the sync messages: rank out of range */
  atoll_wire_msg s = {.type = ATOLL_WIRE_COMMIT};
  s.u.sync = (atoll_wire_sync){8, 0, 4, {9}, 1};
  n = round_trip(&s);
  put32(n - 4, 4000);
  refused(n, "COMMIT: rank 4000 out of range");
  /* BYE (type 15, a finished island leaves): a sync message too */
  s.type = ATOLL_WIRE_BYE;
  n = round_trip(&s);
  CHECK(strcmp(atoll_wire_type_name(ATOLL_WIRE_BYE), "BYE") == 0);
  put32(n - 4, 4000);
  refused(n, "BYE: rank 4000 out of range");
  round_trip(&s), buf[5] = 21;
  refused(n, "unknown message type 21");
  /* WELCOME (type 16, the answer to a HELLO): text */
  atoll_wire_msg wl = {.type = ATOLL_WIRE_WELCOME};
  snprintf(wl.u.text, sizeof wl.u.text, "registered as island 0 rank 0");
  round_trip(&wl);
  CHECK(strcmp(atoll_wire_type_name(ATOLL_WIRE_WELCOME), "WELCOME") == 0);
  /* ASK (17) and SETTINGS (18): an island's question before its HELLO, and the answer */
  atoll_wire_msg ask = {.type = ATOLL_WIRE_ASK};
  ask.u.settings.rank = 1;
  n = round_trip(&ask);
  put32(n - 4, 5000);
  refused(n, "ASK: rank 5000 out of range");
  const char *run = "{\"islands\": 3,\n \"sync-every\": 6}";
  atoll_wire_msg st = {.type = ATOLL_WIRE_SETTINGS};
  st.u.settings = (atoll_wire_settings){0, 2, 1, (uint32_t)strlen(run), run};
  n = round_trip(&st);
  {
    atoll_wire_msg p;
    char why[200];
    CHECK(atoll_wire_parse(buf, n, &p, mem2, 4, why, sizeof why) == 0);
    CHECK(p.u.settings.slot == 2 && p.u.settings.open == 1 && p.u.settings.len == strlen(run) &&
          memcmp(p.u.settings.json, run, strlen(run)) == 0);
  }
  buf[n - 3] = 0x01; /* a control character in the settings */
  refused(n, "SETTINGS: byte");
  round_trip(&st), put32(ATOLL_WIRE_HEADER, 4000);
  refused(n, "SETTINGS: slot 4000 out of range");
  round_trip(&st), put32(ATOLL_WIRE_HEADER + 4, 2);
  refused(n, "SETTINGS: open must be 0 or 1, not 2");
  round_trip(&st), put32(ATOLL_WIRE_HEADER + 8, 5);
  refused(n, "SETTINGS: 5 bytes of settings announced");
  st.u.settings = (atoll_wire_settings){0, ATOLL_WIRE_NO_SLOT, 0, 0, NULL};
  round_trip(&st); /* no slot, no settings */

  /* UNITS (19) and UNIT (20): an open run's data units */
  atoll_wire_msg un = {.type = ATOLL_WIRE_UNITS};
  un.u.units = (atoll_wire_units){1, 6, 9, 9, 12, 3, 0, 0};
  n = round_trip(&un);
  {
    atoll_wire_msg p;
    char why[200];
    CHECK(atoll_wire_parse(buf, n, &p, mem2, 4, why, sizeof why) == 0);
    CHECK(p.u.units.rank == 1 && p.u.units.start == 6 && p.u.units.end == 9 && p.u.units.next_start == 9 &&
          p.u.units.next_end == 12 && p.u.units.lost_from == 3);
  }
  put32(ATOLL_WIRE_HEADER, 4000);
  refused(n, "UNITS: rank 4000 out of range");
  atoll_wire_msg ua = {.type = ATOLL_WIRE_UNIT};
  ua.u.units = (atoll_wire_units){0, 6, 9, 9, 12, 6, 7, 1ull << 40};
  n = round_trip(&ua);

  /* QUORUM: members in increasing island order, at most max_members */
  atoll_wire_msg q = {.type = ATOLL_WIRE_QUORUM};
  memset(mem, 0, sizeof mem);
  mem[0].island = 0, mem[1].island = 2;
  strcpy(mem[0].endpoint, "tcp://a:1"), strcpy(mem[1].endpoint, "tcp://b:2");
  q.u.quorum = (atoll_wire_quorum){4, 0, 2, 99, {0}, 2, mem};
  n = round_trip(&q);
  mem[1].island = 0;
  n = atoll_wire_encode(&q, buf, sizeof buf);
  refused(n, "QUORUM: member islands must increase");
  mem[1].island = 2;
  n = round_trip(&q);
  put32(ATOLL_WIRE_HEADER + 56, 5); /* n: 5 members, room for 4 */
  refused(n, "QUORUM: 5 members");

  /* WAIT text and its islands format (read back by an island: link.c) */
  atoll_wire_msg w = {.type = ATOLL_WIRE_WAIT};
  snprintf(w.u.text, sizeof w.u.text, ATOLL_WIRE_WAIT_ISLANDS, 1, 3);
  round_trip(&w);
  int have = 0, need = 0;
  CHECK(sscanf(w.u.text, ATOLL_WIRE_WAIT_ISLANDS, &have, &need) == 2 && have == 1 && need == 3);

  /* DATA: phase, range, announced length */
  static const uint8_t bytes[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  atoll_wire_msg d = {.type = ATOLL_WIRE_DATA};
  d.u.data = (atoll_wire_data){4, 0, 99, 1, 2, 0, 16, 64, 0, 16, bytes};
  n = round_trip(&d);
  buf[ATOLL_WIRE_HEADER + 20] = 5;
  refused(n, "DATA: phase 5");
  round_trip(&d), buf[ATOLL_WIRE_HEADER + 21] = 0xff, buf[ATOLL_WIRE_HEADER + 22] = 0xff;
  refused(n, "out of range");
  d.u.data.offset = 16;
  n = round_trip(&d);
  put32(ATOLL_WIRE_HEADER + 33, 20); /* total (8 bytes at 33): 20, below offset 16 + len 16 */
  refused(n, "DATA: range [16, +16) outside 20 bytes");
  n = round_trip(&d);
  put32(ATOLL_WIRE_HEADER + 49, 8); /* len 8, 16 present */
  refused(n, "DATA: 8 data bytes announced, 16 present");
  /* tokens (8 bytes at 41): a phase-1 contribution's weight, at most 2^53; 0 in the
   * other phases */
  d.u.data.phase = 1, d.u.data.tokens = 4096;
  n = round_trip(&d);
  put32(ATOLL_WIRE_HEADER + 45, 1u << 22); /* 2^54 + 4096 */
  refused(n, "DATA: tokens 18014398509486080 in phase 1");
  d.u.data.phase = 2;
  n = atoll_wire_encode(&d, buf, sizeof buf);
  refused(n, "DATA: tokens 4096 in phase 2");
  d.u.data.tokens = 0;
  /* an empty range, even at offset == total (a receiver would index one chunk past
   * the piece: docs/islands.md, issue 32 item 6) */
  d.u.data.offset = 64, d.u.data.len = 0;
  n = atoll_wire_encode(&d, buf, sizeof buf);
  refused(n, "DATA: empty range at 64 of 64 bytes");
  d.u.data.offset = 0;
  n = atoll_wire_encode(&d, buf, sizeof buf);
  refused(n, "DATA: empty range at 0 of 64 bytes");
  CHECK_DONE();
}
