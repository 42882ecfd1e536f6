/* dist_neon.c -- the "neon" kernel table for AArch64 (Advanced SIMD).
**
** Owns keel__kernels_neon. Advanced SIMD, FMA and half <-> single
** conversion are part of every AArch64 CPU, so dist.c uses this table there
** without asking the CPU. Everything is inside #if defined(__aarch64__).
**
** The pattern of dist_avx2.c with 4 lanes:
**   - four accumulators of 4 lanes; step i covers 16 floats, block k of it
**     (4 floats) goes to accumulator k;
**   - after the last full step, up to three full blocks go to accumulators
**     0, 1, 2 in turn, and the last 1..3 elements go to accumulator 3 from
**     zero-padded copies of both vectors (nothing is read past either end);
**   - the reduction is (a0+a1)+(a2+a3), then low pair + high pair, then
**     lane 0 + lane 1.
** A stored block is widened to 4 floats (fcvtl for f16, a plain load for
** f32) and then goes through the same instructions: invariant (1). The x4
** kernels share each query block and keep four accumulators per vector,
** updated in the single kernel's order: invariant (2).
*/
#include "base/internal.h"

#include "hnsw/dist.h"
#include "hnsw/dist_isa.h"

#if defined(__aarch64__)

#include <arm_neon.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE float32x4_t
load_v(const void *v, size_t i, int f16)
{
    if (f16) {
        uint16x4_t h = vld1_u16((const uint16_t *)v + i);
        return vcvt_f32_f16(vreinterpret_f16_u16(h));
    }
    return vld1q_f32((const float *)v + i);
}

/* Elements i..i+r-1 (1 <= r <= 3) in lanes 0..r-1, zero elsewhere. */
ALWAYS_INLINE float32x4_t
load_q_tail(const float *q, size_t i, size_t r)
{
    float buf[4] = {0, 0, 0, 0};
    for (size_t j = 0; j < r; j++)
        buf[j] = q[i + j];
    return vld1q_f32(buf);
}

ALWAYS_INLINE float32x4_t
load_v_tail(const void *v, size_t i, size_t r, int f16)
{
    if (f16) {
        const uint16_t *h = (const uint16_t *)v;
        uint16_t buf[4] = {0, 0, 0, 0};
        for (size_t j = 0; j < r; j++)
            buf[j] = h[i + j];
        return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(buf)));
    }
    return load_q_tail((const float *)v, i, r);
}

ALWAYS_INLINE float32x4_t
step(float32x4_t acc, float32x4_t q, float32x4_t v, int dot)
{
    if (dot)
        return vfmaq_f32(acc, q, v);
    float32x4_t d = vsubq_f32(q, v);
    return vfmaq_f32(acc, d, d);
}

ALWAYS_INLINE float
reduce(float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3)
{
    float32x4_t s = vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3));
    float32x2_t x = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vpadds_f32(x);
}

ALWAYS_INLINE float
kernel1(const float *q, const void *v, uint32_t dim, int f16, int dot)
{
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    size_t n = dim, i = 0;

    for (; i + 16 <= n; i += 16) {
        a0 = step(a0, vld1q_f32(q + i), load_v(v, i, f16), dot);
        a1 = step(a1, vld1q_f32(q + i + 4), load_v(v, i + 4, f16), dot);
        a2 = step(a2, vld1q_f32(q + i + 8), load_v(v, i + 8, f16), dot);
        a3 = step(a3, vld1q_f32(q + i + 12), load_v(v, i + 12, f16), dot);
    }
    if (i + 4 <= n) {
        a0 = step(a0, vld1q_f32(q + i), load_v(v, i, f16), dot);
        i += 4;
        if (i + 4 <= n) {
            a1 = step(a1, vld1q_f32(q + i), load_v(v, i, f16), dot);
            i += 4;
            if (i + 4 <= n) {
                a2 = step(a2, vld1q_f32(q + i), load_v(v, i, f16), dot);
                i += 4;
            }
        }
    }
    if (i < n)
        a3 = step(a3, load_q_tail(q, i, n - i),
                  load_v_tail(v, i, n - i, f16), dot);
    return reduce(a0, a1, a2, a3);
}

/* Accumulator k of all four vectors, with the query block at q + i + off. */
#define STEP4(k, off)                                                       \
    do {                                                                    \
        float32x4_t qb_ = vld1q_f32(q + i + (off));                         \
        a[0][k] = step(a[0][k], qb_, load_v(v0, i + (off), f16), dot);      \
        a[1][k] = step(a[1][k], qb_, load_v(v1, i + (off), f16), dot);      \
        a[2][k] = step(a[2][k], qb_, load_v(v2, i + (off), f16), dot);      \
        a[3][k] = step(a[3][k], qb_, load_v(v3, i + (off), f16), dot);      \
    } while (0)

ALWAYS_INLINE void
kernel4(const float *q, const void *const v[4], uint32_t dim, float out[4],
        int f16, int dot)
{
    const void *v0 = v[0], *v1 = v[1], *v2 = v[2], *v3 = v[3];
    float32x4_t z = vdupq_n_f32(0.0f);
    float32x4_t a[4][4] = {
        {z, z, z, z}, {z, z, z, z}, {z, z, z, z}, {z, z, z, z},
    };
    size_t n = dim, i = 0;

    for (; i + 16 <= n; i += 16) {
        STEP4(0, 0);
        STEP4(1, 4);
        STEP4(2, 8);
        STEP4(3, 12);
    }
    if (i + 4 <= n) {
        STEP4(0, 0);
        i += 4;
        if (i + 4 <= n) {
            STEP4(1, 0);
            i += 4;
            if (i + 4 <= n) {
                STEP4(2, 0);
                i += 4;
            }
        }
    }
    if (i < n) {
        size_t r = n - i;
        float32x4_t qb = load_q_tail(q, i, r);
        a[0][3] = step(a[0][3], qb, load_v_tail(v0, i, r, f16), dot);
        a[1][3] = step(a[1][3], qb, load_v_tail(v1, i, r, f16), dot);
        a[2][3] = step(a[2][3], qb, load_v_tail(v2, i, r, f16), dot);
        a[3][3] = step(a[3][3], qb, load_v_tail(v3, i, r, f16), dot);
    }
    out[0] = reduce(a[0][0], a[0][1], a[0][2], a[0][3]);
    out[1] = reduce(a[1][0], a[1][1], a[1][2], a[1][3]);
    out[2] = reduce(a[2][0], a[2][1], a[2][2], a[2][3]);
    out[3] = reduce(a[3][0], a[3][1], a[3][2], a[3][3]);
}

static float
l2sq_f32(const float *q, const void *v, uint32_t dim)
{
    return kernel1(q, v, dim, 0, 0);
}

static float
l2sq_f16(const float *q, const void *v, uint32_t dim)
{
    return kernel1(q, v, dim, 1, 0);
}

static float
dot_f32(const float *q, const void *v, uint32_t dim)
{
    return kernel1(q, v, dim, 0, 1);
}

static float
dot_f16(const float *q, const void *v, uint32_t dim)
{
    return kernel1(q, v, dim, 1, 1);
}

static void
l2sq4_f32(const float *q, const void *const v[4], uint32_t dim, float out[4])
{
    kernel4(q, v, dim, out, 0, 0);
}

static void
l2sq4_f16(const float *q, const void *const v[4], uint32_t dim, float out[4])
{
    kernel4(q, v, dim, out, 1, 0);
}

static void
dot4_f32(const float *q, const void *const v[4], uint32_t dim, float out[4])
{
    kernel4(q, v, dim, out, 0, 1);
}

static void
dot4_f16(const float *q, const void *const v[4], uint32_t dim, float out[4])
{
    kernel4(q, v, dim, out, 1, 1);
}

const keel_kernels keel__kernels_neon = {
    {l2sq_f32, l2sq_f16},
    {dot_f32, dot_f16},
    {l2sq4_f32, l2sq4_f16},
    {dot4_f32, dot4_f16},
    keel__code_dot_scalar, /* the compiler vectorizes the plain loop */
    keel__code4_dot_scalar,
    "neon",
};

#else

/* ISO C wants a declaration in every translation unit. */
typedef int keel__dist_neon_unused;

#endif /* __aarch64__ */
