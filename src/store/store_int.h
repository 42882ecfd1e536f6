/* store_int.h -- what the store's own files share (private to src/store/).
**
** store.h is the store's face to the layers above; this header holds the
** helpers its files call in one another: the message of a failed system
** call on the index, region.c's calls that grow the file and map its
** regions (used by idtab.c for its tables and by store.c for a reader's
** snapshots), commit.c's header writes and syncs (used at open), and
** store.c's snapshot refresh (used at a reader's open).
** Nothing outside src/store/ includes it.
*/
#ifndef KEEL_STORE_INT_H
#define KEEL_STORE_INT_H

#include "store/store.h"

/* region.c: the message of a failed system call on the index: "<what>
** <path> failed", what being a verb phrase whose object is the path
** ("opening", "syncing", "reading the header of"), and a help line for the
** errno (a negative errno). Returns the KEEL_E* code. */
int keel__store_io_fail(int err, const char *what, const char *path);

/* region.c: regions. map_region maps bytes of st's file at off (read-write
** for the writer; a remote store registers the mapping with its cache).
** new_region appends a region of bytes at the writer's end of file, growing
** the file; reserve_space allocates its disk space (invariant 8).
** live_put_regions copies the writer's region tables into the live page. */
int keel__store_map_region(keel_store *st, uint64_t off, uint64_t bytes,
                           uint8_t **out);
int keel__store_new_region(keel_store *st, uint64_t bytes, uint64_t *off);
int keel__store_reserve_space(keel_store *st, uint64_t off, uint64_t len);
void keel__store_live_put_regions(keel_store *st);

/* region.c: maps segment k, or heap chunk c, at off; a mapping at another
** place (an uncommitted region a restarted writer replaced) is retired,
** not unmapped (invariant 9). map_committed maps every region header h
** counts, and its id table. */
int keel__store_map_segment_at(keel_store *st, uint32_t k, uint64_t off);
int keel__store_map_chunk_at(keel_store *st, uint32_t c, uint64_t off);
int keel__store_map_committed(keel_store *st, const keel_header *h);

/* commit.c: poison marks the writer poisoned (invariant 7) and returns
** keel__store_io_fail's code; write_header encodes h into copy 0 (A) or 1
** (B) with the buffer made at open (it allocates nothing); sync syncs the
** file. A failed write or sync poisons the writer. */
int keel__store_poison(keel_store *st, int err, const char *what);
int keel__store_write_header(keel_store *st, keel_header *h, int copy);
int keel__store_sync(keel_store *st);

/* store.c: takes the newest valid header of a reader's file into st->snap
** (never an older commit than the one in use), mapping the regions it
** names. Called with snap_lock held, or by the open before any search. */
int keel__store_refresh_snapshot(keel_store *st);

#endif /* KEEL_STORE_INT_H */
