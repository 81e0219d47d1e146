/* The coordinator's answer to ASK (docs/islands.md, "Few flags"): the run's settings
 * (--run FILE, checked by the CLI) and the asker's slot, its key's place in the
 * allow-list sorted by file name, so that an island started with only the coordinator's
 * address and its key gets the same slot, and with it the same data, every time. */
#include "net/coordinator_int.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }
static int is_pub(const struct dirent *e) {
  size_t n = strlen(e->d_name);
  return n >= 5 && strcmp(e->d_name + n - 4, ".pub") == 0;
}

int atoll_coord_load_slots(coord *c, const char *allowed, atoll_err *err) {
  if (c->cfg->open) return 0; /* an open run's slots are its keys' in the order they asked (the state file's) */
  struct dirent **names = NULL;
  int n = scandir(allowed, &names, is_pub, by_name);
  if (n < 0) return atoll_fail(err, "%s: cannot open the allow-list directory", allowed);
  int rc = 0;
  c->nslots = 0;
  for (int i = 0; i < n; i++) {
    char path[4400];
    uint8_t key[ATOLL_KEY_BYTES];
    if (!rc && i < MAX_MEMBERS &&
        (atoll_key_path(path, sizeof path, allowed, names[i]->d_name, err) || atoll_key_read_public(path, key, err)))
      rc = -1;
    if (!rc && i < MAX_MEMBERS) atoll_key_z85(key, c->slots[c->nslots++]);
    free(names[i]);
  }
  free(names);
  return rc;
}

void atoll_coord_on_ask(coord *c, const route *from, const char *keyz, const char *who, uint32_t rank) {
  atoll_wire_msg msg = {.type = ATOLL_WIRE_SETTINGS};
  msg.u.settings.open = c->cfg->open != 0;
  /* (an open run gives a new key the next free slot) */
  int slot = c->cfg->open ? atoll_coord_open_slot(c, keyz) : atoll_coord_slot_of(c, keyz);
  msg.u.settings.slot = slot >= 0 ? (uint32_t)slot : ATOLL_WIRE_NO_SLOT;
  const char *run = c->cfg->run_json;
  msg.u.settings.json = run;
  msg.u.settings.len = run ? (uint32_t)strlen(run) : 0;
  if (rank == 0) { /* (each rank of an island asks; one line per island) */
    if (msg.u.settings.slot == ATOLL_WIRE_NO_SLOT)
      fprintf(stderr, "coordinator: %s asks for the run's settings: no island slot (%s)\n", who,
              c->cfg->open ? "every one is taken" : "its key was allowed after the start");
    else
      fprintf(stderr, "coordinator: %s asks for the run's settings: island slot %u%s\n", who, msg.u.settings.slot,
              run ? "" : " (no --run: it has its own)");
  }
  atoll_coord_send_to(c, from, &msg);
}
