/* codes.h -- traversal codes: the int8 copy of each vector that searches
** walk the graph on (keel_options.codes = KEEL_CODES_I8).
**
** A code row (doc/format.md 3) holds x's scale s = max|x_i| / 127, the
** codes c_i = round(x_i / s) in -127..127, s^2 sum c_i^2 and sum c_i, so
** s c approximates x. A query is coded the same way into unsigned bytes
** (its codes + 128), and the walk's distance comes from one exact integer
** dot product (dist.h invariant 4) and a few float operations, the same on
** every machine and kernel table. The results a search returns are then
** measured again on the stored vectors (search.c), so codes decide which
** nodes a walk visits, never a reported distance.
**
** Invariants:
**   (1) A row is a pure function of the stored vector (widened to f32 in
**       f16 files): keel_check recomputes every committed row and compares
**       bytes.
**   (2) Bytes of a row past 16 + dim are zero.
*/
#ifndef KEEL_CODES_H
#define KEEL_CODES_H

#include "hnsw/dist.h"

#include <string.h>

/* Row layout. */
enum { CODE_SCALE = 0, CODE_NORM = 4, CODE_SUM = 8, CODE_BYTES_AT = 16 };

/* Writes the row of x (dim floats) into row (row_bytes, from
** keel__code_row_bytes). */
void keel__code_encode(const float *x, uint32_t dim, uint8_t *row,
                       uint32_t row_bytes);

/* The row of a stored vector (f32 or f16, widened into tmp: dim floats). */
void keel__code_encode_stored(const void *stored, int precision, uint32_t dim,
                              float *tmp, uint8_t *row, uint32_t row_bytes);

/* A query as the walk compares it with rows. */
typedef struct keel_code_query {
    uint8_t *qu;              /* dim bytes: the query's codes + 128 */
    float scale;              /* its s */
    float norm;               /* sum q_i^2 (L2) */
    int l2;                   /* 1: squared L2; 0: 1 - dot */
} keel_code_query;

/* Codes query q (dim floats) into cq (cq->qu has room for dim bytes). */
void keel__code_query(const float *q, uint32_t dim, int l2,
                      keel_code_query *cq);

/* The walk's distance from cq to a row: the metric's internal distance
** (squared L2, or 1 - dot) between the two coded vectors. */
static inline float
keel__code_dist(keel_code_dot_fn dot, const keel_code_query *cq,
                const uint8_t *row, uint32_t dim)
{
    float s, n;
    int32_t sum;
    memcpy(&s, row + CODE_SCALE, 4);
    memcpy(&n, row + CODE_NORM, 4);
    memcpy(&sum, row + CODE_SUM, 4);
    int32_t d = dot(cq->qu, (const int8_t *)(row + CODE_BYTES_AT), dim) -
                128 * sum;
    float qx = cq->scale * s * (float)d;
    return cq->l2 ? cq->norm - 2.0f * qx + n : 1.0f - qx;
}

#endif /* KEEL_CODES_H */
