/* Pipeline message tags (issue 12): inside the tags every MPI allows, and a forward
 * tag never equal to a backward one, for every pass a step can have
 * (ATOLL_MAX_MICRO_BATCHES x ATOLL_MAX_CHUNKS). The comm layer once wrapped tags mod
 * 32767, which turned pass q's forward tag 2q into a backward tag at q = 16384. */
#include "check.h"
#include "comm/comm.h"
#include "parallel/pipeline.h"

int main(void) {
  int bad_range = 0, bad_direction = 0, reused = 0;
  static char seen[ATOLL_TAG_RANGE];
  const int window = (ATOLL_TAG_RANGE - 1) / 2; /* tags of this many passes in a row all differ */
  for (int pass = 0; pass < ATOLL_MAX_MICRO_BATCHES * ATOLL_MAX_CHUNKS; pass++) {
    for (int backward = 0; backward < 2; backward++) {
      int tag = atoll_pipeline_tag(pass, backward);
      if (tag < 0 || tag >= ATOLL_TAG_RANGE) {
        bad_range++;
        continue;
      }
      bad_direction += tag % 2 != backward;
      if (pass < window) reused += seen[tag]++ != 0;
    }
  }
  CHECK(bad_range == 0);
  CHECK(bad_direction == 0);
  CHECK(reused == 0);
  CHECK(atoll_pipeline_tag(16384, 0) != atoll_pipeline_tag(0, 1)); /* the old collision */
  CHECK_DONE();
}
