/* idtab.c -- the id table's reader side: finds the slot that holds an id,
** in the view a call reads.
**
** The table is an open-addressing hash of 4-byte slot numbers
** (doc/format.md); keel__idtab_home (store.h) gives an id's first entry and
** a probe walks on to the next until an empty entry. Its writer side
** (reserve, insert, rebuild) stays with the regions it allocates in
** store.c.
**
** A published index is read without page faults (store/pagein.h): each
** entry, and each slot header an entry names, is fetched before it is read.
** This file calls pagein.c and store.h's accessors; nothing below it calls
** back, so the lookup is what keeps store.c out of a circle with pagein.c.
**
** Invariant: a lookup returns only a slot below v->count whose id is the
** one asked for and which is present in v; an entry naming a slot at or past
** v->count (written after the view's commit, or left by a writer that rolled
** back) is passed over, never trusted.
*/
#include "store/store.h"
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
