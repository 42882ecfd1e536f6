/* build.h -- linking new nodes into the graph: one at a time, or a batch
** on several threads.
**
** The caller (api) has written the slots (store) and holds the write mutex.
** Linking fails only when it runs out of memory for scratch space or the
** cancel callback asks it to stop (KEEL_ECANCELED; the caller undoes); it
** changes lists only under graph.h's stripe locks, so searches on the same
** handle keep running while it works.
*/
#ifndef KEEL_BUILD_H
#define KEEL_BUILD_H

#include "hnsw/search.h"

/* The working entry point of the graph being built: it runs ahead of the
** store's published entry point while a batch links. */
typedef struct keel_builder {
    keel_graph *gr;
    uint64_t entry_packed;    /* max_level << 32 | entry (atomic) */
    uint32_t ef_construction;
    keel_progress_fn progress;
    void *progress_arg;
    keel_cancel_fn cancel;    /* nonzero: stop with KEEL_ECANCELED */
    void *cancel_arg;
} keel_builder;

void keel__build_init(keel_builder *b, keel_graph *gr, uint32_t efc);

/* Batches of at least this many nodes are linked in a shuffled order when
** their slot order walks through space (build.c link_order). */
#define KEEL_LINK_SHUFFLE_MIN 1024u

/* Links slots [first, first + n), already written, using `threads` threads
** (1 = this one), in slot order (the order the caller gave them), or, for a
** batch of at least KEEL_LINK_SHUFFLE_MIN whose slot order walks through
** space, in a shuffled one (build.c link_order). ctx is this thread's
** scratch. Then publishes the slots and the entry point to searches. On
** failure nothing is published. */
int keel__build_link(keel_builder *b, keel_search_ctx *ctx, uint64_t first,
                     uint64_t n, uint32_t threads);

/* For tests: nonzero makes batches keep no closed sets (graph.h invariant
** 4), so every pruning measures every entry; the lists must come out the
** same either way. */
extern int keel__build_measure_all;

#endif /* KEEL_BUILD_H */
