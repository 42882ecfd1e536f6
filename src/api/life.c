/* life.c -- an index's file over its life: compaction into a new file, and
** readers that move to the file that replaced their own.
**
** Compaction (keel_compact), with the writer lock held throughout:
**   1. flush;
**   2. write every live vector (same ids, same metric, precision, codes, M
**      and identity: the new file is the same index; its traversal codes
**      taken about the live vectors' mean, codes.h) into
**      <path>.compacting, link them with the batch build, commit it with the
**      old file's next id (auto ids are never reused) and epoch + 1 (so a
**      snapshot's (count, epoch) never names two states);
**   3. commit the superseded flag in the old file;
**   4. rename the new file over the path and sync the directory;
**   5. swap the handle to the new store (searches in flight finish on the
**      old one first).
** A failure before step 4 removes the new file (and clears the flag): the
** old index stays intact and usable. A leftover <path>.compacting from a
** crash is removed by the next writer open. After a power loss either file
** may be at the path; both hold the same live vectors and ids.
**
** Readers: a snapshot with the superseded flag makes the reader look at the
** path again; once the path names another file it opens that one and
** continues there only if it is a successor of its own file:
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
** files. Every call that reads a reader follows first: searches, get,
** count, stat, check, refresh.
*/
#include "api/compact.h"
#include "api/follow.h"
#include "api/warm.h"

#include <stdio.h>
#include <stdlib.h>


void
keel__remove_leftovers(const char *path)
{
    char *p = keel__path_plus(path, ".compacting");
    if (p) {
        keel__os->unlink(p);
        keel__free(p);
    }
}

/* Points the handle at a new store (swap_lock held exclusively): the warm
** thread stops before the old store's mappings can go, and a handle that
** asked for warm-up or huge pages gets them on the new file too. */
static void
swap_store(keel_index *idx, keel_store *nw)
{
    keel__warm_stop(idx);
    keel__index_attach(idx, nw);
    unsigned flags = KEEL_LOAD_RELAXED(&idx->flags);
    if (flags & KEEL_WARM)
        keel__warm_start(idx);
    if (flags & KEEL_HUGE_PAGES)
        keel__huge_pages_advise(idx);
}

static char *
parent_dir(const char *path)
{
    char *d = strdup(path);
    if (!d)
        return NULL;
    char *slash = strrchr(d, '/');
    if (slash == d)
        slash[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(d, ".");
    return d;
}

/* A file with codes: the new file's centre is the mean of the live
** vectors (the old one may be the mean of vectors long deleted), placed in
** nw; *scratch gets the space the rows are coded in (dim floats, then a
** row), for the caller to keel__free. */
static int
new_centre(keel_store *old, const keel_view *v, keel_store *nw,
           float **scratch)
{
    uint32_t dim = old->g.dim;
    double *sum = keel__calloc(dim, sizeof *sum);
    float *c = keel__malloc(dim * sizeof *c);
    *scratch = keel__malloc(dim * sizeof(float) + old->g.code_bytes);
    int rc = sum && c && *scratch ? KEEL_OK : KEEL_ENOMEM;
    uint64_t n = 0;
    for (uint64_t s = 0; s < old->committed.count && !rc; s++)
        if (keel__store_present(v, s)) {
            keel__code_centre_add(keel__store_vec(old, s), old->precision,
                                  dim, sum, *scratch);
            n++;
        }
    if (!rc) {
        keel__code_centre_end(sum, n, dim, c);
        rc = keel__store_put_centre(nw, c);
    }
    keel__free(sum);
    keel__free(c);
    return rc;
}

/* Writes the live vectors of old into the new store and links them. */
static int
copy_live(keel_index *idx, keel_store *old, keel_store *nw, keel_graph *ngr)
{
    keel_view v;
    keel__store_view(old, &v);
    v.as_committed = 1;
    /* Counted, not taken from the header: a damaged deleted count must not
     * make the copy write past the slots it reserved. */
    uint64_t live = 0;
    for (uint64_t s = 0; s < old->committed.count; s++)
        live += (uint64_t)keel__store_present(&v, s);
    uint64_t first;
    int rc = keel__store_id_reserve(nw, live);
    if (!rc && live)
        rc = keel__store_reserve(nw, live, &first);
    float *scratch = NULL;
    if (!rc && live && old->g.code_bytes)
        rc = new_centre(old, &v, nw, &scratch);
    const float *centre = keel__store_centre(nw);
    uint8_t *row = scratch ? (uint8_t *)(scratch + old->g.dim) : NULL;
    uint64_t to = 0;
    for (uint64_t s = 0; s < old->committed.count && !rc; s++) {
        if (!keel__store_present(&v, s))
            continue;
        uint64_t ref = 0, id = keel__store_id(old, s);
        uint32_t level = keel__graph_level(ngr, to);
        if (level && (rc = keel__store_heap_alloc(nw, level, &ref)))
            break;
        if (row)
            keel__code_encode(keel__store_vec(old, s), old->precision, centre,
                              old->g.dim, (int)old->g.codes, scratch, row,
                              old->g.code_bytes);
        keel__store_write_slot(nw, to, id, keel__store_vec(old, s), row,
                               level, ref);
        if ((rc = keel__store_id_insert(nw, id, to)))
            break;
        to++;
    }
    keel__free(scratch);
    if (rc)
        return rc;
    nw->work.next_id = old->committed.next_id;
    nw->work.epoch = old->committed.epoch + 1;
    if (!live)
        return KEEL_OK;
    keel_builder b;
    keel__build_init(&b, ngr, idx->ef_construction);
    b.progress = idx->progress;
    b.progress_arg = idx->progress_arg;
    b.cancel = idx->cancel;
    b.cancel_arg = idx->cancel_arg;
    keel_search_ctx *c = keel__search_ctx_new(ngr);
    if (!c)
        return KEEL_ENOMEM;
    rc = keel__build_link(&b, c, 0, live, idx->threads);
    keel__search_ctx_free(c);
    return rc;
}

int
keel_compact(keel_index *idx)
{
    keel__clear_error();
    if (!idx)
        return keel__fail(KEEL_EINVAL, "keel_compact was given a NULL index\n"
                          "help: pass the handle keel_open returned");
    if (!idx->writer)
        return keel__fail(KEEL_EREADONLY,
                          "cannot compact: the index at %s was opened as a "
                          "reader\nhelp: compact through the writer "
                          "instead", idx->path);
    pthread_mutex_lock(&idx->write_lock);
    keel__backup_wait(idx);
    keel_store *old = idx->st, *nw = NULL;
    keel_graph *ngr = NULL;
    /* In memory, the new index is new memory: no name, rename or flag. */
    int memory = old->memory;
    char *tmp = keel__path_plus(idx->path, memory ? "" : ".compacting");
    char *dir = parent_dir(idx->path);
    int rc = (!tmp || !dir) ? KEEL_ENOMEM : keel__store_commit(old);
    int flagged = 0, err = 0;
    if (rc)
        goto fail;
    if (!memory)
        keel__os->unlink(tmp);
    keel_store_params p = {.dim = old->g.dim, .M = old->g.M,
                           .metric = old->metric, .precision = old->precision,
                           .codes = (int)old->g.codes,
                           .have_options = 1};
    memcpy(p.identity, keel__store_identity(old), KEEL_IDENTITY_BYTES);
    if ((rc = keel__store_open_writer(tmp, &p, &nw)))
        goto fail;
    ngr = keel__calloc(1, sizeof *ngr);
    if (!ngr) {
        rc = KEEL_ENOMEM;
        goto fail;
    }
    keel__graph_init(ngr, nw);
    if ((rc = copy_live(idx, old, nw, ngr)) || (rc = keel__store_commit(nw)))
        goto fail;
    if (memory)
        goto swap;
    if ((rc = keel__store_set_superseded(old, 1)))
        goto fail;
    flagged = 1;
    err = keel__os->rename(tmp, idx->path);
    if (err) {
        rc = keel__fail(KEEL_EIO, "renaming %s over %s failed: %s\nhelp: check "
                        "the directory's permissions; the index is unchanged",
                        tmp, idx->path, strerror(-err));
        goto fail;
    }
    flagged = 0;
    err = keel__os->sync_dir(dir);
    /* The rename happened: from here on the new file is the index. */
    free(nw->path);
    nw->path = strdup(idx->path);
swap:
    keel__swap_exclusive(idx);
    swap_store(idx, nw);
    keel__swap_unlock(idx);
    keel__free(ngr);
    keel__store_close(old);
    pthread_mutex_unlock(&idx->write_lock);
    keel__free(tmp);
    free(dir);
    if (err || !nw->path) {
        nw->poisoned = 1;
        return keel__fail(KEEL_EIO, "syncing the directory of %s after "
                          "compaction failed\nhelp: close and reopen the "
                          "index", idx->path);
    }
    return KEEL_OK;
fail:
    if (flagged && keel__store_set_superseded(old, 0) == KEEL_OK)
        flagged = 0;
    keel__store_close(nw);
    if (tmp && !memory)
        keel__os->unlink(tmp);
    keel__free(ngr);
    pthread_mutex_unlock(&idx->write_lock);
    keel__free(tmp);
    free(dir);
    return rc;
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
** an older version (keel__cache_switch), so a reader never goes back. */
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
            rc = keel__cache_switch(c, &next, accept_version, a);
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
            swap_store(idx, nw);
        }
    }
    keel__swap_unlock(idx);
    keel__manifest_free(&next);
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
    swap_store(idx, nw);
    keel__swap_unlock(idx);
    keel__store_close(st);
    return KEEL_OK;
}
