/* The coordinator's side of its status page (status_http.h): a snapshot filled from
 * its state after every event of the loop, and the records it keeps per island (an
 * island that finished or left is still shown). Only the loop's thread runs this;
 * the page's thread reads the published copies. */
#include "net/coordinator_int.h"
#include "net/status_http.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct coord_view {
  atoll_status *srv;
  atoll_status_snapshot snap; /* its islands[] are the records, kept across publishes */
};

int atoll_coord_status_start(coord *c, atoll_err *err) {
  if (!c->cfg->status_listen) return 0;
  c->view = calloc(1, sizeof *c->view);
  if (!c->view) return atoll_fail(err, "out of memory");
  if (atoll_status_start(&c->view->srv, c->cfg->status_listen, err)) {
    free(c->view);
    c->view = NULL;
    return -1;
  }
  return 0;
}

void atoll_coord_status_stop(coord *c) {
  if (!c->view) return;
  atoll_status_stop(c->view->srv);
  free(c->view);
  c->view = NULL;
}

/* The record of an island, made (in island order) the first time it is seen; NULL
 * when ATOLL_STATUS_ISLANDS are held already. */
static atoll_status_island *record(atoll_status_snapshot *s, uint32_t island, double now) {
  int k = 0;
  while (k < s->n_islands && s->islands[k].island < island) k++;
  if (k < s->n_islands && s->islands[k].island == island) return &s->islands[k];
  if (s->n_islands == ATOLL_STATUS_ISLANDS) return NULL;
  memmove(&s->islands[k + 1], &s->islands[k], (size_t)(s->n_islands - k) * sizeof s->islands[0]);
  s->n_islands++;
  atoll_status_island *i = &s->islands[k];
  memset(i, 0, sizeof *i);
  i->island = island;
  i->loss = NAN;
  i->first_heard = i->last_heard = now;
  i->state = ATOLL_ISLAND_LEFT;
  return i;
}

/* Each island's live ranks: its state, and rank 0's step, revision and progress. */
static void refresh_islands(coord *c, double now) {
  atoll_status_snapshot *s = &c->view->snap;
  static uint64_t bytes[ATOLL_STATUS_ISLANDS];
  for (int j = 0; j < MAX_MEMBERS; j++) /* records made first: none moves below */
    if (c->m[j].used) record(s, c->m[j].island, now);
  for (int k = 0; k < s->n_islands; k++) s->islands[k].ranks = 0, bytes[k] = 0;
  for (int j = 0; j < MAX_MEMBERS; j++) {
    const member *m = &c->m[j];
    atoll_status_island *i = m->used ? record(s, m->island, now) : NULL;
    if (!i) continue;
    if (i->ranks == 0) {
      /* (new, or back after it finished or left: its speed counts from here) */
      if (i->state > ATOLL_ISLAND_JOINING) i->first_step = m->step, i->first_heard = now;
      i->state = ATOLL_ISLAND_LIVE;
      i->last_heard = m->last_heard;
    }
    i->ranks++;
    if (m->joining) i->state = ATOLL_ISLAND_JOINING;
    if (m->last_heard > i->last_heard) i->last_heard = m->last_heard;
    bytes[i - s->islands] += m->sent_bytes;
    if (m->rank == 0) {
      i->step = m->step;
      i->revision = m->held;
      i->tokens_per_step = m->tokens_per_step;
      i->loss = m->loss;
    }
  }
  for (int k = 0; k < s->n_islands; k++) {
    atoll_status_island *i = &s->islands[k];
    if (i->ranks > 0) i->sent_bytes = bytes[k];
    else if (i->state != ATOLL_ISLAND_FINISHED) i->state = ATOLL_ISLAND_LEFT;
  }
}

void atoll_coord_status_publish(coord *c) {
  if (!c->view) return;
  atoll_status_snapshot *s = &c->view->snap;
  double now = atoll_net_now();
  s->now = now, s->started = c->started;
  s->revision = c->revision, s->step = c->last_step;
  s->members = atoll_coord_live(c), s->min_islands = c->cfg->min_islands;
  s->registered = c->n_registered, s->left = c->n_left, s->restarted = c->n_restarted;
  s->state_joins = c->n_state_joins, s->finished = c->n_finished;
  refresh_islands(c, now);
  atoll_status_publish(c->view->srv, s);
}

/* A rank said goodbye at `step`: with no rank left the island shows as finished there. */
void atoll_coord_status_bye(coord *c, const member *m, uint32_t step) {
  if (!c->view) return;
  atoll_status_island *i = record(&c->view->snap, m->island, atoll_net_now());
  if (!i) return;
  if (m->rank == 0) i->step = step, i->loss = m->loss, i->tokens_per_step = m->tokens_per_step;
  i->last_heard = atoll_net_now();
  for (int k = 0; k < MAX_MEMBERS; k++) /* another rank of the island still runs */
    if (c->m[k].used && &c->m[k] != m && c->m[k].island == m->island && strcmp(c->m[k].keyz, m->keyz) == 0) return;
  i->state = ATOLL_ISLAND_FINISHED;
}

/* Revision c->revision was committed by group g: its islands' contributions, and a
 * point of the plot (the islands that committed and their mean last loss). */
void atoll_coord_status_commit(coord *c, group *g) {
  if (!c->view) return;
  atoll_status_snapshot *s = &c->view->snap;
  double now = atoll_net_now(), sum = 0;
  int islands = 0, losses = 0;
  for (int j = 0; j < g->n; j++) {
    member *m = atoll_coord_group_member(c, g, j);
    if (!m || m->joining || m->rank != 0) continue;
    islands++;
    if (isfinite(m->loss)) sum += m->loss, losses++;
    atoll_status_island *i = record(s, m->island, now);
    if (!i) continue;
    i->contributions++;
    i->last_revision = c->revision, i->last_step = g->step, i->last_at = now;
  }
  if (s->n_history == ATOLL_STATUS_HISTORY) /* the oldest point goes */
    memmove(&s->history[0], &s->history[1], --s->n_history * sizeof s->history[0]);
  s->history[s->n_history++] = (atoll_status_point){c->revision, g->step, islands, losses ? (float)(sum / losses) : NAN};
}

/* After the run ended: the final page stays up for --status-linger seconds (a last
 * scrape), or until *stop. */
void atoll_coord_status_linger(coord *c, const volatile sig_atomic_t *stop) {
  if (!c->view || c->cfg->status_linger <= 0) return;
  double end = atoll_net_now() + c->cfg->status_linger;
  while (!(stop && *stop) && atoll_net_now() < end) {
    atoll_coord_status_publish(c);
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  }
}
