/* exercise.h -- everything fuzz_open and fuzz_corrupt do with a file of
** untrusted bytes: open it as a reader and use every read call, then open it
** as the writer (which may recover it) and add, delete, search, flush, check
** and compact, with the reader still open so it follows the writer.
**
** What it hunts: crashes, out-of-bounds reads and writes (ASan), undefined
** behaviour (UBSan), leaks (LeakSanitizer), hangs (libFuzzer -timeout),
** file descriptors left open, and three promises of the API about bad
** files:
**   - a writer open that fails as corrupt, not an index, a newer version or
**     a bad argument leaves the file byte-identical;
**   - a file a reader accepts is not refused by a writer as corrupt or as
**     not an index (both validate the same headers);
**   - a file whose newest header copy a newer keel wrote is refused by both
**     with KEEL_EVERSION.
** Results from a damaged file may be wrong; they are not checked.
*/
#ifndef KEEL_FUZZ_EXERCISE_H
#define KEEL_FUZZ_EXERCISE_H

#include "fuzz.h"
#include "keel.h"
#include "store/format.h" /* white-box: the version check reads the header */

#define EX_COMPACT 1u /* compact the file through the writer */
#define EX_CREATE  2u /* a blank file that needs dimensions: create it */

/* KEEL_FUZZ_DEBUG=1 in the environment: say what each open returned. */
static inline void
ex_debug(const char *what, int rc)
{
    static int on = -1;
    if (on < 0)
        on = getenv("KEEL_FUZZ_DEBUG") != NULL;
    if (on)
        fprintf(stderr, "exercise: %s: rc %d (%s)%s%s\n", what, rc,
                keel_strerror(rc), rc ? ": " : "", rc ? keel_errmsg() : "");
}

/* Fixed queries: zeros, ones, an alternating ramp. */
static inline void
ex_query(float *q, uint32_t dim, int which)
{
    for (uint32_t i = 0; i < dim; i++) {
        if (which == 0)
            q[i] = 0.0f;
        else if (which == 1)
            q[i] = 1.0f;
        else
            q[i] = (float)((int)(i % 7) - 3) * 0.25f;
    }
}

static inline int
ex_reject_odd(uint64_t id, void *arg)
{
    (void)arg;
    return (id & 1) == 0;
}

/* Every read call on idx; returns the id of the first result of the last
** unfiltered search (or UINT64_MAX), so the writer has a live id to use. */
static inline uint64_t
ex_read_calls(keel_index *idx, float *q, float *got)
{
    uint32_t dim = keel_dim(idx);
    keel_stats st = {0};
    uint64_t some = UINT64_MAX;
    (void)keel_stat(idx, &st);
    (void)keel_count(idx);
    (void)keel_check(idx);
    keel_result res[10 * 2];
    size_t n = 0, nb[2];
    for (int w = 0; w < 3; w++) {
        ex_query(q, dim, w);
        if (keel_search(idx, q, 10, NULL, res, &n) == KEEL_OK && n > 0)
            some = res[0].id;
    }
    keel_search_params p = {.ef = 8};
    ex_query(q, dim, 2);
    (void)keel_search(idx, q, 3, &p, res, &n);
    uint64_t allow[4] = {0, 1, some, st.next_id ? st.next_id - 1 : 0};
    p = (keel_search_params){.allowed = allow, .n_allowed = 4};
    (void)keel_search(idx, q, 10, &p, res, &n);
    p = (keel_search_params){.filter = ex_reject_odd};
    (void)keel_search(idx, q, 5, &p, res, &n);
    /* Two queries back to back (q has room for two of 4096). */
    ex_query(q + dim, dim, 1);
    (void)keel_search_batch(idx, q, 2, 10, NULL, res, nb);
    uint64_t ids[5] = {0, 1, some, st.next_id ? st.next_id - 1 : 0,
                       st.next_id};
    for (int i = 0; i < 5; i++)
        (void)keel_get(idx, ids[i], got);
    return some;
}

/* The writer's turn: adds, a delete, searches, a flush, a check and maybe
** a compaction, with a reader (if any) looking at the same file. */
static inline void
ex_write_calls(keel_index *wr, keel_index *rd, float *q, float *got,
               uint64_t some, unsigned flags)
{
    uint32_t dim = keel_dim(wr);
    keel_stats st = {0};
    keel_result res[10];
    size_t n = 0;
    (void)keel_stat(wr, &st);
    (void)keel_count(wr);
    ex_query(q, dim, 2);
    uint64_t id = UINT64_MAX;
    (void)keel_add(wr, q, &id);
    if (keel_search(wr, q, 10, NULL, res, &n) == KEEL_OK && n > 0 &&
        res[n - 1].id != id)
        some = res[n - 1].id;
    if (some != UINT64_MAX) {
        (void)keel_add_with_id(wr, some, q); /* in use, if the file says so */
        (void)keel_delete(wr, some);
        (void)keel_add_with_id(wr, some, q); /* the delete made room */
    }
    (void)keel_add_with_id(wr, st.next_id + 7, q);
    float *batch = malloc(3 * (size_t)dim * sizeof *batch);
    if (!batch)
        fuzz_fail("out of memory");
    for (int b = 0; b < 3; b++)
        ex_query(batch + (size_t)b * dim, dim, b);
    batch[0] = 0.5f; /* keep a cosine index happy: no zero vector */
    (void)keel_add_batch(wr, batch, 3, NULL, NULL);
    free(batch);
    (void)keel_delete(wr, id);
    ex_query(q, dim, 1);
    (void)keel_search(wr, q, 10, NULL, res, &n);
    (void)keel_get(wr, some, got);
    (void)keel_count(wr);
    if (rd) {
        /* The reader routes through the writer's unflushed nodes. */
        (void)keel_search(rd, q, 10, NULL, res, &n);
        (void)keel_count(rd);
    }
    (void)keel_flush(wr);
    ex_debug("keel_check after the writer's flush", keel_check(wr));
    if (flags & EX_COMPACT) {
        (void)keel_compact(wr);
        (void)keel_search(wr, q, 10, NULL, res, &n);
        (void)keel_check(wr);
        (void)keel_add(wr, q, NULL);
        (void)keel_flush(wr);
    }
    if (rd) {
        (void)keel_refresh(rd);
        (void)keel_search(rd, q, 10, NULL, res, &n);
        (void)keel_get(rd, some, got);
        (void)keel_count(rd);
        (void)keel_check(rd);
    }
    (void)keel_stat(wr, &st);
}

/* Whether the newest header copy, by its sequence word, says a newer keel
** wrote it (read_version above ours): such a file is that keel's now, and
** must be refused with KEEL_EVERSION, not opened at its older copy (test/
** fuzz/crashes/fuzz_open-newer-copy-ignored). */
static inline int
ex_newest_is_newer(const uint8_t *bytes, size_t len)
{
    if (len < 2 * KEEL_PAGE_SLOT)
        return 0;
    keel_header *h = malloc(sizeof *h);
    if (!h)
        fuzz_fail("out of memory");
    int newer = 0;
    for (int c = 0; c < 2 && !newer; c++) {
        const uint8_t *p = bytes + c * KEEL_PAGE_SLOT;
        const uint8_t *o = bytes + (1 - c) * KEEL_PAGE_SLOT;
        if (memcmp(p, KEEL_MAGIC, 8) != 0 ||
            keel__get32(p + HO_READ_VERSION) <= KEEL_FORMAT_VERSION)
            continue;
        newer = keel__header_decode(o, len, h, NULL, 0) != KEEL_OK ||
                h->sequence < keel__get64(p + HO_SEQUENCE);
    }
    free(h);
    return newer;
}

static inline int
ex_refusal(int rc)
{
    return rc == KEEL_ECORRUPT || rc == KEEL_ENOTINDEX ||
           rc == KEEL_EVERSION || rc == KEEL_EINVAL || rc == KEEL_EDIM ||
           rc == KEEL_EOPTIONS;
}

/* Writes bytes to path (and undo, if not NULL, to its undo log) and runs
** the whole sequence on it. */
static inline void
ex_run(const char *path, const uint8_t *bytes, size_t len,
       const uint8_t *undo, size_t undo_len, unsigned flags)
{
    fuzz_remove(path);
    fuzz_write_file(path, bytes, len);
    if (undo) {
        char undo_path[600];
        snprintf(undo_path, sizeof undo_path, "%s.undo", path);
        fuzz_write_file(undo_path, undo, undo_len);
    }
    int fd0 = fuzz_lowest_fd();
    float *q = malloc(2 * 4096 * sizeof *q);
    float *got = malloc(2 * 4096 * sizeof *got);
    if (!q || !got)
        fuzz_fail("out of memory");

    keel_index *rd = NULL, *wr = NULL;
    keel_options ro = {.ef_search = 24};
    int rrc = keel_open_reader(path, &ro, &rd);
    ex_debug("keel_open_reader", rrc);
    uint64_t some = UINT64_MAX;
    keel_options wo = {.threads = 1, .ef_construction = 24};
    const keel_options *wop = NULL;
    if (rrc == KEEL_OK) {
        some = ex_read_calls(rd, q, got);
        keel_stats st;
        if (keel_stat(rd, &st) == KEEL_OK) {
            wo.metric = st.metric;
            wo.precision = st.precision;
            wo.max_connections = st.max_connections;
            wop = &wo;
        }
    }

    int wrc = keel_open(path, 0, wop, &wr);
    ex_debug("keel_open", wrc);
    if (ex_newest_is_newer(bytes, len) &&
        (rrc != KEEL_EVERSION || wrc != KEEL_EVERSION))
        fuzz_fail("the newest header copy was written by a newer keel, but "
                  "keel_open_reader gave rc %d and keel_open rc %d, not "
                  "KEEL_EVERSION (%d)", rrc, wrc, KEEL_EVERSION);
    if (wrc != KEEL_OK && ex_refusal(wrc)) {
        size_t now_len = 0;
        uint8_t *now = fuzz_read_file(path, &now_len);
        if (!now || now_len != len || memcmp(now, bytes, len) != 0)
            fuzz_fail("keel_open refused the file (rc %d: %s) but changed it "
                      "(%zu bytes before, %zu after)\n%s", wrc,
                      keel_strerror(wrc), len, now ? now_len : 0,
                      keel_errmsg());
        free(now);
    }
    if (rrc == KEEL_OK && (wrc == KEEL_ECORRUPT || wrc == KEEL_ENOTINDEX))
        fuzz_fail("a reader opened the file, but the writer says rc %d (%s)"
                  "\n%s", wrc, keel_strerror(wrc), keel_errmsg());
    if (wrc == KEEL_EINVAL && (flags & EX_CREATE))
        wrc = keel_open(path, 3, NULL, &wr); /* blank: create it */
    if (wrc == KEEL_OK) {
        ex_write_calls(wr, rd, q, got, some, flags);
        keel_close(wr);
    }
    keel_close(rd);
    free(q);
    free(got);
    int fd1 = fuzz_lowest_fd();
    if (fd1 != fd0)
        fuzz_fail("a file descriptor was left open: lowest free %d, was %d",
                  fd1, fd0);
    fuzz_remove(path);
}

#endif /* KEEL_FUZZ_EXERCISE_H */
