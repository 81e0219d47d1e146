#include "parallel/mesh.h"

#include <string.h>

int atoll_mesh_world_rank(const atoll_mesh *m, int island, int pp_rank, int dp_rank, int tp_rank) {
  return island * m->island_size + (pp_rank * m->dp + dp_rank) * m->tp + tp_rank;
}

void atoll_mesh_coords(const atoll_mesh *m, int world_rank, int *island, int *pp_rank, int *dp_rank, int *tp_rank) {
  int ir = world_rank % m->island_size;
  *island = world_rank / m->island_size;
  *tp_rank = ir % m->tp;
  *dp_rank = ir / m->tp % m->dp;
  *pp_rank = ir / (m->tp * m->dp);
}

int atoll_mesh_create(atoll_mesh *m, atoll_comm *world, int islands, int tp, int pp, atoll_err *err) {
  memset(m, 0, sizeof *m);
  int n = atoll_comm_size(world), w = atoll_comm_rank(world);
  if (islands < 1) return atoll_fail(err, "--islands: must be at least 1, got %d", islands);
  if (tp < 1) return atoll_fail(err, "--tp: must be at least 1, got %d", tp);
  if (pp < 1) return atoll_fail(err, "--pp: must be at least 1, got %d", pp);
  if (n % islands != 0)
    return atoll_fail(err, "--islands %d: does not divide the %d ranks (islands are equal blocks of ranks)", islands, n);
  if ((n / islands) % (tp * pp) != 0)
    return atoll_fail(err, "--tp %d x --pp %d: does not divide the %d ranks of %s (data parallel takes what is left)",
                      tp, pp, n / islands, islands > 1 ? "an island" : "the run");
  m->world = world;
  m->islands = islands;
  m->island_size = n / islands;
  m->island_rank = w % m->island_size;
  m->tp = tp;
  m->pp = pp;
  m->dp = m->island_size / (tp * pp);
  atoll_mesh_coords(m, w, &m->island, &m->pp_rank, &m->dp_rank, &m->tp_rank);
  int stage_key = m->island * pp + m->pp_rank;
  int tie = pp > 1 && (m->pp_rank == 0 || m->pp_rank == pp - 1);
  /* colors: a value shared exactly by the ranks of one group */
  if (atoll_comm_split(world, m->island, m->island_rank, "island", &m->island_comm, err) ||
      atoll_comm_split(world, stage_key * tp + m->tp_rank, m->dp_rank, "data", &m->dp_comm, err) ||
      atoll_comm_split(world, stage_key * m->dp + m->dp_rank, m->tp_rank, "tensor", &m->tp_comm, err) ||
      atoll_comm_split(world, (m->island * m->dp + m->dp_rank) * tp + m->tp_rank, m->pp_rank, "pipeline",
                       &m->pp_comm, err) ||
      atoll_comm_split(world, tie ? (m->island * m->dp + m->dp_rank) * tp + m->tp_rank : -1, m->pp_rank,
                       "embedding-tie", &m->tie_comm, err) ||
      atoll_comm_split(world, m->island_rank, m->island, "cross-island", &m->cross, err)) {
    atoll_mesh_free(m);
    return -1;
  }
  return 0;
}

void atoll_mesh_free(atoll_mesh *m) {
  atoll_comm *all[] = {m->island_comm, m->dp_comm, m->tp_comm, m->pp_comm, m->tie_comm, m->cross};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) atoll_comm_free(all[i]);
  m->island_comm = m->dp_comm = m->tp_comm = m->pp_comm = m->tie_comm = m->cross = NULL;
}
