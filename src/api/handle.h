/* handle.h -- the handle behind keel_index: its fields, its locks, and the
** pieces every file of the api layer shares (handle.c).
**
** The locks of a handle:
**
**   write_lock  serializes adds, deletes, flushes and compaction (writer),
**               and keeps a writer's stat, check and warm off a half-done
**               write;
**   swap_lock   searches hold it shared; compaction's swap of the store and
**               close hold it exclusive, so no search reads a store that goes;
**               the setters of the progress and cancel callbacks hold it
**               exclusive too (inside write_lock), since a reader's swap
**               copies them into the new builder under it alone;
**   gate_lock   the gate in front of swap_lock (keel__swap_shared, below);
**   pool_lock   guards the list of free search contexts.
**
** Order: write_lock before swap_lock (compaction swaps with write_lock
** held), never the other way round. The gate lock and pool_lock are held
** across no other lock.
**
** After fork() the child may only close the handle: it takes none of these
** locks there, since a thread of the parent may have held any of them at
** the fork, and that thread does not exist in the child.
**
** Searches take no lock a write holds: they read the store through views,
** so a search on a writer handle runs while an add on another thread links.
*/
#ifndef KEEL_HANDLE_H
#define KEEL_HANDLE_H

#include "hnsw/build.h"

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

struct keel_warm;

struct keel_index {
    keel_store *st;            /* swapped only under swap_lock exclusive */
    keel_graph *gr;
    keel_builder builder;
    char *path;
    int writer;
    uint32_t dim;
    int metric, precision;
    uint32_t ef_search, ef_construction, threads;
    unsigned flags;            /* KEEL_WARM | KEEL_HUGE_PAGES (atomic) */
    float *conv;               /* writer: 3 * dim floats of scratch, then
                                  a traversal code row */
    keel_progress_fn progress;
    void *progress_arg;
    keel_cancel_fn cancel;
    void *cancel_arg;
    pthread_mutex_t write_lock;
    pthread_rwlock_t swap_lock;
    /* The gate in front of swap_lock (keel__swap_shared): exclusive
     * takers waiting (atomic), and where shared takers wait for them. */
    int swap_waiters;
    pthread_mutex_t gate_lock;
    pthread_cond_t gate_open;
    pthread_mutex_t pool_lock;
    keel_search_ctx *pool;     /* free search contexts */
    struct keel_warm *warm;    /* the warm-up thread, if one runs */
    pid_t owner;               /* process that opened the handle */
    /* Reader: the file last found at the path that it refused to move to
     * (follow.c), under swap_lock: dev and ino to know it again without
     * opening it, and what the error names. older: it was the same index
     * at a state no later than the reader's (a copy put back), else another
     * index. */
    struct {
        uint64_t dev, ino;
        int older;
        uint32_t dim;
        uint8_t identity[KEEL_IDENTITY_BYTES];
        uint64_t epoch, next_id;          /* older: that file's */
        uint64_t own_epoch, own_next_id;  /* older: the reader's */
        uint64_t seq;                     /* URL: the refused version */
    } refused;
    /* Reader of a published index: its cache switched to a version the
     * store over it could not be reopened for (follow.c), under swap_lock;
     * calls through the cache fail until a follow reopens it. */
    int remote_stale;
    /* Writer: backups copying the last commit (backup.c), under
     * write_lock; flushes wait on backup_done while it is nonzero. */
    unsigned backups;
    pthread_cond_t backup_done;
};

/* Argument checks: KEEL_EINVAL with the message, from the calling function. */
#define NEED(cond, ...)                                                     \
    do {                                                                    \
        if (!(cond))                                                        \
            return keel__fail(KEEL_EINVAL, __VA_ARGS__);                    \
    } while (0)

/* KEEL_EINVAL: public function fn was given a NULL index. */
int keel__null_handle(const char *fn);

/* A handle with its locks made and no store (NULL with a message when out
** of memory); keel__index_free takes it apart again, store and search
** contexts with it (in a forked child, only what the system holds). The
** caller of keel__index_free has stopped the warm-up thread
** (keel__warm_stop) and holds none of the handle's locks. */
keel_index *keel__index_new(const char *path, const keel_options *o,
                            int writer);
void keel__index_free(keel_index *idx);

/* Points the handle at a store (at open, and when it moves to another: a
** compaction, a reader following one). After open, the caller holds
** swap_lock exclusive. */
int keel__index_attach(keel_index *idx, keel_store *st);

/* A search context from the handle's pool (or a new one; NULL when out of
** memory), and back into the pool. */
keel_search_ctx *keel__ctx_get(keel_index *idx);
void keel__ctx_put(keel_index *idx, keel_search_ctx *c);

/* With write_lock held, waits until no backup copies the last commit (a
** commit must not move it while one does). */
void keel__backup_wait(keel_index *idx);

/* swap_lock. glibc's rwlock lets new shared takers in while an exclusive
** one waits, so searches that overlap without a pause (a few threads on a
** few cores) kept a refresh, a warm or a compaction's swap waiting for as
** long as they went on. Exclusive takers therefore announce themselves
** (swap_waiters), and a thread that does not hold the lock yet waits at the
** gate until none waits before it takes the lock shared. A thread that
** holds it already (a callback of its search calling into keel) passes:
** the exclusive taker waits for it. keel__swap_depth counts, per thread,
** the swap_locks it holds, of any handle. keel__swap_exclusive and
** keel__swap_unlock keep the lock order above; the gate lock is held by
** nobody across any other lock. */
extern _Thread_local int keel__swap_depth;

static inline void
keel__swap_shared(keel_index *idx)
{
    /* A forked child may inherit a count of waiters that are not its
     * own threads: only the process that opened the handle waits. */
    if (keel__swap_depth == 0 &&
        __atomic_load_n(&idx->swap_waiters, __ATOMIC_ACQUIRE) &&
        idx->owner == getpid()) {
        pthread_mutex_lock(&idx->gate_lock);
        while (__atomic_load_n(&idx->swap_waiters, __ATOMIC_ACQUIRE))
            pthread_cond_wait(&idx->gate_open, &idx->gate_lock);
        pthread_mutex_unlock(&idx->gate_lock);
    }
    pthread_rwlock_rdlock(&idx->swap_lock);
    keel__swap_depth++;
}

static inline void
keel__swap_exclusive(keel_index *idx)
{
    __atomic_add_fetch(&idx->swap_waiters, 1, __ATOMIC_ACQ_REL);
    pthread_rwlock_wrlock(&idx->swap_lock);
    keel__swap_depth++;
    pthread_mutex_lock(&idx->gate_lock);
    if (__atomic_sub_fetch(&idx->swap_waiters, 1, __ATOMIC_ACQ_REL) == 0)
        pthread_cond_broadcast(&idx->gate_open);
    pthread_mutex_unlock(&idx->gate_lock);
}

static inline void
keel__swap_unlock(keel_index *idx)
{
    keel__swap_depth--;
    pthread_rwlock_unlock(&idx->swap_lock);
}

/* Around every call that reads a published index's pages, with swap_lock
** held shared: a fault whose fetch failed meanwhile turns the call's result
** into KEEL_EIO (cache.h). No-ops for a file. A search passes its stop:
** its cancel ends a wait for eviction at the start (cache.h invariant 8). */
static inline uint64_t
keel__remote_begin_stop(keel_index *idx, keel_stop *stop)
{
    return idx->st->remote ? keel__cache_begin(idx->st->remote, stop) : 0;
}
/* The same for a call that nothing cancels. */
static inline uint64_t
keel__remote_begin(keel_index *idx)
{
    return keel__remote_begin_stop(idx, NULL);
}
static inline int
keel__remote_end(keel_index *idx, uint64_t gen, int rc)
{
    if (!idx->st->remote)
        return rc;
    rc = keel__cache_end(idx->st->remote, gen, rc);
    if (rc == KEEL_OK && idx->remote_stale)
        rc = keel__fail(KEEL_EIO, "the reader of %s could not open the "
                        "version it switched to\nhelp: call keel_refresh "
                        "to retry, or open the reader again",
                        idx->st->remote->url);
    return rc;
}

#endif /* KEEL_HANDLE_H */
