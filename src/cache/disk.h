/* disk.h -- the disk cache of published pages: a directory of files, one per
** 64 KiB page, named by the page's xxh3-128 (32 hex digits).
**
** A name is its content's hash, so a file is either absent or right: a page
** that changed between versions has another name, and a file is never
** served stale. Each file is written under a temporary name of its own
** (".tmp-PID-N") and renamed into place, so processes sharing the
** directory never see half a page; a file is checked against its name when
** read, so damage costs only a fetch. A handle looks only for the names it
** listed at open (or at a later count) or wrote itself: a page another
** process writes meanwhile is fetched again. The directory is bounded: when the
** bytes this process believes it holds pass the limit, the oldest files (by
** modification time, which a hit refreshes) go until it holds 3/4 of it.
*/
#ifndef KEEL_DISK_H
#define KEEL_DISK_H

#include <stddef.h>
#include <stdint.h>

#define KEEL_DISK_PAGE ((size_t)1 << 16)

typedef struct keel_disk keel_disk;

/* Opens (creating it if missing) the cache directory dir with a limit of
** limit bytes (0: no limit). KEEL_OK, or KEEL_EIO with a message naming
** dir. */
int keel__disk_open(const char *dir, uint64_t limit, keel_disk **out);
void keel__disk_close(keel_disk *d);

/* Reads the page named (hi, lo) into buf (KEEL_DISK_PAGE bytes): 1 if the
** cache holds it whole and right, 0 otherwise (never an error: a miss). */
int keel__disk_get(keel_disk *d, uint64_t hi, uint64_t lo, void *buf);

/* Stores a page already checked against its name; failures only cost a
** later fetch (the cache is an optimisation, never the truth). */
void keel__disk_put(keel_disk *d, uint64_t hi, uint64_t lo, const void *buf);

/* Bytes of pages the directory held at the last count (open, eviction),
** plus this process's puts since; files removed by eviction (counted). */
uint64_t keel__disk_bytes(const keel_disk *d);
uint64_t keel__disk_evicted(const keel_disk *d);

#endif /* KEEL_DISK_H */
