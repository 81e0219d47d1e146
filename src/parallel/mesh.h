/* The mesh of ranks: the one place that decides which ranks share which axis.
 *
 * Four axes, from outermost to innermost:
 *   islands (DiLoCo)  contiguous blocks of ranks (on a real cluster, blocks of nodes)
 *   pipeline (pp)     pp_stages: groups of the model's layers
 *   data (dp)         replicas of one pp_stage's part (ZeRO shards it over them)
 *   tensor (tp)       innermost, so that on a real cluster it stays inside a node
 *
 *   world rank = island * island_size + (pp_rank * dp + dp_rank) * tp + tp_rank,
 *   island_size = pp * dp * tp.
 *
 * Every communicator a strategy needs is made here: the island, the replicas of this
 * rank's part (data parallel), the tensor-parallel group, the pipeline (point to point
 * and barriers), the tie of the first and last pp_stage (both hold wte, the embedding and the LM
 * head), and the cross-island group (the same position in every island), so that
 * under sharding each rank exchanges only its own shard of the outer state. */
#ifndef ATOLL_MESH_H
#define ATOLL_MESH_H

#include "comm/comm.h"

typedef struct {
  atoll_comm *world;
  int islands, island, island_size, island_rank; /* island: this rank's island index */
  int tp, pp, dp;                 /* axis sizes inside an island */
  int tp_rank, pp_rank, dp_rank;
  atoll_comm *island_comm; /* the ranks of this island ("island") */
  atoll_comm *dp_comm;     /* same island, pp_stage and tp rank ("data") */
  atoll_comm *tp_comm;     /* same island, pp_stage and dp rank ("tensor") */
  atoll_comm *pp_comm;     /* same island, dp and tp rank, ranked by pp_stage ("pipeline"):
                              point-to-point messages with explicit tags, and barriers */
  atoll_comm *tie_comm;    /* pp_stages 0 and pp-1 of one pipeline ("embedding-tie");
                              NULL on middle pp_stages and when pp = 1 */
  atoll_comm *cross;       /* island_rank of every island ("cross-island") */
} atoll_mesh;

/* islands x tp x pp must divide the world size; dp is what is left. */
int atoll_mesh_create(atoll_mesh *m, atoll_comm *world, int islands, int tp, int pp, atoll_err *err);
void atoll_mesh_free(atoll_mesh *m);
/* Position in the mesh of any world rank (the inverse of atoll_mesh_world_rank). */
void atoll_mesh_coords(const atoll_mesh *m, int world_rank, int *island, int *pp_rank, int *dp_rank, int *tp_rank);
/* World rank of a position in the mesh. */
int atoll_mesh_world_rank(const atoll_mesh *m, int island, int pp_rank, int dp_rank, int tp_rank);

#endif
