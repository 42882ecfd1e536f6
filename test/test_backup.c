/* test_backup.c -- keel_backup: the copy holds exactly the last commit (ids,
** vectors, search results bit for bit) even when the writer has changed the
** lists of committed nodes since; copies taken while a writer thread adds,
** deletes and flushes each hold one committed state; holes stay holes; a
** backup killed at any moment leaves the destination old or whole.
** Black-box: only keel.h, plus the test geometry hook.
*/
#include "test.h"
#include "lib/testdata.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

void keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                         uint32_t heap_base, uint32_t heap_doublings,
                         uint32_t idtab_log2);

TEST_PREFER_MEMORY_FS();

#define DIM 16

/* Searches nq queries on idx; results into out (nq * k), counts into n. */
static int
search_all(keel_index *idx, const float *q, size_t nq, size_t k,
           keel_result *out, size_t *n)
{
    keel_search_params p = {.ef = 48};
    return keel_search_batch(idx, q, nq, k, &p, out, n);
}

/* Whether a and b hold the same live ids, vectors and search results. */
static int
same_index(keel_index *a, keel_index *b, const float *q, size_t nq)
{
    if (keel_count(a) != keel_count(b))
        return 0;
    size_t n = (size_t)keel_count(a), na, nb;
    uint64_t *ia = malloc((n + 1) * 8), *ib = malloc((n + 1) * 8);
    float *va = malloc((n + 1) * DIM * 4), *vb = malloc((n + 1) * DIM * 4);
    keel_result *ra = malloc(nq * 10 * sizeof *ra), *rb = malloc(nq * 10 * sizeof *rb);
    size_t *ca = malloc(nq * sizeof *ca), *cb = malloc(nq * sizeof *cb);
    int same = keel_ids(a, KEEL_IDS_FIRST, ia, n + 1, &na) == KEEL_OK &&
               keel_ids(b, KEEL_IDS_FIRST, ib, n + 1, &nb) == KEEL_OK &&
               na == n && nb == n && memcmp(ia, ib, n * 8) == 0 &&
               keel_get_batch(a, ia, n, va, NULL) == KEEL_OK &&
               keel_get_batch(b, ib, n, vb, NULL) == KEEL_OK &&
               memcmp(va, vb, n * DIM * 4) == 0 &&
               search_all(a, q, nq, 10, ra, ca) == KEEL_OK &&
               search_all(b, q, nq, 10, rb, cb) == KEEL_OK &&
               memcmp(ca, cb, nq * sizeof *ca) == 0;
    for (size_t i = 0; same && i < nq; i++) /* field by field: padding */
        for (size_t j = 0; same && j < ca[i]; j++)
            same = ra[i * 10 + j].id == rb[i * 10 + j].id &&
                   memcmp(&ra[i * 10 + j].distance, &rb[i * 10 + j].distance,
                          sizeof(float)) == 0;
    free(ia); free(ib); free(va); free(vb); free(ra); free(rb); free(ca); free(cb);
    return same;
}

/* The whole file at path (malloc), its length in *len. */
static unsigned char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(*len + 1);
    if (fread(p, 1, *len, f) != *len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

/* Every byte of the copy's regions (past the headers and live page) is the
** source's, or zero where the copy keeps a hole (the source's bytes there
** belong to no commit). */
static long
first_difference(const char *copy, const char *src)
{
    size_t lc, ls;
    unsigned char *c = slurp(copy, &lc), *s = slurp(src, &ls);
    long at = -1;
    if (!c || !s || lc > ls)
        at = 0;
    for (size_t i = 196608; at < 0 && i < lc; i++)
        if (c[i] != s[i] && c[i] != 0)
            at = (long)i;
    free(c);
    free(s);
    return at;
}

TEST(copy_is_the_last_commit_bit_for_bit)
{
    keel__test_geometry(4, 2, 10, 1, 6);
    float *v = td_random(2000, DIM, 11), *q = td_random(30, DIM, 12);
    const char *src = test_path("src.keel"), *dst = test_path("copy.keel");
    keel_index *w = NULL, *a = NULL, *b = NULL;
    CHECK_OK(keel_open(src, DIM, NULL, &w));
    CHECK_OK(keel_add_batch(w, v, 800, NULL, NULL));
    for (uint64_t id = 0; id < 800; id += 7)
        CHECK_OK(keel_delete(w, id));
    CHECK_OK(keel_flush(w));

    /* Unflushed adds and deletes since: they rewrite committed lists. */
    CHECK_OK(keel_add_batch(w, v + 800 * DIM, 700, NULL, NULL));
    CHECK_OK(keel_delete(w, 1));
    CHECK_OK(keel_backup(w, dst));
    /* A reader's backup meanwhile: the writer's log, read from the file. */
    CHECK_OK(keel_open_reader(src, NULL, &a));
    CHECK_OK(keel_backup(a, test_path("copy3.keel")));
    CHECK_OK(keel_close(a));

    /* The reference: the source at its last commit (the writer closes
     * without flushing; reopening undoes its list changes). */
    CHECK_OK(keel_close(w));
    CHECK_OK(keel_open(src, 0, NULL, &w));
    CHECK_OK(keel_close(w));
    long at = first_difference(dst, src);
    CHECK_MSG(at < 0, "the copy differs from the last commit at byte %ld", at);
    at = first_difference(test_path("copy3.keel"), src);
    CHECK_MSG(at < 0, "the reader's copy differs at byte %ld", at);
    CHECK_OK(keel_open_reader(src, NULL, &a));
    CHECK_OK(keel_open_reader(dst, NULL, &b));
    CHECK_OK(keel_check(b));
    CHECK_U64(keel_count(b), 800 - 115);
    CHECK(same_index(a, b, q, 30));
    keel_stats sa, sb;
    CHECK_OK(keel_stat(a, &sa));
    CHECK_OK(keel_stat(b, &sb));
    CHECK_U64(sb.next_id, sa.next_id);
    CHECK_U64(sb.deleted, sa.deleted);
    CHECK_U64(sb.snapshot, sa.snapshot);
    /* Holes stay holes: the copy holds no more than the source. */
    CHECK_MSG(sb.allocated_bytes <= sa.allocated_bytes,
              "copy holds %llu bytes, source %llu",
              (unsigned long long)sb.allocated_bytes,
              (unsigned long long)sa.allocated_bytes);

    /* A reader's backup is its snapshot too, and the copy takes a writer. */
    CHECK_OK(keel_backup(a, test_path("copy2.keel")));
    CHECK_OK(keel_close(b));
    CHECK_OK(keel_open_reader(test_path("copy2.keel"), NULL, &b));
    CHECK_OK(keel_check(b));
    CHECK(same_index(a, b, q, 30));
    CHECK_OK(keel_close(b));
    CHECK_OK(keel_open(test_path("copy2.keel"), 0, NULL, &b));
    CHECK_OK(keel_check(b));
    CHECK(same_index(a, b, q, 30));
    CHECK_OK(keel_add(b, v + 1900 * DIM, NULL));
    CHECK_OK(keel_flush(b));
    CHECK_OK(keel_check(b));
    CHECK_OK(keel_close(b));
    CHECK_OK(keel_close(a));
    free(v);
    free(q);
}

/* An index in memory keeps an undo log too (an anonymous file): a backup
** made after unflushed adds rewrote committed lists holds the commit's
** graph, the same as a backup made before those adds. */
TEST(an_in_memory_writer_backs_up_its_commit)
{
    float *v = td_random(4065, DIM, 21), *q = td_random(30, DIM, 22);
    keel_options o = {.max_connections = 4};
    keel_index *w = NULL, *a = NULL, *b = NULL;
    CHECK_OK(keel_open(":memory:", DIM, &o, &w));
    CHECK_OK(keel_add_batch(w, v, 65, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_backup(w, test_path("mem1.keel")));
    CHECK_OK(keel_add_batch(w, v + 65 * DIM, 4000, NULL, NULL));
    CHECK_OK(keel_backup(w, test_path("mem2.keel")));
    CHECK_OK(keel_open_reader(test_path("mem1.keel"), NULL, &a));
    CHECK_OK(keel_open_reader(test_path("mem2.keel"), NULL, &b));
    CHECK_OK(keel_check(b));
    CHECK_U64(keel_count(b), 65);
    CHECK(same_index(a, b, q, 30));
    CHECK_OK(keel_close(a));
    CHECK_OK(keel_close(b));
    /* After the next flush the log starts again, for the new commit. */
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_backup(w, test_path("mem3.keel")));
    CHECK_OK(keel_add_batch(w, v, 500, NULL, NULL));
    CHECK_OK(keel_backup(w, test_path("mem4.keel")));
    CHECK_OK(keel_open_reader(test_path("mem3.keel"), NULL, &a));
    CHECK_OK(keel_open_reader(test_path("mem4.keel"), NULL, &b));
    CHECK_U64(keel_count(b), 4065);
    CHECK(same_index(a, b, q, 30));
    CHECK_OK(keel_close(a));
    CHECK_OK(keel_close(b));
    CHECK_OK(keel_close(w));
    free(v);
    free(q);
}

TEST(bad_destinations)
{
    keel_index *w = NULL;
    float v[DIM] = {1};
    const char *src = test_path("bad.keel");
    CHECK_OK(keel_open(src, DIM, NULL, &w));
    CHECK_OK(keel_add(w, v, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_ERR(keel_backup(w, src), KEEL_EINVAL);
    CHECK_MSG_HAS("is the index itself");
    CHECK_MSG_HAS("help: ");
    CHECK_ERR(keel_backup(w, test_dir()), KEEL_EINVAL);
    CHECK_MSG_HAS("is a directory");
    CHECK_ERR(keel_backup(w, test_path("no/such/dir/x.keel")), KEEL_ENOTFOUND);
    CHECK_MSG_HAS("does not exist");
    CHECK_ERR(keel_backup(w, NULL), KEEL_EINVAL);
    CHECK_ERR(keel_backup(w, ""), KEEL_EINVAL);
    CHECK_ERR(keel_backup(NULL, "x"), KEEL_EINVAL);
    CHECK_ERR(keel_backup(w, "/dev/null"), KEEL_EINVAL);
    CHECK_MSG_HAS("not a regular file");
    /* An existing file is replaced whole. */
    FILE *f = fopen(test_path("old.keel"), "w");
    CHECK(f);
    fputs("old", f);
    fclose(f);
    CHECK_OK(keel_backup(w, test_path("old.keel")));
    keel_index *b = NULL;
    CHECK_OK(keel_open_reader(test_path("old.keel"), NULL, &b));
    CHECK_U64(keel_count(b), 1);
    CHECK_OK(keel_close(b));
    CHECK_OK(keel_close(w));
}

/* --- backups while a writer writes --------------------------------------- */

#define BATCH 40

struct writer_arg {
    keel_index *w;
    const float *v;
    size_t max;
    int stop;
    uint64_t flushes;   /* completed (atomic) */
    int failed;
    int done;           /* the writer returned (atomic) */
    uint64_t taken;     /* backups taken so far (atomic): the writer keeps
                         * at most three flushes ahead of them, so it does
                         * not run out before the backups end */
};

/* Cycle j (from 1): adds ids [BATCH(j-1), BATCH j) (half as a batch, half
** one by one), deletes id 3(j-1), flushes. After flush j the live ids are
** [0, BATCH j) less {0, 3, ..., 3(j-1)}: count (BATCH - 1) j. */
static void *
writer_main(void *p)
{
    struct writer_arg *a = p;
    for (uint64_t j = 1; !__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE) &&
                         BATCH * j <= a->max; j++) {
        const float *v = a->v + BATCH * (j - 1) * DIM;
        int rc = keel_add_batch(a->w, v, BATCH / 2, NULL, NULL);
        for (size_t i = BATCH / 2; !rc && i < BATCH; i++)
            rc = keel_add(a->w, v + i * DIM, NULL);
        if (!rc)
            rc = keel_delete(a->w, 3 * (j - 1));
        for (int w = 0; j > 3 && w < 2000 &&
                        __atomic_load_n(&a->taken, __ATOMIC_ACQUIRE) + 3 < j &&
                        !__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE);
             w++)
            usleep(1000); /* adds and deletes made: the flush waits */
        if (!rc)
            rc = keel_flush(a->w);
        if (rc) {
            fprintf(stderr, "writer: %s\n", keel_errmsg());
            a->failed = 1;
            break;
        }
        __atomic_store_n(&a->flushes, j, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Whether the index at path holds exactly the state after some flush j. */
static int
holds_a_commit(const char *path, const float *v, uint64_t *j_out)
{
    keel_index *b = NULL;
    if (keel_open_reader(path, NULL, &b) != KEEL_OK)
        return 0;
    int ok = keel_check(b) == KEEL_OK;
    uint64_t n = keel_count(b), j = n / (BATCH - 1);
    ok = ok && n % (BATCH - 1) == 0;
    uint64_t *ids = malloc((n + 1) * 8), *want = malloc((n + 1) * 8);
    float *got = malloc((n + 1) * DIM * 4);
    size_t m = 0, nw = 0;
    for (uint64_t id = 0; ok && id < BATCH * j; id++)
        if (id % 3 != 0 || id / 3 >= j)
            want[nw++] = id;
    ok = ok && nw == n &&
         keel_ids(b, KEEL_IDS_FIRST, ids, n + 1, &m) == KEEL_OK && m == n &&
         memcmp(ids, want, n * 8) == 0 &&
         keel_get_batch(b, ids, n, got, NULL) == KEEL_OK;
    for (size_t i = 0; ok && i < n; i++)
        ok = memcmp(got + i * DIM, v + ids[i] * DIM, DIM * 4) == 0;
    if (!ok)
        fprintf(stderr, "  %s: count %llu, check: %s\n", path,
                (unsigned long long)n, keel_errmsg());
    keel_close(b);
    free(ids);
    free(want);
    free(got);
    *j_out = j;
    return ok;
}

TEST(twenty_backups_while_a_writer_writes)
{
    keel__test_geometry(4, 3, 10, 2, 6);
    enum { MAX = 8000 };
    float *v = td_random(MAX, DIM, 21);
    const char *src = test_path("live.keel");
    struct writer_arg a = {.v = v, .max = MAX};
    CHECK_OK(keel_open(src, DIM, NULL, &a.w));
    keel_index *rd = NULL;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, writer_main, &a) == 0);
    while (__atomic_load_n(&a.flushes, __ATOMIC_ACQUIRE) < 3)
        usleep(1000);
    CHECK_OK(keel_open_reader(src, NULL, &rd));
    uint64_t last = 0;
    int distinct = 0;
    for (int i = 0; i < 25; i++) {
        char name[32];
        snprintf(name, sizeof name, "b%d.keel", i);
        /* The last five through a reader of the same file. */
        CHECK_OK(keel_backup(i < 20 ? a.w : rd, test_path(name)));
        uint64_t j;
        CHECK_MSG(holds_a_commit(test_path(name), v, &j),
                  "backup %d holds no committed state", i);
        CHECK_MSG(j >= 3, "backup %d holds flush %llu", i,
                  (unsigned long long)j);
        distinct += j != last;
        last = j;
        __atomic_add_fetch(&a.taken, 1, __ATOMIC_RELEASE);
        /* Let the writer flush once more before the next copy (bounded
         * wait: on a loaded machine a fixed sleep may see no flush). */
        uint64_t seen = __atomic_load_n(&a.flushes, __ATOMIC_ACQUIRE);
        for (int w = 0; w < 5000 &&
                        __atomic_load_n(&a.flushes, __ATOMIC_ACQUIRE) == seen &&
                        !__atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
             w++)
            usleep(1000);
    }
    __atomic_store_n(&a.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(!a.failed);
    CHECK_MSG(distinct >= 5, "the writer flushed too little between backups "
              "(%d distinct states)", distinct);
    CHECK_OK(keel_close(rd));
    CHECK_OK(keel_close(a.w));
    free(v);
}

/* Two threads backing up to one destination: every call succeeds (each
** has its own temporary file) and the destination is always whole. */
struct dest_arg {
    keel_index *idx;
    const char *dest;
    int failed;
};

static void *
backup_main(void *p)
{
    struct dest_arg *a = p;
    for (int i = 0; i < 15; i++)
        if (keel_backup(a->idx, a->dest) != KEEL_OK)
            a->failed++;
    return NULL;
}

TEST(two_backups_to_one_destination_never_tear_it)
{
    enum { N = 3000 };
    float *v = td_random(N, DIM, 5);
    keel_index *w;
    CHECK_OK(keel_open(test_path("twice.keel"), DIM, NULL, &w));
    CHECK_OK(keel_add_batch(w, v, N, NULL, NULL));
    CHECK_OK(keel_flush(w));
    const char *dest = test_path("twice-copy.keel");
    struct dest_arg a = {.idx = w, .dest = dest}, b = a;
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, backup_main, &a) == 0);
    CHECK(pthread_create(&tb, NULL, backup_main, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_MSG(a.failed + b.failed == 0, "%d backups failed: %s",
              a.failed + b.failed, keel_errmsg());
    keel_index *c;
    CHECK_OK(keel_open_reader(dest, NULL, &c));
    CHECK_OK(keel_check(c));
    CHECK_U64(keel_count(c), N);
    CHECK_OK(keel_close(c));
    CHECK_OK(keel_close(w));
    free(v);
}

/* --- a backup killed at any moment --------------------------------------- */

TEST(killed_backup_leaves_old_or_whole)
{
    keel__test_geometry(0, 0, 0, 0, 0);
    enum { ROUNDS = 12, STEP = 1500 };
    float *v = td_random(ROUNDS * STEP, DIM, 31);
    const char *src = test_path("k.keel"), *dst = test_path("k.bak");
    uint64_t seed = 5;
    int whole = 0, absent = 0;
    uint64_t prev_count = 0; /* what dst held after the last round */
    for (int r = 0; r < ROUNDS; r++) {
        keel_index *w = NULL;
        CHECK_OK(keel_open(src, DIM, NULL, &w));
        CHECK_OK(keel_add_batch(w, v + (size_t)r * STEP * DIM, STEP, NULL, NULL));
        CHECK_OK(keel_flush(w));
        CHECK_OK(keel_close(w));
        uint64_t now = (uint64_t)(r + 1) * STEP;
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            keel_index *rd = NULL;
            int rc = keel_open_reader(src, NULL, &rd);
            if (!rc)
                rc = keel_backup(rd, dst);
            _exit(rc ? 1 : 0);
        }
        usleep((useconds_t)(test_rand(&seed) % 20000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        keel_index *b = NULL;
        if (access(dst, F_OK) != 0) {
            CHECK_MSG(prev_count == 0, "round %d: %s vanished", r, dst);
            absent++;
            continue;
        }
        CHECK_OK(keel_open_reader(dst, NULL, &b));
        CHECK_OK(keel_check(b));
        uint64_t n = keel_count(b);
        CHECK_MSG(n == now || n == prev_count,
                  "round %d: backup holds %llu vectors, not %llu or %llu", r,
                  (unsigned long long)n, (unsigned long long)now,
                  (unsigned long long)prev_count);
        whole += n == now;
        CHECK_OK(keel_close(b));
        prev_count = n;
    }
    printf("     (%d rounds ended whole, %d old, %d before any copy)\n", whole,
           ROUNDS - whole - absent, absent);
    free(v);
}

TEST_MAIN()
