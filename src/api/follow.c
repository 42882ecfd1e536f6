/* follow.c -- a reader moving to what replaced its own: the file a
** compaction renamed over its path, or a newer version of a published
** index; where a handle moves to another store; and the read bracket
** (keel__read_enter/leave, follow.h), whose first step is the follow.
**
** A file: a snapshot with the superseded flag (compact.c) makes the reader
** look at the path again; once the path names another file it opens that
** one and continues there only if it is a successor of its own file:
**   - the same index: dimensions, metric, precision, M and identity;
**   - a later state of it: the new file's committed epoch is greater than
**     the epoch of the superseded file's last snapshot, and its next id is
**     not smaller. A compaction's file starts at the old epoch + 1 with the
**     old next id, and both only grow after, so every file that compaction
**     chain makes passes; a copy of the index made before (a backup put
**     back, a file renamed in from elsewhere) has an epoch no greater than
**     the one the reader served, or fewer ids, and fails. Moving to it
**     would bring deleted vectors back and lose flushed ones: a reader
**     never serves a state older than one it has served.
** Until the rename lands, or when the path names a file that fails, it
** keeps searching the old file, which stays valid (an open file outlives
** its name); the refused file is remembered by device and inode and not
** opened again, and keel_refresh and keel_check report it, naming both
** files. Every call that reads a reader follows first, through the read
** bracket: searches, get, count, stat, check, refresh, batch get, ids,
** radius search, backup.
**
** A published index: keel__remote_follow polls for a newer version and
** switches the reader's cache to it (see its invariant below).
**
** Locks: idx->st is read only under swap_lock, and changes only under it
** held exclusive (keel__index_move); a store swapped out is closed only
** after the exclusive lock is released, so no thread that read it under
** the lock still uses it. idx->refused and idx->remote_stale are read and
** written under swap_lock too.
*/
#include "api/follow.h"
#include "api/warm.h"

#include <stdio.h>
#include <stdlib.h>

/* follow.h. */
void
keel__index_move(keel_index *idx, keel_store *nw)
{
    keel__warm_stop(idx);
    keel__index_attach(idx, nw);
    unsigned flags = KEEL_LOAD_RELAXED(&idx->flags);
    if (flags & KEEL_WARM)
        keel__warm_start(idx);
    if (flags & KEEL_HUGE_PAGES)
        keel__huge_pages_advise(idx);
}

/* Whether the store nw holds the same index as the reader's own: the same
** dimensions, metric, precision, M and identity. */
static int
same_index(const keel_store *own, const keel_store *nw)
{
    return nw->g.dim == own->g.dim && nw->g.M == own->g.M &&
           nw->metric == own->metric && nw->precision == own->precision &&
           memcmp(keel__store_identity(nw), keel__store_identity(own),
                  KEEL_IDENTITY_BYTES) == 0;
}

/* The error of a reader whose path names a file it refused to move to
** (swap_lock held). */
static int
refused_error(const keel_index *idx)
{
    if (idx->refused.older)
        return keel__fail(KEEL_EOPTIONS,
                          "the file now at %s is an older state of this "
                          "index (epoch %llu, next id %llu) than the snapshot "
                          "this reader has served (epoch %llu, next id %llu), "
                          "so the reader stays at its last snapshot\nhelp: a "
                          "compaction's file has a greater epoch; if the "
                          "older file was put back on purpose (a restore), "
                          "open a new reader to search it",
                          idx->path, (unsigned long long)idx->refused.epoch,
                          (unsigned long long)idx->refused.next_id,
                          (unsigned long long)idx->refused.own_epoch,
                          (unsigned long long)idx->refused.own_next_id);
    char own[33], other[33];
    keel__identity_hex(keel__store_identity(idx->st), own);
    keel__identity_hex(idx->refused.identity, other);
    return keel__fail(idx->refused.dim != idx->dim ? KEEL_EDIM : KEEL_EOPTIONS,
                      "the file now at %s is another index (%u dimensions, "
                      "identity %s) than the one this reader opened (%u "
                      "dimensions, identity %s), so the reader stays at the "
                      "last snapshot of its own\nhelp: open a new reader to "
                      "search the index now at the path",
                      idx->path, idx->refused.dim, other, idx->dim, own);
}

/* Remembers nw as a file at the path the reader does not move to: another
** index, or with own and seen set, an older state of its own (swap_lock
** held exclusive). */
static void
note_refused(keel_index *idx, const keel_store *nw, const keel_view *own,
             const keel_view *seen)
{
    keel_file_info at;
    if (keel__os->stat(nw->fd, &at) != 0)
        return; /* opened again next time */
    idx->refused.dev = at.dev;
    idx->refused.ino = at.ino;
    idx->refused.older = own != NULL;
    idx->refused.dim = nw->g.dim;
    memcpy(idx->refused.identity, keel__store_identity(nw),
           KEEL_IDENTITY_BYTES);
    if (own) {
        idx->refused.epoch = seen->epoch;
        idx->refused.next_id = seen->next_id;
        idx->refused.own_epoch = own->epoch;
        idx->refused.own_next_id = own->next_id;
    }
}

/* Whether the snapshot seen of another file of the same index is a later
** state than own, the superseded file's last snapshot (see the banner). */
static int
is_successor(const keel_view *own, const keel_view *seen)
{
    return seen->epoch > own->epoch && seen->next_id >= own->next_id;
}

/* The error of a URL reader that refused version refused.seq, another
** index published over its own with replace (swap_lock held). */
static int
remote_refused_error(const keel_index *idx)
{
    char own[33], other[33];
    keel__identity_hex(keel__store_identity(idx->st), own);
    keel__identity_hex(idx->refused.identity, other);
    return keel__fail(idx->refused.dim != idx->dim ? KEEL_EDIM : KEEL_EOPTIONS,
                      "version %llu of %s is another index (%u dimensions, "
                      "identity %s) than the one this reader opened (%u "
                      "dimensions, identity %s), so the reader stays at "
                      "version %llu of its own\nhelp: it was published with "
                      "replace; open a new reader to search it",
                      (unsigned long long)idx->refused.seq, idx->path,
                      idx->refused.dim, other, idx->dim, own,
                      (unsigned long long)idx->st->remote->man.seq);
}

typedef struct accept_arg {
    keel_index *idx;
    keel_header own, seen;
} accept_arg;

/* keel__cache_switch's check (publish.c invariant 10): the new version's
** header is of the reader's own index; else it is remembered as refused. */
static int
accept_version(const keel_manifest *m, const uint8_t *pinned, size_t n,
               void *arg)
{
    accept_arg *a = arg;
    char why[128] = "";
    if (n == 0 || keel__header_decode(pinned + KEEL_HDR_A_OFF, m->image_len,
                                      &a->seen, why, sizeof why) != KEEL_OK)
        return keel__fail(KEEL_ECORRUPT, "the header of version %llu of %s "
                          "is damaged%s%s\nhelp: publish the index again",
                          (unsigned long long)m->seq, a->idx->path,
                          *why ? ": " : "", why);
    if (keel__header_same_index(&a->own, &a->seen))
        return KEEL_OK;
    keel_index *idx = a->idx;
    memset(&idx->refused, 0, sizeof idx->refused);
    idx->refused.seq = m->seq;
    idx->refused.dim = a->seen.dim;
    memcpy(idx->refused.identity, a->seen.identity, KEEL_IDENTITY_BYTES);
    return remote_refused_error(idx);
}

/* Invariant: idx->st is read only under swap_lock, and a store this
** function swaps out is closed only after the exclusive lock is released,
** so no thread that read it under the lock still uses it. The cache is the
** same for the reader's life: each store over it hands it on to the next.
**
** Every new version gets a new store over the cache (after the switch,
** which punches only the pages whose bytes changed): a version may be
** another file of the index (keel_compact publishes a new file, whose
** header sequence starts again and whose regions lie elsewhere), and a
** store adopts only later commits of its own file. The cache never pins
** an older version (keel__cache_switch), so a reader never goes back, and
** never a version of another index (one published with replace): the
** reader keeps its version, and keel_refresh reports the other. */
int
keel__remote_follow(keel_index *idx, int force)
{
    keel__swap_shared(idx);
    keel_cache *c = idx->st->remote;
    int stale = idx->remote_stale;
    uint64_t refused = idx->refused.seq;
    keel__swap_unlock(idx);
    keel_manifest next;
    keel_stop stop; /* the version walk asks the caller's cancel */
    keel__stop_init(&stop, idx->cancel, idx->cancel_arg);
    int rc = keel__cache_poll(c, force, &stop, &next);
    if (rc == KEEL_OK && next.seq && next.seq == refused) {
        /* Known to be another index: not fetched again. */
        keel__manifest_free(&next);
        if (!force)
            return KEEL_OK;
        keel__swap_shared(idx);
        rc = remote_refused_error(idx);
        keel__swap_unlock(idx);
        return rc;
    }
    if (rc) {
        if (force)
            return rc;
        keel__clear_error(); /* a search keeps its version; refresh reports */
        return KEEL_OK;
    }
    if (!next.seq && !stale)
        return KEEL_OK;
    /* The new version's header and live pages, before the lock: a store
     * that does not answer holds up this call only, never the searches
     * beside it (a refresh's cancel ends it). */
    uint8_t *pinned = NULL;
    size_t npinned = 0;
    if (next.seq) {
        pinned = keel__malloc(KEEL_CACHE_PINNED * KEEL_CACHE_GRANULE);
        rc = pinned ? keel__cache_fetch_next(c, &next, &stop, pinned, &npinned)
                    : KEEL_ENOMEM;
        if (rc) {
            keel__free(pinned);
            keel__manifest_free(&next);
            return rc;
        }
    }
    /* cache.h invariant 3: no search, get or warm reads the store while
     * the pinned version changes. */
    keel__swap_exclusive(idx);
    keel_store *old = idx->st, *nw = NULL;
    keel__warm_stop(idx);
    uint64_t want = next.seq;
    if (next.seq) {
        uint64_t was = c->man.seq;
        accept_arg *a = keel__malloc(sizeof *a);
        keel_view v;
        rc = a ? keel__store_snapshot(old, &v, &a->own) : KEEL_ENOMEM;
        if (rc == KEEL_OK) {
            a->idx = idx;
            rc = keel__cache_switch(c, &next, pinned, npinned,
                                    accept_version, a);
        } else {
            keel__manifest_free(&next);
        }
        keel__free(a);
        if (rc == KEEL_OK && c->man.seq != was)
            idx->remote_stale = 1;
    }
    if (rc == KEEL_OK && idx->remote_stale) {
        rc = keel__store_reopen_remote(old, &nw);
        if (rc == KEEL_OK) {
            idx->remote_stale = 0;
            keel__index_move(idx, nw);
        }
    }
    keel__swap_unlock(idx);
    keel__manifest_free(&next);
    keel__free(pinned);
    if (nw)
        keel__store_close(old);
    if (rc && !force && want && idx->refused.seq == want) {
        keel__clear_error(); /* a search keeps its version; refresh reports */
        rc = KEEL_OK;
    }
    return rc;
}

int
keel__reader_follow(keel_index *idx, int report)
{
    keel_view v;
    keel_file_info a, b;
    keel__swap_shared(idx);
    keel_store *st = idx->st;
    if (st->remote) { /* never swapped for a local store, nor back */
        keel__swap_unlock(idx);
        return keel__remote_follow(idx, report);
    }
    int rc = keel__store_view(st, &v);
    int superseded = rc == KEEL_OK && keel__store_superseded(st);
    int moved = superseded && keel__os->stat(st->fd, &a) == 0 &&
                keel__os->stat_path(idx->path, &b) == 0 &&
                (a.dev != b.dev || a.ino != b.ino);
    if (moved && b.dev == idx->refused.dev && b.ino == idx->refused.ino) {
        /* Known to be refused: do not open it again. */
        rc = report ? refused_error(idx) : KEEL_OK;
        moved = 0;
    }
    keel__swap_unlock(idx);
    if (rc || !moved)
        return rc;
    keel_store *nw;
    keel_view nv;
    if (keel__store_open_reader(idx->path, &nw) != KEEL_OK) {
        /* The new file is not readable yet (or any more): keep searching the
         * old one, which stays valid, and look again next time. */
        keel__clear_error();
        return KEEL_OK;
    }
    keel__swap_exclusive(idx);
    if (idx->st != st) { /* another thread moved first */
        keel__swap_unlock(idx);
        keel__store_close(nw);
        return KEEL_OK;
    }
    if (!same_index(st, nw)) {
        /* Another index was put at the path (after the compaction, or in
         * place of the file that compaction made): serving it would answer
         * with other vectors, of other lengths. */
        note_refused(idx, nw, NULL, NULL);
        rc = report ? refused_error(idx) : KEEL_OK;
        keel__swap_unlock(idx);
        keel__store_close(nw);
        return rc;
    }
    if (keel__store_view(nw, &nv) != KEEL_OK) {
        /* No snapshot to compare yet: look again next time. */
        keel__clear_error();
        keel__swap_unlock(idx);
        keel__store_close(nw);
        return KEEL_OK;
    }
    if (!is_successor(&v, &nv)) {
        /* The same index at an older state (a copy put back): serving it
         * would bring back what this reader saw deleted. */
        note_refused(idx, nw, &v, &nv);
        rc = report ? refused_error(idx) : KEEL_OK;
        keel__swap_unlock(idx);
        keel__store_close(nw);
        return rc;
    }
    keel__index_move(idx, nw);
    keel__swap_unlock(idx);
    keel__store_close(st);
    return KEEL_OK;
}

/* --- the read bracket (follow.h) ------------------------------------------ */

int
keel__read_enter(keel_index *idx, keel_read *r, unsigned how)
{
    r->how = how;
    r->gen = 0;
    if (!(how & KEEL_READ_CANCEL))
        r->stop = NULL;
    if (idx->writer && (how & KEEL_READ_WRITE_LOCK)) {
        pthread_mutex_lock(&idx->write_lock);
    } else {
        if (!idx->writer) {
            int rc = keel__reader_follow(idx, (how & KEEL_READ_REPORT) != 0);
            if (rc && !(how & KEEL_READ_ANYWAY))
                return rc;
            if (rc)
                keel__clear_error(); /* reads the snapshot it has */
        }
        keel__swap_shared(idx);
    }
    if (r->stop)
        keel__stop_init(r->stop, idx->st->remote ? idx->cancel : NULL,
                        idx->cancel_arg);
    if (how & KEEL_READ_PAGES)
        r->gen = keel__remote_begin_stop(idx, r->stop && r->stop->fn ? r->stop
                                                                     : NULL);
    if (how & KEEL_READ_VIEW) {
        int rc = keel__store_view(idx->st, &r->v);
        if (rc)
            return keel__read_leave(idx, r, rc);
    }
    return KEEL_OK;
}

int
keel__read_leave(keel_index *idx, keel_read *r, int rc)
{
    if (r->how & KEEL_READ_PAGES)
        rc = keel__remote_end(idx, r->gen, rc);
    if (idx->writer && (r->how & KEEL_READ_WRITE_LOCK))
        pthread_mutex_unlock(&idx->write_lock);
    else
        keel__swap_unlock(idx);
    return rc;
}
