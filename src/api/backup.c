/* backup.c -- keel_backup: a copy of an index's last commit, made while its
** writer goes on writing.
**
** What a commit is made of (doc/format.md): its header, and below it the
** regions it names. Of the bytes a commit covers, slot ids and vectors never
** change (format invariant 3); what does change in place is (a) neighbour
** lists of committed nodes, which adds rewrite between commits, and (b)
** deleted epochs, which a flush writes. So the copy is made like this:
**
**   1. Capture the commit: a writer takes its committed header under
**      write_lock and raises `backups`, which holds every flush (and
**      compaction) until the copy is done; adds and deletes go on. A reader
**      takes a fresh snapshot, after noting both header copies' sequence
**      and checksum words.
**   2. Copy what the commit names and nothing else, from the file: for each
**      segment the first N - first slots of its three arrays (headers,
**      vectors, records), the heap up to heap_used, and the id table. The
**      rest (the unused ends of segments, the live page, regions past the
**      commit) stays a hole in the copy. Deleted epochs above the commit's
**      E become 0 as they are copied: marks a flush in progress (or a
**      failed one) wrote belong to no commit.
**   3. Read the undo log of the commit (src/undo.c) and write each saved
**      node's lists into the copy. The log holds the committed lists of
**      every committed node whose lists changed since the commit, and each
**      entry is in the log before its node's lists change (undo.c rule 1).
**      So a list the copy read after a change has its entry in the log by
**      the time the log is read, and a list read before any change holds
**      the committed value already: after step 3 every list in the copy is
**      the committed one.
**   4. A reader checks that no flush began since step 1 (the header words
**      are unchanged): a flush removes the log step 3 needed. If one did, it
**      starts again from step 1 with the new commit. A writer needs no
**      check: its flushes waited.
**   5. Write the commit's header into copy A (copy B and the live page stay
**      zero: a writer that opens the copy resets the live page), sync the
**      copy, rename it over the destination, sync the directory.
**
** The copy is written to DEST.keel-tmp-PID-N (N counts the process's
** backups, so two backups to one DEST never share a file); DEST changes
** only by the rename, so after a crash it holds its old content or the
** whole copy.
*/
#include "api/follow.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define COPY_BYTES   (1u << 20)   /* bytes per read and write */
#define READER_TRIES 16           /* commits a reader's backup starts over */

typedef struct backup {
    keel_index *idx;
    keel_store *st;
    const char *dest;
    char *tmp;                    /* the temporary file's path */
    int fd;                       /* the temporary file */
    keel_header *h;               /* the commit being copied */
    keel_geometry g;
    uint8_t *buf;                 /* COPY_BYTES */
    uint64_t copied;              /* bytes written */
} backup;

/* An I/O failure on the copy: err is -errno. */
static int
io_fail(const backup *b, int err, const char *what, const char *path)
{
    if (err == -ENOSPC || err == -EDQUOT)
        return keel__fail(KEEL_EFULL, "%s %s failed: no space left on the "
                          "device\nhelp: free disk space or back up to "
                          "another file system; %s is unchanged", what, path,
                          b->dest);
    return keel__fail(KEEL_EIO, "%s %s failed: %s\nhelp: check the disk and "
                      "that the directory of %s is writable; %s is unchanged",
                      what, path, strerror(-err), b->dest, b->dest);
}

/* Copies [off, off + len) of the index into the copy. marks: the range is
** slot headers (16 bytes each, from a slot header boundary), whose deleted
** epochs above the commit's become 0. */
static int
copy_range(backup *b, uint64_t off, uint64_t len, int marks)
{
    while (len) {
        size_t n = (size_t)KEEL_MIN(len, (uint64_t)COPY_BYTES);
        ssize_t r = keel__os->pread(b->st->fd, b->buf, n, off);
        if (r != (ssize_t)n)
            return io_fail(b, r < 0 ? (int)r : -EIO, "reading", b->st->path);
        if (marks)
            keel__commit_marks(&b->g, b->h, off, b->buf, n);
        ssize_t w = keel__os->pwrite(b->fd, b->buf, n, off);
        if (w != (ssize_t)n)
            return io_fail(b, w < 0 ? (int)w : -EIO, "writing", b->tmp);
        b->copied += n;
        off += n;
        len -= n;
    }
    return KEEL_OK;
}

/* Step 2: every region the commit names, as far as it is written. */
static int
copy_commit(backup *b)
{
    const keel_header *h = b->h;
    const keel_geometry *g = &b->g;
    int rc = keel__os->truncate(b->fd, h->file_end);
    if (rc)
        return io_fail(b, rc, "sizing", b->tmp);
    for (uint32_t k = 0; k < h->segments; k++) {
        keel_seg_layout L;
        keel__seg_layout(g, k, &L);
        uint64_t first = keel__seg_first_slot(g, k);
        uint64_t n = h->count > first ? KEEL_MIN(L.slots, h->count - first) : 0;
        uint64_t off = h->seg_off[k];
        if (n == 0)
            continue;
        if ((rc = copy_range(b, off, n * KEEL_SLOT_HDR_BYTES, 1)) ||
            (rc = copy_range(b, off + L.vec_off, n * g->vec_bytes, 0)) ||
            (rc = copy_range(b, off + L.rec_off, n * g->rec_bytes, 0)) ||
            (L.code_off &&
             (rc = copy_range(b, off + L.code_off, n * g->code_bytes, 0))))
            return rc;
    }
    uint32_t used_chunk = (uint32_t)(h->heap_used >> 32);
    for (uint32_t c = 0; c < h->heap_chunks && c <= used_chunk; c++) {
        uint64_t len = c < used_chunk ? keel__heap_chunk_bytes(g, c)
                                      : (h->heap_used & 0xFFFFFFFFu);
        if (len && (rc = copy_range(b, h->heap_off[c], len, 0)))
            return rc;
    }
    if (h->idtab_offset)
        rc = copy_range(b, h->idtab_offset, 4ull << h->idtab_log2, 0);
    return rc;
}

/* Writes one committed list into the copy (step 3). */
static int
restore_list(uint64_t off, uint64_t len, const uint8_t *bytes, void *arg)
{
    backup *b = arg;
    ssize_t n = keel__os->pwrite(b->fd, bytes, (size_t)len, off);
    return n == (ssize_t)len ? KEEL_OK
                             : io_fail(b, n < 0 ? (int)n : -EIO, "writing",
                                       b->tmp);
}

/* Step 3: the committed lists of the commit (the store's log of it: a
** writer's own, or the one a reader's writer keeps, maybe in another
** process) over the copy. A log made for another commit holds nothing for
** this one. */
static int
restore_lists(backup *b)
{
    return keel__store_committed_lists(b->st, b->h, restore_list, b);
}

/* Step 5: the header, then sync, rename and sync the directory. */
static int
finish(backup *b)
{
    keel_header *h = b->h;
    h->flags &= (uint8_t)~KEEL_FLAG_SUPERSEDED;
    h->pending_epoch = 0;
    memset(b->buf, 0, KEEL_PAGE_SLOT);
    keel__header_encode(h, b->buf);
    ssize_t w = keel__os->pwrite(b->fd, b->buf, KEEL_PAGE_SLOT, KEEL_HDR_A_OFF);
    if (w != KEEL_PAGE_SLOT)
        return io_fail(b, w < 0 ? (int)w : -EIO, "writing", b->tmp);
    int err = keel__os->sync(b->fd);
    if (err)
        return io_fail(b, err, "syncing", b->tmp);
    if ((err = keel__os->rename(b->tmp, b->dest)))
        return io_fail(b, err, "renaming the copy over", b->dest);
    const char *slash = strrchr(b->dest, '/');
    char dir[PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == b->dest)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - b->dest), b->dest);
    if ((err = keel__os->sync_dir(dir)))
        return keel__fail(KEEL_EIO, "syncing the directory %s after writing "
                          "%s failed: %s\nhelp: check the disk; %s is complete "
                          "but may not survive a power loss until the system "
                          "writes the directory", dir, b->dest,
                          strerror(-err), b->dest);
    return KEEL_OK;
}

/* Refuses a destination that cannot take the copy. */
static int
check_dest(keel_index *idx, const char *path)
{
    if (!path || !*path)
        return keel__fail(KEEL_EINVAL, "the backup destination is %s\n"
                          "help: name the file to write the copy to",
                          path ? "\"\" (empty)" : "missing (NULL)");
    if (strncmp(path, "s3://", 5) == 0)
        return keel__fail(KEEL_EINVAL, "a backup cannot be written to %s\n"
                          "help: back up to a local file; publishing puts an "
                          "index in object storage", path);
    if (strlen(path) + 40 > PATH_MAX)
        return keel__fail(KEEL_EINVAL, "the backup path %s is too long\nhelp: "
                          "use a shorter path", path);
    keel_file_info di, si;
    if (keel__os->stat_path(path, &di) != 0)
        return KEEL_OK; /* a new file (a missing directory fails its open) */
    if (di.type == KEEL_FILE_DIRECTORY)
        return keel__fail(KEEL_EINVAL, "the backup destination %s is a "
                          "directory\nhelp: name the file to write, such as "
                          "%s/%s", path, path, strrchr(idx->path, '/')
                                                 ? strrchr(idx->path, '/') + 1
                                                 : idx->path);
    if (!di.is_regular)
        return keel__fail(KEEL_EINVAL, "the backup destination %s is not a "
                          "regular file\nhelp: name a file to write (the copy "
                          "is renamed into place, so it cannot go to a "
                          "device or a pipe)", path);
    /* idx->st only under swap_lock: a compaction may swap it. */
    keel__swap_shared(idx);
    int same = keel__os->stat(idx->st->fd, &si) == 0 && si.dev == di.dev &&
               si.ino == di.ino;
    keel__swap_unlock(idx);
    if (same)
        return keel__fail(KEEL_EINVAL, "the backup destination %s is the index "
                          "itself\nhelp: name another file", path);
    return KEEL_OK;
}

/* Creates the temporary file beside the destination: a name of this call's
** own (process id and a counter), created only if it does not exist, so
** two backups to one destination never write or remove each other's copy.
** A name left by a killed process whose id this one reuses is skipped. */
static int
open_tmp(backup *b)
{
    static uint64_t calls; /* atomic */
    for (int tries = 0;; tries++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, ".keel-tmp-%ld-%llu", (long)getpid(),
                 (unsigned long long)__atomic_fetch_add(&calls, 1,
                                                        __ATOMIC_RELAXED));
        keel__free(b->tmp);
        b->tmp = keel__path_plus(b->dest, suffix);
        if (!b->tmp)
            return KEEL_ENOMEM;
        b->fd = keel__os->open(b->tmp, KEEL_OPEN_WRITE | KEEL_OPEN_CREATE);
        if (b->fd >= 0)
            return KEEL_OK;
        int err = b->fd;
        b->fd = -1;
        if (err == -EEXIST && tries < 64)
            continue;
        if (err == -ENOENT)
            return keel__fail(KEEL_ENOTFOUND, "cannot write the backup %s: "
                              "its directory does not exist\nhelp: create the "
                              "directory first, or name a file in an existing "
                              "one", b->dest);
        return io_fail(b, err, "creating", b->tmp);
    }
}

/* Steps 1-3 and 5 on a writer. */
static int
backup_writer(backup *b)
{
    keel_index *idx = b->idx;
    pthread_mutex_lock(&idx->write_lock);
    idx->backups++;
    keel__swap_shared(idx);
    b->st = idx->st;
    *b->h = b->st->committed;
    pthread_mutex_unlock(&idx->write_lock);
    keel__geometry_init(&b->g, b->h);
    int rc = open_tmp(b);
    if (!rc)
        rc = copy_commit(b);
    if (!rc)
        rc = restore_lists(b);
    keel__swap_unlock(idx);
    pthread_mutex_lock(&idx->write_lock);
    idx->backups--;
    pthread_cond_broadcast(&idx->backup_done);
    pthread_mutex_unlock(&idx->write_lock);
    return rc ? rc : finish(b);
}

/* Steps 1-5 on a reader, again from a new snapshot when a flush began. */
static int
backup_reader(backup *b)
{
    keel_index *idx = b->idx;
    for (int round = 0; round < READER_TRIES; round++) {
        keel_read r;
        int rc = keel__read_enter(idx, &r, KEEL_READ_REPORT);
        if (rc)
            return rc;
        b->st = idx->st;
        uint64_t before[4], after[4];
        keel__store_header_words(b->st, before);
        keel_view v;
        rc = keel__store_snapshot(b->st, &v, b->h);
        if (!rc) {
            keel__geometry_init(&b->g, b->h);
            if (b->fd >= 0) { /* a new round starts from an empty file */
                keel__os->close(b->fd);
                keel__os->unlink(b->tmp);
                keel__free(b->tmp);
                b->tmp = NULL;
                b->fd = -1;
            }
            rc = open_tmp(b);
        }
        if (!rc)
            rc = copy_commit(b);
        if (!rc)
            rc = restore_lists(b);
        keel__store_header_words(b->st, after);
        rc = keel__read_leave(idx, &r, rc);
        if (rc)
            return rc;
        if (memcmp(before, after, sizeof before) == 0)
            return finish(b);
    }
    return keel__fail(KEEL_ELOCKED, "the writer of %s flushed during each of "
                      "%d tries to back it up\nhelp: back it up through the "
                      "writer's handle (its flushes wait for the copy), or "
                      "while it flushes less often", idx->path, READER_TRIES);
}

int
keel_backup(keel_index *idx, const char *path)
{
    keel__clear_error();
    if (!idx)
        return keel__fail(KEEL_EINVAL, "keel_backup was given a NULL index\n"
                          "help: pass the handle keel_open or "
                          "keel_open_reader returned");
    keel__swap_shared(idx); /* idx->st: see check_dest */
    int remote = idx->st->remote != NULL;
    keel__swap_unlock(idx);
    if (remote)
        return keel__fail(KEEL_EINVAL, "cannot back up %s: it is a "
                          "published index, whose reader holds only the "
                          "pages it fetched\nhelp: its versions are already "
                          "in the object store; back up the publisher's "
                          "local file instead", idx->path);
    int rc = check_dest(idx, path);
    if (rc)
        return rc;
    backup b = {.idx = idx, .dest = path, .fd = -1};
    b.h = keel__malloc(sizeof *b.h);
    b.buf = keel__malloc(KEEL_MAX(COPY_BYTES, KEEL_PAGE_SLOT));
    if (!b.h || !b.buf)
        rc = KEEL_ENOMEM;
    else
        rc = idx->writer ? backup_writer(&b) : backup_reader(&b);
    if (b.fd >= 0) {
        keel__os->close(b.fd);
        if (rc)
            keel__os->unlink(b.tmp);
    }
    keel__free(b.tmp);
    keel__free(b.h);
    keel__free(b.buf);
    return rc;
}
