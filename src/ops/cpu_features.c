/* CPUID leaves used: 0 (highest leaf), 1 (family/model; ECX bit 12 FMA, bit 27
 * OSXSAVE), 7.0 (EBX bit 5 AVX2, 16 AVX512F, 30 AVX512BW, 31 AVX512VL; EDX bit 22
 * AMX-BF16, 24 AMX-TILE), 7.1 (EAX bit 5 AVX512_BF16), 0x80000002-4 (brand string).
 * XCR0 (XGETBV 0): bits 1-2 SSE/AVX state, 5-7 opmask and ZMM state, 17-18 tile config
 * and tile data. Linux (5.16+) also wants a process to ask for tile data once
 * (arch_prctl ARCH_REQ_XCOMP_PERM, feature 18) before it runs an AMX instruction. */
#include "ops/cpu_features.h"

#include "core/fatal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HAVE_CPUID 1
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

static atoll_cpu_features features;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#ifdef HAVE_CPUID
static unsigned long long xgetbv0(void) {
  unsigned int lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((unsigned long long)hi << 32) | lo;
}

/* Asks Linux for AMX tile data; 1 when this process may use it. */
static int amx_permitted(void) {
#if defined(__linux__) && defined(__x86_64__)
  unsigned long bits = 0;
  if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bits) == 0 && (bits & (1UL << XFEATURE_XTILEDATA)))
    return 1;
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 0;
  return syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bits) == 0 && (bits & (1UL << XFEATURE_XTILEDATA));
#else
  return 1; /* no permission scheme: XCR0 decides */
#endif
}
#endif

static void detect(void) {
  atoll_cpu_features *f = &features;
  memset(f, 0, sizeof *f);
  snprintf(f->model, sizeof f->model, "unknown");
#ifdef HAVE_CPUID
  unsigned int a, b, c, d;
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    unsigned int brand[12];
    for (unsigned int i = 0; i < 3; i++)
      __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    char s[49];
    memcpy(s, brand, 48);
    s[48] = 0;
    const char *p = s;
    while (*p == ' ') p++; /* some vendors pad the front */
    snprintf(f->model, sizeof f->model, "%s", p);
  }
  if (!__get_cpuid(0, &a, &b, &c, &d)) return;
  unsigned int max_leaf = a;
  __get_cpuid(1, &a, &b, &c, &d);
  int fam = (a >> 8) & 0xf, mod = (a >> 4) & 0xf;
  if (fam == 0xf) fam += (a >> 20) & 0xff;
  if (fam == 0x6 || fam >= 0xf) mod += ((a >> 16) & 0xf) << 4;
  f->family = fam;
  f->model_id = mod;
  int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1;
  if (!osxsave || max_leaf < 7) return;
  unsigned long long xcr0 = xgetbv0();
  int os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
  int os_amx = (xcr0 & 0x60000) == 0x60000;
  __cpuid_count(7, 0, a, b, c, d);
  f->avx2 = os_avx && ((b >> 5) & 1) && fma;
  f->fma = os_avx && fma;
  f->avx512 = os_avx512 && ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
  int amx_tile = (d >> 24) & 1, amx_bf16 = (d >> 22) & 1;
  unsigned int sub_leaves = a;
  if (sub_leaves >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f->avx512_bf16 = f->avx512 && ((a >> 5) & 1);
  }
  f->amx_bf16 = os_amx && amx_tile && amx_bf16 && amx_permitted();
#endif
}

/* Clears the flags above ATOLL_MAX_ISA (cpu_features.h). */
static void apply_cap(atoll_cpu_features *f) {
  const char *v = getenv("ATOLL_MAX_ISA");
  if (!v || !*v) return;
  static const char *levels[] = {"avx2", "avx512", "avx512_bf16", "amx"};
  int level = -1;
  for (int i = 0; i < 4; i++)
    if (strcasecmp(v, levels[i]) == 0) level = i;
  if (level < 0) { /* said back on one line: printable characters only, at most 32 */
    char shown[40];
    size_t n = 0;
    for (; v[n] && n < 32; n++) shown[n] = v[n] >= 0x20 && v[n] < 0x7f ? v[n] : '?';
    shown[n] = 0;
    atoll_fatal("ATOLL_MAX_ISA=%s%s: unknown instruction set (use " ATOLL_MAX_ISA_VALUES ")", shown, v[n] ? "..." : "");
  }
  int had_bf16 = f->avx512_bf16 || f->amx_bf16;
  atoll_cpu_features before = *f;
  if (level < 1) f->avx512 = 0;
  if (level < 2) f->avx512_bf16 = 0;
  if (level < 3) f->amx_bf16 = 0;
  f->capped = before.avx512 != f->avx512 || before.avx512_bf16 != f->avx512_bf16 || before.amx_bf16 != f->amx_bf16;
  f->capped_bf16 = had_bf16 && !f->avx512_bf16 && !f->amx_bf16;
  snprintf(f->cap, sizeof f->cap, "%s", levels[level]);
}

static void detect_capped(void) {
  detect();
  apply_cap(&features);
}

static const atoll_cpu_features *override;

const atoll_cpu_features *atoll_cpu(void) {
  pthread_once(&once, detect_capped);
  return override ? override : &features;
}

void atoll_cpu_override(const atoll_cpu_features *f) { override = f; }

void atoll_cpu_feature_list(const atoll_cpu_features *f, char *buf, int n) {
  snprintf(buf, (size_t)n, "%s%s%s%s", f->avx2 ? "avx2" : "sse", f->avx512 ? " avx512" : "",
           f->avx512_bf16 ? " avx512_bf16" : "", f->amx_bf16 ? " amx_bf16" : "");
}
