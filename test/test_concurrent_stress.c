/* test_concurrent_stress.c -- every public call at once on shared handles,
** checked against what the writer committed.
**
** One writer thread adds (single and batch), deletes, flushes, compacts and
** now and then closes the writer without flushing and opens it again. Other
** threads search, get, count, stat, check, refresh and warm through one
** shared reader handle and through the writer's handle; a forked process
** does the same through its own reader. What must hold, for every call:
**
**   - ids are td_vec_of(id); ids that are not multiples of 5 are never
**     deleted, so once a flush that holds all of them below a watermark
**     returned, every reader finds each of them by keel_get with its exact
**     vector, and no count falls below how many of them there are;
**   - every search result is an id that was added, at its true distance;
**   - keel_check is always OK; a handle's snapshot never goes back.
**
** Short by default (make test, make tsan); KEEL_STRESS_SECONDS sets the
** length (make stress-long). It prints how many of each call it ran.
*/
#include "test.h"
#include "lib/testdata.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define DIM 12

enum call {
    C_SEARCH, C_GET, C_COUNT, C_STAT, C_CHECK, C_REFRESH, C_WARM,
    C_ADD, C_BATCH, C_DELETE, C_FLUSH, C_COMPACT, C_RESTART, C_NCALLS
};
static const char *call_names[C_NCALLS] = {
    "search", "get", "count", "stat", "check", "refresh", "warm",
    "add", "add_batch", "delete", "flush", "compact", "restart"
};

/* Shared with the forked reader process (an anonymous shared mapping). */
typedef struct board {
    uint64_t watermark;       /* stable ids below it are committed (atomic) */
    uint64_t added;           /* ids below it were ever added (atomic) */
    int stop;                 /* atomic */
    uint64_t calls[C_NCALLS]; /* atomic */
    uint64_t wrong;           /* atomic */
    char first_wrong[256];
} board;

static board *B;
static pthread_rwlock_t writer_gate = PTHREAD_RWLOCK_INITIALIZER;
static keel_index *writer; /* replaced under writer_gate exclusive */

static void
count_call(enum call c)
{
    __atomic_add_fetch(&B->calls[c], 1, __ATOMIC_RELAXED);
}

static void
wrong(const char *what, uint64_t a, uint64_t b)
{
    if (__atomic_add_fetch(&B->wrong, 1, __ATOMIC_RELAXED) == 1)
        snprintf(B->first_wrong, sizeof B->first_wrong, "%s (%llu, %llu): %s",
                 what, (unsigned long long)a, (unsigned long long)b,
                 keel_errmsg());
}

static int
stable(uint64_t id)
{
    return id % 5 != 0;
}

/* Stable ids below n. */
static uint64_t
stable_below(uint64_t n)
{
    return n - (n + 4) / 5;
}

/* One call of the mix on handle idx, checked. last_snap: the handle's
** snapshot this thread saw last. */
static void
one_call(keel_index *idx, int is_writer, uint64_t *seed, uint64_t *last_snap)
{
    uint64_t mark = __atomic_load_n(&B->watermark, __ATOMIC_ACQUIRE);
    uint64_t added = __atomic_load_n(&B->added, __ATOMIC_ACQUIRE);
    float q[DIM], v[DIM];
    unsigned pick = (unsigned)(test_rand(seed) % 100);
    if (pick < 40) {
        uint64_t target = added ? test_rand(seed) % added : 0;
        td_vec_of(target, DIM, q);
        keel_result r[10];
        size_t n;
        count_call(C_SEARCH);
        if (keel_search(idx, q, 10, NULL, r, &n) != KEEL_OK) {
            wrong("search failed", target, 0);
            return;
        }
        uint64_t now_added = __atomic_load_n(&B->added, __ATOMIC_ACQUIRE);
        for (size_t i = 0; i < n; i++) {
            if (r[i].id >= now_added) {
                wrong("search returned an id never added", r[i].id, now_added);
                return;
            }
            td_vec_of(r[i].id, DIM, v);
            double d = sqrt(td_l2sq(v, q, DIM));
            if (fabs(d - r[i].distance) > 1e-4 * (1 + d))
                wrong("search distance", r[i].id, target);
        }
    } else if (pick < 70) {
        if (!mark)
            return;
        uint64_t id = test_rand(seed) % mark;
        if (!stable(id))
            id = id ? id - 1 : 1;
        if (id >= mark)
            return;
        count_call(C_GET);
        if (keel_get(idx, id, v) != KEEL_OK) {
            wrong("a committed id is not found", id, mark);
            return;
        }
        td_vec_of(id, DIM, q);
        if (memcmp(q, v, sizeof v) != 0)
            wrong("keel_get returned another vector", id, 0);
    } else if (pick < 82) {
        count_call(C_COUNT);
        uint64_t n = keel_count(idx);
        if (n < stable_below(mark))
            wrong("count below the committed stable ids", n, stable_below(mark));
    } else if (pick < 92) {
        keel_stats st;
        count_call(C_STAT);
        if (keel_stat(idx, &st) != KEEL_OK) {
            wrong("stat failed", 0, 0);
            return;
        }
        if (st.count < stable_below(mark))
            wrong("stat count below the committed stable ids", st.count, mark);
        /* A snapshot moves forward, except into a compacted file (a reader
         * that follows one, a writer that compacts: the new file counts
         * its own commits) and across a writer's restart. */
        if (!is_writer && st.snapshot < *last_snap && st.next_id < mark)
            wrong("a reader's snapshot went back", st.snapshot, *last_snap);
        *last_snap = st.snapshot;
    } else if (pick < 96) {
        count_call(C_CHECK);
        if (keel_check(idx) != KEEL_OK)
            wrong("check failed", 0, 0);
    } else if (pick < 99) {
        count_call(C_REFRESH);
        if (keel_refresh(idx) != KEEL_OK)
            wrong("refresh failed", 0, 0);
    } else {
        count_call(C_WARM);
        if (keel_warm(idx) != KEEL_OK)
            wrong("warm failed", 0, 0);
    }
}

typedef struct worker {
    keel_index *reader;       /* NULL: use the writer */
    uint64_t seed;
} worker;

static void *
worker_main(void *arg)
{
    worker *wk = arg;
    uint64_t last_snap = 0;
    while (!__atomic_load_n(&B->stop, __ATOMIC_ACQUIRE)) {
        if (wk->reader) {
            one_call(wk->reader, 0, &wk->seed, &last_snap);
        } else {
            pthread_rwlock_rdlock(&writer_gate);
            one_call(writer, 1, &wk->seed, &last_snap);
            pthread_rwlock_unlock(&writer_gate);
        }
    }
    return NULL;
}

/* The forked reader process: its own reader handle, the same checks. */
static void
reader_process(const char *path, uint64_t seed)
{
    keel_index *r;
    if (keel_open_reader(path, NULL, &r) != KEEL_OK) {
        wrong("the reader process cannot open", 0, 0);
        _exit(1);
    }
    uint64_t last_snap = 0;
    while (!__atomic_load_n(&B->stop, __ATOMIC_ACQUIRE))
        one_call(r, 0, &seed, &last_snap);
    keel_close(r);
    _exit(0);
}

static int
add_ids(keel_index *w, uint64_t from, uint64_t n, int batch)
{
    float *v = malloc(n * DIM * sizeof *v);
    uint64_t *ids = malloc(n * sizeof *ids);
    for (uint64_t i = 0; i < n; i++) {
        td_vec_of(from + i, DIM, v + i * DIM);
        ids[i] = from + i;
    }
    int rc = KEEL_OK;
    if (batch) {
        count_call(C_BATCH);
        rc = keel_add_batch(w, v, n, ids, NULL);
    } else {
        for (uint64_t i = 0; i < n && !rc; i++) {
            count_call(C_ADD);
            rc = keel_add_with_id(w, from + i, v + i * DIM);
        }
    }
    free(v);
    free(ids);
    return rc;
}

/* The writer: returns 0, or the line of the first failure. */
static int
writer_main(const char *path, double seconds, uint64_t seed)
{
    uint64_t committed = __atomic_load_n(&B->watermark, __ATOMIC_RELAXED);
    uint64_t next = committed, deleted_below = 0;
    double t0 = test_now();
    while (test_now() - t0 < seconds) {
        uint64_t n = 1 + test_rand(&seed) % 60;
        /* Published before the add: a search on the writer may return an
         * id as soon as the add links it. */
        uint64_t added = __atomic_load_n(&B->added, __ATOMIC_RELAXED);
        if (next + n > added)
            __atomic_store_n(&B->added, next + n, __ATOMIC_RELEASE);
        if (add_ids(writer, next, n, n > 8) != KEEL_OK)
            return __LINE__;
        next += n;
        /* Delete some multiples of 5 that a flush committed. */
        while (deleted_below + 5 <= committed && test_rand(&seed) % 3) {
            count_call(C_DELETE);
            if (keel_delete(writer, deleted_below) != KEEL_OK)
                return __LINE__;
            deleted_below += 5;
        }
        unsigned pick = (unsigned)(test_rand(&seed) % 100);
        if (pick < 8) {
            /* Close without flushing: the adds since the flush are lost
             * (and added again with the same ids and vectors). */
            count_call(C_RESTART);
            pthread_rwlock_wrlock(&writer_gate);
            keel_close(writer);
            int rc = keel_open(path, DIM, NULL, &writer);
            pthread_rwlock_unlock(&writer_gate);
            if (rc != KEEL_OK)
                return __LINE__;
            next = committed;
            deleted_below = 0;
            while (deleted_below + 5 <= committed) {
                float v[DIM];
                if (keel_get(writer, deleted_below, v) == KEEL_OK)
                    break;
                deleted_below += 5;
            }
            continue;
        }
        if (pick < 60) {
            count_call(C_FLUSH);
            if (keel_flush(writer) != KEEL_OK)
                return __LINE__;
        } else if (pick < 64) {
            count_call(C_COMPACT);
            if (keel_compact(writer) != KEEL_OK)
                return __LINE__;
        } else {
            continue;
        }
        committed = next;
        __atomic_store_n(&B->watermark, committed, __ATOMIC_RELEASE);
    }
    count_call(C_FLUSH);
    if (keel_flush(writer) != KEEL_OK)
        return __LINE__;
    __atomic_store_n(&B->watermark, next, __ATOMIC_RELEASE);
    /* Every stable id is there, and the file checks. */
    float v[DIM], want[DIM];
    for (uint64_t id = 0; id < next; id++) {
        if (!stable(id))
            continue;
        td_vec_of(id, DIM, want);
        if (keel_get(writer, id, v) != KEEL_OK || memcmp(v, want, sizeof v))
            return __LINE__;
    }
    return keel_check(writer) == KEEL_OK ? 0 : __LINE__;
}

TEST(every_call_at_once_on_shared_handles)
{
    const char *env = getenv("KEEL_STRESS_SECONDS");
    double seconds = env ? atof(env) : 2.0;
    B = mmap(NULL, sizeof *B, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
             -1, 0);
    CHECK(B != MAP_FAILED);
    memset(B, 0, sizeof *B);
    const char *path = test_path("stress.keel");
    CHECK_OK(keel_open(path, DIM, NULL, &writer));
    CHECK_OK(add_ids(writer, 0, 50, 1));
    CHECK_OK(keel_flush(writer));
    __atomic_store_n(&B->added, 50, __ATOMIC_RELEASE);
    __atomic_store_n(&B->watermark, 50, __ATOMIC_RELEASE);
    /* The reader process, forked before any thread starts. */
    pid_t pid = fork();
    if (pid == 0)
        reader_process(path, 99);
    CHECK(pid > 0);
    keel_index *reader;
    CHECK_OK(keel_open_reader(path, NULL, &reader));
    enum { T = 4 };
    worker wk[T];
    pthread_t t[T];
    for (int i = 0; i < T; i++) {
        wk[i] = (worker){.reader = i < 3 ? reader : NULL, .seed = 1000u + (uint64_t)i};
        CHECK(pthread_create(&t[i], NULL, worker_main, &wk[i]) == 0);
    }
    int failed_at = writer_main(path, seconds, 7);
    __atomic_store_n(&B->stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("    %.0f s:", seconds);
    for (int c = 0; c < C_NCALLS; c++)
        printf(" %s %llu%s", call_names[c], (unsigned long long)B->calls[c],
               c + 1 < C_NCALLS ? "," : "\n");
    CHECK_MSG(failed_at == 0, "the writer failed at line %d", failed_at);
    CHECK_MSG(B->wrong == 0, "%llu wrong, the first: %s",
              (unsigned long long)B->wrong, B->first_wrong);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_OK(keel_check(reader));
    CHECK_OK(keel_close(reader));
    CHECK_OK(keel_close(writer));
    munmap(B, sizeof *B);
}

TEST_MAIN()
