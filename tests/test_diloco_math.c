/* DiLoCo's outer step computed by hand (sign of the outer gradient, Nesterov and
 * plain SGD momentum), the outer-gradient codecs' sizes and error bounds, and a stop
 * signal between the fragments of one step's exchange leaving the outer state as it
 * was before the step. */
#include "check.h"
#include "core/rng.h"
#include "model/layout.h"
#include "parallel/diloco.h"

#include <stdlib.h>
#include <string.h>

static void outer_steps(atoll_comm *world, int nesterov) {
  atoll_err err;
  atoll_mesh mesh;
  CHECK_OK(atoll_mesh_create(&mesh, world, 1, 1, 1, &err), &err);
  atoll_layout lay;
  atoll_shape s = {.layers = 1, .heads = 1, .dim = 4, .context = 4, .vocab = 8};
  CHECK_OK(atoll_layout_init(&lay, &s, &err), &err);
  size_t P = lay.nparams;
  float *w = calloc(P, sizeof(float));
  for (size_t i = 0; i < P; i++) w[i] = 0.01f * (float)(i % 17);
  atoll_diloco_config cfg = {.sync_every = 1, .outer_lr = 0.7f, .outer_momentum = 0.9f,
                             .nesterov = nesterov, .fragments = 1, .dtype = ATOLL_Q_FP32};
  atoll_diloco *d;
  CHECK_OK(atoll_diloco_create(&d, &cfg, &mesh, &lay, w, &err), &err);
  atoll_diloco_reset_global(d);
  float g0 = w[5];
  /* the island moved every weight down by 0.1: outer gradient g - w = +0.1 */
  for (size_t i = 0; i < P; i++) w[i] -= 0.1f;
  CHECK_OK(atoll_diloco_after_step(d, 1, 0, &err), &err);
  double u1 = 0.1;
  double g1 = nesterov ? g0 - 0.7 * (0.1 + 0.9 * u1) : g0 - 0.7 * u1; /* 0.133 / 0.07 down */
  CHECK_NEAR(atoll_diloco_momentum(d)[5], u1, 1e-6);
  CHECK_NEAR(atoll_diloco_global(d)[5], g1, 1e-6);
  CHECK_NEAR(w[5], g1, 1e-6); /* the island restarts from the new global weights */
  CHECK(atoll_diloco_global(d)[5] < g0); /* moved the way the island moved */
  /* next round the island moved up by 0.2: outer gradient -0.2 */
  for (size_t i = 0; i < P; i++) w[i] += 0.2f;
  CHECK_OK(atoll_diloco_after_step(d, 2, 0, &err), &err);
  double u2 = 0.9 * u1 - 0.2;
  double g2 = nesterov ? g1 - 0.7 * (-0.2 + 0.9 * u2) : g1 - 0.7 * u2;
  CHECK_NEAR(atoll_diloco_momentum(d)[5], u2, 1e-6);
  CHECK_NEAR(atoll_diloco_global(d)[5], g2, 1e-6);
  atoll_diloco_stats st = atoll_diloco_get_stats(d);
  CHECK(st.outer_syncs == 2);
  CHECK(st.inter_island_bytes == 0); /* one island sends nothing */
  atoll_diloco_destroy(d);
  atoll_layout_free(&lay);
  atoll_mesh_free(&mesh);
  free(w);
}

static void codecs(void) {
  size_t n = 1000;
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  uint8_t *buf = malloc(8 * n);
  atoll_rng rng;
  atoll_rng_seed(&rng, 5);
  for (size_t i = 0; i < n; i++) x[i] = atoll_rng_normal(&rng) * (i % 64 < 32 ? 1e-3f : 1.0f);
  CHECK(atoll_q_bytes(ATOLL_Q_FP32, n) == 4000);
  CHECK(atoll_q_bytes(ATOLL_Q_BF16, n) == 2000);
  CHECK(atoll_q_bytes(ATOLL_Q_INT8, n) == 1000 + 4 * 32);
  CHECK(atoll_q_bytes(ATOLL_Q_FP4, n) == 500 + 4 * 32);
  for (int q = 0; q < 4; q++) {
    atoll_q_encode(q, x, n, buf);
    atoll_q_decode(q, buf, n, y);
    double worst = 0;
    for (size_t b = 0; b < n; b += ATOLL_QBLOCK) {
      size_t e = b + ATOLL_QBLOCK < n ? b + ATOLL_QBLOCK : n;
      float mx = 0;
      for (size_t i = b; i < e; i++) mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
      for (size_t i = b; i < e; i++) {
        /* bound per element: bf16 relative 2^-8; int8 half a step of max/127;
         * fp4 half the widest gap (4 -> 6) of max/6 */
        double bound = q == ATOLL_Q_FP32 ? 0 : q == ATOLL_Q_BF16 ? fabs(x[i]) / 256 : q == ATOLL_Q_INT8 ? mx / 127 / 2 : mx / 6;
        double e_ = fabs((double)y[i] - x[i]);
        if (e_ > bound * 1.0001 + 1e-30) worst = e_ / (bound + 1e-30) > worst ? e_ / (bound + 1e-30) : worst;
      }
    }
    if (worst > 0) fprintf(stderr, "%s: error %.3g x its bound\n", atoll_qtype_name(q), worst);
    CHECK(worst == 0);
  }
  free(x);
  free(y);
  free(buf);
}

/* A link whose mean for fragment 0 is the island's own outer gradient and whose wait
 * for fragment 1 ends with a stop signal (as atoll_link_mean does on SIGTERM). */
static int fake_mean(void *ctx, atoll_qtype dtype, float *x, size_t n, uint64_t tokens, int step, int fragment,
                     size_t *bad, atoll_err *err) {
  (void)ctx, (void)dtype, (void)x, (void)n, (void)tokens, (void)step, (void)err;
  *bad = SIZE_MAX;
  return fragment == 0 ? 0 : ATOLL_OUTER_SIGNALLED;
}
static int fake_commit(void *ctx, int step, const float *global, size_t n, atoll_err *err) {
  (void)ctx, (void)step, (void)global, (void)n, (void)err;
  return 0;
}
static uint64_t fake_bytes(void *ctx) { (void)ctx; return 0; }

/* The last step syncs both fragments; fragment 0's outer step is applied when its mean
 * comes, then the wait for fragment 1 ends with a stop signal before the commit: the
 * global weights and momentum must be as before the step (the checkpoint saved then
 * names the old revision), not hold fragment 0's uncommitted step. */
static void signal_between_fragments(atoll_comm *world) {
  atoll_err err;
  atoll_mesh mesh;
  CHECK_OK(atoll_mesh_create(&mesh, world, 1, 1, 1, &err), &err);
  atoll_layout lay;
  atoll_shape s = {.layers = 2, .heads = 1, .dim = 4, .context = 4, .vocab = 8};
  CHECK_OK(atoll_layout_init(&lay, &s, &err), &err);
  size_t P = lay.nparams;
  float *w = calloc(P, sizeof(float)), *before = calloc(P, sizeof(float));
  for (size_t i = 0; i < P; i++) w[i] = 0.01f * (float)(i % 13);
  atoll_outer_link link = {.mean = fake_mean, .commit = fake_commit, .bytes_sent = fake_bytes};
  atoll_diloco_config cfg = {.sync_every = 4, .outer_lr = 0.7f, .outer_momentum = 0.9f, .nesterov = 1,
                             .fragments = 2, .dtype = ATOLL_Q_FP32, .link = &link, .tokens_per_step = 8};
  atoll_diloco *d;
  CHECK_OK(atoll_diloco_create(&d, &cfg, &mesh, &lay, w, &err), &err);
  atoll_diloco_reset_global(d);
  size_t b, e;
  atoll_diloco_slice(d, &b, &e);
  memcpy(before, atoll_diloco_global(d), sizeof(float) * (e - b));
  for (size_t i = 0; i < P; i++) w[i] -= 0.1f; /* the island moved */
  CHECK_OK(atoll_diloco_after_step(d, 1, 1, &err), &err); /* the last step: every fragment syncs */
  const char *why = NULL;
  CHECK(atoll_diloco_ended(d, &why) == ATOLL_OUTER_SIGNALLED);
  CHECK(memcmp(before, atoll_diloco_global(d), sizeof(float) * (e - b)) == 0);
  int moved = 0;
  for (size_t i = 0; i < e - b; i++) moved |= atoll_diloco_momentum(d)[i] != 0;
  CHECK(!moved);
  atoll_diloco_destroy(d);
  atoll_layout_free(&lay);
  atoll_mesh_free(&mesh);
  free(w), free(before);
}

int main(int argc, char **argv) {
  atoll_err err;
  atoll_comm *world;
  if (atoll_comm_init(&world, &argc, &argv, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  outer_steps(world, 1);
  outer_steps(world, 0);
  codecs();
  signal_between_fragments(world);
  atoll_comm_free(world);
  CHECK_DONE();
}
