/* A run's setup: the mesh of ranks, this rank's part of the model and the strategy
 * objects in the order the loop calls them (docs/architecture.md):
 *   pipeline        the schedule of micro-batches; the tied-embedding sum
 *   data parallel   gradient averaging (DDP) or ZeRO-1/2/3
 *   tensor parallel the model's tp collectives; the sequence-parallel gradient sum
 *   DiLoCo          outer syncs between islands (islands > 1) */
#include "train/device.h"
#include "train/run.h"

#include "core/fs.h"
#include "data/dataset.h"
#include "model/model.h"
#include "ops/gemm_cpu.h"
#include "ops/ops.h"
#include "net/sock.h"
#include "parallel/island_units.h"
#include "parallel/islands_net.h"
#include "parallel/tp.h"
#include "train/config.h"
#include "train/train_memory.h"

#include <stdlib.h>
#include <string.h>

double atoll_run_global_batch(const atoll_run *r) { return (double)r->cfg->data.batch * r->micro_batches * r->replicas; }

/* An island's phase in tokens or seconds (phase.h): one island of a networked run,
 * whose phases span the steps between two syncs of the whole model. */
static int check_phase(const atoll_config *c, atoll_err *err) {
  const atoll_islands_config *i = &c->islands;
  const char *flag = i->phase_tokens > 0 ? "--phase-tokens" : "--phase-seconds";
  if (i->phase_tokens == 0 && i->phase_seconds == 0) return 0;
  if (i->phase_tokens > 0 && i->phase_seconds > 0)
    return atoll_fail(err, "--phase-tokens and --phase-seconds: give one of them (a phase ends by tokens or by time)");
  if (!i->join[0])
    return atoll_fail(err, "%s: a phase of its own is for an island that is a separate job (--join); the islands of one job step together",
                      flag);
  if (i->fragments > 1)
    return atoll_fail(err, "%s: needs --fragments 1 (a phase is the steps between two syncs of the whole model), not %d", flag,
                      i->fragments);
  return 0;
}

int atoll_run_check_layout(const atoll_config *c, int world_size, atoll_err *err) {
  if (c->islands.count > 1 && world_size == 1 && !c->islands.join[0]) /* --join: this job is one island */
    return atoll_fail(err, "--islands %d: islands need several ranks; launch with mpirun -np N (or srun)", c->islands.count);
  if ((c->parallel.tp > 1 || c->parallel.pp > 1) && world_size == 1)
    return atoll_fail(err, "--tp %d --pp %d: model parallelism needs several ranks; launch with mpirun -np N (or srun)",
                      c->parallel.tp, c->parallel.pp);
  atoll_diloco_config dc = {.sync_every = c->islands.sync_every, .fragments = c->islands.fragments, .overlap = c->islands.overlap,
                            .async = strcmp(c->islands.outer_mode, "async") == 0};
  if (c->islands.count > 1 && atoll_diloco_check(&dc, c->model.layers, err)) return -1;
  return check_phase(c, err);
}

/* The mesh, and the micro-batches per replica per step. */
static int setup_mesh(atoll_run *r, atoll_err *err) {
  const atoll_config *c = r->cfg;
  int joined = c->islands.join[0] != 0; /* islands as separate jobs: this job is one island */
  if (atoll_run_check_layout(c, r->world_size, err)) return -1;
  if (atoll_mesh_create(&r->mesh, r->world, joined ? 1 : c->islands.count, c->parallel.tp, c->parallel.pp, err)) return -1;
  if (!atoll_shape_tied(&c->model)) { /* an untied LM head: no wte on the last pp_stage to keep equal */
    atoll_comm_free(r->mesh.tie_comm);
    r->mesh.tie_comm = NULL;
  }
  if (c->parallel.zero_stage > 0 && r->mesh.dp == 1)
    return atoll_fail(err, "--zero %d (--shard): ZeRO needs several data-parallel ranks per island (ranks / (tp x pp) > 1); launch with more ranks",
                      c->parallel.zero_stage);
  r->replicas = r->mesh.islands * r->mesh.dp;
  r->replica = r->mesh.island * r->mesh.dp + r->mesh.dp_rank;
  /* (an open run's island draws each phase from its data unit's stream: island_units.c) */
  int units = joined && c->islands.units;
  r->data_replicas = units ? r->mesh.dp : joined ? c->islands.count * r->mesh.dp : r->replicas;
  r->data_replica = units ? r->mesh.dp_rank : joined ? c->islands.id * r->mesh.dp + r->mesh.dp_rank : r->replica;
  r->micro_batches = c->parallel.microbatches > 0 ? c->parallel.microbatches : c->data.accum;
  if (c->data.global_batch > 0) {
    long per_step = (long)c->data.batch * r->replicas;
    if (c->data.global_batch % per_step != 0)
      return atoll_fail(err, "--global-batch %d: not divisible by batch %d x %d data-parallel replicas", c->data.global_batch,
                        c->data.batch, r->replicas);
    r->micro_batches = (int)(c->data.global_batch / per_step);
  }
  r->chunks = c->parallel.virtual_stages;
  return 0;
}

static int setup_diloco(atoll_run *r, atoll_err *err) {
  const atoll_config *c = r->cfg;
  atoll_diloco_config dc = {
      .sync_every = c->islands.sync_every, .outer_lr = c->islands.outer_lr, .outer_momentum = c->islands.outer_momentum,
      .nesterov = strcmp(c->islands.outer_optimizer, "nesterov") == 0, .fragments = c->islands.fragments,
      .overlap = c->islands.overlap, .merge_alpha = c->islands.overlap > 0 ? c->islands.merge_alpha : 0.0f,
      .async = strcmp(c->islands.outer_mode, "async") == 0,
      .dtype = (atoll_qtype)atoll_qtype_parse(c->islands.outer_dtype), .wan_gbps = c->islands.wan_gbps,
      .wan_latency_ms = c->islands.wan_latency_ms, .throttle = c->islands.throttle,
      .stage3 = r->mesh.dp > 1 && c->parallel.zero_stage == 3, .whole = &r->whole, .hooks = r->hooks,
      .tokens_per_step = (uint64_t)(atoll_run_global_batch(r) * r->seq) / (uint64_t)(c->islands.join[0] ? 1 : r->mesh.islands),
      .ops = atoll_model_ops(r->model), .host_copy = r->host_params};
  if (atoll_diloco_check(&dc, r->lay->shape.layers, err)) return -1; /* before --join registers */
  if (c->islands.join[0]) { /* islands as separate jobs: the outer exchange goes over the network */
    /* an island of several ranks: each rank has its own data endpoint and session
     * with the coordinator, and exchanges its slice with the same rank of the others */
    char listen[300], advertise[300] = "";
    if (!c->islands.listen[0]) { /* every rank on a free port of the address that reaches the coordinator */
      if (atoll_sock_default_listen(c->islands.join, listen, sizeof listen, err)) return -1;
    } else if (atoll_islands_net_rank_endpoint(c->islands.listen, r->rank, listen, sizeof listen, err)) {
      return -1;
    }
    if (c->islands.advertise[0] && atoll_islands_net_rank_endpoint(c->islands.advertise, r->rank, advertise, sizeof advertise, err))
      return atoll_fail(err, "--island-advertise %s: an island of several ranks needs tcp://HOST:PORT (rank r is announced at PORT + r)",
                        c->islands.advertise);
    size_t slice_b = atoll_dp_shard_start(r->lay->nparams, r->mesh.dp, r->mesh.dp_rank);
    size_t slice_e = atoll_dp_shard_start(r->lay->nparams, r->mesh.dp, r->mesh.dp_rank + 1);
    /* what every island must share: the inner layout, the model's size and this rank's
     * slice of it, and how the data is split over the islands (--islands, --island-data) */
    int shape[] = {r->world_size, r->mesh.tp, r->mesh.pp, r->mesh.dp, r->chunks, (int)(r->lay->nparams >> 31),
                   (int)(r->lay->nparams & 0x7fffffff), (int)(slice_b & 0x7fffffff), (int)(slice_e & 0x7fffffff),
                   c->islands.count, atoll_island_data_mode(c->islands.data),
                   /* and the exchanges' schedule and encoding: islands that differ there would
                    * wait for each other's READYs for ever, or decode each other's bytes wrongly */
                   c->islands.sync_every, c->islands.fragments, atoll_qtype_parse(c->islands.outer_dtype)};
    atoll_link_config lc = {.join = c->islands.join, .listen = listen, .advertise = advertise, .key_file = c->islands.key,
                            .coordinator_key = c->islands.coordinator_key, .island = (uint32_t)c->islands.id,
                            .islands = c->islands.units ? 0 : (uint32_t)c->islands.count, /* (open: no fixed number) */
                            .rank = (uint32_t)r->rank, .ranks = (uint32_t)r->world_size,
                            .layout = atoll_islands_net_layout(shape, (int)(sizeof shape / sizeof shape[0])),
                            .streams = c->islands.net_streams, .timeout = c->islands.net_timeout,
                            .wait_timeout = 10 * c->islands.net_timeout,
                            .heartbeat = 0.5, .fail_first_fetch = r->hooks->fetch_fail_rank == r->rank,
                            .feed_bad_momentum = r->hooks->feed_bad_momentum,
                            .commit_sigstop = (uint32_t)r->hooks->commit_sigstop, .bye_sigstop = r->hooks->bye_sigstop};
    if (atoll_islands_net_create(&r->net, &lc, err)) return -1;
    atoll_strategies_add(&r->strategies, atoll_islands_net_strategy(r->net));
    dc.link = atoll_islands_net_link(r->net);
  }
  if (atoll_diloco_create(&r->diloco, &dc, &r->mesh, r->lay, atoll_model_params(r->model), err)) return -1;
  atoll_strategies_add(&r->strategies, atoll_diloco_strategy(r->diloco));
  if (c->islands.join[0] && c->islands.units && /* an open run: the data in units (island_units.h) */
      atoll_island_units_create(&r->units, c->islands.join, c->islands.key, c->islands.coordinator_key, (uint32_t)r->rank,
                                c->islands.sync_every, c->run.steps, c->islands.net_timeout, r->diloco, err))
    return -1;
  return 0;
}

/* The strategies, in step order (see the top of this file). */
static int setup_strategies(atoll_run *r, const atoll_pipeline_config *pc, atoll_err *err) {
  const atoll_config *c = r->cfg;
  if (atoll_pipeline_create(&r->pipe, pc, &r->mesh, r->model, err)) return -1;
  atoll_strategies_add(&r->strategies, atoll_pipeline_strategy(r->pipe));
  size_t bucket = (size_t)((double)c->parallel.bucket_mb * (1 << 20) / sizeof(float));
  int zero_stage = r->mesh.dp > 1 ? c->parallel.zero_stage : 0;
  if (atoll_dp_create(&r->dp, r->model, r->mesh.dp_comm, r->mesh.island_comm, zero_stage, bucket, err)) return -1;
  if (strcmp(c->parallel.grad_dtype, "bf16") == 0) atoll_dp_set_grad_wire(r->dp, ATOLL_WIRE_BF16);
  atoll_strategies_add(&r->strategies, atoll_dp_strategy(r->dp));
  /* after the list owns the data-parallel object, so that a failure frees it */
  if (atoll_device_open_coll(c, r->mesh.dp_comm, &r->dcoll, err)) return -1;
  if (r->dcoll) atoll_dp_set_device_coll(r->dp, r->dcoll);
  size_t tie_begin, tie_end;
  if (atoll_pipeline_tie_range(r->pipe, &tie_begin, &tie_end)) atoll_dp_defer(r->dp, tie_begin, tie_end);
  if (r->mesh.tp > 1) {
    size_t b, e;
    atoll_dp_shard(r->dp, &b, &e);
    atoll_tp *tp;
    if (atoll_tp_create(&tp, r->model, r->mesh.tp_comm, c->parallel.sequence_parallel, b, e, err)) return -1;
    atoll_strategies_add(&r->strategies, atoll_tp_strategy(tp));
  }
  return c->islands.count > 1 || c->islands.join[0] ? setup_diloco(r, err) : 0;
}

int atoll_run_check_machine(const atoll_config *c, atoll_err *err) {
  if (strcmp(c->device.type, "cpu") == 0 && strcmp(c->device.precision, "bf16") == 0) return atoll_gemm_bf16_check(err);
  return 0;
}

int atoll_run_setup(atoll_run *r, const atoll_config *c, const atoll_test_hooks *hooks, atoll_comm *world,
                    atoll_err *err) {
  memset(r, 0, sizeof *r);
  r->cfg = c;
  r->no_hooks = atoll_test_hooks_none();
  r->hooks = hooks ? hooks : &r->no_hooks; /* a library caller may pass NULL */
  r->world = world;
  r->rank = atoll_comm_rank(world);
  r->world_size = atoll_comm_size(world);
  r->seq = c->data.seq ? c->data.seq : c->model.context;
  snprintf(r->ckpt_root, sizeof r->ckpt_root, "%s/checkpoints", c->run.out);
  if (atoll_run_check_machine(c, err)) return -1;
  const atoll_ops *ops;
  if (atoll_device_open(c, &ops, r->device_desc, sizeof r->device_desc, err)) return -1;
  r->peak_flops = 1e12 * (c->device.peak_tflops > 0 ? c->device.peak_tflops
                                             : atoll_device_peak_tflops(r->device_desc, strcmp(c->device.precision, "bf16") == 0));
  if (setup_mesh(r, err)) return -1;
  atoll_pipeline_config pc = {.schedule = c->parallel.schedule, .micro_batches = r->micro_batches, .chunks = r->chunks,
                              .batch = c->data.batch, .seq = r->seq, .max_steps = c->run.steps,
                              .test_forward_ms = r->hooks->stage_forward_ms,
                              .test_backward_ms = r->hooks->stage_backward_ms,
                              .test_forward_units = r->hooks->stage_forward_units,
                              .test_backward_units = r->hooks->stage_backward_units};
  int slots;
  if (atoll_pipeline_slots(&pc, &r->mesh, &slots, err)) return -1;
  /* this rank's part: pp_stage s of pp holds chunks s, s + pp, ... of the chunks x pp
   * even chunks of the layers (one chunk: blocks [s L / pp, (s+1) L / pp), L layers) */
  atoll_part part = {r->mesh.tp, r->mesh.tp_rank, r->mesh.pp_rank, r->mesh.pp, r->chunks, c->parallel.sequence_parallel};
  if (atoll_run_check_memory(c, &part, r->mesh.dp, slots, r->seq, err)) return -1; /* before allocating */
  if (atoll_layout_init(&r->whole, &c->model, err)) return -1;
  if (atoll_model_create_on(&r->model, &c->model, &part, c->data.batch, r->seq, slots, ops, err)) return -1;
  r->lay = atoll_model_layout(r->model);
  if (ops->device && !(r->host_params = malloc(sizeof(float) * r->lay->nparams)))
    return atoll_fail(err, "out of memory for the host copy of %zu parameters", r->lay->nparams);
  return setup_strategies(r, &pc, err);
}

void atoll_run_free(atoll_run *r) {
  atoll_island_units_free(r->units);
  atoll_strategies_destroy(&r->strategies);
  if (r->dcoll) r->dcoll->destroy(r->dcoll); /* after data parallel, which used it */
  r->dcoll = NULL;
  atoll_layout_free(&r->whole);
  atoll_mesh_free(&r->mesh);
  atoll_model_destroy(r->model);
  free(r->host_params);
  r->host_params = NULL;
  free(r->tokenizer_json);
  r->tokenizer_json = NULL;
}
