/* store.c -- what a search sees: a view of the store (a writer's own state,
** or a reader's snapshot), and a reader's snapshots of the newest commit,
** taken through the shared mapping of the header copies, with the regions
** the header names and those the live page lists (a writer's uncommitted
** segments, for routing) mapped.
**
** store.h, the store's face to the layers above, is this file's header. The
** rest of the store: open.c (open, recovery, close), commit.c (the commit
** protocol; the store's invariants (1)-(7) at its top), region.c (regions,
** slots, the heap; invariants (8) and (9)), idtab.c (the id table), undo.c
** (the undo log), pagein.c (pages fetched before they are read) and
** format.c (bytes to trusted numbers).
**
** A reader's snapshot never goes back to an older commit than the one in
** use, and is refused if it names another geometry or identity than the
** file opened with. A reader's state (snap, snap_words, live_*) is guarded
** by snap_lock; a writer's view reads the copies the writer publishes with
** atomic stores (store.h), so it takes no lock.
*/
#include "store/store_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static void
snap_words(const keel_store *st, uint64_t w[4])
{
    const uint64_t *a = (const uint64_t *)(const void *)st->pages;
    const uint64_t *b = (const uint64_t *)(const void *)(st->pages + KEEL_HDR_B_OFF);
    w[0] = KEEL_LOAD_ACQUIRE(&a[HO_SEQUENCE / 8]);
    w[1] = KEEL_LOAD_ACQUIRE(&a[HO_CHECKSUM / 8]);
    w[2] = KEEL_LOAD_ACQUIRE(&b[HO_SEQUENCE / 8]);
    w[3] = KEEL_LOAD_ACQUIRE(&b[HO_CHECKSUM / 8]);
}

/* Copies a header copy out of the shared mapping word by word (a writer may
** be rewriting it) and decodes the copy. */
static int
decode_shared(const keel_store *st, int c, uint64_t file_len, uint8_t *buf,
              keel_header *h)
{
    const uint64_t *src = (const uint64_t *)(const void *)(st->pages + c * KEEL_PAGE_SLOT);
    uint64_t *dst = (uint64_t *)(void *)buf;
    uint32_t len = (uint32_t)(KEEL_LOAD_RELAXED(&src[HO_LENGTH / 8]) & 0xFFFFFFFFu);
    if (len > KEEL_PAGE_SLOT)
        len = KEEL_PAGE_SLOT;
    memset(buf, 0, KEEL_PAGE_SLOT);
    for (uint32_t j = 0; j < (len + 7) / 8; j++)
        dst[j] = KEEL_LOAD_RELAXED(&src[j]);
    return keel__header_decode(buf, file_len, h, NULL, 0);
}

/* Takes the newest valid header into st->snap. Called with snap_lock held. */
int
keel__store_refresh_snapshot(keel_store *st)
{
    uint64_t w[4];
    snap_words(st, w);
    /* Fast path: neither copy's sequence or checksum word moved since both
     * verified. A copy that failed is checked again every time (a torn
     * write may be finished, or a damaged copy mended, in place). */
    if (st->snap.sequence && st->snap_both_valid &&
        memcmp(w, st->snap_words, sizeof w) == 0)
        return KEEL_OK;
    keel_file_info fi;
    int err = keel__os->stat(st->fd, &fi);
    if (err)
        return keel__store_io_fail(err, "reading the size of", st->path);
    uint8_t *buf = keel__malloc(KEEL_PAGE_SLOT);
    keel_header *h = keel__malloc(sizeof *h);
    int rc = KEEL_OK;
    if (!buf || !h) {
        rc = KEEL_ENOMEM;
        goto out;
    }
    int best = -1, valid = 0;
    uint64_t best_seq = 0;
    for (int tries = 0; tries < 100 && best < 0; tries++) {
        snap_words(st, w);
        valid = 0;
        for (int c = 0; c < 2; c++) {
            int r = decode_shared(st, c, fi.size, buf, h);
            if (r == KEEL_EVERSION) {
                rc = keel__fail(KEEL_EVERSION,
                                "%s was rewritten by a newer keel\n"
                                "help: open it with a newer keel", st->path);
                goto out;
            }
            if (r != KEEL_OK)
                continue;
            valid++;
            if (best < 0 || h->sequence > best_seq) {
                best = c;
                best_seq = h->sequence;
            }
        }
    }
    if (best < 0) {
        if (!st->snap.sequence)
            rc = KEEL_CORRUPT("%s has no valid header", st->path);
        goto out; /* keep the snapshot in use */
    }
    if (best_seq < st->snap.sequence)
        goto out; /* never go back to an older commit */
    decode_shared(st, best, fi.size, buf, h);
    if (h->dim != st->g.dim || h->M != st->g.M || h->metric != st->metric ||
        h->precision != st->precision ||
        memcmp(h->identity, st->identity, KEEL_IDENTITY_BYTES) != 0) {
        rc = KEEL_CORRUPT("%s changed its geometry under a reader", st->path);
        goto out;
    }
    if ((rc = keel__store_map_committed(st, h)))
        goto out;
    memcpy(st->snap_words, w, sizeof w);
    st->snap_both_valid = valid == 2;
    st->snap = *h;
    KEEL_STORE_RELEASE(&st->snap_flags, (unsigned)h->flags);
out:
    keel__free(buf);
    keel__free(h);
    return rc;
}

/* Maps segments the writer added since its last commit, as the live page
** lists them, so searches can route through unflushed nodes. */
static void
refresh_live(keel_store *st)
{
    const uint8_t *lp = st->pages + KEEL_LIVE_OFF;
    uint64_t gen = KEEL_LOAD_ACQUIRE((const uint64_t *)(const void *)(lp + LO_GENERATION));
    uint32_t ns = KEEL_LOAD_ACQUIRE((const uint32_t *)(const void *)(lp + LO_SEGMENTS));
    uint32_t nh = KEEL_LOAD_ACQUIRE((const uint32_t *)(const void *)(lp + LO_HEAP_CHUNKS));
    if (gen == st->live_gen && ns == st->live_nseg && nh == st->live_nheap)
        return;
    keel_file_info fi;
    if (keel__os->stat(st->fd, &fi) != 0)
        return; /* looked at again by the next view */
    int whole = 1;
    const uint64_t *segs = (const uint64_t *)(const void *)(lp + LO_SEG_TABLE);
    const uint64_t *chunks = (const uint64_t *)(const void *)(lp + LO_HEAP_TABLE);
    for (uint32_t k = st->snap.segments; k < ns && k < KEEL_MAX_SEGMENTS; k++) {
        keel_seg_layout L;
        keel__seg_layout(&st->g, k, &L);
        uint64_t off = KEEL_LOAD_RELAXED(&segs[k]);
        if (off % KEEL_REGION_ALIGN || off < KEEL_DATA_OFF ||
            off > fi.size || L.bytes > fi.size - off ||
            keel__store_map_segment_at(st, k, off) != KEEL_OK) {
            whole = 0;
            break;
        }
    }
    for (uint32_t c = st->snap.heap_chunks; c < nh && c < KEEL_MAX_HEAP_CHUNKS; c++) {
        uint64_t bytes = keel__heap_chunk_bytes(&st->g, c);
        uint64_t off = KEEL_LOAD_RELAXED(&chunks[c]);
        if (off % KEEL_REGION_ALIGN || off < KEEL_DATA_OFF ||
            off > fi.size || bytes > fi.size - off ||
            keel__store_map_chunk_at(st, c, off) != KEEL_OK) {
            whole = 0;
            break;
        }
    }
    /* What could not be mapped (a writer between writing an offset and
     * growing the file, or no memory) is tried again by the next view. */
    if (whole) {
        st->live_gen = gen;
        st->live_nseg = ns;
        st->live_nheap = nh;
    }
    keel__clear_error();
}

static int reader_view_locked(keel_store *st, keel_view *v);

int
keel__store_view(keel_store *st, keel_view *v)
{
    memset(v, 0, sizeof *v);
    v->st = st;
    if (st->writer) {
        /* The entry point before the count: an entry point published after
         * its slot is then always below the count read here. */
        keel__store_entry(st, &v->entry, &v->max_level);
        v->limit = v->count = KEEL_LOAD_ACQUIRE(&st->nslots);
        v->epoch = KEEL_LOAD_ACQUIRE(&st->epoch_now);
        v->deleted = KEEL_LOAD_RELAXED(&st->pub_deleted);
        v->next_id = KEEL_LOAD_RELAXED(&st->pub_next_id);
        v->sequence = KEEL_LOAD_RELAXED(&st->pub_sequence);
        uint32_t nt = KEEL_LOAD_ACQUIRE(&st->nidtabs);
        v->idtab = nt ? &st->idtabs[nt - 1] : NULL;
        return KEEL_OK;
    }
    pthread_mutex_lock(&st->snap_lock);
    int rc = reader_view_locked(st, v);
    pthread_mutex_unlock(&st->snap_lock);
    return rc;
}

/* A reader's view, with snap_lock held. */
static int
reader_view_locked(keel_store *st, keel_view *v)
{
    memset(v, 0, sizeof *v);
    v->st = st;
    int rc = keel__store_refresh_snapshot(st);
    if (rc == KEEL_OK) {
        refresh_live(st);
        const keel_header *h = &st->snap;
        v->count = h->count;
        v->epoch = h->epoch;
        v->entry = h->entry;
        v->max_level = h->max_level;
        v->deleted = h->deleted;
        v->next_id = h->next_id;
        v->sequence = h->sequence;
        v->heap_used = h->heap_used;
        uint64_t r = KEEL_LOAD_ACQUIRE(
            (const uint64_t *)(const void *)(st->pages + KEEL_LIVE_OFF + LO_ROUTING));
        v->limit = KEEL_MAX(v->count, KEEL_MIN(r, st->seg_slots));
        v->idtab = NULL;
        for (uint32_t t = st->nidtabs; t-- > 0;)
            if (st->idtabs[t].off == h->idtab_offset) {
                v->idtab = &st->idtabs[t];
                break;
            }
    }
    return rc;
}

int
keel__store_snapshot(keel_store *st, keel_view *v, keel_header *out)
{
    if (st->writer) {
        int rc = keel__store_view(st, v);
        *out = st->committed;
        return rc;
    }
    pthread_mutex_lock(&st->snap_lock);
    int rc = reader_view_locked(st, v);
    if (rc == KEEL_OK)
        *out = st->snap;
    pthread_mutex_unlock(&st->snap_lock);
    return rc;
}

const uint8_t *
keel__store_identity(const keel_store *st)
{
    /* A reader's snapshots all carry the identity it opened with (a header
     * that says otherwise is refused as a change of geometry). */
    return st->writer ? st->committed.identity : st->identity;
}

int
keel__store_superseded(const keel_store *st)
{
    return (st->writer ? st->committed.flags
                       : KEEL_LOAD_ACQUIRE(&st->snap_flags)) &
           KEEL_FLAG_SUPERSEDED;
}
