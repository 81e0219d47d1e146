/* OpenBLAS picks its kernels when the library is loaded, from CPUID; on processors it
 * does not recognise (a virtual machine's renamed Xeon, a CPU newer than the library)
 * it falls back to a generic SSE3 kernel ("Prescott") 4-7x slower than its AVX-512 one.
 * It reads OPENBLAS_CORETYPE only at load time, so setting it later in the process does
 * nothing: atoll sets it and re-executes itself, once, before anything else runs (before
 * MPI starts: the process keeps its pid, so launchers do not notice). It does the same
 * when ATOLL_MAX_ISA (ops/cpu_features.h) is below the AVX-512 kernels OpenBLAS found:
 * Haswell's then. A value the user set is left alone. */
#include "cli/openblas_core.h"

#include "ops/gemm_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void atoll_cli_fix_openblas_core(char **argv) {
  if (getenv("OPENBLAS_CORETYPE")) return;
  const char *found = atoll_openblas_core();
  const char *pretend = getenv("ATOLL_TEST_OPENBLAS_CORE"); /* test hook: act as if OpenBLAS found this core */
  const char *better = atoll_openblas_better_core();
  if (pretend && *pretend) {
    found = pretend;
    better = atoll_openblas_better_core_for(pretend);
  }
  if (!better) return;
  if (setenv("OPENBLAS_CORETYPE", better, 1) || setenv("ATOLL_OPENBLAS_FOUND", found, 1)) return;
  execv("/proc/self/exe", argv);
  /* no /proc or exec refused: run on, the header's warning tells the user */
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("ATOLL_OPENBLAS_FOUND");
}

const char *atoll_cli_openblas_found(void) { return getenv("ATOLL_OPENBLAS_FOUND"); }

/* The launcher's rank variable (Open MPI, MPICH/PMI, Slurm); 0 without one. */
static int launcher_rank(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (int i = 0; i < 3; i++) {
    const char *v = getenv(vars[i]);
    if (v) return atoi(v);
  }
  return 0;
}

void atoll_cli_report_openblas_core(void) {
  const char *found = atoll_cli_openblas_found();
  /* under ATOLL_MAX_ISA the switch was asked for, and the run's header names the kernels */
  if (!found || launcher_rank() != 0 || !atoll_openblas_generic(found)) return;
  fprintf(stderr, "atoll: OpenBLAS picked its generic '%s' kernels on this CPU; running with OPENBLAS_CORETYPE=%s (%s kernels)\n",
          found, getenv("OPENBLAS_CORETYPE"), atoll_openblas_core());
}
