/* test_crash.c -- real process kills. A child writer adds batches, deletes
** some of the previous batch's ids, flushes and reports each completed flush
** on a pipe; the parent kills it with SIGKILL at a random moment, reopens the
** file and checks that it holds exactly a flush boundary: every committed
** vector byte-exact and found by searching for itself, committed deletes
** deleted, unflushed adds and deletes gone. Kills land inside add_batch's
** linking threads, inside single adds, inside compaction and inside the
** recovery of the next open.
**
** KEEL_CRASH_ROUNDS sets the rounds per variant (default 70: 210 in all);
** `make crash-long` runs thousands (a fresh file every ROUNDS_PER_FILE).
*/
#include "test.h"
#include "lib/testdata.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

void keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                         uint32_t heap_base, uint32_t heap_doublings,
                         uint32_t idtab_log2);

#define DIM 256      /* 1 KiB vectors: a batch crosses segment boundaries */
#define BATCH 25

enum variant { V_BATCH, V_SINGLE, V_COMPACT };

#define ROUNDS_PER_FILE 100

/* After flush b (b >= 0): ids below (b + 1) * BATCH exist; those of batches
** before b that are multiples of 5 are deleted. */
static int
live_after(int64_t b, uint64_t id)
{
    if (b < 0 || id >= (uint64_t)(b + 1) * BATCH)
        return 0;
    return !(id < (uint64_t)b * BATCH && id % 5 == 0);
}

static uint64_t
count_after(int64_t b)
{
    uint64_t n = 0;
    for (uint64_t id = 0; b >= 0 && id < (uint64_t)(b + 1) * BATCH; id++)
        n += (uint64_t)live_after(b, id);
    return n;
}

static void
child(const char *path, enum variant var, int report)
{
    keel_index *idx;
    keel_options o = {.threads = 2};
    if (keel_open(path, DIM, &o, &idx) != KEEL_OK)
        _exit(2);
    keel_stats st;
    if (keel_stat(idx, &st) != KEEL_OK)
        _exit(3);
    float *v = malloc(BATCH * DIM * sizeof *v);
    for (int64_t b = (int64_t)(st.next_id / BATCH);; b++) {
        uint64_t from = (uint64_t)b * BATCH;
        for (uint64_t i = 0; i < BATCH; i++)
            td_vec_embed(from + i, DIM, v + i * DIM);
        if (var == V_SINGLE) {
            for (uint64_t i = 0; i < BATCH; i++)
                if (keel_add(idx, v + i * DIM, NULL) != KEEL_OK)
                    _exit(4);
        } else if (keel_add_batch(idx, v, BATCH, NULL, NULL) != KEEL_OK) {
            _exit(4);
        }
        for (uint64_t id = from - (b ? BATCH : 0); id < from; id++)
            if (id % 5 == 0 && keel_delete(idx, id) != KEEL_OK)
                _exit(5);
        if (keel_flush(idx) != KEEL_OK)
            _exit(6);
        if (var == V_COMPACT && b % 3 == 2 && keel_compact(idx) != KEEL_OK)
            _exit(7);
        char line[32];
        int len = snprintf(line, sizeof line, "%lld\n", (long long)b);
        if (write(report, line, (size_t)len) != len)
            _exit(8);
    }
}

/* Reads flush reports until the pipe is empty; keeps the last. */
static void
drain(int fd, int64_t *last)
{
    char buf[4096];
    static char partial[64];
    static size_t plen;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0)
            return;
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0)
            return;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                partial[plen] = 0;
                *last = strtoll(partial, NULL, 10);
                plen = 0;
            } else if (plen < sizeof partial - 1) {
                partial[plen++] = buf[i];
            }
        }
    }
}

typedef struct crash_stats {
    int rounds, at_report, after_report, no_flush;
} crash_stats;

/* Opens the crashed file and checks it is exactly flush b_rep or b_rep + 1.
** Returns the flush it holds, or -2 on a failure (message printed). */
static int64_t
verify(const char *path, int64_t b_rep, crash_stats *cs)
{
    keel_index *idx;
    if (keel_open(path, DIM, NULL, &idx) != KEEL_OK) {
        fprintf(stderr, "reopen: %s\n", keel_errmsg());
        return -2;
    }
    keel_stats st;
    keel_stat(idx, &st);
    int64_t b = (int64_t)(st.next_id / BATCH) - 1;
    int64_t result = b;
    if (st.next_id % BATCH || (b != b_rep && b != b_rep + 1)) {
        fprintf(stderr, "next id %llu is not flush %lld or %lld\n",
                (unsigned long long)st.next_id, (long long)b_rep,
                (long long)b_rep + 1);
        result = -2;
        goto out;
    }
    cs->at_report += b == b_rep;
    cs->after_report += b == b_rep + 1;
    if (st.count != count_after(b)) {
        fprintf(stderr, "flush %lld: %llu live, expected %llu\n", (long long)b,
                (unsigned long long)st.count,
                (unsigned long long)count_after(b));
        result = -2;
        goto out;
    }
    float want[DIM], got[DIM];
    for (uint64_t id = 0; id < (uint64_t)(b + 2) * BATCH; id++) {
        int live = live_after(b, id);
        int rc = keel_get(idx, id, got);
        if (live != (rc == KEEL_OK)) {
            fprintf(stderr, "flush %lld: id %llu %s\n", (long long)b,
                    (unsigned long long)id, live ? "lost" : "came back");
            result = -2;
            goto out;
        }
        if (!live)
            continue;
        td_vec_embed(id, DIM, want);
        keel_result r[1];
        size_t n;
        keel_search_params p = {.ef = 128};
        if (memcmp(want, got, sizeof want) != 0 ||
            keel_search(idx, want, 1, &p, r, &n) != KEEL_OK || n != 1 ||
            r[0].id != id || r[0].distance != 0.0f) {
            fprintf(stderr, "flush %lld: id %llu not byte-exact or not found\n",
                    (long long)b, (unsigned long long)id);
            result = -2;
            goto out;
        }
    }
    if (keel_check(idx) != KEEL_OK) {
        fprintf(stderr, "check: %s\n", keel_errmsg());
        result = -2;
    }
out:
    keel_close(idx);
    char leftover[600];
    snprintf(leftover, sizeof leftover, "%s.compacting", path);
    if (result >= -1 && access(leftover, F_OK) == 0) {
        fprintf(stderr, "a .compacting file was left after reopening\n");
        result = -2;
    }
    return result;
}

static void
run_variant(enum variant var, const char *name)
{
    keel__test_geometry(4, 3, 10, 1, 6);
    const char *path = test_path(name);
    int rounds = getenv("KEEL_CRASH_ROUNDS") ? atoi(getenv("KEEL_CRASH_ROUNDS"))
                                             : 70;
    uint64_t seed = 0x5eed + (uint64_t)var;
    int64_t state = -1; /* the last verified flush */
    crash_stats cs = {0};
    for (int round = 0; round < rounds; round++) {
        /* Verifying reads every committed vector, so a file that grew for
         * thousands of rounds would make long runs quadratic: start afresh
         * every ROUNDS_PER_FILE rounds. */
        if (round > 0 && round % ROUNDS_PER_FILE == 0) {
            char side[4096];
            unlink(path);
            snprintf(side, sizeof side, "%s.undo", path);
            unlink(side);
            snprintf(side, sizeof side, "%s.compacting", path);
            unlink(side);
            state = -1;
        }
        int p[2];
        CHECK(pipe(p) == 0);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            child(path, var, p[1]);
        }
        close(p[1]);
        /* Mostly mid-run; one in eight very early, inside the open and its
         * recovery. */
        uint64_t r = test_rand(&seed);
        useconds_t delay = (r & 7) == 0 ? (useconds_t)(r >> 8) % 3000
                                        : 2000 + (useconds_t)(r >> 8) % 60000;
        usleep(delay);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        int64_t rep = state;
        drain(p[0], &rep);
        close(p[0]);
        if (WIFEXITED(status)) {
            CHECK_MSG(0, "round %d: the writer exited with %d", round,
                      WEXITSTATUS(status));
        }
        cs.no_flush += rep == state;
        int64_t got = verify(path, rep, &cs);
        CHECK_MSG(got >= -1, "round %d: the file is not at flush %lld or %lld",
                  round, (long long)rep, (long long)rep + 1);
        state = got;
        cs.rounds++;
    }
    printf("    %d kills: %d at the last reported flush, %d one flush later "
           "(killed between flush and report), %d rounds without a new flush; "
           "%lld flushes in the end\n", cs.rounds, cs.at_report,
           cs.after_report, cs.no_flush, (long long)state + 1);
    keel__test_geometry(0, 0, 0, 0, 0);
}

TEST(kills_during_batches)
{
    run_variant(V_BATCH, "kill-batch.keel");
}

TEST(kills_during_single_adds)
{
    run_variant(V_SINGLE, "kill-single.keel");
}

TEST(kills_during_compaction)
{
    run_variant(V_COMPACT, "kill-compact.keel");
}

/* Writers killed inside keel_open or inside a keel_backup of the index
** (which reads the committed file under the write lock, as keel_publish
** does) never change what the index holds: the last flush stays, for
** readers after every kill and for the next writer. Each round also makes
** and opens another file through test_path, as the killed-publisher test of
** test_publish.c does with its downloads: a path held across those calls
** has to keep naming the index (test.h's test_path once reused its buffer
** after 8 calls, which looked like the index losing its last flush). */
TEST(writers_killed_at_open_keep_the_last_flush)
{
    const char *path = test_path("kill-open.keel");
    const char *copy = test_path("kill-open-child.keel");
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    float *x = td_random(300, DIM, 70);
    CHECK_OK(keel_add_batch(w, x, 300, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_backup(w, test_path("kill-open-v1.keel")));
    float *more = td_random(1700, DIM, 71);
    CHECK_OK(keel_add_batch(w, more, 1700, NULL, NULL));
    CHECK_OK(keel_flush(w));
    keel_close(w);
    int killed = 0, completed = 0;
    for (int round = 0; round < 12; round++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            keel_index *c;
            if (keel_open(path, DIM, NULL, &c) || keel_backup(c, copy))
                _exit(1);
            _exit(0);
        }
        struct timespec ts = {0, 1000000L + 3000000L * round};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        killed += WIFSIGNALED(st);
        completed += WIFEXITED(st) && WEXITSTATUS(st) == 0;
        CHECK(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0));
        keel_index *r;
        /* another file, named through test_path each round */
        CHECK_OK(keel_open_reader(test_path("kill-open-v1.keel"), NULL, &r));
        CHECK_EQ(keel_count(r), 300);
        keel_close(r);
        CHECK_MSG(strstr(path, "/kill-open.keel") != NULL,
                  "round %d: the index's path now reads %s", round, path);
        CHECK_OK(keel_open_reader(path, NULL, &r));
        CHECK_EQ(keel_count(r), 2000);
        keel_close(r);
    }
    printf("    12 writers: %d killed, %d completed first\n", killed,
           completed);
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_EQ(keel_count(w), 2000);
    keel_close(w);
    free(x);
    free(more);
}

TEST_MAIN()
