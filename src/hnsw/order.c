/* order.c -- the slot order of a batch: recursive halving along the line
** between two far vectors (order.h).
*/
#include "base/internal.h"

#include <math.h>

#include "hnsw/dist.h"
#include "hnsw/order.h"

/* Parts of at most this many rows keep the batch's order. */
#define ORDER_LEAF 64u

typedef struct order_item {
    float key;
    uint32_t row;
} order_item;

typedef struct order_ctx {
    uint32_t dim;
    int cosine;
    keel_order_row_fn row;
    void *arg;
    const float *inv;        /* cosine: 1 / |row i| */
    float *buf;              /* a row as read */
    float *ref, *dir;        /* the far search's reference; the line */
    keel_dist_fn l2sq, dot;
} order_ctx;

/* a before b: by key, then row (rows differ: a strict total order, so
** which rows end up in each half is the same whatever the algorithm). */
static inline int
item_before(order_item a, order_item b)
{
    return a.key < b.key || (a.key == b.key && a.row < b.row);
}

/* Sorts it[0..n) (heapsort: n log n whatever the input). */
static void
sift_down(order_item *it, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && item_before(it[c], it[c + 1]))
            c++;
        if (!item_before(it[i], it[c]))
            return;
        order_item t = it[i];
        it[i] = it[c];
        it[c] = t;
        i = c;
    }
}

static void
heap_sort(order_item *it, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(it, i, n);
    for (size_t end = n; end-- > 1;) {
        order_item t = it[0];
        it[0] = it[end];
        it[end] = t;
        sift_down(it, 0, end);
    }
}

/* Moves the k smallest of it[0..n) to it[0..k): quickselect with Hoare
** partitions around the median of three (for three or more distinct
** items it is neither the least nor the greatest, so both sides of a
** partition are non-empty), small ranges by insertion sort. Inputs that
** make the median of three a poor pivot every time (points on a line,
** far end first, cut off two items a round: quadratic) get a heapsort of
** what is left once the rounds pass twice the depth a good pivot needs. */
static void
select_smallest(order_item *it, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    unsigned rounds = 0, budget = 8;
    for (size_t m = n; m > 1; m >>= 1)
        budget += 2;
    while (hi - lo > 16) {
        if (rounds++ == budget) {
            heap_sort(it + lo, hi - lo);
            return;
        }
        order_item a = it[lo], b = it[lo + (hi - lo) / 2], c = it[hi - 1];
        order_item p = item_before(a, b)
                           ? (item_before(b, c) ? b : item_before(a, c) ? c : a)
                           : (item_before(a, c) ? a : item_before(b, c) ? c : b);
        size_t i = lo, j = hi - 1;
        for (;;) {
            while (item_before(it[i], p))
                i++;
            while (item_before(p, it[j]))
                j--;
            if (i >= j)
                break;
            order_item t = it[i];
            it[i++] = it[j];
            it[j--] = t;
        }
        /* it[lo..j] before or equal to p, it[j+1..hi) after or equal. */
        if (k <= j)
            hi = j + 1;
        else
            lo = j + 1;
    }
    for (size_t i = lo + 1; i < hi; i++) {
        order_item x = it[i];
        size_t j = i;
        for (; j > lo && item_before(x, it[j - 1]); j--)
            it[j] = it[j - 1];
        it[j] = x;
    }
}

/* Row i as read (any length). */
static inline const float *
row_of(order_ctx *o, uint32_t i)
{
    return o->row(o->arg, i, o->buf);
}

/* The row's length as it is compared: 1 / |row| for cosine, else 1. */
static inline float
scale_of(const order_ctx *o, uint32_t i)
{
    return o->cosine ? o->inv[i] : 1.0f;
}

/* Copies row i as compared (unit length for cosine) to out. */
static void
copy_row(order_ctx *o, uint32_t i, float *out)
{
    const float *x = row_of(o, i);
    float s = scale_of(o, i);
    for (uint32_t j = 0; j < o->dim; j++)
        out[j] = x[j] * s;
}

/* The row of part[0..n) farthest from o->ref (the first of equals). On
** unit vectors the squared distance is 2 - 2 dot, so cosine compares
** -dot, the row's own length divided out. */
static uint32_t
farthest(order_ctx *o, const uint32_t *part, size_t n)
{
    uint32_t best = part[0];
    float far = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        const float *x = row_of(o, part[i]);
        float d = o->cosine ? -o->dot(o->ref, x, o->dim) * o->inv[part[i]]
                            : o->l2sq(o->ref, x, o->dim);
        if (d > far) {
            far = d;
            best = part[i];
        }
    }
    return best;
}

/* Splits part[0..n) at its median along the line from its far vector b to
** the vector c farthest from b: the nearer half to b first. */
static void
split_part(order_ctx *o, uint32_t *part, size_t n, order_item *items)
{
    copy_row(o, part[n / 2], o->ref);
    uint32_t b = farthest(o, part, n);
    copy_row(o, b, o->ref);
    uint32_t c = farthest(o, part, n);
    copy_row(o, c, o->dir);
    for (uint32_t j = 0; j < o->dim; j++)
        o->dir[j] -= o->ref[j];
    for (size_t i = 0; i < n; i++) {
        float k = o->dot(o->dir, row_of(o, part[i]), o->dim) *
                  scale_of(o, part[i]);
        /* NaN (an overflowing product) would break the order. */
        items[i].key = k == k ? k : 0.0f;
        items[i].row = part[i];
    }
    select_smallest(items, n, n / 2);
    for (size_t i = 0; i < n; i++)
        part[i] = items[i].row;
}

uint32_t *
keel__order_batch(size_t n, uint32_t dim, int cosine, keel_order_row_fn row,
                  void *arg, keel_cancel_fn cancel, void *cancel_arg)
{
    if (n < KEEL_ORDER_MIN_BATCH || n > UINT32_MAX)
        return NULL;
    const keel_kernels *k = keel__kernels();
    order_ctx o = {.dim = dim, .cosine = cosine, .row = row, .arg = arg,
                   .l2sq = k->l2sq[KEEL_F32], .dot = k->dot[KEEL_F32]};
    uint32_t *order = keel__malloc(n * sizeof *order);
    order_item *items = keel__malloc(n * sizeof *items);
    float *inv = cosine ? keel__malloc(n * sizeof *inv) : NULL;
    float *space = keel__malloc(3 * (size_t)dim * sizeof *space);
    if (!order || !items || (cosine && !inv) || !space) {
        keel__free(order);
        keel__free(items);
        keel__free(inv);
        keel__free(space);
        return NULL;
    }
    o.buf = space;
    o.ref = space + dim;
    o.dir = space + 2 * (size_t)dim;
    for (size_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    if (cosine) {
        /* In double: the squares of a long vector may pass FLT_MAX. */
        for (size_t i = 0; i < n; i++) {
            const float *x = row(arg, i, o.buf);
            double s = 0;
            for (uint32_t j = 0; j < dim; j++)
                s += (double)x[j] * x[j];
            inv[i] = s > 0 ? (float)(1.0 / sqrt(s)) : 0.0f;
        }
        o.inv = inv;
    }
    /* Parts still to halve; each halving pushes two, the first popped
     * next, so the stack never holds more than one part per level (at most
     * 32 levels for n < 2^32). */
    struct {
        size_t lo, n;
    } stack[72];
    size_t top = 0;
    stack[top].lo = 0;
    stack[top++].n = n;
    double asked = keel__now_s();
    while (top) {
        size_t lo = stack[--top].lo, m = stack[top].n;
        if (m <= ORDER_LEAF)
            continue;
        /* Asked every 0.05 s, as a batch's linking asks (build.c). */
        if (cancel && keel__now_s() - asked >= 0.05) {
            asked = keel__now_s();
            if (cancel(cancel_arg)) {
                keel__free(order);
                order = NULL;
                break;
            }
        }
        split_part(&o, order + lo, m, items);
        stack[top].lo = lo + m / 2;
        stack[top++].n = m - m / 2;
        stack[top].lo = lo;
        stack[top++].n = m / 2;
    }
    keel__free(items);
    keel__free(inv);
    keel__free(space);
    return order;
}
