/* store.h -- the index file: opening, regions, slots, the heap, the id
** table, commits, recovery and snapshots.
**
** The store knows bytes and places, not graphs: graph.c and search.c reach
** slots, vectors and neighbour lists only through the accessors below, which
** keep every address inside a mapped region. The store never calls into the
** graph. Writers serialize calls that change the store (the api layer holds
** the write mutex); accessors may be called by any number of searches at the
** same time as one writer.
**
** The calls below are defined across src/store/: open.c (opening, closing),
** region.c (regions, slots, the heap), idtab.c (ids), commit.c (deletes,
** commits; the store's invariants (1)-(7)), store.c (views, snapshots),
** undo.c (keel__store_committed_lists) and, for keel_stat and keel_check,
** api/check.c; the store's private helpers are declared in store_int.h, the
** undo log's calls in undo.h.
*/
#ifndef KEEL_STORE_H
#define KEEL_STORE_H

#include <pthread.h>

#include "cache/cache.h"
#include "store/format.h"
#include "os/os.h"

typedef struct keel_segment {
    uint8_t *base;        /* the mapping; NULL if not mapped */
    uint8_t *hdrs;        /* slot headers: 16 bytes per slot */
    uint8_t *vecs;        /* vectors */
    uint8_t *recs;        /* level-0 records */
    uint8_t *codes;       /* traversal code rows; NULL without codes */
    uint64_t off, bytes;  /* place in the file */
    uint64_t slots;       /* capacity */
    uint64_t reserved;    /* writer: slots whose disk space is allocated */
} keel_segment;

typedef struct keel_chunk {
    uint8_t *base;
    uint64_t off, bytes;
    uint64_t reserved;    /* writer: bytes whose disk space is allocated */
} keel_chunk;

typedef struct keel_idtab {
    uint32_t *tab;        /* mapped table */
    uint64_t off;
    uint32_t log2;
} keel_idtab;

#define KEEL_MAX_IDTABS 40

typedef struct keel_store {
    int fd;
    int writer;               /* 1 for the writer */
    int memory;               /* 1: an index in memory (":memory:"): no
                               * name on disk, no undo log, no readers */
    char *path;
    /* Reader of a published index (s3://): the page cache whose memfd fd
     * is; the store maps it as it maps a file (cache.h). NULL otherwise. */
    keel_cache *remote;
    int remote_lent;          /* 1: remote belongs to another store (a
                               * reader opened over the same cache, or
                               * the one that replaced this one) */
    keel_geometry g;
    int metric, precision;
    uint8_t identity[KEEL_IDENTITY_BYTES]; /* reader: of the file it opened */
    uint8_t *pages;           /* headers + live page, read-only, 192 KiB */
    uint8_t *live;            /* writer: the live page, writable */

    /* Regions. Entries below the published counts never change while a
     * search may read them (readers remap only under the handle's
     * exclusive lock). Counts are published with release ordering. */
    keel_segment seg[KEEL_MAX_SEGMENTS];
    keel_chunk heap[KEEL_MAX_HEAP_CHUNKS];
    uint32_t nseg, nheap;     /* mapped, published */
    uint64_t seg_slots;       /* slots covered by the first nseg segments */
    keel_idtab idtabs[KEEL_MAX_IDTABS]; /* every table mapped; last = current */
    uint32_t nidtabs;
    uint64_t idtab_covers;    /* writer: slots below this are in the table */
    bool idtab_clean;         /* writer: the current table has no stale
                               * entries (this writer built it, and no slot
                               * it holds was given back since) */
    uint64_t huge_advised;    /* slots whose vectors had huge-page advice */
    int own_advice;           /* ranges have their own access advice (huge
                               * pages): cold searches leave the mappings'
                               * advice alone (pagein.c, under its lock) */
    /* Reader: mappings of uncommitted regions a restarted writer replaced.
     * They stay mapped until close, so a search that still reads one never
     * touches unmapped memory. The list grows with every restart seen. */
    struct keel_retired { void *addr; size_t len; } *retired;
    size_t nretired, retired_cap;

    /* Writer state (guarded by the handle's write mutex unless noted). */
    keel_header committed;    /* the last commit */
    keel_header work;         /* what the next commit will say */
    int newest_copy;          /* 0: copy A holds the newest valid header */
    uint64_t newest_seq;      /* its sequence: what the disk says, which a
                               * failed flush may have moved past committed */
    int poisoned;             /* a sync failed: no more commits */
    uint8_t *hdr_buf;         /* writer: KEEL_PAGE_SLOT bytes to encode
                               * headers in (a flush allocates nothing after
                               * its intent header) */
    uint64_t nslots;          /* slots written and linked (atomic) */
    uint64_t next_slot;       /* slots reserved (written or being written) */
    uint64_t epoch_now;       /* committed epoch, read by searches (atomic) */
    uint64_t entry_packed;    /* max_level << 32 | entry (atomic) */
    uint64_t *pend_bits[KEEL_MAX_SEGMENTS]; /* pending deletes (atomic bits) */
    uint32_t *pend_list;      /* slots deleted since the last flush */
    size_t pend_n, pend_cap;
    uint64_t file_len;        /* current length of the file */
    /* What a writer's searches and keel_count read while a write changes the
     * fields above: copies kept with atomic stores. */
    uint64_t pub_deleted;     /* committed deletes + pending deletes */
    uint64_t pub_next_id;
    uint64_t pub_sequence;

    /* Undo log (undo.c), guarded by undo_lock. */
    pthread_mutex_t undo_lock;
    int undo_fd;              /* -1 until the first save since a commit */
    uint64_t undo_end;
    uint64_t undo_identity;   /* hash of the commit the log undoes to */
    uint64_t undo_tag;        /* names this log in the live page and its own
                               * header (0 until the first save) */
    char *undo_path;          /* absolute path of the log, fixed at open */
    char *undo_for;           /* the store path undo_path was made for */
    double undo_synced_at;
    uint8_t *undo_buf;        /* an entry's bytes (at least the largest) */
    size_t undo_buf_cap;
    uint64_t *saved_bits[KEEL_MAX_SEGMENTS]; /* nodes saved (atomic bits) */
    uint32_t *undo_saved;     /* slots saved since the last commit */
    size_t undo_saved_n, undo_saved_cap;
    /* build.c: nodes whose lists an add call has journaled (atomic bits,
     * all clear between calls), for the segments below the call's first
     * slot; allocated by the first call that needs them. */
    uint64_t *journal_bits[KEEL_MAX_SEGMENTS];

    /* Reader state, guarded by snap_lock. */
    pthread_mutex_t snap_lock;
    keel_header snap;         /* the snapshot in use (snap.sequence 0: none) */
    unsigned snap_flags;      /* snap.flags, for readers of it without the
                               * lock (atomic) */
    uint64_t snap_words[4];   /* both copies' sequence and checksum words */
    int snap_both_valid;      /* both copies verified at the last look */
    uint64_t live_gen;        /* live page generation last looked at */
    uint32_t live_nseg;       /* live page segment count last looked at */
    uint32_t live_nheap;
} keel_store;

/* A consistent view for one search. */
typedef struct keel_view {
    const keel_store *st;
    uint64_t limit;           /* traverse slots below this */
    uint64_t count;           /* return only slots below this */
    uint64_t epoch;           /* reader: present iff mark 0 or > epoch */
    uint32_t entry, max_level;
    uint64_t deleted, next_id, sequence, heap_used;
    const keel_idtab *idtab;  /* id table of this view */
    int as_committed;         /* writer: ignore unflushed deletes */
    /* Batch linking: slots in [linked_base, limit) are skipped until their
     * byte in linked[] is set. */
    const uint8_t *linked;
    uint64_t linked_base;
} keel_view;

/* Opening and closing. Options are checked by the api layer; here dim 0
** means "take it from the file". */
typedef struct keel_store_params {
    uint32_t dim, M;
    int metric, precision;
    int codes;                /* KEEL_CODES_*: a new file's traversal codes */
    int have_options;         /* 1: metric/precision/M/codes were given */
    /* A new file's identity (compaction: the old file's); all zero: a new
     * random one. */
    uint8_t identity[KEEL_IDENTITY_BYTES];
} keel_store_params;

int keel__store_open_writer(const char *path, const keel_store_params *p,
                            keel_store **out);
int keel__store_open_reader(const char *path, keel_store **out);
/* The most of a published index's heap (its upper layers) a reader brings
** into its page cache at open, in one batch (open.c bring_heap). */
#define KEEL_REMOTE_HEAP_MAX ((uint64_t)8 << 20)
/* A reader of the published index behind c (cache.h), which the store
** takes over (closed with it, or here on failure). warm: the caller warms
** the reader as soon as it is open, and warm brings the heap first, so
** the open does not wait a batch of its own for it. */
int keel__store_open_remote(keel_cache *c, int warm, keel_store **out);
/* A new reader over the cache of the remote store old, as its image is
** now (the cache switched to another version): mappings and snapshot of
** that version's file. On success the new store owns the cache and old
** only borrows it (closing old unmaps and unregisters its mappings, and
** leaves the cache); on failure old still owns it. */
int keel__store_reopen_remote(keel_store *old, keel_store **out);
/* Refuses path, which stat found to be of type (enum keel_file_type, not a
** regular file): KEEL_EINVAL for a directory, KEEL_ENOTINDEX otherwise. */
int keel__not_regular_fail(const char *path, int type);
void keel__store_close(keel_store *st);
/* In a child after fork(): unmaps and closes what st holds, frees nothing
** and takes no lock (the parent's threads may have held any at the fork).
** A remote store's mappings are not inherited (MADV_DONTFORK). */
void keel__store_release_forked(keel_store *st);

/* Accessors (hot path). The slot must be below the view's limit. */
/* The sequence and checksum words of both header copies of st's file: any
** header write (a flush's intent or commit) changes them, so equal words
** before and after a copy of a reader's snapshot mean no flush began. */
static inline void
keel__store_header_words(const keel_store *st, uint64_t w[4])
{
    for (int c = 0; c < 2; c++) {
        const uint8_t *p = st->pages + (c ? KEEL_HDR_B_OFF : KEEL_HDR_A_OFF);
        w[2 * c] = KEEL_LOAD_ACQUIRE(
            (const uint64_t *)(const void *)(p + HO_SEQUENCE));
        w[2 * c + 1] = KEEL_LOAD_ACQUIRE(
            (const uint64_t *)(const void *)(p + HO_CHECKSUM));
    }
}

static inline const keel_segment *
keel__store_seg(const keel_store *st, uint64_t slot, uint64_t *index)
{
    uint32_t k = keel__slot_segment(&st->g, slot, index);
    return &st->seg[k];
}

static inline const void *
keel__store_vec(const keel_store *st, uint64_t slot)
{
    uint64_t i;
    const keel_segment *s = keel__store_seg(st, slot, &i);
    return KEEL_LOAD_RELAXED(&s->vecs) + i * st->g.vec_bytes;
}

/* A file with codes: its centre (dim floats at the start of heap chunk 0,
** doc/format.md 3), NULL while no heap chunk is mapped; meaningful once
** the file has a vector. */
static inline const float *
keel__store_centre(const keel_store *st)
{
    if (!st->g.code_bytes || KEEL_LOAD_ACQUIRE(&st->nheap) == 0)
        return NULL;
    return (const float *)(const void *)KEEL_LOAD_RELAXED(&st->heap[0].base);
}

/* The traversal code row of a slot (files with codes only). */
static inline const uint8_t *
keel__store_code(const keel_store *st, uint64_t slot)
{
    uint64_t i;
    const keel_segment *s = keel__store_seg(st, slot, &i);
    return KEEL_LOAD_RELAXED(&s->codes) + i * st->g.code_bytes;
}

/* The level-0 record: head word, then M0 neighbour slots. */
static inline uint64_t *
keel__store_rec(const keel_store *st, uint64_t slot)
{
    uint64_t i;
    const keel_segment *s = keel__store_seg(st, slot, &i);
    return (uint64_t *)(void *)(KEEL_LOAD_RELAXED(&s->recs) + i * st->g.rec_bytes);
}

static inline uint64_t
keel__store_id(const keel_store *st, uint64_t slot)
{
    uint64_t i;
    const keel_segment *s = keel__store_seg(st, slot, &i);
    return KEEL_LOAD_RELAXED(
        (const uint64_t *)(const void *)(KEEL_LOAD_RELAXED(&s->hdrs) + i * 16));
}

static inline uint64_t *
keel__store_mark(const keel_store *st, uint64_t slot)
{
    uint64_t i;
    const keel_segment *s = keel__store_seg(st, slot, &i);
    return (uint64_t *)(void *)(KEEL_LOAD_RELAXED(&s->hdrs) + i * 16 + 8);
}

/* Neighbour list of slot at level (level 0: M0 entries, else M), or NULL if
** the record's heap reference does not point into a mapped chunk (a reader
** looking at a node it may only route through). It only computes an
** address, so it is inline like the accessors above: undo.c reads lists
** through it without calling a function of the store. */
static inline uint32_t *
keel__store_list(const keel_store *st, uint64_t slot, uint32_t level,
                 uint32_t *len)
{
    uint64_t *rec = keel__store_rec(st, slot);
    if (level == 0) {
        *len = st->g.M0;
        return (uint32_t *)(rec + 1);
    }
    uint64_t head = KEEL_LOAD_ACQUIRE(&rec[0]);
    uint32_t lv = (uint32_t)(head & 0xFF);
    if (level > lv || lv >= KEEL_MAX_LEVELS)
        return NULL;
    uint64_t ref = head >> 16;
    uint32_t c = (uint32_t)(ref >> 32);
    uint64_t off = ref & 0xFFFFFFFFu;
    if (c >= KEEL_LOAD_ACQUIRE(&st->nheap))
        return NULL;
    const keel_chunk *ch = &st->heap[c];
    uint8_t *base = KEEL_LOAD_RELAXED(&ch->base);
    if (!base || off + 4ull * st->g.M * lv > ch->bytes || off % 4)
        return NULL;
    *len = st->g.M;
    return (uint32_t *)(void *)(base + off + 4ull * st->g.M * (level - 1));
}

/* Whether slot is a live vector in view v. */
static inline int
keel__store_present(const keel_view *v, uint64_t slot)
{
    const keel_store *st = v->st;
    if (slot >= v->count)
        return 0;
    if (v->deleted == 0)
        return 1; /* nothing deleted, committed or pending, at this view */
    uint64_t epoch = v->epoch;
    if (st->writer && !v->as_committed) {
        uint64_t i;
        uint32_t k = keel__slot_segment(&st->g, slot, &i);
        const uint64_t *bits = KEEL_LOAD_ACQUIRE(&st->pend_bits[k]);
        if (bits && (KEEL_LOAD_ACQUIRE(&bits[i >> 6]) >> (i & 63) & 1))
            return 0;
        epoch = KEEL_LOAD_ACQUIRE(&st->epoch_now);
    }
    uint64_t mark = KEEL_LOAD_RELAXED(keel__store_mark(st, slot));
    return mark == 0 || mark > epoch;
}

/* Views. A writer's view shows its own unflushed adds and deletes; a reader
** takes a fresh snapshot of the newest commit (mapping new regions), never
** older than one it used before. */
int keel__store_view(keel_store *st, keel_view *out);
/* Reader: whether the last snapshot said the file was superseded. */
int keel__store_superseded(const keel_store *st);
/* Takes a view like keel__store_view and copies the header it stands on
** into *out, a copy no other thread changes: a reader's fresh snapshot, a
** writer's last commit (the caller holds the write mutex). */
int keel__store_snapshot(keel_store *st, keel_view *v, keel_header *out);
/* The file's identity (writer: its committed header's; reader: the one it
** opened, which its snapshots keep). */
const uint8_t *keel__store_identity(const keel_store *st);

/* Writer: slots. Reserves n slots after the last written one (creating
** segments and allocating disk space); returns the first. The caller
** writes each slot with keel__store_write_slot, links it, then publishes. */
int keel__store_reserve(keel_store *st, uint64_t n, uint64_t *first);
/* Writes a slot: id, stored vector, its traversal code row (code_bytes
** of it, ignored when the file has no codes), level-0 head and empty list. */
void keel__store_write_slot(keel_store *st, uint64_t slot, uint64_t id,
                            const void *vec, const void *code, uint32_t level,
                            uint64_t heap_ref);
/* Makes slots below n visible to this handle's searches and routing readers. */
void keel__store_publish(keel_store *st, uint64_t n);
/* Forgets reserved slots at and after n (a failed batch). */
void keel__store_unreserve(keel_store *st, uint64_t n);

/* Writer: heap. Allocates an entry for `levels` upper lists (all EMPTY). */
int keel__store_heap_alloc(keel_store *st, uint32_t levels, uint64_t *ref);
/* A file with codes: places the centre c (dim floats) at the start of heap
** chunk 0, before anything else is allocated there (the first add). */
int keel__store_put_centre(keel_store *st, const float *c);
/* Saves and restores the heap position (a failed batch). */
uint64_t keel__store_heap_mark(const keel_store *st);
void keel__store_heap_reset(keel_store *st, uint64_t mark);

/* Writer: the entry point (also read by searches on this handle). */
static inline void
keel__store_entry(const keel_store *st, uint32_t *entry, uint32_t *max_level)
{
    uint64_t e = KEEL_LOAD_ACQUIRE(&st->entry_packed);
    *entry = (uint32_t)e;
    *max_level = (uint32_t)(e >> 32);
}
void keel__store_set_entry(keel_store *st, uint32_t entry, uint32_t max_level);

/* Ids. lookup finds the present slot with this id in view v: KEEL_OK,
** KEEL_ENOTFOUND, or the error of fetching the table or a header (a
** published index read without faults, store/pagein.h). The id table,
** both sides, lives in idtab.c. */
int keel__store_id_lookup(const keel_view *v, uint64_t id, uint64_t *slot);

/* An id's home entry in a table of 2^log2 entries (Fibonacci hashing: the
** top log2 bits of id times 2^64 / phi); probes go on to the next entry,
** wrapping (doc/format.md, the id table). */
static inline uint64_t
keel__idtab_home(uint64_t id, uint32_t log2)
{
    return (id * 0x9E3779B97F4A7C15ull) >> (64 - log2);
}
/* Writer: makes room for n_more ids (before writing their slots), then
** records id -> slot for each written slot; an insert that meets a table
** clogged by stale entries rebuilds it from the slots. */
int keel__store_id_reserve(keel_store *st, uint64_t n_more);
int keel__store_id_insert(keel_store *st, uint64_t id, uint64_t slot);
uint64_t keel__store_next_id(const keel_store *st);
void keel__store_note_id(keel_store *st, uint64_t id);
/* Sets the next automatic id back to next_id (a failed add). */
void keel__store_forget_ids(keel_store *st, uint64_t next_id);

/* Writer: deletes (hidden at once; durable at commit). */
int keel__store_delete(keel_store *st, uint64_t slot);
size_t keel__store_pending_deletes(const keel_store *st);
/* Room for deleting these n slots, so that deleting each cannot fail. */
int keel__store_delete_prepare(keel_store *st, const uint64_t *slots, size_t n);

/* The undo log (undo.c) has its own header, store/undo.h: the commit and
** open code and the graph's list changes include it; the api layer reaches
** committed lists only through keel__store_committed_lists below. */

/* The committed lists of commit h that the file no longer holds, for a
** copy of the commit (keel_backup, keel_publish): fn gets each as the
** bytes (len of them) that belong at off of the file, from the log of the
** commit: a writer's own (read under undo_lock), or for a reader the one
** its writer keeps, maybe in another process (the live page names it).
** The bytes live only during the call. Every list whose change began
** before this call has its entry in the log read (undo.c rule 1), so a
** copy that read the file before this call, then laid these over it,
** holds the commit's lists. Stops at fn's first nonzero answer (returned);
** KEEL_ENOMEM, KEEL_EIO, KEEL_ECORRUPT with a message. */
typedef int (*keel_committed_list_fn)(uint64_t off, uint64_t len,
                                      const uint8_t *bytes, void *arg);
int keel__store_committed_lists(keel_store *st, const keel_header *h,
                                keel_committed_list_fn fn, void *arg);

/* Writer: commit everything since the last commit. */
int keel__store_commit(keel_store *st);
/* Writer: drop unflushed adds and deletes is not offered: close instead. */

/* Writer: mark the file superseded (compaction), committed like a flush. */
int keel__store_set_superseded(keel_store *st, int on);

/* Facts for keel_stat and keel_check. */
int keel__store_stats(keel_store *st, keel_stats *out);
int keel__store_check(keel_store *st);

/* Byte ranges the index has written, for warm-up, in the order a search
** needs them: calls fn for each (address in this store's mappings);
** write_once: the range is vectors or code rows, written once per slot and
** never changed in place (the ranges huge-page advice may cover). */
typedef void (*keel_range_fn)(void *addr, size_t len, int write_once,
                              void *arg);
void keel__store_written_ranges(const keel_store *st, const keel_view *v,
                                keel_range_fn fn, void *arg);

#endif /* KEEL_STORE_H */
