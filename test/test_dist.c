/* test_dist.c -- tests of the distance kernels and half conversion (dist.h).
**
** Every kernel table this CPU runs is checked against a double-precision
** reference, for every dim 1..70 and some common larger ones, on unaligned
** pointers and on vectors next to an unmapped page on either side. Invariant
** (1) (f16 = f32 on half-representable values) and (2) (x4 = single) are
** checked bit for bit. Half conversion is checked exhaustively both ways,
** at every rounding tie, in every rounding mode, at the overflow boundary,
** and the bulk versions against the scalar ones. Child processes check
** KEEL_KERNELS.
*/
#include "test.h"

#include <fenv.h>
#include <float.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "hnsw/dist.h"

static const uint32_t big_dims[] = {100, 128, 384, 768, 784, 1536, 4096};
#define MAX_DIM 4096

/* The dims to test: 1..70, then big_dims. Returns 0 past the end. */
static uint32_t
dim_at(size_t k)
{
    if (k < 70)
        return (uint32_t)k + 1;
    k -= 70;
    return k < sizeof big_dims / sizeof big_dims[0] ? big_dims[k] : 0;
}

static uint32_t
fbits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static float
bitsf(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* The value of half h, computed independently of the code under test. */
static double
half_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static int
half_is_nan(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

static double
ref_sum(const float *q, const float *v, uint32_t dim, int dot, double *mag)
{
    double s = 0, a = 0;
    for (uint32_t i = 0; i < dim; i++) {
        double t = dot ? (double)q[i] * v[i]
                       : ((double)q[i] - v[i]) * ((double)q[i] - v[i]);
        s += t;
        a += fabs(t);
    }
    *mag = a;
    return s;
}

TEST(tables_listed)
{
    size_t n = 0;
    const keel_kernels *const *all = keel__kernels_all(&n);
    const keel_kernels *k = keel__kernels();
    int found = 0;

    CHECK(n >= 1 && n <= 5);
    CHECK(strcmp(all[n - 1]->name, "scalar") == 0);
    CHECK(keel__kernels() == k);
    for (size_t i = 0; i < n; i++) {
        found += all[i] == k;
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(all[i]->name, all[j]->name) != 0);
        for (int p = 0; p < 2; p++) {
            CHECK(all[i]->l2sq[p] && all[i]->dot[p]);
            CHECK(all[i]->l2sq4[p] && all[i]->dot4[p]);
        }
        CHECK(all[i]->code_dot != NULL);
        CHECK(all[i]->code4_dot != NULL);
    }
    CHECK(getenv("KEEL_KERNELS") || k == all[0]);
    CHECK_EQ(found, 1);
    printf("     tables:");
    for (size_t i = 0; i < n; i++)
        printf(" %s", all[i]->name);
    printf(" (chosen: %s)\n", k->name);
}

TEST(known_answers)
{
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    static float q[MAX_DIM + 1], v[MAX_DIM + 1];
    static uint16_t h[MAX_DIM + 1];

    for (size_t t = 0; t < nt; t++) {
        const keel_kernels *k = all[t];
        uint32_t dim;
        for (size_t d = 0; (dim = dim_at(d)) != 0; d++) {
            for (uint32_t i = 0; i < dim; i++) {
                q[i + 1] = 0.5f;
                v[i + 1] = -0.25f;
                h[i + 1] = 0xb400; /* -0.25 */
            }
            float want_l2 = 0.5625f * (float)dim;
            float want_dot = -0.125f * (float)dim;
            CHECK_MSG(k->l2sq[KEEL_F32](q + 1, v + 1, dim) == want_l2,
                      "%s l2sq f32 dim %u", k->name, dim);
            CHECK_MSG(k->l2sq[KEEL_F16](q + 1, h + 1, dim) == want_l2,
                      "%s l2sq f16 dim %u", k->name, dim);
            CHECK_MSG(k->dot[KEEL_F32](q + 1, v + 1, dim) == want_dot,
                      "%s dot f32 dim %u", k->name, dim);
            CHECK_MSG(k->dot[KEEL_F16](q + 1, h + 1, dim) == want_dot,
                      "%s dot f16 dim %u", k->name, dim);
            /* Only the last element differs: the tail must be counted. */
            v[dim] = 2.5f;
            h[dim] = 0x4100; /* 2.5 */
            want_l2 = 0.5625f * (float)(dim - 1) + 4.0f;
            CHECK_MSG(k->l2sq[KEEL_F32](q + 1, v + 1, dim) == want_l2,
                      "%s l2sq f32 last, dim %u", k->name, dim);
            CHECK_MSG(k->l2sq[KEEL_F16](q + 1, h + 1, dim) == want_l2,
                      "%s l2sq f16 last, dim %u", k->name, dim);
        }
    }
}

/* Fills q (f32), v (f32), h (f16) and w (h widened) with random values of
** magnitude about scale. */
static void
fill(uint64_t *rs, uint32_t dim, float scale, float *q, float *v,
     uint16_t *h, float *w)
{
    for (uint32_t i = 0; i < dim; i++) {
        q[i] = test_randf(rs) * scale;
        v[i] = test_randf(rs) * scale;
        h[i] = keel__f32_to_f16(test_randf(rs) * scale);
        w[i] = keel__f16_to_f32(h[i]);
    }
}

/* dist.h invariant (4): every table's code_dot is the exact integer sum,
** at every dim from 1 to 70 and the big ones, at the extremes (255 x -128
** would be the worst; codes stop at -127) and on random bytes, with the
** pointers off alignment by one. */
TEST(code_dot_is_exact_in_every_table)
{
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    static uint8_t qu[MAX_DIM + 2];
    static int8_t c[MAX_DIM + 2];
    uint64_t rs = 7;
    for (int trial = 0; trial < 3; trial++) {
        uint32_t dim;
        for (size_t d = 0; (dim = dim_at(d)) != 0; d++) {
            size_t off = (size_t)(trial & 1);
            for (uint32_t i = 0; i < dim; i++) {
                rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                qu[off + i] = trial == 2 ? 255 : (uint8_t)(rs >> 33);
                c[off + i] = trial == 2 ? -127
                                        : (int8_t)((int)(rs >> 45 & 0xFF) % 255 - 127);
            }
            int64_t ref = 0;
            for (uint32_t i = 0; i < dim; i++)
                ref += (int64_t)qu[off + i] * c[off + i];
            for (size_t t = 0; t < nt; t++) {
                int32_t got = all[t]->code_dot(qu + off, c + off, dim);
                CHECK_MSG(got == ref, "%s code_dot dim %u trial %d: %d vs %lld",
                          all[t]->name, dim, trial, got, (long long)ref);
            }
        }
    }
}

/* code4_dot: the exact sum over dimensions of query byte times nibble, in
** every table, at every dim from 1 to 70 and the big ones, with the packed
** nibbles past dim random (the query's zeros past dim cancel them), at the
** extremes (255 x 15) and off alignment by one. */
TEST(code4_dot_is_exact_in_every_table)
{
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    static uint8_t qu[MAX_DIM + 64];
    static uint8_t c[MAX_DIM / 2 + 64];
    uint64_t rs = 11;
    for (int trial = 0; trial < 3; trial++) {
        uint32_t dim;
        for (size_t d = 0; (dim = dim_at(d)) != 0; d++) {
            size_t off = (size_t)(trial & 1);
            uint32_t padded = (dim + 31) / 32 * 32;
            for (uint32_t i = 0; i < padded; i++) {
                rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                qu[off + i] = i >= dim ? 0 : trial == 2 ? 255 : (uint8_t)(rs >> 33);
            }
            for (uint32_t i = 0; i < padded / 2; i++) {
                rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                c[off + i] = trial == 2 ? 0xFF : (uint8_t)(rs >> 40);
            }
            int64_t ref = 0;
            for (uint32_t i = 0; i < dim; i++) {
                uint8_t byte = c[off + i / 32 * 16 + i % 16];
                int nib = i % 32 < 16 ? (byte & 15) : (byte >> 4);
                ref += (int64_t)qu[off + i] * nib;
            }
            for (size_t t = 0; t < nt; t++) {
                int32_t got = all[t]->code4_dot(qu + off,
                                                (const int8_t *)(c + off), dim);
                CHECK_MSG(got == ref, "%s code4_dot dim %u trial %d: %d vs %lld",
                          all[t]->name, dim, trial, got, (long long)ref);
            }
        }
    }
}

TEST(kernels_vs_reference)
{
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    static float q[MAX_DIM + 1], v[MAX_DIM + 1], w[MAX_DIM + 1];
    static uint16_t h[MAX_DIM + 1];
    static const float scales[] = {1.0f, 100.0f, 0.01f};
    uint64_t rs = 42;

    for (size_t t = 0; t < nt; t++) {
        const keel_kernels *k = all[t];
        uint32_t dim;
        for (size_t d = 0; (dim = dim_at(d)) != 0; d++) {
            for (int trial = 0; trial < 6; trial++) {
                size_t off = (size_t)(trial & 1);
                fill(&rs, dim, scales[trial % 3], q + off, v + off, h + off,
                     w + off);
                for (int dot = 0; dot < 2; dot++) {
                    double mag, ref;
                    float got;
                    keel_dist_fn f32 = k->l2sq[KEEL_F32];
                    keel_dist_fn f16 = k->l2sq[KEEL_F16];
                    if (dot) {
                        f32 = k->dot[KEEL_F32];
                        f16 = k->dot[KEEL_F16];
                    }

                    ref = ref_sum(q + off, v + off, dim, dot, &mag);
                    got = f32(q + off, v + off, dim);
                    CHECK_MSG(fabs(got - ref) <= 1e-4 * mag + 1e-30,
                              "%s %s f32 dim %u: %.9g vs %.9g", k->name,
                              dot ? "dot" : "l2sq", dim, got, ref);
                    ref = ref_sum(q + off, w + off, dim, dot, &mag);
                    got = f16(q + off, h + off, dim);
                    CHECK_MSG(fabs(got - ref) <= 1e-4 * mag + 1e-30,
                              "%s %s f16 dim %u: %.9g vs %.9g", k->name,
                              dot ? "dot" : "l2sq", dim, got, ref);
                }
            }
        }
    }
}

TEST(f16_same_bits_as_f32)
{
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    static float q[MAX_DIM + 1], v[MAX_DIM + 1], w[MAX_DIM + 1];
    static uint16_t h[MAX_DIM + 1];
    uint64_t rs = 7;

    for (size_t t = 0; t < nt; t++) {
        const keel_kernels *k = all[t];
        uint32_t dim;
        for (size_t d = 0; (dim = dim_at(d)) != 0; d++) {
            for (int trial = 0; trial < 4; trial++) {
                size_t off = (size_t)(trial & 1);
                fill(&rs, dim, trial < 2 ? 1.0f : 300.0f, q + off, v + off,
                     h + off, w + off);
                if (trial == 3) /* subnormal halves */
                    for (uint32_t i = 0; i < dim; i++) {
                        h[off + i] = (uint16_t)(test_rand(&rs) & 0x83ff);
                        w[off + i] = keel__f16_to_f32(h[off + i]);
                    }
                float a = k->l2sq[KEEL_F32](q + off, w + off, dim);
                float b = k->l2sq[KEEL_F16](q + off, h + off, dim);
                CHECK_MSG(fbits(a) == fbits(b), "%s l2sq dim %u: %a vs %a",
                          k->name, dim, a, b);
                a = k->dot[KEEL_F32](q + off, w + off, dim);
                b = k->dot[KEEL_F16](q + off, h + off, dim);
                CHECK_MSG(fbits(a) == fbits(b), "%s dot dim %u: %a vs %a",
                          k->name, dim, a, b);
            }
        }
    }
}

TEST(x4_same_bits_as_single)
{
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    static float q[MAX_DIM + 1], v[4][MAX_DIM + 4], w[4][MAX_DIM + 4];
    static uint16_t h[4][MAX_DIM + 4];
    uint64_t rs = 99;

    for (size_t t = 0; t < nt; t++) {
        const keel_kernels *k = all[t];
        uint32_t dim;
        for (size_t d = 0; (dim = dim_at(d)) != 0; d++) {
            for (int trial = 0; trial < 2; trial++) {
                size_t qo = (size_t)trial;
                const void *pv[4], *ph[4];
                float out[4];
                for (int j = 0; j < 4; j++) {
                    fill(&rs, dim, 1.0f + (float)j, q + qo, v[j] + j, h[j] + j,
                         w[j] + j);
                    pv[j] = v[j] + j;
                    ph[j] = h[j] + j;
                }
                for (int dot = 0; dot < 2; dot++) {
                    for (int p = 0; p < 2; p++) {
                        keel_dist_fn f1 = dot ? k->dot[p] : k->l2sq[p];
                        keel_dist4_fn f4 = dot ? k->dot4[p] : k->l2sq4[p];
                        const void *const *vs = p == KEEL_F16 ? ph : pv;
                        memset(out, 0xff, sizeof out);
                        f4(q + qo, vs, dim, out);
                        for (int j = 0; j < 4; j++) {
                            float one = f1(q + qo, vs[j], dim);
                            CHECK_MSG(fbits(one) == fbits(out[j]),
                                      "%s %s %s x4 dim %u vec %d: %a vs %a",
                                      k->name, dot ? "dot" : "l2sq",
                                      p ? "f16" : "f32", dim, j, one, out[j]);
                        }
                    }
                }
            }
        }
    }
}

/* n bytes next to an inaccessible page: ending where it begins (after = 1)
** or beginning where it ends (after = 0). */
struct guarded {
    void *map;
    size_t len;
    void *p;
};

static int
guard_alloc(struct guarded *g, size_t n, int after)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t body = (n + page - 1) / page * page;
    char *base;
    g->len = body + page;
    g->map = mmap(NULL, g->len, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED)
        return -1;
    base = g->map;
    if (mprotect(after ? base + body : base, page, PROT_NONE) != 0)
        return -1;
    g->p = after ? base + body - n : base + page;
    return 0;
}

/* Every kernel of k on vectors of dim that touch unmapped pages. */
static void
check_guarded(const keel_kernels *k, uint32_t dim, int after, uint64_t *rs)
{
    struct guarded gq, gv, gh;
    CHECK(guard_alloc(&gq, dim * sizeof(float), after) == 0);
    CHECK(guard_alloc(&gv, dim * sizeof(float), after) == 0);
    CHECK(guard_alloc(&gh, dim * sizeof(uint16_t), after) == 0);
    float *q = gq.p, *v = gv.p;
    uint16_t *h = gh.p;
    double mag;
    for (uint32_t i = 0; i < dim; i++) {
        q[i] = test_randf(rs);
        v[i] = keel__f16_to_f32(keel__f32_to_f16(test_randf(rs)));
        h[i] = keel__f32_to_f16(v[i]);
    }
    const void *pv[4] = {v, v, v, v}, *ph[4] = {h, h, h, h};
    float out[4];
    float a = k->l2sq[KEEL_F32](q, v, dim);
    float b = k->l2sq[KEEL_F16](q, h, dim);
    double ref = ref_sum(q, v, dim, 0, &mag);
    CHECK_MSG(fabs(a - ref) <= 1e-4 * mag + 1e-30, "%s dim %u", k->name, dim);
    CHECK(fbits(a) == fbits(b));
    k->l2sq4[KEEL_F32](q, pv, dim, out);
    CHECK(fbits(out[3]) == fbits(a));
    k->l2sq4[KEEL_F16](q, ph, dim, out);
    CHECK(fbits(out[3]) == fbits(a));
    a = k->dot[KEEL_F32](q, v, dim);
    b = k->dot[KEEL_F16](q, h, dim);
    CHECK(fbits(a) == fbits(b));
    k->dot4[KEEL_F32](q, pv, dim, out);
    CHECK(fbits(out[0]) == fbits(a));
    k->dot4[KEEL_F16](q, ph, dim, out);
    CHECK(fbits(out[0]) == fbits(a));
    munmap(gq.map, gq.len);
    munmap(gv.map, gv.len);
    munmap(gh.map, gh.len);
}

/* A read outside a vector kills the test with SIGSEGV. */
TEST(no_read_outside_vector)
{
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    uint64_t rs = 5;

    for (size_t t = 0; t < nt; t++) {
        uint32_t dim;
        for (size_t d = 0; (dim = dim_at(d)) != 0; d++) {
            for (int after = 0; after < 2; after++) {
                check_guarded(all[t], dim, after, &rs);
                if (test_failed_flag)
                    return;
            }
        }
    }
}

TEST(f16_round_trip_exhaustive)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = keel__f16_to_f32(h);
        uint16_t back = keel__f32_to_f16(f);
        if (half_is_nan(h)) {
            CHECK_MSG(isnan(f), "0x%04x -> %a", h, f);
            CHECK_MSG(half_is_nan(back), "0x%04x -> 0x%04x", h, back);
            CHECK_MSG((back & 0x8000) == (h & 0x8000), "sign of 0x%04x", h);
            CHECK_MSG((back | 0x200) == (h | 0x200), "payload of 0x%04x", h);
            continue;
        }
        if ((h & 0x7fff) == 0x7c00)
            CHECK_MSG(isinf(f) && (f < 0) == !!(h & 0x8000), "0x%04x", h);
        else
            CHECK_MSG((double)f == half_value(h), "0x%04x -> %a, want %a", h,
                      f, half_value(h));
        CHECK_MSG(!!signbit(f) == !!(h & 0x8000), "sign of 0x%04x", h);
        CHECK_MSG(back == h, "0x%04x -> %a -> 0x%04x", h, f, back);
    }
}

TEST(f16_ties_to_even)
{
    /* Every midpoint between adjacent finite halves, and its neighbours. */
    for (uint32_t i = 0; i < 0x7bff; i++) {
        for (uint32_t s = 0; s < 2; s++) {
            uint16_t lo = (uint16_t)(i | (s << 15)), hi = (uint16_t)(lo + 1);
            double mid = (half_value(lo) + half_value(hi)) / 2;
            float m = (float)mid;
            uint16_t even = (lo & 1) ? hi : lo;
            CHECK_MSG((double)m == mid, "midpoint of 0x%04x not exact", lo);
            CHECK_MSG(keel__f32_to_f16(m) == even,
                      "tie 0x%04x/0x%04x -> 0x%04x", lo, hi,
                      keel__f32_to_f16(m));
            float up = nextafterf(m, s ? -INFINITY : INFINITY);
            float down = nextafterf(m, 0.0f);
            CHECK_MSG(keel__f32_to_f16(up) == hi, "above tie 0x%04x", lo);
            CHECK_MSG(keel__f32_to_f16(down) == lo, "below tie 0x%04x", lo);
        }
    }
    /* Crafted values. */
    CHECK_EQ(keel__f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    CHECK_EQ(keel__f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    CHECK_EQ(keel__f32_to_f16(1.0f + 0x1p-11f + 0x1p-23f), 0x3c01);
    CHECK_EQ(keel__f32_to_f16(2047.0f), 0x67ff);  /* exact */
    CHECK_EQ(keel__f32_to_f16(2049.0f), 0x6800);  /* 2049 -> 2048 */
    CHECK_EQ(keel__f32_to_f16(2051.0f), 0x6802);  /* 2051 -> 2052 */
    CHECK_EQ(keel__f32_to_f16(0x1p-25f), 0x0000);
    CHECK_EQ(keel__f32_to_f16(-0x1p-25f), 0x8000);
    CHECK_EQ(keel__f32_to_f16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    CHECK_EQ(keel__f32_to_f16(3 * 0x1p-25f), 0x0002);
    CHECK_EQ(keel__f32_to_f16(5 * 0x1p-25f), 0x0002);
    CHECK_EQ(keel__f32_to_f16(0x1p-24f), 0x0001);
    CHECK_EQ(keel__f32_to_f16(0x1p-14f), 0x0400);
    CHECK_EQ(keel__f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);
    CHECK_EQ(keel__f32_to_f16(0x1p-14f - 3 * 0x1p-25f), 0x03fe);
    CHECK_EQ(keel__f32_to_f16(0x1p-149f), 0x0000);
    CHECK_EQ(keel__f32_to_f16(FLT_MIN), 0x0000);
    CHECK_EQ(keel__f32_to_f16(-0.0f), 0x8000);
    CHECK_EQ(keel__f32_to_f16(0.0f), 0x0000);
    CHECK_EQ(keel__f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ(keel__f32_to_f16(-2.0f), 0xc000);
    CHECK_EQ(keel__f32_to_f16(0.1f), 0x2e66);
    CHECK_EQ(keel__f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ(keel__f32_to_f16(-65504.0f), 0xfbff);
    CHECK_EQ(keel__f32_to_f16(INFINITY), 0x7c00);
    CHECK_EQ(keel__f32_to_f16(-INFINITY), 0xfc00);
    CHECK(half_is_nan(keel__f32_to_f16(NAN)));
    CHECK(half_is_nan(keel__f32_to_f16(bitsf(0x7f800001)))); /* sNaN, low */
    CHECK(half_is_nan(keel__f32_to_f16(bitsf(0xff800001))));
    CHECK(keel__f32_to_f16(bitsf(0xff800001)) & 0x8000);
    CHECK(keel__f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(keel__f16_to_f32(0x03ff) == 0x3ffp-24f);
    CHECK(keel__f16_to_f32(0x0400) == 0x1p-14f);
    CHECK(keel__f16_to_f32(0x7bff) == 65504.0f);
    CHECK(keel__f16_to_f32(0xc000) == -2.0f);
    CHECK(fbits(keel__f16_to_f32(0x8000)) == 0x80000000u);
}

/* Conversion never depends on the FPU's rounding mode. */
TEST(f16_rounding_mode_independent)
{
    static const int modes[] = {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    static uint32_t want_f[65536], got_f[65536];
    static uint16_t want_h[65536 * 3], got_h[65536 * 3];
    static float x[65536 * 3];

    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        uint16_t n = (uint16_t)((i & 0x7fff) == 0x7bff ? i : i + 1);
        float mid = (float)((half_value(h) + half_value(n)) / 2);
        x[3 * i] = mid;
        x[3 * i + 1] = nextafterf(mid, 0.0f);
        x[3 * i + 2] = bitsf(i << 16 | i);
        want_f[i] = fbits(keel__f16_to_f32(h));
    }
    for (uint32_t i = 0; i < 65536 * 3; i++)
        want_h[i] = keel__f32_to_f16(x[i]);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        CHECK(fesetround(modes[m]) == 0);
        for (uint32_t i = 0; i < 65536; i++)
            got_f[i] = fbits(keel__f16_to_f32((uint16_t)i));
        for (uint32_t i = 0; i < 65536 * 3; i++)
            got_h[i] = keel__f32_to_f16(x[i]);
        fesetround(FE_TONEAREST);
        for (uint32_t i = 0; i < 65536; i++)
            CHECK_MSG(got_f[i] == want_f[i], "mode %zu: 0x%04x -> 0x%08x", m,
                      i, got_f[i]);
        for (uint32_t i = 0; i < 65536 * 3; i++)
            CHECK_MSG(got_h[i] == want_h[i], "mode %zu: %a -> 0x%04x", m,
                      x[i], got_h[i]);
    }
}

TEST(f16_overflow_boundary)
{
    CHECK_EQ(keel__f16_overflows(65519.99f), 0);
    CHECK_EQ(keel__f32_to_f16(65519.99f), 0x7bff);
    CHECK_EQ(keel__f16_overflows(nextafterf(65520.0f, 0.0f)), 0);
    CHECK_EQ(keel__f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    CHECK_EQ(keel__f16_overflows(65520.0f), 1);
    CHECK_EQ(keel__f32_to_f16(65520.0f), 0x7c00);
    CHECK_EQ(keel__f16_overflows(-65520.0f), 1);
    CHECK_EQ(keel__f32_to_f16(-65520.0f), 0xfc00);
    CHECK_EQ(keel__f16_overflows(65504.0f), 0);
    CHECK_EQ(keel__f16_overflows(-65504.0f), 0);
    CHECK_EQ(keel__f16_overflows(65536.0f), 1);
    CHECK_EQ(keel__f16_overflows(FLT_MAX), 1);
    CHECK_EQ(keel__f16_overflows(-FLT_MAX), 1);
    CHECK_EQ(keel__f16_overflows(INFINITY), 0);
    CHECK_EQ(keel__f16_overflows(-INFINITY), 0);
    CHECK_EQ(keel__f16_overflows(NAN), 0);
    CHECK_EQ(keel__f16_overflows(0.0f), 0);
    CHECK_EQ(keel__f16_overflows(1e-30f), 0);
    /* Everywhere in between: overflows iff finite and converts to inf. */
    for (uint32_t b = 0x47000000u; b < 0x7f800000u; b += 0x1234u) {
        float x = bitsf(b);
        uint16_t hx = keel__f32_to_f16(x);
        CHECK_MSG(keel__f16_overflows(x) == ((hx & 0x7fff) == 0x7c00), "%a",
                  x);
        CHECK_EQ(keel__f16_overflows(-x), keel__f16_overflows(x));
    }
}

TEST(f16_bulk_equals_scalar)
{
    static float src[70002], back[65537];
    static uint16_t dst[70002], halves[65537];
    uint64_t rs = 3;

    for (uint32_t i = 0; i < 65536; i++)
        halves[i + 1] = (uint16_t)i;
    keel__f16_to_f32_n(halves + 1, back + 1, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float f = keel__f16_to_f32((uint16_t)i);
        CHECK_MSG(fbits(back[i + 1]) == fbits(f), "0x%04x: %a vs %a", i,
                  back[i + 1], f);
    }
    /* Random bit patterns (NaNs, denormals, overflow) and a sweep. */
    for (size_t i = 0; i < 70002; i++)
        src[i] = bitsf(i < 35000 ? (uint32_t)test_rand(&rs)
                                 : (uint32_t)(i - 35000) * 122713u);
    for (size_t n = 0; n <= 70000; n = n < 40 ? n + 1 : n * 3 + 17) {
        memset(dst, 0, sizeof dst);
        keel__f32_to_f16_n(src + 1, dst + 1, n);
        for (size_t i = 0; i < n; i++)
            CHECK_MSG(dst[i + 1] == keel__f32_to_f16(src[i + 1]),
                      "n %zu [%zu] %a (0x%08x): 0x%04x vs 0x%04x", n, i,
                      src[i + 1], fbits(src[i + 1]), dst[i + 1],
                      keel__f32_to_f16(src[i + 1]));
        CHECK(dst[n + 1] == 0);
        CHECK(dst[0] == 0);
    }
    /* Every float in the half range, near rounding boundaries. */
    for (uint32_t b = 0x33000000u; b < 0x47800000u; b += 0x1000u) {
        float x[6] = {bitsf(b - 1), bitsf(b), bitsf(b + 1), -bitsf(b - 1),
                      -bitsf(b), -bitsf(b + 1)};
        uint16_t hx[6];
        keel__f32_to_f16_n(x, hx, 6);
        for (int j = 0; j < 6; j++)
            CHECK_MSG(hx[j] == keel__f32_to_f16(x[j]), "%a", x[j]);
    }
}

/* Set by the parent: a child run prints its chosen table here and exits. */
__attribute__((constructor)) static void
env_child(void)
{
    const char *out = getenv("KEEL_DIST_CHILD_OUT");
    if (!out)
        return;
    FILE *f = fopen(out, "w");
    if (!f)
        _exit(3);
    fprintf(f, "%s", keel__kernels()->name);
    fclose(f);
    _exit(0);
}

static int
child_choice(const char *env, char *name, size_t cap)
{
    const char *out = test_path("kernels_child");
    char exe[512];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return -1;
    exe[len] = 0;
    remove(out);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setenv("KEEL_DIST_CHILD_OUT", out, 1);
        setenv("KEEL_KERNELS", env, 1);
        execl(exe, exe, (char *)NULL);
        _exit(4);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
        return -1;
    FILE *f = fopen(out, "r");
    if (!f)
        return -1;
    size_t n = fread(name, 1, cap - 1, f);
    fclose(f);
    name[n] = 0;
    return 0;
}

TEST(env_forces_table)
{
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    char name[64];

    for (size_t t = 0; t < nt; t++) {
        CHECK(child_choice(all[t]->name, name, sizeof name) == 0);
        CHECK_MSG(strcmp(name, all[t]->name) == 0, "KEEL_KERNELS=%s gave %s",
                  all[t]->name, name);
    }
    CHECK(child_choice("no-such-table", name, sizeof name) == 0);
    CHECK_MSG(strcmp(name, all[0]->name) == 0, "bogus KEEL_KERNELS gave %s",
              name);
}

TEST_MAIN()
