/* gen_clusters.c -- the generated benchmark set: seeded Gaussian clusters.
**
**     gen_clusters OUT_PREFIX [N] [NQ] [DIM] [CLUSTERS] [SEED]
**
** Writes OUT_PREFIX.base.fvecs (N rows, default 1,000,000) and
** OUT_PREFIX.query.fvecs (NQ rows, default 1,000) of DIM floats (default
** 128), drawn from one mixture of CLUSTERS (default 500) Gaussian clusters
** with seed SEED (default 1). The files depend on nothing but these
** arguments: the same arguments give the same bytes on any machine with
** IEEE-754 doubles (build with -ffp-contract=off, as below).
**
** The mixture:
**   * random numbers: xoshiro256** seeded through splitmix64; three
**     independent streams from SEED (clusters, queries, base), so the
**     queries are the same whatever N is, and the first N rows of a larger
**     set are a smaller one;
**   * a standard normal number g is the Irwin-Hall sum of 12 uniforms of
**     24 bits each, centred and scaled (mean 0, variance 1 minus 2^-48,
**     tails cut at +-6): integer arithmetic only, no libm, so it is exact;
**   * cluster c: a centre of DIM standard normals; a weight w_c, uniform in
**     1..8 (how many rows it gets, in proportion); a spread sigma_c =
**     0.5 + 1.5 u, u uniform in [0, 1) (four times from tightest to
**     loosest); and a random permutation p_c of the dimensions;
**   * along dimension j the cluster's standard deviation is sigma_c *
**     128 / (128 + p_c(j)): it falls off across the dimensions (to about
**     half at the 128th), and the permutation points every cluster's long
**     axes elsewhere, so the clusters are not aligned with each other;
**   * a row (base or query alike) picks a cluster c with probability
**     w_c / sum w, then coordinate j = centre_c[j] + (sigma_c * 128 /
**     (128 + p_c(j))) * g, each operation rounded in double, the result
**     rounded to float once.
**
** With the defaults, clusters of different spreads overlap: neither the
** trivial set of far apart blobs nor the pathological one of uniform noise
** in 128 dimensions. keel's recall@10 at M = 16, ef_construction 200: on
** the first 100,000 rows 0.80 at ef 16, 0.95 at 64, 0.99 at 256; on the
** million 0.50 at ef 16, 0.82 at 64, 0.96 at 256, 0.986 at 1024 (harder
** than SIFT1M).
**
** Queries come from the same mixture as the base, not from the base (the
** exact neighbours: tools/groundtruth.c). Outputs are written under a
** temporary name and renamed when complete.
**
** Build: cc -O2 -ffp-contract=off -o gen_clusters tools/gen_clusters.c
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t
splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void
rng_seed(rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t
rng_next(rng *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in 0..n-1 (n small: the bias of the modulus is below 2^-40). */
static uint64_t
rng_below(rng *r, uint64_t n)
{
    return (rng_next(r) >> 11) % n;
}

/* Uniform in [0, 1), 53 bits. */
static double
rng_unit(rng *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* A standard normal number, Irwin-Hall: each uniform is (2u + 1) / 2^25
** with u of 24 bits, so the centred sum is an integer over 2^25, exact. */
static double
rng_gauss(rng *r)
{
    int64_t s = 0;
    for (int i = 0; i < 12; i++) {
        uint64_t x = rng_next(r);
        s += (int64_t)(2 * (x >> 40) + 1);
    }
    return (double)(s - 12 * ((int64_t)1 << 24)) / (double)((int64_t)1 << 25);
}

typedef struct mixture {
    uint32_t dim, nc;
    double *centre;   /* nc * dim */
    double *sd;       /* nc * dim: the standard deviation per dimension */
    uint64_t *cum;    /* nc: cumulative weights */
    uint64_t total;
} mixture;

static void *
xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "gen_clusters: out of memory\n");
        exit(1);
    }
    return p;
}

static void
mixture_make(mixture *m, uint32_t dim, uint32_t nc, uint64_t seed)
{
    rng r;
    uint32_t *perm = xmalloc(dim * sizeof *perm);

    rng_seed(&r, seed, 1);
    m->dim = dim;
    m->nc = nc;
    m->centre = xmalloc((size_t)nc * dim * sizeof *m->centre);
    m->sd = xmalloc((size_t)nc * dim * sizeof *m->sd);
    m->cum = xmalloc(nc * sizeof *m->cum);
    m->total = 0;
    for (uint32_t c = 0; c < nc; c++) {
        for (uint32_t j = 0; j < dim; j++)
            m->centre[(size_t)c * dim + j] = rng_gauss(&r);
        m->total += 1 + rng_below(&r, 8);
        m->cum[c] = m->total;
        double sigma = 0.5 + 1.5 * rng_unit(&r);
        for (uint32_t j = 0; j < dim; j++)
            perm[j] = j;
        for (uint32_t j = dim - 1; j > 0; j--) { /* Fisher-Yates */
            uint32_t i = (uint32_t)rng_below(&r, (uint64_t)j + 1), t = perm[j];
            perm[j] = perm[i];
            perm[i] = t;
        }
        for (uint32_t j = 0; j < dim; j++)
            m->sd[(size_t)c * dim + j] =
                sigma * (128.0 / (128.0 + (double)perm[j]));
    }
    free(perm);
}

static void
mixture_row(const mixture *m, rng *r, float *out)
{
    uint64_t x = rng_below(r, m->total);
    uint32_t lo = 0, hi = m->nc - 1; /* the first c with cum[c] > x */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (m->cum[mid] > x)
            hi = mid;
        else
            lo = mid + 1;
    }
    const double *c = m->centre + (size_t)lo * m->dim;
    const double *sd = m->sd + (size_t)lo * m->dim;
    for (uint32_t j = 0; j < m->dim; j++) {
        double d = sd[j] * rng_gauss(r);
        out[j] = (float)(c[j] + d);
    }
}

/* n rows from stream `stream` into PREFIX.SUFFIX.fvecs via a .tmp name. */
static int
write_set(const mixture *m, uint64_t seed, uint64_t stream, size_t n,
          const char *prefix, const char *suffix)
{
    char path[4096], tmp[4200];
    rng r;
    float *row = xmalloc(m->dim * sizeof *row);
    int32_t w = (int32_t)m->dim;
    FILE *f;
    int bad = 0;

    if (snprintf(path, sizeof path, "%s.%s.fvecs", prefix, suffix) >=
        (int)sizeof path) {
        fprintf(stderr, "gen_clusters: %s: path too long\n", prefix);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "gen_clusters: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    static char buf[1 << 20];
    setvbuf(f, buf, _IOFBF, sizeof buf);
    rng_seed(&r, seed, stream);
    for (size_t i = 0; i < n && !bad; i++) {
        mixture_row(m, &r, row);
        bad = fwrite(&w, 4, 1, f) != 1 ||
              fwrite(row, 4, m->dim, f) != m->dim;
    }
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        fprintf(stderr, "gen_clusters: %s: write failed: %s\n", path,
                strerror(errno));
        remove(tmp);
        free(row);
        return -1;
    }
    free(row);
    return 0;
}

static unsigned long long
arg(int argc, char **argv, int i, unsigned long long def, const char *name)
{
    char *end;
    unsigned long long v;

    if (argc <= i)
        return def;
    errno = 0;
    v = strtoull(argv[i], &end, 10);
    if (errno || *end || end == argv[i] || argv[i][0] == '-') {
        fprintf(stderr, "gen_clusters: %s '%s' is not a number\n", name,
                argv[i]);
        exit(2);
    }
    return v;
}

int
main(int argc, char **argv)
{
    if (argc < 2 || argc > 7) {
        fprintf(stderr, "usage: gen_clusters OUT_PREFIX [N 1000000] "
                        "[NQ 1000] [DIM 128] [CLUSTERS 500] [SEED 1]\n");
        return 2;
    }
    size_t n = (size_t)arg(argc, argv, 2, 1000000, "N");
    size_t nq = (size_t)arg(argc, argv, 3, 1000, "NQ");
    unsigned long long dim = arg(argc, argv, 4, 128, "DIM");
    unsigned long long nc = arg(argc, argv, 5, 500, "CLUSTERS");
    uint64_t seed = arg(argc, argv, 6, 1, "SEED");
    if (n == 0 || nq == 0 || dim == 0 || dim > 65536 || nc == 0 ||
        nc > 1000000) {
        fprintf(stderr, "gen_clusters: N, NQ, DIM and CLUSTERS must be "
                        "positive (DIM <= 65536, CLUSTERS <= 1000000)\n");
        return 2;
    }
    mixture m;
    mixture_make(&m, (uint32_t)dim, (uint32_t)nc, seed);
    if (write_set(&m, seed, 2, nq, argv[1], "query") != 0 ||
        write_set(&m, seed, 3, n, argv[1], "base") != 0)
        return 1;
    fprintf(stderr, "gen_clusters: %zu base and %zu query vectors of %llu "
                    "dims, %llu clusters, seed %llu: %s.{base,query}.fvecs\n",
            n, nq, dim, nc, (unsigned long long)seed, argv[1]);
    free(m.centre);
    free(m.sd);
    free(m.cum);
    return 0;
}
