/* What the processor can do, read once from CPUID (and XGETBV: what the operating
 * system saves on a context switch, without which an instruction set is unusable), and
 * the AMX tile permission Linux asks each process to request. x86-64 only; elsewhere
 * every flag is 0 and the model name is "unknown". */
#ifndef ATOLL_OPS_CPU_FEATURES_H
#define ATOLL_OPS_CPU_FEATURES_H

typedef struct {
  char model[64];  /* CPUID brand string, e.g. "AMD EPYC 9R14 96-Core Processor" */
  int family, model_id; /* display family and model */
  int avx2, fma;        /* AVX2 + FMA3 (usable: the OS saves the YMM state) */
  int avx512;           /* AVX-512 F, BW, VL (usable: the OS saves the ZMM state) */
  int avx512_bf16;      /* AVX512_BF16: vdpbf16ps, vcvtne2ps2bf16 */
  int amx_bf16;         /* AMX-TILE + AMX-BF16, usable: the OS saves tile data and this
                           process was granted it (Linux arch_prctl) */
  char cap[16];         /* ATOLL_MAX_ISA as applied ("" when unset): the flags above
                           are those of a processor with at most that instruction set */
  int capped;           /* 1 when the cap cleared a flag this processor has */
  int capped_bf16;      /* 1 when it cleared the last of AVX512_BF16 and AMX-BF16 */
} atoll_cpu_features;

/* ATOLL_MAX_ISA (any case) caps what atoll uses, as if the processor had no more than: "avx2"
 * (no AVX-512), "avx512" (no AVX512_BF16, no AMX), "avx512_bf16" (no AMX) or "amx"
 * (everything found). It steers every run-time choice (atoll's AMX attention, the bf16
 * refusal, the fp32 engine, oneDNN's kernels through dnnl_set_max_cpu_isa, OpenBLAS's
 * through OPENBLAS_CORETYPE), not the compiler's: atoll's own loops are built for the
 * build machine (ATOLL_NATIVE). It lets one machine run the code paths of smaller ones. */
#define ATOLL_MAX_ISA_VALUES "avx2, avx512, avx512_bf16 or amx"

/* The features of this machine, capped by ATOLL_MAX_ISA (computed once, thread-safe;
 * an unknown ATOLL_MAX_ISA ends the process with one line: atoll_fatal). */
const atoll_cpu_features *atoll_cpu(void);

/* Tests: replaces what atoll_cpu() returns (NULL: back to the detected features), to
 * check the choices made for processors this machine is not. */
void atoll_cpu_override(const atoll_cpu_features *f);

/* A short list of the instruction sets found, e.g. "avx2 avx512 avx512_bf16 amx_bf16". */
void atoll_cpu_feature_list(const atoll_cpu_features *f, char *buf, int n);

#endif
