/* test_many.c -- many ids at once: keel_get_batch (all or nothing, and with a
** found mask), keel_delete_batch (all or none, refusing repeated and missing
** ids by name and position) and keel_ids (every live id, in order, a page at
** a time, on writers and readers). Black-box: only keel.h, plus the test
** geometry hook.
*/
#include "test.h"
#include "lib/testdata.h"

void keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                         uint32_t heap_base, uint32_t heap_doublings,
                         uint32_t idtab_log2);

#define DIM 8

static keel_index *
filled(const char *name, size_t n, const uint64_t *ids, float **vecs)
{
    keel__test_geometry(4, 2, 10, 1, 6); /* cross region boundaries */
    keel_index *idx = NULL;
    *vecs = td_random(n, DIM, 7);
    if (keel_open(test_path(name), DIM, NULL, &idx) != KEEL_OK ||
        keel_add_batch(idx, *vecs, n, ids, NULL) != KEEL_OK ||
        keel_flush(idx) != KEEL_OK)
        fprintf(stderr, "filling %s: %s\n", name, keel_errmsg());
    return idx;
}

TEST(get_batch_all_or_nothing)
{
    float *v;
    keel_index *idx = filled("g.keel", 300, NULL, &v);
    CHECK(idx);
    uint64_t ids[4] = {299, 0, 17, 0};
    float out[4 * DIM];
    CHECK_OK(keel_get_batch(idx, ids, 4, out, NULL));
    for (size_t i = 0; i < 4; i++)
        CHECK(memcmp(out + i * DIM, v + ids[i] * DIM, sizeof(float) * DIM) == 0);

    /* A missing id: named with its position, and out untouched. */
    uint64_t bad[3] = {5, 300, 6};
    float keep[3 * DIM];
    for (size_t i = 0; i < 3 * DIM; i++)
        keep[i] = 42;
    CHECK_ERR(keel_get_batch(idx, bad, 3, keep, NULL), KEEL_ENOTFOUND);
    CHECK_MSG_HAS("id 300 (position 1 of 3)");
    CHECK_MSG_HAS("help: ");
    for (size_t i = 0; i < 3 * DIM; i++)
        CHECK(keep[i] == 42);

    /* With a found mask: the others are read, the missing row is NaN. */
    unsigned char found[3];
    CHECK_OK(keel_delete(idx, 6));
    CHECK_OK(keel_get_batch(idx, bad, 3, keep, found));
    CHECK(found[0] == 1 && found[1] == 0 && found[2] == 0);
    CHECK(memcmp(keep, v + 5 * DIM, sizeof(float) * DIM) == 0);
    CHECK(isnan(keep[DIM]) && isnan(keep[2 * DIM + DIM - 1]));

    CHECK_OK(keel_get_batch(idx, NULL, 0, NULL, NULL));
    CHECK_ERR(keel_get_batch(idx, NULL, 2, out, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("ids = NULL");
    CHECK_ERR(keel_get_batch(idx, ids, 2, NULL, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("out = NULL");
    CHECK_ERR(keel_get_batch(NULL, ids, 2, out, NULL), KEEL_EINVAL);
    CHECK_OK(keel_close(idx));

    /* A reader reads the last flush. */
    CHECK_OK(keel_open_reader(test_path("g.keel"), NULL, &idx));
    CHECK_OK(keel_get_batch(idx, ids, 4, out, NULL));
    CHECK(memcmp(out, v + 299 * DIM, sizeof(float) * DIM) == 0);
    CHECK_OK(keel_close(idx));
    free(v);
}

TEST(delete_batch_all_or_none)
{
    float *v;
    keel_index *idx = filled("d.keel", 200, NULL, &v);
    CHECK(idx);
    uint64_t rep[3] = {5, 5, 7};
    CHECK_ERR(keel_delete_batch(idx, rep, 3), KEEL_EINVAL);
    CHECK_MSG_HAS("id 5 is given twice, at positions 0 and 1 of 3");
    CHECK_MSG_HAS("help: give each id once");
    uint64_t miss[3] = {1, 2, 999};
    CHECK_ERR(keel_delete_batch(idx, miss, 3), KEEL_ENOTFOUND);
    CHECK_MSG_HAS("id 999 (position 2 of 3)");
    CHECK_MSG_HAS("nothing was deleted");
    CHECK_U64(keel_count(idx), 200);
    uint64_t pend_a, pend_d;
    CHECK_OK(keel_pending(idx, &pend_a, &pend_d));
    CHECK_U64(pend_d, 0);

    uint64_t ok[4] = {199, 0, 50, 7};
    CHECK_OK(keel_delete_batch(idx, ok, 4));
    CHECK_U64(keel_count(idx), 196);
    float out[DIM];
    CHECK_ERR(keel_get(idx, 50, out), KEEL_ENOTFOUND);
    /* Deleting one again refuses the whole call. */
    uint64_t again[2] = {8, 50};
    CHECK_ERR(keel_delete_batch(idx, again, 2), KEEL_ENOTFOUND);
    CHECK_MSG_HAS("id 50 (position 1 of 2)");
    CHECK_OK(keel_get(idx, 8, out));
    CHECK_OK(keel_delete_batch(idx, NULL, 0));
    CHECK_ERR(keel_delete_batch(idx, NULL, 1), KEEL_EINVAL);
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));

    CHECK_OK(keel_open_reader(test_path("d.keel"), NULL, &idx));
    CHECK_U64(keel_count(idx), 196);
    CHECK_ERR(keel_delete_batch(idx, ok, 1), KEEL_EREADONLY);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    free(v);
}

/* Every live id of idx through pages of cap. */
static size_t
list_all(keel_index *idx, size_t cap, uint64_t *all, size_t room)
{
    uint64_t *buf = malloc(cap * sizeof *buf);
    uint64_t after = KEEL_IDS_FIRST;
    size_t total = 0, n;
    do {
        if (keel_ids(idx, after, buf, cap, &n) != KEEL_OK) {
            total = SIZE_MAX;
            break;
        }
        for (size_t i = 0; i < n && total < room; i++)
            all[total++] = buf[i];
        if (n)
            after = buf[n - 1];
    } while (n == cap);
    free(buf);
    return total;
}

TEST(ids_in_order_by_pages)
{
    /* Caller ids in scrambled order, some deleted. */
    enum { N = 500 };
    uint64_t ids[N];
    uint64_t seed = 3;
    for (size_t i = 0; i < N; i++)
        ids[i] = (test_rand(&seed) >> 20) * 2 + 1;
    ids[0] = 0; /* id 0 is listed like any other */
    float *v;
    keel_index *idx = filled("i.keel", N, ids, &v);
    CHECK(idx);
    for (size_t i = 1; i < N; i += 5)
        CHECK_OK(keel_delete(idx, ids[i]));
    /* The expected list: live ids, sorted. */
    uint64_t want[N];
    size_t nw = 0;
    for (size_t i = 0; i < N; i++)
        if (i == 0 || (i - 1) % 5 != 0)
            want[nw++] = ids[i];
    for (size_t i = 1; i < nw; i++) /* insertion sort: small */
        for (size_t j = i; j > 0 && want[j - 1] > want[j]; j--) {
            uint64_t t = want[j];
            want[j] = want[j - 1];
            want[j - 1] = t;
        }
    uint64_t got[N];
    size_t caps[] = {1, 7, 100, nw, nw + 1, 10000};
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        size_t n = list_all(idx, caps[c], got, N);
        CHECK_MSG(n == nw, "cap %zu: %zu ids, want %zu", caps[c], n, nw);
        CHECK(memcmp(got, want, nw * sizeof *want) == 0);
    }
    /* After the last id: nothing. */
    size_t n = 9;
    CHECK_OK(keel_ids(idx, want[nw - 1], got, 4, &n));
    CHECK_EQ(n, 0);
    CHECK_ERR(keel_ids(idx, KEEL_IDS_FIRST, got, 0, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("cap = 0");
    CHECK_ERR(keel_ids(idx, KEEL_IDS_FIRST, NULL, 3, &n), KEEL_EINVAL);
    CHECK_ERR(keel_ids(idx, KEEL_IDS_FIRST, got, 3, NULL), KEEL_EINVAL);
    CHECK_OK(keel_flush(idx));

    /* A reader lists the last flush; the writer's unflushed adds appear
    ** only after their flush. */
    keel_index *rd = NULL;
    CHECK_OK(keel_open_reader(test_path("i.keel"), NULL, &rd));
    float extra[DIM] = {1};
    CHECK_OK(keel_add_with_id(idx, 2, extra)); /* even: not among ids */
    CHECK_EQ(list_all(rd, 64, got, N), nw);
    CHECK(memcmp(got, want, nw * sizeof *want) == 0);
    CHECK_EQ(list_all(idx, 64, got, N), nw + 1);
    CHECK_OK(keel_flush(idx));
    CHECK_EQ(list_all(rd, 64, got, N), nw + 1);
    CHECK_U64(got[1], 2);
    CHECK_OK(keel_close(rd));
    CHECK_OK(keel_close(idx));
    free(v);

    /* An empty index lists nothing. */
    CHECK_OK(keel_open(test_path("empty.keel"), DIM, NULL, &idx));
    CHECK_OK(keel_ids(idx, KEEL_IDS_FIRST, got, 10, &n));
    CHECK_EQ(n, 0);
    CHECK_OK(keel_close(idx));
}

TEST_MAIN()
