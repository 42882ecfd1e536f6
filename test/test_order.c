/* test_order.c -- the slot order of a batch (hnsw/order.h): a permutation,
** the same every time, near vectors in neighbouring slots (for cosine by
** direction whatever their lengths), small batches left alone, bounded
** time on inputs that defeat the selection's pivots, a cancel heard; and
** through the API, a batch and a compaction laid out in that order keep
** every id with its own vector and find every vector, clustered input
** handed over cluster by cluster too. */
#include "test.h"
#include "lib/testdata.h"

#include "hnsw/order.h"

typedef struct rows {
    const float *v;
    uint32_t dim;
} rows;

static const float *
row_at(void *arg, size_t i, float *buf)
{
    (void)buf;
    const rows *r = arg;
    return r->v + i * r->dim;
}

static uint64_t rng_state = 99;

static double
uniform(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

/* K clusters of `per` vectors each, in a scrambled order: cluster[i] of
** row i. Centres at random places (components uniform in -100..100),
** members within 1 of theirs, then each row scaled by a length in
** [0.01, 100) when scaled (for cosine, whose clusters are directions). */
enum { K = 8, DIM = 16 };

static float *
clusters(size_t per, int scaled, int *cluster)
{
    size_t n = K * per;
    float centre[K][DIM];
    for (int k = 0; k < K; k++)
        for (uint32_t d = 0; d < DIM; d++)
            centre[k][d] = (float)(uniform() * 200.0 - 100.0);
    float *v = malloc(n * DIM * sizeof *v);
    for (size_t i = 0; i < n; i++)
        cluster[i] = (int)(i % K);
    for (size_t i = n; i-- > 1;) { /* Fisher-Yates */
        size_t j = (size_t)(uniform() * (double)(i + 1));
        int t = cluster[i];
        cluster[i] = cluster[j];
        cluster[j] = t;
    }
    for (size_t i = 0; i < n; i++) {
        float len = scaled ? (float)(0.01 * pow(1e4, uniform())) : 1.0f;
        for (uint32_t d = 0; d < DIM; d++)
            v[i * DIM + d] = len * (centre[cluster[i]][d] +
                                    (float)(uniform() * 2.0 - 1.0));
    }
    return v;
}

/* Whether order is a permutation of 0..n-1. */
static int
is_permutation(const uint32_t *order, size_t n)
{
    unsigned char *seen = calloc(n, 1);
    int ok = 1;
    for (size_t t = 0; t < n && ok; t++) {
        ok = order[t] < n && !seen[order[t]];
        if (ok)
            seen[order[t]] = 1;
    }
    free(seen);
    return ok;
}

/* How many times the cluster changes from one slot to the next. */
static size_t
changes(const uint32_t *order, size_t n, const int *cluster)
{
    size_t c = 0;
    for (size_t t = 1; t < n; t++)
        c += cluster[order[t]] != cluster[order[t - 1]];
    return c;
}

TEST(a_batch_is_laid_out_cluster_by_cluster_the_same_every_time)
{
    size_t per = 700, n = K * per;
    int *cluster = malloc(n * sizeof *cluster);
    float *v = clusters(per, 0, cluster);
    rows r = {v, DIM};
    uint32_t *a = keel__order_batch(n, DIM, 0, row_at, &r, NULL, NULL);
    uint32_t *b = keel__order_batch(n, DIM, 0, row_at, &r, NULL, NULL);
    CHECK(a && b);
    CHECK(is_permutation(a, n));
    CHECK(memcmp(a, b, n * sizeof *a) == 0);
    size_t in_order = changes(a, n, cluster);
    uint32_t *ident = malloc(n * sizeof *ident);
    for (size_t t = 0; t < n; t++)
        ident[t] = (uint32_t)t;
    size_t as_given = changes(ident, n, cluster);
    printf("     %zu cluster changes between neighbouring slots, %zu in the "
           "batch's own order\n", in_order, as_given);
    /* K - 1 is the fewest; a cluster cut by a median costs two more. */
    CHECK_MSG(in_order <= 4 * K, "%zu cluster changes", in_order);
    CHECK(as_given > 10 * in_order);
    free(a);
    free(b);
    free(ident);
    free(v);
    free(cluster);
}

TEST(cosine_orders_by_direction_whatever_the_lengths)
{
    size_t per = 700, n = K * per;
    int *cluster = malloc(n * sizeof *cluster);
    float *v = clusters(per, 1, cluster);
    rows r = {v, DIM};
    uint32_t *by_angle = keel__order_batch(n, DIM, 1, row_at, &r, NULL, NULL);
    uint32_t *by_l2 = keel__order_batch(n, DIM, 0, row_at, &r, NULL, NULL);
    CHECK(by_angle && by_l2);
    CHECK(is_permutation(by_angle, n));
    size_t ca = changes(by_angle, n, cluster), cl = changes(by_l2, n, cluster);
    printf("     cluster changes: %zu by angle, %zu by Euclidean distance\n",
           ca, cl);
    CHECK_MSG(ca <= 4 * K, "%zu cluster changes", ca);
    CHECK(cl > ca);
    free(by_angle);
    free(by_l2);
    free(v);
    free(cluster);
}

TEST(small_batches_and_equal_vectors)
{
    float *v = calloc((size_t)5000 * DIM, sizeof *v);
    rows r = {v, DIM};
    /* Below the least batch: the caller keeps its order. */
    CHECK(keel__order_batch(KEEL_ORDER_MIN_BATCH - 1, DIM, 0, row_at, &r, NULL, NULL) ==
          NULL);
    /* All equal (and all zero, which has no direction for cosine): every
     * key ties, positions break the ties, and it still ends. */
    for (int cosine = 0; cosine <= 1; cosine++) {
        uint32_t *o = keel__order_batch(5000, DIM, cosine, row_at, &r, NULL, NULL);
        CHECK(o && is_permutation(o, 5000));
        free(o);
    }
    for (size_t i = 0; i < (size_t)5000 * DIM; i++)
        v[i] = 3.0f;
    uint32_t *o = keel__order_batch(KEEL_ORDER_MIN_BATCH, DIM, 0, row_at, &r, NULL, NULL);
    CHECK(o && is_permutation(o, KEEL_ORDER_MIN_BATCH));
    free(o);
    free(v);
}

/* Every id gets its own vector back and finds itself first. */
static void
check_ids(keel_index *idx, const float *v, const uint64_t *ids, size_t n)
{
    float got[DIM];
    keel_result res[1];
    size_t found;
    keel_search_params p = {.ef = 64};
    for (size_t i = 0; i < n; i++) {
        CHECK_OK(keel_get(idx, ids[i], got));
        CHECK_MSG(memcmp(got, v + i * DIM, sizeof got) == 0,
                  "id %llu does not hold its vector",
                  (unsigned long long)ids[i]);
        CHECK_OK(keel_search(idx, v + i * DIM, 1, &p, res, &found));
        CHECK_MSG(found == 1 && res[0].distance == 0.0f,
                  "the vector of id %llu is not found (nearest at %g)",
                  (unsigned long long)ids[i], (double)res[0].distance);
    }
}

TEST(ids_keep_their_vectors_through_a_batch_and_a_compaction)
{
    size_t per = 400, n = K * per;
    int *cluster = malloc(n * sizeof *cluster);
    float *v = clusters(per, 0, cluster);
    uint64_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = 1000003ull * (i + 1) % 99991ull + 7 * i;
    keel_index *idx;
    keel_options o = {.codes = KEEL_CODES_I8};
    CHECK_OK(keel_open(test_path("order.keel"), DIM, &o, &idx));
    CHECK_OK(keel_add_batch(idx, v, n, ids, NULL));
    check_ids(idx, v, ids, n);
    CHECK_OK(keel_flush(idx));
    /* Half deleted, the rest compacted into the new order. */
    for (size_t i = 0; i < n; i += 2)
        CHECK_OK(keel_delete(idx, ids[i]));
    CHECK_OK(keel_compact(idx));
    CHECK_EQ(keel_count(idx), n / 2);
    float *rest = malloc(n / 2 * DIM * sizeof *rest);
    uint64_t *rest_ids = malloc(n / 2 * sizeof *rest_ids);
    for (size_t i = 1, m = 0; i < n; i += 2, m++) {
        memcpy(rest + m * DIM, v + i * DIM, DIM * sizeof *rest);
        rest_ids[m] = ids[i];
    }
    check_ids(idx, rest, rest_ids, n / 2);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    free(rest);
    free(rest_ids);
    free(ids);
    free(v);
    free(cluster);
}

/* Points on a line with the far end first: the median of three picks a
** poor pivot every time, which made the selection quadratic (2.4 s for
** 200,000 rows, 9.3 s for 400,000); with the heapsort fallback a million
** rows take well under a second. The bound only tells n log n from n^2. */
TEST(points_on_a_line_far_end_first_end_in_bounded_time)
{
    size_t n = 1000000;
    float *v = malloc(n * sizeof *v);
    v[0] = (float)n;
    for (size_t i = 1; i < n; i++)
        v[i] = (float)i;
    rows r = {v, 1};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint32_t *o = keel__order_batch(n, 1, 0, row_at, &r, NULL, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    printf("     %zu rows ordered in %.2f s\n", n, s);
    CHECK(o && is_permutation(o, n));
    CHECK_MSG(s < 30.0, "%.1f s: quadratic", s);
    free(o);
    free(v);
}

static int stop_count;

static int
stop_now(void *arg)
{
    (void)arg;
    stop_count++;
    return 1;
}

/* A cancel is asked while the order is worked out, and a yes ends it. */
TEST(a_cancel_stops_the_ordering)
{
    size_t n = 400000;
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((i * 7919) % n);
    rows r = {v, 1};
    stop_count = 0;
    uint32_t *o = NULL;
    /* The cancel is asked 0.05 s in: repeat until the work lasts that. */
    for (int tries = 0; tries < 20 && stop_count == 0; tries++) {
        free(o);
        o = keel__order_batch(n, 1, 0, row_at, &r, stop_now, NULL);
    }
    CHECK(stop_count == 1 && o == NULL);
    free(v);
}

/* Vectors in tight clusters, handed over cluster after cluster, then
** compacted: linked in the order they came (or in the file's slot order,
** which puts clusters together), whole clusters got no links in from the
** rest and 1,181 of 20,000 such vectors could not be found. Every vector
** finds itself first. */
TEST(clustered_input_in_cluster_order_stays_searchable)
{
    enum { CL = 50, PER = 200, D = 16 };
    size_t n = CL * PER;
    float *v = malloc(n * D * sizeof *v);
    float centre[CL][D];
    for (int k = 0; k < CL; k++)
        for (int d = 0; d < D; d++)
            centre[k][d] = (float)(uniform() * 200.0 - 100.0);
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < D; d++)
            v[i * D + d] = centre[i / PER][d] + (float)(uniform() * 0.02 - 0.01);
    keel_index *idx;
    CHECK_OK(keel_open(test_path("clusters.keel"), D, NULL, &idx));
    CHECK_OK(keel_add_batch(idx, v, n, NULL, NULL));
    keel_search_params p = {.ef = 64};
    for (int pass = 0; pass < 2; pass++) {
        size_t missed = 0;
        for (size_t i = 0; i < n; i++) {
            keel_result res[1];
            size_t found;
            CHECK_OK(keel_search(idx, v + i * D, 1, &p, res, &found));
            missed += !(found == 1 && res[0].id == i);
        }
        printf("     %s: %zu of %zu not found by a search for themselves\n",
               pass ? "after a compaction" : "one batch", missed, n);
        CHECK_EQ(missed, 0);
        CHECK_OK(keel_flush(idx));
        CHECK_OK(keel_compact(idx));
    }
    CHECK_OK(keel_close(idx));
    free(v);
}

TEST_MAIN()
