/* test_life.c -- an index over its life: compaction, the undo log after a
** killed writer, warm-up of an evicted file, huge pages.
*/
#include "test.h"
#include "lib/testdata.h"

#include "api/api.h"    /* white-box: the handle's locks, for fork tests */
#include "store/format.h" /* white-box: where the written bytes are */
#include "os/os.h"     /* white-box: a system table that pins a snapshot */

#include <pthread.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>

void keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                         uint32_t heap_base, uint32_t heap_doublings,
                         uint32_t idtab_log2);

#define DIM 24

/* An index of n vectors of dim dimensions (td_vec_of(id)) at name, opened
** with options o (NULL: defaults), flushed and left open. */
static keel_index *
fill_dim_with(const char *name, uint32_t dim, uint64_t n, const keel_options *o)
{
    keel_index *idx = NULL;
    if (keel_open(test_path(name), dim, o, &idx) != KEEL_OK)
        return NULL;
    float *v = malloc(n * dim * sizeof *v);
    for (uint64_t i = 0; i < n; i++)
        td_vec_of(i, dim, v + i * dim);
    int rc = keel_add_batch(idx, v, n, NULL, NULL);
    free(v);
    if (rc || keel_flush(idx)) {
        keel_close(idx);
        return NULL;
    }
    return idx;
}

static keel_index *
fill(const char *name, uint64_t n, const keel_options *o)
{
    return fill_dim_with(name, DIM, n, o);
}

static uint64_t
file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Every live id is found by searching for its own vector, at distance 0. */
static int
all_self_found(keel_index *idx, uint64_t n, const uint8_t *dead)
{
    float v[DIM];
    int lost = 0;
    for (uint64_t id = 0; id < n; id++) {
        if (dead && dead[id])
            continue;
        td_vec_of(id, DIM, v);
        keel_result r[1];
        size_t got;
        keel_search_params p = {.ef = 512};
        if (keel_search(idx, v, 1, &p, r, &got) || got != 1 ||
            r[0].id != id || r[0].distance != 0.0f)
            lost++;
    }
    return lost;
}

/* A closed file is at most the unused end of its last segment longer than
** the data it holds (doc/format.md 1): new files' segments hold at most
** 32 MiB, whatever the dimensions, precision and M. */
TEST(a_closed_file_is_at_most_one_segment_longer_than_its_data)
{
    static const uint32_t dims[] = {1, 24, 100, 384, 768, 1536, 4096};
    static const uint32_t ms[] = {4, 16, 64};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
        for (int prec = 0; prec < 4; prec++)
            for (size_t m = 0; m < sizeof ms / sizeof ms[0]; m++) {
                keel_header h;
                keel_geometry g;
                keel_seg_layout L;
                /* prec bit 0: f16; bit 1: traversal codes */
                keel__header_new(&h, dims[d], ms[m], 0, prec & 1, prec >> 1);
                keel__geometry_init(&g, &h);
                keel__seg_layout(&g, h.seg_doublings, &L);
                if (L.slots > 1024 && L.bytes > (32u << 20) + 65536)
                    TEST_FAIL_AT("dim %u, precision %d, M %u: segments of "
                                 "%llu bytes, above 32 MiB", dims[d], prec,
                                 ms[m], (unsigned long long)L.bytes);
            }

    /* A reader open across the writer's close searches on; the length is
     * what the data needs plus at most one segment. */
    keel_index *w = fill("length.keel", 5000, NULL), *r = NULL;
    CHECK(w != NULL);
    CHECK_EQ(keel_open_reader(test_path("length.keel"), NULL, &r), KEEL_OK);
    keel_stats s;
    CHECK_EQ(keel_stat(w, &s), KEEL_OK);
    CHECK_EQ(keel_close(w), KEEL_OK);
    CHECK_EQ(all_self_found(r, 5000, NULL), 0);
    struct stat st;
    CHECK_EQ(stat(test_path("length.keel"), &st), 0);
    CHECK_EQ((uint64_t)st.st_size, s.file_bytes);
    CHECK((uint64_t)st.st_size <= (uint64_t)st.st_blocks * 512 + (32u << 20));
    CHECK_EQ(keel_close(r), KEEL_OK);
}

TEST(compaction_shrinks_keeps_ids_and_never_reuses_them)
{
    keel__test_geometry(0, 0, 0, 0, 0);
    keel_index *idx = fill("c.keel", 3000, NULL);
    CHECK(idx);
    uint8_t dead[3000] = {0};
    for (uint64_t id = 0; id < 3000; id++)
        if (id % 3 != 0) {
            CHECK_OK(keel_delete(idx, id));
            dead[id] = 1;
        }
    uint64_t before = file_size(test_path("c.keel"));
    CHECK_OK(keel_compact(idx));
    uint64_t after = file_size(test_path("c.keel"));
    CHECK_MSG(after < before, "file %llu -> %llu bytes", (unsigned long long)before,
              (unsigned long long)after);
    CHECK(access(test_path("c.keel.compacting"), F_OK) != 0);
    CHECK_U64(keel_count(idx), 1000);
    CHECK_EQ(all_self_found(idx, 3000, dead), 0);
    float got[DIM], want[DIM];
    td_vec_of(2997, DIM, want);
    CHECK_OK(keel_get(idx, 2997, got));
    CHECK(memcmp(got, want, sizeof got) == 0);
    CHECK_ERR(keel_get(idx, 2998, got), KEEL_ENOTFOUND);
    uint64_t id;
    CHECK_OK(keel_add(idx, want, &id));
    CHECK_U64(id, 3000); /* never a number used before compaction */
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(test_path("c.keel"), DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), 1001);
    CHECK_OK(keel_compact(idx)); /* nothing deleted: same contents */
    CHECK_U64(keel_count(idx), 1001);
    CHECK_OK(keel_add(idx, want, &id));
    CHECK_U64(id, 3001);
    CHECK_OK(keel_close(idx));
}

TEST(compaction_of_empty_cosine_and_f16_indexes)
{
    keel_options o = {.metric = KEEL_COSINE, .precision = KEEL_F16};
    keel_index *idx;
    CHECK_OK(keel_open(test_path("e.keel"), DIM, &o, &idx));
    CHECK_OK(keel_compact(idx));
    CHECK_U64(keel_count(idx), 0);
    CHECK_OK(keel_close(idx));
    idx = fill("cf.keel", 500, &o);
    CHECK(idx);
    for (uint64_t i = 0; i < 500; i += 2)
        CHECK_OK(keel_delete(idx, i));
    float q[DIM];
    td_vec_of(7, DIM, q);
    keel_result a[5], b[5];
    size_t na, nb;
    CHECK_OK(keel_search(idx, q, 5, NULL, a, &na));
    CHECK_OK(keel_compact(idx));
    CHECK_OK(keel_search(idx, q, 5, NULL, b, &nb));
    CHECK_EQ(na, nb);
    for (size_t i = 0; i < na; i++)
        CHECK(a[i].id == b[i].id && a[i].distance == b[i].distance);
    keel_stats st;
    CHECK_OK(keel_stat(idx, &st));
    CHECK(st.metric == KEEL_COSINE && st.precision == KEEL_F16);
    CHECK_OK(keel_close(idx));
}

TEST(failed_compaction_leaves_the_index_usable)
{
    keel_index *idx = fill("f.keel", 300, NULL);
    CHECK(idx);
    CHECK_OK(keel_delete(idx, 4));
    /* A directory where the new file would go makes compaction fail. */
    CHECK(mkdir(test_path("f.keel.compacting"), 0700) == 0);
    int rc = keel_compact(idx);
    CHECK(rc != KEEL_OK);
    CHECK(strstr(keel_errmsg(), "\nhelp: "));
    CHECK_U64(keel_count(idx), 299);
    float v[DIM];
    td_vec_of(5, DIM, v);
    CHECK_OK(keel_add(idx, v, NULL));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_close(idx));
    rmdir(test_path("f.keel.compacting"));
    CHECK_OK(keel_open(test_path("f.keel"), DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), 300);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
    /* A leftover file from a crashed compaction goes at the next open. */
    CHECK(td_write_file(test_path("f.keel.compacting"), "junk", 4) == 0);
    CHECK_OK(keel_open(test_path("f.keel"), DIM, NULL, &idx));
    CHECK(access(test_path("f.keel.compacting"), F_OK) != 0);
    CHECK_OK(keel_close(idx));
}

TEST(compaction_through_a_symlink_replaces_the_target)
{
    keel_index *idx = fill("target.keel", 200, NULL);
    CHECK(idx);
    CHECK_OK(keel_close(idx));
    CHECK(symlink(test_path("target.keel"), test_path("link.keel")) == 0);
    CHECK_OK(keel_open(test_path("link.keel"), DIM, NULL, &idx));
    for (uint64_t i = 0; i < 100; i++)
        CHECK_OK(keel_delete(idx, i));
    CHECK_OK(keel_compact(idx));
    CHECK_OK(keel_close(idx));
    struct stat st;
    CHECK(lstat(test_path("link.keel"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK_OK(keel_open_reader(test_path("target.keel"), NULL, &idx));
    CHECK_U64(keel_count(idx), 100);
    CHECK_OK(keel_close(idx));
}

TEST(reader_follows_a_compaction)
{
    keel_index *w = fill("rf.keel", 1000, NULL), *r;
    CHECK(w);
    CHECK_OK(keel_open_reader(test_path("rf.keel"), NULL, &r));
    CHECK_U64(keel_count(r), 1000);
    for (uint64_t i = 0; i < 500; i++)
        CHECK_OK(keel_delete(w, i));
    CHECK_OK(keel_compact(w));
    float v[DIM];
    td_vec_of(700, DIM, v);
    keel_result res[3];
    size_t n;
    CHECK_OK(keel_search(r, v, 3, NULL, res, &n));
    CHECK(n == 3 && res[0].id == 700 && res[0].distance == 0.0f);
    for (size_t i = 0; i < n; i++)
        CHECK(res[i].id >= 500);
    CHECK_U64(keel_count(r), 500);
    keel_stats st;
    CHECK_OK(keel_stat(r, &st));
    CHECK_U64(st.deleted, 0); /* the compacted file */
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

/* Commit 100 vectors, add 20,000 without flushing, kill the writer; returns
** how many committed vectors searching for themselves no longer finds, or
** -1 if the run failed. mutant: run the writer with that protocol mutant. */
static int
kill_after_bulk_load(int round, int mutant)
{
    const char *path = test_path("undo.keel");
    {
        unlink(path);
        int pipefd[2];
        if (pipe(pipefd) != 0)
            return -1;
        pid_t pid = fork();
        if (pid < 0)
            return -1;
        if (pid == 0) {
            close(pipefd[0]);
            keel__mutant = mutant;
            keel_index *idx = fill("undo.keel", 100, NULL);
            if (!idx)
                _exit(3);
            float *v = malloc(20000 * DIM * sizeof *v);
            for (uint64_t i = 0; i < 20000; i++)
                td_vec_of(100 + i, DIM, v + i * DIM);
            if (round == 0) {
                for (uint64_t i = 0; i < 20000; i++)
                    if (keel_add(idx, v + i * DIM, NULL))
                        _exit(4);
            } else if (keel_add_batch(idx, v, 20000, NULL, NULL)) {
                _exit(4);
            }
            if (write(pipefd[1], "x", 1) != 1)
                _exit(5);
            pause();
            _exit(0);
        }
        close(pipefd[1]);
        char c;
        int got = (int)read(pipefd[0], &c, 1);
        close(pipefd[0]);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        if (got != 1 || !WIFSIGNALED(status))
            return -1;
        if ((access(test_path("undo.keel.undo"), F_OK) == 0) != !mutant)
            return -1;
        keel_index *idx;
        if (keel_open(path, DIM, NULL, &idx) != KEEL_OK)
            return -1;
        int lost = access(test_path("undo.keel.undo"), F_OK) == 0 ||
                   keel_count(idx) != 100 || keel_check(idx) != KEEL_OK
                       ? -1 : all_self_found(idx, 100, NULL);
        keel_close(idx);
        return lost;
    }
}

TEST(undo_after_sigkill_keeps_committed_vectors_reachable)
{
    for (int round = 0; round < 2; round++)
        CHECK_EQ(kill_after_bulk_load(round, 0), 0);
}

/* The same without the undo log: the test above can fail. */
TEST(without_undo_the_kill_cuts_committed_vectors_off)
{
    int lost = kill_after_bulk_load(0, KEEL_MUT_NO_UNDO);
    printf("    without the undo log, %d of 100 committed vectors were no "
           "longer found\n", lost);
    CHECK(lost > 0);
}

/* Counts resident pages of [off, off+len) of the mapping m (whole pages
** strictly inside when inner, else every page touched). */
static void
count_pages(const unsigned char *vec, uint64_t off, uint64_t len, int inner,
            size_t *in, size_t *all)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t a = inner ? (off + page - 1) / page : off / page;
    uint64_t b = inner ? (off + len) / page : (off + len + page - 1) / page;
    for (uint64_t p = a; p < b; p++) {
        *all += 1;
        *in += vec[p] & 1;
    }
}

/* Resident share of the written bytes and of the last segment's unwritten
** tail, read through the file's own header. */
static int
residency(const char *path, double *written, double *tail)
{
    /* Only the header pages are read: reading more would bring it in. */
    int fd = open(path, O_RDONLY);
    struct stat fs;
    keel_header *h = malloc(sizeof *h);
    unsigned char *hdr = malloc(2 * KEEL_PAGE_SLOT);
    int ok = fd >= 0 && h && hdr && fstat(fd, &fs) == 0 &&
             pread(fd, hdr, 2 * KEEL_PAGE_SLOT, 0) == 2 * KEEL_PAGE_SLOT;
    size_t len = ok ? (size_t)fs.st_size : 0;
    if (ok)
        ok = keel__header_decode(hdr + KEEL_HDR_B_OFF, len, h, NULL, 0) == 0 ||
             keel__header_decode(hdr, len, h, NULL, 0) == 0;
    free(hdr);
    void *m = ok ? mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    if (!ok || m == MAP_FAILED) {
        free(h);
        return -1;
    }
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *vec = malloc((len + (size_t)page - 1) / (size_t)page);
    mincore(m, len, vec);
    keel_geometry g;
    keel__geometry_init(&g, h);
    size_t win = 0, wall = 0, tin = 0, tall = 0;
    for (uint32_t k = 0; k < h->segments; k++) {
        keel_seg_layout L;
        keel__seg_layout(&g, k, &L);
        uint64_t first = keel__seg_first_slot(&g, k);
        uint64_t used = h->count > first ? KEEL_MIN(h->count - first, L.slots) : 0;
        uint64_t o = h->seg_off[k];
        count_pages(vec, o, used * 16, 0, &win, &wall);
        count_pages(vec, o + L.vec_off, used * g.vec_bytes, 0, &win, &wall);
        count_pages(vec, o + L.rec_off, used * g.rec_bytes, 0, &win, &wall);
        /* The kernel reads ahead of every fault (here up to read_ahead_kb,
         * 8 MiB on some disks): judge the tail past a 16 MiB margin. */
        uint64_t margin = 16u << 20;
        uint64_t vt = (L.slots - used) * g.vec_bytes;
        uint64_t rt = (L.slots - used) * g.rec_bytes;
        if (vt > margin)
            count_pages(vec, o + L.vec_off + used * g.vec_bytes + margin,
                        vt - margin, 1, &tin, &tall);
        if (rt > margin)
            count_pages(vec, o + L.rec_off + used * g.rec_bytes + margin,
                        rt - margin, 1, &tin, &tall);
    }
    *written = wall ? (double)win / (double)wall : 1;
    *tail = tall ? (double)tin / (double)tall : 0;
    free(vec);
    free(h);
    munmap(m, len);
    return tall > 0 ? 0 : -1;
}

static void
evict(const char *path)
{
    int fd = open(path, O_RDONLY);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* Evicts the file from the page cache. 1 when it left (residency can be
** judged), 0 when the system kept it anyway (noted), -1 on an error. */
static int
evict_cold(const char *path)
{
    double written = 0, tail = 0;
    evict(path);
    if (residency(path, &written, &tail) != 0)
        return -1;
    if (written < 0.2)
        return 1;
    printf("    (the system kept %.2f of the file in memory after eviction; "
           "not judging residency)\n", written);
    return 0;
}

/* Polls the file's residency until 85% of its written pages are in memory
** or 30 s passed; *secs is the time it took. -1 on an error. */
static int
wait_resident(const char *path, double *written, double *tail, double *secs)
{
    double t0 = test_now();
    do {
        if (residency(path, written, tail) != 0)
            return -1;
        if (*written >= 0.85)
            break;
        usleep(20000);
    } while (test_now() - t0 < 30);
    *secs = test_now() - t0;
    return 0;
}

TEST(warm_reads_what_was_written_and_changes_nothing)
{
    /* 20,000 vectors of 24 dims in one segment of 262,144 slots: most of it
     * is an unwritten tail. */
    keel__test_geometry(18, 0, 0, 0, 0);
    keel_index *w = fill("warm.keel", 20000, NULL);
    CHECK(w);
    CHECK_OK(keel_close(w));
    const char *path = test_path("warm.keel");
    struct stat before, after;
    CHECK(stat(path, &before) == 0);
    size_t len0;
    unsigned char *bytes0 = td_read_file(path, &len0);
    float q[DIM];
    td_vec_of(12345, DIM, q);
    keel_result plain[10], warmed[10];
    size_t np, nw;
    keel_index *r;
    CHECK_OK(keel_open_reader(path, NULL, &r));
    CHECK_OK(keel_search(r, q, 10, NULL, plain, &np));
    CHECK_OK(keel_close(r));
    int cold = evict_cold(path);
    CHECK(cold >= 0);
    keel_options o = {.flags = KEEL_WARM};
    CHECK_OK(keel_open_reader(path, &o, &r));
    double written, tail, secs;
    CHECK(wait_resident(path, &written, &tail, &secs) == 0);
    keel__test_geometry(0, 0, 0, 0, 0);
    printf("    after warm: %.3f of the written pages resident, %.3f of the "
           "unwritten tail (%.2f s)\n", written, tail, secs);
    if (cold) {
        CHECK_MSG(written >= 0.85, "only %.3f of the written pages", written);
        CHECK_MSG(tail < 0.05, "%.3f of the unwritten tail read", tail);
    }
    CHECK_OK(keel_search(r, q, 10, NULL, warmed, &nw));
    CHECK_EQ(np, nw);
    for (size_t i = 0; i < np; i++)
        CHECK(plain[i].id == warmed[i].id &&
              memcmp(&plain[i].distance, &warmed[i].distance, 4) == 0);
    CHECK_OK(keel_close(r));
    CHECK(stat(path, &after) == 0);
    CHECK(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
          before.st_mtim.tv_nsec == after.st_mtim.tv_nsec);
    size_t len1;
    unsigned char *bytes1 = td_read_file(path, &len1);
    CHECK(len0 == len1 && memcmp(bytes0, bytes1, len0) == 0);
    free(bytes0);
    free(bytes1);
}

TEST(a_reader_that_asked_for_warm_warms_the_compacted_file)
{
    /* As above: one large segment, so most of the file is unwritten tail. */
    keel__test_geometry(18, 0, 0, 0, 0);
    keel_index *w = fill("wc.keel", 20000, NULL), *r;
    CHECK(w);
    const char *path = test_path("wc.keel");
    CHECK_OK(keel_open_reader(path, NULL, &r));
    CHECK_OK(keel_warm(r)); /* turns warm on for the handle */
    for (uint64_t i = 0; i < 1000; i++)
        CHECK_OK(keel_delete(w, i));
    CHECK_OK(keel_compact(w));
    CHECK_OK(keel_close(w));
    /* The writer's pages of the new file leave the cache; only the
     * reader's warm on the file it moves to can bring them back. */
    int cold = evict_cold(path);
    CHECK(cold >= 0);
    CHECK_OK(keel_refresh(r)); /* sees the superseded mark and moves */
    double written, tail, secs;
    CHECK(wait_resident(path, &written, &tail, &secs) == 0);
    keel__test_geometry(0, 0, 0, 0, 0);
    printf("    the compacted file after the move: %.3f of the written pages "
           "resident (%.2f s)\n", written, secs);
    if (cold)
        CHECK_MSG(written >= 0.85, "only %.3f of the written pages", written);
    CHECK_U64(keel_count(r), 19000);
    float q[DIM];
    td_vec_of(5000, DIM, q);
    keel_result res[1];
    size_t n;
    CHECK_OK(keel_search(r, q, 1, NULL, res, &n));
    CHECK(n == 1 && res[0].id == 5000 && res[0].distance == 0.0f);
    CHECK_OK(keel_close(r));
}

TEST(warm_thirty_rounds_and_fork)
{
    keel_index *w = fill("w30.keel", 3000, NULL);
    CHECK(w);
    CHECK_OK(keel_warm(w));
    CHECK_OK(keel_warm(w)); /* while it runs: nothing */
    CHECK_OK(keel_close(w));
    float q[DIM];
    td_vec_of(3, DIM, q);
    for (int i = 0; i < 30; i++) {
        keel_options o = {.flags = KEEL_WARM};
        keel_index *r;
        CHECK_OK(keel_open_reader(test_path("w30.keel"), &o, &r));
        if (i % 2) {
            keel_result res[1];
            size_t n;
            CHECK_OK(keel_search(r, q, 1, NULL, res, &n));
            CHECK(n == 1 && res[0].id == 3);
        }
        CHECK_OK(keel_close(r));
    }
    /* A child that closes an index its parent is warming does not wait for
     * a thread it does not have. */
    keel_index *r;
    keel_options o = {.flags = KEEL_WARM};
    CHECK_OK(keel_open_reader(test_path("w30.keel"), &o, &r));
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(10);
        keel_close(r);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_OK(keel_close(r));
}

TEST(huge_pages_change_no_result)
{
    keel_index *a = fill("hp.keel", 4000, NULL), *b;
    CHECK(a);
    keel_options o = {.flags = KEEL_HUGE_PAGES};
    CHECK_OK(keel_open_reader(test_path("hp.keel"), &o, &b));
    for (uint64_t i = 0; i < 4000; i += 97) {
        float q[DIM];
        td_vec_of(i * 7 + 1, DIM, q);
        keel_result x[10], y[10];
        size_t nx, ny;
        CHECK_OK(keel_search(a, q, 10, NULL, x, &nx));
        CHECK_OK(keel_search(b, q, 10, NULL, y, &ny));
        CHECK_EQ(nx, ny);
        for (size_t j = 0; j < nx; j++)
            CHECK(x[j].id == y[j].id &&
                  memcmp(&x[j].distance, &y[j].distance, 4) == 0);
    }
    CHECK_OK(keel_close(b));
    CHECK_OK(keel_close(a));
}

/* An index of n vectors of dim dimensions at name, flushed and left open. */
static keel_index *
fill_dim(const char *name, uint32_t dim, uint64_t n)
{
    return fill_dim_with(name, dim, n, NULL);
}

/* The reader r of a 100-d index whose vectors are td_vec_of(id) keeps
** answering from it: a query and a buffer of exactly 100 floats (ASan sees
** any byte past them), every result and vector its own. */
static int
serves_its_own_100d(keel_index *r, uint64_t n)
{
    float *q = malloc(100 * sizeof *q), *got = malloc(100 * sizeof *got);
    td_vec_of(7, 100, q);
    keel_result res[5];
    size_t k = 0;
    int ok = keel_search(r, q, 5, NULL, res, &k) == KEEL_OK && k == 5 &&
             res[0].id == 7 && res[0].distance == 0.0f &&
             keel_get(r, 7, got) == KEEL_OK &&
             memcmp(got, q, 100 * sizeof *q) == 0 && keel_count(r) == n &&
             keel_dim(r) == 100;
    for (size_t i = 0; ok && i < k; i++)
        ok = res[i].id < n;
    free(q);
    free(got);
    return ok;
}

TEST(reader_does_not_follow_into_another_index)
{
    /* A 100-d index compacts; then a 512-d index is renamed over its path
     * (a deploy). The reader must not move to it. */
    keel_index *w = fill_dim("own.keel", 100, 300), *r;
    CHECK(w);
    CHECK_OK(keel_open_reader(test_path("own.keel"), NULL, &r));
    CHECK(serves_its_own_100d(r, 300));
    CHECK_OK(keel_compact(w));
    CHECK_OK(keel_close(w));
    keel_index *other = fill_dim("other.keel", 512, 50);
    CHECK(other);
    CHECK_OK(keel_close(other));
    CHECK(rename(test_path("other.keel"), test_path("own.keel")) == 0);
    for (int i = 0; i < 3; i++)
        CHECK(serves_its_own_100d(r, 300));
    keel_stats st;
    CHECK_OK(keel_stat(r, &st));
    CHECK_U64(st.dim, 100);
    CHECK_U64(st.count, 300);
    CHECK_ERR(keel_refresh(r), KEEL_EDIM);
    CHECK_MSG_HAS("512 dimensions");
    CHECK_MSG_HAS("(100 dimensions");
    CHECK_ERR(keel_check(r), KEEL_EDIM);
    CHECK(serves_its_own_100d(r, 300));
    CHECK_OK(keel_close(r));

    /* The same dimensions, metric and M, but another index: its identity
     * tells them apart. */
    w = fill_dim("own2.keel", 100, 300);
    CHECK(w);
    CHECK_OK(keel_open_reader(test_path("own2.keel"), NULL, &r));
    CHECK_OK(keel_compact(w));
    CHECK_OK(keel_close(w));
    keel_index *twin;
    CHECK_OK(keel_open(test_path("twin.keel"), 100, NULL, &twin));
    float *v = calloc(100, sizeof *v);
    for (int i = 0; i < 40; i++) {
        v[0] = (float)(i + 1000);
        CHECK_OK(keel_add(twin, v, NULL));
    }
    free(v);
    CHECK_OK(keel_flush(twin));
    CHECK_OK(keel_close(twin));
    CHECK(rename(test_path("twin.keel"), test_path("own2.keel")) == 0);
    CHECK(serves_its_own_100d(r, 300));
    CHECK_ERR(keel_refresh(r), KEEL_EOPTIONS);
    CHECK_MSG_HAS("identity");
    CHECK_OK(keel_close(r));
    /* A reader opened now opens the new index. */
    CHECK_OK(keel_open_reader(test_path("own2.keel"), NULL, &r));
    CHECK_U64(keel_count(r), 40);
    CHECK_OK(keel_close(r));
}

TEST(reader_count_stat_and_check_follow_a_compaction)
{
    keel_index *w = fill("cfollow.keel", 10, NULL), *r;
    CHECK(w);
    CHECK_OK(keel_open_reader(test_path("cfollow.keel"), NULL, &r));
    CHECK_U64(keel_count(r), 10);
    CHECK_OK(keel_compact(w));
    float v[DIM];
    for (uint64_t i = 0; i < 5; i++) {
        td_vec_of(100 + i, DIM, v);
        CHECK_OK(keel_add(w, v, NULL));
    }
    CHECK_OK(keel_flush(w));
    CHECK_U64(keel_count(w), 15);
    CHECK_U64(keel_count(r), 15); /* without a search first */
    keel_stats st;
    CHECK_OK(keel_stat(r, &st));
    CHECK_U64(st.count, 15);
    CHECK_OK(keel_compact(w));
    for (uint64_t i = 0; i < 5; i++) {
        td_vec_of(200 + i, DIM, v);
        CHECK_OK(keel_add(w, v, NULL));
    }
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_stat(r, &st));
    CHECK_U64(st.count, 20);
    CHECK_OK(keel_compact(w));
    CHECK_OK(keel_delete(w, 0));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_check(r));
    CHECK_OK(keel_stat(r, &st));
    CHECK_U64(st.count, 19);
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

/* Every call that reads through a reader, made first on a fresh reader
** after a compaction and a flush to the new file, serves the new file:
** each goes through the read bracket, whose first step is the follow.
** Vectors 100..104 exist only in the compacted file. */
TEST(every_read_of_a_reader_follows_a_compaction)
{
    const char *kinds[] = {"get", "get_batch", "ids", "search_batch",
                           "search_radius", "backup"};
    for (size_t kind = 0; kind < sizeof kinds / sizeof *kinds; kind++) {
        char name[32];
        snprintf(name, sizeof name, "every-%s.keel", kinds[kind]);
        keel_index *w = fill(name, 10, NULL), *r;
        CHECK(w);
        CHECK_OK(keel_open_reader(test_path(name), NULL, &r));
        CHECK_OK(keel_compact(w));
        float v[DIM];
        for (uint64_t i = 0; i < 5; i++) {
            td_vec_of(100 + i, DIM, v);
            CHECK_OK(keel_add_with_id(w, 100 + i, v));
        }
        CHECK_OK(keel_flush(w));
        td_vec_of(102, DIM, v);
        float got[DIM];
        uint64_t id = 102, ids[32];
        keel_result res[4];
        size_t n = 0;
        int seen = 0;
        switch (kind) {
        case 0:
            seen = keel_get(r, id, got) == KEEL_OK;
            break;
        case 1:
            seen = keel_get_batch(r, &id, 1, got, NULL) == KEEL_OK;
            break;
        case 2:
            CHECK_OK(keel_ids(r, KEEL_IDS_FIRST, ids, 32, &n));
            seen = n == 15 && ids[12] == 102;
            break;
        case 3:
            CHECK_OK(keel_search_batch(r, v, 1, 1, NULL, res, &n));
            seen = n == 1 && res[0].id == 102;
            break;
        case 4:
            CHECK_OK(keel_search_radius(r, v, 0.0f, 4, NULL, res, &n));
            seen = n == 1 && res[0].id == 102;
            break;
        case 5: {
            const char *dest = test_path("every-backup.keel");
            keel_index *b;
            CHECK_OK(keel_backup(r, dest));
            CHECK_OK(keel_open_reader(dest, NULL, &b));
            seen = keel_count(b) == 15;
            CHECK_OK(keel_close(b));
            break;
        }
        }
        if (!seen)
            fprintf(stderr, "  %s did not follow\n", kinds[kind]);
        CHECK(seen);
        CHECK_OK(keel_close(r));
        CHECK_OK(keel_close(w));
    }
}

/* Copies the file at from to to (a backup, as cp makes it). */
static int
copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC,
                                              0644);
    char buf[65536];
    ssize_t n = -1;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) {
            n = -1;
            break;
        }
    if (in >= 0)
        close(in);
    if (out >= 0)
        close(out);
    return n == 0 ? 0 : -1;
}

/* The reader r serves the 10-vector index whose ids below 5 were deleted
** and flushed: ids 5..9 only. */
static int
serves_the_five_after_the_deletes(keel_index *r)
{
    float v[DIM];
    int ok = keel_count(r) == 5 && keel_get(r, 2, v) == KEEL_ENOTFOUND &&
             keel_get(r, 7, v) == KEEL_OK;
    td_vec_of(2, DIM, v);
    keel_result res[10];
    size_t k = 0;
    ok = ok && keel_search(r, v, 10, NULL, res, &k) == KEEL_OK && k == 5;
    for (size_t i = 0; ok && i < k; i++)
        ok = res[i].id >= 5 && res[i].id < 10;
    return ok;
}

TEST(reader_never_follows_into_an_older_copy_of_its_index)
{
    /* A copy made before deletes, put back over the path after the
     * compaction that followed them: the same index, an older state. */
    char path[600], copy[600];
    snprintf(path, sizeof path, "%s", test_path("back.keel"));
    snprintf(copy, sizeof copy, "%s", test_path("back.copy"));
    keel_index *w = fill("back.keel", 10, NULL), *r;
    CHECK(w);
    CHECK_OK(keel_open_reader(path, NULL, &r));
    CHECK(copy_file(path, copy) == 0);
    for (uint64_t id = 0; id < 5; id++)
        CHECK_OK(keel_delete(w, id));
    CHECK_OK(keel_flush(w));
    CHECK(serves_the_five_after_the_deletes(r));
    CHECK_OK(keel_compact(w));
    CHECK(rename(copy, path) == 0);
    CHECK(serves_the_five_after_the_deletes(r));
    CHECK_ERR(keel_refresh(r), KEEL_EOPTIONS);
    CHECK_MSG_HAS("older state of this index (epoch 0, next id 10)");
    CHECK_MSG_HAS("(epoch 1, next id 10)");
    CHECK_MSG_HAS("help: ");
    CHECK_ERR(keel_check(r), KEEL_EOPTIONS);
    keel_stats st;
    CHECK_OK(keel_stat(r, &st));
    CHECK_U64(st.count, 5);
    CHECK(serves_the_five_after_the_deletes(r));

    /* The writer compacts again: its file replaces the copy, and the
     * reader follows it, two compactions on. */
    float v[DIM];
    td_vec_of(10, DIM, v);
    CHECK_OK(keel_add(w, v, NULL));
    CHECK_OK(keel_compact(w));
    CHECK_OK(keel_refresh(r));
    CHECK_U64(keel_count(r), 6);
    CHECK_ERR(keel_get(r, 2, v), KEEL_ENOTFOUND);
    CHECK_OK(keel_get(r, 10, v));
    CHECK_OK(keel_check(r));
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

TEST(reader_never_follows_into_a_file_that_went_back)
{
    /* Adds only: the copy has the reader's epoch but fewer ids. */
    char path[600], copy[600];
    snprintf(path, sizeof path, "%s", test_path("went.keel"));
    snprintf(copy, sizeof copy, "%s", test_path("went.copy"));
    keel_index *w = fill("went.keel", 10, NULL), *r;
    CHECK(w);
    CHECK_OK(keel_open_reader(path, NULL, &r));
    CHECK(copy_file(path, copy) == 0);
    float v[DIM];
    for (uint64_t i = 10; i < 15; i++) {
        td_vec_of(i, DIM, v);
        CHECK_OK(keel_add(w, v, NULL));
    }
    CHECK_OK(keel_flush(w));
    CHECK_U64(keel_count(r), 15);
    CHECK_OK(keel_compact(w));
    CHECK_OK(keel_close(w));
    /* The copy, opened as a writer, flushes deletes until its epoch is past
     * the reader's: it still has fewer ids than the reader served. */
    CHECK_OK(keel_open(copy, 0, NULL, &w));
    for (uint64_t id = 0; id < 3; id++) {
        CHECK_OK(keel_delete(w, id));
        CHECK_OK(keel_flush(w));
    }
    CHECK_OK(keel_close(w));
    CHECK(rename(copy, path) == 0);
    CHECK_U64(keel_count(r), 15);
    CHECK_OK(keel_get(r, 12, v));
    CHECK_ERR(keel_refresh(r), KEEL_EOPTIONS);
    CHECK_MSG_HAS("(epoch 3, next id 10)");
    CHECK_MSG_HAS("(epoch 0, next id 15)");
    CHECK_U64(keel_count(r), 15);
    CHECK_OK(keel_close(r));
    /* A reader opened now reads the file at the path. */
    CHECK_OK(keel_open_reader(path, NULL, &r));
    CHECK_U64(keel_count(r), 7);
    CHECK_OK(keel_close(r));
}

/* A system table whose stat says every file is only its fixed pages long:
** a reader's header copies then describe regions past the end, so it
** keeps the snapshot it has (as it does while a header is being written). */
static keel_os pinned_os;

static int
pinned_stat(int fd, keel_file_info *out)
{
    int rc = keel__os_posix.stat(fd, out);
    out->size = KEEL_DATA_OFF;
    return rc;
}

TEST(check_of_a_reader_two_delete_flushes_behind)
{
    keel_index *w = fill("behind.keel", 100, NULL), *r;
    CHECK(w);
    CHECK_OK(keel_open_reader(test_path("behind.keel"), NULL, &r));
    CHECK_OK(keel_check(r));
    CHECK_OK(keel_delete(w, 3));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_delete(w, 4));
    CHECK_OK(keel_flush(w));
    pinned_os = keel__os_posix;
    pinned_os.stat = pinned_stat;
    keel__os = &pinned_os;
    /* The snapshot says epoch 0; slots 3 and 4 carry marks 1 and 2. */
    int rc = keel_check(r);
    uint64_t n = keel_count(r);
    keel__os = &keel__os_posix;
    CHECK_OK(rc);
    CHECK_U64(n, 100);
    CHECK_OK(keel_check(r));
    CHECK_U64(keel_count(r), 98);
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

/* --- fork ---------------------------------------------------------------- */

/* Waits for child pid at most seconds; kills it if it is still running.
** Returns its exit status, or -1 if it had to be killed. */
static int
wait_child(pid_t pid, double seconds)
{
    double t0 = test_now();
    int status;
    while (test_now() - t0 < seconds) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
        usleep(2000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* Forks; the child closes idx and exits 0. The child's exit status, -1 if
** it hung. */
static int
fork_and_close(keel_index *idx)
{
    pid_t pid = fork();
    if (pid < 0)
        return -2;
    if (pid == 0) {
        keel_close(idx);
        _exit(0);
    }
    return wait_child(pid, 10);
}

typedef struct lock_holder {
    keel_index *idx;
    int which;            /* 0 write_lock, 1 swap_lock shared, 2 swap_lock
                           * exclusive, 3 pool_lock */
    int held, release;    /* atomic */
} lock_holder;

static void *
hold_lock(void *arg)
{
    lock_holder *h = arg;
    keel_index *idx = h->idx;
    switch (h->which) {
    case 0: pthread_mutex_lock(&idx->write_lock); break;
    case 1: pthread_rwlock_rdlock(&idx->swap_lock); break;
    case 2: pthread_rwlock_wrlock(&idx->swap_lock); break;
    default: pthread_mutex_lock(&idx->pool_lock); break;
    }
    __atomic_store_n(&h->held, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&h->release, __ATOMIC_ACQUIRE))
        usleep(1000);
    switch (h->which) {
    case 0: pthread_mutex_unlock(&idx->write_lock); break;
    case 1: case 2: pthread_rwlock_unlock(&idx->swap_lock); break;
    default: pthread_mutex_unlock(&idx->pool_lock); break;
    }
    return NULL;
}

typedef struct busy {
    keel_index *idx;
    int add;              /* add instead of searching */
    int stop;             /* atomic */
    uint64_t calls;       /* atomic */
} busy;

static void *
busy_main(void *arg)
{
    busy *b = arg;
    float v[DIM];
    uint64_t i = 0;
    while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) {
        td_vec_of(i++ % 500, DIM, v);
        keel_result r[10];
        size_t n;
        if (b->add)
            keel_add(b->idx, v, NULL);
        else
            keel_search(b->idx, v, 10, NULL, r, &n);
        __atomic_add_fetch(&b->calls, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

TEST(close_in_a_forked_child_never_waits_for_the_parents_threads)
{
    keel_index *w = fill("fork.keel", 2000, NULL), *r;
    CHECK(w);
    CHECK_OK(keel_open_reader(test_path("fork.keel"), NULL, &r));
    keel_index *handles[2] = {w, r};
    /* Each of the handle's locks held by another thread at the fork. */
    for (int h = 0; h < 2; h++)
        for (int which = 0; which < 4; which++) {
            lock_holder lh = {.idx = handles[h], .which = which};
            pthread_t t;
            CHECK(pthread_create(&t, NULL, hold_lock, &lh) == 0);
            while (!__atomic_load_n(&lh.held, __ATOMIC_ACQUIRE))
                usleep(1000);
            int st = fork_and_close(handles[h]);
            __atomic_store_n(&lh.release, 1, __ATOMIC_RELEASE);
            pthread_join(t, NULL);
            CHECK_MSG(st == 0, "%s, lock %d held at the fork: the child's "
                      "keel_close %s", h ? "reader" : "writer", which,
                      st < 0 ? "hung" : "failed");
        }
    /* Forks while threads search both handles and one adds. */
    busy b[3] = {{.idx = w}, {.idx = r}, {.idx = w, .add = 1}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        CHECK(pthread_create(&t[i], NULL, busy_main, &b[i]) == 0);
    int hung = 0;
    for (int i = 0; i < 40; i++) {
        usleep(2000);
        hung += fork_and_close(i % 2 ? r : w) != 0;
    }
    for (int i = 0; i < 3; i++) {
        __atomic_store_n(&b[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(t[i], NULL);
    }
    CHECK_EQ(hung, 0);
    CHECK(b[0].calls > 0 && b[1].calls > 0 && b[2].calls > 0);
    CHECK_OK(keel_check(w));
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

TEST(a_forked_child_does_not_keep_the_writer_lock)
{
    keel_index *w = fill("lock.keel", 100, NULL);
    CHECK(w);
    int pipefd[2], ready[2];
    CHECK(pipe(pipefd) == 0 && pipe(ready) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) { /* lives on, as a worker pool's process does */
        close(pipefd[1]);
        char c;
        alarm(20);
        /* Running: the fork handlers are done. */
        if (write(ready[1], "r", 1) != 1 || read(pipefd[0], &c, 1) < 0)
            _exit(1);
        _exit(0);
    }
    close(pipefd[0]);
    close(ready[1]);
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    close(ready[0]);
    CHECK_OK(keel_close(w));
    int reopened = keel_open(test_path("lock.keel"), 0, NULL, &w), second_rc = -1;
    if (reopened == KEEL_OK) {
        /* The lock still keeps a second writer out. */
        keel_index *second;
        second_rc = keel_open(test_path("lock.keel"), 0, NULL, &second);
        if (second_rc == KEEL_OK)
            keel_close(second);
    }
    CHECK(write(pipefd[1], "x", 1) == 1);
    close(pipefd[1]);
    CHECK_EQ(wait_child(pid, 10), 0);
    CHECK_MSG(reopened == KEEL_OK, "reopening the writer while the child "
              "lives got %d, not KEEL_OK", reopened);
    CHECK_U64(keel_count(w), 100);
    CHECK_OK(keel_close(w));
    CHECK_MSG(second_rc == KEEL_ELOCKED, "a second writer got %d, not "
              "KEEL_ELOCKED", second_rc);
}

/* A thread that forks children which live on, as fast as it can, while
** another thread opens and closes the writer. */
typedef struct forker {
    int stop;             /* atomic */
    int n;                /* children made (atomic: the opener waits for
                           * some before it stops) */
    pid_t pid[1024];
} forker;

static void *
forker_main(void *arg)
{
    forker *f = arg;
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE) && f->n < 1024) {
        pid_t p = fork();
        if (p == 0) { /* lives on until killed */
            alarm(30);
            for (;;)
                pause();
        }
        if (p > 0) {
            f->pid[f->n] = p;
            __atomic_store_n(&f->n, f->n + 1, __ATOMIC_RELEASE);
        }
        usleep(200);
    }
    return NULL;
}

TEST(a_fork_on_another_thread_never_keeps_the_writer_lock)
{
    /* A fork can fall anywhere in the writer's open and close: between the
     * open of the lock description and its listing for the fork handler,
     * or before the child's handler closed its copy when the parent closes
     * and opens again. Either way the parent's next open must get the
     * lock: only its own children could hold it. */
    keel_index *w = fill("forklock.keel", 10, NULL);
    CHECK(w);
    CHECK_OK(keel_close(w));
    forker *f = calloc(1, sizeof *f);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, forker_main, f) == 0);
    /* 300 opens at least, and on until the forker has made some
     * children (a loaded machine may not run it at once), within 20 s. */
    int iters = 0, rc = KEEL_OK;
    time_t until = time(NULL) + 20;
    for (; (iters < 300 || __atomic_load_n(&f->n, __ATOMIC_ACQUIRE) < 8) &&
           rc == KEEL_OK && time(NULL) < until;
         iters++) {
        rc = keel_open(test_path("forklock.keel"), 0, NULL, &w);
        if (rc == KEEL_OK)
            keel_close(w);
    }
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    for (int i = 0; i < f->n; i++) {
        kill(f->pid[i], SIGKILL);
        waitpid(f->pid[i], NULL, 0);
    }
    CHECK_MSG(rc == KEEL_OK, "open %d of the writer, with %d children "
              "forked beside it, got %d: %s", iters, f->n, rc, keel_errmsg());
    CHECK(f->n > 0);
    free(f);
}

TEST_MAIN()
