/* region.c -- the index file's regions: slot segments and heap chunks (adding
** them at the end of the file, reserving their disk space, mapping them, and
** retiring a mapping a restarted writer replaced), writing slots into
** segments, and allocating upper-layer lists from the heap.
**
** A segment holds slot headers, vectors, level-0 records and code rows for a
** run of slots; a heap chunk holds upper-layer lists, and chunk 0 of a file
** with codes their centre first (doc/format.md has their layout; format.h's
** keel__seg_layout and keel__heap_chunk_bytes the sizes). The writer grows
** both at its end of file and lists them in the live page so readers can
** route through nodes not yet committed; commits (commit.c) name them in the
** header. idtab.c makes its tables' regions through the same calls, and
** keel__store_map_committed maps the table a header names.
**
** Also here, for every file of the store, keel__store_io_fail: the message of
** a failed system call on the index file.
**
** Two of the store's invariants hold here (numbered after commit.c's (1)-(7),
** and cited by these numbers elsewhere); keel__store_write_slot also keeps
** commit.c's (4):
**
**   (8) Disk space is reserved before anything is written through a mapping.
**   (9) Regions are mapped once and never unmapped before close; a reader
**       that sees an uncommitted region replaced keeps the old mapping too.
**
** Concurrency: one writer thread (the api layer's write mutex) adds regions
** and writes slots; searches read through store.h's accessors at any time, so
** a region's pointers are stored before the count that publishes them
** (release), and entries below a published count never change while a search
** may read them.
*/
#include "store/store_int.h"

#include <errno.h>
#include <string.h>

#define ALLOC_STEP (8u << 20) /* reserve disk space at most 8 MiB ahead */

/* The message of a failed system call on the index: "<what> <path> failed",
** what being a verb phrase whose object is the path ("opening", "syncing",
** "reading the header of"), and a help line for the errno. */
int
keel__store_io_fail(int err, const char *what, const char *path)
{
    if (keel__is_memory(path))
        return keel__fail(err == -ENOSPC || err == -ENOMEM || err == -EDQUOT
                              ? KEEL_ENOMEM : KEEL_EIO,
                          "%s for the index in memory failed: %s\nhelp: free "
                          "memory, or open an index file instead of "
                          "\":memory:\"", what, strerror(-err));
    if (err == -ENOSPC || err == -EDQUOT)
        return keel__fail(KEEL_EFULL,
                          "%s %s failed: no space left on the device\n"
                          "help: free disk space, then retry; the index keeps "
                          "its last flush", what, path);
    const char *help;
    switch (-err) {
    case ELOOP:
        help = "the path runs through a symbolic link that leads back to "
               "itself (or through too many links): point the link at the "
               "index file, or give the file's own path";
        break;
    case ENAMETOOLONG:
        help = "the path, or one name in it, is longer than the system "
               "allows: give a shorter path (move the index, or use a "
               "relative path)";
        break;
    case EACCES:
    case EPERM:
        help = "check the permissions of the file and of every directory on "
               "its path (a writer needs to write the file and its "
               "directory)";
        break;
    case EROFS:
        help = "the file system is read-only: open the index as a reader "
               "to search it, or copy it to a writable file system to "
               "change it";
        break;
    default:
        help = "check the disk and the file's permissions; the index keeps "
               "its last flush";
        break;
    }
    return keel__fail(KEEL_EIO, "%s %s failed: %s\nhelp: %s", what, path,
                      strerror(-err), help);
}

/* --- segments and slots ------------------------------------------------ */

static void
seg_set(keel_segment *s, const keel_geometry *g, uint32_t k, uint8_t *base,
        uint64_t off)
{
    keel_seg_layout L;
    keel__seg_layout(g, k, &L);
    s->off = off;
    s->bytes = L.bytes;
    s->slots = L.slots;
    KEEL_STORE_RELAXED(&s->hdrs, base);
    KEEL_STORE_RELAXED(&s->vecs, base + L.vec_off);
    KEEL_STORE_RELAXED(&s->recs, base + L.rec_off);
    KEEL_STORE_RELAXED(&s->codes, L.code_off ? base + L.code_off : NULL);
    KEEL_STORE_RELAXED(&s->base, base);
}

int
keel__store_map_region(keel_store *st, uint64_t off, uint64_t bytes,
                       uint8_t **out)
{
    void *p;
    int err = keel__os->map(st->fd, off, (size_t)bytes, st->writer, &p);
    if (err)
        return keel__store_io_fail(err, "mapping a region of", st->path);
    if (st->remote) {
        int rc = keel__cache_register(st->remote, p, (size_t)bytes, off);
        if (rc) {
            keel__os->unmap(p, (size_t)bytes);
            return rc;
        }
    }
    *out = p;
    return KEEL_OK;
}

/* Appends a region of `bytes` at the writer's end of file. */
int
keel__store_new_region(keel_store *st, uint64_t bytes, uint64_t *off)
{
    uint64_t at = st->work.file_end;
    if (st->file_len < at + bytes) {
        int err = keel__os->truncate(st->fd, at + bytes);
        if (err)
            return keel__store_io_fail(err, "growing", st->path);
        st->file_len = at + bytes;
    }
    *off = at;
    st->work.file_end = at + bytes;
    return KEEL_OK;
}

int
keel__store_reserve_space(keel_store *st, uint64_t off, uint64_t len)
{
    int err = keel__os->allocate(st->fd, off, len);
    return err ? keel__store_io_fail(err, "reserving disk space for", st->path)
               : KEEL_OK;
}

void
keel__store_live_put_regions(keel_store *st)
{
    if (!st->live)
        return;
    uint64_t *segs = (uint64_t *)(void *)(st->live + LO_SEG_TABLE);
    uint64_t *chunks = (uint64_t *)(void *)(st->live + LO_HEAP_TABLE);
    for (uint32_t i = 0; i < st->work.segments; i++)
        KEEL_STORE_RELAXED(&segs[i], st->work.seg_off[i]);
    for (uint32_t i = 0; i < st->work.heap_chunks; i++)
        KEEL_STORE_RELAXED(&chunks[i], st->work.heap_off[i]);
    KEEL_STORE_RELEASE((uint32_t *)(void *)(st->live + LO_SEGMENTS),
                       st->work.segments);
    KEEL_STORE_RELEASE((uint32_t *)(void *)(st->live + LO_HEAP_CHUNKS),
                       st->work.heap_chunks);
}

static int
add_segment(keel_store *st)
{
    uint32_t k = st->nseg;
    if (k >= KEEL_MAX_SEGMENTS)
        return keel__fail(KEEL_EFULL,
                          "the index at %s has its %u segments full\n"
                          "help: compact the index, or split the vectors "
                          "over several indexes", st->path, k);
    keel_seg_layout L;
    keel__seg_layout(&st->g, k, &L);
    uint64_t off;
    uint8_t *base;
    int rc = keel__store_new_region(st, L.bytes, &off);
    if (!rc)
        rc = keel__store_map_region(st, off, L.bytes, &base);
    if (rc)
        return rc;
    seg_set(&st->seg[k], &st->g, k, base, off);
    st->seg[k].reserved = 0;
    st->work.seg_off[k] = off;
    st->work.segments = k + 1;
    st->seg_slots += L.slots;
    KEEL_STORE_RELEASE(&st->nseg, k + 1);
    keel__store_live_put_regions(st);
    return KEEL_OK;
}

/* Reserves disk space for slots [a, b) of segment k, in steps. */
static int
reserve_seg_slots(keel_store *st, uint32_t k, uint64_t upto)
{
    keel_segment *s = &st->seg[k];
    if (upto <= s->reserved)
        return KEEL_OK;
    uint64_t per = KEEL_SLOT_HDR_BYTES + st->g.vec_bytes + st->g.rec_bytes +
                   st->g.code_bytes;
    uint64_t step = KEEL_MAX(ALLOC_STEP / per, 64);
    uint64_t b = KEEL_MIN(KEEL_MAX(upto, s->reserved + step), s->slots);
    uint64_t a = s->reserved;
    uint64_t voff = (uint64_t)(s->vecs - s->base);
    uint64_t roff = (uint64_t)(s->recs - s->base);
    int rc = keel__store_reserve_space(st, s->off + a * 16, (b - a) * 16);
    if (!rc)
        rc = keel__store_reserve_space(st, s->off + voff + a * st->g.vec_bytes,
                                       (b - a) * st->g.vec_bytes);
    if (!rc)
        rc = keel__store_reserve_space(st, s->off + roff + a * st->g.rec_bytes,
                                       (b - a) * st->g.rec_bytes);
    if (!rc && s->codes)
        rc = keel__store_reserve_space(st, s->off +
                                               (uint64_t)(s->codes - s->base) +
                                               a * st->g.code_bytes,
                                       (b - a) * st->g.code_bytes);
    if (!rc)
        s->reserved = b;
    return rc;
}

int
keel__store_reserve(keel_store *st, uint64_t n, uint64_t *first)
{
    uint64_t a = st->next_slot, b = a + n;
    if (b > KEEL_MAX_SLOTS || b < a)
        return keel__fail(KEEL_EFULL,
                          "the index at %s cannot hold %llu more vectors: it "
                          "has %llu slots of 4,294,967,294\n"
                          "help: compact the index to reclaim deleted slots, "
                          "or split the vectors over several indexes",
                          st->path, (unsigned long long)n,
                          (unsigned long long)a);
    while (st->seg_slots < b) {
        int rc = add_segment(st);
        if (rc)
            return rc;
    }
    /* Space for every segment the range touches. */
    for (uint64_t s = a; s < b;) {
        uint64_t i;
        uint32_t k = keel__slot_segment(&st->g, s, &i);
        uint64_t in_seg = KEEL_MIN(st->seg[k].slots - i, b - s);
        int rc = reserve_seg_slots(st, k, i + in_seg);
        if (rc)
            return rc;
        s += in_seg;
    }
    *first = a;
    st->next_slot = b;
    return KEEL_OK;
}

void
keel__store_unreserve(keel_store *st, uint64_t n)
{
    if (n < st->next_slot) {
        st->next_slot = n;
        st->idtab_clean = false; /* entries may name the given-back slots */
    }
    if (n < st->idtab_covers)
        st->idtab_covers = n; /* those slots will hold other ids */
}

void
keel__store_write_slot(keel_store *st, uint64_t slot, uint64_t id,
                       const void *vec, const void *code, uint32_t level,
                       uint64_t heap_ref)
{
    uint64_t i;
    keel_segment *s = &st->seg[keel__slot_segment(&st->g, slot, &i)];
    uint64_t *hdr = (uint64_t *)(void *)(s->hdrs + i * 16);
    KEEL_STORE_RELAXED(&hdr[0], id);
    KEEL_STORE_RELAXED(&hdr[1], (uint64_t)0); /* invariant (4) */
    memcpy(s->vecs + i * st->g.vec_bytes, vec, st->g.vec_bytes);
    if (s->codes)
        memcpy(s->codes + i * st->g.code_bytes, code, st->g.code_bytes);
    uint64_t *rec = (uint64_t *)(void *)(s->recs + i * st->g.rec_bytes);
    uint32_t *nb = (uint32_t *)(rec + 1);
    for (uint32_t j = 0; j < st->g.M0; j++)
        KEEL_STORE_RELAXED(&nb[j], KEEL_EMPTY);
    KEEL_STORE_RELEASE(&rec[0], (uint64_t)level | heap_ref << 16);
}

void
keel__store_publish(keel_store *st, uint64_t n)
{
    KEEL_STORE_RELEASE(&st->nslots, n);
    if (st->live)
        KEEL_STORE_RELEASE((uint64_t *)(void *)(st->live + LO_ROUTING), n);
}

void
keel__store_set_entry(keel_store *st, uint32_t entry, uint32_t max_level)
{
    KEEL_STORE_RELEASE(&st->entry_packed, (uint64_t)max_level << 32 | entry);
}

/* --- heap -------------------------------------------------------------- */

static int
add_chunk(keel_store *st)
{
    uint32_t c = st->nheap;
    if (c >= KEEL_MAX_HEAP_CHUNKS)
        return keel__fail(KEEL_EFULL,
                          "the index at %s has its %u heap chunks full\n"
                          "help: compact the index, or split the vectors "
                          "over several indexes", st->path, c);
    uint64_t bytes = keel__heap_chunk_bytes(&st->g, c);
    uint64_t off;
    uint8_t *base;
    int rc = keel__store_new_region(st, KEEL_ALIGN_UP(bytes, KEEL_REGION_ALIGN),
                                    &off);
    if (!rc)
        rc = keel__store_map_region(st, off, bytes, &base);
    if (rc)
        return rc;
    keel_chunk *ch = &st->heap[c];
    ch->off = off;
    ch->bytes = bytes;
    ch->reserved = 0;
    KEEL_STORE_RELAXED(&ch->base, base);
    st->work.heap_off[c] = off;
    st->work.heap_chunks = c + 1;
    KEEL_STORE_RELEASE(&st->nheap, c + 1);
    keel__store_live_put_regions(st);
    return KEEL_OK;
}

/* need bytes of heap (a multiple of 4) at the writer's heap position. */
static int
heap_take(keel_store *st, uint64_t need, uint64_t *ref)
{
    uint32_t c = (uint32_t)(st->work.heap_used >> 32);
    uint64_t off = st->work.heap_used & 0xFFFFFFFFu;
    if (st->nheap == 0 || off + need > st->heap[c].bytes) {
        if (st->nheap > 0)
            c++, off = 0;
        if (c >= st->nheap) {
            int rc = add_chunk(st);
            if (rc)
                return rc;
        }
    }
    keel_chunk *ch = &st->heap[c];
    if (off + need > ch->reserved) {
        uint64_t to = KEEL_MIN(KEEL_MAX(off + need, ch->reserved + ALLOC_STEP),
                               ch->bytes);
        int rc = keel__store_reserve_space(st, ch->off + ch->reserved,
                                           to - ch->reserved);
        if (rc)
            return rc;
        ch->reserved = to;
    }
    *ref = (uint64_t)c << 32 | off;
    st->work.heap_used = (uint64_t)c << 32 | (off + need);
    return KEEL_OK;
}

int
keel__store_heap_alloc(keel_store *st, uint32_t levels, uint64_t *ref)
{
    uint64_t need = 4ull * st->g.M * levels;
    int rc = heap_take(st, need, ref);
    if (rc)
        return rc;
    uint32_t c = (uint32_t)(*ref >> 32);
    uint32_t *e = (uint32_t *)(void *)(st->heap[c].base + (*ref & 0xFFFFFFFFu));
    for (uint64_t j = 0; j < need / 4; j++)
        KEEL_STORE_RELAXED(&e[j], KEEL_EMPTY);
    return KEEL_OK;
}

int
keel__store_put_centre(keel_store *st, const float *c)
{
    uint64_t ref;
    if (st->work.heap_used != 0)
        return KEEL_CORRUPT("%s: the heap is in use before the traversal "
                            "codes' centre is placed", st->path);
    int rc = heap_take(st, 4ull * st->g.dim, &ref);
    if (rc)
        return rc;
    if (ref != 0) {
        st->work.heap_used = 0;
        return keel__fail(KEEL_EFULL, "%s: the first heap chunk cannot hold "
                          "the %u-float centre of the traversal codes\nhelp: "
                          "create the index without codes, or with fewer "
                          "dimensions", st->path, st->g.dim);
    }
    memcpy(st->heap[0].base, c, 4ull * st->g.dim);
    return KEEL_OK;
}

uint64_t
keel__store_heap_mark(const keel_store *st)
{
    return st->work.heap_used;
}

void
keel__store_heap_reset(keel_store *st, uint64_t mark)
{
    st->work.heap_used = mark;
}

/* --- mapping the regions a header or the live page lists --------------- */

/* Keeps an old mapping alive until close (invariant 9). The list grows as
** long as memory lasts: a reader follows any number of writer restarts. */
static int
retire(keel_store *st, void *addr, uint64_t len)
{
    if (st->nretired == st->retired_cap) {
        size_t cap = st->retired_cap ? 2 * st->retired_cap : 16;
        struct keel_retired *r = keel__realloc(st->retired, cap * sizeof *r);
        if (!r)
            return KEEL_ENOMEM;
        st->retired = r;
        st->retired_cap = cap;
    }
    st->retired[st->nretired].addr = addr;
    st->retired[st->nretired++].len = (size_t)len;
    return KEEL_OK;
}

/* Maps segment k at off, replacing a mapping of an uncommitted region that
** a restarted writer placed elsewhere. */
int
keel__store_map_segment_at(keel_store *st, uint32_t k, uint64_t off)
{
    if (k < st->nseg && st->seg[k].off == off)
        return KEEL_OK;
    if (k > st->nseg)
        return KEEL_CORRUPT("%s: segment %u listed before segment %u",
                            st->path, k, st->nseg);
    keel_seg_layout L;
    keel__seg_layout(&st->g, k, &L);
    uint8_t *base;
    int rc = keel__store_map_region(st, off, L.bytes, &base);
    if (rc)
        return rc;
    if (k < st->nseg) {
        if ((rc = retire(st, st->seg[k].base, st->seg[k].bytes))) {
            keel__os->unmap(base, (size_t)L.bytes);
            return rc;
        }
        seg_set(&st->seg[k], &st->g, k, base, off);
        return KEEL_OK;
    }
    seg_set(&st->seg[k], &st->g, k, base, off);
    st->seg_slots += L.slots;
    KEEL_STORE_RELEASE(&st->nseg, k + 1);
    return KEEL_OK;
}

int
keel__store_map_chunk_at(keel_store *st, uint32_t c, uint64_t off)
{
    if (c < st->nheap && st->heap[c].off == off)
        return KEEL_OK;
    if (c > st->nheap)
        return KEEL_CORRUPT("%s: heap chunk %u listed before chunk %u",
                            st->path, c, st->nheap);
    uint64_t bytes = keel__heap_chunk_bytes(&st->g, c);
    uint8_t *base;
    int rc = keel__store_map_region(st, off, bytes, &base);
    if (rc)
        return rc;
    if (c < st->nheap && (rc = retire(st, st->heap[c].base, st->heap[c].bytes))) {
        keel__os->unmap(base, (size_t)bytes);
        return rc;
    }
    st->heap[c].off = off;
    st->heap[c].bytes = bytes;
    KEEL_STORE_RELAXED(&st->heap[c].base, base);
    if (c >= st->nheap)
        KEEL_STORE_RELEASE(&st->nheap, c + 1);
    return KEEL_OK;
}

/* Maps every region header h counts (writer: read-write). */
int
keel__store_map_committed(keel_store *st, const keel_header *h)
{
    int rc;
    for (uint32_t k = 0; k < h->segments; k++)
        if ((rc = keel__store_map_segment_at(st, k, h->seg_off[k])))
            return rc;
    for (uint32_t c = 0; c < h->heap_chunks; c++)
        if ((rc = keel__store_map_chunk_at(st, c, h->heap_off[c])))
            return rc;
    if (h->idtab_offset &&
        (!st->nidtabs || st->idtabs[st->nidtabs - 1].off != h->idtab_offset)) {
        if (st->nidtabs >= KEEL_MAX_IDTABS)
            return KEEL_CORRUPT("%s changed its id table too often", st->path);
        uint8_t *base;
        rc = keel__store_map_region(st, h->idtab_offset,
                                    4ull << h->idtab_log2, &base);
        if (rc)
            return rc;
        keel_idtab *t = &st->idtabs[st->nidtabs];
        t->tab = (uint32_t *)(void *)base;
        t->off = h->idtab_offset;
        t->log2 = h->idtab_log2;
        KEEL_STORE_RELEASE(&st->nidtabs, st->nidtabs + 1);
    }
    return KEEL_OK;
}
