/* The status pages' text (status_http.h): JSON, Prometheus text exposition format and
 * a self-contained HTML page with an inline SVG plot, each from one snapshot. */
#include "net/status_http.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing text buffer; `bad` once an allocation failed (the page is then dropped). */
typedef struct {
  char *p;
  size_t n, cap;
  int bad;
} text;

static void add(text *t, const char *fmt, ...) {
  if (t->bad) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->p ? t->p + t->n : NULL, t->p ? t->cap - t->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      t->bad = 1;
      return;
    }
    if (t->p && t->n + (size_t)k < t->cap) {
      t->n += (size_t)k;
      return;
    }
    size_t cap = (t->cap ? t->cap * 2 : 4096) + (size_t)k;
    char *q = realloc(t->p, cap);
    if (!q) {
      t->bad = 1;
      return;
    }
    t->p = q, t->cap = cap;
  }
}

static char *done(text *t) {
  if (t->bad || !t->p) {
    free(t->p);
    return NULL;
  }
  return t->p;
}

static const char *state_name(atoll_island_state s) {
  return s == ATOLL_ISLAND_LIVE ? "live" : s == ATOLL_ISLAND_JOINING ? "joining" : s == ATOLL_ISLAND_FINISHED ? "finished" : "left";
}

static double speed(const atoll_status_island *i) {
  double dt = i->last_heard - i->first_heard;
  return dt > 0 && i->step >= i->first_step ? (double)(i->step - i->first_step) / dt : 0;
}

/* Both factors come from islands' heartbeats: a product or sum past 2^64 - 1 stays
 * there (saturates) rather than wrapping to a small number. */
static uint64_t tokens_of(const atoll_status_island *i) {
  uint64_t step = i->step, per = i->tokens_per_step;
  return per && step > UINT64_MAX / per ? UINT64_MAX : step * per;
}

static uint64_t tokens_all(const atoll_status_snapshot *s) {
  uint64_t t = 0;
  for (int k = 0; k < s->n_islands; k++) {
    uint64_t x = tokens_of(&s->islands[k]);
    t = x > UINT64_MAX - t ? UINT64_MAX : t + x;
  }
  return t;
}

/* The mean of the last losses of the islands that did not leave (NaN: none known). */
static double loss_now(const atoll_status_snapshot *s) {
  double sum = 0;
  int n = 0;
  for (int k = 0; k < s->n_islands; k++) {
    const atoll_status_island *i = &s->islands[k];
    if (i->state != ATOLL_ISLAND_LEFT && isfinite(i->loss)) sum += i->loss, n++;
  }
  return n ? sum / n : NAN;
}

/* A number, or null (JSON has no NaN). */
static void json_num(text *t, const char *key, double x) {
  if (isfinite(x)) add(t, "\"%s\": %.9g", key, x);
  else add(t, "\"%s\": null", key);
}

static void json_island(text *t, const atoll_status_snapshot *s, const atoll_status_island *i) {
  add(t, "{\"island\": %u, \"state\": \"%s\", \"ranks\": %d, \"step\": %u, \"revision\": %llu, \"revisions_behind\": %llu, ",
      i->island, state_name(i->state), i->ranks, i->step, (unsigned long long)i->revision,
      (unsigned long long)(s->revision > i->revision ? s->revision - i->revision : 0));
  add(t, "\"seconds_since_heard\": %.3f, \"steps_per_second\": %.4f, \"tokens_per_step\": %llu, \"tokens\": %llu, ",
      s->now - i->last_heard, speed(i), (unsigned long long)i->tokens_per_step, (unsigned long long)tokens_of(i));
  json_num(t, "loss", i->loss);
  add(t, ", \"sent_bytes\": %llu, \"contributions\": %llu, \"last_contribution\": ", (unsigned long long)i->sent_bytes,
      (unsigned long long)i->contributions);
  if (i->contributions)
    add(t, "{\"revision\": %llu, \"step\": %u, \"seconds_ago\": %.3f}}", (unsigned long long)i->last_revision, i->last_step,
        s->now - i->last_at);
  else
    add(t, "null}");
}

char *atoll_status_json(const atoll_status_snapshot *s) {
  text t = {0};
  add(&t, "{\"revision\": %llu, \"step\": %u, \"merges\": %llu, \"members\": %d, \"min_islands\": %d, \"uptime_seconds\": %.3f, ",
      (unsigned long long)s->revision, s->step, (unsigned long long)s->revision, s->members, s->min_islands, s->now - s->started);
  add(&t, "\"tokens\": %llu, ", (unsigned long long)tokens_all(s));
  json_num(&t, "loss", loss_now(s));
  add(&t, ", \"counts\": {\"registered\": %llu, \"left\": %llu, \"restarted\": %llu, \"state_joins\": %llu, \"finished\": %llu}",
      (unsigned long long)s->registered, (unsigned long long)s->left, (unsigned long long)s->restarted,
      (unsigned long long)s->state_joins, (unsigned long long)s->finished);
  add(&t, ",\n \"islands\": [");
  for (int k = 0; k < s->n_islands; k++) {
    add(&t, k ? ",\n  " : "\n  ");
    json_island(&t, s, &s->islands[k]);
  }
  add(&t, "],\n \"history\": [");
  for (int k = 0; k < s->n_history; k++) {
    const atoll_status_point *p = &s->history[k];
    add(&t, "%s{\"revision\": %llu, \"step\": %u, \"members\": %d, ", k ? ", " : "", (unsigned long long)p->revision, p->step,
        p->members);
    json_num(&t, "loss", p->loss);
    add(&t, "}");
  }
  add(&t, "]}\n");
  return done(&t);
}

/* ------------------------------------------------------------------ /metrics --- */

static void family(text *t, const char *name, const char *type, const char *help) {
  add(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample per island of a per-island family; NaN values are left out. */
typedef double (*island_value)(const atoll_status_snapshot *s, const atoll_status_island *i);
static void per_island(text *t, const atoll_status_snapshot *s, const char *name, const char *type, const char *help,
                       island_value f) {
  family(t, name, type, help);
  for (int k = 0; k < s->n_islands; k++) {
    double x = f(s, &s->islands[k]);
    if (!isnan(x)) add(t, "%s{island=\"%u\"} %.17g\n", name, s->islands[k].island, x);
  }
}

static double v_step(const atoll_status_snapshot *s, const atoll_status_island *i) { return (void)s, i->step; }
static double v_tokens(const atoll_status_snapshot *s, const atoll_status_island *i) { return (void)s, (double)tokens_of(i); }
static double v_loss(const atoll_status_snapshot *s, const atoll_status_island *i) { return (void)s, isfinite(i->loss) ? i->loss : NAN; }
static double v_bytes(const atoll_status_snapshot *s, const atoll_status_island *i) { return (void)s, (double)i->sent_bytes; }
static double v_contrib(const atoll_status_snapshot *s, const atoll_status_island *i) { return (void)s, (double)i->contributions; }
static double v_ranks(const atoll_status_snapshot *s, const atoll_status_island *i) { return (void)s, i->ranks; }
static double v_speed(const atoll_status_snapshot *s, const atoll_status_island *i) { return (void)s, speed(i); }
static double v_silent(const atoll_status_snapshot *s, const atoll_status_island *i) { return s->now - i->last_heard; }
static double v_behind(const atoll_status_snapshot *s, const atoll_status_island *i) {
  return s->revision > i->revision ? (double)(s->revision - i->revision) : 0;
}
static double v_last(const atoll_status_snapshot *s, const atoll_status_island *i) {
  return (void)s, i->contributions ? (double)i->last_revision : NAN;
}

static void counter(text *t, const char *name, const char *help, uint64_t v) {
  family(t, name, "counter", help);
  add(t, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(text *t, const char *name, const char *help, double v) {
  family(t, name, "gauge", help);
  add(t, "%s %.17g\n", name, v);
}

char *atoll_status_metrics(const atoll_status_snapshot *s) {
  text t = {0};
  gauge(&t, "atoll_coordinator_revision", "The last committed outer revision.", (double)s->revision);
  gauge(&t, "atoll_coordinator_step", "The inner step of the last committed revision.", s->step);
  counter(&t, "atoll_coordinator_merges_total", "Outer merges committed (one per revision).", s->revision);
  gauge(&t, "atoll_coordinator_members", "Live members (one per rank of each island).", s->members);
  gauge(&t, "atoll_coordinator_min_islands", "Islands an exchange needs (--min-islands).", s->min_islands);
  gauge(&t, "atoll_coordinator_uptime_seconds", "Seconds since this coordinator started.", s->now - s->started);
  counter(&t, "atoll_coordinator_tokens_total", "Tokens trained by the islands, summed.", tokens_all(s));
  double loss = loss_now(s);
  family(&t, "atoll_coordinator_loss", "gauge", "Mean of the last training losses of the islands that did not leave (absent: none known).");
  if (isfinite(loss)) add(&t, "atoll_coordinator_loss %.9g\n", loss);
  counter(&t, "atoll_coordinator_registrations_total", "Members that registered.", s->registered);
  counter(&t, "atoll_coordinator_departures_total", "Members that left (silent or stalled).", s->left);
  counter(&t, "atoll_coordinator_restarts_total", "Islands that came back as a new process.", s->restarted);
  counter(&t, "atoll_coordinator_state_joins_total", "Islands that joined with the committed state.", s->state_joins);
  counter(&t, "atoll_coordinator_finished_total", "Members that finished their run (said goodbye).", s->finished);
  family(&t, "atoll_coordinator_islands", "gauge", "Islands by state.");
  for (int st = ATOLL_ISLAND_LIVE; st <= ATOLL_ISLAND_LEFT; st++) {
    int n = 0;
    for (int k = 0; k < s->n_islands; k++) n += (int)s->islands[k].state == st;
    add(&t, "atoll_coordinator_islands{state=\"%s\"} %d\n", state_name((atoll_island_state)st), n);
  }
  family(&t, "atoll_island_up", "gauge", "1 while the island is a member (live or joining), else 0.");
  for (int k = 0; k < s->n_islands; k++)
    add(&t, "atoll_island_up{island=\"%u\",state=\"%s\"} %d\n", s->islands[k].island, state_name(s->islands[k].state),
        s->islands[k].state <= ATOLL_ISLAND_JOINING);
  per_island(&t, s, "atoll_island_ranks", "gauge", "Live ranks of the island.", v_ranks);
  per_island(&t, s, "atoll_island_step", "gauge", "Inner steps the island has done.", v_step);
  per_island(&t, s, "atoll_island_tokens_total", "counter", "Tokens the island trained on.", v_tokens);
  per_island(&t, s, "atoll_island_loss", "gauge", "The island's last training loss.", v_loss);
  per_island(&t, s, "atoll_island_sent_bytes_total", "counter", "Bytes the island's ranks sent (as of their last heartbeat).", v_bytes);
  per_island(&t, s, "atoll_island_contributions_total", "counter", "Commits the island took part in.", v_contrib);
  per_island(&t, s, "atoll_island_last_contribution_revision", "gauge", "The revision of its last contribution.", v_last);
  per_island(&t, s, "atoll_island_revisions_behind", "gauge", "Committed revisions the island does not hold.", v_behind);
  per_island(&t, s, "atoll_island_silence_seconds", "gauge", "Seconds since the island was last heard.", v_silent);
  per_island(&t, s, "atoll_island_speed_steps_per_second", "gauge", "Inner steps per second since first heard.", v_speed);
  return done(&t);
}

/* ------------------------------------------------------------------------ / --- */

/* The plot: loss (left axis, a line) and members (right axis, steps) over revisions. */
static void svg_plot(text *t, const atoll_status_snapshot *s) {
  const double W = 640, H = 220, L = 50, R = 40, T = 15, B = 30;
  add(t, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" role=\"img\" aria-label=\"loss and members over revisions\">\n",
      W, H);
  add(t, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#999\"/>\n", L, T, W - L - R, H - T - B);
  if (s->n_history == 0) {
    add(t, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">no commit yet</text></svg>\n", W / 2, H / 2);
    return;
  }
  double r0 = (double)s->history[0].revision, r1 = (double)s->history[s->n_history - 1].revision;
  double lo = INFINITY, hi = -INFINITY;
  int mmax = 1;
  for (int k = 0; k < s->n_history; k++) {
    double x = s->history[k].loss;
    if (isfinite(x)) lo = x < lo ? x : lo, hi = x > hi ? x : hi;
    if (s->history[k].members > mmax) mmax = s->history[k].members;
  }
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (hi - lo < 1e-6) lo -= 0.5, hi += 0.5;
  double pw = W - L - R, ph = H - T - B, span = r1 > r0 ? r1 - r0 : 1;
#define PX(rev) (L + ((double)(rev) - r0) / span * pw)
  add(t, "<polyline fill=\"none\" stroke=\"#c33\" stroke-width=\"2\" points=\"");
  for (int k = 0; k < s->n_history; k++)
    if (isfinite(s->history[k].loss))
      add(t, "%.1f,%.1f ", PX(s->history[k].revision), T + (hi - s->history[k].loss) / (hi - lo) * ph);
  add(t, "\"/>\n<polyline fill=\"none\" stroke=\"#36c\" stroke-width=\"1.5\" points=\"");
  for (int k = 0; k < s->n_history; k++) {
    double y = T + (1 - (double)s->history[k].members / mmax) * ph;
    if (k) add(t, "%.1f,%.1f ", PX(s->history[k].revision), T + (1 - (double)s->history[k - 1].members / mmax) * ph);
    add(t, "%.1f,%.1f ", PX(s->history[k].revision), y);
  }
  add(t, "\"/>\n");
#undef PX
  add(t, "<g font-size=\"11\" font-family=\"sans-serif\">\n");
  add(t, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\" fill=\"#c33\">%.3f</text>\n", L - 4, T + 10, hi);
  add(t, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\" fill=\"#c33\">%.3f</text>\n", L - 4, T + ph, lo);
  add(t, "<text x=\"%g\" y=\"%g\" fill=\"#36c\">%d</text>\n", L + pw + 4, T + 10, mmax);
  add(t, "<text x=\"%g\" y=\"%g\" fill=\"#36c\">0</text>\n", L + pw + 4, T + ph);
  add(t, "<text x=\"%g\" y=\"%g\">%.0f</text>\n", L, H - 10, r0);
  add(t, "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.0f</text>\n", L + pw, H - 10, r1);
  add(t, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">revision: <tspan fill=\"#c33\">loss</tspan>, "
         "<tspan fill=\"#36c\">members</tspan></text>\n</g></svg>\n",
      L + pw / 2, H - 10);
}

static void html_row(text *t, const atoll_status_snapshot *s, const atoll_status_island *i) {
  add(t, "<tr class=\"%s\"><td>%u</td><td>%s</td><td>%d</td><td>%u</td><td>%llu</td><td>%.2f</td><td>%llu</td>", state_name(i->state),
      i->island, state_name(i->state), i->ranks, i->step, (unsigned long long)(s->revision > i->revision ? s->revision - i->revision : 0),
      speed(i), (unsigned long long)tokens_of(i));
  if (isfinite(i->loss)) add(t, "<td>%.4f</td>", i->loss);
  else add(t, "<td>-</td>");
  add(t, "<td>%.1f</td><td>%llu</td>", (double)i->sent_bytes / 1e6, (unsigned long long)i->contributions);
  if (i->contributions) add(t, "<td>%llu (%.0f s ago)</td>", (unsigned long long)i->last_revision, s->now - i->last_at);
  else add(t, "<td>-</td>");
  add(t, "<td>%.1f</td></tr>\n", s->now - i->last_heard);
}

char *atoll_status_html(const atoll_status_snapshot *s) {
  text t = {0};
  add(&t, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"5\">\n"
          "<title>atoll coordinator: revision %llu</title>\n<style>\n"
          "body{font-family:sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse}"
          "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
          "tr.left td,tr.finished td{color:#888}tr.joining td{background:#ffd}\n</style></head><body>\n",
      (unsigned long long)s->revision);
  double loss = loss_now(s);
  add(&t, "<h1>atoll coordinator</h1>\n<p>revision <b>%llu</b> (step %u), %d members (at least %d islands), %llu tokens, loss ",
      (unsigned long long)s->revision, s->step, s->members, s->min_islands, (unsigned long long)tokens_all(s));
  if (isfinite(loss)) add(&t, "<b>%.4f</b>", loss);
  else add(&t, "-");
  add(&t, "; up %.0f s. Joined %llu, left %llu, restarted %llu, joined with the state %llu, finished %llu.</p>\n",
      s->now - s->started, (unsigned long long)s->registered, (unsigned long long)s->left, (unsigned long long)s->restarted,
      (unsigned long long)s->state_joins, (unsigned long long)s->finished);
  add(&t, "<table id=\"islands\">\n<tr><th>island</th><th>state</th><th>ranks</th><th>step</th><th>revisions behind</th>"
          "<th>steps/s</th><th>tokens</th><th>loss</th><th>MB sent</th><th>contributions</th><th>last contribution</th>"
          "<th>silent (s)</th></tr>\n");
  for (int k = 0; k < s->n_islands; k++) html_row(&t, s, &s->islands[k]);
  add(&t, "</table>\n<h2>Loss and members over revisions</h2>\n");
  svg_plot(&t, s);
  add(&t, "<p><a href=\"/status.json\">status.json</a> &middot; <a href=\"/metrics\">metrics</a></p>\n</body></html>\n");
  return done(&t);
}
