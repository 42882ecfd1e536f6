/* api.h -- the api layer as its upper files and the tests see it: the
** handle (handle.h), warm-up (warm.h), readers following (follow.h),
** compaction (compact.h), and what api.c lends radius.c and api_batch.c.
**
** The files below api.c (handle, warm, follow, compact, backup) include
** only the headers they use, never this one.
*/
#ifndef KEEL_API_H
#define KEEL_API_H

#include "api/compact.h"
#include "api/follow.h"
#include "api/handle.h"
#include "api/warm.h"

/* The repeat in ids[0..n) whose second use comes first: 1 with *first (the
** id's first place) and *second set, 0 if every id is distinct, -1 out of
** memory (message recorded). O(n log n). */
int keel__first_repeat(const uint64_t *ids, size_t n, size_t *first,
                       size_t *second);

/* api.c, for radius.c: checks a query's components (KEEL_EINVAL with a
** message); the query as searched (normalized into buf for cosine). */
int keel__check_query(const keel_index *idx, const float *q);
const float *keel__prep_query(const keel_index *idx, const float *q,
                              float *buf);

/* Tests: what the page cache of a reader of a published index did;
** KEEL_EINVAL for any other handle. */
int keel__remote_counters(keel_index *idx, keel_cache_counters *out);

#endif /* KEEL_API_H */
