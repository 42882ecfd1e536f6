/* build.c -- inserting nodes into the HNSW graph.
**
** A node is linked in the usual HNSW way: descend greedily to its level,
** then on each level from there down search ef_construction candidates,
** choose its neighbours with the heuristic (M above level 0, M0 on it), write
** its own list and add a link back from each neighbour, pruning full lists.
**
** A batch links its nodes on several threads that take nodes in order from a
** shared counter. Lists are read without locks and changed under per-node
** stripe locks (graph.h). A batch node becomes a neighbour candidate for other
** threads only once its own lists are all written (the linked[] bytes), and a
** node that raises the top of the graph holds the entry lock while it links.
** Searches on the handle see the batch when it is published whole.
**
** A call that fails (an undo entry that cannot be written, no memory, a
** cancel) leaves every list of every node that existed before it as it was:
** back-links and pruning change those lists in place, so before a call first
** changes one, its old state is kept: a committed node that the call saves
** to the undo log first has it there (from the log end at the call's start
** on), any other (saved earlier in this commit cycle, or added by an earlier
** call and not flushed) is copied into the call's journal (graph.h). On
** failure both are written back, after the threads are joined and before the
** caller gives the slots back. A batch into an empty index keeps nothing.
*/
#include "hnsw/build.h"
#include "store/undo.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void
keel__build_init(keel_builder *b, keel_graph *gr, uint32_t efc)
{
    memset(b, 0, sizeof *b);
    b->gr = gr;
    b->ef_construction = efc;
    uint32_t e, l;
    keel__store_entry(gr->st, &e, &l);
    b->entry_packed = (uint64_t)l << 32 | e;
}

int keel__build_measure_all;

static uint32_t
node_level(const keel_store *st, uint64_t slot)
{
    return (uint32_t)(KEEL_LOAD_ACQUIRE(keel__store_rec(st, slot)) & 0xFF);
}

static int
link_node(keel_builder *b, const keel_view *v, keel_search_ctx *c,
          uint64_t slot)
{
    keel_graph *gr = b->gr;
    uint32_t level = node_level(gr->st, slot);
    const float *q = keel__graph_vec_f32(gr, slot, c->qbuf);
    uint64_t e = KEEL_LOAD_ACQUIRE(&b->entry_packed);
    uint32_t entry = (uint32_t)e, top = (uint32_t)(e >> 32);
    int held = 0;
    if (entry == KEEL_EMPTY || level > top) {
        keel__spin_lock(&gr->entry_lock);
        held = 1;
        e = KEEL_LOAD_ACQUIRE(&b->entry_packed);
        entry = (uint32_t)e;
        top = (uint32_t)(e >> 32);
        if (entry == KEEL_EMPTY) {
            KEEL_STORE_RELEASE(&b->entry_packed,
                               (uint64_t)level << 32 | (uint32_t)slot);
            keel__spin_unlock(&gr->entry_lock);
            return KEEL_OK;
        }
    }
    static const keel_accept all = {.all = 1};
    uint32_t cur = entry;
    /* A file with code rows: the walks that find the candidates run on
     * them, and the candidates are then measured on the vectors, so the
     * selection and every list's pruning see exact distances. */
    int coded = keel__search_code_query(gr, c, q);
    if (top > level)
        cur = keel__search_greedy(gr, v, c, q, entry, top, level);
    int rc = KEEL_OK;
    for (uint32_t lv = KEEL_MIN(level, top) + 1; lv-- > 0;) {
        if (keel__search_layer(gr, v, c, q, cur, lv, b->ef_construction, &all,
                               0) < 0 ||
            (coded && keel__search_measure(gr, c, q, 0) < 0)) {
            rc = KEEL_ENOMEM;
            break;
        }
        /* ctx->cand is spent after the walk; it holds the sorted results. */
        uint64_t *w = c->cand;
        size_t n = keel__search_take(c, w), m = 0;
        for (size_t i = 0; i < n; i++)
            if (keel__pack_slot(w[i]) != slot)
                w[m++] = w[i];
        if (m == 0)
            continue;
        cur = keel__pack_slot(w[0]);
        uint32_t cap = lv ? gr->M : gr->M0;
        keel_select_aux aux = {0};
        uint32_t ns = keel__graph_select(gr, slot, q, w, (uint32_t)m, cap,
                                         c->sel, c->vbuf, c->link.vecs, &aux);
        keel__graph_set_list(gr, slot, lv, c->sel, ns, aux.nclosed);
        for (uint32_t i = 0; i < ns && rc == KEEL_OK; i++)
            rc = keel__graph_add_link(gr, c->sel[i], slot, lv, v->limit,
                                      &c->link);
        if (rc)
            break;
    }
    c->coded = 0;
    if (rc == KEEL_OK && level > top)
        KEEL_STORE_RELEASE(&b->entry_packed,
                           (uint64_t)level << 32 | (uint32_t)slot);
    if (held)
        keel__spin_unlock(&gr->entry_lock);
    return rc;
}

typedef struct batch {
    keel_builder *b;
    keel_view view;
    uint8_t *linked;
    const uint32_t *link_order; /* link_order(): NULL for slot order */
    uint64_t first, n;
    uint64_t next;            /* next node to take (atomic) */
    uint64_t done;            /* nodes linked (atomic) */
    int rc;                   /* first failure (atomic) */
    char msg[2048];           /* its message, written by the thread that set rc */
} batch;

static void
batch_fail(batch *bt, int rc)
{
    int zero = 0;
    /* The message lives in the failing thread: the winner copies it for the
     * caller (read after the workers are joined). */
    if (__atomic_compare_exchange_n(&bt->rc, &zero, rc, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        snprintf(bt->msg, sizeof bt->msg, "%s", keel_errmsg());
}

/* The reporter is the calling thread: it alone calls the progress and
** cancel callbacks. A cancel stops every thread at its next node. */
static void
batch_work(batch *bt, keel_search_ctx *c, int reporter)
{
    const keel_builder *b = bt->b;
    /* A batch asks at its first node, then every 0.05 s. */
    double last = keel__now_s(), asked = bt->n > 1 ? last - 1 : last;
    for (;;) {
        uint64_t i = __atomic_fetch_add(&bt->next, 1, __ATOMIC_RELAXED);
        if (i >= bt->n || __atomic_load_n(&bt->rc, __ATOMIC_RELAXED))
            break;
        uint64_t at = bt->link_order ? bt->link_order[i] : i;
        int rc = link_node(bt->b, &bt->view, c, bt->first + at);
        if (rc) {
            batch_fail(bt, rc);
            break;
        }
        KEEL_STORE_RELEASE(&bt->linked[at], (uint8_t)1);
        uint64_t d = __atomic_add_fetch(&bt->done, 1, __ATOMIC_RELAXED);
        if (!reporter || (!b->progress && !b->cancel))
            continue;
        double t = keel__now_s();
        if (b->cancel && t - asked >= 0.05) {
            asked = t;
            if (b->cancel(b->cancel_arg)) {
                batch_fail(bt, KEEL_ECANCELED);
                break;
            }
        }
        if (b->progress && t - last >= 0.1) {
            last = t;
            b->progress(d, bt->n, b->progress_arg);
        }
    }
}

/* Makes the journal bits for the slots below first (kept by the store
** between calls: they are all clear then). */
static int
journal_bits_ready(keel_store *st, uint64_t first)
{
    uint64_t i;
    uint32_t last = keel__slot_segment(&st->g, first - 1, &i);
    for (uint32_t k = 0; k <= last; k++)
        if (!st->journal_bits[k] &&
            !(st->journal_bits[k] =
                  keel__calloc((size_t)((st->seg[k].slots + 63) / 64), 8)))
            return KEEL_ENOMEM;
    return KEEL_OK;
}

typedef struct worker {
    batch *bt;
    keel_search_ctx *ctx;
    pthread_t tid;
} worker;

static void *
worker_main(void *arg)
{
    worker *w = arg;
    batch_work(w->bt, w->ctx, 0);
    return NULL;
}

static int
float_cmp(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Squared Euclidean distance between the stored vectors of slots a and b
** (whatever the metric: this measures where vectors lie). */
static float
slot_l2sq(const keel_graph *gr, uint64_t a, uint64_t b, float *buf)
{
    const float *x = keel__graph_vec_f32(gr, a, buf);
    return keel__kernels()->l2sq[gr->precision](x, keel__store_vec(gr->st, b),
                                                gr->dim);
}

/* Whether slots [first, first + n) in slot order walk through space: the
** median distance between neighbouring slots under half the median
** between random pairs, over 256 of each drawn from a fixed seed (steps at
** random places: evenly spaced ones can all fall on the borders of classes
** of equal size, 256 classes of 80 sorted by class measured 0.98). */
static int
order_follows_space(const keel_graph *gr, uint64_t first, uint64_t n,
                    float *buf)
{
    enum { S = 256 };
    float next[S], any[S];
    uint64_t z = 0x5EED0F0DDE5ull ^ n;
    for (uint32_t i = 0; i < S; i++) {
        uint64_t t = first + keel__splitmix64(&z) % (n - 1);
        next[i] = slot_l2sq(gr, t, t + 1, buf);
        any[i] = slot_l2sq(gr, first + keel__splitmix64(&z) % n,
                           first + keel__splitmix64(&z) % n, buf);
    }
    qsort(next, S, sizeof *next, float_cmp);
    qsort(any, S, sizeof *any, float_cmp);
    /* Squared distances: half the distance is a quarter. */
    return next[S / 2] < 0.25f * any[S / 2];
}

/* The order a batch of n nodes is linked in: slot order (NULL), which is
** the order the caller gave them, unless that order walks through space
** (input sorted by cluster or category): then a permutation from a fixed
** seed, the same for the same n on every run (the caller frees it). HNSW
** linked in an order that follows the vectors leaves whole regions with no
** links in from the rest: of 10,000 vectors in 50 tight clusters handed
** over cluster by cluster, 772 could not be found (test_link_order). An
** order that does not (GloVe-100's, by word frequency: 0.79) is kept,
** since a shuffle of it lost 0.008-0.018 recall at equal ef. */
static uint32_t *
link_order(const keel_graph *gr, uint64_t first, uint64_t n)
{
    if (n < KEEL_LINK_SHUFFLE_MIN || n > UINT32_MAX)
        return NULL;
    float *buf = keel__malloc(gr->dim * sizeof *buf);
    if (!buf)
        return NULL;
    int spatial = order_follows_space(gr, first, n, buf);
    keel__free(buf);
    uint32_t *p = spatial ? keel__malloc((size_t)n * sizeof *p) : NULL;
    if (!p)
        return NULL;
    for (uint64_t i = 0; i < n; i++)
        p[i] = (uint32_t)i;
    uint64_t z = 0x6B6565C0DE5EED00ull ^ n;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = keel__splitmix64(&z) % (i + 1);
        uint32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

int
keel__build_link(keel_builder *b, keel_search_ctx *ctx, uint64_t first,
                 uint64_t n, uint32_t threads)
{
    keel_graph *gr = b->gr;
    keel_store *st = gr->st;
    uint32_t *shuffled = link_order(gr, first, n);
    batch bt = {.b = b, .link_order = shuffled, .first = first, .n = n};
    bt.view.st = st;
    bt.view.limit = bt.view.count = first + n;
    bt.linked = keel__calloc((size_t)n, 1);
    if (!bt.linked) {
        keel__free(shuffled);
        return KEEL_ENOMEM;
    }
    bt.view.linked = bt.linked;
    bt.view.linked_base = first;

    /* Small batches are not worth a thread. */
    uint64_t useful = n / 256;
    if (threads > useful)
        threads = (uint32_t)KEEL_MAX(useful, 1);
    /* Nodes that existed before the call: one journal per thread. */
    keel_journal *js = NULL;
    uint64_t undo_mark = 0;
    if (first > 0) {
        js = keel__calloc(threads, sizeof *js);
        if (!js || journal_bits_ready(st, first)) {
            keel__free(js);
            keel__free(bt.linked);
            keel__free(shuffled);
            return KEEL_ENOMEM;
        }
        for (uint32_t t = 0; t < threads; t++)
            js[t].before = first;
        undo_mark = keel__undo_mark(st);
        ctx->link.journal = &js[0];
    }
    /* The batch's closed sets (graph.h invariant 4): prunings then measure
     * the entries a list's own selection chose only against the others.
     * Without the memory, every entry is measured: the same lists. */
    if (gr->M0 <= 64 && !keel__build_measure_all) {
        gr->closed = keel__calloc((size_t)n, sizeof *gr->closed);
        gr->closed_base = first;
        gr->closed_n = gr->closed ? n : 0;
    }
    worker *ws = NULL;
    uint32_t started = 0;
    if (threads > 1) {
        ws = keel__calloc(threads - 1, sizeof *ws);
        if (!ws) {
            keel__free(gr->closed);
            gr->closed = NULL;
            ctx->link.journal = NULL;
            keel__free(js);
            keel__free(bt.linked);
            keel__free(shuffled);
            return KEEL_ENOMEM;
        }
        for (uint32_t t = 0; t < threads - 1; t++) {
            ws[t].bt = &bt;
            ws[t].ctx = keel__search_ctx_new(gr);
            if (ws[t].ctx)
                ws[t].ctx->link.journal = js ? &js[t + 1] : NULL;
            if (!ws[t].ctx ||
                pthread_create(&ws[t].tid, NULL, worker_main, &ws[t]) != 0) {
                keel__search_ctx_free(ws[t].ctx);
                break;
            }
            started++;
        }
    }
    batch_work(&bt, ctx, 1);
    for (uint32_t t = 0; t < started; t++) {
        pthread_join(ws[t].tid, NULL);
        keel__search_ctx_free(ws[t].ctx);
    }
    keel__free(ws);
    keel__free(gr->closed);
    gr->closed = NULL;
    gr->closed_n = 0;
    keel__free(bt.linked);
    keel__free(shuffled);
    ctx->link.journal = NULL;
    int undo_rc = KEEL_OK;
    if (js) {
        /* The lists of nodes that existed before the call, back as they
         * were on failure: the journal's, then the log's. */
        for (uint32_t t = 0; t < threads; t++)
            keel__graph_journal_end(gr, &js[t], bt.rc != KEEL_OK);
        keel__free(js);
        if (bt.rc)
            undo_rc = keel__undo_restore(st, undo_mark);
    }
    if (bt.rc) {
        /* Nothing of the batch is published; the nodes that did link may
         * have raised the working entry point: back to the store's. */
        uint32_t e, l;
        keel__store_entry(st, &e, &l);
        KEEL_STORE_RELEASE(&b->entry_packed, (uint64_t)l << 32 | e);
        if (undo_rc)
            return undo_rc;
        if (bt.rc == KEEL_ECANCELED)
            return keel__fail(bt.rc, "cancelled after linking %llu of %llu "
                              "vectors\nhelp: the cancel callback "
                              "(keel_set_cancel) asked to stop; the call "
                              "changed nothing",
                              (unsigned long long)bt.done,
                              (unsigned long long)n);
        if (bt.rc != KEEL_ENOMEM && strstr(bt.msg, "\nhelp: "))
            return keel__fail(bt.rc, "%s", bt.msg);
        return keel__fail(bt.rc, "out of memory while linking %llu vectors\n"
                          "help: free memory, or add smaller batches",
                          (unsigned long long)n);
    }
    if (b->progress)
        b->progress(n, n, b->progress_arg);
    /* Slots first, then the entry point: a search that sees the new entry
     * also sees the slots it needs (keel__store_view reads in that order). */
    keel__store_publish(st, first + n);
    uint64_t e = KEEL_LOAD_ACQUIRE(&b->entry_packed);
    keel__store_set_entry(st, (uint32_t)e, (uint32_t)(e >> 32));
    return KEEL_OK;
}
