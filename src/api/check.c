/* check.c -- what a store can say about itself: statistics, the full
** integrity check behind keel_check, and the byte ranges it has written.
**
** The check reads the last commit (a writer's committed header, a reader's
** snapshot) and verifies every rule of doc/format.md marked "checked": the
** header copies, every committed slot's header, vector and level-0 record,
** every heap entry a record points to, the uniqueness of live ids and that
** the id table finds each of them. It reports the first violation.
*/
#include <math.h>
#include <stdlib.h>

#include "hnsw/codes.h"
#include "hnsw/dist.h"
#include "store/store.h"

int
keel__store_stats(keel_store *st, keel_stats *out)
{
    keel_header *h = keel__malloc(sizeof *h);
    if (!h)
        return keel__fail(KEEL_ENOMEM, "out of memory reading the facts of "
                          "%s\nhelp: free memory", st->path);
    keel_view v;
    int rc = keel__store_snapshot(st, &v, h);
    if (rc) {
        keel__free(h);
        return rc;
    }
    memset(out, 0, sizeof *out);
    out->dim = st->g.dim;
    out->metric = (keel_metric)st->metric;
    out->precision = (keel_precision)st->precision;
    out->codes = (keel_codes)st->g.codes;
    out->max_connections = st->g.M;
    if (st->writer) {
        out->slots = v.count;
        out->deleted = v.deleted;
        out->next_id = v.next_id;
    } else {
        out->slots = h->count;
        out->deleted = h->deleted;
        out->next_id = h->next_id;
    }
    out->count = out->slots - out->deleted;
    out->max_level = v.max_level;
    out->segments = h->segments;
    out->heap_chunks = h->heap_chunks;
    out->snapshot = h->sequence;
    out->is_reader = !st->writer;
    keel__free(h);
    keel_file_info fi;
    if (keel__os->stat(st->fd, &fi) == 0) {
        out->file_bytes = fi.size;
        out->allocated_bytes = fi.allocated;
    }
    return KEEL_OK;
}

/* A small open-addressing set of u64 for the uniqueness check. */
typedef struct u64set {
    uint64_t *k;
    uint8_t *used;
    uint64_t mask;
} u64set;

static int
set_add(u64set *s, uint64_t key)
{
    uint64_t h = (key * 0x9E3779B97F4A7C15ull) & s->mask;
    while (s->used[h]) {
        if (s->k[h] == key)
            return 0;
        h = (h + 1) & s->mask;
    }
    s->used[h] = 1;
    s->k[h] = key;
    return 1;
}

static int
check_slot(keel_store *st, const keel_header *h, const keel_view *v,
           uint64_t s, float *buf, uint64_t *dead)
{
    /* A writer's commit has no mark above its epoch (recovery cleared
     * them). A reader's snapshot may: every delete flush since it was taken
     * marks with a later epoch, and the slot is live at the snapshot. */
    uint64_t mark = KEEL_LOAD_RELAXED(keel__store_mark(st, s));
    if (mark > h->epoch && st->writer)
        return KEEL_CORRUPT("slot %llu is marked deleted at epoch %llu, after "
                            "the file's epoch %llu", (unsigned long long)s,
                            (unsigned long long)mark,
                            (unsigned long long)h->epoch);
    if (mark && mark <= h->epoch)
        (*dead)++;
    const void *vec = keel__store_vec(st, s);
    const float *f = vec;
    if (st->precision == KEEL_F16) {
        keel__f16_to_f32_n(vec, buf, st->g.dim);
        f = buf;
    }
    double norm = 0;
    for (uint32_t i = 0; i < st->g.dim; i++) {
        if (!isfinite(f[i]))
            return KEEL_CORRUPT("slot %llu holds a non-finite component %u",
                                (unsigned long long)s, i);
        norm += (double)f[i] * f[i];
    }
    if (st->metric == KEEL_COSINE && fabs(norm - 1.0) > 0.02)
        return KEEL_CORRUPT("slot %llu of a cosine index has length %g, not 1",
                            (unsigned long long)s, sqrt(norm));
    if (st->g.code_bytes) {
        /* codes.h (1): the row is the stored vector's, byte for byte. */
        uint8_t *row = (uint8_t *)(buf + st->g.dim);
        keel__code_encode(f, KEEL_F32, keel__store_centre(st), st->g.dim,
                          (int)st->g.codes, buf + st->g.dim + st->g.code_bytes / 4, row,
                          st->g.code_bytes);
        if (memcmp(row, keel__store_code(st, s), st->g.code_bytes) != 0)
            return KEEL_CORRUPT("slot %llu's traversal code row does not "
                                "match its vector", (unsigned long long)s);
    }
    uint64_t head = KEEL_LOAD_RELAXED(keel__store_rec(st, s));
    uint32_t level = (uint32_t)(head & 0xFF);
    if (level > h->max_level || (head >> 8 & 0xFF))
        return KEEL_CORRUPT("slot %llu has level %u above the top layer %u",
                            (unsigned long long)s, level, h->max_level);
    if (level) {
        uint64_t ref = head >> 16;
        uint32_t c = (uint32_t)(ref >> 32);
        uint64_t off = ref & 0xFFFFFFFFu, end = off + 4ull * st->g.M * level;
        uint32_t hc = (uint32_t)(h->heap_used >> 32);
        if (c > hc || c >= h->heap_chunks || end > st->heap[c].bytes ||
            (c == hc && end > (h->heap_used & 0xFFFFFFFFu)))
            return KEEL_CORRUPT("slot %llu points at heap %u:%llu outside the "
                                "committed heap", (unsigned long long)s, c,
                                (unsigned long long)off);
    }
    if (level == 0 && head != 0)
        return KEEL_CORRUPT("slot %llu has a heap reference at level 0",
                            (unsigned long long)s);
    for (uint32_t lv = 0; lv <= level; lv++) {
        uint32_t len;
        const uint32_t *list = keel__store_list(st, s, lv, &len);
        if (!list)
            return KEEL_CORRUPT("slot %llu lost its level %u list",
                                (unsigned long long)s, lv);
        for (uint32_t j = 0; j < len; j++) {
            uint32_t e = KEEL_LOAD_RELAXED(&list[j]);
            if (e == s)
                return KEEL_CORRUPT("slot %llu links to itself at level %u",
                                    (unsigned long long)s, lv);
            if (e != KEEL_EMPTY && e < h->count && lv > 0 &&
                (KEEL_LOAD_RELAXED(keel__store_rec(st, e)) & 0xFF) < lv)
                return KEEL_CORRUPT("slot %llu links at level %u to slot %u, "
                                    "which has no such level",
                                    (unsigned long long)s, lv, e);
        }
    }
    KEEL_UNUSED(v);
    return KEEL_OK;
}

static int check_commit(keel_store *st, keel_header *h);

int
keel__store_check(keel_store *st)
{
    /* A writer whose flush failed may hold marks or lists of that flush
     * that no commit covers: its mapping is not the file a reopen sees, so
     * there is nothing to check in it (the caller holds the write mutex). */
    if (st->writer && st->poisoned)
        return keel__fail(KEEL_EIO,
                          "this writer of %s is poisoned: its last flush "
                          "failed, so what reached the disk is unknown, and "
                          "the handle is not checked\nhelp: close the index "
                          "and open it again: it reopens at its last "
                          "completed flush, and keel_check then checks the "
                          "file", st->path);
    keel_header *h = keel__malloc(sizeof *h);
    if (!h)
        return keel__fail(KEEL_ENOMEM, "out of memory checking %s\nhelp: free "
                          "memory", st->path);
    int rc = check_commit(st, h);
    keel__free(h);
    return rc;
}

/* Checks the commit *h, taken as the snapshot (reader: its own copy, which
** searches on other threads cannot replace under the check). */
static int
check_commit(keel_store *st, keel_header *h)
{
    keel_view v;
    int rc = keel__store_snapshot(st, &v, h);
    if (rc)
        return rc;
    /* The view counts the writer's unflushed adds; check the commit. */
    v.count = v.limit = h->count;
    v.epoch = h->epoch;
    v.as_committed = 1;
    const float *centre = keel__store_centre(st);
    for (uint32_t i = 0; h->count && centre && i < st->g.dim; i++)
        if (!isfinite(centre[i]))
            return KEEL_CORRUPT("the traversal codes' centre holds a "
                                "non-finite component %u", i);
    if (h->count) {
        uint64_t e = KEEL_LOAD_RELAXED(keel__store_rec(st, h->entry));
        if ((e & 0xFF) != h->max_level)
            return KEEL_CORRUPT("the entry point %u has level %u, not the top "
                                "layer %u", h->entry, (unsigned)(e & 0xFF),
                                h->max_level);
    }
    /* A vector widened to f32, a code row, dim floats of scratch. */
    float *buf = keel__malloc(2 * st->g.dim * sizeof(float) + st->g.code_bytes);
    u64set ids = {0};
    uint64_t cap = 16;
    while (cap < h->count * 2)
        cap *= 2;
    ids.mask = cap - 1;
    ids.k = keel__malloc(cap * 8);
    ids.used = keel__calloc(cap, 1);
    if (!buf || !ids.k || !ids.used) {
        rc = KEEL_ENOMEM;
        goto out;
    }
    keel_idtab *tab = NULL;
    uint32_t ntabs = KEEL_LOAD_ACQUIRE(&st->nidtabs);
    for (uint32_t t = 0; t < ntabs; t++)
        if (st->idtabs[t].off == h->idtab_offset)
            tab = &st->idtabs[t];
    v.idtab = tab;
    uint64_t dead = 0;
    for (uint64_t s = 0; s < h->count; s++) {
        if ((rc = check_slot(st, h, &v, s, buf, &dead)))
            goto out;
        uint64_t mark = KEEL_LOAD_RELAXED(keel__store_mark(st, s));
        if (mark && mark <= h->epoch)
            continue;
        uint64_t id = keel__store_id(st, s), found;
        if (id == UINT64_MAX || id >= h->next_id) {
            rc = KEEL_CORRUPT("slot %llu holds id %llu, not below the file's "
                              "next id %llu", (unsigned long long)s,
                              (unsigned long long)id,
                              (unsigned long long)h->next_id);
            goto out;
        }
        if (!set_add(&ids, id)) {
            rc = KEEL_CORRUPT("id %llu is live in two slots",
                              (unsigned long long)id);
            goto out;
        }
        if (keel__store_id_lookup(&v, id, &found) != KEEL_OK || found != s) {
            rc = KEEL_CORRUPT("the id table does not find id %llu of slot %llu",
                              (unsigned long long)id, (unsigned long long)s);
            goto out;
        }
    }
    if (dead != h->deleted)
        rc = KEEL_CORRUPT("%llu slots are marked deleted, the header says %llu",
                          (unsigned long long)dead,
                          (unsigned long long)h->deleted);
out:
    keel__free(buf);
    keel__free(ids.k);
    keel__free(ids.used);
    if (rc == KEEL_ENOMEM)
        return keel__fail(KEEL_ENOMEM, "out of memory checking the index\n"
                          "help: free memory");
    return rc;
}

void
keel__store_written_ranges(const keel_store *st, const keel_view *v,
                           keel_range_fn fn, void *arg)
{
    /* The heap first: the upper layers every search crosses before it
     * reaches level 0. Then each kind of array, every segment's before the
     * next kind, in the order a coded search needs them: the level-0
     * records and code rows it walks, the slot headers whose ids it
     * returns, and last the vectors (a coded walk measures a few dozen of
     * them; an uncoded one measures every node it meets). A reader of a
     * published index answers its first query once the walk's arrays are
     * in. */
    uint64_t hu = st->writer ? st->work.heap_used : v->heap_used;
    uint32_t hc = (uint32_t)(hu >> 32);
    uint32_t nheap = KEEL_LOAD_ACQUIRE(&st->nheap);
    for (uint32_t c = 0; c < nheap && c <= hc; c++) {
        const keel_chunk *ch = &st->heap[c];
        fn(KEEL_LOAD_RELAXED(&ch->base),
           (size_t)(c < hc ? ch->bytes : (hu & 0xFFFFFFFFu)), 0, arg);
    }
    uint64_t limit = v->limit;
    uint32_t nseg = KEEL_LOAD_ACQUIRE(&st->nseg);
    for (int kind = 0; kind < 4; kind++) {
        for (uint32_t k = 0; k < nseg; k++) {
            const keel_segment *s = &st->seg[k];
            uint64_t first = keel__seg_first_slot(&st->g, k);
            if (first >= limit)
                break;
            uint64_t used = KEEL_MIN(limit - first, s->slots);
            if (kind == 0)
                fn(KEEL_LOAD_RELAXED(&s->recs),
                   (size_t)(used * st->g.rec_bytes), 0, arg);
            else if (kind == 1 && st->g.code_bytes)
                fn(KEEL_LOAD_RELAXED(&s->codes),
                   (size_t)(used * st->g.code_bytes), 1, arg);
            else if (kind == 2)
                fn(KEEL_LOAD_RELAXED(&s->hdrs),
                   (size_t)(used * KEEL_SLOT_HDR_BYTES), 0, arg);
            else if (kind == 3)
                fn(KEEL_LOAD_RELAXED(&s->vecs),
                   (size_t)(used * st->g.vec_bytes), 1, arg);
        }
    }
}
