/* cuBLAS, loaded when first needed (dlopen) instead of linked: linking libcublas and
 * libcublasLt (600 MB) made every start of the atoll executable about 0.1 s slower on
 * the machine that built it (their load-time relocations and initialisers), whether or
 * not it used a GPU, and kept a CUDA build from starting at all where cuBLAS is not
 * installed. Now only --device cuda (atoll_cuda_open) and the first matrix product pay
 * for it. The few entry points the table uses are looked up by name; their types are
 * those of cublas_api.h. Not yet run on a GPU (the loading itself runs in
 * tests/gpu/test_cuda_ops.c's first product, on a device). */
#include "ops/cuda/common.cuh"

#include <dlfcn.h>
#include <stdio.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static atoll_cublas_api api;
static int loaded;

/* dlsym into a function pointer of the field's type */
template <typename F> static int find(void *lib, const char *name, F *out) {
  void *f = dlsym(lib, name);
  *out = reinterpret_cast<F>(f);
  return f ? 0 : -1;
}

extern "C" int atoll_cuda_cublas_load(char *why, size_t why_len) {
  if (loaded) return 0;
  /* the soname of the headers' major version: through LD_LIBRARY_PATH, ldconfig's
   * cache, then the toolkit this was built with */
  static const char *names[] = {"libcublas.so." STR(CUBLAS_VER_MAJOR),
#ifdef ATOLL_CUBLAS_DIR
                                ATOLL_CUBLAS_DIR "/libcublas.so." STR(CUBLAS_VER_MAJOR)
#endif
  };
  void *lib = NULL;
  const char *first_error = NULL;
  char first[512] = "";
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib && !first_error) {
      const char *e = dlerror();
      snprintf(first, sizeof first, "%s", e ? e : names[i]);
      first_error = first;
    }
  }
  if (!lib) {
    snprintf(why, why_len, "cuBLAS %d not found: %s (set LD_LIBRARY_PATH to its directory)", CUBLAS_VER_MAJOR,
             first);
    return -1;
  }
  const char *missing = NULL;
  if (find(lib, "cublasCreate_v2", &api.create)) missing = "cublasCreate_v2";
  else if (find(lib, "cublasSetStream_v2", &api.set_stream)) missing = "cublasSetStream_v2";
  else if (find(lib, "cublasSetMathMode", &api.set_math_mode)) missing = "cublasSetMathMode";
  else if (find(lib, "cublasGemmEx", &api.gemm_ex)) missing = "cublasGemmEx";
  else if (find(lib, "cublasGetStatusString", &api.status_string)) missing = "cublasGetStatusString";
  if (missing) {
    snprintf(why, why_len, "cuBLAS (%s) lacks %s", names[0], missing);
    dlclose(lib);
    return -1;
  }
  loaded = 1; /* kept for the life of the process, like the handle */
  return 0;
}

extern "C" const atoll_cublas_api *atoll_cuda_cublas_api(void) {
  char why[640];
  if (atoll_cuda_cublas_load(why, sizeof why)) atoll_fatal("cuda: %s", why);
  return &api;
}
