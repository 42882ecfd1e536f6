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

/* The loops below keep LANES (or four) independent partial results, each
** lane a fixed set of elements, so the compiler runs them as vector
** operations (GCC at -O2 leaves a plain loop over dim scalar). Every
** element goes through the same operations as in a plain loop, so codes
** and maxima are the same bits; a query's sums of squares are taken lane
** by lane and then pairwise: a fixed order, the same on every machine. */
enum { LANES = 8 };

/* Four floats in the compiler's vector type (SSE2 on x86-64, NEON on
** arm64). */
typedef float f32x4 __attribute__((vector_size(16)));

/* y = v - c as f32 (v widened from f16 when precision says so). */
static void
centred(const void *v, int precision, const float *c, uint32_t dim,
        float *y)
{
    const float *x = v;
    if (precision == KEEL_F16) {
        keel__f16_to_f32_n(v, y, dim);
        x = y;
    }
    if (!c) {
        if (x != y)
            memcpy(y, x, dim * sizeof(float));
        return;
    }
    /* One pass from x into y: a copy and then y -= c in place ran scalar,
     * 1.65% of a Fashion-MNIST search's samples at ef 12 against 0.26% for
     * this (perf). x is y in f16, where each element is read before it is
     * written. */
    size_t i = 0;
    for (; i + 4 <= dim; i += 4) {
        f32x4 a, b;
        memcpy(&a, x + i, sizeof a);
        memcpy(&b, c + i, sizeof b);
        a -= b;
        memcpy(y + i, &a, sizeof a);
    }
    for (; i < dim; i++)
        y[i] = x[i] - c[i];
}

/* s = max|y_i| / top (0 for the zero vector; NaN components count as 0):
** top 127 for 8-bit codes, 7 for 4-bit ones. */
static float
code_scale(const float *y, uint32_t dim, float top)
{
    float mx[LANES] = {0};
    uint32_t i = 0;
    for (; i + LANES <= dim; i += LANES)
        for (int j = 0; j < LANES; j++) {
            float a = fabsf(y[i + j]);
            mx[j] = a > mx[j] ? a : mx[j];
        }
    for (; i < dim; i++) {
        float a = fabsf(y[i]);
        mx[0] = a > mx[0] ? a : mx[0];
    }
    float m = 0.0f;
    for (int j = 0; j < LANES; j++)
        m = mx[j] > m ? mx[j] : m;
    return m / top;
}

/* r = y / s rounded half away from zero (roundf), clamped to -127..127, 0
** for NaN (a damaged centre: no code is right, none is undefined). The
** rounding is done here rather than by libm's roundf, a call per element
** that took a third of a 784-d query's coding: past the clamp |r| <= 127,
** so its integer part converts exactly and r - i is exact. */
static inline int
code_of(float r)
{
    r = r != r ? 0.0f : r;
    r = r > 127.0f ? 127.0f : r;
    r = r < -127.0f ? -127.0f : r;
    int i = (int)r; /* toward zero */
    float f = r - (float)i;
    return i + (f >= 0.5f) - (f <= -0.5f);
}

/* code_of on four floats at once, in the compiler's vector types (SSE2 on
** x86-64, NEON on arm64): the same operations per element, so the same
** codes. A comparison gives -1 where it holds. */
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef uint8_t u8x4 __attribute__((vector_size(4)));

static inline i32x4
code_of4(f32x4 r)
{
    const f32x4 top = {127.0f, 127.0f, 127.0f, 127.0f};
    const f32x4 half = {0.5f, 0.5f, 0.5f, 0.5f};
    i32x4 bits = (i32x4)r & ~(r != r);
    i32x4 hi = (f32x4)bits > top, lo = (f32x4)bits < -top;
    bits = (bits & ~(hi | lo)) | ((i32x4)top & hi) | ((i32x4)-top & lo);
    r = (f32x4)bits;
    i32x4 i = __builtin_convertvector(r, i32x4); /* toward zero */
    f32x4 f = r - __builtin_convertvector(i, f32x4);
    return i - (f >= half) + (f <= -half);
}

/* out[i] = code_of(y[i] / s) + bias, every code 0 when s is 0. */
static void
codes_of(const float *y, float s, uint32_t dim, int bias, uint8_t *out)
{
    if (s == 0.0f) {
        memset(out, bias, dim);
        return;
    }
    const f32x4 s4 = {s, s, s, s};
    const i32x4 b4 = {bias, bias, bias, bias};
    uint32_t i = 0;
    for (; i + 4 <= dim; i += 4) {
        f32x4 y4;
        memcpy(&y4, y + i, sizeof y4);
        u8x4 c = __builtin_convertvector(code_of4(y4 / s4) + b4, u8x4);
        memcpy(out + i, &c, 4);
    }
    for (; i < dim; i++)
        out[i] = (uint8_t)(code_of(y[i] / s) + bias);
}

/* The sum of a[i] * b[i] in double, lane by lane, then pairwise. */
static double
dot_double(const float *a, const float *b, uint32_t dim)
{
    double acc[LANES] = {0};
    uint32_t i = 0;
    for (; i + LANES <= dim; i += LANES)
        for (int j = 0; j < LANES; j++)
            acc[j] += (double)a[i + j] * b[i + j];
    for (; i < dim; i++)
        acc[i % LANES] += (double)a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
           ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* 4-bit codes of y at scale s (code_scale's top 7) packed as codes.h
** describes: each 32 dimensions in 16 bytes, code + 8 in the low nibble
** for the first 16 and in the high nibble for the next 16. Adds each code
** and its square into *sum and *sq. */
static void
pack_nibbles(const float *y, float s, uint32_t dim, uint8_t *out,
             int32_t *sum, int64_t *sq)
{
    int8_t block[32];
    for (uint32_t b = 0; b < dim; b += 32) {
        uint32_t n = KEEL_MIN(dim - b, 32u);
        memset(block, 0, sizeof block);
        codes_of(y + b, s, n, 0, (uint8_t *)block);
        for (uint32_t j = 0; j < n; j++) {
            /* Past 7 only when s is a denormal that lost its digits. */
            block[j] = block[j] > 7 ? 7 : block[j] < -7 ? -7 : block[j];
            *sum += block[j];
            *sq += block[j] * block[j];
        }
        for (uint32_t j = 0; j < 16; j++) {
            unsigned lo = j < n ? (unsigned)(block[j] + 8) : 0;
            unsigned hi = j + 16 < n ? (unsigned)(block[j + 16] + 8) : 0;
            out[b / 2 + j] = (uint8_t)(lo | hi << 4);
        }
    }
}

void
keel__code_encode(const void *v, int precision, const float *c, uint32_t dim,
                  int codes, float *tmp, uint8_t *row, uint32_t row_bytes)
{
    fp_state fs;
    fp_fix(&fs);
    centred(v, precision, c, dim, tmp);
    memset(row, 0, row_bytes);
    /* Integer sums: exact in any order. */
    int64_t sq = 0;
    int32_t sum = 0;
    float s;
    if (codes == KEEL_CODES_I4) {
        s = code_scale(tmp, dim, 7.0f);
        pack_nibbles(tmp, s, dim, row + CODE_BYTES_AT, &sum, &sq);
    } else {
        s = code_scale(tmp, dim, 127.0f);
        int8_t *code = (int8_t *)(row + CODE_BYTES_AT);
        codes_of(tmp, s, dim, 0, (uint8_t *)code);
        for (uint32_t i = 0; i < dim; i++) {
            sq += code[i] * code[i];
            sum += code[i];
        }
    }
    float n = (float)((double)s * s * (double)sq);
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
                 int codes, keel_code_query *cq)
{
    fp_state fs;
    fp_fix(&fs);
    const float *x = q;
    double qc = 0;
    if (l2 && c) {
        centred(q, KEEL_F32, c, dim, cq->tmp);
        x = cq->tmp;
    } else if (c) {
        qc = dot_double(q, c, dim);
    }
    float s = code_scale(x, dim, 127.0f);
    codes_of(x, s, dim, 128, cq->qu);
    /* 4-bit rows hold code + 8 in whole blocks of 32: the query's bytes
     * past dim are zero, and the kernel's sum is less 8 times its bytes'. */
    cq->bias = 0;
    if (codes == KEEL_CODES_I4) {
        memset(cq->qu + dim, 0, KEEL_CODE_QUERY_BYTES(dim) - dim);
        int32_t t = 0;
        for (uint32_t i = 0; i < dim; i++)
            t += cq->qu[i];
        cq->bias = 8 * t;
    }
    double n = dot_double(x, x, dim);
    cq->scale = s;
    cq->norm = (float)n;
    cq->qc = (float)qc;
    cq->l2 = l2;
    fp_restore(&fs);
}
