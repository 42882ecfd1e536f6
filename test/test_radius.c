/* test_radius.c -- keel_search_radius: recall against an exact scan at
** several radii (l2 and cosine, default parameters), the cap, allow-lists,
** deletes, and the arguments it refuses. */
#include "test.h"
#include "lib/testdata.h"

#define KEEL_TEST_MIN(a, b) ((a) < (b) ? (a) : (b))

static test_vecs base, queries;

/* Exact distance as keel reports it, in double. */
static double
exact(keel_metric m, const float *a, const float *b, uint32_t dim)
{
    if (m == KEEL_L2)
        return sqrt(td_l2sq(a, b, dim));
    double dot = 0, na = 0, nb = 0;
    for (uint32_t i = 0; i < dim; i++) {
        dot += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    return m == KEEL_COSINE ? 1 - dot / sqrt(na * nb) : 1 - dot;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Recall of radius searches of every query at radius r (cap results) against
** the exact in-radius sets; checks every result is within r and sorted. */
static double
radius_recall(keel_index *idx, keel_metric m, float r, size_t cap,
              const keel_search_params *p, double *mean_found)
{
    keel_result *out = malloc(cap * sizeof *out);
    double *d = malloc(base.n * sizeof *d);
    size_t truth = 0, hit = 0, found = 0;
    for (size_t qi = 0; qi < queries.n; qi++) {
        const float *q = queries.v + qi * queries.dim;
        size_t n;
        if (keel_search_radius(idx, q, r, cap, p, out, &n) != KEEL_OK) {
            fprintf(stderr, "%s\n", keel_errmsg());
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            if (out[i].distance > r ||
                (i && out[i].distance < out[i - 1].distance))
                return -2;
        }
        for (size_t b = 0; b < base.n; b++)
            d[b] = exact(m, q, base.v + b * base.dim, base.dim);
        /* The true answer: the cap nearest within r (rounding at the edge
         * of the radius is forgiven: a hair inside counts). */
        double *sorted = malloc(base.n * sizeof *sorted);
        memcpy(sorted, d, base.n * sizeof *d);
        qsort(sorted, base.n, sizeof *sorted, cmp_double);
        size_t in = 0;
        while (in < base.n && sorted[in] <= (double)r * (1 - 1e-5) - 1e-6)
            in++;
        double edge = in > cap ? sorted[cap - 1] : INFINITY;
        size_t want = KEEL_TEST_MIN(in, cap);
        free(sorted);
        truth += want;
        for (size_t i = 0; i < n; i++) {
            double e = d[out[i].id];
            if (e <= (double)r * (1 - 1e-5) - 1e-6 && e <= edge)
                hit++;
        }
        found += n;
    }
    free(out);
    free(d);
    if (mean_found)
        *mean_found = (double)found / (double)queries.n;
    return truth ? KEEL_TEST_MIN(1.0, (double)hit / (double)truth) : 1.0;
}

static void
recall_case(keel_metric m, const float *radii, size_t nr)
{
    td_glove_slice(&base, &queries, NULL, NULL);
    keel_options o = {.metric = m};
    keel_index *idx;
    CHECK_OK(keel_open(KEEL_MEMORY, base.dim, &o, &idx));
    CHECK_OK(keel_add_batch(idx, base.v, base.n, NULL, NULL));
    for (size_t i = 0; i < nr; i++) {
        double mean;
        double r = radius_recall(idx, m, radii[i], 1000, NULL, &mean);
        printf("    %s radius %.3g: %.1f found per query, recall %.4f\n",
               m == KEEL_L2 ? "l2" : "cosine", (double)radii[i], mean, r);
        CHECK_MSG(r >= 0.95, "recall %.4f at radius %g", r, (double)radii[i]);
    }
    /* A cap below the in-radius count: the nearest cap of them. */
    double r = radius_recall(idx, m, radii[nr - 1], 10, NULL, NULL);
    printf("    %s radius %.3g cap 10: recall %.4f\n",
           m == KEEL_L2 ? "l2" : "cosine", (double)radii[nr - 1], r);
    CHECK(r >= 0.95);
    CHECK_OK(keel_close(idx));
}

TEST(recall_l2)
{
    /* About 7, 120, 620 and 960 base vectors per query lie within these. */
    const float radii[] = {4.0f, 5.0f, 6.0f, 7.0f};
    recall_case(KEEL_L2, radii, 4);
}

TEST(recall_cosine)
{
    /* About 2, 15 and 77 per query. */
    const float radii[] = {0.25f, 0.35f, 0.45f};
    recall_case(KEEL_COSINE, radii, 3);
}

static int
odd_only(uint64_t id, void *arg)
{
    (void)arg;
    return id & 1;
}

TEST(filters_and_deletes)
{
    const uint32_t dim = 8;
    keel_index *idx;
    CHECK_OK(keel_open(KEEL_MEMORY, dim, NULL, &idx));
    float *v = td_random(2000, dim, 3);
    CHECK_OK(keel_add_batch(idx, v, 2000, NULL, NULL));
    CHECK_OK(keel_add_with_id(idx, 5000, v + 7 * dim)); /* a copy of 7 */
    keel_result out[3000];
    size_t n;
    /* radius 0: exact copies */
    CHECK_OK(keel_search_radius(idx, v + 7 * dim, 0, 10, NULL, out, &n));
    CHECK_U64(n, 2);
    CHECK_U64(out[0].id, 7);
    CHECK_U64(out[1].id, 5000);
    CHECK(out[0].distance == 0 && out[1].distance == 0);
    CHECK_OK(keel_delete(idx, 5000));
    CHECK_OK(keel_search_radius(idx, v + 7 * dim, 0, 10, NULL, out, &n));
    CHECK_U64(n, 1);
    /* a callback and an allow-list (scanned: few ids; walked: many) */
    keel_search_params p = {.filter = odd_only};
    CHECK_OK(keel_search_radius(idx, v, 1.0f, 3000, &p, out, &n));
    CHECK(n > 0);
    for (size_t i = 0; i < n; i++)
        CHECK(out[i].id & 1);
    uint64_t few[] = {7, 8, 9, 5000};
    p = (keel_search_params){.allowed = few, .n_allowed = 4};
    CHECK_OK(keel_search_radius(idx, v + 7 * dim, 100.0f, 10, &p, out, &n));
    CHECK_U64(n, 3);
    CHECK_U64(out[0].id, 7);
    keel_filter *f;
    CHECK_OK(keel_filter_new_range(0, 2000, 2, &f));
    p = (keel_search_params){.allowed_filter = f};
    size_t all;
    CHECK_OK(keel_search_radius(idx, v, 100.0f, 3000, &p, out, &all));
    CHECK_U64(all, 1000); /* every even id, by an exact scan */
    CHECK_OK(keel_search_radius(idx, v, 100.0f, 3000, NULL, out, &all));
    CHECK_U64(all, 2000);
    CHECK_OK(keel_filter_free(f));
    keel_index *empty;
    CHECK_OK(keel_open(KEEL_MEMORY, dim, NULL, &empty));
    CHECK_OK(keel_search_radius(empty, v, 1.0f, 10, NULL, out, &n));
    CHECK_U64(n, 0);
    CHECK_OK(keel_close(empty));
    free(v);
    CHECK_OK(keel_close(idx));
}

TEST(refusals)
{
    const uint32_t dim = 4;
    keel_index *idx, *ip;
    keel_options o = {.metric = KEEL_IP};
    CHECK_OK(keel_open(KEEL_MEMORY, dim, NULL, &idx));
    CHECK_OK(keel_open(KEEL_MEMORY, dim, &o, &ip));
    float q[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    CHECK_OK(keel_add(idx, q, NULL));
    CHECK_OK(keel_add(ip, q, NULL));
    keel_result out[4];
    size_t n = 99;
    CHECK_ERR(keel_search_radius(idx, q, NAN, 4, NULL, out, &n),
              KEEL_EINVAL);
    CHECK_MSG_HAS("radius is NaN");
    CHECK_MSG_HAS("help: ");
    CHECK_ERR(keel_search_radius(idx, q, INFINITY, 4, NULL, out, &n),
              KEEL_EINVAL);
    CHECK_MSG_HAS("radius is inf");
    CHECK_MSG_HAS("help: ");
    CHECK_ERR(keel_search_radius(idx, q, -0.5f, 4, NULL, out, &n),
              KEEL_EINVAL);
    CHECK_MSG_HAS("radius is -0.5, but l2 distances are never negative");
    CHECK_ERR(keel_search_radius(idx, q, 1, 0, NULL, out, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("max_results is 0");
    CHECK_ERR(keel_search_radius(idx, q, 1, 1000001, NULL, out, &n),
              KEEL_EINVAL);
    CHECK_MSG_HAS("max_results is 1000001");
    CHECK_ERR(keel_search_radius(NULL, q, 1, 4, NULL, out, &n), KEEL_EINVAL);
    CHECK_ERR(keel_search_radius(idx, NULL, 1, 4, NULL, out, &n),
              KEEL_EINVAL);
    CHECK_ERR(keel_search_radius(idx, q, 1, 4, NULL, NULL, &n), KEEL_EINVAL);
    float bad[4] = {0, NAN, 0, 0};
    CHECK_ERR(keel_search_radius(idx, bad, 1, 4, NULL, out, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("NaN at component 1");
    keel_filter *f;
    CHECK_OK(keel_filter_new(NULL, 0, &f));
    const keel_filter *per[1] = {f};
    keel_search_params p = {.query_filters = per};
    CHECK_ERR(keel_search_radius(idx, q, 1, 4, &p, out, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("query_filters");
    uint64_t one = 0;
    p = (keel_search_params){.allowed = &one, .n_allowed = 1,
                             .allowed_filter = f};
    CHECK_ERR(keel_search_radius(idx, q, 1, 4, &p, out, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("was given 2 of");
    CHECK_U64(n, 99); /* unchanged on failure */
    /* Inner-product distances go below zero: so may the radius. */
    CHECK_OK(keel_search_radius(ip, q, -0.5f, 4, NULL, out, &n));
    CHECK_U64(n, 0);
    CHECK_OK(keel_search_radius(ip, q, 0.0f, 4, NULL, out, &n));
    CHECK_U64(n, 1);
    CHECK_OK(keel_filter_free(f));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_close(ip));
}

TEST_MAIN()
