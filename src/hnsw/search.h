/* search.h -- walking the HNSW graph: greedy descent, the beam search of one
** layer, k-NN queries with filters, and the exact scan they fall back to.
**
** A search reads the store through a keel_view and never writes the file.
** All its scratch memory lives in a keel_search_ctx (hnsw/walk.h) that
** belongs to one thread for the duration of a call (the api layer keeps a
** pool).
*/
#ifndef KEEL_SEARCH_H
#define KEEL_SEARCH_H

#include "hnsw/walk.h"

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
