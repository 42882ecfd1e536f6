/* dist_bench.c -- ns per distance for every kernel table, vectors in cache.
**
** Not part of the build or the tests. From the repository root:
**   cc -std=c11 -O2 -pthread -Iinclude -Isrc -c src/hnsw/dist.c
**   cc -std=c11 -O2 -mavx2 -mfma -mf16c -Iinclude -Isrc -c src/hnsw/dist_avx2.c
**   cc -std=c11 -O2 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 \
**      -mfma -mf16c -Iinclude -Isrc -c src/hnsw/dist_avx512.c
**   cc -std=c11 -O2 -pthread -Iinclude -Isrc bench/dist_bench.c dist*.o \
**      -o dist_bench -lpthread
** Prints, per table and dim, the best of several runs for the single kernels
** and the x4 kernels (per vector), l2sq and dot, f32 and f16 storage. The
** working set is kept under 32 KiB where the dim allows, so it stays in L1
** or L2.
*/
#define _GNU_SOURCE 1
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hnsw/dist.h"

#define MAX_VECS 64

static volatile float sink;

static double
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng = 0x1234567;

static float
randf(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* ns per distance of fn (single) or fn4 (x4) over nv vectors. */
static double
time_kernel(keel_dist_fn fn, keel_dist4_fn fn4, const float *q,
            const void *const *vs, size_t nv, uint32_t dim)
{
    double best = 1e30;
    size_t reps = 1;
    /* Grow reps until one run takes about 20 ms, then keep the best of 5. */
    for (;;) {
        double t0 = now_ns();
        float acc = 0, out[4];
        for (size_t r = 0; r < reps; r++) {
            if (fn4) {
                for (size_t i = 0; i + 4 <= nv; i += 4) {
                    fn4(q, vs + i, dim, out);
                    acc += out[0] + out[1] + out[2] + out[3];
                }
            } else {
                for (size_t i = 0; i < nv; i++)
                    acc += fn(q, vs[i], dim);
            }
        }
        sink = acc;
        double t = now_ns() - t0;
        if (t > 2e7)
            break;
        reps *= 2;
    }
    for (int run = 0; run < 5; run++) {
        double t0 = now_ns();
        float acc = 0, out[4];
        for (size_t r = 0; r < reps; r++) {
            if (fn4) {
                for (size_t i = 0; i + 4 <= nv; i += 4) {
                    fn4(q, vs + i, dim, out);
                    acc += out[0] + out[1] + out[2] + out[3];
                }
            } else {
                for (size_t i = 0; i < nv; i++)
                    acc += fn(q, vs[i], dim);
            }
        }
        sink = acc;
        double t = (now_ns() - t0) / (double)(reps * nv);
        if (t < best)
            best = t;
    }
    return best;
}

int
main(void)
{
    static const uint32_t dims[] = {100, 128, 784, 1536};
    size_t nt;
    const keel_kernels *const *all = keel__kernels_all(&nt);

    printf("ns per distance (x4: per vector); default table: %s\n",
           keel__kernels()->name);
    printf("%-7s %5s | %7s %7s %7s %7s | %7s %7s %7s %7s\n", "table", "dim",
           "l2 f32", "l2x4", "dot f32", "dotx4", "l2 f16", "l2x4", "dot f16",
           "dotx4");
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        uint32_t dim = dims[d];
        size_t nv = 32768 / (dim * sizeof(float));
        nv = nv < 4 ? 4 : nv > MAX_VECS ? MAX_VECS : nv & ~(size_t)3;
        float *q = malloc((dim + 1) * sizeof(float));
        float *vf = malloc(nv * dim * sizeof(float));
        uint16_t *vh = malloc(nv * dim * sizeof(uint16_t));
        const void *pf[MAX_VECS], *ph[MAX_VECS];
        if (!q || !vf || !vh)
            return 1;
        for (uint32_t i = 0; i < dim; i++)
            q[i] = randf();
        for (size_t i = 0; i < nv * dim; i++) {
            vf[i] = randf();
            vh[i] = keel__f32_to_f16(vf[i]);
        }
        for (size_t i = 0; i < nv; i++) {
            pf[i] = vf + i * dim;
            ph[i] = vh + i * dim;
        }
        for (size_t t = 0; t < nt; t++) {
            const keel_kernels *k = all[t];
            double r[8];
            for (int p = 0; p < 2; p++) {
                const void *const *vs = p ? ph : pf;
                r[p * 4 + 0] = time_kernel(k->l2sq[p], NULL, q, vs, nv, dim);
                r[p * 4 + 1] = time_kernel(NULL, k->l2sq4[p], q, vs, nv, dim);
                r[p * 4 + 2] = time_kernel(k->dot[p], NULL, q, vs, nv, dim);
                r[p * 4 + 3] = time_kernel(NULL, k->dot4[p], q, vs, nv, dim);
            }
            printf("%-7s %5u | %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f %7.2f "
                   "%7.2f\n",
                   k->name, dim, r[0], r[1], r[2], r[3], r[4], r[5], r[6],
                   r[7]);
        }
        free(q);
        free(vf);
        free(vh);
    }
    return 0;
}
