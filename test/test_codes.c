/* test_codes.c -- traversal codes (keel_options.codes = KEEL_CODES_I8 and
** _I4): searches walk on int8 or 4-bit rows and return exact distances,
** recall stays
** that of the stored vectors, answers are deterministic, the rows follow
** their vectors through every way a file is written (adds, batches,
** compaction, f16, cosine, inner product), keel_check catches a changed
** row, and the option is fixed with the file like its precision. */
#include "test.h"
#include "lib/testdata.h"

#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#include "hnsw/codes.h"
#include "hnsw/dist.h"
#include "store/format.h"

static test_vecs base, queries;
static test_truth gt_l2, gt_cos;

static int
build(const char *path, keel_metric metric, keel_precision prec,
      keel_codes codes, size_t n, keel_index **out)
{
    keel_options o = {.metric = metric, .precision = prec, .codes = codes};
    int rc = keel_open(path, base.dim, &o, out);
    if (rc)
        return rc;
    return keel_add_batch(*out, base.v, n, NULL, NULL);
}

/* For every query: the coded index's results carry exactly the distance the
** plain index computes for the same id (one search of the plain index at a
** large ef, which finds them all, gives the reference). */
static int
distances_exact(keel_index *coded, keel_index *plain, size_t nq)
{
    for (size_t i = 0; i < nq; i++) {
        const float *q = queries.v + i * queries.dim;
        keel_result a[10], b[400];
        size_t na, nb;
        keel_search_params p = {.ef = 400};
        if (keel_search(coded, q, 10, NULL, a, &na) ||
            keel_search(plain, q, 400, &p, b, &nb) || na != 10)
            return 0;
        for (size_t j = 0; j < na; j++) {
            size_t m = 0;
            while (m < nb && b[m].id != a[j].id)
                m++;
            if (m == nb)
                continue; /* beyond the plain search's 400 */
            if (memcmp(&a[j].distance, &b[m].distance, 4) != 0) {
                fprintf(stderr, "query %zu id %llu: %.9g on codes, %.9g "
                        "measured\n", i, (unsigned long long)a[j].id,
                        a[j].distance, b[m].distance);
                return 0;
            }
        }
    }
    return 1;
}

/* 4-bit codes walk on a coarser distance: at 100 dimensions (this slice)
** they lose a little more recall at a small ef than 8-bit ones. */
static void
codes_case_of(keel_metric metric, keel_precision prec, keel_codes codes)
{
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    char pc[64], pp[64];
    snprintf(pc, sizeof pc, "c-%d-%d-%d.keel", metric, prec, (int)codes);
    snprintf(pp, sizeof pp, "p-%d-%d-%d.keel", metric, prec, (int)codes);
    keel_index *coded, *plain;
    CHECK_OK(build(test_path(pc), metric, prec, codes, base.n, &coded));
    CHECK_OK(build(test_path(pp), metric, prec, KEEL_CODES_NONE, base.n, &plain));
    const test_truth *gt = metric == KEEL_L2 ? &gt_l2 : &gt_cos;
    double rc64 = td_search_recall(coded, &queries, 10, 64, gt, NULL);
    double rp64 = td_search_recall(plain, &queries, 10, 64, gt, NULL);
    double rc10 = td_search_recall(coded, &queries, 10, 10, gt, NULL);
    double rp10 = td_search_recall(plain, &queries, 10, 10, gt, NULL);
    printf("    metric %d precision %d codes %d: recall@10 ef 64 %.4f on "
           "codes, %.4f on vectors; ef 10 %.4f / %.4f\n", metric, prec,
           (int)codes, rc64, rp64, rc10, rp10);
    double slack64 = codes == KEEL_CODES_I4 ? 0.02 : 0.01;
    double slack10 = codes == KEEL_CODES_I4 ? 0.08 : 0.03;
    CHECK_MSG(rc64 >= rp64 - slack64, "recall %.4f on codes, %.4f without",
              rc64, rp64);
    CHECK_MSG(rc10 >= rp10 - slack10, "recall at ef 10 %.4f on codes, %.4f "
              "without", rc10, rp10);
    CHECK(distances_exact(coded, plain, queries.n));
    keel_stats s;
    CHECK_OK(keel_stat(coded, &s));
    CHECK_EQ(s.codes, codes);
    CHECK_OK(keel_stat(plain, &s));
    CHECK_EQ(s.codes, KEEL_CODES_NONE);
    CHECK_OK(keel_check(coded));
    CHECK_OK(keel_close(coded));
    CHECK_OK(keel_close(plain));
}

static void
codes_case(keel_metric metric, keel_precision prec)
{
    codes_case_of(metric, prec, KEEL_CODES_I8);
}

TEST(codes_keep_recall_and_return_exact_distances_l2_f32)
{
    codes_case(KEEL_L2, KEEL_F32);
}

TEST(i4_codes_keep_recall_and_return_exact_distances_l2_f32)
{
    codes_case_of(KEEL_L2, KEEL_F32, KEEL_CODES_I4);
}

TEST(i4_codes_keep_recall_and_return_exact_distances_cosine_f16)
{
    codes_case_of(KEEL_COSINE, KEEL_F16, KEEL_CODES_I4);
}

TEST(codes_keep_recall_and_return_exact_distances_l2_f16)
{
    codes_case(KEEL_L2, KEEL_F16);
}

TEST(codes_keep_recall_and_return_exact_distances_cosine)
{
    codes_case(KEEL_COSINE, KEEL_F32);
}

TEST(codes_keep_recall_and_return_exact_distances_cosine_f16)
{
    codes_case(KEEL_COSINE, KEEL_F16);
}

/* Inner product: no ground truth file, so the reference is an exact scan
** through an allow-list of every id (keel_search's scan path). */
TEST(codes_under_inner_product_find_what_a_scan_finds)
{
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    keel_index *idx;
    CHECK_OK(build(test_path("ip.keel"), KEEL_IP, KEEL_F32, KEEL_CODES_I8,
                   2000, &idx));
    uint64_t *all = malloc(2000 * sizeof *all);
    for (uint64_t i = 0; i < 2000; i++)
        all[i] = i;
    size_t hit = 0, exact = 0;
    for (size_t i = 0; i < 100; i++) {
        const float *q = queries.v + i * queries.dim;
        keel_result a[10], b[10];
        size_t na, nb;
        keel_search_params ps = {.ef = 128};
        keel_search_params pa = {.allowed = all, .n_allowed = 2000};
        CHECK_OK(keel_search(idx, q, 10, &ps, a, &na));
        CHECK_OK(keel_search(idx, q, 10, &pa, b, &nb));
        for (size_t j = 0; j < na; j++)
            for (size_t m = 0; m < nb; m++)
                if (a[j].id == b[m].id) {
                    hit++;
                    exact += memcmp(&a[j].distance, &b[m].distance, 4) == 0;
                }
    }
    free(all);
    printf("    inner product: %zu of 1000 found by the scan too\n", hit);
    CHECK_MSG(hit >= 900, "only %zu of 1000", hit);
    CHECK_U64(exact, hit);
    CHECK_OK(keel_close(idx));
}

TEST(the_same_query_gives_the_same_ids_and_distance_bits)
{
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    keel_index *a, *b;
    CHECK_OK(build(test_path("det.keel"), KEEL_L2, KEEL_F32, KEEL_CODES_I8,
                   base.n, &a));
    CHECK_OK(keel_flush(a));
    CHECK_OK(keel_open_reader(test_path("det.keel"), NULL, &b));
    CHECK(td_same_answers(a, b, queries.v, queries.n, queries.dim, 10, NULL));
    CHECK(td_same_answers(b, b, queries.v, queries.n, queries.dim, 10, NULL));
    CHECK_OK(keel_close(b));
    CHECK_OK(keel_close(a));
}

/* Rows written by single adds, by batches and by compaction are the rows
** of their vectors: keel_check recomputes each one. */
static void
rows_follow(keel_codes codes)
{
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    keel_options o = {.codes = codes, .precision = KEEL_F16};
    keel_index *idx;
    const char *path = test_path(codes == KEEL_CODES_I4 ? "life4.keel"
                                                        : "life.keel");
    CHECK_OK(keel_open(path, base.dim, &o, &idx));
    for (size_t i = 0; i < 300; i++) {
        uint64_t id;
        CHECK_OK(keel_add(idx, base.v + i * base.dim, &id));
    }
    CHECK_OK(keel_add_batch(idx, base.v + 300 * base.dim, 3000, NULL, NULL));
    for (uint64_t id = 0; id < 3300; id += 3)
        CHECK_OK(keel_delete(idx, id));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_check(idx));
    keel_result before[10 * 50];
    size_t nb[50];
    for (size_t i = 0; i < 50; i++)
        CHECK_OK(keel_search(idx, queries.v + i * base.dim, 10, NULL,
                             before + 10 * i, &nb[i]));
    CHECK_OK(keel_compact(idx));
    CHECK_OK(keel_check(idx));
    keel_stats s;
    CHECK_OK(keel_stat(idx, &s));
    CHECK_EQ(s.codes, codes);
    CHECK_U64(s.count, 2200);
    CHECK_OK(keel_close(idx));
    /* Reopened with the file's own options: the codes come with it. */
    keel_options fo = {.flags = KEEL_FILE_OPTIONS};
    CHECK_OK(keel_open(path, 0, &fo, &idx));
    CHECK_OK(keel_stat(idx, &s));
    CHECK_EQ(s.codes, codes);
    size_t same = 0;
    for (size_t i = 0; i < 50; i++) {
        keel_result r[10];
        size_t n;
        CHECK_OK(keel_search(idx, queries.v + i * base.dim, 10, NULL, r, &n));
        for (size_t j = 0; j < n && j < nb[i]; j++)
            for (size_t m = 0; m < nb[i]; m++)
                same += r[j].id == before[10 * i + m].id &&
                        memcmp(&r[j].distance, &before[10 * i + m].distance,
                               4) == 0;
        for (size_t j = 0; j < n; j++)
            CHECK(r[j].id < 3300 && r[j].id % 3 != 0);
    }
    /* A new graph may route a little differently; the vectors and the
     * distances of the ids found are the same. */
    CHECK_MSG(same >= 450, "%zu of 500 results kept through compaction", same);
    CHECK_OK(keel_close(idx));
}

TEST(rows_follow_their_vectors_through_adds_deletes_and_compaction)
{
    rows_follow(KEEL_CODES_I8);
}

TEST(i4_rows_follow_their_vectors_through_adds_deletes_and_compaction)
{
    rows_follow(KEEL_CODES_I4);
}

/* The newer of the two valid header copies of the file at path
** (internals: format.h), or NULL; free it. */
static keel_header *
newest_header(const char *path)
{
    int fd = open(path, O_RDONLY);
    uint8_t *buf = malloc(KEEL_PAGE_SLOT);
    keel_header *h = malloc(sizeof *h), *h2 = malloc(sizeof *h2);
    off_t len = fd >= 0 ? lseek(fd, 0, SEEK_END) : 0;
    int a = fd >= 0 &&
            pread(fd, buf, KEEL_PAGE_SLOT, KEEL_HDR_A_OFF) == KEEL_PAGE_SLOT &&
            keel__header_decode(buf, (uint64_t)len, h, NULL, 0) == KEEL_OK;
    int b = fd >= 0 &&
            pread(fd, buf, KEEL_PAGE_SLOT, KEEL_HDR_B_OFF) == KEEL_PAGE_SLOT &&
            keel__header_decode(buf, (uint64_t)len, h2, NULL, 0) == KEEL_OK;
    if (b && (!a || h2->sequence > h->sequence))
        memcpy(h, h2, sizeof *h);
    free(h2);
    free(buf);
    if (fd >= 0)
        close(fd);
    if (!a && !b) {
        free(h);
        return NULL;
    }
    return h;
}

/* Where slot s's row sits in the file of header h; 0 without codes. */
static uint64_t
row_offset(const keel_header *h, uint64_t s, uint32_t *row_bytes)
{
    keel_geometry g;
    keel__geometry_init(&g, h);
    uint64_t i;
    uint32_t k = keel__slot_segment(&g, s, &i);
    keel_seg_layout L;
    keel__seg_layout(&g, k, &L);
    *row_bytes = g.code_bytes;
    return L.code_off ? h->seg_off[k] + L.code_off + i * g.code_bytes : 0;
}

/* A file of 500 vectors with codes, whose keel_check passes as written,
** fails it naming the slot once one bit (mask) of byte `at` of slot's row
** is flipped; rows are row_bytes long. */
static void
check_finds_flipped_row(const char *path, keel_codes codes, uint64_t slot,
                        uint32_t at, uint8_t mask, uint32_t row_bytes)
{
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    keel_index *idx;
    CHECK_OK(build(path, KEEL_L2, KEEL_F32, codes, 500, &idx));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open_reader(path, NULL, &idx));
    CHECK_OK(keel_check(idx)); /* as written */
    CHECK_OK(keel_close(idx));
    uint32_t rb = 0;
    keel_header *h = newest_header(path);
    CHECK(h != NULL);
    uint64_t off = row_offset(h, slot, &rb);
    free(h);
    CHECK(off != 0);
    CHECK_U64(rb, row_bytes);
    int fd = open(path, O_RDWR);
    uint8_t byte;
    CHECK(pread(fd, &byte, 1, (off_t)(off + at)) == 1);
    byte ^= mask;
    CHECK(pwrite(fd, &byte, 1, (off_t)(off + at)) == 1);
    close(fd);
    CHECK_OK(keel_open_reader(path, NULL, &idx));
    CHECK_ERR(keel_check(idx), KEEL_ECORRUPT);
    char want[32];
    snprintf(want, sizeof want, "slot %llu", (unsigned long long)slot);
    CHECK_MSG_HAS(want);
    CHECK_MSG_HAS("traversal code");
    CHECK_OK(keel_close(idx));
}

TEST(check_finds_a_row_that_does_not_match_its_vector)
{
    /* A code byte of slot 321; the row is 16 + 100 rounded up to 64. */
    check_finds_flipped_row(test_path("flip.keel"), KEEL_CODES_I8, 321,
                            16 + 40, 0x01, 128);
}

/* A file created with codes (dim floats each vector) keeps them: a writer
** naming other codes is refused with a message saying which, a writer
** naming none takes the file's and finds its vector, and the header holds
** read and write versions want_read and want_write. */
static void
codes_fixed_with_file(const char *path, uint32_t dim, keel_codes codes,
                      keel_codes other, const char *mismatch,
                      unsigned want_read, unsigned want_write)
{
    keel_index *idx;
    keel_options o = {.codes = codes};
    CHECK_OK(keel_open(path, dim, &o, &idx));
    float v[64];
    for (uint32_t i = 0; i < dim; i++)
        v[i] = (float)(i % 7) - 3.0f;
    uint64_t id;
    CHECK_OK(keel_add(idx, v, &id));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    keel_options bad = {.codes = other};
    CHECK_ERR(keel_open(path, dim, &bad, &idx), KEEL_EOPTIONS);
    CHECK_MSG_HAS(mismatch);
    CHECK_OK(keel_open(path, dim, NULL, &idx));
    keel_result r[1];
    size_t n;
    CHECK_OK(keel_search(idx, v, 1, NULL, r, &n));
    CHECK_U64(n, 1);
    CHECK(r[0].distance == 0.0f);
    keel_stats st;
    CHECK_OK(keel_stat(idx, &st));
    CHECK_EQ(st.codes, codes);
    CHECK_OK(keel_close(idx));
    unsigned char *f;
    size_t len;
    CHECK((f = td_read_file(path, &len)) != NULL);
    CHECK_U64(keel__get32(f + HO_READ_VERSION), want_read);
    CHECK_U64(keel__get32(f + HO_WRITE_VERSION), want_write);
    CHECK_U64(f[HO_CODES], (unsigned)codes);
    free(f);
}

TEST(the_option_is_fixed_with_the_file_and_checked)
{
    keel_index *idx;
    keel_options bad = {.codes = (keel_codes)7};
    CHECK_ERR(keel_open(test_path("opt.keel"), 8, &bad, &idx), KEEL_EINVAL);
    CHECK_MSG_HAS("codes is 7");
    /* A file with codes is write version 3, so a writer that would leave
     * rows stale refuses it; its readers read it. */
    codes_fixed_with_file(test_path("opt.keel"), 8, KEEL_CODES_I8,
                          KEEL_CODES_NONE, "traversal codes i8, not none", 1,
                          3);
    /* A plain file stays format 1 for any keel. */
    unsigned char *f;
    size_t len;
    CHECK_OK(keel_open(test_path("plain.keel"), 8, NULL, &idx));
    CHECK_OK(keel_close(idx));
    CHECK((f = td_read_file(test_path("plain.keel"), &len)) != NULL);
    CHECK_U64(keel__get32(f + HO_READ_VERSION), 1);
    CHECK_U64(keel__get32(f + HO_WRITE_VERSION), 1);
    CHECK_U64(f[HO_CODES], 0);
    free(f);
}

/* A header that claims codes at write version 1 is refused as corrupt
** (an older writer could have left its rows stale). */
TEST(codes_at_write_version_1_are_corrupt)
{
    keel_header h;
    keel__header_new(&h, 16, 8, KEEL_L2, KEEL_F32, KEEL_CODES_I8);
    uint8_t *buf = malloc(KEEL_PAGE_SLOT);
    keel__header_encode(&h, buf);
    keel_header *out = malloc(sizeof *out);
    char why[200];
    CHECK_OK(keel__header_decode(buf, 1u << 20, out, why, sizeof why));
    CHECK_EQ(out->codes, KEEL_CODES_I8);
    h.write_version = 1;
    keel__header_encode(&h, buf);
    int rc = keel__header_decode(buf, 1u << 20, out, why, sizeof why);
    CHECK_EQ(rc, KEEL_ECORRUPT);
    CHECK(strstr(why, "traversal codes") != NULL);
    free(out);
    free(buf);
}

/* The row format (codes.h): scale, norm, sum and codes, zero past dim; a
** query coded the same way gives back the exact integer dot product. */
TEST(a_row_holds_scale_norm_sum_and_codes)
{
    float x[5] = {1.0f, -0.5f, 0.25f, 0.0f, -1.0f};
    uint8_t row[64];
    memset(row, 0xAA, sizeof row);
    float tmp[5];
    keel__code_encode(x, KEEL_F32, NULL, 5, KEEL_CODES_I8, tmp, row, 64);
    float s, n;
    int32_t sum;
    memcpy(&s, row + CODE_SCALE, 4);
    memcpy(&n, row + CODE_NORM, 4);
    memcpy(&sum, row + CODE_SUM, 4);
    CHECK(s == 1.0f / 127.0f);
    const int8_t *c = (const int8_t *)(row + CODE_BYTES_AT);
    CHECK_EQ(c[0], 127);
    CHECK_EQ(c[1], -64); /* -63.5 rounds away from zero */
    CHECK_EQ(c[2], 32);  /* 31.75 */
    CHECK_EQ(c[3], 0);
    CHECK_EQ(c[4], -127);
    CHECK_EQ(sum, 127 - 64 + 32 - 127);
    for (int i = CODE_BYTES_AT + 5; i < 64; i++)
        CHECK_EQ(row[i], 0);
    uint8_t qu[5];
    keel_code_query cq = {.qu = qu, .tmp = tmp};
    keel__code_query(x, NULL, 5, 1, KEEL_CODES_I8, &cq);
    /* The row's own vector: its coded distance to itself is near 0. */
    float d = keel__code_dist(keel__kernels()->code_dot, &cq, row, 5);
    CHECK_MSG(d > -0.02f && d < 0.02f, "coded distance to itself %g", d);
    float zero[5] = {0};
    keel__code_encode(zero, KEEL_F32, NULL, 5, KEEL_CODES_I8, tmp, row, 64);
    memcpy(&s, row + CODE_SCALE, 4);
    CHECK(s == 0.0f);
}

/* Codes are y / s rounded half away from zero and clamped to -127..127,
** as libm's roundf gives: checked against it on halves, values next to
** them, the clamp, tiny and huge magnitudes, in rows and in queries (whose
** codes are the same plus 128), at a dimension that leaves a tail past
** the four-wide steps (D = 67). Codes of existing files depend on it
** (keel_check recomputes every row). */
TEST(codes_round_half_away_from_zero_like_roundf)
{
    enum { D = 67 };
    float x[D], tmp[D];
    uint8_t row[16 + D], qu[D];
    keel_code_query cq = {.qu = qu, .tmp = tmp};
    uint64_t z = 12345;
    long checked = 0;
    for (int trial = 0; trial < 20000; trial++) {
        /* x[0] sets the scale: s = |x[0]| / 127 when it is the largest. */
        float big = trial % 3 == 0 ? 127.0f : trial % 3 == 1 ? 1.0f : 3e-30f;
        x[0] = big;
        for (int i = 1; i < D; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t r = (uint32_t)(z >> 33);
            float half = (float)((int)(r % 255) - 127) + 0.5f;
            float t = i % 4 == 0 ? half
                    : i % 4 == 1 ? nextafterf(half, 0.0f)
                    : i % 4 == 2 ? nextafterf(half, 200.0f)
                                 : (float)((int)(r % 254001) - 127000) / 1000.0f;
            x[i] = t / 127.0f * big;
        }
        keel__code_encode(x, KEEL_F32, NULL, D, KEEL_CODES_I8, tmp, row, sizeof row);
        float s;
        memcpy(&s, row + CODE_SCALE, 4);
        const int8_t *c = (const int8_t *)(row + CODE_BYTES_AT);
        for (int i = 0; i < D; i++, checked++) {
            float r = roundf(x[i] / s);
            int want = r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r;
            CHECK_MSG(c[i] == want, "x %a / s %a: code %d, roundf gives %d",
                      (double)x[i], (double)s, c[i], want);
        }
        keel__code_query(x, NULL, D, 1, KEEL_CODES_I8, &cq);
        CHECK(cq.scale == s);
        for (int i = 0; i < D; i++, checked++)
            CHECK_MSG(qu[i] == (uint8_t)(c[i] + 128),
                      "query x %a: code %d, the row's %d", (double)x[i],
                      qu[i] - 128, c[i]);
    }
    printf("     %ld codes equal roundf's\n", checked);
}

/* How many of the n results are among the exact ten nearest (by L2) to q
** of the nv vectors at v (dim floats each, ids first_id, first_id + 1,
** ...): a partial selection over all of them. */
static size_t
exact_top10_hits(const keel_result *res, size_t n, const float *q,
                 const float *v, size_t nv, uint32_t dim, uint64_t first_id)
{
    double best[10];
    uint64_t ids[10];
    for (int j = 0; j < 10; j++)
        best[j] = 1e300, ids[j] = UINT64_MAX;
    for (size_t x = 0; x < nv; x++) {
        double d = td_l2sq(q, v + x * dim, dim);
        if (d >= best[9])
            continue;
        int j = 9;
        for (; j > 0 && best[j - 1] > d; j--)
            best[j] = best[j - 1], ids[j] = ids[j - 1];
        best[j] = d, ids[j] = first_id + x;
    }
    size_t hit = 0;
    for (size_t a = 0; a < n; a++)
        for (int b = 0; b < 10; b++)
            hit += res[a].id == ids[b];
    return hit;
}

/* recall@10 at ef 64 of n vectors (dim 64) whose component 0 carries a
** shared offset, against the exact answer, with and without codes. */
static double
offset_recall(float offset, keel_codes codes, const char *name)
{
    enum { N = 5000, D = 64, NQ = 100 };
    float *v = td_random(N, D, 11), *q = td_random(NQ, D, 12);
    for (size_t i = 0; i < N; i++)
        v[i * D] += offset;
    for (size_t i = 0; i < NQ; i++)
        q[i * D] += offset;
    keel_options o = {.codes = codes};
    keel_index *idx;
    double r = -1;
    if (keel_open(test_path(name), D, &o, &idx) == KEEL_OK &&
        keel_add_batch(idx, v, N, NULL, NULL) == KEEL_OK) {
        size_t hit = 0;
        for (size_t i = 0; i < NQ; i++) {
            keel_result res[10];
            size_t n;
            if (keel_search(idx, q + i * D, 10, NULL, res, &n))
                break;
            hit += exact_top10_hits(res, n, q + i * D, v, N, D, 0);
        }
        r = hit / (double)(NQ * 10);
    }
    keel_close(idx);
    free(v);
    free(q);
    return r;
}

/* The centre is the first add's mean; when the data moves (every vector
** deleted, new ones far away), compaction takes it anew from the live
** vectors and recall comes back. */
TEST(compaction_takes_the_centre_from_the_live_vectors)
{
    enum { N = 3000, D = 32, NQ = 50 };
    float *a = td_random(N, D, 21), *b = td_random(N, D, 22),
          *q = td_random(NQ, D, 23);
    for (size_t i = 0; i < (size_t)N * D; i += D)
        b[i] -= 1000.0f;
    for (size_t i = 0; i < (size_t)NQ * D; i += D)
        q[i] -= 1000.0f;
    double rec[2];
    for (int codes = 0; codes < 2; codes++) {
        keel_options o = {.codes = codes ? KEEL_CODES_I8 : KEEL_CODES_NONE};
        keel_index *idx;
        char name[32];
        snprintf(name, sizeof name, "moved-%d.keel", codes);
        CHECK_OK(keel_open(test_path(name), D, &o, &idx));
        CHECK_OK(keel_add_batch(idx, a, N, NULL, NULL));
        CHECK_OK(keel_flush(idx));
        for (uint64_t id = 0; id < N; id++)
            CHECK_OK(keel_delete(idx, id));
        uint64_t *ids = malloc(N * sizeof *ids);
        for (uint64_t i = 0; i < N; i++)
            ids[i] = N + i;
        CHECK_OK(keel_add_batch(idx, b, N, ids, NULL));
        free(ids);
        CHECK_OK(keel_flush(idx));
        CHECK_OK(keel_compact(idx));
        CHECK_OK(keel_check(idx));
        size_t hit = 0;
        for (size_t i = 0; i < NQ; i++) {
            keel_result r[10];
            size_t n;
            CHECK_OK(keel_search(idx, q + i * D, 10, NULL, r, &n));
            hit += exact_top10_hits(r, n, q + i * D, b, N, D, N);
        }
        rec[codes] = hit / (double)(NQ * 10);
        CHECK_OK(keel_close(idx));
    }
    printf("    after the data moved and a compaction: recall@10 %.3f "
           "without codes, %.3f with\n", rec[0], rec[1]);
    CHECK_MSG(rec[1] >= rec[0] - 0.03, "%.3f with codes, %.3f without",
              rec[1], rec[0]);
    free(a);
    free(b);
    free(q);
}

/* A damaged centre (a NaN) is named by keel_check; searches on it return
** without undefined behaviour (UBSan runs this). */
TEST(check_names_a_damaged_centre)
{
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    const char *path = test_path("centre.keel");
    keel_index *idx;
    CHECK_OK(build(path, KEEL_L2, KEEL_F32, KEEL_CODES_I8, 300, &idx));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    /* the newer header copy names heap chunk 0 */
    keel_header *h = newest_header(path);
    CHECK(h != NULL);
    uint64_t off = h->heap_off[0] + 4 * 7;
    free(h);
    int fd = open(path, O_RDWR);
    float nan = NAN;
    CHECK(pwrite(fd, &nan, 4, (off_t)off) == 4);
    close(fd);
    CHECK_OK(keel_open_reader(path, NULL, &idx));
    keel_result r[10];
    size_t n;
    CHECK_OK(keel_search(idx, queries.v, 10, NULL, r, &n));
    CHECK_ERR(keel_check(idx), KEEL_ECORRUPT);
    CHECK_MSG_HAS("centre");
    CHECK_OK(keel_close(idx));
}

/* Codes are taken about the index's centre: a component every vector
** shares (an offset) does not take the byte range from the others. */
TEST(an_offset_shared_by_every_vector_costs_no_recall)
{
    static const float offsets[] = {0, 100, 1000};
    for (size_t i = 0; i < 3; i++) {
        char a[32], b[32];
        snprintf(a, sizeof a, "off-none-%zu.keel", i);
        snprintf(b, sizeof b, "off-i8-%zu.keel", i);
        double rn = offset_recall(offsets[i], KEEL_CODES_NONE, a);
        double rc = offset_recall(offsets[i], KEEL_CODES_I8, b);
        printf("    offset %g: recall@10 %.3f without codes, %.3f with\n",
               offsets[i], rn, rc);
        CHECK(rn > 0.5);
        CHECK_MSG(rc >= rn - 0.03, "offset %g: %.3f with codes, %.3f without",
                  offsets[i], rc, rn);
    }
}

#if defined(__x86_64__)
#include <fenv.h>
#include <xmmintrin.h>

/* codes.h (1): the bytes of a row do not depend on the caller's
** floating-point environment: flush-to-zero, denormals-are-zero (what
** -ffast-math turns on) and the rounding mode. */
TEST(rows_are_the_same_bytes_in_any_floating_point_environment)
{
    float x[4] = {1e-37f, -5e-38f, 2e-38f, 0.0f}, c[4] = {1e-39f, 0, 0, 0};
    float tmp[4];
    uint8_t ref[64], got[64];
    keel__code_encode(x, KEEL_F32, c, 4, KEEL_CODES_I8, tmp, ref, 64);
    unsigned csr = _mm_getcsr();
    static const int modes[] = {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    for (int m = 0; m < 3; m++) {
        _mm_setcsr(csr | 0x8040u); /* FTZ | DAZ */
        fesetround(modes[m]);
        unsigned before = _mm_getcsr();
        keel__code_encode(x, KEEL_F32, c, 4, KEEL_CODES_I8, tmp, got, 64);
        unsigned after = _mm_getcsr();
        fesetround(FE_TONEAREST);
        _mm_setcsr(csr);
        CHECK_MSG(after == before, "MXCSR %#x after coding, %#x before",
                  after, before);
        CHECK_MSG(memcmp(ref, got, 64) == 0, "rounding mode %d", m);
    }
    /* and through a file: written with FTZ/DAZ on, checked with them off */
    const char *path = test_path("ftz.keel");
    keel_options o = {.codes = KEEL_CODES_I8};
    keel_index *idx;
    CHECK_OK(keel_open(path, 4, &o, &idx));
    _mm_setcsr(csr | 0x8040u);
    uint64_t id;
    int rc1 = keel_add(idx, x, &id);
    float y[4] = {1, 2, 3, 4};
    int rc2 = keel_add(idx, y, &id);
    _mm_setcsr(csr);
    CHECK_OK(rc1);
    CHECK_OK(rc2);
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open_reader(path, NULL, &idx));
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
}
#endif

/* A row whose sum field was damaged (the largest i32 values): searches
** give some answer without overflowing (UBSan runs this), and keel_check
** names the file corrupt. */
TEST(damaged_row_sums_never_overflow_a_search)
{
    td_glove_slice(&base, &queries, &gt_l2, &gt_cos);
    const char *path = test_path("sums.keel");
    keel_index *idx;
    CHECK_OK(build(path, KEEL_L2, KEEL_F32, KEEL_CODES_I8, 600, &idx));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    keel_header *h = newest_header(path);
    CHECK(h != NULL);
    int fd = open(path, O_RDWR);
    int written = 0;
    for (uint64_t s = 0; s < 600; s++) {
        uint32_t rb;
        uint64_t off = row_offset(h, s, &rb);
        int32_t big = s % 2 ? INT32_MAX : INT32_MIN;
        written += off != 0 &&
                   pwrite(fd, &big, 4, (off_t)(off + CODE_SUM)) == 4;
    }
    close(fd);
    free(h);
    CHECK_EQ(written, 600);
    CHECK_OK(keel_open_reader(path, NULL, &idx));
    for (size_t i = 0; i < 20; i++) {
        keel_result r[10];
        size_t n;
        CHECK_OK(keel_search(idx, queries.v + i * base.dim, 10, NULL, r, &n));
    }
    CHECK_ERR(keel_check(idx), KEEL_ECORRUPT);
    CHECK_OK(keel_close(idx));
}

/* keel_check recomputes 4-bit rows too: one flipped bit of a high nibble
** is a corrupt row (16 + 4 blocks of 16 bytes, rounded up to 64). */
TEST(check_finds_a_4bit_row_that_does_not_match_its_vector)
{
    check_finds_flipped_row(test_path("flip4.keel"), KEEL_CODES_I4, 77,
                            16 + 20, 0x10, 128);
}

/* A 4-bit file is read and write version 4 (a keel that does not know them
** refuses it as newer), names its codes in a mismatch, and a header that
** claims them at an older version is corrupt. */
TEST(i4_files_are_version_4_and_fixed_with_the_file)
{
    codes_fixed_with_file(test_path("opt4.keel"), 40, KEEL_CODES_I4,
                          KEEL_CODES_I8, "traversal codes i4, not i8", 4, 4);
    keel_header h;
    keel__header_new(&h, 16, 8, KEEL_L2, KEEL_F32, KEEL_CODES_I4);
    uint8_t *buf = malloc(KEEL_PAGE_SLOT);
    keel_header *out = malloc(sizeof *out);
    char why[200];
    keel__header_encode(&h, buf);
    CHECK_OK(keel__header_decode(buf, 1u << 20, out, why, sizeof why));
    CHECK_EQ(out->codes, KEEL_CODES_I4);
    for (int which = 0; which < 3; which++) {
        keel__header_new(&h, 16, 8, KEEL_L2, KEEL_F32, KEEL_CODES_I4);
        if (which == 0)
            h.read_version = 1;
        else if (which == 1)
            h.write_version = 3;
        else
            h.codes = 3;
        keel__header_encode(&h, buf);
        int rc = keel__header_decode(buf, 1u << 20, out, why, sizeof why);
        CHECK_MSG(rc == KEEL_ECORRUPT, "case %d: rc %d", which, rc);
        CHECK(strstr(why, "traversal codes") != NULL);
        /* The field that is wrong is the one named. */
        CHECK_MSG(which != 0 || strstr(why, "read version 1") != NULL, "%s", why);
        CHECK_MSG(which != 1 || strstr(why, "write version 3") != NULL, "%s", why);
    }
    /* Newer than this keel reads: refused as a version, not as damage. */
    keel__header_new(&h, 16, 8, KEEL_L2, KEEL_F32, KEEL_CODES_I4);
    h.read_version = KEEL_FORMAT_VERSION + 1;
    keel__header_encode(&h, buf);
    CHECK_EQ(keel__header_decode(buf, 1u << 20, out, why, sizeof why),
             KEEL_EVERSION);
    free(out);
    free(buf);
}

/* The 4-bit row format (codes.h): scale max|y| / 7, codes + 8 in nibbles,
** the first 16 of each 32 dimensions low, the next 16 high, zero nibbles
** past dim and zero bytes past the codes; the coded distance is the float
** formula on the decoded codes. */
TEST(a_4bit_row_packs_blocks_of_32_in_nibbles)
{
    enum { D = 40 };
    float x[D], tmp[D];
    for (int i = 0; i < D; i++)
        x[i] = (float)((i * 5) % 15 - 7); /* -7..7, max 7 */
    x[3] = 7.0f;
    uint8_t row[128];
    memset(row, 0xAA, sizeof row);
    uint32_t rb = keel__code_row_bytes(D, KEEL_CODES_I4);
    CHECK_U64(rb, 64); /* 16 + 2 blocks of 16 */
    CHECK_U64(keel__code_row_bytes(784, KEEL_CODES_I4), 448);
    CHECK_U64(keel__code_row_bytes(784, KEEL_CODES_I8), 832);
    keel__code_encode(x, KEEL_F32, NULL, D, KEEL_CODES_I4, tmp, row, rb);
    float s, nrm;
    int32_t sum;
    memcpy(&s, row + CODE_SCALE, 4);
    memcpy(&nrm, row + CODE_NORM, 4);
    memcpy(&sum, row + CODE_SUM, 4);
    CHECK(s == 1.0f); /* 7 / 7 */
    int want_sum = 0;
    double want_sq = 0;
    for (int i = 0; i < D; i++) {
        int c = (int)x[i];
        int b = i / 32, j = i % 32;
        uint8_t byte = row[CODE_BYTES_AT + 16 * b + j % 16];
        int nib = j < 16 ? (byte & 15) : (byte >> 4);
        CHECK_MSG(nib == c + 8, "dim %d: nibble %d, code %d", i, nib, c);
        want_sum += c;
        want_sq += c * c;
    }
    CHECK_EQ(sum, want_sum);
    CHECK(nrm == (float)want_sq);
    /* Dimensions 40-47 (low) and 56-63 (high) of block 1 are past dim. */
    for (int j = 8; j < 16; j++)
        CHECK_EQ(row[CODE_BYTES_AT + 16 + j] & 15, 0);
    for (int j = 8; j < 16; j++)
        CHECK_EQ(row[CODE_BYTES_AT + 16 + j] >> 4, 0);
    for (uint32_t i = CODE_BYTES_AT + 32; i < rb; i++)
        CHECK_EQ(row[i], 0);
    /* A query: the kernel's distance is |q - y|^2 from the decoded codes,
     * up to the query's own 8-bit rounding. */
    float q[D];
    for (int i = 0; i < D; i++)
        q[i] = (float)(i % 3) - 1.0f;
    uint8_t qu[KEEL_CODE_QUERY_BYTES(D)];
    memset(qu, 0xEE, sizeof qu);
    keel_code_query cq = {.qu = qu, .tmp = tmp};
    keel__code_query(q, NULL, D, 1, KEEL_CODES_I4, &cq);
    for (size_t i = D; i < sizeof qu; i++)
        CHECK_EQ(qu[i], 0);
    double want = 0;
    for (int i = 0; i < D; i++)
        want += ((double)q[i] - x[i]) * ((double)q[i] - x[i]);
    size_t nt = 0;
    const keel_kernels *const *all = keel__kernels_all(&nt);
    for (size_t t = 0; t < nt; t++) {
        float d = keel__code_dist(all[t]->code4_dot, &cq, row, D);
        CHECK_MSG(fabs(d - want) < 1e-3 * want + 1e-3, "%s: %g, want %g",
                  all[t]->name, d, want);
    }
}

TEST_MAIN()
