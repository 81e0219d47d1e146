/* The mesh of ranks: the one place that decides which ranks share which axis.
 *
 * Today two axes: islands (DiLoCo) outermost, data parallel inside an island.
 * World rank w = island * island_size + island_rank: islands are contiguous blocks
 * (on a real cluster, a block of nodes), and rank i of every island shares the
 * cross-island communicator, so that under sharding each rank exchanges only its own
 * shard of the outer state. */
#ifndef ATOLL_MESH_H
#define ATOLL_MESH_H

#include "comm/comm.h"

typedef struct {
  atoll_comm *world;
  atoll_comm *island_comm; /* the ranks of this island ("island") */
  atoll_comm *cross;  /* rank island_rank of every island ("cross-island") */
  int islands, island, island_size, island_rank; /* island: this rank's island index */
} atoll_mesh;

/* islands must divide the world size. */
int atoll_mesh_create(atoll_mesh *m, atoll_comm *world, int islands, atoll_err *err);
void atoll_mesh_free(atoll_mesh *m);

#endif
