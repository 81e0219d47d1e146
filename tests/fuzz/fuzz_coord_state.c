/* libFuzzer target: the islands coordinator's state file parser (atoll_coord_state_parse,
 * src/net/coordinator_state.c). Whatever the bytes, the parser returns (no overflow, no
 * float-to-integer cast out of range: UBSan's float-cast-overflow is fatal here); what it
 * accepts is in range. Seeds: a few state files written at start into ./corpus (the
 * directory run_fuzz.sh runs it on), beside the JSON Lines seeds of its generator. */
#include "net/coordinator_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void seed(const char *name, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "corpus/%s", name);
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

#define H64 "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  seed("state_empty.json", "{\"members\":[],\"revision\":0,\"hash\":\"" H64 "\",\"step\":0,\"ranks\":0,"
                           "\"counts\":{\"registered\":0,\"left\":0,\"restarted\":0,\"state_joins\":0},\"rank_hashes\":[]}");
  seed("state_run.json", "{\"members\":[{\"island\":0,\"rank\":0,\"key\":\"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\","
                         "\"endpoint\":\"tcp://127.0.0.1:6000\"},{\"island\":1,\"rank\":1,"
                         "\"key\":\"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID\",\"endpoint\":\"tcp://h:1\"}],"
                         "\"revision\":30,\"hash\":\"" H64 "\",\"step\":60,\"ranks\":2,"
                         "\"counts\":{\"registered\":7,\"left\":1,\"restarted\":1,\"state_joins\":1,\"finished\":2},"
                         "\"rank_hashes\":[\"" H64 "\",\"" H64 "\"]}");
  seed("state_open.json", "{\"members\":[],\"revision\":3,\"hash\":\"" H64 "\",\"step\":9,\"ranks\":1,"
                          "\"slots\":[\"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7\",\"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID\"],"
                          "\"units\":{\"next\":5,\"done\":3,\"again\":1,\"returned\":[3],"
                          "\"held\":[{\"island\":1,\"start\":9,\"end\":12,\"unit\":4,\"started\":true}],"
                          "\"past\":[{\"island\":0,\"start\":6,\"end\":9,\"unit\":2,\"started\":true}],"
                          "\"committed\":[{\"island\":0,\"step\":9}]}}");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static coord_saved s;
  atoll_err err;
  if (atoll_coord_state_parse((const char *)data, size, "state.json", &s, &err)) {
    if (memchr(err.msg, '\n', strlen(err.msg))) abort(); /* a refusal is one line */
    return 0;
  }
  if (s.revision > (1ull << 53) || s.ranks > MAX_MEMBERS || s.members < 0 || s.members > MAX_MEMBERS) abort();
  if (s.nslots < 0 || s.nslots > MAX_MEMBERS || s.units.nreturned < 0 || s.units.nreturned > ATOLL_UNITS_RETURNED) abort();
  for (int i = 0; i < ATOLL_UNITS_ISLANDS; i++) /* what it accepts is in range: a held unit is one handed out */
    for (int j = 0; j < s.units.nheld[i]; j++)
      if (i >= s.nslots || s.units.held[i][j].unit >= s.units.next || s.units.held[i][j].start >= s.units.held[i][j].end) abort();
  uint64_t held = 0; /* and its books balance: every unit handed out is done, returned or held */
  for (int i = 0; i < ATOLL_UNITS_ISLANDS; i++) {
    held += (uint64_t)s.units.nheld[i];
    for (int j = 0; j < s.units.nheld[i]; j++) /* (a begun phase a commit took in is done, not held) */
      if (s.units.held[i][j].started && s.units.held[i][j].end <= s.units.committed_to[i]) abort();
    if (s.units.npast[i] < 0 || s.units.npast[i] > ATOLL_UNITS_PAST) abort();
    for (int j = 0; j < s.units.npast[i]; j++)
      if (s.units.past[i][j].end > s.units.committed_to[i] || s.units.past[i][j].unit >= s.units.next) abort();
  }
  if (s.units.done + (uint64_t)s.units.nreturned + held != s.units.next) abort();
  return 0;
}
