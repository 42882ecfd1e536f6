/* test_api.c -- the public API as a user meets it: persistence, ids and
** deletes, filters and bad input. Black-box: only keel.h, plus the test
** geometry hook (small segments so short tests cross region boundaries).
*/
#include "test.h"
#include "lib/testdata.h"

#include <sys/socket.h>
#include <sys/un.h>

void keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                         uint32_t heap_base, uint32_t heap_doublings,
                         uint32_t idtab_log2);

#define DIM 16

static void
small_geometry(void)
{
    /* 16-slot segments doubling twice, 1 KiB heap chunks, 64-entry id
     * tables: a few hundred vectors cross every kind of boundary. */
    keel__test_geometry(4, 2, 10, 1, 6);
}

static keel_index *
open_new(const char *name, const keel_options *o)
{
    keel_index *idx = NULL;
    if (keel_open(test_path(name), DIM, o, &idx) != KEEL_OK)
        fprintf(stderr, "open %s: %s\n", name, keel_errmsg());
    return idx;
}

static void
search_all(keel_index *idx, const float *q, size_t nq, size_t k,
           keel_result *out, size_t *n)
{
    keel_search_params p = {.ef = 64};
    if (keel_search_batch(idx, q, nq, k, &p, out, n) != KEEL_OK)
        memset(n, 0, nq * sizeof *n);
}

TEST(persistence_bit_for_bit_across_segments)
{
    small_geometry();
    float *v = td_random(700, DIM, 1), *q = td_random(20, DIM, 2);
    keel_index *idx = open_new("p.keel", NULL);
    CHECK(idx);
    CHECK_OK(keel_add_batch(idx, v, 300, NULL, NULL));
    for (size_t i = 300; i < 700; i++)
        CHECK_OK(keel_add(idx, v + i * DIM, NULL));
    CHECK_OK(keel_flush(idx));
    keel_stats st;
    CHECK_OK(keel_stat(idx, &st));
    CHECK_MSG(st.segments >= 5 && st.heap_chunks >= 2,
              "only %u segments and %u heap chunks", st.segments,
              st.heap_chunks);
    keel_result a[20 * 10], b[20 * 10];
    size_t na[20], nb[20];
    search_all(idx, q, 20, 10, a, na);
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(test_path("p.keel"), 0, NULL, &idx));
    CHECK_U64(keel_count(idx), 700);
    CHECK_EQ(keel_dim(idx), DIM);
    search_all(idx, q, 20, 10, b, nb);
    CHECK(memcmp(na, nb, sizeof na) == 0);
    for (size_t i = 0; i < 20; i++)
        for (size_t j = 0; j < na[i]; j++) /* ids and distance bits */
            CHECK(a[i * 10 + j].id == b[i * 10 + j].id &&
                  memcmp(&a[i * 10 + j].distance, &b[i * 10 + j].distance, 4) == 0);
    CHECK_OK(keel_check(idx));
    for (uint64_t id = 0; id < 700; id += 37) {
        float got[DIM];
        CHECK_OK(keel_get(idx, id, got));
        CHECK(memcmp(got, v + id * DIM, sizeof got) == 0);
    }
    CHECK_OK(keel_close(idx));
    free(v);
    free(q);
    small_geometry();
}

TEST(reopen_without_flush_loses_exactly_the_unflushed)
{
    small_geometry();
    float *v = td_random(400, DIM, 3);
    keel_index *idx = open_new("u.keel", NULL);
    CHECK(idx);
    CHECK_OK(keel_add_batch(idx, v, 200, NULL, NULL));
    CHECK_OK(keel_delete(idx, 5));
    CHECK_OK(keel_flush(idx));
    /* Unflushed: 200 adds (crossing segments), two deletes. */
    CHECK_OK(keel_add_batch(idx, v + 200 * DIM, 200, NULL, NULL));
    CHECK_OK(keel_delete(idx, 7));
    CHECK_OK(keel_delete(idx, 250));
    CHECK_U64(keel_count(idx), 397);
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(test_path("u.keel"), DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), 199);
    float got[DIM];
    CHECK_ERR(keel_get(idx, 5, got), KEEL_ENOTFOUND);
    CHECK_OK(keel_get(idx, 7, got));
    CHECK_ERR(keel_get(idx, 250, got), KEEL_ENOTFOUND);
    /* The next auto id continues from the committed ones. */
    uint64_t id;
    CHECK_OK(keel_add(idx, v, &id));
    CHECK_U64(id, 200);
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_check(idx));
    /* Every committed vector is found by searching for itself. */
    for (uint64_t i = 0; i < 200; i++) {
        if (i == 5)
            continue;
        keel_result r[1];
        size_t n;
        CHECK_OK(keel_search(idx, v + i * DIM, 1, NULL, r, &n));
        CHECK_MSG(n == 1 && r[0].distance == 0.0f, "vector %llu lost",
                  (unsigned long long)i);
    }
    CHECK_OK(keel_close(idx));
    free(v);
}

TEST(ids_custom_reserved_in_use_and_readd)
{
    keel_index *idx = open_new("ids.keel", NULL);
    CHECK(idx);
    float *v = td_random(10, DIM, 4);
    CHECK_OK(keel_add_with_id(idx, 1000, v));
    CHECK_OK(keel_add_with_id(idx, 7, v + DIM));
    CHECK_ERR(keel_add_with_id(idx, UINT64_MAX, v), KEEL_EINVAL);
    CHECK_MSG_HAS("reserved");
    CHECK_ERR(keel_add_with_id(idx, 1000, v + 2 * DIM), KEEL_EEXIST);
    CHECK_MSG_HAS("1000");
    uint64_t id;
    CHECK_OK(keel_add(idx, v + 3 * DIM, &id));
    CHECK_U64(id, 1001); /* one past the largest ever used */
    CHECK_OK(keel_delete(idx, 1000));
    CHECK_ERR(keel_delete(idx, 1000), KEEL_ENOTFOUND);
    CHECK_ERR(keel_delete(idx, 555), KEEL_ENOTFOUND);
    CHECK_U64(keel_count(idx), 2);
    /* Replace: delete + add of the same id in one flush. */
    CHECK_OK(keel_add_with_id(idx, 1000, v + 4 * DIM));
    CHECK_U64(keel_count(idx), 3);
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(test_path("ids.keel"), DIM, NULL, &idx));
    float got[DIM];
    CHECK_OK(keel_get(idx, 1000, got));
    CHECK(memcmp(got, v + 4 * DIM, sizeof got) == 0);
    CHECK_U64(keel_count(idx), 3);
    /* Auto ids never reuse a number, even a deleted one's. */
    CHECK_OK(keel_delete(idx, 1001));
    CHECK_OK(keel_add(idx, v + 5 * DIM, &id));
    CHECK_U64(id, 1002);
    /* Batches: repeated, live and reserved ids refuse the whole batch. */
    uint64_t rep[3] = {1, 2, 1}, live[2] = {3, 7}, res[2] = {4, UINT64_MAX};
    CHECK_ERR(keel_add_batch(idx, v, 3, rep, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("twice");
    CHECK_ERR(keel_add_batch(idx, v, 2, live, NULL), KEEL_EEXIST);
    CHECK_ERR(keel_add_batch(idx, v, 2, res, NULL), KEEL_EINVAL);
    CHECK_U64(keel_count(idx), 3);
    uint64_t out[3], mine[3] = {50, 51, 52};
    CHECK_OK(keel_add_batch(idx, v, 3, mine, out));
    CHECK(out[0] == 50 && out[2] == 52);
    CHECK_OK(keel_add_batch(idx, v, 2, NULL, out));
    CHECK(out[0] == 1003 && out[1] == 1004);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    free(v);
}

TEST(deleted_never_returned)
{
    small_geometry();
    float *v = td_random(300, DIM, 5);
    keel_index *idx = open_new("del.keel", NULL);
    CHECK(idx);
    CHECK_OK(keel_add_batch(idx, v, 300, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    for (uint64_t id = 0; id < 300; id += 2)
        CHECK_OK(keel_delete(idx, id));
    for (int round = 0; round < 2; round++) {
        for (size_t i = 0; i < 300; i += 7) {
            keel_result r[20];
            size_t n;
            CHECK_OK(keel_search(idx, v + i * DIM, 20, NULL, r, &n));
            CHECK_EQ(n, 20);
            for (size_t j = 0; j < n; j++)
                CHECK_MSG(r[j].id % 2 == 1, "deleted id %llu returned",
                          (unsigned long long)r[j].id);
            if (i % 2 == 1)
                CHECK(r[0].id == i && r[0].distance == 0.0f);
        }
        CHECK_U64(keel_count(idx), 150);
        CHECK_OK(keel_flush(idx));
    }
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open_reader(test_path("del.keel"), NULL, &idx));
    CHECK_U64(keel_count(idx), 150);
    keel_stats st;
    CHECK_OK(keel_stat(idx, &st));
    CHECK_U64(st.deleted, 150);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    free(v);
}

static int
odd_only(uint64_t id, void *arg)
{
    (*(int *)arg)++;
    return (int)(id & 1);
}

static int
nothing(uint64_t id, void *arg)
{
    (void)id;
    (void)arg;
    return 0;
}

TEST(filters_allow_lists_and_callbacks)
{
    float *v = td_random(2000, DIM, 6), *q = td_random(10, DIM, 7);
    keel_index *idx = open_new("filter.keel", NULL);
    CHECK(idx);
    CHECK_OK(keel_add_batch(idx, v, 2000, NULL, NULL));
    for (int t = 0; t < 10; t++) {
        /* A tiny allow-list (with a repeat and an unknown id) gives the
         * exact nearest of its members. */
        uint64_t allow[6] = {17, 1500, 3, 17, 999999, 640};
        keel_search_params p = {.allowed = allow, .n_allowed = 6};
        keel_result r[10];
        size_t n;
        CHECK_OK(keel_search(idx, q + t * DIM, 10, &p, r, &n));
        CHECK_EQ(n, 4);
        float prev = -1;
        for (size_t j = 0; j < n; j++) {
            CHECK(r[j].id == 17 || r[j].id == 1500 || r[j].id == 3 ||
                  r[j].id == 640);
            CHECK(r[j].distance >= prev);
            prev = r[j].distance;
        }
        /* A callback passing half: exact nearest odd ids. */
        int calls = 0;
        keel_search_params pf = {.filter = odd_only, .filter_arg = &calls,
                                 .ef = 128};
        CHECK_OK(keel_search(idx, q + t * DIM, 10, &pf, r, &n));
        CHECK_EQ(n, 10);
        CHECK(calls > 0);
        uint64_t want[10];
        int brute_calls = 0;
        td_exact_knn(v, 2000, DIM, q + t * DIM, 10, odd_only, &brute_calls,
                     want);
        int hits = 0;
        for (size_t j = 0; j < n; j++) {
            CHECK(r[j].id & 1);
            for (int w = 0; w < 10; w++)
                hits += r[j].id == want[w];
        }
        CHECK_MSG(hits >= 9, "filtered recall %d/10", hits);
        /* Nothing passes: no results, no error. */
        keel_search_params pn = {.filter = nothing};
        CHECK_OK(keel_search(idx, q + t * DIM, 10, &pn, r, &n));
        CHECK_EQ(n, 0);
        uint64_t none[1] = {0};
        keel_search_params pe = {.allowed = none, .n_allowed = 0};
        CHECK_OK(keel_search(idx, q + t * DIM, 10, &pe, r, &n));
        CHECK_EQ(n, 0);
    }
    CHECK_OK(keel_close(idx));
    free(v);
    free(q);
}

TEST(bad_input_through_the_api)
{
    keel_index *idx = open_new("bad.keel", NULL);
    CHECK(idx);
    float v[DIM] = {1, 2, 3};
    CHECK_OK(keel_add(idx, v, NULL));
    CHECK_OK(keel_flush(idx));
    v[3] = NAN;
    CHECK_ERR(keel_add(idx, v, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("NaN at component 3");
    v[3] = INFINITY;
    keel_result r[4];
    size_t n;
    CHECK_ERR(keel_search(idx, v, 4, NULL, r, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("inf at component 3");
    v[3] = 0;
    CHECK_ERR(keel_search(idx, v, 0, NULL, r, &n), KEEL_EINVAL);
    CHECK_MSG_HAS("k is 0");
    float two[2 * DIM] = {0};
    two[DIM + 5] = NAN;
    CHECK_ERR(keel_add_batch(idx, two, 2, NULL, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("vector 1 of the batch");
    CHECK_U64(keel_count(idx), 1);
    /* A second writer, in this process. */
    keel_index *other;
    CHECK_ERR(keel_open(test_path("bad.keel"), DIM, NULL, &other), KEEL_ELOCKED);
    CHECK(other == NULL);
    CHECK_OK(keel_close(idx));
    /* Other dimensions, other options. */
    CHECK_ERR(keel_open(test_path("bad.keel"), DIM + 1, NULL, &idx), KEEL_EDIM);
    CHECK_MSG_HAS("16 dimensions, not 17");
    keel_options cos = {.metric = KEEL_COSINE};
    CHECK_ERR(keel_open(test_path("bad.keel"), DIM, &cos, &idx), KEEL_EOPTIONS);
    keel_options m8 = {.max_connections = 8};
    CHECK_ERR(keel_open(test_path("bad.keel"), DIM, &m8, &idx), KEEL_EOPTIONS);
    keel_options keep = {.metric = KEEL_COSINE, .max_connections = 8,
                         .flags = KEEL_FILE_OPTIONS};
    CHECK_OK(keel_open(test_path("bad.keel"), DIM, &keep, &idx));
    keel_stats kst;
    CHECK_OK(keel_stat(idx, &kst));
    CHECK(kst.metric == KEEL_L2 && kst.max_connections == 16);
    CHECK_OK(keel_close(idx));
    keel_options m1 = {.max_connections = 1};
    CHECK_ERR(keel_open(test_path("new.keel"), DIM, &m1, &idx), KEEL_EINVAL);
    CHECK_ERR(keel_open(test_path("new.keel"), 4097, NULL, &idx), KEEL_EINVAL);
    CHECK_ERR(keel_open(test_path("missing/dir.keel"), DIM, NULL, &idx),
              KEEL_ENOTFOUND);
    CHECK_ERR(keel_open_reader(test_path("absent.keel"), NULL, &idx),
              KEEL_ENOTFOUND);
    CHECK(access(test_path("absent.keel"), F_OK) != 0); /* never created */
    CHECK_ERR(keel_open(test_dir(), DIM, NULL, &idx), KEEL_EINVAL);
    /* A reader cannot write. */
    CHECK_OK(keel_open_reader(test_path("bad.keel"), NULL, &idx));
    CHECK_ERR(keel_add(idx, v, NULL), KEEL_EREADONLY);
    CHECK_ERR(keel_delete(idx, 0), KEEL_EREADONLY);
    CHECK_ERR(keel_flush(idx), KEEL_EREADONLY);
    CHECK_OK(keel_close(idx));
    /* Cosine refuses zero vectors, in adds and in queries. */
    idx = open_new("cos.keel", &cos);
    CHECK(idx);
    float zero[DIM] = {0};
    CHECK_ERR(keel_add(idx, zero, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("all zeros");
    CHECK_OK(keel_add(idx, v, NULL));
    CHECK_ERR(keel_search(idx, zero, 1, NULL, r, &n), KEEL_EINVAL);
    CHECK_OK(keel_close(idx));
    /* Half precision refuses what does not fit. */
    keel_options half = {.precision = KEEL_F16};
    idx = open_new("half.keel", &half);
    CHECK(idx);
    v[2] = 65520.0f;
    CHECK_ERR(keel_add(idx, v, NULL), KEEL_EINVAL);
    CHECK_MSG_HAS("too large for half precision");
    v[2] = 65504.0f;
    CHECK_OK(keel_add(idx, v, NULL));
    CHECK_OK(keel_close(idx));
    CHECK_ERR(keel_add(NULL, v, NULL), KEEL_EINVAL);
    CHECK_OK(keel_close(NULL));
}

/* A file that is not an index, or a cut-off one, is refused and unchanged. */
static void
refused_unchanged(const char *name, const void *bytes, size_t len, int want)
{
    const char *path = test_path(name);
    CHECK(td_write_file(path, bytes, len) == 0);
    keel_index *idx;
    CHECK_ERR(keel_open(path, DIM, NULL, &idx), want);
    CHECK_ERR(keel_open_reader(path, NULL, &idx), want);
    size_t got_len;
    unsigned char *got = td_read_file(path, &got_len);
    CHECK(got && got_len == len && memcmp(got, bytes, len) == 0);
    free(got);
}

TEST(not_an_index_and_truncated_files)
{
    static const char text[] = "id,vector\n1,0.5 0.25\nthis is a text file\n";
    refused_unchanged("text.keel", text, sizeof text - 1, KEEL_ENOTINDEX);
    char big[300000];
    memset(big, 'x', sizeof big);
    refused_unchanged("big.txt", big, sizeof big, KEEL_ENOTINDEX);
    /* A real index cut short. */
    small_geometry();
    keel_index *idx = open_new("cut.keel", NULL);
    CHECK(idx);
    float *v = td_random(200, DIM, 8);
    CHECK_OK(keel_add_batch(idx, v, 200, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    size_t len;
    unsigned char *bytes = td_read_file(test_path("cut.keel"), &len);
    CHECK(bytes);
    refused_unchanged("cut2.keel", bytes, len - 70000, KEEL_ECORRUPT);
    /* Both header copies damaged. */
    bytes[100] ^= 1;
    bytes[65536 + 100] ^= 1;
    refused_unchanged("cut3.keel", bytes, len, KEEL_ECORRUPT);
    /* A damaged older copy: the newest one (B, after one flush) is used. */
    bytes[65536 + 100] ^= 1;
    CHECK(td_write_file(test_path("one.keel"), bytes, len) == 0);
    CHECK_OK(keel_open_reader(test_path("one.keel"), NULL, &idx));
    CHECK_U64(keel_count(idx), 200);
    CHECK_OK(keel_close(idx));
    free(bytes);
    free(v);
}

/* Opens path as a reader and as a writer and wants rc and a message naming
** the path and what it is. */
static void
refused_as(const char *path, int rc, const char *what)
{
    keel_index *idx = NULL;
    CHECK_ERR(keel_open_reader(path, NULL, &idx), rc);
    CHECK(idx == NULL);
    CHECK_MSG_HAS(path);
    CHECK_MSG_HAS(what);
    CHECK_MSG_HAS("help: ");
    CHECK_ERR(keel_open(path, DIM, NULL, &idx), rc);
    CHECK(idx == NULL);
    CHECK_MSG_HAS(path);
    CHECK_MSG_HAS(what);
    CHECK_ERR(keel_open(path, 0, NULL, &idx), rc);
    CHECK_MSG_HAS(what);
}

TEST(files_that_are_not_regular_are_refused_at_once)
{
    /* A FIFO's open waits for a writer forever unless keel avoids it: the
     * alarm turns such a hang into a failure. */
    alarm(20);
    char fifo[4096];
    snprintf(fifo, sizeof fifo, "%s", test_path("pipe.keel"));
    CHECK(mkfifo(fifo, 0644) == 0);
    refused_as(fifo, KEEL_ENOTINDEX, "is a FIFO");
    refused_as("/dev/null", KEEL_ENOTINDEX, "is a character device");
    refused_as("/dev/zero", KEEL_ENOTINDEX, "is a character device");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", test_path("dir.keel"));
    CHECK(mkdir(dir, 0755) == 0);
    refused_as(dir, KEEL_EINVAL, "is a directory");
    /* A socket. */
    char sock[4096];
    snprintf(sock, sizeof sock, "%s", test_path("s.keel"));
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(sock) < sizeof sa.sun_path) {
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
        CHECK(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
        refused_as(sock, KEEL_ENOTINDEX, "is a socket");
    }
    close(fd);
    alarm(0);
}

/* No search result carries a NaN or infinite distance: vectors and queries
** whose products or squared differences could overflow a float are refused
** by name, under ip and l2. */
TEST(huge_components_are_refused_never_a_nan_distance)
{
    static const keel_metric metrics[] = {KEEL_IP, KEEL_L2};
    for (size_t m = 0; m < 2; m++) {
        keel_options o = {.metric = metrics[m]};
        keel_index *idx = NULL;
        char name[32];
        snprintf(name, sizeof name, "huge%zu.keel", m);
        CHECK_OK(keel_open(test_path(name), 2, &o, &idx));
        const float big[2] = {1e30f, 1e30f}, a[2] = {1, 1}, b[2] = {0.5f, 0.25f};
        CHECK_ERR(keel_add(idx, big, NULL), KEEL_EINVAL);
        CHECK_MSG_HAS("the vector has 1e+30 at component 0");
        CHECK_MSG_HAS("help: ");
        const float batch[6] = {1, 1, 0.5f, 0.25f, 3e18f, 3e18f};
        CHECK_ERR(keel_add_batch(idx, batch, 3, NULL, NULL), KEEL_EINVAL);
        CHECK_MSG_HAS("vector 2 of the batch has 3e+18 at component 1");
        CHECK_U64(keel_count(idx), 0);
        CHECK_OK(keel_add(idx, a, NULL));
        CHECK_OK(keel_add(idx, b, NULL));
        /* The largest vectors taken: squared length 1e37 less a little. */
        const float edge[2] = {2.2e18f, -2.2e18f}, edge2[2] = {-2.2e18f,
                                                               2.2e18f};
        CHECK_OK(keel_add(idx, edge, NULL));
        CHECK_OK(keel_add(idx, edge2, NULL));
        keel_result r[4];
        size_t n = 0;
        const float q[2] = {1e30f, -1e30f};
        CHECK_ERR(keel_search(idx, q, 4, NULL, r, &n), KEEL_EINVAL);
        CHECK_MSG_HAS("the query has 1e+30 at component 0");
        CHECK_ERR(keel_search_batch(idx, q, 1, 4, NULL, r, &n), KEEL_EINVAL);
        CHECK_MSG_HAS("query 0 of the batch has 1e+30 at component 0");
        const float qs[3][2] = {{2.2e18f, -2.2e18f}, {-2.2e18f, 2.2e18f},
                                {1, 1}};
        for (size_t i = 0; i < 3; i++) {
            CHECK_OK(keel_search(idx, qs[i], 4, NULL, r, &n));
            CHECK_U64(n, 4);
            for (size_t j = 0; j < n; j++) {
                CHECK_MSG(isfinite(r[j].distance),
                          "metric %zu query %zu result %zu distance %g", m, i,
                          j, (double)r[j].distance);
                CHECK(j == 0 || r[j].distance >= r[j - 1].distance);
            }
        }
        CHECK_OK(keel_close(idx));
    }
}

TEST(batch_search_rows_equal_single_searches)
{
    float *v = td_random(3000, DIM, 9), *q = td_random(200, DIM, 10);
    keel_options o = {.threads = 4};
    keel_index *idx = open_new("batch.keel", &o);
    CHECK(idx);
    CHECK_OK(keel_add_batch(idx, v, 3000, NULL, NULL));
    keel_result *rows = malloc(200 * 10 * sizeof *rows);
    size_t nrows[200];
    uint64_t allow[50];
    for (int i = 0; i < 50; i++)
        allow[i] = (uint64_t)i * 37;
    for (int filtered = 0; filtered < 2; filtered++) {
        keel_search_params p = {.ef = 48};
        if (filtered) {
            p.allowed = allow;
            p.n_allowed = 50;
        }
        CHECK_OK(keel_search_batch(idx, q, 200, 10, &p, rows, nrows));
        for (int i = 0; i < 200; i++) {
            keel_result one[10];
            size_t n;
            CHECK_OK(keel_search(idx, q + i * DIM, 10, &p, one, &n));
            CHECK_EQ(n, nrows[i]);
            for (size_t j = 0; j < n; j++)
                CHECK(one[j].id == rows[i * 10 + j].id &&
                      memcmp(&one[j].distance, &rows[i * 10 + j].distance, 4) == 0);
        }
    }
    q[5 * DIM + 3] = NAN;
    CHECK_ERR(keel_search_batch(idx, q, 200, 10, NULL, rows, nrows), KEEL_EINVAL);
    CHECK_MSG_HAS("query 5 of the batch has NaN at component 3");
    free(rows);
    free(v);
    free(q);
    CHECK_OK(keel_close(idx));
}

TEST(dimensions_one_and_4096)
{
    static const uint32_t dims[] = {1, 4096};
    for (int t = 0; t < 2; t++) {
        uint32_t d = dims[t];
        char name[32];
        snprintf(name, sizeof name, "dim%u.keel", d);
        keel_index *idx;
        keel_options o = {.precision = t ? KEEL_F16 : KEEL_F32};
        CHECK_OK(keel_open(test_path(name), d, &o, &idx));
        float *v = td_random(300, d, 11 + t);
        CHECK_OK(keel_add_batch(idx, v, 300, NULL, NULL));
        CHECK_OK(keel_flush(idx));
        CHECK_OK(keel_close(idx));
        CHECK_OK(keel_open_reader(test_path(name), NULL, &idx));
        CHECK_EQ(keel_dim(idx), d);
        keel_result r[3];
        size_t n;
        CHECK_OK(keel_search(idx, v + 17 * d, 3, NULL, r, &n));
        CHECK(n == 3 && r[0].id == 17);
        CHECK_OK(keel_check(idx));
        CHECK_OK(keel_close(idx));
        free(v);
    }
}

TEST(errors_have_help_lines_and_codes_have_names)
{
    for (int rc = KEEL_OK; rc <= KEEL_ECANCELED; rc++)
        CHECK(strcmp(keel_strerror(rc), "unknown error code") != 0);
    CHECK(strcmp(keel_strerror(99), "unknown error code") == 0);
    CHECK_EQ(keel_libversion_number(), KEEL_VERSION_NUMBER);
}

/* An open that the system refuses names the path in a sentence that reads
** ("opening PATH failed: ...") with help for the errno. */
TEST(open_failures_read_naturally_with_help_for_the_errno)
{
    char loop[700], longname[900];
    snprintf(loop, sizeof loop, "%s", test_path("loop.keel"));
    unlink(loop);
    CHECK(symlink("loop.keel", loop) == 0 || errno == EEXIST);
    char cwd[600];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(test_dir()) == 0);
    keel_index *idx;
    for (int writer = 0; writer < 2; writer++) {
        int rc = writer ? keel_open("loop.keel", DIM, NULL, &idx)
                        : keel_open_reader("loop.keel", NULL, &idx);
        CHECK_ERR(rc, KEEL_EIO);
        CHECK_MSG_HAS("opening loop.keel failed: ");
        CHECK_MSG_HAS("help: the path runs through a symbolic link");
    }
    CHECK(chdir(cwd) == 0);
    snprintf(longname, sizeof longname, "%s/", test_dir());
    size_t n = strlen(longname);
    memset(longname + n, 'n', 300);
    longname[n + 300] = 0;
    CHECK_ERR(keel_open_reader(longname, NULL, &idx), KEEL_EIO);
    CHECK_MSG_HAS(" failed: ");
    CHECK_MSG_HAS("help: the path, or one name in it, is longer");
    CHECK(strstr(keel_errmsg(), " for ") == NULL);
}

TEST_MAIN()
