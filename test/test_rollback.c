/* test_rollback.c -- a write that fails leaves nothing behind.
**
**   - An add whose undo entry cannot be saved (the log cannot be created,
**     the disk is full, its path is too long) fails with KEEL_EIO or
**     KEEL_EFULL naming the log, and the index is as before: never an add
**     that reports success and is never found.
**   - An add that fails while linking (no memory) gives back its slots, ids
**     and entry point: the next add and flush show exactly the adds that
**     succeeded.
**   - A failed add (an undo entry that cannot be written, no memory, a
**     cancel), batch or single, leaves every list of every node that
**     existed before it exactly as it was (compared word for word through
**     the store, and by the searches of every vector against a control
**     index that never saw the failed add).
**   - A flush that fails after writing its intent header, retried, never
**     leaves two header copies with one sequence.
**   - A batch naming an id twice is refused, naming the id and both items,
**     in O(n log n).
*/
#include "test.h"
#include "lib/testdata.h"

#include <errno.h>
#include <limits.h>

#include "api/api.h"    /* white-box: the handle's store, to read lists */
#include "store/format.h"
#include "os/os.h"

#define DIM 16

/* --- a fault-injecting OS layer ---------------------------------------------- */

static struct {
    int undo_open_err;     /* -errno for opens of *.undo */
    int undo_write_err;    /* -errno for writes to an open undo log */
    int arm_after_header;  /* fail the allocation after the next header write */
    int undo_write_at;     /* fail the undo_write_at-th write to a log */
    int undo_writes;
    int sync_err;          /* -errno for every sync */
    int undo_read_err;     /* -errno for reads of an open undo log */
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
    /* a file's log, or an in-memory index's (memfd "keel-undo") */
    return ends_with(target, ".undo") || strstr(target, "keel-undo") != NULL;
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
    if (F.undo_write_at && fd_is_undo(fd) && ++F.undo_writes == F.undo_write_at)
        return -EIO;
    ssize_t r = keel__os_posix.pwrite(fd, buf, n, off);
    if (F.arm_after_header && !fd_is_undo(fd) &&
        (off == KEEL_HDR_A_OFF || off == KEEL_HDR_B_OFF)) {
        F.arm_after_header = 0;
        keel__fail_alloc_after(1);
    }
    return r;
}

static ssize_t
f_pread(int fd, void *buf, size_t n, uint64_t off)
{
    if (F.undo_read_err && fd_is_undo(fd))
        return F.undo_read_err;
    return keel__os_posix.pread(fd, buf, n, off);
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
    faulty.pread = f_pread;
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

/* --- a failed add leaves the lists of earlier nodes as they were ------------- */

#define PRE_COMMITTED 2000
#define PRE_UNFLUSHED 300
#define PRE (PRE_COMMITTED + PRE_UNFLUSHED)
#define FAILED_BATCH 3000

static const keel_options list_opts = {.max_connections = 4,
                                       .ef_construction = 40, .threads = 1};

static float *
embed_range(uint64_t from, size_t n)
{
    float *v = malloc(n * DIM * sizeof *v);
    for (size_t i = 0; i < n; i++)
        td_vec_embed(from + i, DIM, v + i * DIM);
    return v;
}

/* PRE_COMMITTED vectors flushed, then PRE_UNFLUSHED added without a flush:
** the later ones change committed nodes (saved to the undo log earlier in
** this commit cycle) and are themselves published but not committed. */
static int
make_pre(const char *path, uint32_t threads, keel_index **out)
{
    keel_options o = list_opts;
    o.threads = threads;
    unlink(path);
    int rc = keel_open(path, DIM, &o, out);
    float *a = embed_range(0, PRE_COMMITTED);
    float *b = embed_range(50000, PRE_UNFLUSHED);
    if (!rc)
        rc = keel_add_batch(*out, a, PRE_COMMITTED, NULL, NULL);
    if (!rc)
        rc = keel_flush(*out);
    if (!rc)
        rc = keel_add_batch(*out, b, PRE_UNFLUSHED, NULL, NULL);
    free(a);
    free(b);
    return rc;
}

/* Every list of every slot below n, in words (M0 + 15 M per slot). */
static uint32_t *
lists_of(keel_index *idx, uint64_t n)
{
    const keel_store *st = idx->st;
    size_t per = st->g.M0 + (KEEL_MAX_LEVELS - 1) * (size_t)st->g.M;
    uint32_t *w = calloc(n * per, sizeof *w);
    for (uint64_t slot = 0; slot < n; slot++) {
        uint32_t *o = w + slot * per;
        uint32_t level = (uint32_t)(*keel__store_rec(st, slot) & 0xFF);
        for (uint32_t lv = 0; lv <= level; lv++) {
            uint32_t len;
            const uint32_t *list = keel__store_list(st, slot, lv, &len);
            for (uint32_t j = 0; list && j < len; j++)
                *o++ = list[j];
        }
    }
    return w;
}

/* How many slots below n have a list that differs between a and b. */
static int
lists_differ(keel_index *idx, const uint32_t *a, const uint32_t *b, uint64_t n)
{
    size_t per = idx->st->g.M0 + (KEEL_MAX_LEVELS - 1) * (size_t)idx->st->g.M;
    int d = 0;
    for (uint64_t s = 0; s < n; s++)
        d += memcmp(a + s * per, b + s * per, per * sizeof *a) != 0;
    return d;
}

/* The top 10 (ids and distances) at ef 10 of the vectors of ids 0..PRE. */
static keel_result *
answers_of(keel_index *idx)
{
    keel_result *r = calloc((size_t)PRE * 10, sizeof *r);
    keel_search_params p = {.ef = 10};
    for (uint64_t i = 0; i < PRE; i++) {
        float v[DIM];
        size_t got;
        td_vec_embed(i < PRE_COMMITTED ? i : 50000 + i - PRE_COMMITTED, DIM, v);
        if (keel_search(idx, v, 10, &p, r + i * 10, &got) != KEEL_OK)
            r[i * 10].id = UINT64_MAX - 1;
    }
    return r;
}

static int
answers_differ(const keel_result *a, const keel_result *b)
{
    int d = 0;
    for (size_t i = 0; i < PRE; i++)
        for (size_t j = 0; j < 10; j++)
            if (a[i * 10 + j].id != b[i * 10 + j].id ||
                a[i * 10 + j].distance != b[i * 10 + j].distance) {
                d++;
                break;
            }
    return d;
}

static int
cancel_now(void *arg)
{
    (*(int *)arg)++;
    return 1;
}

/* Which of the failing batch's vectors a single add adds: each attempt of
** a test another one, so that attempts reach other parts of the graph. */
static long single_row;

/* The failing call of each kind; returns its rc. */
enum { FAIL_UNDO_WRITE, FAIL_ALLOC, FAIL_CANCEL, FAIL_SINGLE_UNDO, FAIL_KINDS };
static const char *const fail_name[] = {"an undo write", "an allocation",
                                        "a cancel", "a single add's undo write"};

static int
failing_call(keel_index *idx, int kind, long n)
{
    float *v = embed_range(100000, FAILED_BATCH);
    int rc, asked = 0;
    faults_on();
    switch (kind) {
    case FAIL_UNDO_WRITE:
        F.undo_write_at = (int)n;
        rc = keel_add_batch(idx, v, FAILED_BATCH, NULL, NULL);
        break;
    case FAIL_ALLOC:
        keel__fail_alloc_after((uint64_t)n);
        rc = keel_add_batch(idx, v, FAILED_BATCH, NULL, NULL);
        break;
    case FAIL_CANCEL:
        keel_set_cancel(idx, cancel_now, &asked);
        rc = keel_add_batch(idx, v, FAILED_BATCH, NULL, NULL);
        keel_set_cancel(idx, NULL, NULL);
        break;
    default:
        /* A single add failing at its n-th undo write. */
        F.undo_write_at = (int)n;
        rc = keel_add(idx, v + (size_t)(single_row % FAILED_BATCH) * DIM,
                      NULL);
        break;
    }
    faults_off();
    free(v);
    return rc;
}

/* One failed call on an index made by make_pre: every list of the PRE
** earlier slots is as before, and so is every search. *ok 0 if the call
** did not fail. */
static void
failed_call_keeps_lists(uint32_t threads, int kind, long n, int *failed)
{
    keel_index *idx;
    CHECK_OK(make_pre(test_path("lists.keel"), threads, &idx));
    uint64_t count = PRE;
    uint32_t *before = NULL;
    keel_result *ra = NULL;
    int rc = KEEL_OK;
    if (kind == FAIL_SINGLE_UNDO) {
        /* Single adds until one fails: most save nothing new. */
        for (uint64_t i = 0; i < 500 && rc == KEEL_OK; i++) {
            single_row = (long)i;
            count = keel_count(idx);
            free(before);
            before = lists_of(idx, count);
            rc = failing_call(idx, kind, n);
        }
    } else {
        before = lists_of(idx, PRE);
        ra = answers_of(idx);
        rc = failing_call(idx, kind, n);
    }
    *failed = rc != KEEL_OK;
    if (rc == KEEL_OK) {
        free(before);
        free(ra);
        keel_close(idx);
        return;
    }
    CHECK_U64(keel_count(idx), count);
    uint32_t *after = lists_of(idx, count);
    keel_result *rb = ra ? answers_of(idx) : NULL;
    int dl = lists_differ(idx, before, after, count);
    int da = ra ? answers_differ(ra, rb) : 0;
    free(before);
    free(after);
    free(ra);
    free(rb);
    CHECK_MSG(dl == 0 && da == 0, "threads %u, %s (%ld): after the failed add "
              "%d of %llu earlier nodes have other lists and %d of %d vectors "
              "other answers", threads, fail_name[kind], n, dl,
              (unsigned long long)count, da, PRE);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(test_path("lists.keel"), DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), count);
    CHECK_OK(keel_check(idx));
    keel_close(idx);
}

TEST(a_failed_add_leaves_every_earlier_list_as_it_was)
{
    for (uint32_t threads = 1; threads <= 2; threads++) {
        int failed;
        static const struct {
            int kind;
            long n;
        } cases[] = {{FAIL_UNDO_WRITE, 300}, {FAIL_UNDO_WRITE, 1},
                     {FAIL_CANCEL, 0}, {FAIL_SINGLE_UNDO, 1},
                     {FAIL_SINGLE_UNDO, 2}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            failed_call_keeps_lists(threads, cases[c].kind, cases[c].n,
                                    &failed);
            CHECK_MSG(test_failed_flag || failed, "threads %u: the add with "
                      "%s (%ld) did not fail", threads,
                      fail_name[cases[c].kind], cases[c].n);
            if (test_failed_flag)
                return;
        }
        /* Every allocation of the batch in turn, until it succeeds. */
        long points = 0;
        for (long n = 1;; n++) {
            failed_call_keeps_lists(threads, FAIL_ALLOC, n, &failed);
            if (test_failed_flag)
                return;
            if (!failed)
                break;
            points++;
        }
        printf("    threads %u: %ld allocation failure points\n", threads,
               points);
        CHECK(points > 3);
    }
}

/* The same index with and without a failed batch (threads 1: the build is
** deterministic, so the two must answer alike, distances included), before
** and after one more batch, a flush and a reopen. */
TEST(a_failed_add_answers_like_an_index_that_never_saw_it)
{
    keel_index *idx, *ctl;
    CHECK_OK(make_pre(test_path("failed.keel"), 1, &idx));
    CHECK_OK(make_pre(test_path("control.keel"), 1, &ctl));
    keel_result *a = answers_of(ctl), *b = answers_of(idx);
    int d = answers_differ(a, b);
    free(b);
    CHECK_MSG(d == 0, "two indexes built alike answer %d of %d vectors "
              "differently: builds with one thread are not deterministic",
              d, PRE);
    CHECK(failing_call(idx, FAIL_UNDO_WRITE, 300) != KEEL_OK);
    b = answers_of(idx);
    d = answers_differ(a, b);
    free(a);
    free(b);
    CHECK_MSG(d == 0, "after the failed batch %d of %d vectors answer "
              "differently than in the control", d, PRE);
    float *more = embed_range(200000, 50);
    CHECK_OK(keel_add_batch(idx, more, 50, NULL, NULL));
    CHECK_OK(keel_add_batch(ctl, more, 50, NULL, NULL));
    free(more);
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_flush(ctl));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(test_path("failed.keel"), DIM, NULL, &idx));
    a = answers_of(ctl);
    b = answers_of(idx);
    d = answers_differ(a, b);
    free(a);
    free(b);
    CHECK_MSG(d == 0, "after one more batch, a flush and a reopen %d of %d "
              "vectors answer differently than in the control", d, PRE);
    CHECK_OK(keel_check(idx));
    keel_close(idx);
    keel_close(ctl);
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

/* A backup (and a publish, through the same read) of a writer whose undo
** log cannot be read fails and names the log: without it the copy would
** hold lists that adds since the commit rewrote. */
TEST(a_backup_whose_undo_log_cannot_be_read_fails)
{
    keel_options o = {.max_connections = 4};
    keel_index *w = NULL;
    CHECK_OK(keel_open(test_path("unread.keel"), DIM, &o, &w));
    float *v = td_random(1200, DIM, 61);
    CHECK_OK(keel_add_batch(w, v, 200, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_add_batch(w, v + 200 * DIM, 1000, NULL, NULL));
    faults_on();
    F.undo_read_err = -EIO;
    int rc = keel_backup(w, test_path("unread-copy.keel"));
    faults_off();
    CHECK_ERR(rc, KEEL_EIO);
    CHECK_MSG_HAS("reading the undo log");
    CHECK(access(test_path("unread-copy.keel"), F_OK) != 0);
    CHECK_OK(keel_backup(w, test_path("unread-copy.keel")));
    CHECK_OK(keel_close(w));
    free(v);
}

/* An index in memory keeps its undo log in memory: a failed write to it
** fails the add with a message naming it, and the index goes on. */
TEST(a_failed_undo_write_of_an_index_in_memory_fails_the_add)
{
    keel_options o = {.max_connections = 4};
    keel_index *w = NULL;
    CHECK_OK(keel_open(":memory:", DIM, &o, &w));
    float *v = td_random(1000, DIM, 71);
    CHECK_OK(keel_add_batch(w, v, 500, NULL, NULL));
    CHECK_OK(keel_flush(w));
    faults_on();
    F.undo_write_at = 2; /* the log's header goes, its first entry fails */
    int rc = keel_add_batch(w, v + 500 * DIM, 500, NULL, NULL);
    faults_off();
    CHECK_ERR(rc, KEEL_EIO);
    CHECK_MSG_HAS("the undo log (in memory) failed");
    CHECK_MSG_HAS("help: ");
    CHECK_U64(keel_count(w), 500);
    CHECK_OK(keel_add_batch(w, v + 500 * DIM, 500, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_U64(keel_count(w), 1000);
    CHECK_OK(keel_check(w));
    CHECK_OK(keel_close(w));
    free(v);
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
