/* filter.h -- prepared allow-lists (keel_filter) and the accept policy a
** search's parameters give (the api layer's searches and radius.c).
*/
#ifndef KEEL_FILTER_H
#define KEEL_FILTER_H

#include "hnsw/walk.h"

/* Ranges of at most this many ids are kept as a set of ids (a search can
** scan them exactly); longer ones as an interval tested per id. */
#define KEEL_RANGE_AS_SET 65536u

struct keel_filter {
    keel_idset set;           /* the ids, unless interval */
    int interval;             /* 1: ids first, first + step, ... below end */
    uint64_t first, end, step;
    uint64_t count;           /* distinct ids */
};

/* Points acc at f (NULL: every id). Allocates nothing; f must outlive the
** search. */
void keel__filter_accept(const keel_filter *f, keel_accept *acc);

/* The accept policy of p (NULL: every id): a callback, p->allowed (built
** into *tmp, which the caller frees with keel__idset_free) or
** p->allowed_filter. KEEL_OK or KEEL_ENOMEM. */
int keel__params_accept(const keel_search_params *p, keel_accept *acc,
                        keel_idset *tmp);

/* Whether searches with acc may run on several threads: every policy but
** a caller's callback. */
int keel__accept_threadsafe(const keel_accept *acc);

/* Checks that p names at most one allow-list or filter; batch: whether
** query_filters is allowed. fn names the call in the message. */
int keel__params_check_filters(const keel_search_params *p, const char *fn,
                               int batch);

#endif /* KEEL_FILTER_H */
