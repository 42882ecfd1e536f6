/* idtab.c -- the id table: finds the slot that holds an id, in the view a
** call reads, and (the writer) keeps the table: room for new ids, an entry
** per written slot, a rebuild when stale entries clog it, and the next
** automatic id.
**
** The table is an open-addressing hash of 4-byte slot numbers
** (doc/format.md); keel__idtab_home (store.h) gives an id's first entry and
** a probe walks on to the next until an empty entry. A table lives in a
** region of its own, made through region.c (store_int.h); a rebuild writes
** a new one and the header names the current one at the next commit.
**
** A published index is read without page faults (store/pagein.h): each
** entry, and each slot header an entry names, is fetched before it is read.
** This file calls pagein.c, region.c and store.h's accessors; none of them
** calls back.
**
** Invariant: a lookup returns only a slot below v->count whose id is the
** one asked for and which is present in v; an entry naming a slot at or past
** v->count (written after the view's commit, or left by a writer that rolled
** back) is passed over, never trusted.
*/
#include "store/store_int.h"
#include "store/pagein.h"

int
keel__store_id_lookup(const keel_view *v, uint64_t id, uint64_t *slot)
{
    const keel_idtab *t = v->idtab;
    if (!t || !t->tab)
        return KEEL_ENOTFOUND;
    uint64_t mask = ((uint64_t)1 << t->log2) - 1;
    uint64_t h = keel__idtab_home(id, t->log2);
    int rc;
    for (uint64_t n = 0; n <= mask; n++, h = (h + 1) & mask) {
        /* A published index read without faults: the entry, then the
         * slot's header, fetched before they are read (pagein.h). */
        if ((rc = keel__store_need(v->st, t->off + 4 * h, 4)))
            return rc;
        uint32_t s = KEEL_LOAD_RELAXED(&t->tab[h]);
        if (s == KEEL_EMPTY)
            break;
        if (s < v->count && (rc = keel__store_need_slots(v->st, &s, 1,
                                                         KEEL_NEED_HDR)))
            return rc;
        if (s < v->count && keel__store_id(v->st, s) == id &&
            keel__store_present(v, s)) {
            *slot = s;
            return KEEL_OK;
        }
    }
    return KEEL_ENOTFOUND;
}

/* --- the writer's side ------------------------------------------------- */

uint64_t
keel__store_next_id(const keel_store *st)
{
    return st->work.next_id;
}

void
keel__store_note_id(keel_store *st, uint64_t id)
{
    if (id >= st->work.next_id) {
        st->work.next_id = id + 1;
        KEEL_STORE_RELAXED(&st->pub_next_id, id + 1);
    }
}

void
keel__store_forget_ids(keel_store *st, uint64_t next_id)
{
    st->work.next_id = next_id;
    KEEL_STORE_RELAXED(&st->pub_next_id, next_id);
}

/* Longest probe an insert accepts before it rebuilds the table: a table at
** most half full rarely needs more than a few. Entries left by a writer that
** rolled back (the slots they name were used again by the next writer) or
** by damage fill a table up without counting; a rebuild drops them. Ids
** chosen to share one home (their hashes agree in the top bits, so they
** collide at every table size) make long probes that a rebuild cannot
** shorten: in a table this writer rebuilt (no stale entries), a long probe
** is taken as it is. */
#define IDTAB_MAX_PROBE 64u

/* Puts slot under id, probing at most max_probe entries past its home;
** 0 when done, 1 when the probe ran too long (or the table is full). */
static int
idtab_put(const keel_idtab *t, uint64_t id, uint64_t slot, uint64_t max_probe)
{
    uint64_t mask = ((uint64_t)1 << t->log2) - 1;
    uint64_t h = keel__idtab_home(id, t->log2);
    for (uint64_t n = 0; KEEL_LOAD_RELAXED(&t->tab[h]) != KEEL_EMPTY; n++) {
        if (n >= max_probe || n >= mask)
            return 1;
        h = (h + 1) & mask;
    }
    KEEL_STORE_RELAXED(&t->tab[h], (uint32_t)slot);
    return 0;
}

/* Writes a new table of 2^log2 entries holding every slot written so far,
** and makes it the current one. */
static int
idtab_rebuild(keel_store *st, uint32_t log2)
{
    if (st->nidtabs >= KEEL_MAX_IDTABS)
        return keel__fail(KEEL_EFULL, "the id table of %s cannot grow again\n"
                          "help: compact the index", st->path);
    uint64_t bytes = 4ull << log2;
    uint64_t off;
    uint8_t *base;
    int rc = keel__store_new_region(st, KEEL_ALIGN_UP(bytes, KEEL_REGION_ALIGN),
                                    &off);
    if (!rc)
        rc = keel__store_reserve_space(st, off, bytes);
    if (!rc)
        rc = keel__store_map_region(st, off, bytes, &base);
    if (rc)
        return rc;
    memset(base, 0xFF, bytes);
    keel_idtab *t = &st->idtabs[st->nidtabs];
    t->tab = (uint32_t *)(void *)base;
    t->off = off;
    t->log2 = log2;
    /* At most half full (the caller sized it), so every put finds an empty
    ** entry, however many ids share a home. */
    for (uint64_t s = 0; s < st->next_slot; s++)
        (void)idtab_put(t, keel__store_id(st, s), s, UINT64_MAX);
    KEEL_STORE_RELEASE(&st->nidtabs, st->nidtabs + 1);
    st->work.idtab_offset = off;
    st->work.idtab_log2 = log2;
    st->idtab_covers = st->next_slot;
    st->idtab_clean = true;
    return KEEL_OK;
}

int
keel__store_id_reserve(keel_store *st, uint64_t n_more)
{
    uint64_t need = st->next_slot + n_more;
    keel_idtab *cur = st->nidtabs ? &st->idtabs[st->nidtabs - 1] : NULL;
    if (cur && need <= ((uint64_t)1 << cur->log2) / 2)
        return KEEL_OK;
    uint32_t log2 = KEEL_MAX(keel__initial_idtab_log2(),
                             cur ? cur->log2 + 1 : 0);
    while (((uint64_t)1 << log2) / 2 < need)
        log2++;
    return idtab_rebuild(st, log2);
}

int
keel__store_id_insert(keel_store *st, uint64_t id, uint64_t slot)
{
    if (slot < st->idtab_covers)
        return KEEL_OK; /* a rebuild since the slot was written put it in */
    keel_idtab *t = &st->idtabs[st->nidtabs - 1];
    /* keel__store_id_reserve keeps the table at most half full, so only
    ** stale entries can make it fail an unbounded probe. */
    if (idtab_put(t, id, slot,
                  st->idtab_clean ? UINT64_MAX : IDTAB_MAX_PROBE) == 0)
        return KEEL_OK;
    /* Room for what the table holds now and as much again. */
    uint32_t log2 = t->log2;
    while (((uint64_t)1 << log2) / 2 < 2 * st->next_slot)
        log2++;
    return idtab_rebuild(st, log2);
}
