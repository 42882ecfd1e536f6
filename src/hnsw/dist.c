/* dist.c -- the scalar distance kernels, half-precision conversion and the
** choice of kernel table.
**
** Owns: the portable reference table ("scalar"), IEEE binary16 <-> binary32
** conversion (exact, round to nearest even, independent of the FPU's
** rounding mode and of flush-to-zero), and the process-wide choice of the
** table keel__kernels() returns. The ISA tables live in dist_avx2.c,
** dist_avx512.c and dist_neon.c (declared in dist_isa.h).
**
** Invariants kept here:
**   - The scalar f16 kernels widen halves into a block of floats and run the
**     very same accumulation code as the f32 kernels, lane for lane, so (1)
**     of dist.h holds; the x4 kernels call the single ones, so (2) holds.
**     Floating-point contraction is off for the scalar kernels (C11 pragma
**     under clang, an optimize attribute under GCC), so the scalar table
**     gives the same bits on every machine with either compiler (except
**     clang -ffp-contract=fast, which disregards the pragma).
**   - The table is chosen once, under pthread_once, and never changes (3).
**     By default the choice is the fastest table the CPU runs: on x86-64,
**     avx512 needs AVX-512 F, BW, DQ and VL; avx2 needs AVX2, FMA and F16C.
**     KEEL_KERNELS=scalar|avx2|avx512|neon forces a table the CPU has; any
**     other value is ignored.
**   - Measured with bench/dist_bench.c on an AMD EPYC (Zen 5), gcc 12 -O2,
**     vectors in L1/L2, ns per l2sq distance, single / x4 (per vector):
**         dim   avx512 f32  avx2 f32    avx512 f16  avx2 f16    scalar f32/f16
**         100   4.0 / 2.6   4.7 / 3.5   4.0 / 3.5   5.1 / 4.3     15 / 95
**         128   4.5 / 3.0   4.9 / 3.6   4.0 / 3.6   5.7 / 4.8     11 / 115
**         784    24 / 15     29 / 24     18 / 15     24 / 24      50 / 690
**        1536    46 / 29     57 / 47     34 / 28     47 / 46     101 / 1310
**     avx512 is faster than avx2 at every dim from 100 up, so it comes first.
**   - The bulk conversions use F16C when the CPU has AVX2 and F16C; they give
**     the same bits as the scalar conversions (NaNs come out quiet in both).
*/
#include "base/internal.h"

#include <pthread.h>
#include <stdlib.h>

#include "hnsw/dist.h"
#include "hnsw/dist_isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* No fused multiply-add in the scalar kernels, whatever the build's mode
** (GCC contracts in GNU C modes, clang within an expression). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define NO_CONTRACT
#elif defined(__GNUC__)
#define NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define NO_CONTRACT
#endif

/* ---- IEEE binary16 conversion ---- */

static inline uint32_t
f32_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static inline float
bits_f32(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* The conversions are static inline with thin external wrappers, so the
** block loops inline them even in a -fPIC build. */
static inline uint16_t
to_f16(float x)
{
    uint32_t b = f32_bits(x);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t a = b & 0x7fffffffu;

    if (a >= 0x7f800000u) {
        if (a == 0x7f800000u)
            return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    }
    if (a >= 0x477ff000u)       /* 65520 and up: ties to even go up */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {     /* 2^-14 and up: a normal half */
        uint32_t m = a - 0x38000000u;
        m += 0xfffu + ((m >> 13) & 1u);
        return (uint16_t)(sign | (m >> 13));
    }
    if (a <= 0x33000000u)       /* 2^-25 and below round to zero */
        return sign;
    {
        /* A subnormal half: round |x| * 2^24 to an integer. The result may
        ** be 0x400, the smallest normal, which is the right encoding. */
        uint32_t e = a >> 23;
        uint32_t man = (a & 0x7fffffu) | 0x800000u;
        uint32_t s = 126u - e;  /* 14..24 */
        uint32_t r = man >> s;
        uint32_t rem = man & ((1u << s) - 1u);
        uint32_t half = 1u << (s - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        return (uint16_t)(sign | r);
    }
}

static inline float
to_f32(uint16_t h)
{
    /* Every case is computed and one selected, so blocks widen quickly:
    ** a normal half's exponent is rebiased; exponent 31 moves on to 255
    ** (NaNs made quiet); a subnormal or zero is man * 2^-24, computed
    ** exactly in any rounding mode as ((0.5 + man * 2^-11) - 0.5) * 2^-13
    ** with no denormal operand (the sign bit is cleared: x - x is -0 when
    ** rounding down). */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t normal = (em << 13) + 0x38000000u;
    uint32_t special = (normal + 0x38000000u) | (em > 0x7c00u ? 0x400000u : 0);
    float t = bits_f32(0x3f000000u | (em << 13)) - 0.5f;
    uint32_t sub = f32_bits(t * 0x1p-13f) & 0x7fffffffu;
    uint32_t bits = em >= 0x7c00u ? special : normal;
    bits = em < 0x400u ? sub : bits;
    return bits_f32(bits | sign);
}

uint16_t
keel__f32_to_f16(float x)
{
    return to_f16(x);
}

float
keel__f16_to_f32(uint16_t h)
{
    return to_f32(h);
}

int
keel__f16_overflows(float x)
{
    uint32_t a = f32_bits(x) & 0x7fffffffu;
    return a >= 0x477ff000u && a < 0x7f800000u;
}

static void
f32_to_f16_n_scalar(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = to_f16(src[i]);
}

static void
f16_to_f32_n_scalar(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = to_f32(src[i]);
}

/* ---- the scalar table ---- */

/* Element i of a vector is added into lane i % LANES; lanes are summed in a
** fixed tree at the end. Blocks of halves are widened BLOCK at a time, a
** multiple of LANES, so lane assignment is the same for both precisions.
** The accumulating functions are never inlined: both precisions run one
** copy of the machine code, whatever the compiler does to it. */
#define LANES 8
#define BLOCK 64

static __attribute__((noinline)) NO_CONTRACT void
l2sq_acc(float acc[LANES], const float *q, const float *v, size_t n)
{
    float a[LANES];
    size_t i = 0;
    memcpy(a, acc, sizeof a);
    for (; i + LANES <= n; i += LANES) {
        for (size_t j = 0; j < LANES; j++) {
            float d = q[i + j] - v[i + j];
            a[j] += d * d;
        }
    }
    for (size_t j = 0; i + j < n; j++) {
        float d = q[i + j] - v[i + j];
        a[j] += d * d;
    }
    memcpy(acc, a, sizeof a);
}

static __attribute__((noinline)) NO_CONTRACT void
dot_acc(float acc[LANES], const float *q, const float *v, size_t n)
{
    float a[LANES];
    size_t i = 0;
    memcpy(a, acc, sizeof a);
    for (; i + LANES <= n; i += LANES) {
        for (size_t j = 0; j < LANES; j++) {
            float p = q[i + j] * v[i + j];
            a[j] += p;
        }
    }
    for (size_t j = 0; i + j < n; j++) {
        float p = q[i + j] * v[i + j];
        a[j] += p;
    }
    memcpy(acc, a, sizeof a);
}

static float
lanes_sum(const float acc[LANES])
{
    float a = acc[0] + acc[1];
    float b = acc[2] + acc[3];
    float c = acc[4] + acc[5];
    float d = acc[6] + acc[7];
    return (a + b) + (c + d);
}

static float
l2sq_f32(const float *q, const void *v, uint32_t dim)
{
    float acc[LANES] = {0};
    l2sq_acc(acc, q, (const float *)v, dim);
    return lanes_sum(acc);
}

static float
dot_f32(const float *q, const void *v, uint32_t dim)
{
    float acc[LANES] = {0};
    dot_acc(acc, q, (const float *)v, dim);
    return lanes_sum(acc);
}

static float
l2sq_f16(const float *q, const void *v, uint32_t dim)
{
    const uint16_t *h = (const uint16_t *)v;
    float acc[LANES] = {0};
    float buf[BLOCK];
    for (size_t i = 0; i < dim; i += BLOCK) {
        size_t n = KEEL_MIN((size_t)dim - i, (size_t)BLOCK);
        f16_to_f32_n_scalar(h + i, buf, n);
        l2sq_acc(acc, q + i, buf, n);
    }
    return lanes_sum(acc);
}

static float
dot_f16(const float *q, const void *v, uint32_t dim)
{
    const uint16_t *h = (const uint16_t *)v;
    float acc[LANES] = {0};
    float buf[BLOCK];
    for (size_t i = 0; i < dim; i += BLOCK) {
        size_t n = KEEL_MIN((size_t)dim - i, (size_t)BLOCK);
        f16_to_f32_n_scalar(h + i, buf, n);
        dot_acc(acc, q + i, buf, n);
    }
    return lanes_sum(acc);
}

static void
l2sq4_f32(const float *q, const void *const v[4], uint32_t dim, float out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = l2sq_f32(q, v[i], dim);
}

static void
dot4_f32(const float *q, const void *const v[4], uint32_t dim, float out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = dot_f32(q, v[i], dim);
}

static void
l2sq4_f16(const float *q, const void *const v[4], uint32_t dim, float out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = l2sq_f16(q, v[i], dim);
}

static void
dot4_f16(const float *q, const void *const v[4], uint32_t dim, float out[4])
{
    for (int i = 0; i < 4; i++)
        out[i] = dot_f16(q, v[i], dim);
}

int32_t
keel__code_dot_scalar(const uint8_t *qu, const int8_t *c, uint32_t dim)
{
    int32_t s = 0;
    for (uint32_t i = 0; i < dim; i++)
        s += (int32_t)qu[i] * c[i];
    return s;
}

int32_t
keel__code4_dot_scalar(const uint8_t *qu, const int8_t *c, uint32_t dim)
{
    const uint8_t *p = (const uint8_t *)c;
    int32_t s = 0;
    for (uint32_t b = 0; b < dim; b += 32, p += 16)
        for (uint32_t j = 0; j < 16; j++)
            s += (int32_t)qu[b + j] * (p[j] & 15) +
                 (int32_t)qu[b + 16 + j] * (p[j] >> 4);
    return s;
}

static const keel_kernels kernels_scalar = {
    {l2sq_f32, l2sq_f16},
    {dot_f32, dot_f16},
    {l2sq4_f32, l2sq4_f16},
    {dot4_f32, dot4_f16},
    keel__code_dot_scalar,
    keel__code4_dot_scalar,
    "scalar",
};

/* ---- choice of table ---- */

static pthread_once_t choose_once = PTHREAD_ONCE_INIT;
static const keel_kernels *chosen;
static const keel_kernels *runnable[5];
static size_t n_runnable;
static void (*to_f16_n)(const float *, uint16_t *, size_t);
static void (*to_f32_n)(const uint16_t *, float *, size_t);

#if defined(__x86_64__)
static int
cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    return (c & bit_F16C) != 0;
}
#endif

static int prefetch_l1;

#if defined(__x86_64__)
/* AMD's Zen 5 (family 1Ah) and later track enough outstanding misses that
** prefetching neighbour vectors into L1 pays; earlier AMD and Intel cores
** drop hints past a couple of dozen, so they get L2 hints. */
static int
cpu_prefers_l1_hints(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) ||
        !(b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163)) /* AuthenticAMD */
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    unsigned family = (a >> 8) & 0xF;
    if (family == 0xF)
        family += (a >> 20) & 0xFF;
    return family >= 0x1A;
}
#endif

int
keel__prefetch_into_l1(void)
{
    keel__kernels();
    return prefetch_l1;
}

static void
choose(void)
{
    size_t n = 0;
    const char *want;
#if defined(__x86_64__)
    prefetch_l1 = cpu_prefers_l1_hints();
#endif
    if (getenv("KEEL_PREFETCH"))
        prefetch_l1 = strcmp(getenv("KEEL_PREFETCH"), "l1") == 0;

    to_f16_n = f32_to_f16_n_scalar;
    to_f32_n = f16_to_f32_n_scalar;
#if defined(__x86_64__)
    {
        __builtin_cpu_init();
        int avx2 = __builtin_cpu_supports("avx2") &&
                   __builtin_cpu_supports("fma") && cpu_has_f16c();
        int avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                     __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512dq") &&
                     __builtin_cpu_supports("avx512vl");
        if (avx512 && __builtin_cpu_supports("avx512vnni"))
            runnable[n++] = &keel__kernels_avx512_vnni;
        if (avx512)
            runnable[n++] = &keel__kernels_avx512;
        if (avx2) {
            runnable[n++] = &keel__kernels_avx2;
            to_f16_n = keel__f32_to_f16_n_f16c;
            to_f32_n = keel__f16_to_f32_n_f16c;
        }
    }
#endif
#if defined(__aarch64__)
    runnable[n++] = &keel__kernels_neon;
#endif
    runnable[n++] = &kernels_scalar;
    n_runnable = n;
    chosen = runnable[0];

    want = getenv("KEEL_KERNELS");
    if (want) {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(runnable[i]->name, want) == 0)
                chosen = runnable[i];
        }
    }
}

const keel_kernels *
keel__kernels(void)
{
    pthread_once(&choose_once, choose);
    return chosen;
}

const keel_kernels *const *
keel__kernels_all(size_t *n)
{
    pthread_once(&choose_once, choose);
    *n = n_runnable;
    return runnable;
}

void
keel__f32_to_f16_n(const float *src, uint16_t *dst, size_t n)
{
    pthread_once(&choose_once, choose);
    to_f16_n(src, dst, n);
}

void
keel__f16_to_f32_n(const uint16_t *src, float *dst, size_t n)
{
    pthread_once(&choose_once, choose);
    to_f32_n(src, dst, n);
}
