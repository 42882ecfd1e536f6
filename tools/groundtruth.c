/* groundtruth.c -- exact k-nearest-neighbour ground truth for benchmarks.
**
** Owns the reference answers that keel's recall is measured against:
**
**     groundtruth BASE QUERY K METRIC OUT.ivecs [OUT.dist.fvecs]
**
** BASE and QUERY are vector files (.fvecs, .bvecs, .npy; read with
** cli/vecfile.c). METRIC is l2, cosine or ip. For each query it writes the
** ids (0-based rows of BASE) of the K nearest base vectors, nearest first,
** as an .ivecs row (int32 K, then K int32), and optionally their distances
** as an .fvecs row: Euclidean (not squared) for l2, 1 - cos for cosine,
** 1 - dot for ip, the same distances keel_search reports.
**
** Everything is computed in double precision with each sum taken in
** coordinate order, and ties go to the lower id, so the output depends on
** nothing but the inputs: not on threads, tiling or the machine. A base
** vector of norm 0 is at cosine distance 1 from every query (its cosine is
** taken as 0). Outputs are written under a temporary name and renamed when
** complete, so a file that exists is whole.
**
** Work is split into batches of queries, one thread per core taking batches
** as they come. Each batch walks the base in tiles small enough to stay in
** cache, transposed to put one coordinate of many base vectors side by side:
** the inner loop then runs across base vectors, which the compiler turns
** into vector instructions without reordering any sum.
**
** Build: cc -O3 -march=native -pthread -ffp-contract=off -o groundtruth
**        tools/groundtruth.c -lm
** (-ffp-contract=off keeps fused multiply-adds out, so every sum rounds as
** written, the same on every machine.)
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../cli/vecfile.c"
#include "../cli/npy.c" /* vecfile.c's .npy grammar */

enum metric { M_L2, M_COSINE, M_IP };

#define QUERY_BATCH 16      /* queries sharing one pass over the base */
#define TILE_BYTES (1 << 18) /* size of a transposed base tile */

struct cand {
    double d;
    int32_t id;
};

struct job {
    const float *base, *query;
    size_t nb, nq, k;
    uint32_t dim;
    enum metric metric;
    const double *bnorm, *qnorm; /* cosine only */
    int32_t *out_ids;            /* nq * k */
    float *out_dist;             /* nq * k */
    atomic_size_t next;          /* next batch to take */
    atomic_size_t done;          /* queries finished */
};

/* A is worse than B: farther, or as far with a higher id. The max-heap keeps
** the worst of the best k at its root. */
static int
worse(const struct cand *a, const struct cand *b)
{
    return a->d > b->d || (a->d == b->d && a->id > b->id);
}

static void
heap_sift_down(struct cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(&h[l], &h[m]))
            m = l;
        if (r < n && worse(&h[r], &h[m]))
            m = r;
        if (m == i)
            return;
        struct cand t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void
heap_push(struct cand *h, size_t *n, size_t k, double d, int32_t id)
{
    size_t i;

    if (*n == k) {
        /* Ids arrive in increasing order, so an equal distance never beats
        ** the root: only a strictly smaller one does. */
        if (!(d < h[0].d))
            return;
        h[0].d = d;
        h[0].id = id;
        heap_sift_down(h, k, 0);
        return;
    }
    i = (*n)++;
    h[i].d = d;
    h[i].id = id;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!worse(&h[i], &h[p]))
            break;
        struct cand t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static int
cand_cmp(const void *pa, const void *pb)
{
    const struct cand *a = pa, *b = pb;
    if (a->d != b->d)
        return a->d < b->d ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* The distance keel reports, from the ranking key. */
static float
report(enum metric m, double key)
{
    return (float)(m == M_L2 ? sqrt(key) : key);
}

static void *
worker(void *arg)
{
    struct job *j = arg;
    size_t dim = j->dim, tile_n = TILE_BYTES / sizeof(double) / dim;
    double *tile, *acc;
    struct cand *heaps;
    size_t *hn;

    if (tile_n < 8)
        tile_n = 8;
    tile = malloc(tile_n * dim * sizeof *tile);
    acc = malloc(tile_n * sizeof *acc);
    heaps = malloc(QUERY_BATCH * j->k * sizeof *heaps);
    hn = malloc(QUERY_BATCH * sizeof *hn);
    if (!tile || !acc || !heaps || !hn) {
        fprintf(stderr, "groundtruth: out of memory in a worker\n");
        exit(1);
    }
    for (;;) {
        size_t q0 = atomic_fetch_add(&j->next, QUERY_BATCH), qn, t0, qi;
        if (q0 >= j->nq)
            break;
        qn = j->nq - q0 < QUERY_BATCH ? j->nq - q0 : QUERY_BATCH;
        memset(hn, 0, QUERY_BATCH * sizeof *hn);
        for (t0 = 0; t0 < j->nb; t0 += tile_n) {
            size_t tn = j->nb - t0 < tile_n ? j->nb - t0 : tile_n, b, c;
            /* Transpose: tile[c * tile_n + b] is coordinate c of vector
            ** t0 + b. */
            for (b = 0; b < tn; b++) {
                const float *v = j->base + (t0 + b) * dim;
                for (c = 0; c < dim; c++)
                    tile[c * tile_n + b] = v[c];
            }
            for (qi = 0; qi < qn; qi++) {
                const float *q = j->query + (q0 + qi) * dim;
                struct cand *h = heaps + qi * j->k;
                for (b = 0; b < tn; b++)
                    acc[b] = 0.0;
                if (j->metric == M_L2) {
                    for (c = 0; c < dim; c++) {
                        const double qc = q[c], *col = tile + c * tile_n;
                        for (b = 0; b < tn; b++) {
                            double diff = qc - col[b];
                            acc[b] += diff * diff;
                        }
                    }
                    for (b = 0; b < tn; b++)
                        heap_push(h, &hn[qi], j->k, acc[b], (int32_t)(t0 + b));
                } else {
                    for (c = 0; c < dim; c++) {
                        const double qc = q[c], *col = tile + c * tile_n;
                        for (b = 0; b < tn; b++)
                            acc[b] += qc * col[b];
                    }
                    for (b = 0; b < tn; b++) {
                        double d;
                        if (j->metric == M_IP) {
                            d = 1.0 - acc[b];
                        } else {
                            double nn = j->qnorm[q0 + qi] * j->bnorm[t0 + b];
                            d = nn > 0.0 ? 1.0 - acc[b] / nn : 1.0;
                        }
                        heap_push(h, &hn[qi], j->k, d, (int32_t)(t0 + b));
                    }
                }
            }
        }
        for (qi = 0; qi < qn; qi++) {
            struct cand *h = heaps + qi * j->k;
            size_t r, row = (q0 + qi) * j->k;
            qsort(h, hn[qi], sizeof *h, cand_cmp);
            for (r = 0; r < j->k; r++) {
                j->out_ids[row + r] = h[r].id;
                j->out_dist[row + r] = report(j->metric, h[r].d);
            }
        }
        atomic_fetch_add(&j->done, qn);
    }
    free(tile);
    free(acc);
    free(heaps);
    free(hn);
    return NULL;
}

static double *
norms(const float *v, size_t n, uint32_t dim)
{
    double *out = malloc((n ? n : 1) * sizeof *out);
    size_t i, c;

    if (!out)
        return NULL;
    for (i = 0; i < n; i++) {
        double s = 0.0;
        for (c = 0; c < dim; c++)
            s += (double)v[i * dim + c] * v[i * dim + c];
        out[i] = sqrt(s);
    }
    return out;
}

/* Writes rows of (int32 k, k 4-byte values) to path via path.tmp. */
static int
write_rows(const char *path, const void *vals, size_t n, size_t k)
{
    char tmp[4096];
    FILE *f;
    int32_t kk = (int32_t)k;
    size_t i;
    int bad = 0;

    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        fprintf(stderr, "groundtruth: %s: path too long\n", path);
        return -1;
    }
    f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "groundtruth: %s: cannot create it: %s\n", tmp,
                strerror(errno));
        return -1;
    }
    for (i = 0; i < n && !bad; i++)
        bad = fwrite(&kk, 4, 1, f) != 1 ||
              fwrite((const char *)vals + i * k * 4, 4, k, f) != k;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        fprintf(stderr, "groundtruth: %s: write failed: %s\n", path,
                strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

static void
usage(void)
{
    fprintf(stderr,
            "usage: groundtruth BASE QUERY K METRIC OUT.ivecs "
            "[OUT.dist.fvecs]\n"
            "  BASE, QUERY  .fvecs, .bvecs or .npy vector files\n"
            "  K            neighbours per query, 1..rows of BASE\n"
            "  METRIC       l2, cosine or ip\n");
}

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int
main(int argc, char **argv)
{
    char err[1024], *end;
    vecfile base, query;
    struct job j;
    unsigned long long k;
    long ncpu;
    size_t nthreads, t;
    pthread_t *tids;
    double t0;
    int show = isatty(2);

    if (argc != 6 && argc != 7) {
        usage();
        return 2;
    }
    errno = 0;
    k = strtoull(argv[3], &end, 10);
    if (errno || *end || end == argv[3] || argv[3][0] == '-' || k == 0) {
        fprintf(stderr, "groundtruth: K '%s' is not a positive integer\n",
                argv[3]);
        usage();
        return 2;
    }
    memset(&j, 0, sizeof j);
    if (!strcmp(argv[4], "l2")) {
        j.metric = M_L2;
    } else if (!strcmp(argv[4], "cosine") || !strcmp(argv[4], "cos")) {
        j.metric = M_COSINE;
    } else if (!strcmp(argv[4], "ip")) {
        j.metric = M_IP;
    } else {
        fprintf(stderr, "groundtruth: METRIC '%s' is not l2, cosine or ip\n",
                argv[4]);
        usage();
        return 2;
    }
    if (vecfile_load(argv[1], &base, err, sizeof err) ||
        vecfile_load(argv[2], &query, err, sizeof err)) {
        fprintf(stderr, "groundtruth: %s\n", err);
        return 1;
    }
    if (base.dim != query.dim) {
        fprintf(stderr, "groundtruth: %s has %u dimensions but %s has %u\n",
                argv[1], base.dim, argv[2], query.dim);
        return 1;
    }
    if (base.n > INT32_MAX) {
        fprintf(stderr, "groundtruth: %s has %zu rows; .ivecs ids stop at "
                        "%d\n",
                argv[1], base.n, INT32_MAX);
        return 1;
    }
    if (k > base.n) {
        fprintf(stderr, "groundtruth: K %llu exceeds the %zu rows of %s\n", k,
                base.n, argv[1]);
        return 1;
    }
    j.base = base.data;
    j.query = query.data;
    j.nb = base.n;
    j.nq = query.n;
    j.k = (size_t)k;
    j.dim = base.dim;
    if (j.metric == M_COSINE) {
        j.bnorm = norms(base.data, base.n, base.dim);
        j.qnorm = norms(query.data, query.n, query.dim);
    }
    j.out_ids = malloc((j.nq ? j.nq : 1) * j.k * sizeof *j.out_ids);
    j.out_dist = malloc((j.nq ? j.nq : 1) * j.k * sizeof *j.out_dist);
    if (!j.out_ids || !j.out_dist ||
        (j.metric == M_COSINE && (!j.bnorm || !j.qnorm))) {
        fprintf(stderr, "groundtruth: out of memory\n");
        return 1;
    }
    atomic_init(&j.next, 0);
    atomic_init(&j.done, 0);

    ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    nthreads = ncpu > 0 ? (size_t)ncpu : 1;
    tids = calloc(nthreads, sizeof *tids);
    if (!tids) {
        fprintf(stderr, "groundtruth: out of memory\n");
        return 1;
    }
    t0 = now();
    for (t = 0; t < nthreads; t++) {
        int rc = pthread_create(&tids[t], NULL, worker, &j);
        if (rc) {
            fprintf(stderr, "groundtruth: cannot start a thread: %s\n",
                    strerror(rc));
            return 1;
        }
    }
    while (show && atomic_load(&j.done) < j.nq) {
        fprintf(stderr, "\rgroundtruth: %zu of %zu queries",
                atomic_load(&j.done), j.nq);
        usleep(500000);
    }
    for (t = 0; t < nthreads; t++)
        pthread_join(tids[t], NULL);
    if (show)
        fprintf(stderr, "\r");
    fprintf(stderr,
            "groundtruth: %zu queries x %zu base vectors (%u dims), top %zu "
            "by %s, on %zu threads in %.1f s\n",
            j.nq, j.nb, j.dim, j.k, argv[4], nthreads, now() - t0);

    if (write_rows(argv[5], j.out_ids, j.nq, j.k) != 0)
        return 1;
    if (argc == 7 && write_rows(argv[6], j.out_dist, j.nq, j.k) != 0)
        return 1;
    vecfile_free(&base);
    vecfile_free(&query);
    free(j.out_ids);
    free(j.out_dist);
    free((void *)j.bnorm);
    free((void *)j.qnorm);
    free(tids);
    return 0;
}
