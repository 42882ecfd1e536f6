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

#endif /* KEEL_FOLLOW_H */
