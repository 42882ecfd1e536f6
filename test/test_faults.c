/* test_faults.c -- every write, sync, space reservation, mapping and length
** change of a workload made to fail in turn (EIO, ENOSPC, a write cut short),
** and every allocation: the call returns an error with a help line, nothing
** crashes, and the file reopens at its last commit (or the commit the failed
** flush had already written, as after a crash).
*/
#include "test.h"
#include "lib/testdata.h"

#include <errno.h>

#include "store/format.h"
#include "os/os.h"

/* A hundred workloads that each sync a dozen times. */
TEST_PREFER_MEMORY_FS()

#define DIM 24
#define MAXID 400

enum op { OP_WRITE, OP_SYNC, OP_ALLOCATE, OP_MAP, OP_TRUNCATE, OP_COUNT };
static const char *op_names[] = {"write", "sync", "allocate", "map",
                                 "truncate"};

static struct {
    char target[1024]; /* the file of the failed call */
    int undo;          /* the failed call was on the undo log */
    int op;            /* which call fails */
    long n;            /* the n-th one (1-based); 0 = none */
    int err;           /* -EIO, -ENOSPC; or 1: a write cut short */
    long seen;
    int fired;
} F;

/* Records which file descriptor fd names; returns whether it is an undo
** log (its name ends in ".undo"). */
static int
is_undo(int fd)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, F.target, sizeof F.target - 1);
    if (n < 5)
        return 0;
    F.target[n] = 0;
    return strcmp(F.target + n - 5, ".undo") == 0;
}

static int
should_fail_fd(int op, int fd)
{
    if (F.n == 0 || op != F.op)
        return 0;
    if (++F.seen == F.n) {
        F.fired = 1;
        F.target[0] = 0;
        F.undo = fd >= 0 && is_undo(fd);
        return 1;
    }
    return 0;
}

#define should_fail(op) should_fail_fd((op), -1)

static ssize_t
f_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
    if (should_fail_fd(OP_WRITE, fd)) {
        if (F.err == 1) { /* half the bytes reach the file, then an error */
            keel__os_posix.pwrite(fd, buf, n / 2, off);
            return -ENOSPC;
        }
        return F.err;
    }
    return keel__os_posix.pwrite(fd, buf, n, off);
}

static int
f_sync(int fd)
{
    return should_fail_fd(OP_SYNC, fd) ? (F.err == 1 ? -EIO : F.err)
                                : keel__os_posix.sync(fd);
}

static int
f_allocate(int fd, uint64_t off, uint64_t len)
{
    return should_fail(OP_ALLOCATE) ? (F.err == 1 ? -ENOSPC : F.err)
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
    return should_fail(OP_TRUNCATE) ? (F.err == 1 ? -ENOSPC : F.err)
                                    : keel__os_posix.truncate(fd, len);
}

static keel_os faulty;

/* --- the workload and its model ---------------------------------------------- */

typedef struct model {
    uint8_t live[MAXID];
    uint64_t next_id;
} model;

static int
model_eq(const model *a, const model *b)
{
    return a->next_id == b->next_id && memcmp(a->live, b->live, MAXID) == 0;
}

/* Runs the workload until a call fails. committed: the model at the last
** successful flush; pending: what the failing flush would have committed
** (equal to committed when the failure was not in a flush). Returns the
** failing call's code (KEEL_OK if none failed). */
static int
workload(const char *path, model *committed, model *pending)
{
    keel__test_geometry(4, 2, 10, 1, 6);
    model m = {{0}, 0};
    *committed = *pending = m;
    keel_index *idx;
    int rc = keel_open(path, DIM, NULL, &idx);
    if (rc)
        return rc;
    float v[200 * DIM];
    for (uint64_t i = 0; i < 200; i++)
        td_vec_of(i, DIM, v + i * DIM);
    if ((rc = keel_add_batch(idx, v, 200, NULL, NULL)))
        goto out;
    for (uint64_t i = 0; i < 200; i++)
        m.live[i] = 1;
    m.next_id = 200;
    *pending = m;
    if ((rc = keel_flush(idx)))
        goto out;
    *committed = m;
    for (uint64_t i = 200; i < 250; i++) {
        td_vec_of(i, DIM, v);
        if ((rc = keel_add(idx, v, NULL)))
            goto out;
        m.live[i] = 1;
        m.next_id = i + 1;
    }
    for (uint64_t id = 3; id < 200; id += 20) {
        if ((rc = keel_delete(idx, id)))
            goto out;
        m.live[id] = 0;
    }
    *pending = m;
    if ((rc = keel_flush(idx)))
        goto out;
    *committed = m;
    if ((rc = keel_compact(idx)))
        goto out;
    for (uint64_t i = 250; i < 270; i++)
        td_vec_of(i, DIM, v + (i - 250) * DIM);
    if ((rc = keel_add_batch(idx, v, 20, NULL, NULL)))
        goto out;
    for (uint64_t i = 250; i < 270; i++)
        m.live[i] = 1;
    m.next_id = 270;
    *pending = m;
    if ((rc = keel_flush(idx)))
        goto out;
    *committed = *pending = m;
out:
    if (rc) {
        /* After the index's own sync failed, the handle is poisoned: a later
         * flush must fail too. */
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", keel_errmsg());
        if (F.op == OP_SYNC && F.fired && strcmp(F.target, path) == 0 &&
            keel_flush(idx) == KEEL_OK)
            rc = -100;
        keel__fail(rc, "%s", msg); /* keep the first failure's message */
    }
    keel_close(idx);
    keel__test_geometry(0, 0, 0, 0, 0);
    return rc;
}

static int
reopened_state(const char *path, model *got)
{
    keel_index *idx;
    int rc = keel_open(path, DIM, NULL, &idx);
    if (rc)
        return rc;
    memset(got, 0, sizeof *got);
    keel_stats st;
    keel_stat(idx, &st);
    got->next_id = st.next_id;
    float v[DIM], want[DIM];
    for (uint64_t id = 0; id < MAXID; id++) {
        got->live[id] = keel_get(idx, id, v) == KEEL_OK;
        if (got->live[id]) {
            td_vec_of(id, DIM, want);
            if (memcmp(v, want, sizeof v))
                rc = -1;
        }
    }
    if (!rc)
        rc = keel_check(idx);
    keel_close(idx);
    return rc;
}

TEST(every_system_call_fails_in_turn)
{
    faulty = keel__os_posix;
    faulty.pwrite = f_pwrite;
    faulty.sync = f_sync;
    faulty.allocate = f_allocate;
    faulty.map = f_map;
    faulty.truncate = f_truncate;
    static const int errs[] = {-EIO, -ENOSPC, 1};
    long points = 0;
    for (int op = 0; op < OP_COUNT; op++) {
        long per_op = 0;
        for (int e = 0; e < 3; e++) {
            if ((op == OP_MAP) && e > 0)
                continue;
            for (long n = 1;; n++) {
                char name[64];
                snprintf(name, sizeof name, "f-%d-%d-%ld.keel", op, e, n);
                const char *path = test_path(name);
                F.op = op;
                F.n = n;
                F.err = errs[e];
                F.seen = 0;
                F.fired = 0;
                F.undo = 0;
                model committed, pending;
                keel__os = &faulty;
                keel__clear_error();
                int rc = workload(path, &committed, &pending);
                char msg[2048];
                snprintf(msg, sizeof msg, "%s", keel_errmsg());
                keel__os = &keel__os_posix;
                F.n = 0;
                /* An undo entry that cannot be written fails the add (undo.c
                 * rule 6); only the once-a-second sync of the log may fail
                 * unnoticed, as it only narrows a power-loss window. */
                CHECK_MSG(!(F.fired && F.undo && op == OP_WRITE &&
                            rc == KEEL_OK),
                          "%s %ld (%d): a failed undo entry went unreported",
                          op_names[op], n, errs[e]);
                if (F.fired && F.undo && rc == KEEL_OK) {
                    unlink(path);
                    continue;
                }
                if (!F.fired) {
                    CHECK_MSG(rc == KEEL_OK, "%s: the workload failed (%d) "
                              "with no fault", op_names[op], rc);
                    break;
                }
                points++;
                per_op++;
                CHECK_MSG(rc != -100, "%s %ld: a flush succeeded after a failed "
                          "sync", op_names[op], n);
                CHECK_MSG(rc == KEEL_EIO || rc == KEEL_EFULL || rc == KEEL_ENOMEM,
                          "%s %ld (%d): returned %d", op_names[op], n, errs[e],
                          rc);
                CHECK_MSG(strstr(keel_errmsg(), "\nhelp: "),
                          "%s %ld: no help line in '%s'", op_names[op], n,
                          keel_errmsg());
                if (rc == KEEL_EFULL && op == OP_ALLOCATE)
                    CHECK_MSG(strstr(keel_errmsg(), "no space"),
                              "a full disk is not named: '%s'", keel_errmsg());
                model got;
                int rr = reopened_state(path, &got);
                if (rr == KEEL_OK || committed.next_id > 0)
                    CHECK_MSG(rr == KEEL_OK && (model_eq(&got, &committed) ||
                                                model_eq(&got, &pending)),
                              "%s %ld (%d): reopened at another state (%d): "
                              "next id %llu, expected %llu or %llu; failed "
                              "with '%s'", op_names[op], n, errs[e], rr,
                              (unsigned long long)got.next_id,
                              (unsigned long long)committed.next_id,
                              (unsigned long long)pending.next_id, msg);
                unlink(path);
            }
        }
        printf("    %s: %ld failure points\n", op_names[op], per_op);
    }
    CHECK(points > 50);
}

TEST(every_allocation_fails_in_turn)
{
    long points = 0;
    for (long n = 1;; n += (n < 200 ? 1 : 7)) {
        char name[64];
        snprintf(name, sizeof name, "m-%ld.keel", n);
        const char *path = test_path(name);
        model committed, pending;
        memset(&F, 0, sizeof F);
        keel__fail_alloc_after((uint64_t)n);
        keel__clear_error();
        int rc = workload(path, &committed, &pending);
        keel__fail_alloc_after(0);
        if (rc == KEEL_OK)
            break;
        points++;
        CHECK_MSG(rc == KEEL_ENOMEM, "allocation %ld: returned %d (%s)", n, rc,
                  keel_errmsg());
        CHECK_MSG(strstr(keel_errmsg(), "\nhelp: "), "allocation %ld: '%s'", n,
                  keel_errmsg());
        model got;
        int rr = reopened_state(path, &got);
        if (rr == KEEL_OK || committed.next_id > 0)
            CHECK_MSG(rr == KEEL_OK && (model_eq(&got, &committed) ||
                                        model_eq(&got, &pending)),
                      "allocation %ld: reopened at another state (%d)", n, rr);
        unlink(path);
    }
    printf("    %ld allocation failure points\n", points);
    CHECK(points > 20);
}

TEST_MAIN()
