/* test_cancel.c -- cancelling long calls (keel_set_cancel), the pending
** counts (keel_pending), and messages cut to fit keel's buffer. Black-box:
** only keel.h.
*/
#include "test.h"
#include "lib/testdata.h"

#define DIM 16

typedef struct {
    int calls;
    int stop_at; /* stop at this call (1 = the first); 0 = never */
} asker;

static int
ask(void *arg)
{
    asker *a = arg;
    a->calls++;
    return a->stop_at && a->calls >= a->stop_at;
}

static keel_index *
open_new(const char *name, uint32_t threads)
{
    keel_options o = {.threads = threads};
    keel_index *idx = NULL;
    if (keel_open(test_path(name), DIM, &o, &idx) != KEEL_OK)
        fprintf(stderr, "open %s: %s\n", name, keel_errmsg());
    return idx;
}

TEST(cancelled_add_batch_adds_nothing)
{
    float *v = td_random(3000, DIM, 1);
    keel_index *idx = open_new("c.keel", 2);
    CHECK(idx);
    CHECK_OK(keel_add_batch(idx, v, 100, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    asker a = {.stop_at = 1};
    CHECK_OK(keel_set_cancel(idx, ask, &a));
    uint64_t *ids = malloc(2900 * sizeof *ids);
    for (size_t i = 0; i < 2900; i++)
        ids[i] = 1000 + i;
    CHECK_ERR(keel_add_batch(idx, v + 100 * DIM, 2900, ids, NULL),
              KEEL_ECANCELED);
    CHECK_MSG_HAS("cancel");
    CHECK_EQ(a.calls, 1);
    CHECK_U64(keel_count(idx), 100);
    float out[DIM];
    for (size_t i = 0; i < 2900; i += 97)
        CHECK_EQ(keel_get(idx, ids[i], out), KEEL_ENOTFOUND);
    uint64_t adds = 9, dels = 9;
    CHECK_OK(keel_pending(idx, &adds, &dels));
    CHECK_U64(adds, 0);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(test_path("c.keel"), 0, NULL, &idx));
    CHECK_U64(keel_count(idx), 100);
    CHECK_OK(keel_close(idx));
    /* A callback that never asks to stop lets a batch through. */
    idx = open_new("c2.keel", 2);
    CHECK(idx);
    a.stop_at = 0;
    a.calls = 0;
    CHECK_OK(keel_set_cancel(idx, ask, &a));
    CHECK_OK(keel_add_batch(idx, v, 3000, NULL, NULL));
    CHECK(a.calls >= 1);
    CHECK_OK(keel_flush(idx));
    CHECK_U64(keel_count(idx), 3000);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    free(ids);
    free(v);
}

TEST(cancelled_compact_leaves_the_index)
{
    float *v = td_random(2000, DIM, 2);
    keel_index *idx = open_new("k.keel", 1);
    CHECK(idx);
    CHECK_OK(keel_add_batch(idx, v, 2000, NULL, NULL));
    for (uint64_t id = 0; id < 2000; id += 2)
        CHECK_OK(keel_delete(idx, id));
    CHECK_OK(keel_flush(idx));
    keel_stats before, after;
    CHECK_OK(keel_stat(idx, &before));
    asker a = {.stop_at = 1};
    CHECK_OK(keel_set_cancel(idx, ask, &a));
    CHECK_ERR(keel_compact(idx), KEEL_ECANCELED);
    CHECK_OK(keel_stat(idx, &after));
    CHECK_U64(after.deleted, before.deleted);
    CHECK_U64(after.snapshot, before.snapshot);
    CHECK_U64(keel_count(idx), 1000);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_set_cancel(idx, NULL, NULL));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(test_path("k.keel"), 0, NULL, &idx));
    CHECK_U64(keel_count(idx), 1000);
    CHECK_OK(keel_compact(idx));
    CHECK_OK(keel_stat(idx, &after));
    CHECK_U64(after.deleted, 0);
    CHECK_OK(keel_close(idx));
    free(v);
}

TEST(pending_counts_unflushed_adds_and_deletes)
{
    float *v = td_random(10, DIM, 3);
    keel_index *idx = open_new("p.keel", 1);
    CHECK(idx);
    uint64_t adds = 9, dels = 9;
    CHECK_OK(keel_pending(idx, &adds, &dels));
    CHECK_U64(adds, 0);
    CHECK_U64(dels, 0);
    CHECK_OK(keel_add_batch(idx, v, 5, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_add_batch(idx, v + 5 * DIM, 3, NULL, NULL));
    CHECK_OK(keel_add(idx, v + 8 * DIM, NULL));
    CHECK_OK(keel_delete(idx, 0));
    CHECK_OK(keel_delete(idx, 1));
    CHECK_OK(keel_pending(idx, &adds, &dels));
    CHECK_U64(adds, 4);
    CHECK_U64(dels, 2);
    CHECK_OK(keel_pending(idx, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_pending(idx, &adds, &dels));
    CHECK_U64(adds, 0);
    CHECK_U64(dels, 0);
    keel_index *r = NULL;
    CHECK_OK(keel_open_reader(test_path("p.keel"), NULL, &r));
    CHECK_OK(keel_pending(r, &adds, &dels));
    CHECK_U64(adds + dels, 0);
    CHECK_OK(keel_close(r));
    CHECK_ERR(keel_pending(NULL, &adds, &dels), KEEL_EINVAL);
    CHECK_OK(keel_close(idx));
    free(v);
}

/* 1 if s is well-formed UTF-8. */
static int
utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1
              : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : -1;
        if (n < 0)
            return 0;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xC0) != 0x80)
                return 0;
    }
    return 1;
}

TEST(a_cut_message_never_ends_inside_a_character)
{
    /* A path of about 2,400 bytes of "é" overflows the 2,048-byte message
     * buffer; with each of four prefix lengths the cut falls once inside a
     * character and once between two. */
    for (int pre = 0; pre < 4; pre++) {
        char path[2600];
        int n = snprintf(path, sizeof path, "/nonexistent-keel-dir/%.*s",
                         pre, "abc");
        for (int i = 0; i < 1200; i++)
            n += snprintf(path + n, sizeof path - (size_t)n, "\xc3\xa9");
        keel_index *idx = NULL;
        int rc = keel_open_reader(path, NULL, &idx);
        CHECK(rc != KEEL_OK);
        size_t len = strlen(keel_errmsg());
        CHECK_MSG(len > 1000, "message of %zu bytes", len);
        CHECK_MSG(utf8_valid(keel_errmsg()), "prefix %d: invalid UTF-8 at "
                  "the end: ...%s", pre, keel_errmsg() + len - 8);
    }
}

TEST_MAIN()
