/* codes.c -- coding vectors and queries into traversal codes (codes.h).
**
** Every function here that computes with floats runs inside fixed_fp():
** round to nearest, denormals kept (x86: MXCSR's FTZ and DAZ off; arm64:
** FPCR.FZ off), then the caller's environment back. A process built with
** -ffast-math (which turns flush-to-zero on at start-up) or one that
** changed the rounding mode therefore codes a vector into the same bytes
** as any other (codes.h invariant (1)). Sums of squares and means are
** taken in double.
*/
#include "base/internal.h"

#include <fenv.h>
#include <math.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "hnsw/codes.h"

/* The caller's floating-point state, saved by fp_fix and put back by
** fp_restore. */
/* On x86-64 float arithmetic is SSE's, whose rounding, flush-to-zero and
** denormals-are-zero all live in MXCSR: that register alone is saved, set
** and put back (fegetround would read the x87 unit's mode, and fesetround
** would set both). Elsewhere the rounding mode goes through fenv.h, and
** arm64's flush-to-zero bit through FPCR. */
typedef struct fp_state {
#if defined(__x86_64__) || defined(__i386__)
    unsigned csr;
#else
    int round;
#if defined(__aarch64__)
    uint64_t fpcr;
#endif
#endif
} fp_state;

static void
fp_fix(fp_state *s)
{
#if defined(__x86_64__) || defined(__i386__)
    s->csr = _mm_getcsr();
    /* FTZ (bit 15), DAZ (bit 6), rounding (bits 13-14) */
    unsigned want = s->csr & ~(0x8000u | 0x0040u | 0x6000u);
    if (want != s->csr)
        _mm_setcsr(want);
#else
    s->round = fegetround();
    if (s->round != FE_TONEAREST)
        fesetround(FE_TONEAREST);
#if defined(__aarch64__)
    __asm__ volatile("mrs %0, fpcr" : "=r"(s->fpcr));
    uint64_t want = s->fpcr & ~((uint64_t)1 << 24); /* FZ */
    if (want != s->fpcr)
        __asm__ volatile("msr fpcr, %0" : : "r"(want));
#endif
#endif
}

static void
fp_restore(const fp_state *s)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(s->csr);
#else
#if defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(s->fpcr));
#endif
    if (s->round != FE_TONEAREST)
        fesetround(s->round);
#endif
}

/* y = v - c as f32 (v widened from f16 when precision says so). */
static void
centred(const void *v, int precision, const float *c, uint32_t dim,
        float *y)
{
    if (precision == KEEL_F16)
        keel__f16_to_f32_n(v, y, dim);
    else
        memcpy(y, v, dim * sizeof(float));
    if (c)
        for (uint32_t i = 0; i < dim; i++)
            y[i] -= c[i];
}

/* s = max|y_i| / 127 (0 for the zero vector). */
static float
code_scale(const float *y, uint32_t dim)
{
    float mx = 0.0f;
    for (uint32_t i = 0; i < dim; i++) {
        float a = fabsf(y[i]);
        if (a > mx)
            mx = a;
    }
    return mx / 127.0f;
}

/* y / s rounded half away from zero (roundf), clamped to -127..127. The
** rounding is done here rather than by libm's roundf, a call per element
** that took a third of a 784-d query's coding: past the clamp |r| < 128,
** so its integer part converts exactly and r - i is exact. */
static int
code_of(float y, float s)
{
    if (s == 0.0f)
        return 0;
    float r = y / s;
    if (r != r) /* a damaged centre: no code is right, none is undefined */
        return 0;
    if (r >= 127.0f)
        return 127;
    if (r <= -127.0f)
        return -127;
    int i = (int)r; /* toward zero */
    float f = r - (float)i;
    return i + (f >= 0.5f) - (f <= -0.5f);
}

void
keel__code_encode(const void *v, int precision, const float *c, uint32_t dim,
                  float *tmp, uint8_t *row, uint32_t row_bytes)
{
    fp_state fs;
    fp_fix(&fs);
    centred(v, precision, c, dim, tmp);
    memset(row, 0, row_bytes);
    float s = code_scale(tmp, dim);
    double sq = 0;
    int32_t sum = 0;
    int8_t *code = (int8_t *)(row + CODE_BYTES_AT);
    for (uint32_t i = 0; i < dim; i++) {
        int k = code_of(tmp[i], s);
        code[i] = (int8_t)k;
        sq += (double)k * k;
        sum += k;
    }
    float n = (float)((double)s * s * sq);
    memcpy(row + CODE_SCALE, &s, 4);
    memcpy(row + CODE_NORM, &n, 4);
    memcpy(row + CODE_SUM, &sum, 4);
    fp_restore(&fs);
}

void
keel__code_centre_add(const void *v, int precision, uint32_t dim,
                      double *sum, float *tmp)
{
    fp_state fs;
    fp_fix(&fs);
    centred(v, precision, NULL, dim, tmp);
    for (uint32_t i = 0; i < dim; i++)
        sum[i] += tmp[i];
    fp_restore(&fs);
}

void
keel__code_centre_end(const double *sum, size_t n, uint32_t dim, float *c)
{
    fp_state fs;
    fp_fix(&fs);
    for (uint32_t i = 0; i < dim; i++)
        c[i] = n ? (float)(sum[i] / (double)n) : 0.0f;
    fp_restore(&fs);
}

void
keel__code_query(const float *q, const float *c, uint32_t dim, int l2,
                 keel_code_query *cq)
{
    fp_state fs;
    fp_fix(&fs);
    const float *x = q;
    double qc = 0;
    if (l2 && c) {
        centred(q, KEEL_F32, c, dim, cq->tmp);
        x = cq->tmp;
    } else if (c) {
        for (uint32_t i = 0; i < dim; i++)
            qc += (double)q[i] * c[i];
    }
    float s = code_scale(x, dim);
    double n = 0;
    for (uint32_t i = 0; i < dim; i++) {
        cq->qu[i] = (uint8_t)(code_of(x[i], s) + 128);
        n += (double)x[i] * x[i];
    }
    cq->scale = s;
    cq->norm = (float)n;
    cq->qc = (float)qc;
    cq->l2 = l2;
    fp_restore(&fs);
}
