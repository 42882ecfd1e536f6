/* commit.c -- the commit protocol of doc/format.md section 6: writing a
** header copy, syncing the file, committing what a writer added and deleted
** since its last commit, and marking a file superseded; and the writer's
** pending deletes, which are hidden at once and made durable by a commit.
**
** The writer's states, and the calls that move it:
**
**   committed --adds (region.c), deletes (keel__store_delete)--> dirty
**   dirty --keel__store_commit, no deletes: sync, header, sync--> committed
**   dirty --keel__store_commit with deletes: intent header, sync--> intent
**   intent --marks, sync, header into the other copy, sync--> committed
**   intent found newest at a writer's open --recover_intent (open.c)-->
**       committed
**   any --a failed write or sync (keel__store_poison)--> poisoned, until the
**       file is opened again
**
** The store's invariants, cited by number elsewhere and by the durability
** tests:
**
**   (1) A header copy is written only after every byte it covers is synced.
**   (2) A commit writes the copy that does not hold the newest valid header,
**       with sequence = newest + 1, newest as on disk (a failed flush may
**       have left its intent header newest).
**   (3) Committed bytes are never rewritten, except deleted epochs (through
**       the intent protocol) and neighbour lists (single aligned 32-bit
**       stores, entries that survive a change keep their positions).
**   (4) A slot's full header (id, epoch 0) is written before the slot is
**       counted anywhere (region.c's keel__store_write_slot).
**   (5) Deletes commit through an intent header: intent + sync, marks + sync,
**       commit header into the other copy + sync.
**   (6) Recovery runs only in a writer: an intent header as newest makes it
**       clear every mark above E below N, sync, then write a clean header
**       (open.c's recover_intent, at a writer's open).
**   (7) After a failed sync the writer is poisoned until reopened.
**   (8), (9) are about regions and stated in region.c.
**
** Concurrency: one writer thread at a time (the api layer's write mutex);
** searches read through the accessors in store.h at any time, so everything
** they may read is published with release stores after it is written.
*/
#include "store/store_int.h"
#include "store/undo.h"

int
keel__store_poison(keel_store *st, int err, const char *what)
{
    st->poisoned = 1;
    return keel__store_io_fail(err, what, st->path);
}

/* --- headers and commits ----------------------------------------------- */

/* Writes header h into copy. Allocates nothing (the writer's buffer is made
** at open), so once a flush has written its intent header every failure
** left is a failed write or sync, and those poison the writer. */
int
keel__store_write_header(keel_store *st, keel_header *h, int copy)
{
    uint8_t *buf = st->hdr_buf;
    memset(buf, 0, KEEL_PAGE_SLOT);
    keel__header_encode(h, buf);
    ssize_t n = keel__os->pwrite(st->fd, buf, h->length,
                                 copy ? KEEL_HDR_B_OFF : KEEL_HDR_A_OFF);
    if (n < 0)
        return keel__store_poison(st, (int)n, "writing the header of");
    return KEEL_OK;
}

int
keel__store_sync(keel_store *st)
{
    int err = keel__os->sync(st->fd);
    return err ? keel__store_poison(st, err, "syncing") : KEEL_OK;
}

int
keel__store_commit(keel_store *st)
{
    if (st->poisoned)
        return keel__fail(KEEL_EIO,
                          "an earlier sync of %s failed, so what reached the "
                          "disk is unknown\nhelp: close the index and open it "
                          "again; it reopens at its last completed flush",
                          st->path);
    uint32_t entry, max_level;
    keel__store_entry(st, &entry, &max_level);
    keel_header *w = &st->work;
    w->count = st->nslots;
    w->entry = entry;
    w->max_level = max_level;
    if (w->count == st->committed.count && st->pend_n == 0 &&
        w->flags == st->committed.flags && w->next_id == st->committed.next_id)
        return KEEL_OK; /* nothing to commit */

    int copy = keel__mutant == KEEL_MUT_HEADER_OVER_NEWEST ? st->newest_copy
                                                          : 1 - st->newest_copy;
    int rc;
    /* Undo invariant (2): the log is durable before the index is synced. */
    int err = keel__undo_sync(st);
    if (err)
        return keel__store_poison(st, err, "syncing the undo log of");
    /* Invariant (2) counts from the newest header on disk, not from the last
     * commit: a flush that failed after its intent header left that header
     * newest, and a retry must not write a second copy with its sequence. */
    uint64_t seq = st->newest_seq;
    if (st->pend_n == 0) {
        w->sequence = seq + 1;
        if ((keel__mutant != KEEL_MUT_NO_SYNC_BEFORE_HEADER &&
             (rc = keel__store_sync(st))) ||
            (rc = keel__store_write_header(st, w, copy)) ||
            (rc = keel__store_sync(st)))
            return rc;
        st->newest_copy = copy;
        st->newest_seq = seq + 1;
    } else {
        uint64_t E = st->committed.epoch;
        keel_header *intent = keel__malloc(sizeof *intent);
        if (!intent)
            return KEEL_ENOMEM;
        *intent = st->committed;
        intent->pending_epoch = E + 1;
        intent->sequence = seq + 1;
        rc = keel__mutant == KEEL_MUT_NO_INTENT
                 ? KEEL_OK : keel__store_write_header(st, intent, copy);
        keel__free(intent);
        if (rc)
            return rc;
        if (keel__mutant != KEEL_MUT_NO_INTENT) {
            st->newest_copy = copy;
            st->newest_seq = seq + 1;
        }
        if (keel__mutant != KEEL_MUT_NO_SYNC_BEFORE_HEADER &&
            (rc = keel__store_sync(st)))
            return rc;
        for (size_t j = 0; j < st->pend_n; j++)
            KEEL_STORE_RELAXED(keel__store_mark(st, st->pend_list[j]), E + 1);
        if ((rc = keel__store_sync(st)))
            return rc;
        w->epoch = E + 1;
        w->pending_epoch = 0;
        w->deleted = st->committed.deleted + st->pend_n;
        w->sequence = seq + 2;
        if ((rc = keel__store_write_header(st, w, 1 - copy)) ||
            (rc = keel__store_sync(st)))
            return rc;
        st->newest_copy = 1 - copy;
        st->newest_seq = seq + 2;
        KEEL_STORE_RELEASE(&st->epoch_now, E + 1);
        /* The marks are durable and E covers them: the pending bits can go.
         * Searches read a bit before the epoch, so none sees neither. */
        for (size_t j = 0; j < st->pend_n; j++) {
            uint64_t i;
            uint32_t k = keel__slot_segment(&st->g, st->pend_list[j], &i);
            __atomic_fetch_and(&st->pend_bits[k][i >> 6],
                               ~((uint64_t)1 << (i & 63)), __ATOMIC_RELEASE);
        }
        st->pend_n = 0;
    }
    st->committed = *w;
    KEEL_STORE_RELAXED(&st->pub_sequence, w->sequence);
    KEEL_STORE_RELAXED(&st->pub_deleted, w->deleted);
    KEEL_STORE_RELAXED(&st->pub_next_id, w->next_id);
    keel__undo_end(st);
    return KEEL_OK;
}

int
keel__store_set_superseded(keel_store *st, int on)
{
    if (on)
        st->work.flags |= KEEL_FLAG_SUPERSEDED;
    else
        st->work.flags &= (uint8_t)~KEEL_FLAG_SUPERSEDED;
    return keel__store_commit(st);
}

/* --- deletes ----------------------------------------------------------- */

int
keel__store_delete(keel_store *st, uint64_t slot)
{
    uint64_t i;
    uint32_t k = keel__slot_segment(&st->g, slot, &i);
    uint64_t *bits = st->pend_bits[k];
    if (!bits) {
        bits = keel__calloc((size_t)((st->seg[k].slots + 63) / 64), 8);
        if (!bits)
            return KEEL_ENOMEM;
        KEEL_STORE_RELEASE(&st->pend_bits[k], bits);
    }
    if (st->pend_n == st->pend_cap) {
        size_t cap = st->pend_cap ? st->pend_cap * 2 : 256;
        uint32_t *l = keel__realloc(st->pend_list, cap * sizeof *l);
        if (!l)
            return KEEL_ENOMEM;
        st->pend_list = l;
        st->pend_cap = cap;
    }
    st->pend_list[st->pend_n++] = (uint32_t)slot;
    KEEL_STORE_RELAXED(&st->pub_deleted, st->committed.deleted + st->pend_n);
    __atomic_fetch_or(&bits[i >> 6], (uint64_t)1 << (i & 63), __ATOMIC_RELEASE);
    return KEEL_OK;
}

size_t
keel__store_pending_deletes(const keel_store *st)
{
    return st->pend_n;
}

/* Writer: makes room for n more deletes of these slots (keel_delete_batch),
** so that keel__store_delete of each of them cannot fail: all or none. */
int
keel__store_delete_prepare(keel_store *st, const uint64_t *slots, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        uint64_t i;
        uint32_t k = keel__slot_segment(&st->g, slots[j], &i);
        if (st->pend_bits[k])
            continue;
        uint64_t *bits = keel__calloc((size_t)((st->seg[k].slots + 63) / 64), 8);
        if (!bits)
            return KEEL_ENOMEM;
        KEEL_STORE_RELEASE(&st->pend_bits[k], bits);
    }
    if (st->pend_cap - st->pend_n < n) {
        size_t cap = st->pend_cap ? st->pend_cap : 256;
        while (cap - st->pend_n < n)
            cap *= 2;
        uint32_t *l = keel__realloc(st->pend_list, cap * sizeof *l);
        if (!l)
            return KEEL_ENOMEM;
        st->pend_list = l;
        st->pend_cap = cap;
    }
    return KEEL_OK;
}
