/* api.h -- the handle behind keel_index, shared by the api layer's files
** (api.c: the public calls; life.c: compaction and readers following it;
** warm.c: background warm-up and huge pages).
*/
#ifndef KEEL_API_H
#define KEEL_API_H

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
     * (life.c), under swap_lock: dev and ino to know it again without
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
     * store over it could not be reopened for (life.c), under swap_lock;
     * calls through the cache fail until a follow reopens it. */
    int remote_stale;
    /* Writer: backups copying the last commit (backup.c), under
     * write_lock; flushes wait on backup_done while it is nonzero. */
    unsigned backups;
    pthread_cond_t backup_done;
};

int keel__index_attach(keel_index *idx, keel_store *st);

/* The repeat in ids[0..n) whose second use comes first: 1 with *first (the
** id's first place) and *second set, 0 if every id is distinct, -1 out of
** memory (message recorded). O(n log n). */
int keel__first_repeat(const uint64_t *ids, size_t n, size_t *first,
                       size_t *second);
keel_search_ctx *keel__ctx_get(keel_index *idx);
void keel__ctx_put(keel_index *idx, keel_search_ctx *c);

/* api.c, for radius.c: checks a query's components (KEEL_EINVAL with a
** message); the query as searched (normalized into buf for cosine). */
int keel__check_query(const keel_index *idx, const float *q);
const float *keel__prep_query(const keel_index *idx, const float *q,
                              float *buf);

/* life.c: a reader moves to the file that replaced its own (compaction);
** a writer removes what a crashed compaction left. A reader whose path
** names another index, or an older state of its own, keeps its last
** snapshot: follow returns KEEL_OK, or with report set, an error that
** names both files. */
int keel__reader_follow(keel_index *idx, int report);
/* A reader of a published index: looks for a newer version (force: now,
** else when the poll interval has passed) and moves to it under swap_lock
** held exclusively (life.c). */
int keel__remote_follow(keel_index *idx, int force);

/* Around every call that reads a published index's pages, with swap_lock
** held shared: a fault whose fetch failed meanwhile turns the call's result
** into KEEL_EIO (cache.h). No-ops for a file. */
static inline uint64_t
keel__remote_begin(keel_index *idx)
{
    return idx->st->remote ? keel__cache_begin(idx->st->remote) : 0;
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

/* Tests: what the page cache of a reader of a published index did;
** KEEL_EINVAL for any other handle. */
int keel__remote_counters(keel_index *idx, keel_cache_counters *out);
void keel__remove_leftovers(const char *path);

/* warm.c */
int keel__warm_start(keel_index *idx);
void keel__warm_stop(keel_index *idx);
/* 1 when the handle's warm-up has read everything (tests). */
int keel__warm_done(keel_index *idx);
/* Whether a warm-up of this process runs on idx now (benchmarks and tests
** wait for it to end; takes the swap lock shared). */
int keel__warm_running(keel_index *idx);
void keel__huge_pages_advise(keel_index *idx);
void keel__huge_pages_advise_batch(keel_index *idx, uint64_t first, uint64_t n);

/* backup.c: with write_lock held, waits until no backup copies the last
** commit (a commit must not move it while one does). */
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
** keel__swap_unlock keep api.c's lock order; the gate lock is held by
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

#endif /* KEEL_API_H */
