#ifndef ATOLL_CLI_OPENBLAS_CORE_H
#define ATOLL_CLI_OPENBLAS_CORE_H

/* When OpenBLAS loaded its generic kernels on a processor with AVX2 or AVX-512 and
 * OPENBLAS_CORETYPE is unset: sets it to the fitting kernel family and re-executes the
 * program with the same arguments (returns only when nothing was done or exec failed). */
void atoll_cli_fix_openblas_core(char **argv);
/* After such a re-exec: the generic core OpenBLAS had picked; NULL otherwise. */
const char *atoll_cli_openblas_found(void);
/* Says so on stderr (rank 0 of the launcher only) when the re-exec happened. */
void atoll_cli_report_openblas_core(void);

#endif
