/* warm.h -- reading a handle's index into memory in the background, and
** huge pages (warm.c).
*/
#ifndef KEEL_WARM_H
#define KEEL_WARM_H

#include "api/handle.h"

/* Starts the warm-up thread (asking while one runs does nothing); stops it,
** waiting for at most one step, before the store's mappings may go. */
int keel__warm_start(keel_index *idx);
void keel__warm_stop(keel_index *idx);
/* 1 when the handle's warm-up has read everything (tests). */
int keel__warm_done(keel_index *idx);
/* Whether a warm-up of this process runs on idx now (benchmarks and tests
** wait for it to end; takes the swap lock shared). */
int keel__warm_running(keel_index *idx);
void keel__huge_pages_advise(keel_index *idx);
void keel__huge_pages_advise_batch(keel_index *idx, uint64_t first, uint64_t n);

#endif /* KEEL_WARM_H */
