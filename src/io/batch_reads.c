/* batch_reads.c -- the batch-read policy: the allowance, sorting and
** merging ranges into runs sized to the overlap granted, the switch and
** the overlap cap (batch_reads.h). Knows sources, not files:
** store/pagein.c is the local file's source, cache/remote.c a published
** index's.
**
** Invariants:
**   (1) A batch returns only after the source's wait for every run it read,
**       and gives its extra runs back only then (batch_reads.h (a), (b)).
*/
#include "io/batch_reads.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

keel_br_allowance keel__br_shared = {KEEL_BR_ALLOWANCE};

/* --- the allowance ------------------------------------------------------ */

uint32_t
keel__br_take(keel_br_allowance *a, uint32_t want)
{
    int cur = __atomic_load_n(&a->free, __ATOMIC_RELAXED);
    for (;;) {
        if (cur <= 0 || want == 0)
            return 0;
        int got = KEEL_MIN(cur, (int)want);
        if (__atomic_compare_exchange_n(&a->free, &cur, cur - got, 1,
                                        __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return (uint32_t)got;
    }
}

void
keel__br_give(keel_br_allowance *a, uint32_t n)
{
    if (n)
        __atomic_fetch_add(&a->free, (int)n, __ATOMIC_RELEASE);
}

/* --- the policy --------------------------------------------------------- */

void
keel__br_scratch_free(keel_br_scratch *s)
{
    keel__free(s->dist);
    keel__free(s->ext);
    keel__free(s->order);
    keel__free(s->which);
    keel__free(s->dout);
    memset(s, 0, sizeof *s);
}

static int
scratch_grow(keel_br_scratch *s, size_t n)
{
    if (n <= s->cap)
        return KEEL_OK;
    size_t cap = KEEL_MAX(n, s->cap * 2);
    keel_br_scratch t = {0};
    t.dist = keel__malloc(cap * sizeof *t.dist);
    t.ext = keel__malloc(cap * sizeof *t.ext);
    t.order = keel__malloc(cap * sizeof *t.order);
    t.which = keel__malloc(cap * sizeof *t.which);
    t.dout = keel__malloc(cap * sizeof *t.dout);
    t.cap = cap;
    if (!t.dist || !t.ext || !t.order || !t.which || !t.dout) {
        keel__br_scratch_free(&t);
        return KEEL_ENOMEM;
    }
    keel__br_scratch_free(s);
    *s = t;
    return KEEL_OK;
}

static inline int
range_less(const keel_br_range *a, const keel_br_range *b)
{
    return a->off < b->off || (a->off == b->off && a->len < b->len);
}

/* Sorts caller indexes by range: insertion sort for an expansion's few
** dozen, merge sort past that (stable either way). */
static void
sort_order(const keel_br_range *r, uint32_t *o, uint32_t *tmp, size_t n)
{
    if (n <= 48) {
        for (size_t i = 1; i < n; i++) {
            uint32_t x = o[i];
            size_t j = i;
            for (; j > 0 && range_less(&r[x], &r[o[j - 1]]); j--)
                o[j] = o[j - 1];
            o[j] = x;
        }
        return;
    }
    size_t h = n / 2;
    sort_order(r, o, tmp, h);
    sort_order(r, o + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = range_less(&r[o[j]], &r[o[i]]) ? o[j++] : o[i++];
    while (i < h)
        tmp[k++] = o[i++];
    while (j < n)
        tmp[k++] = o[j++];
    memcpy(o, tmp, n * sizeof *o);
}

/* Sorted distinct ranges into s->dist (caller -> distinct in s->which);
** returns their number. */
static size_t
dedupe(const keel_br_range *r, size_t n, keel_br_scratch *s)
{
    for (size_t i = 0; i < n; i++)
        s->order[i] = (uint32_t)i;
    /* s->dout doubles as the merge buffer: it is not used yet. */
    sort_order(r, s->order, (uint32_t *)(void *)s->dout, n);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const keel_br_range *x = &r[s->order[i]];
        if (m == 0 || x->off != s->dist[m - 1].off ||
            x->len != s->dist[m - 1].len)
            s->dist[m++] = *x;
        s->which[s->order[i]] = (uint32_t)(m - 1);
    }
    return m;
}

/* Extents of the distinct ranges: s->ext[e].off/len span them, and
** s->order[e] is the first distinct range of extent e. */
static size_t
merge(size_t m, keel_br_scratch *s)
{
    size_t e = 0;
    uint64_t end = 0;
    for (size_t i = 0; i < m; i++) {
        const keel_br_range *x = &s->dist[i];
        /* Within the gap, and not past the longest extent unless x
         * overlaps it (an extent never ends inside a range). */
        if (e && x->off <= end + KEEL_BR_GAP &&
            (x->off < end ||
             x->off + x->len - s->ext[e - 1].off <= KEEL_BR_EXTENT_MAX)) {
            end = KEEL_MAX(end, x->off + x->len);
            s->ext[e - 1].len = end - s->ext[e - 1].off;
            continue;
        }
        s->ext[e] = *x;
        s->order[e++] = (uint32_t)i;
        end = x->off + x->len;
    }
    return e;
}

KEEL_COLD static int
batch_failed(long rc, const keel_br_range *r, size_t asked)
{
    if (rc >= 0)
        return keel__fail(KEEL_EIO, "a read of %zu ranges from offset %llu "
                          "answered for %ld of them\nhelp: the storage under "
                          "the index returned less than it was asked for; "
                          "check it, then search again", asked,
                          (unsigned long long)r->off, rc);
    return keel__fail(KEEL_EIO, "reading %llu bytes at offset %llu of the "
                      "index failed: %s\nhelp: check the disk or storage the "
                      "index is on, then search again",
                      (unsigned long long)r->len, (unsigned long long)r->off,
                      strerror((int)-rc));
}

int
keel__br_read(const keel_br_source *src, keel_br_allowance *a,
              const keel_br_range *r, size_t n, const void **out,
              keel_br_scratch *s)
{
    if (n == 0)
        return KEEL_OK;
    if (n > UINT32_MAX || scratch_grow(s, n))
        return KEEL_ENOMEM;
    if (!a)
        a = &keel__br_shared;
    size_t m = dedupe(r, n, s);
    size_t next = merge(m, s);
    uint32_t want = (uint32_t)KEEL_MIN(next, (size_t)keel__br_max_runs()) - 1;
    uint32_t granted = keel__br_take(a, want);
    uint32_t runs = keel__br_runs(next, granted);
    int rc = KEEL_OK;
    for (uint32_t i = 0; i < runs && rc == KEEL_OK; i++) {
        size_t e0 = keel__br_run_start(next, runs, i);
        size_t e1 = keel__br_run_start(next, runs, i + 1);
        size_t d0 = s->order[e0], d1 = e1 < next ? s->order[e1] : m;
        keel_br_run run = {s->dist + d0, d1 - d0, s->ext + e0, e1 - e0};
        long got = src->read(src->self, &run, s->dout + d0);
        if (got != (long)run.n)
            rc = batch_failed(got, run.r, run.n);
    }
    if (src->wait) {
        int w = src->wait(src->self);
        if (w < 0 && rc == KEEL_OK)
            rc = batch_failed(w, s->dist, m);
    }
    keel__br_give(a, runs ? runs - 1 : 0);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        out[i] = s->dout[s->which[i]];
    return KEEL_OK;
}

/* --- the switch ----------------------------------------------------------- */

static int br_on = -1; /* atomic: -1 until read from the environment */

int
keel__br_enabled(void)
{
    int on = __atomic_load_n(&br_on, __ATOMIC_RELAXED);
    if (KEEL_LIKELY(on >= 0))
        return on;
    const char *e = getenv("KEEL_BATCH_READS");
    on = e && *e ? atoi(e) != 0 : KEEL_BATCH_READS_DEFAULT;
    __atomic_store_n(&br_on, on, __ATOMIC_RELAXED);
    return on;
}

void
keel__br_set_enabled(int on)
{
    __atomic_store_n(&br_on, on < 0 ? 0 : on > 2 ? 2 : on, __ATOMIC_RELAXED);
}

/* --- the overlap cap (diagnostics) ---------------------------------------- */

static uint32_t br_max_runs; /* atomic: 0 until read from the environment */

/* The whole number in [lo, hi] that environment variable name holds, or
** dflt: "4" counts; "17" (out of range), "4x", "-1", " 4", "+4" and ""
** leave the default (as an empty KEEL_BATCH_READS does). */
static uint32_t
env_whole(const char *name, uint32_t lo, uint32_t hi, uint32_t dflt)
{
    const char *e = getenv(name);
    if (!e || e[0] < '0' || e[0] > '9') /* strtoul takes spaces and signs */
        return dflt;
    char *end;
    unsigned long v = strtoul(e, &end, 10);
    return *end == '\0' && v >= lo && v <= hi ? (uint32_t)v : dflt;
}

uint32_t
keel__br_max_runs(void)
{
    uint32_t n = __atomic_load_n(&br_max_runs, __ATOMIC_RELAXED);
    if (KEEL_LIKELY(n))
        return n;
    n = env_whole("KEEL_BATCH_READS_MAX_RUNS", 1, KEEL_BR_MAX_RUNS,
                  KEEL_BR_MAX_RUNS);
    __atomic_store_n(&br_max_runs, n, __ATOMIC_RELAXED);
    return n;
}

void
keel__br_set_max_runs(uint32_t n)
{
    __atomic_store_n(&br_max_runs, KEEL_MIN(n, KEEL_BR_MAX_RUNS),
                     __ATOMIC_RELAXED);
}

/* --- the look-ahead of a remote walk ------------------------------------- */

static uint32_t br_ahead; /* atomic: the look-ahead + 1; 0 until read */

uint32_t
keel__br_ahead(void)
{
    uint32_t n = __atomic_load_n(&br_ahead, __ATOMIC_RELAXED);
    if (KEEL_LIKELY(n))
        return n - 1;
    n = env_whole("KEEL_BATCH_READS_AHEAD", 0, KEEL_BR_AHEAD_MAX,
                  KEEL_BR_AHEAD) + 1;
    __atomic_store_n(&br_ahead, n, __ATOMIC_RELAXED);
    return n - 1;
}

void
keel__br_set_ahead(int n)
{
    uint32_t v = n < 0 ? 0 : KEEL_MIN((uint32_t)n, KEEL_BR_AHEAD_MAX) + 1;
    __atomic_store_n(&br_ahead, v, __ATOMIC_RELAXED);
}

/* --- the beam of a cold walk ---------------------------------------------- */

static uint32_t br_beam; /* atomic: 0 until read from the environment */

uint32_t
keel__br_beam(void)
{
    uint32_t n = __atomic_load_n(&br_beam, __ATOMIC_RELAXED);
    if (KEEL_LIKELY(n))
        return n;
    n = env_whole("KEEL_BATCH_READS_BEAM", 1, KEEL_BR_BEAM_MAX, KEEL_BR_BEAM);
    __atomic_store_n(&br_beam, n, __ATOMIC_RELAXED);
    return n;
}

void
keel__br_set_beam(uint32_t n)
{
    __atomic_store_n(&br_beam, KEEL_MIN(n, KEEL_BR_BEAM_MAX),
                     __ATOMIC_RELAXED);
}
