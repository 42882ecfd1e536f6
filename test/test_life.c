/* test_life.c -- an index over its life: compaction, the undo log after a
** killed writer, warm-up of an evicted file, huge pages.
*/
#include "test.h"
#include "lib/testdata.h"

#include "format.h" /* white-box: where the written bytes are */

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>

void keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                         uint32_t heap_base, uint32_t heap_doublings,
                         uint32_t idtab_log2);

#define DIM 24

static keel_index *
fill(const char *name, uint64_t n, const keel_options *o)
{
    keel_index *idx = NULL;
    if (keel_open(test_path(name), DIM, o, &idx) != KEEL_OK)
        return NULL;
    float *v = malloc(n * DIM * sizeof *v);
    for (uint64_t i = 0; i < n; i++)
        td_vec_of(i, DIM, v + i * DIM);
    int rc = keel_add_batch(idx, v, n, NULL, NULL);
    free(v);
    if (rc || keel_flush(idx)) {
        keel_close(idx);
        return NULL;
    }
    return idx;
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
        for (int prec = 0; prec < 2; prec++)
            for (size_t m = 0; m < sizeof ms / sizeof ms[0]; m++) {
                keel_header h;
                keel_geometry g;
                keel_seg_layout L;
                keel__header_new(&h, dims[d], ms[m], 0, prec);
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

TEST_MAIN()
