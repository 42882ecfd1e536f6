/* pagein.c -- the residency record of each open store and the local file
** as a batch-read source (pagein.h).
**
** Invariants:
**   (1) A bit of the residency record, once set, stays set for the life of
**       the record; it means "brought in or asked for", and a page the
**       system later evicts only costs the fault it would have cost without
**       this module. The record never decides what a search returns.
**   (2) A record is created and extended under reg_lock, and freed only by
**       keel__br_forget, which its callers call when no search runs on the
**       store (close, compaction's swap, warm restarting under the swap
**       lock held exclusively).
**   (3) The mappings' access advice changes only under reg_lock: a cold
**       search's start sets random access when it is the only cold search
**       (cold_active 0 -> 1); normal access comes back when the last one
**       ends (1 -> 0). Neither happens once the store's own_advice is set,
**       which is set before the huge-page code gives its own advice. The
**       advice is a hint: it never changes what a search reads or returns.
**   (4) reg_lock is held across fork() (atfork handlers): a child starts
**       with it free, so the new handles of a child work whatever the
**       parent's threads were doing.
*/
#include "store/pagein.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

/* Lists of M0 + 1 ranges, each within two granules, that one fetch of a
** walk of st may name: as many as keep it within a quarter of st's memory
** bound (mem_limit counts granules). */
static uint64_t
fetch_room(const keel_store *st, uint32_t M0)
{
    return st->remote->mem_limit / 4 / (2 * ((uint64_t)M0 + 1));
}

uint32_t
keel__br_beam_of(const keel_store *st, uint32_t M0)
{
    uint32_t beam = keel__br_beam();
    if (!st->remote)
        return beam;
    /* Three lists (vector, record, header) per expansion. */
    uint64_t fit = fetch_room(st, M0) / 3;
    return (uint32_t)KEEL_MAX(KEEL_MIN((uint64_t)beam, fit), 1);
}

uint32_t
keel__br_remote_ahead(const keel_store *st, uint32_t M0, uint32_t beam)
{
    if (!st->remote)
        return 0;
    /* A fetch names (3 beam + 2 a)(M0 + 1) ranges. */
    uint64_t room = fetch_room(st, M0);
    uint64_t fit = room > 3 * (uint64_t)beam ? (room - 3 * (uint64_t)beam) / 2
                                             : 0;
    return (uint32_t)KEEL_MIN((uint64_t)keel__br_ahead(), fit);
}

uint64_t
keel__br_fetches(const keel_br_record *rec)
{
    return rec->st->remote ? KEEL_LOAD_RELAXED(&rec->st->remote->n.rounds) : 0;
}

/* --- the residency record ------------------------------------------------ */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

/* fork(): the child gets reg_lock free, whatever the parent's threads were
** doing (invariant 4). */
static void
reg_fork_prepare(void)
{
    pthread_mutex_lock(&reg_lock);
}

static void
reg_fork_parent(void)
{
    pthread_mutex_unlock(&reg_lock);
}

static void
reg_init(void)
{
    pthread_atfork(reg_fork_prepare, reg_fork_parent, reg_fork_parent);
}

static void
reg_enter(void)
{
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_lock);
}

static void
reg_leave(void)
{
    pthread_mutex_unlock(&reg_lock);
}

static keel_br_record *reg_head;  /* under reg_lock */
static uint64_t reg_gen = 1;      /* atomic: bumped by every forget */

#define LEAF_WORDS ((1u << KEEL_BR_LEAF_LOG2) / 64)

/* The leaf of granule g in tab, created if missing; NULL past the end or
** out of memory. */
static uint64_t *
leaf_of(uint64_t **tab, uint64_t g)
{
    uint64_t leaf = g >> KEEL_BR_LEAF_LOG2;
    if (leaf >= KEEL_BR_LEAVES)
        return NULL;
    uint64_t *b = KEEL_LOAD_ACQUIRE(&tab[leaf]);
    if (b)
        return b;
    uint64_t *nb = keel__calloc(LEAF_WORDS, 8);
    if (!nb)
        return NULL;
    uint64_t *expect = NULL;
    if (__atomic_compare_exchange_n(&tab[leaf], &expect, nb, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return nb;
    keel__free(nb);
    return expect;
}

static int
test_bit(uint64_t *const *tab, uint64_t g)
{
    uint64_t leaf = g >> KEEL_BR_LEAF_LOG2;
    const uint64_t *b = leaf < KEEL_BR_LEAVES ? KEEL_LOAD_ACQUIRE(&tab[leaf])
                                              : NULL;
    uint64_t w = g & ((1u << KEEL_BR_LEAF_LOG2) - 1);
    return b && (KEEL_LOAD_RELAXED(&b[w >> 6]) >> (w & 63) & 1);
}

/* Sets bit g; returns 1 if it was clear. */
static int
set_bit(uint64_t **tab, uint64_t g)
{
    uint64_t *b = leaf_of(tab, g);
    if (!b)
        return 0;
    uint64_t w = g & ((1u << KEEL_BR_LEAF_LOG2) - 1);
    uint64_t bit = (uint64_t)1 << (w & 63);
    return !(__atomic_fetch_or(&b[w >> 6], bit, __ATOMIC_RELEASE) & bit);
}

/* Marks [off, off+len) known resident. */
static void
mark(keel_br_record *rec, uint64_t off, uint64_t len)
{
    uint64_t g = off >> KEEL_BR_GRANULE_LOG2;
    uint64_t last = (off + len - 1) >> KEEL_BR_GRANULE_LOG2;
    uint64_t fresh = 0;
    for (; g <= last; g++)
        if (set_bit(rec->bits, g) && test_bit(rec->need, g))
            fresh++;
    if (!fresh)
        return;
    uint64_t known = __atomic_add_fetch(&rec->known, fresh, __ATOMIC_RELAXED);
    if (known >= KEEL_LOAD_RELAXED(&rec->total)) {
        reg_enter();
        if (KEEL_LOAD_RELAXED(&rec->known) >= KEEL_LOAD_RELAXED(&rec->total))
            KEEL_STORE_RELEASE(&rec->all, 1);
        KEEL_STORE_RELAXED(&rec->warming, 0); /* back to the rules */
        reg_leave();
    }
}

/* Counts [off, off+len) among the granules a search may ask for (under
** reg_lock). */
static void
need(keel_br_record *rec, uint64_t off, uint64_t len)
{
    if (!len)
        return;
    uint64_t g = off >> KEEL_BR_GRANULE_LOG2;
    uint64_t last = (off + len - 1) >> KEEL_BR_GRANULE_LOG2;
    for (; g <= last; g++)
        if (set_bit(rec->need, g)) {
            __atomic_add_fetch(&rec->total, 1, __ATOMIC_RELAXED);
            /* A granule marked before it was needed counts now; a marker
             * racing with this may count it too, which only sets `all`
             * early for a granule or two: they then fault in. */
            if (test_bit(rec->bits, g))
                __atomic_add_fetch(&rec->known, 1, __ATOMIC_RELAXED);
        }
}

/* Whether every page of [addr, addr+len) is resident (mincore). */
static int
all_resident(const uint8_t *addr, uint64_t len)
{
    unsigned char vec[((size_t)1 << KEEL_BR_GRANULE_LOG2) / 4096 + 2];
    size_t page = keel__page_size();
    uintptr_t a = (uintptr_t)addr & ~(uintptr_t)(page - 1);
    size_t npg = (size_t)(((uintptr_t)addr + len - a + page - 1) / page);
    if (npg > sizeof vec ||
        keel__os->resident((void *)a, npg * page, vec) != 0)
        return 0;
    for (size_t i = 0; i < npg; i++)
        if (!(vec[i] & 1))
            return 0;
    return 1;
}

#define SEED_SAMPLES 16

/* Marks [off, off+len), at addr in a mapping, known resident if the system
** reports a sample of its granules resident (mincore on SEED_SAMPLES
** granules spread over it), so a file already in memory is known at once
** and its searches never call this module (under reg_lock). Asking about
** every page instead cost the first search of a cached 421 MB file 10 ms.
** A sample that misses a cold stretch only lets its pages fault in as
** they would without this module. */
static void
seed(keel_br_record *rec, const uint8_t *addr, uint64_t off, uint64_t len)
{
    if (!len)
        return;
    uint64_t g0 = off >> KEEL_BR_GRANULE_LOG2;
    uint64_t g1 = (off + len - 1) >> KEEL_BR_GRANULE_LOG2;
    uint64_t step = KEEL_MAX((g1 - g0 + 1) / SEED_SAMPLES, 1);
    for (uint64_t g = g0; g <= g1; g += step) {
        uint64_t lo = KEEL_MAX(off, g << KEEL_BR_GRANULE_LOG2);
        uint64_t hi = KEEL_MIN(off + len, (g + 1) << KEEL_BR_GRANULE_LOG2);
        if (!all_resident(addr + (lo - off), hi - lo))
            return;
    }
    for (uint64_t g = g0; g <= g1; g++)
        if (set_bit(rec->bits, g) && test_bit(rec->need, g))
            __atomic_add_fetch(&rec->known, 1, __ATOMIC_RELAXED);
}

/* Brings rec's needed granules up to slot `limit` (under reg_lock). */
static void
extend(keel_br_record *rec, const keel_store *st, uint64_t limit)
{
    uint64_t from = rec->covered;
    uint32_t nseg = KEEL_LOAD_ACQUIRE(&st->nseg);
    for (uint32_t k = 0; k < nseg && from < limit; k++) {
        const keel_segment *sg = &st->seg[k];
        uint64_t first = keel__seg_first_slot(&st->g, k);
        uint64_t end = first + sg->slots;
        if (end <= from)
            continue;
        const uint8_t *base = KEEL_LOAD_RELAXED(&sg->base);
        if (!base)
            break;
        uint64_t a = from - first, b = KEEL_MIN(limit, end) - first;
        const uint8_t *vecs = KEEL_LOAD_RELAXED(&sg->vecs);
        const uint8_t *recs = KEEL_LOAD_RELAXED(&sg->recs);
        uint64_t voff = sg->off + (uint64_t)(vecs - base) + a * st->g.vec_bytes;
        uint64_t roff = sg->off + (uint64_t)(recs - base) + a * st->g.rec_bytes;
        need(rec, voff, (b - a) * st->g.vec_bytes);
        need(rec, roff, (b - a) * st->g.rec_bytes);
        seed(rec, vecs + a * st->g.vec_bytes, voff, (b - a) * st->g.vec_bytes);
        seed(rec, recs + a * st->g.rec_bytes, roff, (b - a) * st->g.rec_bytes);
        const uint8_t *codes = KEEL_LOAD_RELAXED(&sg->codes);
        if (codes) {
            uint64_t coff = sg->off + (uint64_t)(codes - base) +
                            a * st->g.code_bytes;
            need(rec, coff, (b - a) * st->g.code_bytes);
            seed(rec, codes + a * st->g.code_bytes, coff,
                 (b - a) * st->g.code_bytes);
        }
        from = first + b;
    }
    KEEL_STORE_RELEASE(&rec->covered, from);
    KEEL_STORE_RELEASE(&rec->all, KEEL_LOAD_RELAXED(&rec->known) >=
                                      KEEL_LOAD_RELAXED(&rec->total));
}

static void
record_free(keel_br_record *rec)
{
    for (uint32_t i = 0; i < KEEL_BR_LEAVES; i++) {
        keel__free(rec->bits[i]);
        keel__free(rec->need[i]);
    }
    keel__free(rec);
}

/* The record of st (created if missing); under reg_lock. */
static keel_br_record *
find(const keel_store *st, int create)
{
    keel_br_record *rec = reg_head;
    while (rec && rec->st != st)
        rec = rec->next;
    if (rec || !create)
        return rec;
    rec = keel__calloc(1, sizeof *rec);
    if (!rec)
        return NULL;
    rec->st = st;
    rec->next = reg_head;
    reg_head = rec;
    return rec;
}

/* Gives every mapping of st the access advice adv (under reg_lock). Random
** access while a search brings its pages in: the faults it still takes
** (the entry point, upper layers, a page its advice has not reached yet)
** then read their page alone, where a fault on a mapped file reads
** read_ahead_kb around it (8 MiB on the benchmark's disk), and a few such
** faults read more than the walk needs. GloVe-340k evicted, ef 64, 1st
** result: 62-72 ms with the advice alone, 22-29 ms with random access too
** (18 MB read against 70). */
static void
fault_advice(const keel_store *st, int adv)
{
    uint32_t nseg = KEEL_LOAD_ACQUIRE(&st->nseg);
    for (uint32_t k = 0; k < nseg; k++) {
        const keel_segment *sg = &st->seg[k];
        uint8_t *base = KEEL_LOAD_ACQUIRE(&sg->base);
        if (base)
            keel__os->advise(base, (size_t)sg->bytes, adv);
    }
    uint32_t ntab = KEEL_LOAD_ACQUIRE(&st->nidtabs);
    for (uint32_t t = 0; t < ntab; t++)
        if (st->idtabs[t].tab)
            keel__os->advise(st->idtabs[t].tab,
                             (size_t)(4ull << st->idtabs[t].log2), adv);
    if (st->pages)
        keel__os->advise(st->pages, KEEL_DATA_OFF, adv);
    if (st->live)
        keel__os->advise(st->live, KEEL_PAGE_SLOT, adv);
    uint32_t nheap = KEEL_LOAD_ACQUIRE(&st->nheap);
    for (uint32_t k = 0; k < nheap; k++) {
        const keel_chunk *ch = &st->heap[k];
        uint8_t *base = KEEL_LOAD_ACQUIRE(&ch->base);
        if (base)
            keel__os->advise(base, (size_t)ch->bytes, adv);
    }
}

/* A cold search of rec begins: random access for its store's mappings
** while it is the only one (invariant 3); returns rec. */
static keel_br_record *
cold_begins(keel_br_record *rec)
{
    reg_enter();
    if (rec->cold_active++ == 0 && !rec->st->own_advice)
        fault_advice(rec->st, KEEL_ADV_RANDOM);
    reg_leave();
    return rec;
}

keel_br_record *
keel__br_record(keel_br_cache *c, const keel_store *st, const keel_view *v,
                uint32_t ef)
{
    int on = keel__br_enabled();
    /* A published index without a userfaultfd announces every read
     * whatever the switch says: nothing else brings its pages in (cache.h
     * invariant 7). */
    if (!on && !(st->remote && !keel__cache_faults(st->remote)))
        return NULL;
    uint64_t gen = __atomic_load_n(&reg_gen, __ATOMIC_ACQUIRE);
    keel_br_record *rec = c->rec;
    if (!rec || c->st != st || c->gen != gen) {
        reg_enter();
        rec = find(st, 1);
        reg_leave();
        c->st = st;
        c->rec = rec;
        c->gen = gen;
        if (!rec)
            return NULL;
    }
    /* A published index: every search announces what it reads (the page
     * cache knows what is in and drops the rest cheaply); misses cost a
     * round trip each, not a disk read. Once every page is in (warm
     * finished), there is nothing to announce: the check of each range
     * cost 8-14% of the QPS of a cached index (doc/object_storage_bench.md). */
    if (st->remote)
        return keel__cache_complete(st->remote) ? NULL : rec;
    uint64_t limit = KEEL_BR_COLD_SEARCHES;
    if (limit && KEEL_LOAD_RELAXED(&rec->searches) >= limit)
        return NULL; /* the cold searches are spent: nothing more to learn */
    if (KEEL_LOAD_ACQUIRE(&rec->covered) < v->limit) {
        reg_enter();
        if (rec->covered < v->limit)
            extend(rec, st, v->limit);
        reg_leave();
    }
    /* While warm reads the whole file, searches leave the reading to it:
     * their reads would queue behind warm's (doc/batch_reads.md). */
    if (KEEL_LOAD_ACQUIRE(&rec->all) || KEEL_LOAD_RELAXED(&rec->warming))
        return NULL;
    if (on == 1 && KEEL_LOAD_RELAXED(&rec->total) <
                       (uint64_t)KEEL_BR_SMALL_FACTOR * ef)
        return NULL;
    if (limit &&
        __atomic_fetch_add(&rec->searches, 1, __ATOMIC_RELAXED) >= limit)
        return NULL;
    return cold_begins(rec);
}

void
keel__br_done(keel_br_record *rec)
{
    if (rec->st->remote)
        return;
    reg_enter();
    if (--rec->cold_active == 0 && !rec->st->own_advice)
        fault_advice(rec->st, KEEL_ADV_NORMAL);
    reg_leave();
}

void
keel__br_own_advice(keel_store *st)
{
    reg_enter();
    st->own_advice = 1; /* invariant (3) */
    reg_leave();
}

void
keel__br_warming(const keel_store *st)
{
    reg_enter();
    keel_br_record *rec = find(st, 1);
    if (rec)
        KEEL_STORE_RELAXED(&rec->warming, 1);
    reg_leave();
}

void
keel__br_warmed(const keel_store *st, const keel_view *v)
{
    reg_enter();
    keel_br_record *rec = find(st, 1);
    if (rec) {
        if (rec->covered < v->limit)
            extend(rec, st, v->limit);
        /* Everything warm read: the granules needed so far. */
        for (uint32_t l = 0; l < KEEL_BR_LEAVES; l++) {
            const uint64_t *nb = KEEL_LOAD_ACQUIRE(&rec->need[l]);
            if (!nb)
                continue;
            uint64_t *b = leaf_of(rec->bits, (uint64_t)l << KEEL_BR_LEAF_LOG2);
            if (!b)
                continue;
            for (uint32_t w = 0; w < LEAF_WORDS; w++)
                __atomic_fetch_or(&b[w], KEEL_LOAD_RELAXED(&nb[w]),
                                  __ATOMIC_RELEASE);
        }
        __atomic_store_n(&rec->known, KEEL_LOAD_RELAXED(&rec->total),
                         __ATOMIC_RELAXED);
        KEEL_STORE_RELEASE(&rec->all, 1);
    }
    reg_leave();
}

void
keel__br_forget(const keel_store *st)
{
    reg_enter();
    keel_br_record **p = &reg_head;
    while (*p && (*p)->st != st)
        p = &(*p)->next;
    keel_br_record *rec = *p;
    if (rec)
        *p = rec->next;
    __atomic_add_fetch(&reg_gen, 1, __ATOMIC_RELEASE);
    reg_leave();
    if (rec)
        record_free(rec);
}

/* --- the local file -------------------------------------------------------- */
/* (keel__br_local hands a published index's ranges to its page cache.) */

/* Brings a run in: read-ahead advice (MADV_WILLNEED) on each stretch of
** the run that is contiguous in the file and in memory. The advice only
** starts the reads; the search's loads wait for them, all in flight at
** once. (bench/pagein_bench, 512 MiB evicted, batches of 32 random 4 KiB
** pages, total ms for 200 batches: faults one by one 350-366; WILLNEED 74;
** readahead(2) 74-83, the same call inside the kernel; MADV_POPULATE_READ
** on 4 threads 325-485; io_uring reads 100-103. 64 KiB spans: WILLNEED
** 258, readahead 292, populate 352, io_uring 413, faults 495.) Only
** EIO fails the run: other refusals (an old kernel, memory pressure) leave
** the pages to fault in one by one. */
static long
local_read(void *self, const keel_br_run *run, const void **out)
{
    keel_br_record *rec = self;
    size_t i = 0;
    while (i < run->n) {
        const keel_br_range *a = &run->r[i];
        uint64_t end = a->off + a->len;
        size_t j = i + 1;
        for (; j < run->n; j++) {
            const keel_br_range *b = &run->r[j];
            /* Contiguous in memory too: the same mapping. */
            if (b->off > end + KEEL_BR_GAP ||
                (uintptr_t)b->addr - (uintptr_t)a->addr != b->off - a->off)
                break;
            end = KEEL_MAX(end, b->off + b->len);
        }
        int rc = keel__os->advise((void *)(uintptr_t)a->addr,
                                  (size_t)(end - a->off), KEEL_ADV_WILLNEED);
        if (rc == -EIO)
            return rc;
        for (; i < j; i++) {
            mark(rec, run->r[i].off, run->r[i].len);
            out[i] = run->r[i].addr;
        }
    }
    return (long)run->n;
}

int
keel__br_local(keel_br_record *rec, const keel_br_range *r, size_t n,
               keel_br_scratch *s, keel_stop *stop)
{
    if (rec->st->remote) /* the seam: a published index's page cache */
        return keel__cache_bring(rec->st->remote, r, n, s, stop);
    const void *outs[2 * 64];
    const void **out = outs;
    if (n > sizeof outs / sizeof outs[0] &&
        !(out = keel__malloc(n * sizeof *out)))
        return KEEL_ENOMEM;
    keel_br_source src = {local_read, NULL, rec};
    int rc = keel__br_read(&src, NULL, r, n, out, s);
    if (out != outs)
        keel__free(out);
    return rc;
}

/* --- explicit fetches of a published index ----------------------------- */

/* Brings r[0..n) in through st's page cache (those not in yet). */
static int
need_ranges(const keel_store *st, const keel_br_range *r, size_t n)
{
    keel_cache *c = st->remote;
    size_t i = 0;
    while (i < n && (!r[i].len || keel__cache_has(c, r[i].off, r[i].len)))
        i++;
    if (i == n)
        return KEEL_OK;
    keel_br_scratch s = {0};
    int rc = keel__cache_bring(c, r + i, n - i, &s, NULL);
    keel__br_scratch_free(&s);
    return rc;
}

int
keel__store_need(const keel_store *st, uint64_t off, uint64_t len)
{
    if (!keel__store_announces(st) || !len)
        return KEEL_OK;
    keel_br_range r = {off, len, NULL};
    return need_ranges(st, &r, 1);
}

/* File offset of the n bytes at p in segment sg. */
static inline keel_br_range
seg_range(const keel_segment *sg, const void *p, uint64_t n)
{
    const uint8_t *base = KEEL_LOAD_RELAXED(&sg->base);
    return (keel_br_range){sg->off + (uint64_t)((const uint8_t *)p - base), n,
                           NULL};
}

int
keel__store_need_slots(const keel_store *st, const uint32_t *s, size_t n,
                       unsigned what)
{
    if (!keel__store_announces(st) || !n)
        return KEEL_OK;
    keel_br_range local[3 * 64], *r = local;
    size_t cap = sizeof local / sizeof local[0], nr = 0;
    if (3 * n > cap && !(r = keel__malloc(3 * n * sizeof *r)))
        return KEEL_ENOMEM;
    for (size_t j = 0; j < n; j++) {
        uint64_t i;
        const keel_segment *sg = keel__store_seg(st, s[j], &i);
        if (!KEEL_LOAD_RELAXED(&sg->base))
            continue;
        if (what & KEEL_NEED_VEC)
            r[nr++] = seg_range(sg, keel__store_vec(st, s[j]),
                                st->g.vec_bytes);
        if (what & KEEL_NEED_REC)
            r[nr++] = seg_range(sg, keel__store_rec(st, s[j]),
                                st->g.rec_bytes);
        if (what & KEEL_NEED_HDR)
            r[nr++] = seg_range(sg, KEEL_LOAD_RELAXED(&sg->hdrs) + i * 16, 16);
    }
    int rc = need_ranges(st, r, nr);
    if (r != local)
        keel__free(r);
    return rc;
}

int
keel__store_need_list(const keel_store *st, uint64_t slot, uint32_t level)
{
    if (!keel__store_announces(st))
        return KEEL_OK;
    /* Where keel__store_list finds it (the record's heap reference). */
    uint64_t head = KEEL_LOAD_ACQUIRE(&keel__store_rec(st, slot)[0]);
    uint32_t lv = (uint32_t)(head & 0xFF);
    if (level == 0 || level > lv || lv >= KEEL_MAX_LEVELS)
        return KEEL_OK; /* nothing the walk reads */
    uint64_t ref = head >> 16, off = ref & 0xFFFFFFFFu;
    uint32_t k = (uint32_t)(ref >> 32);
    if (k >= KEEL_LOAD_ACQUIRE(&st->nheap))
        return KEEL_OK;
    const keel_chunk *ch = &st->heap[k];
    uint64_t M = st->g.M;
    if (!KEEL_LOAD_RELAXED(&ch->base) || off + 4 * M * lv > ch->bytes ||
        off % 4)
        return KEEL_OK;
    return keel__store_need(st, ch->off + off + 4 * M * (level - 1), 4 * M);
}

int
keel__store_need_all(const keel_store *st)
{
    if (!keel__store_announces(st))
        return KEEL_OK;
    return keel__store_need(st, 0, st->remote->size);
}
