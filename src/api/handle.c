/* handle.c -- a handle's life: made with its locks, pointed at a store,
** its pool of search contexts, and taken apart again; and the waits on its
** locks that more than one file of the api layer takes.
**
** The locks, their order and the swap gate are described in handle.h.
** Invariant: idx->st changes only under swap_lock held exclusive (at open,
** before the handle is returned, no other thread has it yet).
*/
#include "api/handle.h"

#include <stdlib.h>

_Thread_local int keel__swap_depth;

int
keel__null_handle(const char *fn)
{
    return keel__fail(KEEL_EINVAL, "%s was given a NULL index\nhelp: pass the "
                      "handle keel_open or keel_open_reader returned", fn);
}

keel_index *
keel__index_new(const char *path, const keel_options *o, int writer)
{
    keel_index *idx = keel__calloc(1, sizeof *idx);
    if (!idx)
        return NULL;
    idx->path = strdup(path);
    idx->gr = keel__calloc(1, sizeof *idx->gr);
    if (!idx->path || !idx->gr) {
        free(idx->path);
        keel__free(idx->gr);
        keel__free(idx);
        keel__fail(KEEL_ENOMEM, "out of memory opening %s\nhelp: free memory",
                   path);
        return NULL;
    }
    idx->writer = writer;
    idx->ef_search = o && o->ef_search ? o->ef_search : 64;
    idx->ef_construction = o && o->ef_construction ? o->ef_construction : 200;
    idx->threads = o && o->threads ? o->threads : keel__cpu_count();
    idx->flags = o ? o->flags : 0;
    idx->owner = getpid();
    pthread_mutex_init(&idx->write_lock, NULL);
    pthread_mutex_init(&idx->pool_lock, NULL);
    pthread_rwlock_init(&idx->swap_lock, NULL);
    pthread_mutex_init(&idx->gate_lock, NULL);
    pthread_cond_init(&idx->gate_open, NULL);
    pthread_cond_init(&idx->backup_done, NULL);
    return idx;
}

void
keel__index_free(keel_index *idx)
{
    int forked = idx->owner != getpid();
    if (forked) {
        /* A child after fork(): a parent's thread may have held any lock,
         * the allocator's among them, when the process was copied. Release
         * what the child holds in the system (mappings, descriptors) and
         * call nothing that may wait; the child's copy of the heap goes
         * with the child. */
        keel__store_release_forked(idx->st);
        return;
    }
    for (keel_search_ctx *c = idx->pool, *n; c; c = n) {
        n = c->next;
        keel__search_ctx_free(c);
    }
    keel__store_close(idx->st);
    keel__free(idx->conv);
    keel__free(idx->gr);
    pthread_mutex_destroy(&idx->write_lock);
    pthread_mutex_destroy(&idx->pool_lock);
    pthread_rwlock_destroy(&idx->swap_lock);
    pthread_mutex_destroy(&idx->gate_lock);
    pthread_cond_destroy(&idx->gate_open);
    pthread_cond_destroy(&idx->backup_done);
    free(idx->path);
    keel__free(idx);
}

/* After open, the caller holds swap_lock exclusive: that keeps the
** callbacks it copies from the handle still against keel_set_progress and
** keel_set_cancel, which a reader following a compaction does not hold
** write_lock against. */
int
keel__index_attach(keel_index *idx, keel_store *st)
{
    idx->st = st;
    /* Written only when they change (at open): a reader follows only to
     * its own index, so a search that reads them before taking swap_lock
     * never races the swap. */
    if (idx->dim != st->g.dim)
        idx->dim = st->g.dim;
    if (idx->metric != st->metric)
        idx->metric = st->metric;
    if (idx->precision != st->precision)
        idx->precision = st->precision;
    keel__graph_init(idx->gr, st);
    keel__build_init(&idx->builder, idx->gr, idx->ef_construction);
    idx->builder.progress = idx->progress;
    idx->builder.progress_arg = idx->progress_arg;
    idx->builder.cancel = idx->cancel;
    idx->builder.cancel_arg = idx->cancel_arg;
    return KEEL_OK;
}

keel_search_ctx *
keel__ctx_get(keel_index *idx)
{
    pthread_mutex_lock(&idx->pool_lock);
    keel_search_ctx *c = idx->pool;
    if (c)
        idx->pool = c->next;
    pthread_mutex_unlock(&idx->pool_lock);
    if (c && (c->dim != idx->dim || c->M0 != idx->gr->M0)) {
        keel__search_ctx_free(c);
        c = NULL;
    }
    return c ? c : keel__search_ctx_new(idx->gr);
}

void
keel__ctx_put(keel_index *idx, keel_search_ctx *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&idx->pool_lock);
    c->next = idx->pool;
    idx->pool = c;
    pthread_mutex_unlock(&idx->pool_lock);
}

void
keel__backup_wait(keel_index *idx)
{
    while (idx->backups)
        pthread_cond_wait(&idx->backup_done, &idx->write_lock);
}
