#include "parallel/mesh.h"

#include <string.h>

int atoll_mesh_create(atoll_mesh *m, atoll_comm *world, int islands, atoll_err *err) {
  memset(m, 0, sizeof *m);
  int n = atoll_comm_size(world), w = atoll_comm_rank(world);
  if (islands < 1) return atoll_fail(err, "--islands: must be at least 1, got %d", islands);
  if (n % islands != 0)
    return atoll_fail(err, "--islands %d: does not divide the %d ranks (islands are equal blocks of ranks)", islands, n);
  m->world = world;
  m->islands = islands;
  m->island_size = n / islands;
  m->island = w / m->island_size;
  m->island_rank = w % m->island_size;
  if (atoll_comm_split(world, m->island, m->island_rank, "island", &m->island_comm, err)) return -1;
  if (atoll_comm_split(world, m->island_rank, m->island, "cross-island", &m->cross, err)) {
    atoll_comm_free(m->island_comm);
    m->island_comm = NULL;
    return -1;
  }
  return 0;
}

void atoll_mesh_free(atoll_mesh *m) {
  atoll_comm_free(m->island_comm);
  atoll_comm_free(m->cross);
  m->island_comm = m->cross = NULL;
}
