/* follow.h -- a reader moving to what replaced its own file or version,
** and a handle moving to another store (follow.c).
*/
#ifndef KEEL_FOLLOW_H
#define KEEL_FOLLOW_H

#include "api/handle.h"

/* A reader moves to the file that replaced its own (compaction). A reader
** whose path names another index, or an older state of its own, keeps its
** last snapshot: follow returns KEEL_OK, or with report set, an error that
** names both files. */
int keel__reader_follow(keel_index *idx, int report);
/* A reader of a published index: looks for a newer version (force: now,
** else when the poll interval has passed) and moves to it under swap_lock
** held exclusively. */
int keel__remote_follow(keel_index *idx, int force);

/* Points the handle at another store, with swap_lock held exclusive: a
** reader following, and a compaction's swap (compact.c). The warm-up
** thread stops before the old store's mappings can go, and starts again on
** the new one if the handle asked for it (huge pages too). */
void keel__index_move(keel_index *idx, keel_store *nw);

/* The bracket around a public read: every call that reads an index through
** a handle opens with keel__read_enter and ends with keel__read_leave, so
** the order is written once:
**
**   1. a reader follows (keel__reader_follow), holding no lock;
**   2. swap_lock shared (or a writer's write_lock, with KEEL_READ_WRITE_LOCK);
**   3. with KEEL_READ_PAGES, the page cache's generation
**      (keel__remote_begin): a fetch that fails before the read leaves turns
**      its result into KEEL_EIO;
**   4. with KEEL_READ_VIEW, the view the read works from (r->v).
**
** keel__read_enter returns KEEL_OK holding the lock, or an error holding
** nothing (what it took is given back first: a failed view passes through
** step 3's check as it leaves). keel__read_leave gives back what enter took,
** in the reverse order, and returns rc (or KEEL_EIO from step 3). */
enum {
    KEEL_READ_VIEW = 1,       /* take a view */
    KEEL_READ_PAGES = 2,      /* the read may fault in a published index's
                                 pages, not only its pinned header */
    KEEL_READ_REPORT = 4,     /* a file or version the reader refused to move
                                 to is an error (keel_refresh, keel_check);
                                 else the reader keeps its snapshot quietly */
    KEEL_READ_ANYWAY = 8,     /* a follow that fails is forgotten and the read
                                 goes on with the snapshot the reader has
                                 (keel_count, which returns no error) */
    KEEL_READ_WRITE_LOCK = 16, /* a writer waits out a write in progress
                                 (write_lock, not swap_lock): keel_stat and
                                 keel_check read its last commit whole */
    KEEL_READ_CANCEL = 32     /* r->stop, set by the caller, is a search's
                                 (below) */
};

typedef struct keel_read {
    unsigned how;             /* the KEEL_READ_* flags enter was given */
    uint64_t gen;             /* KEEL_READ_PAGES: the cache's generation */
    keel_stop *stop;          /* KEEL_READ_CANCEL: a search's, set by the
                                 caller; enter starts it (the handle's
                                 cancel for a published index, read under
                                 the lock) and step 3 polls it while it
                                 waits for eviction (cache.h invariant 8) */
    keel_view v;              /* KEEL_READ_VIEW: the read's view */
} keel_read;

int keel__read_enter(keel_index *idx, keel_read *r, unsigned how);
int keel__read_leave(keel_index *idx, keel_read *r, int rc);

#endif /* KEEL_FOLLOW_H */
