/* test_readers.c -- readers in other processes beside one writer: no wrong
** result, monotonic snapshots, routing through an unflushed bulk load, and a
** torn newest header copy.
*/
#include "test.h"
#include "lib/testdata.h"

#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>

#define DIM 16

static int
add_ids(keel_index *idx, uint64_t from, uint64_t n)
{
    float *v = malloc(n * DIM * sizeof *v);
    for (uint64_t i = 0; i < n; i++)
        td_vec_of(from + i, DIM, v + i * DIM);
    int rc = keel_add_batch(idx, v, n, NULL, NULL);
    free(v);
    return rc;
}

/* The writer: batches of 100, ids that are multiples of 7 deleted in the
** flush that adds them (never live in any commit), until killed. */
static void
writer_loop(const char *path, double seconds)
{
    keel_index *w;
    if (keel_open(path, DIM, NULL, &w) != KEEL_OK)
        _exit(2);
    double t0 = test_now();
    for (uint64_t next = 0; test_now() - t0 < seconds; next += 100) {
        if (add_ids(w, next, 100) != KEEL_OK)
            _exit(3);
        for (uint64_t id = next + (7 - next % 7) % 7; id < next + 100; id += 7)
            if (keel_delete(w, id) != KEEL_OK)
                _exit(4);
        if (keel_flush(w) != KEEL_OK)
            _exit(5);
    }
    keel_close(w);
    _exit(0);
}

/* A reader process: searches until the deadline; exits with the number of
** wrong results (capped), or 200 + a code if something else failed. */
static void
reader_loop(const char *path, double seconds, uint64_t seed)
{
    keel_index *r = NULL;
    double t0 = test_now();
    while (keel_open_reader(path, NULL, &r) != KEEL_OK) {
        if (test_now() - t0 > 5)
            _exit(201);
        usleep(1000);
    }
    uint64_t last_snap = 0, last_count = 0, searches = 0;
    /* Wrong results by kind: snapshots going back, deleted or uncommitted
    ** ids, wrong distances, short answers. */
    uint64_t back = 0, dead = 0, far = 0, short_ = 0;
    float q[DIM], v[DIM];
    while (test_now() - t0 < seconds) {
        for (int c = 0; c < DIM; c++)
            q[c] = test_randf(&seed);
        keel_stats before, after;
        if (keel_stat(r, &before) != KEEL_OK)
            _exit(203);
        keel_result res[10];
        size_t n;
        if (keel_search(r, q, 10, NULL, res, &n) != KEEL_OK)
            _exit(202);
        if (keel_stat(r, &after) != KEEL_OK)
            _exit(203);
        /* Counts and snapshots only move forward. */
        if (before.snapshot < last_snap || before.count < last_count ||
            after.snapshot < before.snapshot || after.count < before.count)
            back++;
        last_snap = after.snapshot;
        last_count = after.count;
        for (size_t i = 0; i < n; i++) {
            /* Ids are automatic: every committed id is below the slots of
             * the snapshot taken after the search. */
            if (res[i].id % 7 == 0 || res[i].id >= after.slots) {
                dead++;
                continue;
            }
            td_vec_of(res[i].id, DIM, v);
            double d = sqrt(td_l2sq(v, q, DIM));
            if (fabs(d - res[i].distance) > 1e-4 * (1 + d))
                far++;
        }
        /* The search's snapshot is at least the one before it. */
        if (n < 10 && before.count >= 10)
            short_++;
        searches++;
    }
    uint64_t wrong = back + dead + far + short_;
    if (wrong)
        fprintf(stderr, "reader: %llu snapshots back, %llu deleted or "
                "uncommitted ids, %llu wrong distances, %llu short answers\n",
                (unsigned long long)back, (unsigned long long)dead,
                (unsigned long long)far, (unsigned long long)short_);
    keel_close(r);
    if (searches < 10)
        _exit(204);
    _exit(wrong > 199 ? 199 : (int)wrong);
}

TEST(readers_in_other_processes_see_only_commits)
{
    const char *path = test_path("mp.keel");
    pid_t w = fork();
    CHECK(w >= 0);
    if (w == 0)
        writer_loop(path, 3.0);
    pid_t rd[2];
    for (int i = 0; i < 2; i++) {
        rd[i] = fork();
        CHECK(rd[i] >= 0);
        if (rd[i] == 0)
            reader_loop(path, 3.5, 1000 + (uint64_t)i);
    }
    int status;
    CHECK(waitpid(w, &status, 0) == w);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "writer exited with %d", WEXITSTATUS(status));
    for (int i = 0; i < 2; i++) {
        CHECK(waitpid(rd[i], &status, 0) == rd[i]);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "reader %d: %d wrong results (or code %d)", i,
                  WEXITSTATUS(status), WEXITSTATUS(status));
    }
    keel_index *r;
    CHECK_OK(keel_open_reader(path, NULL, &r));
    CHECK(keel_count(r) > 1000);
    CHECK_OK(keel_check(r));
    CHECK_OK(keel_close(r));
}

/* recall@10 of the reader over the first n committed ids, against brute
** force. */
static double
committed_recall(keel_index *r, const float *base, uint64_t n,
                 const float *qs, int nq)
{
    int hit = 0;
    for (int q = 0; q < nq; q++) {
        const float *qv = qs + q * DIM;
        uint64_t best[10];
        td_exact_knn(base, (size_t)n, DIM, qv, 10, NULL, NULL, best);
        keel_result res[10];
        size_t got;
        keel_search_params p = {.ef = 64};
        if (keel_search(r, qv, 10, &p, res, &got) != KEEL_OK)
            return -1;
        for (size_t i = 0; i < got; i++) {
            if (res[i].id >= n)
                return -2; /* an unflushed vector */
            for (int j = 0; j < 10; j++)
                hit += res[i].id == best[j];
        }
    }
    return (double)hit / (nq * 10);
}

TEST(reader_routes_through_an_unflushed_bulk_load)
{
    const char *path = test_path("bulk.keel");
    const uint64_t n = 20000;
    int go[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(ready) == 0);
    pid_t w = fork();
    CHECK(w >= 0);
    if (w == 0) {
        keel_index *idx;
        char c = 'x';
        if (keel_open(path, DIM, NULL, &idx) || add_ids(idx, 0, n) ||
            keel_flush(idx))
            _exit(2);
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1)
            _exit(3);
        if (add_ids(idx, n, n)) /* the bulk load, never flushed */
            _exit(4);
        if (write(ready[1], &c, 1) != 1)
            _exit(5);
        pause();
        _exit(0);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    float *base = malloc(n * DIM * sizeof *base), *qs = td_random(100, DIM, 77);
    for (uint64_t i = 0; i < n; i++)
        td_vec_of(i, DIM, base + i * DIM);
    keel_index *r;
    CHECK_OK(keel_open_reader(path, NULL, &r));
    double idle = committed_recall(r, base, n, qs, 100);
    CHECK(write(go[1], "g", 1) == 1);
    CHECK(read(ready[0], &c, 1) == 1);
    double loaded = committed_recall(r, base, n, qs, 100);
    CHECK_U64(keel_count(r), n);
    kill(w, SIGKILL);
    waitpid(w, NULL, 0);
    printf("    reader recall@10 at ef 64: %.3f idle, %.3f during an unflushed "
           "bulk load of %llu\n", idle, loaded, (unsigned long long)n);
    CHECK(idle > 0.9);
    CHECK_MSG(loaded >= idle - 0.01, "recall fell from %.3f to %.3f", idle,
              loaded);
    CHECK_OK(keel_close(r));
    free(base);
    free(qs);
}

TEST(torn_newest_header_makes_readers_use_the_older)
{
    const char *path = test_path("torn.keel");
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_OK(add_ids(w, 0, 100));
    CHECK_OK(keel_flush(w));
    CHECK_OK(add_ids(w, 100, 100));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_close(w));
    /* Two flushes after creation: copy A holds the newest (sequence 3). */
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    unsigned char b, bad;
    CHECK(pread(fd, &b, 1, 56) == 1);
    bad = b ^ 0x40;
    CHECK(pwrite(fd, &bad, 1, 56) == 1);
    keel_index *r;
    CHECK_OK(keel_open_reader(path, NULL, &r));
    CHECK_U64(keel_count(r), 100);
    CHECK(pwrite(fd, &b, 1, 56) == 1);
    close(fd);
    CHECK_OK(keel_refresh(r));
    CHECK_U64(keel_count(r), 200);
    CHECK_OK(keel_close(r));
}

TEST_MAIN()
