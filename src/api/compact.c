/* compact.c -- keel_compact: an index rewritten into a new file that holds
** only its live vectors, which then takes the old file's place.
**
** Compaction, with the writer lock held throughout:
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
** may be at the path; both hold the same live vectors and ids. Readers of
** the old file move to the new one by themselves (follow.c).
**
** Locks: write_lock from the flush to the end; swap_lock exclusive only
** around the swap (step 5, keel__index_move), inside write_lock as handle.h
** orders them. The old store is closed after swap_lock is released, so no
** search that read it under the lock still uses it.
*/
#include "api/compact.h"
#include "api/follow.h"

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
    keel__index_move(idx, nw);
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
