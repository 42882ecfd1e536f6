/* store_int.h -- what the store's own files share (private to src/store/).
**
** store.h is the store's face to the layers above; this header holds the
** helpers its files call in one another: the message of a failed system
** call on the index, and region.c's calls that grow the file and map its
** regions (used by idtab.c for its tables and by store.c for a reader's
** snapshots). Nothing outside src/store/ includes it.
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

#endif /* KEEL_STORE_INT_H */
