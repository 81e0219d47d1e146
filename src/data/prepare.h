/* atoll prepare with a tokenizer (src/data/prepare.c); atoll_prepare (atoll/atoll.h) is
 * this with the byte tokenizer. */
#ifndef ATOLL_DATA_PREPARE_H
#define ATOLL_DATA_PREPARE_H

#include "atoll/atoll.h"

/* tokenizer: a tokenizer.json path, or NULL for bytes. The directory then holds a copy
 * of it (tokenizer.json) and the manifest its kind and hash. */
int atoll_prepare_ex(const char *const *files, int nfiles, const char *outdir, double val_fraction,
                     const char *tokenizer, atoll_err *err);

#endif
