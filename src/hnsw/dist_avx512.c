/* dist_avx512.c -- the "avx512" kernel table: AVX-512 F/BW/DQ/VL.
**
** Owns keel__kernels_avx512. Built with -mavx512f -mavx512bw -mavx512dq
** -mavx512vl -mavx2 -mfma -mf16c; dist.c calls into it only on a CPU that
** has all of them.
**
** The same pattern as dist_avx2.c with 16 lanes:
**   - four accumulators of 16 lanes; step i covers 64 floats, block k of it
**     (16 floats) goes to accumulator k;
**   - after the last full step, up to three full blocks go to accumulators
**     0, 1, 2 in turn, and the last 1..15 elements go to accumulator 3
**     through masked loads of both vectors (masked lanes read nothing and
**     are zero, adding +0 to a lane);
**   - the reduction is (a0+a1)+(a2+a3), then high 256 + low 256, high 128 +
**     low 128, then a fixed pairing of the four lanes left.
** A stored block is widened to 16 floats (vcvtph2ps for f16, a plain load for
** f32) and then goes through the same instructions: invariant (1). The x4
** kernels share each query block and keep four accumulators per vector,
** updated in the single kernel's order: invariant (2).
*/
#include "base/internal.h"

#include <immintrin.h>

#include "hnsw/dist.h"
#include "hnsw/dist_isa.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE __m512
load_v(const void *v, size_t i, int f16)
{
    if (f16) {
        const uint16_t *h = (const uint16_t *)v + i;
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i_u *)h));
    }
    return _mm512_loadu_ps((const float *)v + i);
}

ALWAYS_INLINE __m512
load_v_tail(const void *v, size_t i, __mmask16 m, int f16)
{
    if (f16)
        return _mm512_cvtph_ps(
            _mm256_maskz_loadu_epi16(m, (const uint16_t *)v + i));
    return _mm512_maskz_loadu_ps(m, (const float *)v + i);
}

ALWAYS_INLINE __m512
step(__m512 acc, __m512 q, __m512 v, int dot)
{
    if (dot)
        return _mm512_fmadd_ps(q, v, acc);
    __m512 d = _mm512_sub_ps(q, v);
    return _mm512_fmadd_ps(d, d, acc);
}

ALWAYS_INLINE float
reduce(__m512 a0, __m512 a1, __m512 a2, __m512 a3)
{
    __m512 s = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    __m256 y = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm512_extractf32x8_ps(s, 1));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(y),
                          _mm256_extractf128_ps(y, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

ALWAYS_INLINE float
kernel1(const float *q, const void *v, uint32_t dim, int f16, int dot)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t n = dim, i = 0;

    for (; i + 64 <= n; i += 64) {
        a0 = step(a0, _mm512_loadu_ps(q + i), load_v(v, i, f16), dot);
        a1 = step(a1, _mm512_loadu_ps(q + i + 16), load_v(v, i + 16, f16),
                  dot);
        a2 = step(a2, _mm512_loadu_ps(q + i + 32), load_v(v, i + 32, f16),
                  dot);
        a3 = step(a3, _mm512_loadu_ps(q + i + 48), load_v(v, i + 48, f16),
                  dot);
    }
    if (i + 16 <= n) {
        a0 = step(a0, _mm512_loadu_ps(q + i), load_v(v, i, f16), dot);
        i += 16;
        if (i + 16 <= n) {
            a1 = step(a1, _mm512_loadu_ps(q + i), load_v(v, i, f16), dot);
            i += 16;
            if (i + 16 <= n) {
                a2 = step(a2, _mm512_loadu_ps(q + i), load_v(v, i, f16), dot);
                i += 16;
            }
        }
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        a3 = step(a3, _mm512_maskz_loadu_ps(m, q + i),
                  load_v_tail(v, i, m, f16), dot);
    }
    return reduce(a0, a1, a2, a3);
}

/* Accumulator k of all four vectors, with the query block at q + i + off. */
#define STEP4(k, off)                                                       \
    do {                                                                    \
        __m512 qb_ = _mm512_loadu_ps(q + i + (off));                        \
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
    __m512 z = _mm512_setzero_ps();
    __m512 a[4][4] = {{z, z, z, z}, {z, z, z, z}, {z, z, z, z}, {z, z, z, z}};
    size_t n = dim, i = 0;

    for (; i + 64 <= n; i += 64) {
        STEP4(0, 0);
        STEP4(1, 16);
        STEP4(2, 32);
        STEP4(3, 48);
    }
    if (i + 16 <= n) {
        STEP4(0, 0);
        i += 16;
        if (i + 16 <= n) {
            STEP4(1, 0);
            i += 16;
            if (i + 16 <= n) {
                STEP4(2, 0);
                i += 16;
            }
        }
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 qb = _mm512_maskz_loadu_ps(m, q + i);
        a[0][3] = step(a[0][3], qb, load_v_tail(v0, i, m, f16), dot);
        a[1][3] = step(a[1][3], qb, load_v_tail(v1, i, m, f16), dot);
        a[2][3] = step(a[2][3], qb, load_v_tail(v2, i, m, f16), dot);
        a[3][3] = step(a[3][3], qb, load_v_tail(v3, i, m, f16), dot);
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

/* 32 bytes at a time widened to 16-bit lanes (AVX-512 BW); the tail
** masked, so no byte past dim is read. */
static int32_t
code_dot(const uint8_t *qu, const int8_t *c, uint32_t dim)
{
    __m512i acc = _mm512_setzero_si512();
    uint32_t i = 0;
    for (; i + 32 <= dim; i += 32) {
        __m512i a = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(qu + i)));
        __m512i b = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(c + i)));
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
    }
    if (i < dim) {
        __mmask32 m = (__mmask32)(0xFFFFFFFFu >> (32 - (dim - i)));
        __m512i a = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, qu + i));
        __m512i b = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, c + i));
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
    }
    return _mm512_reduce_add_epi32(acc);
}

/* VNNI: 64 byte products summed into 32-bit lanes per instruction; the
** sums stay far below 2^31 (dist.h invariant 4). */
__attribute__((target("avx512vnni"))) static int32_t
code_dot_vnni(const uint8_t *qu, const int8_t *c, uint32_t dim)
{
    __m512i acc = _mm512_setzero_si512();
    uint32_t i = 0;
    for (; i + 64 <= dim; i += 64)
        acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(qu + i),
                                  _mm512_loadu_si512(c + i));
    if (i < dim) {
        __mmask64 m = (__mmask64)(~0ull >> (64 - (dim - i)));
        acc = _mm512_dpbusd_epi32(acc, _mm512_maskz_loadu_epi8(m, qu + i),
                                  _mm512_maskz_loadu_epi8(m, c + i));
    }
    return _mm512_reduce_add_epi32(acc);
}

const keel_kernels keel__kernels_avx512 = {
    {l2sq_f32, l2sq_f16},
    {dot_f32, dot_f16},
    {l2sq4_f32, l2sq4_f16},
    {dot4_f32, dot4_f16},
    code_dot,
    keel__code4_dot_avx2,
    "avx512",
};

const keel_kernels keel__kernels_avx512_vnni = {
    {l2sq_f32, l2sq_f16},
    {dot_f32, dot_f16},
    {l2sq4_f32, l2sq4_f16},
    {dot4_f32, dot4_f16},
    code_dot_vnni,
    keel__code4_dot_avx2,
    "avx512-vnni",
};
