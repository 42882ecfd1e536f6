/* search.c -- the HNSW walk and k-NN queries.
**
** Hot path. Heaps hold packed u64 entries (distance key over slot), so every
** comparison is one integer compare and ties fall to the lower slot. Searches
** compare internal distances (squared for L2) and convert only the results.
** Neighbour vectors are prefetched as a group before their distances are
** computed, and a queued candidate's level-0 record is prefetched whole
** when queued (all of its lines: +7% QPS on GloVe-100, neutral at 784-d).
**
** Filtered searches (keel_accept with a filter or an allow-list) walk the
** graph with a budget of distance computations sized from the filter's
** estimated selectivity; a walk that runs out of budget, or finds fewer than
** k matches, gives way to an exact scan of the matches, so a very selective
** filter costs about what scanning its matches costs and still returns the
** true nearest.
**
** Cold files (batch_reads.h): while ctx->br is set, each expansion first
** hands the pages of the neighbour vectors it is about to measure to the
** batch-read module, which brings those not known resident in together
** instead of one page fault after another; the level-0 records of the
** candidates it queues follow in a second batch, read while the walk goes
** on. A search of a file known resident has ctx->br NULL and never calls
** the module.
**
** A cold level-0 walk keeps several expansions in flight (its beam,
** batch_reads.h keel__br_beam, DiskANN's beam width): once a step has had
** to wait for pages, the next one pops the nearest `beam` candidates the
** walk would expand and brings in what all of them measure with one
** batch, so a walk waits for about a quarter to a half as many batches in
** a row. A step that finds all it names in memory makes the next expand
** one, so a walk whose pages are all in answers exactly as a walk of a
** file in memory; a cold one may answer otherwise, with recall not lower
** (test_batch_reads, test_remote).
*/
#include "hnsw/search.h"

#include <math.h>

/* 1: also bring in the level-0 records of the candidates an expansion
** queues (read ahead of the walk); -D for measurements. */
#ifndef KEEL_BR_AHEAD
#define KEEL_BR_AHEAD 1
#endif


static void
sort_u64(uint64_t *a, size_t n)
{
    /* Shell sort with Ciura's gaps: results are at most a few thousand. */
    static const size_t gaps[] = {701, 301, 132, 57, 23, 10, 4, 1};
    for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
        size_t gap = gaps[g];
        for (size_t i = gap; i < n; i++) {
            uint64_t x = a[i];
            size_t j = i;
            for (; j >= gap && a[j - gap] > x; j -= gap)
                a[j] = a[j - gap];
            a[j] = x;
        }
    }
}

size_t
keel__search_take(keel_search_ctx *c, uint64_t *out)
{
    size_t n = c->nres;
    if (n)
        memcpy(out, c->res, n * sizeof *out);
    sort_u64(out, n);
    c->nres = 0;
    return n;
}

/* --- the walk ---------------------------------------------------------- */

/* The first `lines` cache lines at p, into L1 or L2. */
static inline void
prefetch_lines(const void *p, uint32_t lines, int l1)
{
    const char *c = p;
    if (l1)
        for (uint32_t i = 0; i < lines; i++)
            __builtin_prefetch(c + 64 * i, 0, 3);
    else
        for (uint32_t i = 0; i < lines; i++)
            __builtin_prefetch(c + 64 * i, 0, 2);
}

/* The first lines of a vector (all of a short one): enough for the kernel to
** start while the rest streams in. */
static inline void
prefetch_vec(const keel_graph *gr, const void *p, int l1)
{
    prefetch_lines(p, KEEL_MIN((gr->st->g.vec_bytes + 63) / 64, 8u), l1);
}

/* Every line of slot s's level-0 record (136 bytes at M = 16: up to three
** lines, as records are not line-aligned); prefetching only the first left
** the list's tail a cache miss when the candidate was expanded. */
/* A code row whole (two lines at 100 dimensions, thirteen at 784): rows
** are line-aligned and far shorter than vectors, so all of it is asked for
** at once. */
static inline void
prefetch_code(const keel_graph *gr, const void *p, int l1)
{
    prefetch_lines(p, gr->st->g.code_bytes / 64, l1);
}

static inline void
prefetch_rec(const keel_store *st, uint32_t s)
{
    const char *r = (const char *)keel__store_rec(st, s);
    const char *end = r + st->g.rec_bytes - 1;
    uintptr_t line = (uintptr_t)r & ~(uintptr_t)63;
    for (; line <= (uintptr_t)end; line += 64)
        __builtin_prefetch((const void *)line, 0, 2);
}

static inline void
prefetch_rec_l1(const keel_store *st, uint32_t s)
{
    const char *r = (const char *)keel__store_rec(st, s);
    const char *end = r + st->g.rec_bytes - 1;
    uintptr_t line = (uintptr_t)r & ~(uintptr_t)63;
    for (; line <= (uintptr_t)end; line += 64)
        __builtin_prefetch((const void *)line, 0, 3);
}

/* Reads one byte of each of the first `lines` cache lines at p: loads, not
** hints. Measured on an AMD EPYC of family 19h (AVX2) in a VM, the
** prefetch hints above left a coded walk waiting on each row's lines in
** turn (55% of its samples on a row's first load), while loads the
** processor cannot drop overlap out of order: touching a group's rows before
** measuring them ran GloVe-100 cosine 2.1-2.6x and Fashion-MNIST
** 1.04-1.26x faster at equal ef (1.22-1.45x with the re-measure's vectors
** touched as well; doc/search_tuning.md, "Loads, not hints"). Only bytes
** the caller reads next: the range is the caller's to have brought in
** (cold walks touch after their batch read; a cold re-measure keeps hints,
** keel__search_measure). */
static inline void
touch_lines(const void *p, uint32_t lines)
{
    const volatile uint8_t *b = p;
    uint32_t sink = 0;
    for (uint32_t i = 0; i < lines; i++)
        sink += b[64 * i];
    __asm__ volatile("" : : "r"(sink));
}

/* --- cold pages (batch_reads.h) ------------------------------------------ */

/* What of a slot to bring in (BR_CODE: its code row). */
enum { BR_VEC, BR_REC, BR_HDR, BR_CODE };

/* Adds slot s's vector, level-0 record or slot header (id) to the ranges
** to bring in, unless known resident. */
static size_t
br_want(const keel_store *st, keel_search_ctx *c, size_t nw, uint32_t s,
        int what)
{
    uint64_t i;
    const keel_segment *sg = keel__store_seg(st, s, &i);
    const uint8_t *base = KEEL_LOAD_RELAXED(&sg->base);
    if (!base)
        return nw;
    const uint8_t *p = what == BR_REC ? (const uint8_t *)keel__store_rec(st, s)
                     : what == BR_VEC ? (const uint8_t *)keel__store_vec(st, s)
                     : what == BR_CODE ? keel__store_code(st, s)
                     : KEEL_LOAD_RELAXED(&sg->hdrs) + i * 16;
    uint64_t n = what == BR_REC ? st->g.rec_bytes
               : what == BR_VEC ? st->g.vec_bytes
               : what == BR_CODE ? st->g.code_bytes : 16;
    return keel__br_want(c->br, c->bwant, nw, p, n, base, sg->off, sg->bytes);
}

/* A bring's code as keel__search_layer returns it: 0, -1 out of memory,
** -2 with the code kept in c->br_rc. */
static int
br_result(keel_search_ctx *c, int rc)
{
    if (rc == KEEL_OK)
        return 0;
    if (rc == KEEL_ENOMEM)
        return -1;
    c->br_rc = rc;
    return -2;
}

/* Whether the call this search works for was cancelled (c->br_rc set). */
static int
br_stopped(keel_search_ctx *c)
{
    if (!keel__stop_poll(c->stop))
        return 0;
    c->br_rc = KEEL_ECANCELED;
    return 1;
}

/* Brings in c->bwant[0..nw) (KEEL_OK or a bring's code), noting in
** c->step_cold whether it had to wait for pages (a local file: ranges not
** known in memory were named; a published index: GETs were sent) and
** counting such brings in c->waits. */
static int
br_bring(const keel_store *st, keel_search_ctx *c, size_t nw)
{
    c->step_cold = 0;
    if (!nw)
        return KEEL_OK;
    uint64_t f0 = st->remote ? keel__br_fetches(c->br) : 0;
    int rc = keel__br_local(c->br, c->bwant, nw, &c->bscratch, c->stop);
    c->step_cold = !st->remote || keel__br_fetches(c->br) != f0;
    c->waits += (uint32_t)c->step_cold;
    return rc;
}

/* Brings in the vectors of the ng gathered neighbours (their code rows
** while the walk is coded), their slot headers too when hdrs (a filter
** reads their ids) and their level-0 records with recs, and with ahead the
** vectors and records of the unvisited neighbours of the first `ahead`
** entries of the candidate heap (a level-0 walk of a published index,
** whose queued candidates' records came with their vectors; the heap's
** first entries are its nearest, or close to them); 0, or -1/-2 as
** keel__search_layer. Each expansion of a cold walk passes here: the place
** to see a cancel between fetches. */
KEEL_COLD static int
br_vectors(const keel_store *st, const keel_view *v, keel_search_ctx *c,
           uint32_t ng, int hdrs, int recs, unsigned ahead)
{
    if (br_stopped(c))
        return -2;
    size_t nw = 0;
    int vec = c->coded ? BR_CODE : BR_VEC;
    for (uint32_t j = 0; j < ng; j++) {
        nw = br_want(st, c, nw, c->gather[j], vec);
        if (recs)
            nw = br_want(st, c, nw, c->gather[j], BR_REC);
    }
    for (uint32_t j = 0; hdrs && j < ng; j++)
        nw = br_want(st, c, nw, c->gather[j], BR_HDR);
    if (nw && ahead) {
        ahead = KEEL_MIN(ahead, (unsigned)c->ncand);
        for (unsigned a = 0; a < ahead; a++) {
            uint32_t len;
            const uint32_t *list = keel__store_list(
                st, keel__pack_slot(c->cand[a]), 0, &len);
            for (uint32_t j = 0; list && j < len; j++) {
                uint32_t s = KEEL_LOAD_RELAXED(&list[j]);
                if (s == KEEL_EMPTY || skip_slot(v, s) || visited(c, s))
                    continue;
                nw = br_want(st, c, nw, s, vec);
                nw = br_want(st, c, nw, s, BR_REC);
            }
        }
    }
    return br_result(c, br_bring(st, c, nw));
}

/* Brings in what of slot s the walk reads next (`what`: bits 1 << BR_*)
** before it reads it. On a published index a page nobody announced is
** fetched by a fault, which nothing can interrupt: announcing it instead
** lets a cancel stop the wait, so between two polls a walk meets at most
** one fault (an upper layer's list). 0 or -1/-2. */
KEEL_COLD static int
br_slot(const keel_store *st, keel_search_ctx *c, uint32_t s, unsigned what)
{
    if (br_stopped(c))
        return -2;
    size_t nw = 0;
    if (c->coded && (what & 1u << BR_VEC))
        what = (what & ~(1u << BR_VEC)) | 1u << BR_CODE;
    for (int k = BR_VEC; k <= BR_CODE; k++)
        if (what >> k & 1)
            nw = br_want(st, c, nw, s, k);
    return br_result(c, br_bring(st, c, nw));
}

/* Brings in `what` (BR_HDR: slot headers, whose ids are read next; BR_VEC:
** vectors, measured next) of n slots (packed entries of c->res or of a
** result list): one round trip for all. */
KEEL_COLD static int
br_slots(const keel_store *st, keel_search_ctx *c, const uint64_t *e,
         size_t n, int what)
{
    if (br_stopped(c))
        return -2;
    int rc = KEEL_OK;
    for (size_t i = 0; i < n && rc == KEEL_OK;) {
        size_t nw = 0;
        /* bwant holds 3 (M0 + 1) ranges */
        for (; i < n && nw < 3 * ((size_t)c->M0 + 1); i++)
            nw = br_want(st, c, nw, keel__pack_slot(e[i]), what);
        rc = br_bring(st, c, nw);
    }
    return br_result(c, rc);
}

/* The walk's distance to slot s: on its code row while c->coded, else on
** its stored vector. */
static inline float
walk_dist(const keel_graph *gr, const keel_search_ctx *c, const float *q,
          uint32_t s, const int coded)
{
    if (coded)
        return keel__code_dist(gr->code_dot, &c->cq,
                               keel__store_code(gr->st, s), gr->dim);
    return keel__graph_dist(gr, q, keel__store_vec(gr->st, s));
}

/* The walk's distances to the n gathered rows or vectors in v. */
static inline void
walk_dist_group(const keel_graph *gr, const keel_search_ctx *c,
                const float *q, const void *const *v, uint32_t n, float *out,
                const int coded)
{
    if (!coded) {
        keel__graph_dist_group(gr, q, v, n, out);
        return;
    }
    /* Every row's lines asked for before the first is measured (touch_lines). */
    uint32_t lines = gr->st->g.code_bytes / 64;
    for (uint32_t j = 0; j < n; j++)
        touch_lines(v[j], lines);
    for (uint32_t j = 0; j < n; j++)
        out[j] = keel__code_dist(gr->code_dot, &c->cq, v[j], gr->dim);
}

/* Where the walk reads slot s: its code row or its vector; prefetched. */
static inline const void *
walk_row(const keel_graph *gr, uint32_t s, int l1, const int coded)
{
    if (coded) {
        const uint8_t *row = keel__store_code(gr->st, s);
        prefetch_code(gr, row, l1);
        return row;
    }
    const void *vec = keel__store_vec(gr->st, s);
    prefetch_vec(gr, vec, l1);
    return vec;
}

uint32_t
keel__search_greedy(const keel_graph *gr, const keel_view *v,
                    keel_search_ctx *ctx, const float *q, uint32_t entry,
                    uint32_t from, uint32_t to)
{
    uint32_t cur = entry;
    int c_l1 = keel__prefetch_into_l1();
    if (KEEL_UNLIKELY(ctx->br) &&
        br_slot(gr->st, ctx, cur, 1u << BR_REC | 1u << BR_VEC))
        return KEEL_EMPTY;
    const int coded = ctx->coded;
    float best = walk_dist(gr, ctx, q, cur, coded);
    ctx->ndist++;
    for (uint32_t level = from; level > to; level--) {
        for (int changed = 1; changed;) {
            changed = 0;
            uint32_t len;
            /* The record holds where the upper lists are. */
            if (KEEL_UNLIKELY(ctx->br) &&
                (br_slot(gr->st, ctx, cur, 1u << BR_REC) ||
                 br_result(ctx, keel__store_need_list(gr->st, cur, level))))
                return KEEL_EMPTY;
            const uint32_t *list = keel__store_list(gr->st, cur, level, &len);
            if (!list)
                break;
            uint32_t ng = 0;
            for (uint32_t j = 0; j < len; j++) {
                uint32_t s = KEEL_LOAD_RELAXED(&list[j]);
                if (s == KEEL_EMPTY || skip_slot(v, s))
                    continue;
                ctx->gather[ng] = s;
                ctx->gvec[ng++] = walk_row(gr, s, c_l1, coded);
            }
            /* A published index: the neighbours' records in the same
             * batch, since the next step reads the record of whichever is
             * nearest (its upper lists, or level 0's at the bottom), and a
             * record not in costs a round trip of its own (GloVe-340k's
             * first search at 20 ms per request came 7% sooner;
             * doc/object_storage_bench.md). */
            if (KEEL_UNLIKELY(ctx->br)
                    ? br_vectors(gr->st, v, ctx, ng, 0, gr->st->remote != NULL, 0)
                    : KEEL_UNLIKELY(ctx->stop) && br_stopped(ctx))
                return KEEL_EMPTY;
            walk_dist_group(gr, ctx, q, ctx->gvec, ng, ctx->gdist, coded);
            ctx->ndist += ng;
            for (uint32_t j = 0; j < ng; j++)
                if (ctx->gdist[j] < best) {
                    best = ctx->gdist[j];
                    cur = ctx->gather[j];
                    changed = 1;
                }
        }
    }
    return cur;
}

/* A cold walk's step beyond its first expansion (batch_reads.h
** keel__br_beam): pops up to width - 1 more candidates that the walk would
** expand next (bound: the ef-th result so far) and gathers their unvisited
** neighbours after the ng already gathered, so one batch brings in what
** all of them measure (DiskANN's beam width). Counts the popped nodes the
** settling rule counts into *counts (NULL: no rule). Returns the new ng.
** Their level-0 records came in with their vectors (a published index) or
** in the batch of queued records (a local file). */
KEEL_COLD static uint32_t
beam_gather(const keel_graph *gr, const keel_view *v, keel_search_ctx *c,
            const keel_accept *acc, uint32_t level, uint32_t ef,
            uint64_t bound, uint32_t width, uint32_t ng, uint32_t *counts,
            int l1, const int coded)
{
    for (uint32_t x = 1; x < width && c->ncand; x++) {
        if (c->cand[0] > bound && c->nres >= ef)
            break;
        uint32_t e = keel__pack_slot(min_pop(c->cand, &c->ncand));
        if (counts)
            *counts += accepts(v, acc, e) != 0;
        uint32_t len;
        const uint32_t *list = keel__store_list(gr->st, e, level, &len);
        for (uint32_t j = 0; list && j < len; j++) {
            uint32_t s = KEEL_LOAD_RELAXED(&list[j]);
            if (s == KEEL_EMPTY || skip_slot(v, s) || visit(c, s))
                continue;
            c->gather[ng] = s;
            c->gvec[ng++] = walk_row(gr, s, l1, coded);
        }
    }
    return ng;
}

/* The walk of keel__search_layer, compiled four times: cold (c->br or
** c->stop set: pages to bring in, a call to poll) and hot (neither), so a
** search of a file in memory runs a loop with none of the cold path's
** tests (measured: those tests cost 2-3% QPS on GloVe-100 10k); on code
** rows (c->coded) or on the stored vectors. */
static inline __attribute__((always_inline)) int
layer_walk(const keel_graph *gr, const keel_view *v, keel_search_ctx *c,
           const float *q, uint32_t entry, uint32_t level, uint32_t ef,
           const keel_accept *acc, uint64_t budget, const int cold,
           const int coded)
{
    if (keel__visited_reset(c, v->limit) ||
        heap_grow(&c->res, &c->res_cap, (size_t)ef + 1) ||
        heap_grow(&c->cand, &c->cand_cap, KEEL_MAX((size_t)ef + 1, 256)))
        return -1;
    c->nres = c->ncand = 0;
    const keel_store *st = gr->st;
    int l1 = keel__prefetch_into_l1();
    /* A filter reads the ids of the nodes it is asked about, and with
     * deletes every node's deleted mark is read: both in slot headers. */
    int hdrs = !acc->all && (acc->filter || acc->allowed || v->deleted);
    /* The entry's record; the records of the candidates it queues are
     * brought in as they are queued. */
    if (cold && c->br) {
        int brc = br_slot(st, c, entry, 1u << BR_REC | 1u << BR_VEC |
                                            (unsigned)hdrs << BR_HDR);
        if (brc)
            return brc;
    }
    float d0 = walk_dist(gr, c, q, entry, coded);
    c->ndist++;
    visit(c, entry);
    min_push(c->cand, &c->ncand, keel__pack(d0, entry));
    if (accepts(v, acc, entry))
        max_push(c->res, &c->nres, keel__pack(d0, entry));
    uint64_t bound = c->nres ? c->res[0] : UINT64_MAX;
    /* The settling rule (keel_search_ctx.quiet_max): the `watch` nearest
     * accepted entries so far, ascending, and the expansions of accepted
     * nodes since they last changed. */
    uint64_t nearest[KEEL_WATCH_MAX];
    const uint32_t watch = c->watch, quiet_max = c->quiet_max;
    uint32_t nnear = 0, quiet = 0;
    if (quiet_max && c->nres)
        nearest[nnear++] = c->res[0];

    /* A cold walk's step expands `width` candidates together (its beam,
     * keel__br_beam_of): one until a step has had to bring pages in, and
     * one again after a step that found them all in memory. */
    uint32_t width = 1;
    while (c->ncand) {
        uint64_t top = min_pop(c->cand, &c->ncand);
        if (top > bound && c->nres >= ef)
            break;
        /* Whether this expansion counts toward the settling rule. */
        uint32_t counts = quiet_max && accepts(v, acc, keel__pack_slot(top));
        /* The next candidate is most often the one after: its list into
         * L1 while this one is expanded (+2-5% QPS). */
        if (c->ncand)
            prefetch_rec_l1(st, keel__pack_slot(c->cand[0]));
        uint32_t len;
        const uint32_t *list = keel__store_list(st, keel__pack_slot(top),
                                                level, &len);
        if (!list)
            continue;
        uint32_t ng = 0;
        for (uint32_t j = 0; j < len; j++) {
            uint32_t s = KEEL_LOAD_RELAXED(&list[j]);
            if (s == KEEL_EMPTY || skip_slot(v, s) || visit(c, s))
                continue;
            c->gather[ng] = s;
            c->gvec[ng++] = walk_row(gr, s, l1, coded);
        }
        if (cold && width > 1)
            ng = beam_gather(gr, v, c, acc, level, ef, bound, width, ng,
                             quiet_max ? &counts : NULL, l1, coded);
        if (heap_grow(&c->cand, &c->cand_cap, c->ncand + ng))
            return -1;
        /* A published index: the neighbours' records come with their
         * vectors, so it needs no read-ahead of the queued ones below and
         * waits no round trip of its own (GloVe-340k at 20 ms per
         * request: the 10th result 12% sooner, 1% more GETs). A local file
         * keeps the two batches (measured as they are, doc/batch_reads.md). */
        if (cold) {
            /* With batch reads off pages fault, and the walk polls. */
            int brc = c->br ? br_vectors(st, v, c, ng, hdrs, st->remote != NULL,
                                         level ? 0 : c->ahead)
                            : br_stopped(c) ? -2 : 0;
            if (brc)
                return brc;
            width = c->br && c->step_cold ? KEEL_MAX(c->beam, 1u) : 1;
        }
        size_t nq = 0; /* queued candidates whose records to bring in */
        /* Four at a time: the query is loaded once for the four, four
         * streams of vector data are in flight, and the kernel is called a
         * quarter as often (measured: +20-25% QPS at 100 and 784 dims). */
        walk_dist_group(gr, c, q, c->gvec, ng, c->gdist, coded);
        for (uint32_t j = 0; j < ng; j++) {
            uint32_t s = c->gather[j];
            float d = c->gdist[j];
            uint64_t e = keel__pack(d, s);
            if (c->nres < ef || e < bound) {
                min_push(c->cand, &c->ncand, e);
                prefetch_rec(st, s);
                /* (A published index brought the records in above.) */
                if (KEEL_BR_AHEAD && cold && c->br && !st->remote)
                    nq = br_want(st, c, nq, s, BR_REC);
                if (accepts(v, acc, s)) {
                    if (c->nres < ef)
                        max_push(c->res, &c->nres, e);
                    else
                        max_replace_top(c->res, c->nres, e);
                    bound = c->res[0];
                    if (quiet_max &&
                        (nnear < watch || e < nearest[watch - 1])) {
                        uint32_t i = nnear < watch ? nnear++ : watch - 1;
                        for (; i > 0 && nearest[i - 1] > e; i--)
                            nearest[i] = nearest[i - 1];
                        nearest[i] = e;
                        quiet = 0;
                    }
                }
            }
        }
        if (cold && nq) {
            int brc = br_result(c, keel__br_local(c->br, c->bwant, nq,
                                                  &c->bscratch, c->stop));
            if (brc)
                return brc;
        }
        c->ndist += ng;
        if (budget && c->ndist > budget)
            return 1;
        if (counts && nnear == watch && (quiet += counts) >= quiet_max)
            break;
    }
    return 0;
}

int
keel__search_layer(const keel_graph *gr, const keel_view *v,
                   keel_search_ctx *c, const float *q, uint32_t entry,
                   uint32_t level, uint32_t ef, const keel_accept *acc,
                   uint64_t budget)
{
    if (c->coded) {
        if (KEEL_UNLIKELY(c->br || c->stop))
            return layer_walk(gr, v, c, q, entry, level, ef, acc, budget, 1, 1);
        return layer_walk(gr, v, c, q, entry, level, ef, acc, budget, 0, 1);
    }
    if (KEEL_UNLIKELY(c->br || c->stop))
        return layer_walk(gr, v, c, q, entry, level, ef, acc, budget, 1, 0);
    return layer_walk(gr, v, c, q, entry, level, ef, acc, budget, 0, 0);
}

/* --- k-NN ---------------------------------------------------------------- */

/* Keeps the k nearest in ctx->res while scanning. */
static inline void
keep_best(keel_search_ctx *c, size_t k, uint64_t e)
{
    if (c->nres < k)
        max_push(c->res, &c->nres, e);
    else if (e < c->res[0])
        max_replace_top(c->res, c->nres, e);
}

/* An exact scan of a published index brings the slot headers and vectors
** of SCAN_CHUNK slots in at a time (one round trip instead of a fault per
** page, and a place to see a cancel); one of an allow-list, whose ids lead
** anywhere in the file, polls the call's stop at every id. */
#define SCAN_CHUNK 256u

/* Brings in the headers and vectors of slots [i, i + n) of segment sg
** (0 or -1/-2 as keel__search_layer). */
KEEL_COLD static int
br_scan_chunk(const keel_store *st, keel_search_ctx *c,
              const keel_segment *sg, uint64_t i, uint64_t n)
{
    if (br_stopped(c))
        return -2;
    const uint8_t *base = KEEL_LOAD_RELAXED(&sg->base);
    if (!base)
        return 0;
    size_t nw = keel__br_want(c->br, c->bwant, 0,
                              KEEL_LOAD_RELAXED(&sg->hdrs) + i * 16, n * 16,
                              base, sg->off, sg->bytes);
    nw = keel__br_want(c->br, c->bwant, nw,
                       KEEL_LOAD_RELAXED(&sg->vecs) + i * st->g.vec_bytes,
                       n * st->g.vec_bytes, base, sg->off, sg->bytes);
    return br_result(c, br_bring(st, c, nw));
}

/* The exact answer: every accepted vector measured. 0, -1 out of memory,
** -2 when bringing pages in failed or c->stop said stop (c->br_rc set). */
static int
exact_scan(const keel_graph *gr, const keel_view *v, keel_search_ctx *c,
           const float *q, size_t k, const keel_accept *acc)
{
    if (heap_grow(&c->res, &c->res_cap, k + 1))
        return -1;
    c->nres = 0;
    if (acc->allowed && !acc->filter) {
        const keel_idset *s = acc->allowed;
        for (uint64_t i = 0; i <= s->mask; i++) {
            uint64_t slot;
            if (s->keys[i] == UINT64_MAX)
                continue;
            if (KEEL_UNLIKELY(c->stop) && br_stopped(c))
                return -2;
            int lrc = keel__store_id_lookup(v, s->keys[i], &slot);
            uint32_t s32 = (uint32_t)slot;
            if (lrc == KEEL_OK) /* a published index without faults */
                lrc = keel__store_need_slots(gr->st, &s32, 1, KEEL_NEED_VEC);
            if (lrc == KEEL_ENOTFOUND)
                continue;
            if (lrc)
                return br_result(c, lrc);
            float d = keel__graph_dist(gr, q, keel__store_vec(gr->st, slot));
            keep_best(c, k, keel__pack(d, (uint32_t)slot));
        }
        return 0;
    }
    /* A callback knows its matches only when asked about every vector:
     * walk the slot headers segment by segment, in file order. */
    const keel_store *st = gr->st;
    uint32_t nseg = KEEL_LOAD_ACQUIRE(&st->nseg);
    for (uint32_t k2 = 0; k2 < nseg; k2++) {
        const keel_segment *sg = &st->seg[k2];
        uint64_t first = keel__seg_first_slot(&st->g, k2);
        if (first >= v->count)
            break;
        uint64_t n = KEEL_MIN(v->count - first, sg->slots);
        const uint64_t *hdr = (const uint64_t *)(const void *)
            KEEL_LOAD_RELAXED(&sg->hdrs);
        const uint8_t *vecs = KEEL_LOAD_RELAXED(&sg->vecs);
        for (uint64_t i = 0; i < n; i++) {
            if (KEEL_UNLIKELY(c->br) && i % SCAN_CHUNK == 0) {
                int rc = br_scan_chunk(st, c, sg, i,
                                       KEEL_MIN((uint64_t)SCAN_CHUNK, n - i));
                if (rc)
                    return rc;
            }
            uint64_t slot = first + i;
            if (v->deleted && !keel__store_present(v, slot))
                continue;
            uint64_t id = KEEL_LOAD_RELAXED(&hdr[2 * i]);
            if (acc->filter ? !acc->filter(id, acc->filter_arg)
                            : !keel__idset_has(acc->allowed, id))
                continue;
            float d = keel__graph_dist(gr, q, vecs + i * st->g.vec_bytes);
            keep_best(c, k, keel__pack(d, (uint32_t)slot));
        }
    }
    return 0;
}

/* Estimated matches of a filter: a sample of about 1,024 slots, one from
** each equal stretch at a jittered place, so a periodic filter cannot line
** up with the sample. */
static double
estimate_matches(const keel_view *v, const keel_accept *acc, double *frac,
                 int *rc)
{
    *rc = KEEL_OK;
    if (acc->allowed && !acc->filter) {
        double live = (double)(v->count - KEEL_MIN(v->deleted, v->count));
        double m = (double)acc->allowed->n;
        *frac = live > 0 ? KEEL_MIN(1.0, m / live) : 1.0;
        return m;
    }
    uint64_t n = v->count, samples = KEEL_MIN(n, 1024), hits = 0;
    if (!samples) {
        *frac = 0;
        return 0;
    }
    uint64_t x = 0x2545F4914F6CDD1Dull;
    uint32_t pick[1024];
    for (uint64_t i = 0; i < samples; i++) {
        uint64_t lo = i * n / samples, hi = (i + 1) * n / samples;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pick[i] = (uint32_t)(lo + (hi > lo ? x % (hi - lo) : 0));
    }
    /* A published index read without faults: the samples' headers, whose
     * ids and marks are read next, in one batch (store/pagein.h). */
    if ((*rc = keel__store_need_slots(v->st, pick, samples, KEEL_NEED_HDR))) {
        *frac = 0;
        return 0;
    }
    for (uint64_t i = 0; i < samples; i++) {
        hits += accepts(v, acc, pick[i]) != 0;
    }
    *frac = (double)hits / (double)samples;
    return *frac * (double)n;
}

int
keel__search_code_query(const keel_graph *gr, keel_search_ctx *c,
                        const float *q)
{
    c->coded = gr->codes;
    if (c->coded)
        keel__code_query(q, keel__store_centre(gr->st), gr->dim,
                         gr->metric == KEEL_L2, (int)gr->st->g.codes, &c->cq);
    return c->coded;
}

/* A walk on code rows: the `keep` nearest of its nodes by code distance (all
** with keep 0) measured again on their stored vectors, so each distance
** returned is what an exact scan gives (dist.h (3)) and the k returned are
** the nearest of those by true distance. */
int
keel__search_measure(const keel_graph *gr, keel_search_ctx *c, const float *q,
                     size_t keep)
{
    if (keep && keep < c->nres) {
        sort_u64(c->res, c->nres);
        c->nres = keep;
    }
    if (c->br) {
        int rc = br_slots(gr->st, c, c->res, c->nres, BR_VEC);
        if (rc)
            return rc;
    }
    /* The first lines of every vector asked for at once (touch_lines):
     * +15-18% QPS on Fashion-MNIST at ef 12-32 over hints four ahead. A
     * walk that brought its pages in (c->br) keeps the hints: a published
     * index's memory cache may hold fewer pages than n, and a load faults
     * back in, one uninterruptible GET at a time, what a hint leaves alone
     * (touching all first faulted 1,496 times where hints fault 955, and
     * touching four ahead 1,008: 6 searches, k 200, an 8 MiB cache). */
    size_t n = c->nres, ahead = c->br ? KEEL_MIN(n, (size_t)4) : 0;
    int l1 = keel__prefetch_into_l1();
    if (!c->br) {
        uint32_t lines = KEEL_MIN((gr->st->g.vec_bytes + 63) / 64, 8u);
        for (size_t i = 0; i < n; i++)
            touch_lines(keel__store_vec(gr->st, keel__pack_slot(c->res[i])),
                        lines);
    }
    for (size_t i = 0; i < ahead; i++)
        prefetch_vec(gr, keel__store_vec(gr->st, keel__pack_slot(c->res[i])), l1);
    for (size_t i = 0; i < n; i++) {
        if (ahead && i + ahead < n)
            prefetch_vec(gr, keel__store_vec(gr->st,
                                             keel__pack_slot(c->res[i + ahead])),
                         l1);
        uint32_t s = keel__pack_slot(c->res[i]);
        c->res[i] = keel__pack(keel__graph_dist(gr, q, keel__store_vec(gr->st, s)),
                               s);
    }
    c->ndist += n;
    return 0;
}

/* How many of a coded walk's nearest are measured on the vectors for k
** results. Measured (doc/search_tuning.md): measuring the walk's 2k nearest
** by code distance gave the recall of measuring all ef of them on GloVe-100
** (L2 and cosine) and Fashion-MNIST at every ef, and k alone lost up to
** 0.02; 2k to 4k ran 5-18% faster than all ef, and max(2k, 20) 2-4% faster
** than max(3k, 32) on GloVe-100 cosine at ef 64-256, with the same recall. */
static size_t
rerank_of(size_t k)
{
    return KEEL_MAX(2 * k, (size_t)20);
}

/* The settling rule of a k-NN walk at ef (keel_search_ctx): besides HNSW's
** own end (the nearest candidate left farther than the ef-th result), the
** walk stops once its rerank_of(k) nearest accepted nodes have stayed the
** same over 3/8 ef expansions (at least 12) of accepted nodes in a row. An
** easy query settles early and stops; a hard one keeps improving and walks
** on. Only expansions of nodes the search accepts count: a walk through
** deleted nodes or nodes a filter turns down, toward matches farther off,
** is not settling (clustered deletes or filter matches lost most of their
** recall when every expansion counted), and a filter that lets every live
** node through settles where no filter does (its walk can still end sooner,
** in the exact scan, past its budget of distances). Measured
** (doc/search_tuning.md, "Settled walks"), QPS at equal recall: GloVe-100
** cosine +11%, +23% and +27% at 0.95, 0.99 and 0.995, GloVe-100 L2 +4% and
** +11% at 0.90 and 0.95, Fashion-MNIST unchanged; watching 10 or 40 instead
** of 20, or 1/4 or 1/2 ef, gave less, and Fashion-MNIST (ef 10-16 for 0.95)
** lost 4-7% without the floor of 12. Off where more than KEEL_WATCH_MAX
** would be watched. */
static void
settle_rule(keel_search_ctx *c, size_t k, uint32_t efk)
{
    size_t watch = rerank_of(k);
    c->watch = (uint32_t)watch;
    c->quiet_max = watch > KEEL_WATCH_MAX
                       ? 0
                       : KEEL_MAX((uint32_t)((uint64_t)efk * 3 / 8), 12u);
}

/* keel__search_knn with efk = max(ef, k), bringing pages in while c->br
** is set. */
static int
search_knn(const keel_graph *gr, const keel_view *v, keel_search_ctx *c,
           const float *q, size_t k, uint32_t efk, const keel_accept *acc,
           keel_result *out, size_t *n_out)
{
    int filtered = acc->filter || acc->allowed;
    int scanned = 0, rc = 0;
    /* A published index announces every page a search reads (the file's
     * scans leave reading ahead to the system). */
    keel_br_record *remote = gr->st->remote ? c->br : NULL;
    settle_rule(c, k, efk); /* for the level-0 walk below, if any */
    if (filtered) {
        double frac, m = estimate_matches(v, acc, &frac, &rc);
        if (rc)
            return rc;
        /* A graph visit costs about one scanned distance, and an unfiltered
         * walk visits about 16 ef nodes: a filter passing a fraction f needs
         * about 16 ef / f visits, and more for filters far from the query.
         * Past m / 2 visits the scan of the matches is cheaper. */
        double budget = frac > 0 ? KEEL_MIN(m / 2, 32.0 * efk / frac) : 0;
        if (budget < 2.0 * efk) {
            c->br = remote;
            rc = exact_scan(gr, v, c, q, k, acc);
            scanned = 1;
        } else {
            uint32_t ep = keel__search_greedy(gr, v, c, q, v->entry,
                                              v->max_level, 0);
            rc = ep == KEEL_EMPTY ? -2
                                  : keel__search_layer(gr, v, c, q, ep, 0, efk,
                                                       acc, (uint64_t)budget);
            if (rc == 1 || (rc == 0 && c->nres < k)) {
                c->br = remote;
                rc = exact_scan(gr, v, c, q, k, acc);
                scanned = 1;
            }
        }
    } else {
        uint32_t ep = keel__search_greedy(gr, v, c, q, v->entry, v->max_level, 0);
        rc = ep == KEEL_EMPTY ? -2
                              : keel__search_layer(gr, v, c, q, ep, 0, efk, acc, 0);
    }
    c->quiet_max = 0; /* builds and radius walks share the context */
    if (rc == 0 && c->coded && !scanned)
        rc = keel__search_measure(gr, c, q, rerank_of(k));
    c->br = NULL; /* builds share the context: they never bring pages in */
    if (rc == -2) {
        c->nres = 0;
        rc = c->br_rc ? c->br_rc : KEEL_EIO;
        c->br_rc = 0;
        return rc;
    }
    if (rc < 0)
        return KEEL_ENOMEM;
    /* c->res holds at least the k best; sort them, keep k. */
    uint64_t *tmp = c->cand; /* candidates are spent: reuse as output */
    if (heap_grow(&c->cand, &c->cand_cap, c->nres))
        return KEEL_ENOMEM;
    tmp = c->cand;
    size_t n = keel__search_take(c, tmp);
    if (n > k)
        n = k;
    if (remote && n) {
        /* The results' ids: their slot headers in one round trip. */
        c->br = remote;
        rc = br_slots(gr->st, c, tmp, n, BR_HDR);
        c->br = NULL;
        if (rc) {
            rc = rc == -1 ? KEEL_ENOMEM : c->br_rc;
            c->br_rc = 0;
            return rc;
        }
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t s = keel__pack_slot(tmp[i]);
        out[i].id = keel__store_id(gr->st, s);
        out[i].distance = keel__graph_report(gr, keel__pack_dist(tmp[i]));
    }
    /* Equal distances come back by id. */
    for (size_t i = 1; i < n; i++) {
        keel_result x = out[i];
        size_t j = i;
        for (; j > 0 && (out[j - 1].distance > x.distance ||
                         (out[j - 1].distance == x.distance && out[j - 1].id > x.id));
             j--)
            out[j] = out[j - 1];
        out[j] = x;
    }
    *n_out = n;
    return KEEL_OK;
}

int
keel__search_knn(const keel_graph *gr, const keel_view *v,
                 keel_search_ctx *c, const float *q, size_t k, uint32_t ef,
                 const keel_accept *acc, keel_result *out, size_t *n_out)
{
    *n_out = 0;
    if (v->count == 0 || v->entry == KEEL_EMPTY || v->entry >= v->limit)
        return KEEL_OK;
    uint32_t efk = (uint32_t)KEEL_MAX((size_t)ef, k);
    c->ndist = 0;
    c->waits = 0;
    /* A cold search: its record is given back when the ids are read too
     * (their table's faults then also read their page alone). */
    keel_br_record *cold = keel__br_record(&c->brc, gr->st, v, efk);
    c->br = cold;
    c->beam = cold ? keel__br_beam_of(gr->st, gr->M0) : 1;
    c->ahead = cold ? keel__br_remote_ahead(gr->st, gr->M0, c->beam) : 0;
    keel__search_code_query(gr, c, q);
    int rc = search_knn(gr, v, c, q, k, efk, acc, out, n_out);
    c->br = NULL;
    c->coded = 0;
    c->beam = 0;
    c->ahead = 0;
    if (cold)
        keel__br_done(cold);
    return rc;
}
