/* dist_avx2.c -- the "avx2" kernel table: AVX2 + FMA + F16C.
**
** Owns keel__kernels_avx2 and the F16C bulk conversions. Built with
** -mavx2 -mfma -mf16c; dist.c calls into it only on a CPU that has all three.
**
** Every kernel is one pattern, specialized at compile time by precision and
** by sum (l2sq or dot):
**   - four accumulators of 8 lanes; step i covers 32 floats, block k of it
**     (8 floats) goes to accumulator k;
**   - after the last full step, up to three full blocks go to accumulators
**     0, 1, 2 in turn, and the last 1..7 elements go to accumulator 3 through
**     a masked load of q and of v (f16: the last 8 halves, shifted down),
**     so nothing is read outside either vector and the unused lanes are
**     zero in both, adding (0-0)^2 or 0*0, +0, to a lane;
**   - the reduction is (a0+a1)+(a2+a3), then high 128 + low 128, then a
**     fixed pairing of the four lanes left.
** A stored block is widened to 8 floats (vcvtph2ps for f16, a plain load for
** f32) and then goes through the same instructions, so invariant (1) holds.
** The x4 kernels load each query block once and give each vector its own
** four accumulators, updated in the same order as the single kernel's, and
** reduce each with the same function, so invariant (2) holds.
*/
#include "base/internal.h"

#include <immintrin.h>

#include "hnsw/dist.h"
#include "hnsw/dist_isa.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* mask(r) for 1 <= r <= 7: the first r lanes set. */
static const int32_t tail_bits[16] = {
    -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0,
};

ALWAYS_INLINE __m256i
tail_mask(size_t r)
{
    return _mm256_loadu_si256((const __m256i_u *)(tail_bits + 8 - r));
}

ALWAYS_INLINE __m256
load_v(const void *v, size_t i, int f16)
{
    if (f16) {
        const uint16_t *h = (const uint16_t *)v + i;
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i_u *)h));
    }
    return _mm256_loadu_ps((const float *)v + i);
}

/* Byte shuffles for the f16 tail: the window at 16 - 2r moves the last r
** halves of a 16-byte load to lanes 0..r-1 and zeroes the rest. */
static const uint8_t tail_shuf[32] = {
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
};

/* Elements i..i+r-1 (1 <= r <= 7, i + r == n) of v in lanes 0..r-1, zero
** elsewhere, reading only inside the vector: f32 by a masked load, f16 by
** loading the vector's last 8 halves (when it has 8) and shifting. */
ALWAYS_INLINE __m256
load_v_tail(const void *v, size_t i, size_t r, __m256i mask, int f16)
{
    if (f16) {
        const uint16_t *h = (const uint16_t *)v;
        __m128i x;
        if (KEEL_LIKELY(i + r >= 8)) {
            __m128i s = _mm_loadu_si128(
                (const __m128i_u *)(tail_shuf + 16 - 2 * r));
            x = _mm_loadu_si128((const __m128i_u *)(h + i + r - 8));
            x = _mm_shuffle_epi8(x, s);
        } else {
            uint16_t buf[8] = {0};
            for (size_t j = 0; j < r; j++)
                buf[j] = h[i + j];
            x = _mm_loadu_si128((const __m128i_u *)buf);
        }
        return _mm256_cvtph_ps(x);
    }
    return _mm256_maskload_ps((const float *)v + i, mask);
}

ALWAYS_INLINE __m256
step(__m256 acc, __m256 q, __m256 v, int dot)
{
    if (dot)
        return _mm256_fmadd_ps(q, v, acc);
    __m256 d = _mm256_sub_ps(q, v);
    return _mm256_fmadd_ps(d, d, acc);
}

ALWAYS_INLINE float
reduce(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(s),
                          _mm256_extractf128_ps(s, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

ALWAYS_INLINE float
kernel1(const float *q, const void *v, uint32_t dim, int f16, int dot)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t n = dim, i = 0;

    for (; i + 32 <= n; i += 32) {
        a0 = step(a0, _mm256_loadu_ps(q + i), load_v(v, i, f16), dot);
        a1 = step(a1, _mm256_loadu_ps(q + i + 8), load_v(v, i + 8, f16), dot);
        a2 = step(a2, _mm256_loadu_ps(q + i + 16), load_v(v, i + 16, f16),
                  dot);
        a3 = step(a3, _mm256_loadu_ps(q + i + 24), load_v(v, i + 24, f16),
                  dot);
    }
    if (i + 8 <= n) {
        a0 = step(a0, _mm256_loadu_ps(q + i), load_v(v, i, f16), dot);
        i += 8;
        if (i + 8 <= n) {
            a1 = step(a1, _mm256_loadu_ps(q + i), load_v(v, i, f16), dot);
            i += 8;
            if (i + 8 <= n) {
                a2 = step(a2, _mm256_loadu_ps(q + i), load_v(v, i, f16), dot);
                i += 8;
            }
        }
    }
    if (i < n) {
        __m256i m = tail_mask(n - i);
        a3 = step(a3, _mm256_maskload_ps(q + i, m),
                  load_v_tail(v, i, n - i, m, f16), dot);
    }
    return reduce(a0, a1, a2, a3);
}

/* Accumulator k of all four vectors, with the query block at q + i + off. */
#define STEP4(k, off)                                                       \
    do {                                                                    \
        __m256 qb_ = _mm256_loadu_ps(q + i + (off));                        \
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
    __m256 z = _mm256_setzero_ps();
    __m256 a[4][4] = {{z, z, z, z}, {z, z, z, z}, {z, z, z, z}, {z, z, z, z}};
    size_t n = dim, i = 0;

    for (; i + 32 <= n; i += 32) {
        STEP4(0, 0);
        STEP4(1, 8);
        STEP4(2, 16);
        STEP4(3, 24);
    }
    if (i + 8 <= n) {
        STEP4(0, 0);
        i += 8;
        if (i + 8 <= n) {
            STEP4(1, 0);
            i += 8;
            if (i + 8 <= n) {
                STEP4(2, 0);
                i += 8;
            }
        }
    }
    if (i < n) {
        size_t r = n - i;
        __m256i m = tail_mask(r);
        __m256 qb = _mm256_maskload_ps(q + i, m);
        a[0][3] = step(a[0][3], qb, load_v_tail(v0, i, r, m, f16), dot);
        a[1][3] = step(a[1][3], qb, load_v_tail(v1, i, r, m, f16), dot);
        a[2][3] = step(a[2][3], qb, load_v_tail(v2, i, r, m, f16), dot);
        a[3][3] = step(a[3][3], qb, load_v_tail(v3, i, r, m, f16), dot);
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

/* 16 bytes at a time widened to 16-bit lanes: madd adds pairs of
** products of at most 255 x 128 into 32-bit lanes, no saturation. */
static int32_t
code_dot(const uint8_t *qu, const int8_t *c, uint32_t dim)
{
    __m256i acc = _mm256_setzero_si256();
    uint32_t i = 0;
    for (; i + 16 <= dim; i += 16) {
        __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(qu + i)));
        __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(c + i)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc),
                              _mm256_extracti128_si256(acc, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    int32_t sum = _mm_cvtsi128_si32(s);
    for (; i < dim; i++)
        sum += (int32_t)qu[i] * c[i];
    return sum;
}

/* Two blocks of 32 dimensions (32 bytes of nibbles) per step: the low
** nibbles hold dimensions 0-15 of each block and the high ones 16-31, so
** one mask and one shift give 64 codes, put in order by two lane
** permutes. maddubs multiplies the query's unsigned bytes by the codes (0..15,
** taken as signed bytes) and adds pairs into 16 bits (at most 2 x 255 x 15);
** two of those summed stay under 2^15, and madd widens them to 32. */
int32_t
keel__code4_dot_avx2(const uint8_t *qu, const int8_t *c, uint32_t dim)
{
    const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const uint8_t *p = (const uint8_t *)c;
    __m256i acc = _mm256_setzero_si256();
    const uint32_t padded = (dim + 31) / 32 * 32;
    uint32_t b = 0;
    for (; b + 64 <= padded; b += 64, p += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
        __m256i lo = _mm256_and_si256(v, low);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        __m256i c0 = _mm256_permute2x128_si256(lo, hi, 0x20);
        __m256i c1 = _mm256_permute2x128_si256(lo, hi, 0x31);
        __m256i q0 = _mm256_loadu_si256((const __m256i *)(const void *)(qu + b));
        __m256i q1 = _mm256_loadu_si256((const __m256i *)(const void *)(qu + b + 32));
        __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(q0, c0),
                                       _mm256_maddubs_epi16(q1, c1));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s16, ones));
    }
    if (b < padded) { /* one block left */
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i lo = _mm_and_si128(v, _mm256_castsi256_si128(low));
        __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4),
                                   _mm256_castsi256_si128(low));
        __m256i c0 = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
        __m256i q0 = _mm256_loadu_si256((const __m256i *)(const void *)(qu + b));
        acc = _mm256_add_epi32(
            acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q0, c0), ones));
    }
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc),
                              _mm256_extracti128_si256(acc, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

const keel_kernels keel__kernels_avx2 = {
    {l2sq_f32, l2sq_f16},
    {dot_f32, dot_f16},
    {l2sq4_f32, l2sq4_f16},
    {dot4_f32, dot4_f16},
    code_dot,
    keel__code4_dot_avx2,
    "avx2",
};

/* Rounding is the immediate's (nearest even), not MXCSR's; NaNs come out
** quiet with the top payload bits, as keel__f32_to_f16 does. */
void
keel__f32_to_f16_n_f16c(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i_u *)(dst + i), h);
    }
    for (; i < n; i++)
        dst[i] = keel__f32_to_f16(src[i]);
}

void
keel__f16_to_f32_n_f16c(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i_u *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++)
        dst[i] = keel__f16_to_f32(src[i]);
}
