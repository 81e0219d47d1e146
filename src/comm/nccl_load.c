/* NCCL, loaded when first needed (dlopen) instead of linked: libnccl maps about 218 MB
 * at start-up, which every run of the atoll executable paid (and which broke runs under
 * a virtual-memory limit) whether it used NCCL or not. Now only --dp-comm nccl and the
 * NCCL tests load it. The entry points atoll uses are looked up by name, with the types
 * of <nccl.h>. */
#define _GNU_SOURCE
#include "comm/nccl_load.h"

#include <dlfcn.h>
#include <stdio.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static atoll_nccl_api api;
static int loaded;

const atoll_nccl_api *atoll_nccl(void) { return &api; }

int atoll_nccl_load(atoll_err *err) {
  if (loaded) return 0;
  /* the soname of the headers' major version: LD_LIBRARY_PATH and ldconfig's cache, then
   * the directory the build found it in */
  static const char *names[] = {"libnccl.so." STR(NCCL_MAJOR),
#ifdef ATOLL_NCCL_DIR
                                ATOLL_NCCL_DIR "/libnccl.so." STR(NCCL_MAJOR)
#endif
  };
  void *lib = NULL;
  char first[512] = "";
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib && !first[0]) {
      const char *e = dlerror();
      snprintf(first, sizeof first, "%s", e ? e : names[i]);
    }
  }
  if (!lib) return atoll_fail(err, "nccl: NCCL %d not found: %s (set LD_LIBRARY_PATH to its directory)", NCCL_MAJOR, first);
  struct {
    const char *name;
    void **slot;
  } fns[] = {
      {"ncclGetUniqueId", (void **)&api.GetUniqueId},
      {"ncclCommInitRank", (void **)&api.CommInitRank},
#if ATOLL_NCCL_NONBLOCKING
      {"ncclCommInitRankConfig", (void **)&api.CommInitRankConfig},
#endif
      {"ncclCommGetAsyncError", (void **)&api.CommGetAsyncError},
      {"ncclGetErrorString", (void **)&api.GetErrorString},
      {"ncclGetLastError", (void **)&api.GetLastError},
      {"ncclCommAbort", (void **)&api.CommAbort},
      {"ncclCommFinalize", (void **)&api.CommFinalize},
      {"ncclCommDestroy", (void **)&api.CommDestroy},
      {"ncclAllReduce", (void **)&api.AllReduce},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
    if (!(*fns[i].slot = dlsym(lib, fns[i].name))) {
      dlclose(lib);
      return atoll_fail(err, "nccl: %s lacks %s", names[0], fns[i].name);
    }
  loaded = 1;
  return 0;
}
