/* test_rollback.c -- a write that fails leaves nothing behind.
**
**   - An add whose undo entry cannot be saved (the log cannot be created,
**     the disk is full, its path is too long) fails with KEEL_EIO or
**     KEEL_EFULL naming the log, and the index is as before: never an add
**     that reports success and is never found.
**   - An add that fails while linking (no memory) gives back its slots, ids
**     and entry point: the next add and flush show exactly the adds that
**     succeeded.
**   - A flush that fails after writing its intent header, retried, never
**     leaves two header copies with one sequence.
**   - A batch naming an id twice is refused, naming the id and both items,
**     in O(n log n).
*/
#include "test.h"
#include "lib/testdata.h"

#include <errno.h>
#include <limits.h>

#include "format.h"
#include "os.h"

#define DIM 16

/* --- a fault-injecting OS layer ---------------------------------------------- */

static struct {
    int undo_open_err;     /* -errno for opens of *.undo */
    int undo_write_err;    /* -errno for writes to an open undo log */
    int arm_after_header;  /* fail the allocation after the next header write */
    int sync_err;          /* -errno for every sync */
} F;

static int
ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static int
fd_is_undo(int fd)
{
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = 0;
    return ends_with(target, ".undo");
}

static int
f_open(const char *path, int flags)
{
    if (F.undo_open_err && ends_with(path, ".undo") &&
        (flags & KEEL_OPEN_CREATE))
        return F.undo_open_err;
    return keel__os_posix.open(path, flags);
}

static ssize_t
f_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
    if (F.undo_write_err && fd_is_undo(fd))
        return F.undo_write_err;
    ssize_t r = keel__os_posix.pwrite(fd, buf, n, off);
    if (F.arm_after_header && !fd_is_undo(fd) &&
        (off == KEEL_HDR_A_OFF || off == KEEL_HDR_B_OFF)) {
        F.arm_after_header = 0;
        keel__fail_alloc_after(1);
    }
    return r;
}

static int
f_sync(int fd)
{
    return F.sync_err ? F.sync_err : keel__os_posix.sync(fd);
}

static keel_os faulty;

static void
faults_on(void)
{
    memset(&F, 0, sizeof F);
    faulty = keel__os_posix;
    faulty.open = f_open;
    faulty.pwrite = f_pwrite;
    faulty.sync = f_sync;
    keel__os = &faulty;
}

static void
faults_off(void)
{
    memset(&F, 0, sizeof F);
    keel__os = &keel__os_posix;
    keel__fail_alloc_after(0);
}

/* --- helpers ------------------------------------------------------------------ */

/* A fresh index holding ids 0..n-1 (td_vec_embed), flushed. */
static int
make_index(const char *path, uint64_t n, keel_index **out)
{
    unlink(path);
    int rc = keel_open(path, DIM, NULL, out);
    if (rc)
        return rc;
    float *v = malloc(n * DIM * sizeof *v);
    for (uint64_t i = 0; i < n; i++)
        td_vec_embed(i, DIM, v + i * DIM);
    rc = keel_add_batch(*out, v, n, NULL, NULL);
    free(v);
    return rc ? rc : keel_flush(*out);
}

/* Whether every id in ids[0..n) is live and finds itself first. */
static int
all_find_themselves(keel_index *idx, const uint64_t *ids, size_t n)
{
    float v[DIM];
    for (size_t i = 0; i < n; i++) {
        keel_result r[1];
        size_t got;
        td_vec_embed(ids[i], DIM, v);
        if (keel_search(idx, v, 1, NULL, r, &got) != KEEL_OK || got != 1 ||
            r[0].id != ids[i])
            return 0;
    }
    return 1;
}

static int
range_finds_itself(keel_index *idx, uint64_t n)
{
    for (uint64_t id = 0; id < n; id++)
        if (!all_find_themselves(idx, &id, 1))
            return 0;
    return 1;
}

/* --- 1: the undo log cannot be written ----------------------------------------- */

/* With the fault set, one add and one batch fail with rc naming the log;
** the index is unchanged; with it cleared (if it can be), adds go on. */
static void
undo_failure_case(const char *path, int rc_want, int clears,
                  const char *needle)
{
    keel_index *idx;
    CHECK_OK(make_index(path, 60, &idx));
    float v[4 * DIM];
    for (int i = 0; i < 4; i++)
        td_vec_embed(60 + (uint64_t)i, DIM, v + i * DIM);
    uint64_t got_id = 0;
    CHECK_ERR(keel_add(idx, v, &got_id), rc_want);
    CHECK_MSG_HAS(".undo");
    CHECK_MSG_HAS(needle);
    CHECK_ERR(keel_add_batch(idx, v, 4, NULL, NULL), rc_want);
    CHECK_MSG_HAS(".undo");
    CHECK_U64(keel_count(idx), 60);
    keel_stats s;
    CHECK_OK(keel_stat(idx, &s));
    CHECK_U64(s.next_id, 60);
    CHECK_OK(keel_check(idx));
    CHECK(range_finds_itself(idx, 60));
    uint64_t want = 60;
    if (clears) {
        memset(&F, 0, sizeof F);
        CHECK_OK(keel_add(idx, v, &got_id));
        CHECK_U64(got_id, 60);
        want = 61;
    }
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    faults_off();
    CHECK_OK(keel_open(path, DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), want);
    CHECK_OK(keel_check(idx));
    CHECK(range_finds_itself(idx, want));
    keel_close(idx);
}

TEST(add_fails_when_the_undo_log_cannot_be_created_or_written)
{
    static const struct {
        int open_err, write_err, rc;
    } cases[] = {
        {-EACCES, 0, KEEL_EIO},
        {-ENOSPC, 0, KEEL_EFULL},
        {0, -ENOSPC, KEEL_EFULL},
        {0, -EIO, KEEL_EIO},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[64];
        snprintf(name, sizeof name, "undo-fault-%zu.keel", c);
        faults_on();
        F.undo_open_err = cases[c].open_err;
        F.undo_write_err = cases[c].write_err;
        undo_failure_case(test_path(name), cases[c].rc, 1,
                          cases[c].rc == KEEL_EFULL ? "no space" : "help: ");
        faults_off();
        if (test_failed_flag) {
            fprintf(stderr, "  (case %zu)\n", c);
            return;
        }
    }
}

TEST(add_fails_when_the_undo_log_path_is_too_long)
{
    /* An index path of PATH_MAX - 3 bytes: its ".undo" cannot be named. */
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", test_dir());
    size_t want = PATH_MAX - 3;
    while (strlen(path) + 202 < want) {
        size_t n = strlen(path);
        path[n] = '/';
        memset(path + n + 1, 'd', 200);
        path[n + 201] = 0;
        CHECK_MSG(mkdir(path, 0700) == 0, "mkdir: %s", strerror(errno));
    }
    size_t n = strlen(path);
    path[n] = '/';
    memset(path + n + 1, 'k', want - n - 1);
    path[want] = 0;
    undo_failure_case(path, KEEL_EIO, 0, "too long");
}

/* --- 4: a failed add rolls back whole ----------------------------------------- */

/* Fails the n-th allocation of an add of ids 100 and 101 (a batch, or single
** adds of 100), then adds id 200 and flushes: the index must hold the old
** vectors and 200, nothing else. Returns 1 once the add succeeded with no
** fault (every failure point tried). */
static int
failed_add_case(const char *path, long n, int batch, int *failed)
{
    keel_index *idx;
    *failed = 0;
    if (make_index(path, 10, &idx) != KEEL_OK)
        return -1;
    float v[2 * DIM];
    td_vec_embed(100, DIM, v);
    td_vec_embed(101, DIM, v + DIM);
    uint64_t ids[2] = {100, 101};
    keel__fail_alloc_after((uint64_t)n);
    int rc = batch ? keel_add_batch(idx, v, 2, ids, NULL)
                   : keel_add_with_id(idx, 100, v);
    keel__fail_alloc_after(0);
    if (rc == KEEL_OK) {
        keel_close(idx);
        return 1;
    }
    *failed = 1;
    int ok = rc == KEEL_ENOMEM && strstr(keel_errmsg(), "\nhelp: ") &&
             keel_count(idx) == 10;
    float w[DIM];
    td_vec_embed(200, DIM, w);
    ok = ok && keel_add_with_id(idx, 200, w) == KEEL_OK &&
         keel_flush(idx) == KEEL_OK && keel_count(idx) == 11 &&
         keel_get(idx, 100, v) == KEEL_ENOTFOUND &&
         keel_get(idx, 101, v) == KEEL_ENOTFOUND &&
         keel_get(idx, 200, v) == KEEL_OK && keel_check(idx) == KEEL_OK;
    keel_close(idx);
    if (!ok)
        return -1;
    if (keel_open(path, DIM, NULL, &idx) != KEEL_OK)
        return -1;
    uint64_t want[11] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 200};
    ok = keel_count(idx) == 11 && keel_get(idx, 100, v) == KEEL_ENOTFOUND &&
         keel_check(idx) == KEEL_OK && all_find_themselves(idx, want, 11);
    keel_close(idx);
    return ok ? 0 : -1;
}

TEST(a_failed_add_gives_back_slots_ids_and_entry_point)
{
    for (int batch = 0; batch < 2; batch++) {
        long points = 0;
        for (long n = 1;; n++) {
            int failed;
            int r = failed_add_case(test_path("rollback.keel"), n, batch,
                                    &failed);
            CHECK_MSG(r >= 0, "%s, allocation %ld failed: the index is not "
                      "the old one plus the next add",
                      batch ? "batch" : "single add", n);
            points += failed;
            if (r == 1)
                break;
        }
        printf("    %s: %ld failure points\n", batch ? "batch" : "single add",
               points);
        CHECK(points > 3);
    }
}

/* --- 3: a retried flush after its intent header ---------------------------- */

TEST(a_flush_retried_after_its_intent_header_keeps_sequences_apart)
{
    const char *path = test_path("intent-retry.keel");
    keel_index *idx;
    CHECK_OK(make_index(path, 20, &idx));
    CHECK_OK(keel_delete(idx, 3));
    faults_on();
    /* Any allocation after the intent header fails. A flush that allocates
     * nothing there commits; one that fails is retried, and the retry's
     * first sync fails. */
    F.arm_after_header = 1;
    int rc = keel_flush(idx);
    keel__fail_alloc_after(0);
    uint64_t want = 19;
    if (rc != KEEL_OK) {
        CHECK_ERR(rc, KEEL_ENOMEM);
        F.sync_err = -EIO;
        CHECK_ERR(keel_flush(idx), KEEL_EIO);
        want = 20;
    }
    keel_close(idx);
    faults_off();
    CHECK_OK(keel_open_reader(path, NULL, &idx));
    CHECK_U64(keel_count(idx), want);
    keel_close(idx);
    CHECK_OK(keel_open(path, DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), want);
    CHECK_OK(keel_check(idx));
    if (want == 19) {
        keel_close(idx);
        return;
    }
    float v[DIM];
    CHECK_OK(keel_get(idx, 3, v));
    CHECK(range_finds_itself(idx, 20));
    /* And the delete goes through now. */
    CHECK_OK(keel_delete(idx, 3));
    CHECK_OK(keel_flush(idx));
    keel_close(idx);
    CHECK_OK(keel_open(path, DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), 19);
    CHECK_OK(keel_check(idx));
    keel_close(idx);
}

/* --- 16: duplicate ids in a batch ---------------------------------------------- */

static void
expect_duplicate(keel_index *idx, const uint64_t *ids, size_t n,
                 const float *v, uint64_t id, size_t a, size_t b)
{
    char want[128];
    CHECK_ERR(keel_add_batch(idx, v, n, ids, NULL), KEEL_EINVAL);
    snprintf(want, sizeof want, "id %llu appears twice in the batch (items "
             "%zu and %zu)", (unsigned long long)id, a, b);
    CHECK_MSG_HAS(want);
}

TEST(duplicate_ids_in_a_batch_are_named_with_both_items)
{
    const char *path = test_path("dups.keel");
    keel_index *idx;
    CHECK_OK(make_index(path, 1, &idx));
    size_t n = 200000;
    float *v = calloc(n * DIM, sizeof *v);
    uint64_t *ids = malloc(n * sizeof *ids);
    CHECK(v && ids);
    for (size_t i = 0; i < n; i++)
        v[i * DIM] = 1.0f;
    uint64_t seed = 7;
    for (size_t i = 0; i < n; i++)
        ids[i] = (test_rand(&seed) >> 8) * 2 + 1; /* odd: no collision below */
    /* Large: one repeat at the very end. */
    ids[n - 1] = ids[12345];
    expect_duplicate(idx, ids, n, v, ids[12345], 12345, n - 1);
    ids[n - 1] = 2;
    /* Small batches: repeats at the ends, in the middle, several. */
    uint64_t a[10] = {5, 5, 1, 3, 7, 9, 11, 13, 15, 17};
    expect_duplicate(idx, a, 10, v, 5, 0, 1);
    uint64_t b[10] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 1};
    expect_duplicate(idx, b, 10, v, 1, 0, 9);
    /* Two repeated ids: the one repeated first in the batch is named. */
    uint64_t c[10] = {1, 2, 3, 4, 2, 6, 1, 8, 9, 10};
    expect_duplicate(idx, c, 10, v, 2, 1, 4);
    /* Three of one id: its first two places. */
    uint64_t d[10] = {1, 2, 9, 4, 5, 9, 7, 9, 3, 10};
    expect_duplicate(idx, d, 10, v, 9, 2, 5);
    /* Nothing was added; distinct ids go in. */
    CHECK_U64(keel_count(idx), 1);
    uint64_t e[4] = {10, 11, 12, 13};
    CHECK_OK(keel_add_batch(idx, v, 4, e, NULL));
    CHECK_U64(keel_count(idx), 5);
    free(v);
    free(ids);
    keel_close(idx);
}

TEST_MAIN()
