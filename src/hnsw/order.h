/* order.h -- which slots a batch's vectors take: near vectors in
** neighbouring slots.
**
** A search reads the records, code rows and vectors of the slots it visits;
** the nodes one walk visits are near each other, so with near vectors in
** neighbouring slots they share more pages and lines. Measured
** (doc/search_tuning.md, alternated runs on the same data): Fashion-MNIST
** 3-8% more queries per second at equal ef; GloVe-100 cosine and L2
** within their noise. The nodes are still linked in the caller's order
** (build.h): linked in this order, builds took 20-44% less CPU time, but
** GloVe-100 L2's graph lost 0.005-0.009 recall at equal ef.
**
** The order halves the batch recursively: each part is cut at the median of
** its vectors' positions along the line between two of them far apart (the
** one farthest from its middle vector, then the one farthest from that),
** the half nearer the first of the two first, down to parts of at most 64
** vectors, which keep the order the halving left them in. About 0.4 s for
** GloVe-100's 340k vectors, 0.2 s for Fashion-MNIST's 60k.
**
** Invariants:
**   (1) The result is a permutation of 0..n-1 and a function of the
**       vectors' values alone for one kernel table (dist.h): positions
**       break ties between equal keys, so each half is one set whatever
**       the selection does, and no thread or random number takes part; a
**       batch is laid out the same on every run of a machine.
**   (2) Ids are not touched: the caller gives row order[t] slot first + t
**       and keeps that row's id.
*/
#ifndef KEEL_ORDER_H
#define KEEL_ORDER_H

#include "keel.h"

#include <stddef.h>
#include <stdint.h>

/* Batches of fewer vectors keep their order. */
#define KEEL_ORDER_MIN_BATCH 1024u

/* Row i of the batch as dim floats: a pointer into the caller's data, or
** buf (dim floats) filled. */
typedef const float *(*keel_order_row_fn)(void *arg, size_t i, float *buf);

/* The slot order of a batch of n rows (dim floats each, read through row):
** a keel__malloc'd array of n row numbers, order[t] taking the batch's
** t-th slot. cosine: rows are compared by angle (their lengths
** ignored), else by Euclidean distance. cancel (may be NULL) is asked
** every 0.05 s and stops the work when it says so. NULL when n is below
** KEEL_ORDER_MIN_BATCH or above 2^32 - 1, memory is short or cancel said
** stop: the caller then keeps the batch's order (and its own cancel check
** ends the call). */
uint32_t *keel__order_batch(size_t n, uint32_t dim, int cosine,
                            keel_order_row_fn row, void *arg,
                            keel_cancel_fn cancel, void *cancel_arg);

#endif /* KEEL_ORDER_H */
