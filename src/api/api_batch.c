/* api_batch.c -- many ids at once: keel_get_batch, keel_delete_batch and
** the listing of live ids (keel_ids).
**
** The same locks as api.c (handle.h): reads go through the read bracket
** (follow.h), holding swap_lock shared and working from one view, so every id of a call is looked up in the same state;
** keel_delete_batch holds write_lock from its first lookup to its last
** delete, so nothing changes between checking the ids and deleting them.
**
** Invariants:
**   (1) keel_delete_batch deletes all of its ids or none: every id is
**       checked (distinct, live) and the room for every delete is made
**       before the first one, and keel__store_delete cannot fail after
**       keel__store_delete_prepare.
**   (2) keel_get_batch without a found mask and keel_ids write their outputs
**       only once nothing can fail.
**   (3) keel_ids returns ids in strictly increasing order, each live in the
**       view of its call and greater than `after`.
*/
#include "api/api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* " (position 3 of 10)", or "" for a batch of one. */
static const char *
position(char *buf, size_t len, size_t i, size_t n)
{
    if (n == 1)
        return "";
    snprintf(buf, len, " (position %zu of %zu)", i, n);
    return buf;
}

/* --- keel_get_batch ----------------------------------------------------- */

int
keel_get_batch(keel_index *idx, const uint64_t *ids, size_t n, float *out,
               unsigned char *found)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_get_batch");
    if (n == 0)
        return KEEL_OK;
    if (!ids || !out)
        return keel__fail(KEEL_EINVAL, "keel_get_batch was given %s = NULL "
                          "for %zu ids\nhelp: pass %s", !ids ? "ids" : "out",
                          n, !ids ? "the ids to read" : "room for n * dim "
                          "floats");
    if (n > SIZE_MAX / sizeof(uint64_t) / idx->dim)
        return keel__fail(KEEL_EINVAL, "keel_get_batch was given n = %zu ids, "
                          "more than memory can hold\nhelp: pass the number "
                          "of ids in the array", n);
    uint64_t *slots = keel__malloc(n * sizeof *slots);
    if (!slots)
        return KEEL_ENOMEM;
    keel_read r;
    int rc = keel__read_enter(idx, &r, KEEL_READ_VIEW | KEEL_READ_PAGES);
    if (rc) {
        keel__free(slots);
        return rc;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        int lrc = keel__store_id_lookup(&r.v, ids[i], &slots[i]);
        if (lrc == KEEL_OK) {
            /* A published index read without faults (store/pagein.h). */
            uint32_t s32 = (uint32_t)slots[i];
            rc = keel__store_need_slots(idx->st, &s32, 1, KEEL_NEED_VEC);
            continue;
        }
        slots[i] = UINT64_MAX;
        if (lrc != KEEL_ENOTFOUND) {
            rc = lrc;
            break;
        }
        if (!found) {
            char at[64];
            rc = keel__fail(KEEL_ENOTFOUND, "no live vector has id %llu%s in "
                            "%s\nhelp: check the id; deleted vectors cannot "
                            "be read",
                            (unsigned long long)ids[i],
                            position(at, sizeof at, i, n), idx->path);
        }
    }
    if (!rc) { /* invariant (2): nothing fails from here */
        uint32_t dim = idx->dim;
        for (size_t i = 0; i < n; i++) {
            float *row = out + i * dim;
            if (found)
                found[i] = slots[i] != UINT64_MAX;
            if (slots[i] == UINT64_MAX) {
                for (uint32_t j = 0; j < dim; j++)
                    row[j] = NAN;
                continue;
            }
            const void *src = keel__store_vec(idx->st, slots[i]);
            if (idx->precision == KEEL_F16)
                keel__f16_to_f32_n(src, row, dim);
            else
                memcpy(row, src, dim * sizeof(float));
        }
    }
    rc = keel__read_leave(idx, &r, rc);
    keel__free(slots);
    return rc;
}

/* --- keel_delete_batch -------------------------------------------------- */

/* KEEL_EINVAL naming the first repeated id (by its second position). */
static int
check_repeats(const uint64_t *ids, size_t n)
{
    size_t first, second;
    int found = keel__first_repeat(ids, n, &first, &second);
    if (found < 0)
        return KEEL_ENOMEM;
    if (!found)
        return KEEL_OK;
    return keel__fail(KEEL_EINVAL, "id %llu is given twice, at positions %zu "
                      "and %zu of %zu; nothing was deleted\nhelp: give each "
                      "id once", (unsigned long long)ids[first], first, second,
                      n);
}

int
keel_delete_batch(keel_index *idx, const uint64_t *ids, size_t n)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_delete_batch");
    if (!idx->writer)
        return keel__fail(KEEL_EREADONLY,
                          "cannot delete: the index at %s was opened as a "
                          "reader, which only searches\nhelp: open it as a "
                          "writer to write it; an index has one writer at a "
                          "time, and readers search while it writes",
                          idx->path);
    if (n == 0)
        return KEEL_OK;
    if (!ids)
        return keel__fail(KEEL_EINVAL, "keel_delete_batch was given ids = NULL "
                          "for %zu ids\nhelp: pass the ids to delete", n);
    if (n > SIZE_MAX / (2 * sizeof(uint64_t)))
        return keel__fail(KEEL_EINVAL, "keel_delete_batch was given n = %zu "
                          "ids, more than memory can hold\nhelp: pass the "
                          "number of ids in the array", n);
    int rc = check_repeats(ids, n);
    if (rc)
        return rc;
    uint64_t *slots = keel__malloc(n * sizeof *slots);
    if (!slots)
        return KEEL_ENOMEM;
    pthread_mutex_lock(&idx->write_lock);
    keel_view v;
    keel__store_view(idx->st, &v);
    for (size_t i = 0; i < n && !rc; i++)
        if (keel__store_id_lookup(&v, ids[i], &slots[i]) != KEEL_OK) {
            char at[64];
            rc = keel__fail(KEEL_ENOTFOUND, "no live vector has id %llu%s in "
                            "%s; nothing was deleted\nhelp: check the id; it "
                            "may have been deleted already",
                            (unsigned long long)ids[i],
                            position(at, sizeof at, i, n), idx->path);
        }
    if (!rc)
        rc = keel__store_delete_prepare(idx->st, slots, n);
    for (size_t i = 0; i < n && !rc; i++) /* invariant (1) */
        (void)keel__store_delete(idx->st, slots[i]);
    pthread_mutex_unlock(&idx->write_lock);
    keel__free(slots);
    return rc;
}

/* --- keel_ids ----------------------------------------------------------- */

/* out[0..n) as a max-heap of ids: the largest at out[0]. */
static void
heap_down(uint64_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l] > h[m])
            m = l;
        if (r < n && h[r] > h[m])
            m = r;
        if (m == i)
            return;
        uint64_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void
heap_up(uint64_t *h, size_t i)
{
    while (i > 0 && h[(i - 1) / 2] < h[i]) {
        uint64_t t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

int
keel_ids(keel_index *idx, uint64_t after, uint64_t *out, size_t cap,
         size_t *n_out)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_ids");
    if (!n_out)
        return keel__fail(KEEL_EINVAL, "keel_ids was given n_out = NULL\n"
                          "help: pass a size_t to receive how many ids were "
                          "written");
    if (cap == 0)
        return keel__fail(KEEL_EINVAL, "keel_ids was given cap = 0\nhelp: "
                          "pass room for at least one id (a page of "
                          "thousands lists faster)");
    if (!out)
        return keel__fail(KEEL_EINVAL, "keel_ids was given out = NULL with "
                          "cap = %zu\nhelp: pass room for cap ids", cap);
    keel_read r;
    int rc = keel__read_enter(idx, &r, KEEL_READ_VIEW | KEEL_READ_PAGES);
    if (rc)
        return rc;
    const keel_view *v = &r.v;
    size_t n = 0;
    /* Invariant (3): the cap smallest live ids above after, kept in a
     * max-heap; in slot order ids mostly grow, so once the heap is full
     * most candidates lose to its top at once. Ids are unique among live
     * slots, so no id enters twice. */
    for (uint64_t s = 0; !rc && s < v->count; s++) {
        if (s % 256 == 0 && keel__store_announces(idx->st)) {
            /* The next headers, fetched before they are read. */
            uint32_t batch[256], nb = 0;
            for (uint64_t t = s; t < v->count && nb < 256; t++)
                batch[nb++] = (uint32_t)t;
            if ((rc = keel__store_need_slots(idx->st, batch, nb,
                                             KEEL_NEED_HDR)))
                break;
        }
        uint64_t id = keel__store_id(idx->st, s);
        if (after != KEEL_IDS_FIRST && id <= after)
            continue;
        if (n == cap && id >= out[0])
            continue;
        if (!keel__store_present(v, s))
            continue;
        if (n < cap) {
            out[n] = id;
            heap_up(out, n++);
        } else {
            out[0] = id;
            heap_down(out, n, 0);
        }
    }
    rc = keel__read_leave(idx, &r, rc);
    if (rc)
        return rc;
    for (size_t m = n; m > 1; m--) { /* heap sort, smallest first */
        uint64_t t = out[0];
        out[0] = out[m - 1];
        out[m - 1] = t;
        heap_down(out, m - 1, 0);
    }
    *n_out = n;
    return KEEL_OK;
}
