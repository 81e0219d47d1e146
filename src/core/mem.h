/* Large flat buffers whose memory can be handed back page by page.
 *
 * Sharded data parallel keeps full-size parameter and gradient buffers at the same
 * offsets on every rank (the model code never changes), but only the pages a rank is
 * using are resident: atoll_mem_release zeroes a range and returns its whole pages
 * to the kernel (madvise MADV_DONTNEED on private anonymous memory reads back as
 * zeros), so peak RSS follows the ZeRO formula instead of the full model. Buffers of
 * 4 MiB and more ask for transparent huge pages (mem.c says why). */
#ifndef ATOLL_MEM_H
#define ATOLL_MEM_H

#include <stddef.h>

/* Page-aligned, zeroed; NULL when out of memory. */
void *atoll_mem_alloc(size_t bytes);
void atoll_mem_free(void *p);
/* Zeroes buf[begin, end) (in floats); whole pages in the range go back to the kernel,
 * partial pages at its edges are zeroed in place. */
void atoll_mem_release(float *buf, size_t begin, size_t end);

#endif
