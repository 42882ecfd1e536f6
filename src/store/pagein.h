/* pagein.h -- the local file's pages for the batch-read policy: what is
** known resident of each open store, and the source that brings the rest in
** (system read-ahead advice on the index's own mappings).
**
** The residency record (keel_br_record) lets a file already in memory pay
** nothing: a bit per granule (KEEL_BR_GRANULE_LOG2) of the file, set from
** what the system reports resident when the record is made (mincore on a
** sample, once per file and per new stretch of slots), then as granules
** are brought in,
** and all at once when warm has read everything. Ranges whose granules are
** all known never reach the policy; a file known resident, a file warm is
** reading, and every search after the first of an opened file
** (KEEL_BR_COLD_SEARCHES) never call this module at all.
**
** While a search brings its own pages in (a cold search), the index's
** mappings have random-access advice, so the faults it still takes read
** their page alone instead of read_ahead_kb around it; the last cold
** search to end gives the mappings back their normal advice.
*/
#ifndef KEEL_PAGEIN_H
#define KEEL_PAGEIN_H

#include "io/batch_reads.h"
#include "store/store.h"

/* Searches per record (per open file) that bring pages in; later searches
** fault as without this module. (Measured, doc/batch_reads.md: the
** advice gets the first results sooner, but past the first few queries
** the system's own read-around, which grows its reads as a fault finds
** pages it read ahead, brings the file in faster than advice for the
** pages each step needs.) -D for measurements; 0 = no limit. */
#ifndef KEEL_BR_COLD_SEARCHES
#define KEEL_BR_COLD_SEARCHES 1u
#endif

#define KEEL_BR_LEAF_LOG2 14u   /* granules per leaf: 1 GiB of file */
#define KEEL_BR_LEAVES 4096u     /* 4 TiB */

/* What is known resident of one store's file: a bit per granule (set
** atomically, never cleared), and which granules a search may ask for (the
** vectors and level-0 records of slots below `covered`). */
typedef struct keel_br_record {
    const keel_store *st;
    uint64_t covered;          /* slots counted in total (atomic) */
    uint64_t total;            /* granules a search may ask for (atomic) */
    uint64_t known;            /* of those, known resident (atomic) */
    int all;                   /* atomic: known == total */
    uint64_t searches;         /* searches that used the record (atomic) */
    int warming;               /* atomic: warm is reading the whole file */
    uint32_t cold_active;      /* cold searches running (under reg_lock) */
    uint64_t *bits[KEEL_BR_LEAVES];
    uint64_t *need[KEEL_BR_LEAVES];
    struct keel_br_record *next;
} keel_br_record;

/* A search context's memory of the record it used last. */
typedef struct keel_br_cache {
    const keel_store *st;
    keel_br_record *rec;
    uint64_t gen;
} keel_br_cache;

/* A file is too small to gain when it has fewer granules than
** KEEL_BR_SMALL_FACTOR * ef: an unfiltered walk measures about 16 ef
** vectors, so its first search touches most of such a file, and the
** system's read-around, which grows its reads as it goes, brings it in
** sooner than advice for the granules each step needs. (Measured,
** doc/batch_reads.md: 100k x 100-d, 830 granules, 1st result 65 ms on
** against 55 off; 30k x 768-d, 1,470 granules, 86 against 107; ef 64.) */
#define KEEL_BR_SMALL_FACTOR 16u

/* The record of st brought up to view v (created on first use, remembered
** in c); NULL when the module is off, when every granule a search may ask
** for is known resident, while warm reads the file, after the first
** KEEL_BR_COLD_SEARCHES searches, for a file too small to gain (above;
** ef: the search's), or when out of memory (the search then
** faults its pages in one by one, as without this module). */
keel_br_record *keel__br_record(keel_br_cache *c, const keel_store *st,
                                const keel_view *v, uint32_t ef);
/* How many candidates a cold level-0 walk of st expands in one step
** (io/batch_reads.h keel__br_beam), for a graph of M0 links at level 0:
** keel__br_beam() for a local file; for a published index as many as keep
** one fetch's granules (3 (M0 + 1) ranges per expansion, each within two
** granules) within a quarter of st's memory bound, at least 1. */
uint32_t keel__br_beam_of(const keel_store *st, uint32_t M0);
/* How many queued candidates a level-0 walk of st (a published index;
** 0 for a local file) looks ahead to (io/batch_reads.h keel__br_ahead),
** with M0 + 1 ranges of vector and record each per candidate, beside the
** beam's 3 beam (M0 + 1): as many as keep one fetch's granules within a
** quarter of st's memory bound, so installing them never evicts what the
** walk fetched a step before or the records it reads to look ahead (with
** the 8 MiB floor, none; with the 1 GiB default, M 16 and a beam of 8,
** the full 8). */
uint32_t keel__br_remote_ahead(const keel_store *st, uint32_t M0,
                               uint32_t beam);

/* Fetches that sent GETs so far (cache.h's rounds counter) for a published
** index; 0 for a local file. A walk compares it around a bring to learn
** whether that bring waited for a round trip. */
uint64_t keel__br_fetches(const keel_br_record *rec);

/* The search that got rec from keel__br_record has ended (every record
** returned is given back exactly once). */
void keel__br_done(keel_br_record *rec);

/* Whether every granule of [off, off+len) is known resident. */
static inline int
keel__br_known(const keel_br_record *rec, uint64_t off, uint64_t len)
{
    uint64_t g = off >> KEEL_BR_GRANULE_LOG2;
    uint64_t last = (off + len - 1) >> KEEL_BR_GRANULE_LOG2;
    for (; g <= last; g++) {
        uint64_t leaf = g >> KEEL_BR_LEAF_LOG2;
        if (leaf >= KEEL_BR_LEAVES)
            return 0;
        const uint64_t *b = KEEL_LOAD_ACQUIRE(&rec->bits[leaf]);
        uint64_t w = g & ((1u << KEEL_BR_LEAF_LOG2) - 1);
        if (!b || !(KEEL_LOAD_RELAXED(&b[w >> 6]) >> (w & 63) & 1))
            return 0;
    }
    return 1;
}

/* Adds to want[] (returning the new count) the granules around the n bytes
** at addr, which lie in a mapping of map_bytes bytes at map (file offset
** map_off), unless all are known resident. */
static inline size_t
keel__br_want(const keel_br_record *rec, keel_br_range *want, size_t nw,
              const uint8_t *addr, uint64_t n, const uint8_t *map,
              uint64_t map_off, uint64_t map_bytes)
{
    uint64_t off = map_off + (uint64_t)(addr - map);
    /* A published index: the page cache's own states, read without a lock
     * (cache.h keel__cache_has), so a search whose pages are all in
     * announces nothing. */
    if (rec->st->remote ? keel__cache_has(rec->st->remote, off, n)
                        : keel__br_known(rec, off, n))
        return nw;
    uint64_t gsz = (uint64_t)1 << KEEL_BR_GRANULE_LOG2;
    uint64_t lo = off & ~(gsz - 1), hi = KEEL_ALIGN_UP(off + n, gsz);
    lo = KEEL_MAX(lo, map_off);
    hi = KEEL_MIN(hi, map_off + map_bytes);
    want[nw].off = lo;
    want[nw].len = hi - lo;
    want[nw].addr = map + (lo - map_off);
    return nw + 1;
}

/* Brings in the ranges r[0..n) of the local file behind rec with the
** policy and the local source, and marks them known; KEEL_OK, KEEL_EIO
** (message recorded) or KEEL_ENOMEM. For a published index (st->remote)
** the record is made for every search and the ranges go to its page
** cache (cache.h keel__cache_bring), which fetches the missing granules
** with the same policy; its record's bits stay clear. stop (the search's,
** or NULL) reaches only that cache: its GETs are waited for in slices, and
** a stop there is KEEL_ECANCELED (a local file's advice does not wait). */
int keel__br_local(keel_br_record *rec, const keel_br_range *r, size_t n,
                   keel_br_scratch *s, keel_stop *stop);

/* --- explicit fetches of a published index (cache.h invariant 7) --------- */

/* Whether reads of st must be announced: a published index whose cache
** serves no faults (no userfaultfd). A local file, or a cache with one,
** reads anything at any time. */
static inline int
keel__store_announces(const keel_store *st)
{
    return st->remote && !keel__cache_faults(st->remote);
}

/* Brings the len bytes at file offset off of st's published index in
** before the caller reads them (ranges already in cost a lock-free look at
** their states); KEEL_OK at once when st does not announce. KEEL_EIO with
** the fetch's message, or KEEL_ENOMEM. */
int keel__store_need(const keel_store *st, uint64_t off, uint64_t len);

/* What of a slot keel__store_need_slots brings. */
#define KEEL_NEED_VEC 1u    /* its vector */
#define KEEL_NEED_REC 2u    /* its level-0 record (and list) */
#define KEEL_NEED_HDR 4u    /* its slot header: id and delete mark */

/* The same for `what` of slots s[0..n), in one batch. */
int keel__store_need_slots(const keel_store *st, const uint32_t *s, size_t n,
                           unsigned what);
/* The same for the list of slot at level (> 0, in the heap) whose record
** is in: a walk's next read of an upper layer. */
int keel__store_need_list(const keel_store *st, uint64_t slot,
                          uint32_t level);
/* Everything of st's image (keel_check reads it all). */
int keel__store_need_all(const keel_store *st);

/* warm: started reading the whole file of st; searches leave the reading
** to it (their advice would only queue behind warm's: measured,
** doc/batch_reads.md). */
void keel__br_warming(const keel_store *st);
/* Ranges of st now have their own access advice (huge pages): cold
** searches leave the mappings' advice alone from now on. */
void keel__br_own_advice(keel_store *st);
/* warm: every written granule of st is now resident (as of view v). */
void keel__br_warmed(const keel_store *st, const keel_view *v);
/* The store's mappings are about to go (close, compaction's swap): drops
** its record. No search may run on st at the same time. */
void keel__br_forget(const keel_store *st);

#endif /* KEEL_PAGEIN_H */
