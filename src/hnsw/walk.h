/* walk.h -- what every graph walk shares (search.c's k-NN search and
** greedy descent, api/radius.c's radius search): the visited set of a
** search context, binary heaps of packed (distance, slot) entries, and which
** slots a walk may enter and return.
**
** Invariants:
**   (1) A visited set is empty after visited_reset: the words a walk
**       touched are listed in c->touched and cleared, never the whole set.
**   (2) Heap entries are keel__pack(distance, slot): ordering the words
**       orders by distance, then slot, so walks are deterministic.
*/
#ifndef KEEL_WALK_H
#define KEEL_WALK_H

#include "hnsw/search.h"
#include "hnsw/filter.h"

/* Makes the visited set cover `limit` slots and empty. */
static inline int
visited_reset(keel_search_ctx *c, uint64_t limit)
{
    size_t words = (size_t)((limit + 63) / 64);
    if (words > c->visited_words) {
        size_t nw = KEEL_MAX(words, c->visited_words * 2);
        uint64_t *v = keel__calloc(nw, 8);
        uint32_t *t = keel__malloc((nw + 1) * sizeof *t);
        if (!v || !t) {
            keel__free(v);
            keel__free(t);
            return KEEL_ENOMEM;
        }
        keel__free(c->visited);
        keel__free(c->touched);
        c->visited = v;
        c->touched = t;
        c->visited_words = nw;
        c->ntouched = 0;
        return KEEL_OK;
    }
    for (size_t i = 0; i < c->ntouched; i++)
        c->visited[c->touched[i]] = 0;
    c->ntouched = 0;
    return KEEL_OK;
}

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
