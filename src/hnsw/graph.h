/* graph.h -- HNSW nodes: distances between a query and stored vectors,
** packed heap keys, levels, the neighbour-selection heuristic, and changes
** to neighbour lists that searches may read at the same time.
**
** Invariants for lists (commit.c invariant 3):
**   (1) Every change to a list is a sequence of single aligned 32-bit
**       stores; a search reading the list sees, at each position, either the
**       old entry, the new entry or EMPTY.
**   (2) Entries that survive a change keep their positions; new entries go
**       into positions freed by dropped ones, and positions left over become
**       EMPTY last, so a concurrent reader never misses an edge that is in
**       both the old and the new list.
**   (3) A list is changed only by a thread holding its node's stripe lock
**       (keel_graph.stripes), and a thread holds one stripe lock at a time.
**   (4) A list's closed set (keel_graph.closed) is entries that the
**       heuristic kept against each other: for any two members, the one
**       farther from the node is nearer to the node than to the other. A
**       selection (keel__graph_select) leaves its heuristic's choices as
**       one; an entry added to a list that is not full is not a member, and
**       a position that changes loses its bit.
*/
#ifndef KEEL_GRAPH_H
#define KEEL_GRAPH_H

#include "hnsw/dist.h"
#include "store/store.h"

#define KEEL_STRIPES 4096u

/* What a graph needs to compute distances and change lists. */
typedef struct keel_graph {
    keel_store *st;
    keel_dist_fn dist;        /* internal distance sum for the metric */
    keel_dist4_fn dist4;
    keel_code_dot_fn code_dot; /* traversal codes' dot product */
    int codes;                /* 1: the file has code rows (codes.h) */
    int metric, precision;
    uint32_t dim, M, M0;
    double level_mult;        /* 1 / ln(M) */
    uint32_t stripes[KEEL_STRIPES]; /* spin locks, one per slot % KEEL_STRIPES */
    uint32_t entry_lock;
    /* A batch build's closed sets (build.c; NULL outside one, or with M0 >
     * 64): bit j of closed[slot - closed_base] is set when position j of
     * the slot's level-0 list holds a member of its closed set. Read and
     * written under the slot's stripe lock (invariant 4). */
    uint64_t *closed;
    uint64_t closed_base, closed_n;
} keel_graph;

void keel__graph_init(keel_graph *gr, keel_store *st);

/* Internal distances: squared L2 for KEEL_L2, 1 - dot otherwise. Smaller is
** nearer; the value may be negative for KEEL_IP. */
static inline float
keel__graph_dist(const keel_graph *gr, const float *q, const void *v)
{
    float s = gr->dist(q, v, gr->dim);
    return gr->metric == KEEL_L2 ? s : 1.0f - s;
}

/* Internal distances to n vectors, four at a time (bit-identical to
** keel__graph_dist one by one, dist.h invariant 2). */
static inline void
keel__graph_dist_group(const keel_graph *gr, const float *q,
                       const void *const *v, uint32_t n, float *out)
{
    uint32_t j = 0;
    for (; j + 4 <= n; j += 4)
        gr->dist4(q, v + j, gr->dim, out + j);
    for (; j < n; j++)
        out[j] = gr->dist(q, v[j], gr->dim);
    if (gr->metric != KEEL_L2)
        for (j = 0; j < n; j++)
            out[j] = 1.0f - out[j];
}

/* The distance keel reports for an internal one. */
float keel__graph_report(const keel_graph *gr, float internal);

/* A float's bits as an unsigned key that orders like the float. */
static inline uint32_t
keel__float_key(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b ^ ((uint32_t)((int32_t)b >> 31) | 0x80000000u);
}
static inline float
keel__key_float(uint32_t k)
{
    uint32_t b = (k & 0x80000000u) ? k ^ 0x80000000u : ~k;
    float f;
    memcpy(&f, &b, 4);
    return f;
}
/* Heap entry: distance key above, slot below; orders by distance, then slot. */
static inline uint64_t
keel__pack(float d, uint32_t slot)
{
    return (uint64_t)keel__float_key(d) << 32 | slot;
}
static inline uint32_t
keel__pack_slot(uint64_t e)
{
    return (uint32_t)e;
}
static inline float
keel__pack_dist(uint64_t e)
{
    return keel__key_float((uint32_t)(e >> 32));
}

/* The level of a new node in slot `slot` (deterministic per slot). */
uint32_t keel__graph_level(const keel_graph *gr, uint64_t slot);

/* The vector of slot as f32: the stored bytes themselves for f32 files, else
** widened into buf (dim floats). */
const float *keel__graph_vec_f32(const keel_graph *gr, uint64_t slot,
                                 float *buf);

/* What a selection knows and tells beyond its choices (all optional).
** member[i] (n flags, or NULL): cand[i] is in the closed set of the list
** being pruned (invariant 4), so it passed the heuristic against every
** other member nearer to base and is measured only against kept
** non-members; the choices are the same as without the flags. ovecs: cap
** pointers of scratch, needed with member. idx (cap, or NULL): the index
** in cand of each choice. nclosed: how many of the choices (the first ones)
** the heuristic made, before the quarter fill. */
typedef struct keel_select_aux {
    const uint8_t *member;
    const void **ovecs;
    uint32_t *idx;
    uint32_t nclosed;
} keel_select_aux;

/* Selects up to cap neighbours for slot base (its vector q, as f32) from
** cand[0..n), packed entries sorted ascending by distance to base: keep a
** candidate only if it is nearer to base than to every one kept so far; if
** fewer than a quarter of cap are kept, fill to a quarter with the nearest
** of the rest. Copies of base (at base's own distance from itself) take at
** most half of cap, drawn by a hash of the two slots when there are more. Writes the chosen slots to out and returns their number. buf:
** dim floats of scratch; kvec: cap pointers of scratch. */
uint32_t keel__graph_select(const keel_graph *gr, uint64_t base,
                            const float *q, const uint64_t *cand, uint32_t n,
                            uint32_t cap, uint32_t *out, float *buf,
                            const void **kvec, keel_select_aux *aux);

/* Writes a new node's list at level (under its stripe lock); its first
** nclosed entries are the heuristic's choices (keel_select_aux), the list's
** closed set (invariant 4). */
void keel__graph_set_list(keel_graph *gr, uint64_t slot, uint32_t level,
                          const uint32_t *nb, uint32_t n, uint32_t nclosed);

/* What an add call needs to give back the lists it changed of nodes that
** existed before it (build.c), one per linking thread: before the call's
** first change to such a node's lists, under its stripe lock, the node's
** bit in the store's journal_bits is set and a record appended here:
** slot, words, then the node's lists as they were (words 0: a committed
** node whose undo entry this call wrote, which holds them). */
typedef struct keel_journal {
    uint32_t *w;
    size_t n, cap;            /* words used, allocated */
    uint64_t before;          /* slots below this existed before the call */
} keel_journal;

/* Adds a link to `from` into the list of node `to` at level, pruning with
** the heuristic when the list is full. limit: slots at or past it are
** dropped when pruning (they belong to no one). scratch: see
** keel_link_scratch; with a journal, a `to` that existed before the call
** is journaled before its first change. Returns KEEL_OK, or the undo log's
** failure to save a committed `to` (KEEL_EIO, KEEL_EFULL, KEEL_ENOMEM, with
** a message) or KEEL_ENOMEM for a journal that cannot grow, in which case
** the list is unchanged. */
typedef struct keel_link_scratch {
    uint64_t *cand;   /* M0 + 1 */
    uint32_t *keep;   /* M0 + 1 */
    uint8_t *flags;   /* 2 * M0 + 2: a pruning's member and stays flags */
    const void **vecs; /* M0 + 1 */
    const void **ovecs; /* M0 + 1 */
    uint32_t *pos, *idx; /* M0 + 1 each */
    float *dists;     /* M0 + 1 */
    float *vbuf, *cbuf; /* dim each */
    keel_journal *journal; /* the call's, or NULL */
} keel_link_scratch;
int keel__graph_add_link(keel_graph *gr, uint64_t to, uint64_t from,
                         uint32_t level, uint64_t limit, keel_link_scratch *s);
/* Ends a call's journal: with restore, writes each record's lists back;
** clears the records' bits and frees the journal. */
void keel__graph_journal_end(keel_graph *gr, keel_journal *jn, int restore);

/* Stripe and entry-point locks. */
void keel__spin_lock(uint32_t *l);
void keel__spin_unlock(uint32_t *l);

#endif /* KEEL_GRAPH_H */
