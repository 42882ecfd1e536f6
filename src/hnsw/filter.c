/* filter.c -- prepared allow-lists: keel_filter_new, keel_filter_new_range,
** and the accept policy a search's parameters give.
**
** A keel_filter is made once and read by any number of searches at once:
** nothing in it changes after it is made. It holds either a set of ids (the
** hash set searches build from keel_search_params.allowed on every call)
** or, for a long range, the interval itself, tested per id: a range of a
** billion ids costs a few words. Short ranges become sets, so a search can
** scan their members exactly when few of them are in the index.
**
** Sits beside api.c in the api layer; calls search.c's id sets only.
*/
#include "hnsw/filter.h"

#include <stdlib.h>

#define NEED(cond, ...)                                                     \
    do {                                                                    \
        if (!(cond))                                                        \
            return keel__fail(KEEL_EINVAL, __VA_ARGS__);                    \
    } while (0)

int
keel_filter_new(const uint64_t *ids, size_t n, keel_filter **out)
{
    keel__clear_error();
    NEED(out, "keel_filter_new was given out = NULL\nhelp: pass the address "
         "of a keel_filter * to receive the allow-list");
    *out = NULL;
    NEED(ids || n == 0, "keel_filter_new was given ids = NULL with n = %zu\n"
         "help: pass n ids, or n = 0 for an allow-list that matches nothing",
         n);
    NEED(n <= SIZE_MAX / 32, "keel_filter_new was given n = %zu ids, more "
         "than memory holds\nhelp: pass the number of ids in the array", n);
    keel_filter *f = keel__calloc(1, sizeof *f);
    if (!f)
        return KEEL_ENOMEM;
    if (keel__idset_build(&f->set, ids, n)) {
        keel__free(f);
        return keel__fail(KEEL_ENOMEM, "out of memory making an allow-list "
                          "of %zu ids\nhelp: free memory, or pass fewer ids",
                          n);
    }
    f->count = f->set.n;
    *out = f;
    return KEEL_OK;
}

int
keel_filter_new_range(uint64_t first, uint64_t end, uint64_t step,
                      keel_filter **out)
{
    keel__clear_error();
    NEED(out, "keel_filter_new_range was given out = NULL\nhelp: pass the "
         "address of a keel_filter * to receive the allow-list");
    *out = NULL;
    NEED(step >= 1, "step is 0, but has to be at least 1\nhelp: pass 1 for "
         "every id from first to end - 1");
    uint64_t count = first < end ? (end - first - 1) / step + 1 : 0;
    keel_filter *f = keel__calloc(1, sizeof *f);
    if (!f)
        return KEEL_ENOMEM;
    f->first = first;
    f->end = end;
    f->step = step;
    f->count = count;
    if (count <= KEEL_RANGE_AS_SET) {
        uint64_t *ids = keel__malloc((size_t)(count ? count : 1) * 8);
        if (!ids) {
            keel__free(f);
            return KEEL_ENOMEM;
        }
        for (uint64_t i = 0; i < count; i++)
            ids[i] = first + i * step;
        int rc = keel__idset_build(&f->set, ids, (size_t)count);
        keel__free(ids);
        if (rc) {
            keel__free(f);
            return keel__fail(KEEL_ENOMEM, "out of memory making an "
                              "allow-list\nhelp: free memory");
        }
    } else {
        f->interval = 1; /* ids stay below end <= UINT64_MAX: all valid */
    }
    *out = f;
    return KEEL_OK;
}

uint64_t
keel_filter_count(const keel_filter *f)
{
    return f ? f->count : 0;
}

int
keel_filter_free(keel_filter *f)
{
    if (!f)
        return KEEL_OK;
    keel__idset_free(&f->set);
    keel__free(f);
    return KEEL_OK;
}

/* The test of an interval filter, as a search's callback. */
static int
interval_has(uint64_t id, void *arg)
{
    const keel_filter *f = arg;
    if (id < f->first || id >= f->end)
        return 0;
    return f->step == 1 || (id - f->first) % f->step == 0;
}

void
keel__filter_accept(const keel_filter *f, keel_accept *acc)
{
    memset(acc, 0, sizeof *acc);
    if (!f)
        return;
    if (!f->interval) {
        acc->allowed = &f->set;
        return;
    }
    if (f->first == 0 && f->step == 1 && f->end >= UINT64_MAX)
        return; /* every id there can be */
    acc->filter = interval_has;
    acc->filter_arg = (void *)(uintptr_t)f;
}

int
keel__accept_threadsafe(const keel_accept *acc)
{
    return !acc->filter || acc->filter == interval_has;
}

int
keel__params_accept(const keel_search_params *p, keel_accept *acc,
                    keel_idset *tmp)
{
    memset(acc, 0, sizeof *acc);
    memset(tmp, 0, sizeof *tmp);
    if (!p)
        return KEEL_OK;
    if (p->filter) {
        acc->filter = p->filter;
        acc->filter_arg = p->filter_arg;
    } else if (p->allowed) {
        if (keel__idset_build(tmp, p->allowed, p->n_allowed))
            return KEEL_ENOMEM;
        acc->allowed = tmp;
    } else if (p->allowed_filter) {
        keel__filter_accept(p->allowed_filter, acc);
    }
    return KEEL_OK;
}

int
keel__params_check_filters(const keel_search_params *p, const char *fn,
                           int batch)
{
    if (!p)
        return KEEL_OK;
    int given = (p->allowed != NULL) + (p->filter != NULL) +
                (p->allowed_filter != NULL) + (p->query_filters != NULL);
    NEED(given <= 1, "%s was given %d of allowed, allowed_filter, "
         "query_filters and filter\nhelp: pass one of them; check an "
         "allow-list inside the callback if you need both", fn, given);
    NEED(batch || !p->query_filters, "%s was given query_filters, which "
         "belong to keel_search_batch (one per query)\nhelp: pass the "
         "query's allow-list as allowed_filter", fn);
    return KEEL_OK;
}
