#include "core/mem.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_FROM ((size_t)4 << 20) /* two 2 MiB pages */

/* A mapping starts with one header page holding its total length; the caller's
 * pointer is the page after it, so it stays page-aligned. */
void *atoll_mem_alloc(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = page + ((bytes + page - 1) / page) * page;
  void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return NULL;
  /* Large buffers (activations, weights, optimizer state) ask for transparent huge pages
   * (where the kernel gives them only on request, as Debian's does), meant to cut TLB
   * misses in the passes that read a head's rows at a stride of several kilobytes (not
   * measured as such). A bf16 step at bench/README.md's shape took 1.6% less time.
   * Advice only: nothing fails without it. */
  if (len >= HUGE_FROM) madvise(base, len, MADV_HUGEPAGE);
  *(size_t *)base = len;
  return (char *)base + page;
}

void atoll_mem_free(void *p) {
  if (!p) return;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *base = (char *)p - page;
  munmap(base, *(size_t *)base);
}

void atoll_mem_release(float *buf, size_t begin, size_t end) {
  if (end <= begin) return;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)(buf + begin), hi = (uintptr_t)(buf + end);
  uintptr_t plo = (lo + page - 1) & ~(uintptr_t)(page - 1), phi = hi & ~(uintptr_t)(page - 1);
  if (plo >= phi) {
    memset((void *)lo, 0, hi - lo);
    return;
  }
  memset((void *)lo, 0, plo - lo);
  /* no huge pages here any more: the kernel's background merger would fill a handed-back
   * 2 MiB block again around the few pages still resident in it */
  madvise((void *)plo, phi - plo, MADV_NOHUGEPAGE);
  madvise((void *)plo, phi - plo, MADV_DONTNEED);
  memset((void *)phi, 0, hi - phi);
}
