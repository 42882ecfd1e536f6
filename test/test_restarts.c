/* test_restarts.c -- a writer killed, restarted, or reopened by another
** name.
**
**   - A writer killed with SIGKILL mid-add leaves an undo log; reopening the
**     index through a hard link or after renaming it still undoes the
**     unflushed graph changes (the live page names the log), so every
**     committed vector finds itself, and the log is removed.
**   - So does renaming the directory that holds the index and its log.
**   - Opening a copy of the crashed index first applies the log to the copy
**     but leaves it (it belongs to the original), so the original then
**     recovers too.
**   - A reader open across a hundred writer restarts without a flush keeps
**     following the writer's regions and sees the next commit.
*/
#include "test.h"
#include "lib/testdata.h"

#include <signal.h>
#include <sys/wait.h>

#include "store/format.h"

#define DIM 32
#define COMMITTED 400

static int
finds_itself(keel_index *idx, uint64_t id)
{
    float v[DIM];
    keel_result r[1];
    size_t got;
    td_vec_embed(id, DIM, v);
    return keel_search(idx, v, 1, NULL, r, &got) == KEEL_OK && got == 1 &&
           r[0].id == id;
}

/* The child: COMMITTED vectors flushed, then near copies of them added
** without a flush (each pulls links of committed nodes towards itself)
** until the parent kills it. */
static void
child(const char *path, int report)
{
    keel_index *idx;
    keel_options o = {.threads = 1};
    if (keel_open(path, DIM, &o, &idx) != KEEL_OK)
        _exit(2);
    float *v = malloc((size_t)COMMITTED * DIM * sizeof *v);
    for (uint64_t i = 0; i < COMMITTED; i++)
        td_vec_embed(i, DIM, v + i * DIM);
    if (keel_add_batch(idx, v, COMMITTED, NULL, NULL) != KEEL_OK ||
        keel_flush(idx) != KEEL_OK)
        _exit(3);
    uint64_t seed = 99;
    for (uint64_t n = 0;; n++) {
        float w[DIM];
        td_vec_embed(n % COMMITTED, DIM, w);
        for (int j = 0; j < DIM; j++)
            w[j] += 1e-3f * test_randf(&seed);
        if (keel_add(idx, w, NULL) != KEEL_OK)
            _exit(4);
        if (n == 3 * COMMITTED && write(report, "x", 1) != 1)
            _exit(5);
    }
}

/* Runs the child to well inside its unflushed adds and kills it. */
static int
kill_mid_add(const char *path)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(p[0]);
        child(path, p[1]);
    }
    close(p[1]);
    char c;
    ssize_t n = read(p[0], &c, 1);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    close(p[0]);
    return n == 1 && WIFSIGNALED(status) ? 0 : -1;
}

/* Kills a writer of `made`, moves the file to `opened` (a hard link, or a
** rename), opens it there and checks what the commit holds. */
static void
reopen_by_another_name(const char *made, const char *opened, int rename_it)
{
    char undo[700];
    snprintf(undo, sizeof undo, "%s.undo", made);
    unlink(made);
    unlink(opened);
    CHECK_OK(kill_mid_add(made));
    CHECK_MSG(access(undo, F_OK) == 0, "the killed writer left no undo log");
    if (rename_it)
        CHECK(rename(made, opened) == 0);
    else
        CHECK(link(made, opened) == 0);
    keel_index *idx;
    CHECK_OK(keel_open(opened, DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), COMMITTED);
    CHECK_OK(keel_check(idx));
    int lost = 0;
    for (uint64_t id = 0; id < COMMITTED; id++)
        lost += !finds_itself(idx, id);
    CHECK_MSG(lost == 0, "%d of %d committed vectors do not find themselves",
              lost, COMMITTED);
    CHECK_MSG(access(undo, F_OK) != 0, "the undo log %s was left", undo);
    keel_close(idx);
}

TEST(a_killed_writer_is_undone_through_a_hard_link)
{
    reopen_by_another_name(test_path("linked.keel"), test_path("link.keel"), 0);
}

TEST(a_killed_writer_is_undone_after_a_rename)
{
    reopen_by_another_name(test_path("old-name.keel"),
                           test_path("new-name.keel"), 1);
}

/* Whether every committed vector finds itself in idx (count COMMITTED). */
static int
lost_of(keel_index *idx)
{
    int lost = 0;
    for (uint64_t id = 0; id < COMMITTED; id++)
        lost += !finds_itself(idx, id);
    return lost;
}

TEST(a_killed_writer_is_undone_after_its_directory_is_renamed)
{
    char d1[600], d2[600], made[700], moved[700], undo[720], left[720];
    snprintf(d1, sizeof d1, "%s", test_path("dir-before"));
    snprintf(d2, sizeof d2, "%s", test_path("dir-after"));
    CHECK(mkdir(d1, 0700) == 0);
    snprintf(made, sizeof made, "%s/x.keel", d1);
    snprintf(moved, sizeof moved, "%s/x.keel", d2);
    snprintf(undo, sizeof undo, "%s.undo", made);
    snprintf(left, sizeof left, "%s.undo", moved);
    CHECK_OK(kill_mid_add(made));
    CHECK_MSG(access(undo, F_OK) == 0, "the killed writer left no undo log");
    CHECK(rename(d1, d2) == 0);
    keel_index *idx;
    CHECK_OK(keel_open(moved, DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), COMMITTED);
    CHECK_OK(keel_check(idx));
    int lost = lost_of(idx);
    CHECK_MSG(lost == 0, "%d of %d committed vectors do not find themselves",
              lost, COMMITTED);
    CHECK_MSG(access(left, F_OK) != 0, "the undo log %s was left", left);
    keel_close(idx);
}

TEST(opening_a_copy_of_a_killed_writer_leaves_the_original_its_log)
{
    char made[700], copy[700], undo[720], copy_undo[720], cmd[1600];
    snprintf(made, sizeof made, "%s", test_path("original.keel"));
    snprintf(copy, sizeof copy, "%s", test_path("copy.keel"));
    snprintf(undo, sizeof undo, "%s.undo", made);
    snprintf(copy_undo, sizeof copy_undo, "%s.undo", copy);
    CHECK_OK(kill_mid_add(made));
    CHECK_MSG(access(undo, F_OK) == 0, "the killed writer left no undo log");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", made, copy);
    CHECK(system(cmd) == 0);
    /* The copy's bytes carry the log's tag and commit: the log applies to
     * it, but it belongs to the original. */
    keel_index *idx;
    CHECK_OK(keel_open(copy, DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), COMMITTED);
    CHECK_OK(keel_check(idx));
    int lost = lost_of(idx);
    CHECK_MSG(lost == 0, "the copy: %d of %d committed vectors do not find "
              "themselves", lost, COMMITTED);
    CHECK_OK(keel_close(idx));
    CHECK_MSG(access(undo, F_OK) == 0, "opening the copy removed the "
              "original's undo log %s", undo);
    CHECK_MSG(access(copy_undo, F_OK) != 0, "the copy made a log of its own");
    /* Opened again, the copy does not look for it any more. */
    CHECK_OK(keel_open(copy, DIM, NULL, &idx));
    CHECK_OK(keel_close(idx));
    CHECK_OK(keel_open(made, DIM, NULL, &idx));
    CHECK_U64(keel_count(idx), COMMITTED);
    CHECK_OK(keel_check(idx));
    lost = lost_of(idx);
    CHECK_MSG(lost == 0, "the original: %d of %d committed vectors do not "
              "find themselves", lost, COMMITTED);
    CHECK_MSG(access(undo, F_OK) != 0, "the undo log %s was left", undo);
    keel_close(idx);
}

TEST(a_reader_follows_a_hundred_writer_restarts)
{
    /* Small regions, so every restart places segments, chunks and id
     * tables, and restarts of different sizes place them differently. */
    keel__test_geometry(4, 2, 10, 1, 6);
    const char *path = test_path("restarts.keel");
    keel_index *w, *r;
    float v[64 * DIM];
    for (uint64_t i = 0; i < 64; i++)
        td_vec_embed(i, DIM, v + i * DIM);
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_OK(keel_add_batch(w, v, 8, NULL, NULL));
    CHECK_OK(keel_flush(w));
    keel_close(w);
    CHECK_OK(keel_open_reader(path, NULL, &r));
    for (int round = 0; round < 100; round++) {
        CHECK_OK(keel_open(path, DIM, NULL, &w));
        size_t n = round % 2 ? 60 : 3 + (size_t)round % 5;
        CHECK_OK(keel_add_batch(w, v, n, NULL, NULL));
        keel_result res[1];
        size_t got;
        CHECK_OK(keel_search(r, v, 1, NULL, res, &got)); /* maps the regions */
        keel_close(w);
    }
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_OK(keel_add_batch(w, v + 8 * DIM, 56, NULL, NULL));
    CHECK_OK(keel_flush(w));
    keel_close(w);
    CHECK_U64(keel_count(r), 64);
    for (uint64_t id = 0; id < 64; id++)
        CHECK_MSG(finds_itself(r, id), "the reader does not find id %llu",
                  (unsigned long long)id);
    CHECK_OK(keel_check(r));
    keel_close(r);
    keel__test_geometry(0, 0, 0, 0, 0);
}

TEST_MAIN()
