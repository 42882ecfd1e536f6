/* test_filter.c -- prepared allow-lists (keel_filter) and per-query
** allow-lists in keel_search_batch: the same results as the id arrays they
** stand for, bit for bit; ranges equal to their explicit ids; a huge range
** in constant memory; and the arguments refused. */
#include "test.h"
#include "lib/testdata.h"

static const uint32_t dim = 16;
static const size_t nvec = 5000;

static keel_index *
fixture(float **vecs)
{
    keel_index *idx;
    if (keel_open(KEEL_MEMORY, dim, NULL, &idx) != KEEL_OK)
        return NULL;
    *vecs = td_random(nvec, dim, 11);
    if (keel_add_batch(idx, *vecs, nvec, NULL, NULL) != KEEL_OK)
        return NULL;
    return idx;
}

static int
same(const keel_result *a, size_t na, const keel_result *b, size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (a[i].id != b[i].id || a[i].distance != b[i].distance)
            return 0;
    return 1;
}

/* A filter equals the id array it was made from, in single searches. */
TEST(filter_equals_ids)
{
    float *v;
    keel_index *idx = fixture(&v);
    CHECK(idx);
    uint64_t state = 5;
    for (size_t m = 0; m <= 4000; m = m ? m * 4 : 1) {
        uint64_t *ids = malloc((m + 1) * sizeof *ids);
        for (size_t i = 0; i < m; i++)
            ids[i] = test_rand(&state) % (nvec + 500); /* some not in it */
        keel_filter *f;
        CHECK_OK(keel_filter_new(ids, m, &f));
        CHECK(keel_filter_count(f) <= m);
        for (size_t qi = 0; qi < 20; qi++) {
            keel_result a[10], b[10];
            size_t na, nb;
            keel_search_params pa = {.allowed = ids, .n_allowed = m};
            keel_search_params pb = {.allowed_filter = f};
            const float *q = v + qi * 37 * dim;
            CHECK_OK(keel_search(idx, q, 10, &pa, a, &na));
            CHECK_OK(keel_search(idx, q, 10, &pb, b, &nb));
            CHECK_MSG(same(a, na, b, nb), "m %zu query %zu", m, qi);
        }
        CHECK_OK(keel_filter_free(f));
        free(ids);
    }
    free(v);
    CHECK_OK(keel_close(idx));
}

/* Ranges (short ones become sets, long ones stay intervals) equal their
** explicit ids. */
TEST(range_equals_explicit)
{
    float *v;
    keel_index *idx = fixture(&v);
    CHECK(idx);
    static const struct { uint64_t first, end, step; } cases[] = {
        {0, 5000, 1}, {100, 600, 1}, {3, 4999, 7}, {10, 10, 1}, {20, 10, 3},
        {4990, 1000000, 1}, {0, 200000, 2}, {1000, 150000, 3},
        {0, UINT64_MAX, 1}, {1, UINT64_MAX, 1000}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t first = cases[c].first, end = cases[c].end,
                 step = cases[c].step;
        /* The explicit ids that can be in the index (ids < nvec). */
        uint64_t *ids = malloc(nvec * sizeof *ids);
        size_t m = 0;
        for (uint64_t id = first; id < end && id < nvec; id += step)
            ids[m++] = id;
        keel_filter *f;
        CHECK_OK(keel_filter_new_range(first, end, step, &f));
        uint64_t want = first < end ? (end - first - 1) / step + 1 : 0;
        CHECK_U64(keel_filter_count(f), want);
        for (size_t qi = 0; qi < 20; qi++) {
            keel_result a[10], b[10];
            size_t na, nb;
            keel_search_params pa = {.allowed = ids, .n_allowed = m};
            keel_search_params pb = {.allowed_filter = f};
            const float *q = v + qi * 41 * dim;
            CHECK_OK(keel_search(idx, q, 10, &pa, a, &na));
            CHECK_OK(keel_search(idx, q, 10, &pb, b, &nb));
            CHECK_MSG(same(a, na, b, nb), "range case %zu query %zu", c, qi);
        }
        CHECK_OK(keel_filter_free(f));
        free(ids);
    }
    free(v);
    CHECK_OK(keel_close(idx));
}

static long
rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* A range of 10**18 ids is a few words: searching with it costs no memory
** to speak of. */
TEST(huge_range_constant_memory)
{
    float *v;
    keel_index *idx = fixture(&v);
    CHECK(idx);
    keel_result r[10];
    size_t n;
    CHECK_OK(keel_search(idx, v, 10, NULL, r, &n)); /* warm the pools */
    long before = rss_kib();
    keel_filter *f;
    CHECK_OK(keel_filter_new_range(0, 1000000000000000000ull, 1, &f));
    CHECK_U64(keel_filter_count(f), 1000000000000000000ull);
    keel_search_params p = {.allowed_filter = f};
    for (int i = 0; i < 100; i++)
        CHECK_OK(keel_search(idx, v + i * dim, 10, &p, r, &n));
    CHECK_U64(n, 10);
    long after = rss_kib();
    printf("    RSS before %ld KiB, after %ld KiB\n", before, after);
    CHECK(after - before < 4096);
    CHECK_OK(keel_filter_free(f));
    free(v);
    CHECK_OK(keel_close(idx));
}

/* Per-query allow-lists: row i equals keel_search of query i with its own
** filter, bit for bit, on one thread and on many. */
TEST(per_query_equals_single)
{
    float *v;
    keel_index *idx = fixture(&v);
    CHECK(idx);
    enum { NQ = 200, K = 10 };
    keel_filter *fs[NQ];
    uint64_t state = 9;
    for (size_t i = 0; i < NQ; i++) {
        if (i % 5 == 0) {
            fs[i] = NULL; /* every id */
        } else if (i % 5 == 1) {
            CHECK_OK(keel_filter_new_range(i * 10, i * 10 + 3000, 1 + i % 3,
                                           &fs[i]));
        } else {
            size_t m = (size_t)(test_rand(&state) % 2000);
            uint64_t *ids = malloc((m + 1) * sizeof *ids);
            for (size_t j = 0; j < m; j++)
                ids[j] = test_rand(&state) % nvec;
            CHECK_OK(keel_filter_new(ids, m, &fs[i]));
            free(ids);
        }
    }
    const float *q = v + 100 * dim;
    keel_result *out = malloc(NQ * K * sizeof *out);
    size_t got[NQ];
    const keel_filter *const *per = (const keel_filter *const *)fs;
    keel_search_params p = {.query_filters = per};
    /* 200 queries run on the handle's threads (every core). */
    CHECK_OK(keel_search_batch(idx, q, NQ, K, &p, out, got));
    for (size_t i = 0; i < NQ; i++) {
        keel_result one[K];
        size_t n1;
        keel_search_params p1 = {.allowed_filter = fs[i]};
        CHECK_OK(keel_search(idx, q + i * dim, K, &p1, one, &n1));
        CHECK_MSG(same(out + i * K, got[i], one, n1), "query %zu", i);
    }
    /* query_filters all equal to one filter give allowed_filter's results. */
    const keel_filter *all_same[NQ];
    for (size_t i = 0; i < NQ; i++)
        all_same[i] = fs[1];
    keel_search_params ps = {.query_filters = all_same};
    keel_search_params pf = {.allowed_filter = fs[1]};
    keel_result *out2 = malloc(NQ * K * sizeof *out2);
    size_t got2[NQ];
    CHECK_OK(keel_search_batch(idx, q, NQ, K, &ps, out, got));
    CHECK_OK(keel_search_batch(idx, q, NQ, K, &pf, out2, got2));
    for (size_t i = 0; i < NQ; i++)
        CHECK(same(out + i * K, got[i], out2 + i * K, got2[i]));
    for (size_t i = 0; i < NQ; i++)
        keel_filter_free(fs[i]);
    free(out);
    free(out2);
    free(v);
    CHECK_OK(keel_close(idx));
}

TEST(refusals)
{
    keel_filter *f = (keel_filter *)1;
    CHECK_ERR(keel_filter_new(NULL, 3, &f), KEEL_EINVAL);
    CHECK(f == NULL);
    CHECK_MSG_HAS("ids = NULL with n = 3");
    CHECK_MSG_HAS("help: ");
    CHECK_ERR(keel_filter_new(NULL, 0, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("out = NULL");
    CHECK_ERR(keel_filter_new_range(0, 10, 0, &f), KEEL_EINVAL);
    CHECK_MSG_HAS("step is 0");
    CHECK_MSG_HAS("help: ");
    CHECK_OK(keel_filter_free(NULL));
    CHECK_U64(keel_filter_count(NULL), 0);

    keel_index *idx;
    CHECK_OK(keel_open(KEEL_MEMORY, 4, NULL, &idx));
    float q[4] = {1, 0, 0, 0};
    CHECK_OK(keel_add(idx, q, NULL));
    CHECK_OK(keel_filter_new(NULL, 0, &f));
    keel_result r[4];
    size_t n = 99;
    keel_search_params p = {.allowed_filter = f};
    CHECK_OK(keel_search(idx, q, 4, &p, r, &n));
    CHECK_U64(n, 0); /* an empty allow-list matches nothing */
    const keel_filter *per[1] = {f};
    p = (keel_search_params){.query_filters = per};
    CHECK_ERR(keel_search(idx, q, 4, &p, r, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("query_filters, which belong to keel_search_batch");
    CHECK_MSG_HAS("help: ");
    p = (keel_search_params){.query_filters = per, .allowed_filter = f};
    CHECK_ERR(keel_search_batch(idx, q, 1, 4, &p, r, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("was given 2 of allowed, allowed_filter, query_filters "
                  "and filter");
    CHECK_OK(keel_filter_free(f));
    CHECK_OK(keel_close(idx));
}

TEST_MAIN()
