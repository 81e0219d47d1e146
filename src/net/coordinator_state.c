/* The coordinator's state file (docs/islands.md, "State file"): written atomically
 * after each commit and membership change, read back at start, and locked while a
 * coordinator uses it. The file is checked like any other input: every number an
 * integer in its range, every hash strict hex, every member well formed; anything
 * else is refused with one line naming the file and the member. */
#include "net/coordinator_int.h"

#include "core/fs.h"
#include "core/json_text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXACT_MAX 9007199254740992.0 /* 2^53: the largest integer a JSON number holds exactly */

static void to_hex(const uint8_t *h, char out[2 * ATOLL_WIRE_HASH + 1]) {
  for (int i = 0; i < ATOLL_WIRE_HASH; i++) snprintf(out + 2 * i, 3, "%02x", h[i]);
}

void atoll_coord_save_state(coord *c) {
  c->state_dirty = 0; /* (written now: nothing left for atoll_coord_save_state_due) */
  if (!c->state_path[0]) return; /* no --state: nothing outlives this process */
  cJSON *s = cJSON_CreateObject(), *mem = cJSON_AddArrayToObject(s, "members");
  char h[2 * ATOLL_WIRE_HASH + 1];
  to_hex(c->hash, h);
  cJSON_AddNumberToObject(s, "revision", (double)c->revision);
  cJSON_AddStringToObject(s, "hash", h);
  cJSON_AddNumberToObject(s, "step", c->last_step);
  cJSON_AddNumberToObject(s, "ranks", c->ranks);
  cJSON *cnt = cJSON_AddObjectToObject(s, "counts");
  cJSON_AddNumberToObject(cnt, "registered", (double)c->n_registered);
  cJSON_AddNumberToObject(cnt, "left", (double)c->n_left);
  cJSON_AddNumberToObject(cnt, "restarted", (double)c->n_restarted);
  cJSON_AddNumberToObject(cnt, "state_joins", (double)c->n_state_joins);
  cJSON_AddNumberToObject(cnt, "finished", (double)c->n_finished);
  cJSON *rh = cJSON_AddArrayToObject(s, "rank_hashes");
  for (uint32_t r = 0; r < c->ranks; r++) {
    char x[2 * ATOLL_WIRE_HASH + 1];
    to_hex(c->rank_hash[r], x);
    cJSON_AddItemToArray(rh, cJSON_CreateString(x));
  }
  for (int i = 0; i < MAX_MEMBERS; i++) {
    if (!c->m[i].used) continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "island", c->m[i].island);
    cJSON_AddNumberToObject(o, "rank", c->m[i].rank);
    cJSON_AddStringToObject(o, "key", c->m[i].keyz);
    cJSON_AddStringToObject(o, "endpoint", c->m[i].endpoint);
    cJSON_AddItemToArray(mem, o);
  }
  if (c->cfg->open) { /* an open run: its keys' slots and its data units */
    cJSON *sl = cJSON_AddArrayToObject(s, "slots");
    for (int i = 0; i < c->nslots; i++) cJSON_AddItemToArray(sl, cJSON_CreateString(c->slots[i]));
    cJSON_AddItemToObject(s, "units", atoll_units_to_json(&c->units));
  }
  char *text = cJSON_Print(s);
  atoll_err err;
  if (!text || atoll_write_file_atomic(c->state_path, text, strlen(text), &err))
    fprintf(stderr, "coordinator: cannot write the state file %s: %s\n", c->state_path, text ? err.msg : "out of memory");
  cJSON_free(text);
  cJSON_Delete(s);
}

/* ------------------------------------------------------------------ reading --- */

/* Member `name` of o as an integer in [0, max]: 0, 1 when absent and optional, or -1
 * (err names the file and the member). */
static int get_uint(const cJSON *o, const char *name, double max, int required, uint64_t *out, const char *path,
                    const char *where, atoll_err *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!v && !required) return 1;
  if (!v) return atoll_fail(err, "%s: not a coordinator state file: %s%s is missing", path, where, name);
  double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
  if (!(x >= 0 && x <= max && x == floor(x)))
    return atoll_fail(err, "%s: %s%s must be an integer in [0, %.0f]", path, where, name, max);
  *out = (uint64_t)x;
  return 0;
}

static int hex_digit(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* A hash written as exactly 64 hex digits (no sign, space or prefix). */
static int get_hash(const cJSON *v, uint8_t out[ATOLL_WIRE_HASH], const char *path, const char *name, atoll_err *err) {
  const char *s = cJSON_IsString(v) ? v->valuestring : NULL;
  if (s && strlen(s) == 2 * ATOLL_WIRE_HASH) {
    int i = 0;
    for (; i < ATOLL_WIRE_HASH; i++) {
      int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
      if (hi < 0 || lo < 0) break;
      out[i] = (uint8_t)(hi << 4 | lo);
    }
    if (i == ATOLL_WIRE_HASH) return 0;
  }
  return atoll_fail(err, "%s: %s must be %d hexadecimal digits", path, name, 2 * ATOLL_WIRE_HASH);
}

/* A string of 1 to max printable ASCII bytes (from: its allowed characters, or NULL). */
static int good_text(const cJSON *v, size_t lo, size_t max, const char *from) {
  if (!cJSON_IsString(v)) return 0;
  size_t n = strlen(v->valuestring);
  if (n < lo || n > max) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)v->valuestring[i];
    if (ch < 0x21 || ch > 0x7e || (from && !strchr(from, ch))) return 0;
  }
  return 1;
}

static const char Z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/* members[i]: {island, rank, key (Z85), endpoint}. */
static int check_member(const cJSON *o, int i, const char *path, atoll_err *err) {
  char where[48];
  snprintf(where, sizeof where, "members[%d].", i);
  if (!cJSON_IsObject(o)) return atoll_fail(err, "%s: members[%d] must be an object", path, i);
  uint64_t v;
  if (get_uint(o, "island", ATOLL_WIRE_MAX_MEMBERS - 1, 1, &v, path, where, err) ||
      get_uint(o, "rank", MAX_MEMBERS - 1, 1, &v, path, where, err))
    return -1;
  if (!good_text(cJSON_GetObjectItemCaseSensitive(o, "key"), ATOLL_KEY_Z85, ATOLL_KEY_Z85, Z85))
    return atoll_fail(err, "%s: members[%d].key must be a public key (%d Z85 characters)", path, i, ATOLL_KEY_Z85);
  if (!good_text(cJSON_GetObjectItemCaseSensitive(o, "endpoint"), 1, ATOLL_WIRE_MAX_ENDPOINT, NULL))
    return atoll_fail(err, "%s: members[%d].endpoint must be 1-%d printable characters", path, i, ATOLL_WIRE_MAX_ENDPOINT);
  return 0;
}

static int parse_tree(const cJSON *s, const char *path, coord_saved *out, atoll_err *err) {
  if (!cJSON_IsObject(s)) return atoll_fail(err, "%s: not a coordinator state file (not a JSON object)", path);
  uint64_t step = 0, ranks = 0;
  if (get_uint(s, "revision", EXACT_MAX, 1, &out->revision, path, "", err) ||
      get_uint(s, "step", UINT32_MAX, 1, &step, path, "", err) || get_uint(s, "ranks", MAX_MEMBERS, 0, &ranks, path, "", err) < 0)
    return -1;
  out->step = (uint32_t)step;
  out->ranks = (uint32_t)ranks;
  if (get_hash(cJSON_GetObjectItemCaseSensitive(s, "hash"), out->hash, path, "hash", err)) return -1;
  const cJSON *cnt = cJSON_GetObjectItemCaseSensitive(s, "counts");
  if (cnt && !cJSON_IsObject(cnt)) return atoll_fail(err, "%s: counts must be an object", path);
  static const char *const COUNTS[COORD_COUNTS] = {"registered", "left", "restarted", "state_joins", "finished"};
  for (int k = 0; k < COORD_COUNTS; k++)
    if (cnt && get_uint(cnt, COUNTS[k], EXACT_MAX, 0, &out->counts[k], path, "counts.", err) < 0) return -1;
  memcpy(out->rank_hash[0], out->hash, ATOLL_WIRE_HASH);
  const cJSON *rh = cJSON_GetObjectItemCaseSensitive(s, "rank_hashes");
  if (rh && (!cJSON_IsArray(rh) || cJSON_GetArraySize(rh) > MAX_MEMBERS || (ranks && cJSON_GetArraySize(rh) != (int)ranks)))
    return atoll_fail(err, "%s: rank_hashes must be an array of one hash per rank (ranks %llu)", path, (unsigned long long)ranks);
  for (int r = 0; rh && r < cJSON_GetArraySize(rh); r++) {
    char name[32];
    snprintf(name, sizeof name, "rank_hashes[%d]", r);
    if (get_hash(cJSON_GetArrayItem(rh, r), out->rank_hash[r], path, name, err)) return -1;
  }
  const cJSON *mem = cJSON_GetObjectItemCaseSensitive(s, "members");
  if (!cJSON_IsArray(mem) || cJSON_GetArraySize(mem) > MAX_MEMBERS)
    return atoll_fail(err, "%s: members must be an array of at most %d members", path, MAX_MEMBERS);
  for (int i = 0; i < cJSON_GetArraySize(mem); i++)
    if (check_member(cJSON_GetArrayItem(mem, i), i, path, err)) return -1;
  out->members = cJSON_GetArraySize(mem);
  const cJSON *sl = cJSON_GetObjectItemCaseSensitive(s, "slots"), *un = cJSON_GetObjectItemCaseSensitive(s, "units");
  if (sl && (!cJSON_IsArray(sl) || cJSON_GetArraySize(sl) > MAX_MEMBERS))
    return atoll_fail(err, "%s: slots must be an array of at most %d keys", path, MAX_MEMBERS);
  for (int i = 0; sl && i < cJSON_GetArraySize(sl); i++) {
    const cJSON *k = cJSON_GetArrayItem(sl, i);
    if (!good_text(k, ATOLL_KEY_Z85, ATOLL_KEY_Z85, Z85))
      return atoll_fail(err, "%s: slots[%d] must be a public key (%d Z85 characters)", path, i, ATOLL_KEY_Z85);
    for (int j = 0; j < i; j++)
      if (strcmp(out->slots[j], k->valuestring) == 0) return atoll_fail(err, "%s: slots[%d] repeats slots[%d]", path, i, j);
    snprintf(out->slots[out->nslots++], sizeof out->slots[0], "%s", k->valuestring);
  }
  char why[300];
  if (un && atoll_units_parse(un, path, &out->units, why, sizeof why)) return atoll_fail(err, "%s", why);
  out->has_units = un != NULL;
  for (int i = 0; i < MAX_MEMBERS; i++) /* a unit held by an island with no slot is nobody's */
    if (out->units.nheld[i] && i >= out->nslots)
      return atoll_fail(err, "%s: units.held: island %d holds units but has no slot (slots has %d)", path, i, out->nslots);
  for (int i = MAX_MEMBERS; i < ATOLL_UNITS_ISLANDS; i++)
    if (out->units.nheld[i]) return atoll_fail(err, "%s: units.held: island %d is beyond the %d slots", path, i, MAX_MEMBERS);
  return 0;
}

int atoll_coord_state_parse(const char *text, size_t len, const char *path, coord_saved *out, atoll_err *err) {
  memset(out, 0, sizeof *out);
  cJSON *s = atoll_json_parse_whole(text, len, path, err);
  if (!s) return -1;
  int rc = atoll_json_unique_keys(s, path, err) ? -1 : parse_tree(s, path, out, err); /* (a key twice: which?) */
  cJSON_Delete(s);
  return rc;
}

/* A state file from an earlier run of this coordinator: the revision, hash and step
 * carry on. No file: a first start. */
int atoll_coord_load_state(coord *c, atoll_err *err) {
  if (!c->state_path[0]) return 0;
  if (access(c->state_path, F_OK) != 0 && errno == ENOENT) return 0;
  char *text = NULL;
  size_t len = 0;
  if (atoll_read_file(c->state_path, 1 << 20, &text, &len, err)) return -1;
  static coord_saved s;
  int rc = atoll_coord_state_parse(text, len, c->state_path, &s, err);
  free(text);
  if (rc) return -1;
  c->revision = s.revision;
  c->last_step = s.step;
  memcpy(c->hash, s.hash, ATOLL_WIRE_HASH);
  memcpy(c->rank_hash, s.rank_hash, sizeof c->rank_hash);
  c->n_registered = s.counts[0], c->n_left = s.counts[1], c->n_restarted = s.counts[2];
  c->n_state_joins = s.counts[3], c->n_finished = s.counts[4];
  c->restored_members = s.members;
  if (c->cfg->open) {
    memcpy(c->slots, s.slots, sizeof c->slots);
    c->nslots = s.nslots;
    c->units = s.units;
  } else if (s.nslots || s.has_units) {
    return atoll_fail(err, "%s: the state of an open run (slots, units): start the coordinator with --open 1", c->state_path);
  }
  c->unconfirmed = c->revision > 0; /* until an island of that run shows up (coordinator.c) */
  char hh[2 * ATOLL_WIRE_HASH + 1];
  to_hex(c->hash, hh);
  hh[16] = 0; /* the first 8 bytes, as the log shows hashes */
  fprintf(stderr, "coordinator: restored from %s: revision %llu, step %u, hash %s; %d islands were members (they re-register by heartbeat)\n",
          c->state_path, (unsigned long long)c->revision, c->last_step, hh, s.members);
  return 0;
}

/* One coordinator per state file: an flock on FILE.lock, released by the kernel with
 * its holder (as train's OUT/.lock, src/ckpt/run_dir.c); the pid in it names the
 * holder in the refusal. */
/* The state file's name with its symbolic links resolved (links to it, which may point
 * at a file not written yet, then its directory's), so that every name of it locks one
 * lock file: a link to a state file in use was a second, free lock. 0, or -1 when a
 * directory cannot be resolved or a link loops. */
static int resolved_name(const char *state, char *out, size_t outsz) {
  char cur[PATH_MAX], target[PATH_MAX], dir[PATH_MAX], buf[PATH_MAX];
  if (snprintf(cur, sizeof cur, "%s", state) >= (int)sizeof cur) return -1;
  struct stat st;
  for (int hops = 0; lstat(cur, &st) == 0 && S_ISLNK(st.st_mode); hops++) {
    ssize_t n = readlink(cur, target, sizeof target - 1);
    if (n < 0 || hops == 40) return -1;
    target[n] = 0;
    atoll_parent_dir(cur, dir, sizeof dir);
    if (target[0] == '/') snprintf(cur, sizeof cur, "%s", target);
    else if (snprintf(cur, sizeof cur, "%s/%s", dir, target) >= (int)sizeof cur) return -1;
  }
  atoll_parent_dir(cur, dir, sizeof dir);
  if (!realpath(dir, buf)) return -1;
  const char *base = strrchr(cur, '/');
  return snprintf(out, outsz, "%s/%s", buf, base ? base + 1 : cur) < (int)outsz ? 0 : -1;
}

int atoll_coord_lock_state(coord *c, atoll_err *err) {
  c->lock_fd = -1;
  if (!c->state_path[0]) return 0;
  char name[PATH_MAX], path[PATH_MAX + 8];
  if (resolved_name(c->state_path, name, sizeof name) != 0)
    return atoll_fail(err, "--state %s: cannot resolve its directory: %s", c->state_path, strerror(errno));
  snprintf(path, sizeof path, "%s.lock", name);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return atoll_fail(err, "--state %s: cannot open %s: %s", c->state_path, path, strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char buf[32] = {0};
    long pid = pread(fd, buf, sizeof buf - 1, 0) > 0 ? strtol(buf, NULL, 10) : 0;
    close(fd);
    if (e != EWOULDBLOCK) return atoll_fail(err, "--state %s: cannot lock %s: %s", c->state_path, path, strerror(e));
    char who[40] = "";
    if (pid > 0) snprintf(who, sizeof who, " (pid %ld)", pid);
    return atoll_fail(err, "--state %s: another coordinator%s is using it; stop it, or give this one another --state",
                      c->state_path, who);
  }
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
    close(fd);
    return atoll_fail(err, "--state %s: cannot write %s: %s", c->state_path, path, strerror(errno));
  }
  c->lock_fd = fd;
  return 0;
}
