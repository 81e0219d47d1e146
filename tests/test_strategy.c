/* The strategy list (src/parallel/strategy.h): entry points run in list order, an
 * object without an entry is skipped, a weight swap tells every object, a failing
 * after_step stops the list, and destroy runs in reverse order. */
#include "check.h"
#include "parallel/strategy.h"

#include <string.h>

typedef struct {
  atoll_strategy base;
  char id;
  char *log; /* shared: the calls in order, one letter per object and entry */
  int fail;
} fake;

static void note(atoll_strategy *s, char what) {
  fake *f = (fake *)s;
  size_t n = strlen(f->log);
  f->log[n] = f->id;
  f->log[n + 1] = what;
  f->log[n + 2] = 0;
}

static void begin_step(atoll_strategy *s, int step) { note(s, (char)('0' + step)); }
static void finish_grads(atoll_strategy *s) { note(s, 'g'); }
static int after_step(atoll_strategy *s, int step, int last, double seconds, atoll_err *err) {
  (void)step, (void)last, (void)seconds;
  note(s, 'a');
  return ((fake *)s)->fail ? atoll_fail(err, "object %c failed", ((fake *)s)->id) : 0;
}
static int swap(atoll_strategy *s) {
  note(s, 's');
  return 1;
}
static void weights_changed(atoll_strategy *s) { note(s, 'w'); }
static void destroy(atoll_strategy *s) { note(s, 'd'); }

static const atoll_strategy_ops FULL = {.name = "full", .begin_step = begin_step, .finish_grads = finish_grads,
                                        .after_step = after_step, .weights_changed = weights_changed,
                                        .destroy = destroy};
static const atoll_strategy_ops SWAPS = {.name = "swaps", .after_step = after_step, .swap_eval_weights = swap,
                                         .destroy = destroy};

int main(void) {
  char log[256] = "";
  fake a = {{&FULL}, 'A', log, 0}, b = {{&SWAPS}, 'B', log, 1}, c = {{&FULL}, 'C', log, 0};
  atoll_strategy_list l = {0};
  atoll_strategies_add(&l, &a.base);
  atoll_strategies_add(&l, NULL); /* skipped: an object that was not made */
  atoll_strategies_add(&l, &b.base);
  atoll_strategies_add(&l, &c.base);
  CHECK(l.n == 3);
  atoll_strategies_begin_step(&l, 1);
  atoll_strategies_finish_grads(&l);
  CHECK(strcmp(log, "A1C1AgCg") == 0); /* B has neither entry */
  log[0] = 0;
  atoll_strategies_swap_eval_weights(&l);
  CHECK(strcmp(log, "BsAwCw") == 0); /* the swap, then every object told */
  log[0] = 0;
  atoll_err err = {{0}};
  CHECK(atoll_strategies_after_step(&l, 1, 0, 0.0, &err) == -1);
  CHECK(strcmp(log, "AaBa") == 0); /* C never runs after B failed */
  CHECK(strstr(err.msg, "object B failed") != NULL);
  log[0] = 0;
  atoll_strategies_destroy(&l);
  CHECK(strcmp(log, "CdBdAd") == 0);
  CHECK(l.n == 0);
  CHECK_DONE();
}
