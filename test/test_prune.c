/* test_prune.c -- prunings of full lists during batch builds (graph.c
** keel__graph_add_link): entries that a list's own selection chose are
** measured only against the others (graph.h invariant 4, closed sets), and
** the lists come out exactly as when every entry is measured: the same
** file bytes past the headers, under L2 and cosine, f32 and f16, with and
** without codes, for a second batch on top of a first, and with copies of
** vectors among the batch (whose prunings measure everything). */
#include "test.h"
#include "lib/testdata.h"

#include "hnsw/build.h"
#include "store/format.h"

static test_vecs base, queries;

/* Builds path from the first n base vectors (copies: every 7th row is a
** copy of row 0) in one batch, or in two when split, on one thread, with
** M 4 so that nearly every list fills and is pruned many times. */
static int
build(const char *path, keel_metric metric, keel_precision prec,
      keel_codes codes, size_t n, int split, int copies, int measure_all)
{
    keel_options o = {.metric = metric, .precision = prec, .codes = codes,
                      .max_connections = 4, .threads = 1};
    float *v = malloc(n * base.dim * sizeof *v);
    memcpy(v, base.v, n * base.dim * sizeof *v);
    for (size_t i = 7; copies && i < n; i += 7)
        memcpy(v + i * base.dim, v, base.dim * sizeof *v);
    keel_index *idx;
    int rc = keel_open(path, base.dim, &o, &idx);
    if (rc) {
        free(v);
        return rc;
    }
    keel__build_measure_all = measure_all;
    size_t first = split ? n / 2 : n;
    rc = keel_add_batch(idx, v, first, NULL, NULL);
    if (!rc && first < n)
        rc = keel_add_batch(idx, v + first * base.dim, n - first, NULL, NULL);
    keel__build_measure_all = 0;
    if (!rc)
        rc = keel_flush(idx);
    int rc2 = keel_close(idx);
    free(v);
    return rc ? rc : rc2;
}

/* 1 when the files at a and b hold the same bytes past their two header
** copies (which differ in the file's random identity). */
static int
same_past_headers(const char *a, const char *b)
{
    size_t la, lb;
    unsigned char *fa = td_read_file(a, &la), *fb = td_read_file(b, &lb);
    size_t from = KEEL_HDR_B_OFF + KEEL_PAGE_SLOT;
    int same = fa && fb && la == lb && la > from &&
               memcmp(fa + from, fb + from, la - from) == 0;
    if (fa && fb && la == lb && !same)
        for (size_t i = from; i < la; i++)
            if (fa[i] != fb[i]) {
                fprintf(stderr, "%s and %s differ first at byte %zu\n", a, b,
                        i);
                break;
            }
    free(fa);
    free(fb);
    return same;
}

static void
prune_case(keel_metric metric, keel_precision prec, keel_codes codes,
           int split, int copies)
{
    td_glove_slice(&base, &queries, NULL, NULL);
    const char *a = test_path("closed.keel"), *b = test_path("all.keel");
    unlink(a);
    unlink(b);
    CHECK_OK(build(a, metric, prec, codes, 4000, split, copies, 0));
    CHECK_OK(build(b, metric, prec, codes, 4000, split, copies, 1));
    CHECK(same_past_headers(a, b));
    /* And the files answer alike (ids and distance bits). */
    keel_index *ia, *ib;
    CHECK_OK(keel_open_reader(a, NULL, &ia));
    CHECK_OK(keel_open_reader(b, NULL, &ib));
    keel_search_params p = {.ef = 64};
    CHECK(td_same_answers(ia, ib, queries.v, queries.n, base.dim, 10, &p));
    CHECK_OK(keel_close(ia));
    CHECK_OK(keel_close(ib));
}

/* Each case: metric, precision, codes, two batches, copies among them. */
static const struct prune_setup {
    const char *name;
    keel_metric metric;
    keel_precision prec;
    keel_codes codes;
    int split, copies;
} setups[] = {
    {"L2 f32", KEEL_L2, KEEL_F32, KEEL_CODES_NONE, 0, 0},
    {"cosine f32 with codes", KEEL_COSINE, KEEL_F32, KEEL_CODES_I8, 0, 0},
    {"cosine f16", KEEL_COSINE, KEEL_F16, KEEL_CODES_NONE, 0, 0},
    {"IP f32", KEEL_IP, KEEL_F32, KEEL_CODES_NONE, 0, 0},
    {"L2 with codes, a second batch", KEEL_L2, KEEL_F32, KEEL_CODES_I8, 1, 0},
    {"cosine with copies", KEEL_COSINE, KEEL_F32, KEEL_CODES_NONE, 0, 1},
    {"L2 with copies", KEEL_L2, KEEL_F32, KEEL_CODES_NONE, 0, 1},
};

TEST(every_setup_prunes_as_when_measuring_all)
{
    for (size_t i = 0; i < sizeof setups / sizeof setups[0]; i++) {
        const struct prune_setup *u = &setups[i];
        printf("     %s\n", u->name);
        prune_case(u->metric, u->prec, u->codes, u->split, u->copies);
    }
}

TEST_MAIN()
