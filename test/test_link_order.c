/* test_link_order.c -- the order a batch is linked in (build.c link_order):
** input that walks through space (sorted by cluster or class) is linked in
** a shuffled order, so every vector stays reachable, through a batch and
** through a compaction of a file whose slots are in such an order; an
** order that does not walk through space is linked as given (the same
** graph as before: the same answers bit for bit across two builds). */
#include "test.h"
#include "lib/testdata.h"

static uint64_t rng_state = 99;

enum { D = 16 };

/* cl clusters of per vectors, row i in cluster i / per (sorted by
** cluster): centres uniform in -100..100 per component, members within
** 0.01 of theirs. */
static float *
sorted_clusters(int cl, int per)
{
    size_t n = (size_t)cl * per;
    float *centre = malloc((size_t)cl * D * sizeof *centre);
    for (size_t i = 0; i < (size_t)cl * D; i++)
        centre[i] = 100.0f * test_randf(&rng_state);
    float *v = malloc(n * D * sizeof *v);
    for (size_t i = 0; i < n; i++)
        for (int d = 0; d < D; d++)
            v[i * D + d] = centre[(i / per) * D + d] +
                           0.01f * test_randf(&rng_state);
    free(centre);
    return v;
}

/* How many of the n vectors (ids 0..n-1) a search for themselves does not
** find first. */
static size_t
missed(keel_index *idx, const float *v, size_t n)
{
    keel_search_params p = {.ef = 64};
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        keel_result res[1];
        size_t found = 0;
        if (keel_search(idx, v + i * D, 1, &p, res, &found) != KEEL_OK ||
            found != 1 || res[0].id != i)
            m++;
    }
    return m;
}

/* cl clusters of per, sorted by cluster, in one batch: every vector is
** found by a search for itself. */
static void
one_sorted_batch_finds_all(int cl, int per, const char *name)
{
    size_t n = (size_t)cl * per;
    float *v = sorted_clusters(cl, per);
    keel_index *idx;
    CHECK_OK(keel_open(test_path(name), D, NULL, &idx));
    CHECK_OK(keel_add_batch(idx, v, n, NULL, NULL));
    size_t m = missed(idx, v, n);
    printf("     %zu of %zu not found by a search for themselves\n", m, n);
    CHECK_EQ(m, 0);
    CHECK_OK(keel_close(idx));
    free(v);
}

/* Vectors in tight clusters, handed over cluster after cluster: linked in
** that order, whole clusters got no links in from the rest (1,181 of
** 20,000 such vectors could not be found at ef 500). */
TEST(clustered_input_in_cluster_order_stays_searchable)
{
    one_sorted_batch_finds_all(50, 200, "clusters.keel");
}

/* 256 classes of 40, sorted by class: steps sampled at evenly spaced places
** all fell on the borders between classes (n = 256 k), which looked like
** no order at all; the sample's places are drawn at random. */
TEST(classes_of_equal_size_sorted_by_class_are_seen)
{
    one_sorted_batch_finds_all(256, 40, "classes.keel");
}

/* Added in small batches (linked as given, cluster by cluster: some are
** hard to reach), then compacted: the compaction links the file's slots,
** which walk through space, in a shuffled order, and every vector is found
** again. */
TEST(a_compaction_relinks_a_file_in_cluster_order_reachably)
{
    enum { CL = 50, PER = 200, BATCH = 500 };
    size_t n = (size_t)CL * PER;
    float *v = sorted_clusters(CL, PER);
    keel_index *idx;
    CHECK_OK(keel_open(test_path("small_batches.keel"), D, NULL, &idx));
    for (size_t i = 0; i < n; i += BATCH)
        CHECK_OK(keel_add_batch(idx, v + i * D, BATCH, NULL, NULL));
    size_t before = missed(idx, v, n);
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_compact(idx));
    size_t after = missed(idx, v, n);
    printf("     not found: %zu before the compaction, %zu after\n", before,
           after);
    CHECK_EQ(after, 0);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    free(v);
}

/* Input in no such order (GloVe's slice, by word frequency): two builds
** of it answer the same (ids and distance bits), one thread each, and
** reach the slice's recall. */
TEST(input_in_no_order_builds_alike_twice)
{
    test_vecs base = {0}, queries = {0};
    test_truth gt_l2 = {0}, gt_cos = {0};
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    keel_options o = {.threads = 1};
    keel_index *a, *b;
    CHECK_OK(keel_open(test_path("glove_a.keel"), base.dim, &o, &a));
    CHECK_OK(keel_open(test_path("glove_b.keel"), base.dim, &o, &b));
    CHECK_OK(keel_add_batch(a, base.v, base.n, NULL, NULL));
    CHECK_OK(keel_add_batch(b, base.v, base.n, NULL, NULL));
    keel_search_params p = {.ef = 64};
    CHECK(td_same_answers(a, b, queries.v, queries.n, base.dim, 10, &p));
    double r = td_search_recall(a, &queries, 10, 64, &gt_l2, NULL);
    printf("     recall@10 at ef 64: %.4f\n", r);
    CHECK(r > 0.9);
    keel_close(a);
    keel_close(b);
    td_free_vecs(&base);
    td_free_vecs(&queries);
    td_free_truth(&gt_l2);
    td_free_truth(&gt_cos);
}

TEST_MAIN()
