/* codes.c -- coding vectors and queries into traversal codes (codes.h).
**
** Plain C with no contraction-sensitive expression: the division and the
** rounding are correctly rounded IEEE operations, sums of squares are taken
** in double, so a row is the same bytes on every machine (codes.h (1)).
*/
#include "base/internal.h"

#include <math.h>

#include "hnsw/codes.h"

/* s and the codes of x: s = max|x_i| / 127 (0 for the zero vector). */
static float
code_scale(const float *x, uint32_t dim)
{
    float mx = 0.0f;
    for (uint32_t i = 0; i < dim; i++) {
        float a = fabsf(x[i]);
        if (a > mx)
            mx = a;
    }
    return mx / 127.0f;
}

static int
code_of(float x, float s)
{
    if (s == 0.0f)
        return 0;
    float r = roundf(x / s);
    return r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r;
}

void
keel__code_encode(const float *x, uint32_t dim, uint8_t *row,
                  uint32_t row_bytes)
{
    memset(row, 0, row_bytes);
    float s = code_scale(x, dim);
    double sq = 0;
    int32_t sum = 0;
    int8_t *c = (int8_t *)(row + CODE_BYTES_AT);
    for (uint32_t i = 0; i < dim; i++) {
        int v = code_of(x[i], s);
        c[i] = (int8_t)v;
        sq += (double)v * v;
        sum += v;
    }
    float n = (float)((double)s * s * sq);
    memcpy(row + CODE_SCALE, &s, 4);
    memcpy(row + CODE_NORM, &n, 4);
    memcpy(row + CODE_SUM, &sum, 4);
}

void
keel__code_encode_stored(const void *stored, int precision, uint32_t dim,
                         float *tmp, uint8_t *row, uint32_t row_bytes)
{
    const float *x = stored;
    if (precision == KEEL_F16) {
        keel__f16_to_f32_n(stored, tmp, dim);
        x = tmp;
    }
    keel__code_encode(x, dim, row, row_bytes);
}

void
keel__code_query(const float *q, uint32_t dim, int l2, keel_code_query *cq)
{
    float s = code_scale(q, dim);
    double n = 0;
    for (uint32_t i = 0; i < dim; i++) {
        cq->qu[i] = (uint8_t)(code_of(q[i], s) + 128);
        n += (double)q[i] * q[i];
    }
    cq->scale = s;
    cq->norm = (float)n;
    cq->l2 = l2;
}
