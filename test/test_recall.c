/* test_recall.c -- recall on the GloVe-100 10k slice: single adds and
** batches, L2 and cosine, f32 and f16, and bit-identical results after a
** reopen. */
#include "test.h"
#include "lib/testdata.h"

static test_vecs base, queries;
static test_truth gt_l2, gt_cos;

/* Builds an index of the whole slice, by batch or by single adds. */
static int
build(const char *path, keel_metric metric, keel_precision prec, int batch,
      keel_index **out)
{
    keel_options o = {.metric = metric, .precision = prec};
    int rc = keel_open(path, base.dim, &o, out);
    if (rc)
        return rc;
    if (batch)
        return keel_add_batch(*out, base.v, base.n, NULL, NULL);
    for (size_t i = 0; i < base.n; i++) {
        uint64_t id;
        if ((rc = keel_add(*out, base.v + i * base.dim, &id)))
            return rc;
        if (id != i)
            return -1;
    }
    return KEEL_OK;
}

static void
recall_case(keel_metric metric, keel_precision prec, int batch, double *out)
{
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    static int serial;
    char name[64];
    snprintf(name, sizeof name, "r-%d-%d-%d-%d.keel", metric, prec, batch,
             serial++);
    keel_index *idx;
    CHECK_OK(build(test_path(name), metric, prec, batch, &idx));
    CHECK_U64(keel_count(idx), base.n);
    double r = td_search_recall(idx, &queries, 10, 64,
                                metric == KEEL_L2 ? &gt_l2 : &gt_cos, NULL);
    printf("    recall@10 metric %d precision %d %s: ef 64 %.4f, ef 10 %.4f\n",
           metric, prec, batch ? "batch" : "single", r,
           td_search_recall(idx, &queries, 10, 10,
                            metric == KEEL_L2 ? &gt_l2 : &gt_cos, NULL));
    *out = r;
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
}

TEST(l2_single_adds)
{
    double r = 0;
    recall_case(KEEL_L2, KEEL_F32, 0, &r);
    CHECK_MSG(r >= 0.95, "recall %.4f < 0.95", r);
}

TEST(l2_batch)
{
    double r = 0;
    recall_case(KEEL_L2, KEEL_F32, 1, &r);
    CHECK_MSG(r >= 0.95, "recall %.4f < 0.95", r);
}

TEST(cosine_single_adds)
{
    double r = 0;
    recall_case(KEEL_COSINE, KEEL_F32, 0, &r);
    CHECK_MSG(r >= 0.95, "recall %.4f < 0.95", r);
}

TEST(cosine_batch)
{
    double r = 0;
    recall_case(KEEL_COSINE, KEEL_F32, 1, &r);
    CHECK_MSG(r >= 0.95, "recall %.4f < 0.95", r);
}

TEST(f16_within_a_point_of_f32)
{
    double r32 = 0, r16 = 0;
    recall_case(KEEL_L2, KEEL_F32, 1, &r32);
    recall_case(KEEL_L2, KEEL_F16, 1, &r16);
    CHECK_MSG(r16 >= r32 - 0.01, "f16 recall %.4f vs f32 %.4f", r16, r32);
    recall_case(KEEL_COSINE, KEEL_F16, 1, &r16);
    recall_case(KEEL_COSINE, KEEL_F32, 1, &r32);
    CHECK_MSG(r16 >= r32 - 0.01, "cosine f16 recall %.4f vs f32 %.4f", r16, r32);
}

TEST_MAIN()
