/* search.h -- walking the HNSW graph: greedy descent, the beam search of one
** layer, k-NN queries with filters, and the exact scan they fall back to.
**
** A search reads the store through a keel_view and never writes the file.
** All its scratch memory lives in a keel_search_ctx that belongs to one
** thread for the duration of a call (the api layer keeps a pool).
*/
#ifndef KEEL_SEARCH_H
#define KEEL_SEARCH_H

#include "store/pagein.h"
#include "hnsw/graph.h"
#include "hnsw/codes.h"

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
    uint32_t *gather;         /* neighbours to measure, M0 */
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
    keel_br_range *bwant;     /* BR_WANT_LISTS (M0 + 1) ranges: a vector,
                               * record and slot header per neighbour */
    keel_br_scratch bscratch;
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

/* Greedy descent from `entry` through levels from..to+1; returns the nearest
** node found at level to+1 (the start for level to), or KEEL_EMPTY when
** bringing pages in failed or ctx->stop said stop (ctx->br set; code in
** ctx->br_rc, message recorded). */
uint32_t keel__search_greedy(const keel_graph *gr, const keel_view *v,
                             keel_search_ctx *ctx, const float *q,
                             uint32_t entry, uint32_t from, uint32_t to);

/* Beam search of one level from entry, keeping ef nodes the accept policy
** allows in ctx->res. Stops early, returning 1, once it has computed more than
** budget distances (0 = no budget); returns 0 when it finished, -1 out of
** memory, -2 when bringing pages in failed or ctx->stop said stop (ctx->br
** set; code in ctx->br_rc, message recorded). */
int keel__search_layer(const keel_graph *gr, const keel_view *v,
                       keel_search_ctx *ctx, const float *q, uint32_t entry,
                       uint32_t level, uint32_t ef, const keel_accept *acc,
                       uint64_t budget);

/* Moves ctx->res into out sorted ascending (nearest first); returns count. */
size_t keel__search_take(keel_search_ctx *ctx, uint64_t *out);

/* Walks on code rows for the calls that follow (ctx->coded, query q coded
** into ctx->cq), when the graph's file has them; returns whether it does.
** Builds call it per node, k-NN searches per query. */
int keel__search_code_query(const keel_graph *gr, keel_search_ctx *ctx,
                            const float *q);
/* After a walk on code rows: the keep nearest of ctx->res by code distance
** (all with keep 0) measured again on the stored vectors, the rest dropped
** (ctx->res is no longer a heap; keel__search_take sorts).
** 0, -1 out of memory, -2 a page could not be brought in (ctx->br_rc). */
int keel__search_measure(const keel_graph *gr, keel_search_ctx *ctx,
                         const float *q, size_t keep);

/* The k nearest present, accepted vectors to q (already normalized for
** cosine). Unfiltered searches walk the graph; filtered ones walk with a
** budget and fall back to an exact scan of the matches (search.c).
** KEEL_OK, KEEL_ENOMEM, KEEL_EIO (pages could not be brought in) or
** KEEL_ECANCELED (ctx->stop said stop: between expansions, while pages
** were fetched, or every SCAN_CHUNK slots of an exact scan while pages
** are brought in). */
int keel__search_knn(const keel_graph *gr, const keel_view *v,
                     keel_search_ctx *ctx, const float *q, size_t k,
                     uint32_t ef, const keel_accept *acc, keel_result *out,
                     size_t *n_out);

#endif /* KEEL_SEARCH_H */
