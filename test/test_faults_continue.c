/* test_faults_continue.c -- a failure, then more work on the same handle.
**
** test_faults.c stops at the first failure and reopens. Here each failure
** point of a workload (every write, sync, space reservation, mapping and
** length change, and every allocation, failed once) is followed by the rest
** of the workload on the same handle: adds, batch adds, deletes, flushes and
** a compaction. Then the handle must pass keel_check and hold exactly what
** the calls that reported success did, and the reopened file must equal the
** last successful flush plus nothing else (or, if a flush failed after its
** commit point, what that flush would have committed, as after a crash).
** A writer poisoned by a failed sync refuses further flushes; the reopened
** file then shows the last commit.
*/
#include "test.h"
#include "lib/testdata.h"

#include <errno.h>

#include "store/format.h"
#include "os/os.h"

TEST_PREFER_MEMORY_FS()

#define DIM 16
#define MAXID 320

enum op { OP_WRITE, OP_SYNC, OP_ALLOCATE, OP_MAP, OP_TRUNCATE, OP_COUNT };
static const char *op_names[] = {"write", "sync", "allocate", "map",
                                 "truncate"};

static struct {
    int op;     /* which call fails */
    long n;     /* the n-th one (1-based); 0 = none */
    int err;    /* -errno */
    long seen;
    int fired;
} F;

static int
should_fail(int op)
{
    if (F.n == 0 || op != F.op || F.fired)
        return 0;
    if (++F.seen == F.n) {
        F.fired = 1;
        return 1;
    }
    return 0;
}

static ssize_t
f_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
    return should_fail(OP_WRITE) ? F.err
                                 : keel__os_posix.pwrite(fd, buf, n, off);
}

static int
f_sync(int fd)
{
    return should_fail(OP_SYNC) ? F.err : keel__os_posix.sync(fd);
}

static int
f_allocate(int fd, uint64_t off, uint64_t len)
{
    return should_fail(OP_ALLOCATE) ? F.err
                                    : keel__os_posix.allocate(fd, off, len);
}

static int
f_map(int fd, uint64_t off, size_t len, int write, void **out)
{
    return should_fail(OP_MAP) ? -ENOMEM
                               : keel__os_posix.map(fd, off, len, write, out);
}

static int
f_truncate(int fd, uint64_t len)
{
    return should_fail(OP_TRUNCATE) ? F.err : keel__os_posix.truncate(fd, len);
}

static keel_os faulty;

/* --- the model ------------------------------------------------------------------ */

typedef struct model {
    uint8_t live[MAXID];
    uint64_t next_id;
} model;

static int
model_eq(const model *a, const model *b)
{
    return a->next_id == b->next_id && memcmp(a->live, b->live, MAXID) == 0;
}

typedef struct run {
    model now;            /* what the calls that succeeded did */
    model committed;      /* at the last successful flush */
    model at_failed[8];   /* at each failed flush or compaction */
    int n_failed;
    int failures;         /* calls that failed */
    int bad;              /* a call failed with an unexpected code */
    char why[256];
} run;

/* Checks a call's result: success, or a failure with a known code and a
** help line. */
static int
outcome(run *r, int rc, const char *what)
{
    if (rc == KEEL_OK)
        return 1;
    r->failures++;
    keel__fail_alloc_after(0); /* an allocation fails once: the calls after
                                * this one get memory again */
    if ((rc != KEEL_EIO && rc != KEEL_EFULL && rc != KEEL_ENOMEM) ||
        !strstr(keel_errmsg(), "\nhelp: ")) {
        if (!r->bad)
            snprintf(r->why, sizeof r->why, "%s returned %d: '%s'", what, rc,
                     keel_errmsg());
        r->bad = 1;
    }
    return 0;
}

static void
add_batch(keel_index *idx, run *r, uint64_t n)
{
    float v[64 * DIM] = {0};
    uint64_t ids[64];
    for (uint64_t i = 0; i < n && i < 64; i++)
        td_vec_of(r->now.next_id + i, DIM, v + i * DIM);
    if (outcome(r, keel_add_batch(idx, v, n, NULL, ids), "add_batch"))
        for (uint64_t i = 0; i < n; i++) {
            r->now.live[ids[i]] = 1;
            r->now.next_id = ids[i] + 1;
        }
}

static void
add_one(keel_index *idx, run *r)
{
    float v[DIM];
    uint64_t id;
    td_vec_of(r->now.next_id, DIM, v);
    if (outcome(r, keel_add(idx, v, &id), "add")) {
        r->now.live[id] = 1;
        r->now.next_id = id + 1;
    }
}

static void
delete_some(keel_index *idx, run *r, uint64_t from, uint64_t step, int n)
{
    for (uint64_t id = from; id < MAXID && n > 0; id += step) {
        if (!r->now.live[id])
            continue;
        n--;
        if (outcome(r, keel_delete(idx, id), "delete"))
            r->now.live[id] = 0;
    }
}

static void
flush(keel_index *idx, run *r)
{
    if (outcome(r, keel_flush(idx), "flush"))
        r->committed = r->now;
    else if (r->n_failed < 8)
        r->at_failed[r->n_failed++] = r->now;
}

static void
compact(keel_index *idx, run *r)
{
    /* Compaction commits first, then copies: a failure leaves the old file,
     * possibly with that first commit. */
    if (outcome(r, keel_compact(idx), "compact"))
        r->committed = r->now;
    else if (r->n_failed < 8)
        r->at_failed[r->n_failed++] = r->now;
}

/* The workload: every kind of write, with the fault armed throughout. */
static int
workload(const char *path, run *r, keel_index **out)
{
    keel__test_geometry(4, 2, 10, 1, 6);
    memset(r, 0, sizeof *r);
    int rc = keel_open(path, DIM, NULL, out);
    if (rc)
        return rc;
    keel_index *idx = *out;
    add_batch(idx, r, 60);
    add_batch(idx, r, 60);
    flush(idx, r);
    for (int i = 0; i < 20; i++)
        add_one(idx, r);
    delete_some(idx, r, 3, 7, 10);
    flush(idx, r);
    compact(idx, r);
    add_batch(idx, r, 30);
    delete_some(idx, r, 5, 11, 4);
    flush(idx, r);
    /* After the failure point, whatever it was: more of everything. */
    add_batch(idx, r, 10);
    add_one(idx, r);
    delete_some(idx, r, 1, 13, 2);
    flush(idx, r);
    return KEEL_OK;
}

/* What idx shows now, as a model. */
static int
shown(keel_index *idx, model *m)
{
    memset(m, 0, sizeof *m);
    keel_stats st;
    int rc = keel_stat(idx, &st);
    m->next_id = st.next_id;
    float v[DIM], want[DIM];
    for (uint64_t id = 0; id < MAXID && !rc; id++) {
        m->live[id] = keel_get(idx, id, v) == KEEL_OK;
        if (m->live[id]) {
            td_vec_of(id, DIM, want);
            if (memcmp(v, want, sizeof v))
                rc = -1;
        }
    }
    return rc;
}

/* Runs the workload with the current fault, checks the handle and the
** reopened file. Returns 0 if the fault never fired, 1 if it did and all
** held, -1 (with a message) if not. */
static int
one_point(const char *path, int by_alloc, long n, char *msg, size_t len)
{
    run r;
    keel_index *idx = NULL;
    if (by_alloc)
        keel__fail_alloc_after((uint64_t)n);
    else
        keel__os = &faulty;
    int rc = workload(path, &r, &idx);
    keel__fail_alloc_after(0);
    keel__os = &keel__os_posix;
    int fired = by_alloc ? r.failures > 0 || rc != KEEL_OK : F.fired;
    int result = fired ? 1 : 0;
    model got;
    if (rc != KEEL_OK) {
        /* The open itself failed: nothing to continue with. */
        if (rc != KEEL_ENOMEM && rc != KEEL_EIO && rc != KEEL_EFULL) {
            snprintf(msg, len, "open returned %d", rc);
            result = -1;
        }
        goto out;
    }
    if (!fired) {
        if (r.failures) {
            snprintf(msg, len, "a call failed with no fault: %s", r.why);
            result = -1;
        }
        keel_close(idx);
        goto out;
    }
    /* A writer poisoned by a failed write or sync of the index refuses to
     * flush; its handle may hold the marks of the flush that failed, so its
     * check answers that it is poisoned (KEEL_EIO), never that the file is
     * corrupt: the reopened file is checked below. */
    int poisoned = keel_flush(idx) != KEEL_OK;
    if (!poisoned)
        r.committed = r.now;
    int crc = keel_check(idx);
    if (r.bad) {
        snprintf(msg, len, "%s", r.why);
        result = -1;
    } else if (!poisoned && crc != KEEL_OK) {
        snprintf(msg, len, "keel_check on the handle: %s", keel_errmsg());
        result = -1;
    } else if (poisoned && (crc != KEEL_EIO ||
                            !strstr(keel_errmsg(), "poisoned") ||
                            !strstr(keel_errmsg(), "help: close"))) {
        snprintf(msg, len, "keel_check on the poisoned handle returned %d: "
                 "%s", crc, keel_errmsg());
        result = -1;
    } else if (shown(idx, &got) != KEEL_OK || !model_eq(&got, &r.now)) {
        snprintf(msg, len, "the handle shows next id %llu, expected %llu, or "
                 "other ids than the successful calls left",
                 (unsigned long long)got.next_id,
                 (unsigned long long)r.now.next_id);
        result = -1;
    }
    keel_close(idx);
    if (result < 0)
        goto out;
    if ((rc = keel_open(path, DIM, NULL, &idx)) != KEEL_OK) {
        snprintf(msg, len, "reopening failed (%d): %s", rc, keel_errmsg());
        result = -1;
        goto out;
    }
    int ok = shown(idx, &got) == KEEL_OK && keel_check(idx) == KEEL_OK;
    int match = model_eq(&got, &r.committed);
    for (int i = 0; i < r.n_failed && !match; i++)
        match = model_eq(&got, &r.at_failed[i]);
    if (!ok || !match) {
        snprintf(msg, len, "reopened at another state: next id %llu, last "
                 "flush %llu (%d failed flushes)%s",
                 (unsigned long long)got.next_id,
                 (unsigned long long)r.committed.next_id, r.n_failed,
                 ok ? "" : "; check failed");
        result = -1;
    }
    keel_close(idx);
out:
    keel__test_geometry(0, 0, 0, 0, 0);
    unlink(path);
    char side[700];
    snprintf(side, sizeof side, "%s.undo", path);
    unlink(side);
    return result;
}

TEST(every_system_call_fails_once_and_work_goes_on)
{
    faulty = keel__os_posix;
    faulty.pwrite = f_pwrite;
    faulty.sync = f_sync;
    faulty.allocate = f_allocate;
    faulty.map = f_map;
    faulty.truncate = f_truncate;
    long total = 0;
    for (int op = 0; op < OP_COUNT; op++) {
        static const int errs[] = {-EIO, -ENOSPC};
        long per_op = 0;
        for (int e = 0; e < 2; e++) {
            if (e == 1 && op != OP_WRITE && op != OP_ALLOCATE)
                continue;
            for (long n = 1;; n++) {
                memset(&F, 0, sizeof F);
                F.op = op;
                F.n = n;
                F.err = errs[e];
                char msg[600] = "";
                int r = one_point(test_path("c.keel"), 0, n, msg, sizeof msg);
                CHECK_MSG(r >= 0, "%s %ld (%d): %s", op_names[op], n, errs[e],
                          msg);
                if (r == 0)
                    break;
                per_op++;
            }
        }
        printf("    %s: %ld failure points\n", op_names[op], per_op);
        total += per_op;
    }
    memset(&F, 0, sizeof F);
    printf("    %ld system call failure points in all\n", total);
    CHECK(total > 100);
}

TEST(every_allocation_fails_once_and_work_goes_on)
{
    memset(&F, 0, sizeof F);
    long points = 0;
    for (long n = 1;; n += (n < 300 ? 1 : 5)) {
        char msg[600] = "";
        int r = one_point(test_path("m.keel"), 1, n, msg, sizeof msg);
        CHECK_MSG(r >= 0, "allocation %ld: %s", n, msg);
        if (r == 0)
            break;
        points++;
    }
    printf("    %ld allocation failure points\n", points);
    CHECK(points > 50);
}

TEST_MAIN()
