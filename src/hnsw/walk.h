/* walk.h -- what every graph walk shares (search.c's k-NN search and
** greedy descent, api/radius.c's radius search): the search context that
** holds a walk's scratch, its visited set, binary heaps of packed
** (distance, slot) entries, the id sets of allow-lists, and which slots a
** walk may enter and return. walk.c defines what this file declares.
**
** Invariants:
**   (1) A visited set is empty after keel__visited_reset: the words a walk
**       touched are listed in c->touched and cleared, never the whole set.
**   (2) Heap entries are keel__pack(distance, slot): ordering the words
**       orders by distance, then slot, so walks are deterministic.
*/
#ifndef KEEL_WALK_H
#define KEEL_WALK_H

#include "store/pagein.h"
#include "hnsw/graph.h"
#include "hnsw/codes.h"

/* bwant's room: lists of M0 + 1 ranges (a vector, record and header each
** for every expansion of a cold walk's step, batch_reads.h keel__br_beam;
** a vector and record each for every queued candidate a remote walk looks
** ahead to, keel__br_ahead). */
#define KEEL_WANT_LISTS (3u * KEEL_BR_BEAM_MAX + 2u * KEEL_BR_AHEAD_MAX)

/* The most nearest entries a k-NN walk's settling rule watches. */
#define KEEL_WATCH_MAX 64

typedef struct keel_search_ctx {
    uint64_t *visited;        /* bitset over slots */
    size_t visited_words;
    uint32_t *touched;        /* words of visited set since the last clear */
    size_t ntouched;
    uint64_t *cand;           /* min-heap of packed entries */
    size_t ncand, cand_cap;
    uint64_t *res;            /* max-heap of packed entries */
    size_t nres, res_cap;
    uint32_t *gather;         /* neighbours to measure: M0 + 1 for each
                                 expansion of a step, KEEL_BR_BEAM_MAX */
    const void **gvec;        /* their vectors */
    float *gdist;             /* their distances (grouped kernels) */
    float *qbuf;              /* the query as searched (normalized) */
    float *vbuf;              /* a stored vector widened to f32 */
    /* Traversal codes: a k-NN search of a file with codes walks on them
     * (coded set for the call), then measures its results exactly. */
    int coded;
    /* A k-NN walk's settling rule (search_knn sets it for one level-0
     * walk; 0 otherwise: builds and radius walks): the walk also stops once
     * its `watch` nearest accepted nodes (at most KEEL_WATCH_MAX) have
     * stayed the same over `quiet_max` expansions of accepted nodes. */
    uint32_t quiet_max, watch;
    keel_code_query cq;       /* cq.qu: KEEL_CODE_QUERY_BYTES(dim) */
    uint64_t ndist;           /* distances computed by the last walk */
    keel_link_scratch link;   /* for builds */
    uint32_t *sel;            /* selected neighbours, M0 + 1 */
    uint32_t dim, M0;
    /* Batch reads (batch_reads.h): the record of the file this search
     * reads, NULL while the module is off or the file known resident. */
    keel_br_record *br;
    keel_br_cache brc;
    keel_br_range *bwant;     /* KEEL_WANT_LISTS (M0 + 1) ranges: a vector,
                               * record and slot header per neighbour */
    keel_br_scratch bscratch;
    uint32_t beam;            /* expansions per step of a cold level-0
                               * walk (keel__br_beam_of), set for each
                               * search, 0 after */
    int step_cold;            /* the last bring of pages named some not
                               * known in memory (a local file), or
                               * sent GETs (a published index) */
    uint32_t waits;           /* brings of the last k-NN search that had
                               * to wait for pages (step_cold): its round
                               * trips one after another, for measurements */
    uint32_t ahead;           /* a remote level-0 walk's look-ahead
                               * (keel__br_remote_ahead; 0 for a local
                               * file), set for each search, 0 after */
    /* The call this search works for, set by the api layer for one call
     * (NULL: nothing can cancel it): polled where the search brings pages
     * in, which is where a search of a published index waits. */
    keel_stop *stop;
    int br_rc;                /* why bringing pages in failed (KEEL_EIO,
                                 KEEL_ECANCELED): keel__search_knn's code */
    struct keel_search_ctx *next; /* pool */
} keel_search_ctx;

keel_search_ctx *keel__search_ctx_new(const keel_graph *gr);
void keel__search_ctx_free(keel_search_ctx *ctx);

/* A set of u64 ids (allow-lists). */
typedef struct keel_idset {
    uint64_t *keys;           /* UINT64_MAX = empty */
    uint64_t mask;
    size_t n;                 /* distinct ids */
} keel_idset;
int keel__idset_build(keel_idset *s, const uint64_t *ids, size_t n);
void keel__idset_free(keel_idset *s);
int keel__idset_has(const keel_idset *s, uint64_t id);

/* Which nodes a walk may return. */
typedef struct keel_accept {
    int all;                  /* 1: every node reached (builds) */
    int (*filter)(uint64_t id, void *arg);
    void *filter_arg;
    const keel_idset *allowed;
} keel_accept;

/* Makes the visited set cover `limit` slots and empty (invariant 1);
** KEEL_OK or KEEL_ENOMEM. */
int keel__visited_reset(keel_search_ctx *c, uint64_t limit);

/* Whether s is marked visited. */
static inline int
visited(const keel_search_ctx *c, uint32_t s)
{
    return c->visited[s >> 6] >> (s & 63) & 1;
}

/* Marks s visited; returns 1 if it was already. Branch-free bookkeeping of
** the touched words: the word's index is written always, counted only when
** the word was empty. */
static inline int
visit(keel_search_ctx *c, uint32_t s)
{
    uint64_t *w = &c->visited[s >> 6];
    uint64_t bit = (uint64_t)1 << (s & 63);
    if (*w & bit)
        return 1;
    c->touched[c->ntouched] = s >> 6;
    c->ntouched += *w == 0;
    *w |= bit;
    return 0;
}

static inline int
heap_grow(uint64_t **h, size_t *cap, size_t need)
{
    if (need <= *cap)
        return KEEL_OK;
    size_t nc = KEEL_MAX(need, *cap * 2 + 64);
    uint64_t *p = keel__realloc(*h, nc * sizeof *p);
    if (!p)
        return KEEL_ENOMEM;
    *h = p;
    *cap = nc;
    return KEEL_OK;
}

/* Min-heap (candidates). */
static inline void
min_push(uint64_t *h, size_t *n, uint64_t x)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= x)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static inline uint64_t
min_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], x = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m)
            break;
        size_t r = l + 1, s = (r < m && h[r] < h[l]) ? r : l;
        if (h[s] >= x)
            break;
        h[i] = h[s];
        i = s;
    }
    if (m)
        h[i] = x;
    return top;
}

/* Max-heap (results). */
static inline void
max_push(uint64_t *h, size_t *n, uint64_t x)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] >= x)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

/* Replaces the largest entry with x (x < h[0]). */
static inline void
max_replace_top(uint64_t *h, size_t n, uint64_t x)
{
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n)
            break;
        size_t r = l + 1, s = (r < n && h[r] > h[l]) ? r : l;
        if (h[s] <= x)
            break;
        h[i] = h[s];
        i = s;
    }
    h[i] = x;
}

/* --- which slots a walk enters and returns -------------------------------- */

static inline int
skip_slot(const keel_view *v, uint32_t s)
{
    if (s >= v->limit)
        return 1;
    if (v->linked && s >= v->linked_base &&
        !KEEL_LOAD_ACQUIRE(&v->linked[s - v->linked_base]))
        return 1;
    return 0;
}

static inline int
accepts(const keel_view *v, const keel_accept *acc, uint32_t s)
{
    if (acc->all)
        return 1;
    /* Without deletes, every slot below the count is present: no need to
     * read its slot header (a cache miss of its own). */
    if (v->deleted == 0 ? s >= v->count : !keel__store_present(v, s))
        return 0;
    if (acc->filter)
        return acc->filter(keel__store_id(v->st, s), acc->filter_arg) != 0;
    if (acc->allowed)
        return keel__idset_has(acc->allowed, keel__store_id(v->st, s));
    return 1;
}

#endif /* KEEL_WALK_H */
