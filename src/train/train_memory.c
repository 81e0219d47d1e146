/* A run too large for the machine is refused at start-up, with the estimate, instead
 * of paging the machine to a halt or being killed hours later. The model's share is
 * counted by the model's own allocation code (atoll_model_bytes), the rest (AdamW
 * moments, ZeRO's sharding) follows train.c and src/parallel/dp.c. */
#include "train/train_memory.h"

#include "model/model.h"
#include "ops/ops.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read. */
static uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  return (uint64_t)kb * 1024;
}

/* What this process may still map: MemAvailable, or the address-space limit
 * (ulimit -v) when it is lower; 0 when unknown. */
static uint64_t bytes_available(void) {
  uint64_t avail = mem_available();
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (avail == 0 || rl.rlim_cur < avail))
    avail = (uint64_t)rl.rlim_cur;
  return avail;
}

int atoll_run_check_memory(const atoll_config *c, const atoll_part *part, int dp, int slots, int seq,
                           atoll_err *err) {
  atoll_model_mem mm;
  /* the bf16 CPU table's kept copies count too (the device's tables keep none) */
  const atoll_ops *ops = strcmp(c->device.precision, "bf16") == 0 && strcmp(c->device.type, "cpu") == 0 ? atoll_ops_cpu_bf16() : NULL;
  if (atoll_model_bytes(&c->model, part, c->data.batch, seq, slots, ops, &mm, err)) return -1;
  int stage = dp > 1 ? c->parallel.zero_stage : 0;
  /* ZeRO-1 shards the moments, ZeRO-2 also the gradients, ZeRO-3 also the weights
   * (their pages are handed back; the unit gathered at a time is left out) */
  double shard = (double)mm.weights / dp;
  double weights = stage >= 3 ? shard : (double)mm.weights;
  double grads = stage >= 2 ? shard : (double)mm.grads;
  double moments = 2.0 * (stage >= 1 ? shard : (double)mm.weights); /* m and v, also with SGD */
  /* the bf16 table's kept copy of the weights; ZeRO-3 hands it back (atoll_model_keep_weights) */
  double kept = stage >= 3 ? 0.0 : (double)mm.weights_bf16;
  double state = weights + grads + moments + kept, acts = (double)mm.acts;
  /* With a device the host holds copies of the weights and moments (checkpoints, the
   * weights' hash: train.c's host_params, state.m and state.v). A GPU holds the rest,
   * and its memory is not checked here (its allocator refuses what does not fit); the
   * shadow device keeps the rest in host memory too. */
  double copies = (double)mm.weights + moments;
  if (strcmp(c->device.type, "cuda") == 0) state = copies, acts = 0.0;
  if (strcmp(c->device.type, "shadow") == 0) state += copies;
  /* DiLoCo: the global weights, outer momentum and outer gradient of this rank's
   * slice (src/parallel/diloco.c), on the host whatever the device */
  if (c->islands.count > 1 || c->islands.join[0]) state += 3.0 * shard;
  uint64_t avail = bytes_available();
  if (avail == 0 || state + acts <= (double)avail) return 0;
  char what[96], hint[96];
  if (acts >= state) {
    snprintf(what, sizeof what, "--batch %d --seq %d", c->data.batch, seq);
    snprintf(hint, sizeof hint, "lower --batch or --seq");
  } else {
    snprintf(what, sizeof what, "--dim %d --layers %d", c->model.dim, c->model.layers);
    snprintf(hint, sizeof hint, "use a smaller model or spread it over more ranks (--zero, --tp, --pp)");
  }
  return atoll_fail(err, "%s: this run needs about %.1f GiB per rank (parameters and optimizer %.1f, activations %.1f) "
                    "but the machine has %.1f GiB available; %s", what, (state + acts) / GIB, state / GIB, acts / GIB,
                    (double)avail / GIB, hint);
}
