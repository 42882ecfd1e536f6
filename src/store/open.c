/* open.c -- opening and closing the index file: a writer's open (create or
** lock the file, read its headers, check the caller's options against them,
** map it, then recover an interrupted delete flush and the undo log), a
** reader's open of a local file or of a published index over its page
** cache, close, and the release of what a forked child inherited.
**
** read_headers decides what a file is: the newest valid header copy wins; a
** copy a newer keel wrote, or a whole (checksummed) copy that describes what
** the file does not hold, refuses the file rather than open an older copy;
** a short file whose copies are blank is a creation cut short, which a
** writer makes again.
**
** The store's invariant (6) (commit.c) is kept here: recovery runs only in
** a writer, in recover_intent, before the undo log is recovered. A writer
** holds the file's lock (os.h) from open to close; its regions are
** unmapped only at close (region.c's invariant 9).
*/
#include "store/store_int.h"
#include "store/undo.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- headers ----------------------------------------------------------- */

/* Reads both copies; picks the newest valid. *which gets 0 (A) or 1 (B).
** Returns KEEL_OK, or the most telling failure with a message. */
static int
read_headers(int fd, const char *path, uint64_t file_len, keel_header *out,
             int *which, int *fresh)
{
    uint8_t *buf = keel__malloc(2 * (size_t)KEEL_PAGE_SLOT);
    keel_header *h = keel__malloc(2 * sizeof *h);
    if (!buf || !h) {
        keel__free(buf);
        keel__free(h);
        return KEEL_ENOMEM;
    }
    memset(buf, 0, 2 * (size_t)KEEL_PAGE_SLOT);
    ssize_t n = keel__os->pread(fd, buf, 2 * (size_t)KEEL_PAGE_SLOT, 0);
    int rc;
    if (n < 0) {
        rc = keel__store_io_fail((int)n, "reading the header of", path);
        goto out;
    }
    char why[2][160];
    int r[2];
    for (int c = 0; c < 2; c++)
        r[c] = keel__header_decode(buf + c * KEEL_PAGE_SLOT, file_len, &h[c],
                                   why[c], sizeof why[c]);
    *fresh = 0;
    /* A copy that a newer keel wrote means the file is that keel's now:
     * opening the older copy would silently go back in time. */
    if (r[0] == KEEL_EVERSION || r[1] == KEEL_EVERSION) {
        rc = keel__fail(KEEL_EVERSION,
                        "%s was written by a newer keel (%s)\n"
                        "help: open it with a newer keel", path,
                        r[0] == KEEL_EVERSION ? why[0] : why[1]);
        goto out;
    }
    /* A copy keel wrote whole (its checksum matches) that describes
     * something this file does not hold means the file was cut short or
     * damaged: opening the other, older copy would silently lose commits. */
    for (int c = 0; c < 2; c++)
        if (r[c] == KEEL_ECORRUPT && h[c].checksum_ok) {
            rc = KEEL_CORRUPT("%s: header copy %c: %s", path, "AB"[c], why[c]);
            goto out;
        }
    if (r[0] == KEEL_OK && r[1] == KEEL_OK) {
        if (h[0].sequence == h[1].sequence) {
            rc = KEEL_CORRUPT("%s holds two header copies with sequence %llu",
                              path, (unsigned long long)h[0].sequence);
            goto out;
        }
        *which = h[1].sequence > h[0].sequence;
    } else if (r[0] == KEEL_OK || r[1] == KEEL_OK) {
        *which = r[1] == KEEL_OK;
    } else {
        /* No valid copy. A creation cut short leaves a short file whose
         * copies are zero or start with the magic. */
        int blank = file_len <= KEEL_DATA_OFF;
        for (int c = 0; c < 2 && blank; c++) {
            const uint8_t *p = buf + c * KEEL_PAGE_SLOT;
            int zero = 1;
            for (size_t j = 0; j < 4096 && zero; j++)
                zero = p[j] == 0;
            blank = zero || memcmp(p, KEEL_MAGIC, 8) == 0;
        }
        if (blank) {
            *fresh = 1;
            rc = KEEL_OK;
        } else if (r[0] == KEEL_ENOTINDEX && r[1] == KEEL_ENOTINDEX) {
            rc = keel__fail(KEEL_ENOTINDEX,
                            "%s is not a keel index (no keel header)\n"
                            "help: give the path of an index, or a path where "
                            "none exists yet to create one", path);
        } else {
            rc = KEEL_CORRUPT("%s has no valid header: %s; %s", path,
                              why[0], why[1]);
        }
        goto out;
    }
    *out = h[*which];
    rc = KEEL_OK;
out:
    keel__free(buf);
    keel__free(h);
    return rc;
}

/* --- a store's life: new, close, and release in a forked child --------- */

static keel_store *
store_new(int fd, const char *path, int writer)
{
    keel_store *st = keel__calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->fd = fd;
    st->writer = writer;
    st->path = strdup(path);
    st->hdr_buf = writer ? keel__malloc(KEEL_PAGE_SLOT) : NULL;
    if (!st->path || (writer && !st->hdr_buf)) {
        free(st->path);
        keel__free(st->hdr_buf);
        keel__free(st);
        keel__fail(KEEL_ENOMEM, "out of memory\nhelp: free memory");
        return NULL;
    }
    pthread_mutex_init(&st->snap_lock, NULL);
    pthread_mutex_init(&st->undo_lock, NULL);
    st->undo_fd = -1;
    return st;
}

/* Unmaps a mapping of st's file; a store that only borrows its cache
** takes it out of the cache's regions first (the cache outlives it). */
static void
unmap_store(keel_store *st, void *addr, size_t len)
{
    if (st->remote && st->remote_lent)
        keel__cache_unregister(st->remote, addr, len);
    keel__os->unmap(addr, len);
}

void
keel__store_close(keel_store *st)
{
    if (!st)
        return;
    for (uint32_t k = 0; k < st->nseg; k++)
        if (st->seg[k].base)
            unmap_store(st, st->seg[k].base, (size_t)st->seg[k].bytes);
    for (uint32_t c = 0; c < st->nheap; c++)
        if (st->heap[c].base)
            unmap_store(st, st->heap[c].base, (size_t)st->heap[c].bytes);
    for (uint32_t t = 0; t < st->nidtabs; t++)
        unmap_store(st, st->idtabs[t].tab, (size_t)(4ull << st->idtabs[t].log2));
    for (size_t r = 0; r < st->nretired; r++)
        unmap_store(st, st->retired[r].addr, st->retired[r].len);
    keel__free(st->retired);
    if (st->pages)
        unmap_store(st, st->pages, KEEL_DATA_OFF);
    if (st->live)
        unmap_store(st, st->live, KEEL_PAGE_SLOT);
    for (uint32_t k = 0; k < KEEL_MAX_SEGMENTS; k++) {
        keel__free(st->pend_bits[k]);
        keel__free(st->saved_bits[k]);
        keel__free(st->journal_bits[k]);
    }
    /* An unflushed writer leaves its undo log for the next open. */
    if (st->undo_fd >= 0)
        keel__os->close(st->undo_fd);
    keel__free(st->undo_saved);
    keel__free(st->undo_buf);
    keel__free(st->undo_path);
    keel__free(st->undo_for);
    keel__free(st->hdr_buf);
    pthread_mutex_destroy(&st->undo_lock);
    keel__free(st->pend_list);
    if (st->fd >= 0 && !st->remote)
        keel__os->close(st->fd);
    if (!st->remote_lent)
        keel__cache_close(st->remote); /* after every mapping of its memfd */
    pthread_mutex_destroy(&st->snap_lock);
    free(st->path);
    keel__free(st);
}

void
keel__store_release_forked(keel_store *st)
{
    /* A remote store's mappings never reach a child (cache.h invariant 5):
     * its addresses may hold the child's own mappings by now. */
    if (!st || st->remote)
        return;
    for (uint32_t k = 0; k < st->nseg; k++)
        if (st->seg[k].base)
            keel__os->unmap(st->seg[k].base, (size_t)st->seg[k].bytes);
    for (uint32_t c = 0; c < st->nheap; c++)
        if (st->heap[c].base)
            keel__os->unmap(st->heap[c].base, (size_t)st->heap[c].bytes);
    for (uint32_t t = 0; t < st->nidtabs; t++)
        keel__os->unmap(st->idtabs[t].tab, (size_t)(4ull << st->idtabs[t].log2));
    for (size_t r = 0; r < st->nretired; r++)
        keel__os->unmap(st->retired[r].addr, st->retired[r].len);
    if (st->pages)
        keel__os->unmap(st->pages, KEEL_DATA_OFF);
    if (st->live)
        keel__os->unmap(st->live, KEEL_PAGE_SLOT);
    if (st->undo_fd >= 0)
        keel__os->close(st->undo_fd);
    if (st->fd >= 0)
        keel__os->close(st->fd);
}

/* --- a writer's open --------------------------------------------------- */

static int
map_pages(keel_store *st)
{
    void *p;
    int err = keel__os->map(st->fd, 0, KEEL_DATA_OFF, 0, &p);
    if (err)
        return keel__store_io_fail(err, "mapping the header of", st->path);
    st->pages = p;
    if (st->remote && (err = keel__cache_register(st->remote, p,
                                                  KEEL_DATA_OFF, 0)))
        return err;
    if (st->writer) {
        err = keel__os->map(st->fd, KEEL_LIVE_OFF, KEEL_PAGE_SLOT, 1, &p);
        if (err)
            return keel__store_io_fail(err, "mapping the live page of",
                                       st->path);
        st->live = p;
    }
    return KEEL_OK;
}

/* Writes a new, empty index into fd (length <= KEEL_DATA_OFF). */
static int
init_file(keel_store *st, const keel_store_params *p)
{
    keel_header *h = &st->work;
    keel__header_new(h, p->dim, p->M ? p->M : 16, p->metric, p->precision,
                     p->codes);
    memcpy(h->identity, p->identity, KEEL_IDENTITY_BYTES);
    int err = 0;
    if (!keel__identity_present(h->identity) &&
        (err = keel__os->random(h->identity, KEEL_IDENTITY_BYTES)))
        return keel__store_io_fail(err, "making an identity for", st->path);
    err = keel__os->truncate(st->fd, KEEL_DATA_OFF);
    if (!err)
        err = keel__os->allocate(st->fd, 0, KEEL_DATA_OFF);
    if (err)
        return keel__store_io_fail(err, "creating", st->path);
    uint8_t *zero = keel__calloc(1, KEEL_PAGE_SLOT);
    if (!zero)
        return KEEL_ENOMEM;
    ssize_t n = keel__os->pwrite(st->fd, zero, KEEL_PAGE_SLOT, KEEL_LIVE_OFF);
    keel__free(zero);
    if (n < 0)
        return keel__store_io_fail((int)n, "creating", st->path);
    h->sequence = 0;
    int rc = keel__store_write_header(st, h, 1);
    h->sequence = 1;
    if (!rc)
        rc = keel__store_write_header(st, h, 0);
    if (!rc)
        rc = keel__store_sync(st);
    if (rc)
        return rc;
    char *dir = st->memory ? NULL : strdup(st->path);
    if (dir) {
        char *slash = strrchr(dir, '/');
        if (slash == dir)
            slash[1] = '\0';
        else if (slash)
            *slash = '\0';
        else
            strcpy(dir, ".");
        err = keel__os->sync_dir(dir);
        free(dir);
        if (err)
            return keel__store_poison(st, err, "syncing the directory of");
    }
    st->newest_copy = 0;
    st->file_len = KEEL_DATA_OFF;
    return KEEL_OK;
}

/* Recovery rule (6): undo the marks of an interrupted delete flush. */
static int
recover_intent(keel_store *st)
{
    keel_header *h = &st->work;
    for (uint64_t s = 0; s < h->count; s++) {
        uint64_t *m = keel__store_mark(st, s);
        if (KEEL_LOAD_RELAXED(m) > h->epoch &&
            keel__mutant != KEEL_MUT_RECOVERY_KEEPS_MARKS)
            KEEL_STORE_RELAXED(m, (uint64_t)0);
    }
    int rc = keel__store_sync(st);
    if (rc)
        return rc;
    h->pending_epoch = 0;
    h->sequence++;
    int copy = 1 - st->newest_copy;
    if ((rc = keel__store_write_header(st, h, copy)) ||
        (rc = keel__store_sync(st)))
        return rc;
    st->newest_copy = copy;
    return KEEL_OK;
}

static void
live_reset(keel_store *st)
{
    uint64_t *gen = (uint64_t *)(void *)(st->live + LO_GENERATION);
    KEEL_STORE_RELAXED(gen, KEEL_LOAD_RELAXED(gen) + 1);
    KEEL_STORE_RELEASE((uint64_t *)(void *)(st->live + LO_ROUTING),
                       st->work.count);
    keel__store_live_put_regions(st);
}

static int
check_params(keel_store *st, const keel_store_params *p)
{
    const keel_header *h = &st->work;
    static const char *metrics[] = {"l2", "cosine", "ip"};
    static const char *precisions[] = {"f32", "f16"};
    static const char *code_kinds[] = {"none", "i8", "i4"};
    if (p->dim && p->dim != h->dim)
        return keel__fail(KEEL_EDIM,
                          "the index at %s holds vectors of %u dimensions, "
                          "not %u\nhelp: use the index's %u dimensions, or "
                          "create a new index at another path", st->path, h->dim, p->dim, h->dim);
    if (!p->have_options)
        return KEEL_OK;
    if (p->metric != h->metric)
        return keel__fail(KEEL_EOPTIONS,
                          "the index at %s was created with metric %s, not %s\n"
                          "help: use metric %s, the file's; the metric of a "
                          "file never changes", st->path, metrics[h->metric],
                          metrics[p->metric], metrics[h->metric]);
    if (p->precision != h->precision)
        return keel__fail(KEEL_EOPTIONS,
                          "the index at %s was created with precision %s, not "
                          "%s\nhelp: use precision %s, the file's; the "
                          "precision of a file never changes", st->path,
                          precisions[h->precision], precisions[p->precision],
                          precisions[h->precision]);
    if (p->codes != h->codes)
        return keel__fail(KEEL_EOPTIONS,
                          "the index at %s was created with traversal codes "
                          "%s, not %s\nhelp: use codes %s, the file's, or "
                          "KEEL_FILE_OPTIONS to take the file's own; "
                          "compaction keeps them too", st->path,
                          code_kinds[h->codes], code_kinds[p->codes],
                          code_kinds[h->codes]);
    if (p->M && p->M != h->M)
        return keel__fail(KEEL_EOPTIONS,
                          "the index at %s was created with max_connections "
                          "(M) %u, not %u\nhelp: M never changes once an "
                          "index is made: use %u, or leave it unset to take "
                          "the file's", st->path, h->M, p->M,
                          h->M);
    return KEEL_OK;
}

/* Refuses what is at path because it is not a regular file: a directory is
** a wrong argument (KEEL_EINVAL); a FIFO, device or socket cannot hold an
** index (KEEL_ENOTINDEX). Nothing was read from it. */
int
keel__not_regular_fail(const char *path, int type)
{
    static const char *const what[] = {
        [KEEL_FILE_REGULAR] = "a regular file",
        [KEEL_FILE_DIRECTORY] = "a directory",
        [KEEL_FILE_FIFO] = "a FIFO (named pipe)",
        [KEEL_FILE_CHAR_DEVICE] = "a character device",
        [KEEL_FILE_BLOCK_DEVICE] = "a block device",
        [KEEL_FILE_SOCKET] = "a socket",
        [KEEL_FILE_OTHER] = "not a regular file",
    };
    if (type == KEEL_FILE_DIRECTORY)
        return keel__fail(KEEL_EINVAL,
                          "%s is a directory\nhelp: give the path of an index "
                          "file, such as %s/vectors.keel", path, path);
    if (type < 0 || type > KEEL_FILE_OTHER)
        type = KEEL_FILE_OTHER;
    return keel__fail(KEEL_ENOTINDEX,
                      "%s is %s, not an index file\nhelp: an index is a "
                      "regular file; give the path of an index, or of a new "
                      "file for keel to create", path, what[type]);
}

static int
open_fail_errno(int err, const char *path)
{
    if (err == -ENOENT)
        return keel__fail(KEEL_ENOTFOUND,
                          "there is no index at %s\n"
                          "help: check the path; opening it as a writer creates "
                          "the index, a reader needs an existing one", path);
    if (err == -EISDIR)
        return keel__fail(KEEL_EINVAL,
                          "%s is a directory\nhelp: give the path of an index "
                          "file, such as %s/vectors.keel", path, path);
    return keel__store_io_fail(err, "opening", path);
}

int
keel__store_open_writer(const char *path, const keel_store_params *p,
                        keel_store **out)
{
    int fd = -1, created = 0, rc;
    keel_file_info pre;
    if (keel__is_memory(path)) { /* a new file with no name: nothing to
                                  * lock, nothing to recover */
        if ((fd = keel__os->memfd("keel:memory")) < 0)
            return keel__store_io_fail(fd, "creating the file", path);
        created = 1;
        goto opened;
    }
    /* Refuse a FIFO, device or socket before opening it: opening a device
     * for writing can itself do something. The fstat below still decides. */
    if (keel__os->stat_path(path, &pre) == 0 && !pre.is_regular &&
        pre.type != KEEL_FILE_DIRECTORY)
        return keel__not_regular_fail(path, pre.type);
    for (int attempt = 0;; attempt++) {
        fd = keel__os->open(path, KEEL_OPEN_WRITE);
        if (fd == -ENOENT) {
            if (!p->dim)
                return open_fail_errno(-ENOENT, path);
            fd = keel__os->open(path, KEEL_OPEN_WRITE | KEEL_OPEN_CREATE);
            if (fd == -EEXIST && attempt < 5)
                continue;
            if (fd == -ENOENT)
                return keel__fail(KEEL_ENOTFOUND,
                                  "the directory of %s does not exist\n"
                                  "help: create the directory first", path);
            created = fd >= 0;
        }
        if (fd < 0)
            return open_fail_errno(fd, path);
        int err = keel__os->lock(fd);
        if (err) {
            /* Who holds it, if the system says (a table without the call,
            ** as a test's, says nothing). */
            long holder = -1;
            char who[64] = "in this process or another";
            if ((err == -EWOULDBLOCK || err == -EAGAIN) &&
                keel__os->lock_holder &&
                keel__os->lock_holder(fd, &holder) == 0) {
                if (holder == 0)
                    snprintf(who, sizeof who, "in this process");
                else
                    snprintf(who, sizeof who, "by process %ld", holder);
            }
            keel__os->close(fd);
            if (err == -EWOULDBLOCK || err == -EAGAIN)
                return keel__fail(KEEL_ELOCKED,
                                  "the index at %s is open for writing "
                                  "elsewhere, %s\n"
                                  "help: an index has one writer at a time; "
                                  "close the other writer, or open a reader "
                                  "to search while it "
                                  "writes", path, who);
            return keel__store_io_fail(err, "locking", path);
        }
        /* A compaction may have renamed a new file over the path between
         * our open and our lock: then lock that one instead. */
        keel_file_info a, b;
        err = keel__os->stat(fd, &a);
        if (err) {
            keel__os->close(fd);
            return keel__store_io_fail(err, "checking the file type of", path);
        }
        if (keel__os->stat_path(path, &b) == 0 &&
            (a.dev != b.dev || a.ino != b.ino) && attempt < 5) {
            keel__os->close(fd);
            continue;
        }
        if (!a.is_regular) {
            keel__os->close(fd);
            return keel__not_regular_fail(path, a.type);
        }
        break;
    }
opened:;
    keel_store *st = store_new(fd, path, 1);
    if (!st) {
        keel__os->close(fd);
        return KEEL_ENOMEM;
    }
    st->memory = created && keel__is_memory(path);
    keel_file_info fi;
    int err = keel__os->stat(fd, &fi);
    if (err) {
        rc = keel__store_io_fail(err, "reading the size of", path);
        goto fail;
    }
    st->file_len = fi.size;
    int fresh = 1, which = 0;
    if (!created && fi.size > 0) {
        rc = read_headers(fd, path, fi.size, &st->work, &which, &fresh);
        if (rc)
            goto fail;
    }
    if (fresh) {
        if (!p->dim) {
            rc = keel__fail(KEEL_EINVAL,
                            "%s holds no index yet and dimensions is 0\n"
                            "help: give the vectors' dimensions to create it",
                            path);
            goto fail;
        }
        if ((rc = init_file(st, p)))
            goto fail;
    } else {
        st->newest_copy = which;
        if (st->work.write_version > KEEL_FORMAT_VERSION) {
            rc = keel__fail(KEEL_EVERSION,
                            "%s was written by a newer keel (write version "
                            "%u)\nhelp: open it as a reader to "
                            "search it, or write it with a newer keel", path,
                            st->work.write_version);
            goto fail;
        }
        if ((rc = check_params(st, p)))
            goto fail;
    }
    keel__geometry_init(&st->g, &st->work);
    st->metric = st->work.metric;
    st->precision = st->work.precision;
    if ((rc = map_pages(st)) ||
        (rc = keel__store_map_committed(st, &st->work)))
        goto fail;
    if (st->work.pending_epoch && (rc = recover_intent(st)))
        goto fail;
    if ((rc = keel__undo_recover(st)))
        goto fail;
    st->committed = st->work;
    st->newest_seq = st->work.sequence;
    st->pub_deleted = st->work.deleted;
    st->pub_next_id = st->work.next_id;
    st->pub_sequence = st->work.sequence;
    st->nslots = st->next_slot = st->work.count;
    st->epoch_now = st->work.epoch;
    st->entry_packed = (uint64_t)st->work.max_level << 32 | st->work.entry;
    /* Disk space below N is written, so reserved. */
    for (uint32_t k = 0; k < st->nseg; k++) {
        uint64_t first = keel__seg_first_slot(&st->g, k);
        st->seg[k].reserved = st->work.count > first
            ? KEEL_MIN(st->work.count - first, st->seg[k].slots) : 0;
    }
    uint32_t hc = (uint32_t)(st->work.heap_used >> 32);
    for (uint32_t c = 0; c < st->nheap; c++)
        st->heap[c].reserved = c < hc ? st->heap[c].bytes
                             : c == hc ? (st->work.heap_used & 0xFFFFFFFFu) : 0;
    live_reset(st);
    *out = st;
    return KEEL_OK;
fail:
    keel__store_close(st);
    return rc;
}

/* --- readers ----------------------------------------------------------- */

int
keel__store_open_reader(const char *path, keel_store **out)
{
    keel_file_info pre;
    if (keel__os->stat_path(path, &pre) == 0 && !pre.is_regular)
        return keel__not_regular_fail(path, pre.type);
    int fd = keel__os->open(path, KEEL_OPEN_READ);
    if (fd < 0)
        return open_fail_errno(fd, path);
    keel_store *st = store_new(fd, path, 0);
    if (!st) {
        keel__os->close(fd);
        return KEEL_ENOMEM;
    }
    keel_file_info fi;
    int rc, err = keel__os->stat(fd, &fi);
    if (err) {
        rc = keel__store_io_fail(err, "reading the size of", path);
        goto fail;
    }
    if (!fi.is_regular) {
        rc = keel__not_regular_fail(path, fi.type);
        goto fail;
    }
    int which, fresh;
    if ((rc = read_headers(fd, path, fi.size, &st->snap, &which, &fresh)))
        goto fail;
    if (fresh) {
        rc = keel__fail(KEEL_ENOTINDEX,
                        "%s is not a keel index yet (its creation did not "
                        "finish)\nhelp: open it as a writer to create it",
                        path);
        goto fail;
    }
    keel__geometry_init(&st->g, &st->snap);
    st->metric = st->snap.metric;
    st->precision = st->snap.precision;
    memcpy(st->identity, st->snap.identity, KEEL_IDENTITY_BYTES);
    st->snap.sequence = 0; /* take the snapshot through the mapping */
    if ((rc = map_pages(st)) || (rc = keel__store_refresh_snapshot(st)))
        goto fail;
    *out = st;
    return KEEL_OK;
fail:
    keel__store_close(st);
    return rc;
}

static int open_remote_on(keel_cache *c, int lent, int warm,
                          keel_store **out);

int
keel__store_open_remote(keel_cache *c, int warm, keel_store **out)
{
    return open_remote_on(c, 0, warm, out);
}

int
keel__store_reopen_remote(keel_store *old, keel_store **out)
{
    keel_store *st;
    int rc = open_remote_on(old->remote, 1, 0, &st);
    if (rc)
        return rc;
    st->remote_lent = 0;
    old->remote_lent = 1;
    *out = st;
    return KEEL_OK;
}

/* A published index's heap (the upper layers' lists, which every search's
** descent reads first, each list not in a fault and a round trip of its
** own), up to KEEL_REMOTE_HEAP_MAX bytes of it, brought into the page
** cache in one batch at open, unless batch reads are off or warm is about
** to start (it brings the heap first, a round trip sooner). Advice: a fetch
** that fails is left to the search that needs the page. (GloVe-340k, 2 MiB
** of heap, 20 ms per request: 7 of the first search's 19 faults were in
** the heap; doc/object_storage_bench.md.) */
static void
bring_heap(keel_store *st)
{
    if (!keel__br_enabled())
        return;
    keel_br_range r[KEEL_MAX_HEAP_CHUNKS];
    size_t n = 0;
    uint64_t total = 0, hu = st->snap.heap_used;
    uint32_t hc = (uint32_t)(hu >> 32);
    for (uint32_t k = 0; k < st->nheap && k <= hc; k++) {
        uint64_t len = k < hc ? st->heap[k].bytes : (hu & 0xFFFFFFFFu);
        len = KEEL_MIN(len, KEEL_REMOTE_HEAP_MAX - total);
        if (len)
            r[n++] = (keel_br_range){st->heap[k].off, len, NULL};
        total += len;
    }
    keel_br_scratch s = {0};
    if (n && keel__cache_bring(st->remote, r, n, &s, NULL))
        keel__clear_error();
    keel__br_scratch_free(&s);
}

/* A store over c's memfd; lent: c stays with its owner whatever happens;
** warm: no heap batch (keel__store_open_remote). */
static int
open_remote_on(keel_cache *c, int lent, int warm, keel_store **out)
{
    keel_store *st = store_new(c->memfd, c->url, 0);
    if (!st) {
        if (!lent)
            keel__cache_close(c);
        return KEEL_ENOMEM;
    }
    st->remote = c;
    st->remote_lent = lent;
    keel_file_info fi;
    int rc, err = keel__os->stat(st->fd, &fi);
    if (err) {
        rc = keel__store_io_fail(err, "reading the size of", st->path);
        goto fail;
    }
    /* The header and live pages are installed (cache.h, invariant 2). */
    int which, fresh;
    if ((rc = read_headers(st->fd, st->path, fi.size, &st->snap, &which,
                           &fresh)))
        goto fail;
    if (fresh) {
        rc = KEEL_CORRUPT("%s holds no committed index", st->path);
        goto fail;
    }
    keel__geometry_init(&st->g, &st->snap);
    st->metric = st->snap.metric;
    st->precision = st->snap.precision;
    memcpy(st->identity, st->snap.identity, KEEL_IDENTITY_BYTES);
    st->snap.sequence = 0;
    if ((rc = map_pages(st)) || (rc = keel__store_refresh_snapshot(st)))
        goto fail;
    if (!warm)
        bring_heap(st);
    *out = st;
    return KEEL_OK;
fail:
    keel__store_close(st);
    return rc;
}
