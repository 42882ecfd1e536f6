/* codes.h -- traversal codes: the compact copy of each vector that
** searches walk the graph on (keel_options.codes = KEEL_CODES_I8 or _I4).
**
** Every vector x is coded relative to the index's centre c (the mean of
** the vectors of the file's first add, kept at the start of heap chunk 0:
** doc/format.md 3): y = x - c, s = max|y_i| / T, codes c_i = round(y_i /
** s) in -T..T, so c + s codes approximates x; T is 127 for 8-bit codes and
** 7 for 4-bit ones. Centring keeps a component that every vector shares (an
** offset, an outlier dimension of a model's embeddings) from taking the
** whole range. A row holds s, s^2 sum c_i^2, sum c_i and the codes: one
** signed byte each (I8), or c_i + 8 in a nibble (I4: each 32 dimensions in
** 16 bytes, the first 16 in the low nibbles, the next 16 in the high ones,
** so a kernel unpacks a block with one mask and one shift). A query is coded
** with T = 127 into unsigned bytes (codes + 128) for either; the walk's
** distance comes from one exact integer dot product (dist.h invariant 4)
** and a few float operations:
**   L2:        q' = q - c coded; |q' - y|^2 = |q'|^2 - 2 q'.y + |y|^2
**   cosine/IP: q coded;          q.x = q.c + q.y
** The results a search returns are measured again on the stored vectors
** (search.c), so codes decide which nodes a walk visits, never a reported
** distance.
**
** Invariants:
**   (1) A row is a pure function of the stored vector (widened to f32 in
**       f16 files), the centre and the kind of codes: coding runs in a
**       fixed floating-point environment (round to nearest, no flush to
**       zero, no denormals as zero), whatever the calling process set, so
**       keel_check in any process recomputes every committed row and
**       compares bytes.
**   (2) Bytes of a row past its codes are zero, and so are the nibbles of
**       a 4-bit row past dim.
*/
#ifndef KEEL_CODES_H
#define KEEL_CODES_H

#include "hnsw/dist.h"

#include <string.h>

/* Row layout. */
enum { CODE_SCALE = 0, CODE_NORM = 4, CODE_SUM = 8, CODE_BYTES_AT = 16 };

/* Writes the row of stored vector v (f32, or f16 with precision KEEL_F16)
** about centre c (dim floats) into row (row_bytes, from
** keel__code_row_bytes) as codes (KEEL_CODES_I8 or _I4); tmp: dim floats of
** scratch. */
void keel__code_encode(const void *v, int precision, const float *c,
                       uint32_t dim, int codes, float *tmp, uint8_t *row,
                       uint32_t row_bytes);

/* The centre as a mean: keel__code_centre_add adds stored vector v (f32 or
** f16) into sum (dim doubles, zero at first; tmp: dim floats of scratch);
** keel__code_centre_end writes the mean of n added into c (dim floats). */
void keel__code_centre_add(const void *v, int precision, uint32_t dim,
                           double *sum, float *tmp);
void keel__code_centre_end(const double *sum, size_t n, uint32_t dim,
                           float *c);

/* A query as the walk compares it with rows. */
typedef struct keel_code_query {
    uint8_t *qu;              /* the query's codes + 128: dim bytes, and
                               * zeros to a multiple of 32 for 4-bit rows
                               * (room for KEEL_CODE_QUERY_BYTES(dim)) */
    float *tmp;               /* dim floats of scratch */
    float scale;              /* its s */
    float norm;               /* L2: |q - c|^2 */
    float qc;                 /* cosine/IP: q.c */
    int32_t bias;             /* 4-bit rows: 8 sum qu (their + 8); else 0 */
    int l2;                   /* 1: squared L2; 0: 1 - dot */
} keel_code_query;

/* The room keel_code_query.qu needs. */
#define KEEL_CODE_QUERY_BYTES(dim) (((size_t)(dim) + 31) / 32 * 32)

/* Codes query q (dim floats) about centre c into cq, for rows of the
** given kind of codes. */
void keel__code_query(const float *q, const float *c, uint32_t dim, int l2,
                      int codes, keel_code_query *cq);

/* The walk's distance from cq to a row: the metric's internal distance
** (squared L2, or 1 - dot) between the query and the coded vector; dot is
** the kernel table's code_dot for 8-bit rows, code4_dot for 4-bit ones. The
** integer terms are taken in 64 bits, so a damaged row gives a wrong
** distance, never an overflow. */
static inline float
keel__code_dist(keel_code_dot_fn dot, const keel_code_query *cq,
                const uint8_t *row, uint32_t dim)
{
    float s, n;
    int32_t sum;
    memcpy(&s, row + CODE_SCALE, 4);
    memcpy(&n, row + CODE_NORM, 4);
    memcpy(&sum, row + CODE_SUM, 4);
    int64_t d = (int64_t)dot(cq->qu, (const int8_t *)(row + CODE_BYTES_AT),
                             dim) - cq->bias - 128 * (int64_t)sum;
    float qy = cq->scale * s * (float)d;
    return cq->l2 ? cq->norm - 2.0f * qy + n : 1.0f - (cq->qc + qy);
}

#endif /* KEEL_CODES_H */
