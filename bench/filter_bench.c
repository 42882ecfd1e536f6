/* filter_bench.c -- filtered search against an exact scan of the matches.
**
**   filter_bench INDEX BASE.fvecs QUERIES.fvecs [QUERIES_USED]
**
** For filters passing 30%, 10%, 3%, 1%, 0.3% and 0.1% of the vectors (random
** ids, as an allow-list and as a callback), measures milliseconds per query
** of keel_search with the filter at ef 64, and of an exact scan of the
** matching vectors in memory (the base file, brute force, a loop the
** compiler vectorizes: build with -O3 -march=native), and recall@10 of the filtered search
** against that scan. The claim it checks: filtered search stays within about
** 2x of scanning its matches, whatever the filter.
*/
#define _GNU_SOURCE 1
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "keel.h"
#include "../cli/vecfile.h"

static double
now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct allow {
    uint8_t *bit;      /* by id */
} allow;

static int
in_set(uint64_t id, void *arg)
{
    return ((allow *)arg)->bit[id];
}

static double scan(const float *base, uint32_t dim, const uint64_t *ids,
                   size_t n, const float *q, uint64_t *best);

/* What a caller with only a predicate must do for the exact answer: ask it
** about every vector, measure the matches. Returns ms taken. */
static double
scan_all(const float *base, uint32_t dim, size_t n, allow *a, const float *q,
         uint64_t *best, double (*measure)(const float *, uint32_t,
                                           const uint64_t *, size_t,
                                           const float *, uint64_t *))
{
    double t0 = now();
    uint64_t *ids = malloc(n * sizeof *ids);
    size_t m = 0;
    /* Through a pointer, as keel calls a callback. */
    int (*volatile pred)(uint64_t, void *) = in_set;
    for (size_t i = 0; i < n; i++)
        if (pred(i, a))
            ids[m++] = i;
    measure(base, dim, ids, m, q, best);
    free(ids);
    return (now() - t0) * 1e3;
}

/* The exact answer for an allow-list the way a caller gets it: each id's
** vector through keel_get, then its distance. Returns ms taken. */
static double
scan_get(keel_index *idx, const uint64_t *ids, size_t n, const float *q,
         float *vbuf, uint32_t dim)
{
    double t0 = now();
    float best = INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (keel_get(idx, ids[i], vbuf) != KEEL_OK)
            continue;
        float d = 0;
        for (uint32_t c = 0; c < dim; c++)
            d += (vbuf[c] - q[c]) * (vbuf[c] - q[c]);
        if (d < best)
            best = d;
    }
    return (now() - t0) * 1e3;
}

/* The exact 10 nearest matches of q among ids; returns ms taken. */
static double
scan(const float *base, uint32_t dim, const uint64_t *ids, size_t n,
     const float *q, uint64_t *best)
{
    double t0 = now();
    float bd[10];
    for (int j = 0; j < 10; j++)
        bd[j] = INFINITY, best[j] = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        const float *v = base + ids[i] * dim;
        /* Sixteen partial sums, so the compiler vectorizes the loop. */
        float part[16] = {0};
        uint32_t c = 0;
        for (; c + 16 <= dim; c += 16)
            for (int l = 0; l < 16; l++)
                part[l] += (v[c + l] - q[c + l]) * (v[c + l] - q[c + l]);
        float d = 0;
        for (int l = 0; l < 16; l++)
            d += part[l];
        for (; c < dim; c++)
            d += (v[c] - q[c]) * (v[c] - q[c]);
        if (d >= bd[9])
            continue;
        int j = 9;
        for (; j > 0 && bd[j - 1] > d; j--) {
            bd[j] = bd[j - 1];
            best[j] = best[j - 1];
        }
        bd[j] = d;
        best[j] = ids[i];
    }
    return (now() - t0) * 1e3;
}

int
main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: filter_bench INDEX BASE.fvecs QUERIES.fvecs "
                        "[QUERIES_USED]\n");
        return 2;
    }
    char err[512];
    vecfile base, qs;
    if (vecfile_load(argv[2], &base, err, sizeof err) ||
        vecfile_load(argv[3], &qs, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    size_t nq = argc > 4 ? (size_t)atoi(argv[4]) : 200;
    if (nq > qs.n)
        nq = qs.n;
    keel_index *idx;
    if (keel_open_reader(argv[1], NULL, &idx)) {
        fprintf(stderr, "%s\n", keel_errmsg());
        return 1;
    }
    static const double fracs[] = {0.30, 0.10, 0.03, 0.01, 0.003, 0.001};
    printf("| Filter passes | Matches | Scan of the matches in memory ms | "
           "Scan of the matches through keel_get ms | Allow-list ms (x memory "
           "scan, x keel_get scan) | Scan asking a predicate ms | Callback ms "
           "(x that scan) | Recall@10 list / callback |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    float *vbuf = malloc(base.dim * sizeof *vbuf);
    uint64_t seed = 12345;
    for (size_t f = 0; f < sizeof fracs / sizeof fracs[0]; f++) {
        allow a = {calloc(base.n, 1)};
        uint64_t *ids = malloc(base.n * sizeof *ids);
        size_t n = 0;
        for (size_t i = 0; i < base.n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            if ((double)(seed >> 11) * 0x1.0p-53 < fracs[f]) {
                a.bit[i] = 1;
                ids[n++] = i;
            }
        }
        double t_scan = 0, t_list = 0, t_cb = 0, t_all = 0, t_get = 0;
        long hit_list = 0, hit_cb = 0;
        for (size_t q = 0; q < nq; q++) {
            const float *qv = qs.data + q * qs.dim;
            uint64_t best[10];
            t_all += scan_all(base.data, base.dim, base.n, &a, qv, best, scan);
            t_scan += scan(base.data, base.dim, ids, n, qv, best);
            t_get += scan_get(idx, ids, n, qv, vbuf, base.dim);
            keel_result r[10];
            size_t got;
            keel_search_params pl = {.ef = 64, .allowed = ids, .n_allowed = n};
            double t0 = now();
            keel_search(idx, qv, 10, &pl, r, &got);
            t_list += (now() - t0) * 1e3;
            for (size_t i = 0; i < got; i++)
                for (int j = 0; j < 10; j++)
                    hit_list += r[i].id == best[j];
            keel_search_params pc = {.ef = 64, .filter = in_set, .filter_arg = &a};
            t0 = now();
            keel_search(idx, qv, 10, &pc, r, &got);
            t_cb += (now() - t0) * 1e3;
            for (size_t i = 0; i < got; i++)
                for (int j = 0; j < 10; j++)
                    hit_cb += r[i].id == best[j];
        }
        size_t want = nq * (n < 10 ? n : 10);
        printf("| %.1f%% | %zu | %.3f | %.3f | %.3f (%.2fx, %.2fx) | %.3f | "
               "%.3f (%.2fx) | %.3f / %.3f |\n", fracs[f] * 100, n,
               t_scan / nq, t_get / nq, t_list / nq, t_list / t_scan,
               t_list / t_get, t_all / nq, t_cb / nq, t_cb / t_all,
               (double)hit_list / want, (double)hit_cb / want);
        fflush(stdout);
        free(a.bit);
        free(ids);
    }
    free(vbuf);
    keel_close(idx);
    vecfile_free(&base);
    vecfile_free(&qs);
    return 0;
}
