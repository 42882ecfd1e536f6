/* bring.c -- the announced path of the page cache (cache.h): a search, a
** get or warm says which granules it is about to read, and the missing ones
** are claimed, fetched together with the batch-read policy (io/), and
** installed before the caller reads them. The half of the granule state
** machine that cache.c's fault thread does not own: claims (KEEL_G_FETCH),
** waits on other searches' claims, and installs of announced pages.
**
** Invariants: cache.c's (1) and (3) (states change under mu or by atomic
** bit operations; one search fetches a granule at a time), remote.c's (2)
** (GETs in flight per batch).
*/
#include "cache/cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* The source reads nothing in read(): it notes each run's granules, and
** wait() fetches every run of the batch at once, as many GETs in flight as
** the batch was granted runs (invariant 2), then installs them. */
typedef struct rsrc {
    keel_cache *c;
    keel_s3 *s3;
    keel_stop *stop;          /* the search's; NULL: none */
    uint64_t *g;
    size_t ng, cap;
    uint32_t runs;
    int warm;                 /* for keel__cache_bring_addr */
    int failed;
    char msg[1024];
} rsrc;

static long
rsrc_read(void *self, const keel_br_run *run, const void **out)
{
    rsrc *s = self;
    for (size_t i = 0; i < run->n; i++) {
        const keel_br_range *r = &run->r[i];
        uint64_t end = r->off + r->len;
        for (uint64_t g = r->off / KEEL_CACHE_GRANULE;
             g * KEEL_CACHE_GRANULE < end; g++) {
            if (s->ng && s->g[s->ng - 1] >= g)
                continue; /* ranges are sorted: a granule met already */
            if (keel__grow(&s->g, &s->cap, s->ng, sizeof *s->g))
                return -ENOMEM;
            s->g[s->ng++] = g;
        }
        out[i] = r->addr ? r->addr : (const void *)run->r;
    }
    s->runs++;
    return (long)run->n;
}

static int
rsrc_wait(void *self)
{
    rsrc *s = self;
    if (!s->ng)
        return 0;
    uint8_t *bufs = keel__malloc(s->ng * KEEL_CACHE_GRANULE);
    keel_cache_wq *later = keel__malloc(s->ng * sizeof *later);
    size_t nlater = 0;
    int rc = bufs && later ? keel__cache_fetch(s->c, &s->c->man, s->s3, s->g,
                                               s->ng, bufs, s->runs, s->stop,
                                               s->warm, later, &nlater)
                           : KEEL_ENOMEM;
    for (size_t i = 0; i < s->ng && rc == KEEL_OK; i++)
        rc = keel__cache_install(s->c, s->g[i], bufs + i * KEEL_CACHE_GRANULE);
    /* Cache invariant 6: to disk once in, by the writer. */
    if (rc == KEEL_OK)
        keel__cache_write_later(s->c, later, nlater);
    keel__free(later);
    keel__free(bufs);
    s->ng = 0;
    s->runs = 0;
    if (rc == KEEL_OK)
        return 0;
    s->failed = rc;
    snprintf(s->msg, sizeof s->msg, "%s", keel_errmsg());
    return rc == KEEL_ENOMEM ? -ENOMEM : rc == KEEL_ECANCELED ? -ECANCELED
                                                             : -EIO;
}

/* Appends x to the array *a (n entries, room for *cap; *a starts as
** local, of *cap entries, and is replaced by a heap copy when full). */
static int
push_u64(uint64_t **a, size_t *n, size_t *cap, const uint64_t *local,
         uint64_t x)
{
    if (*n == *cap) {
        uint64_t *p = keel__malloc(2 * *cap * sizeof *p);
        if (!p)
            return KEEL_ENOMEM;
        memcpy(p, *a, *n * sizeof *p);
        if (*a != local)
            keel__free(*a);
        *a = p;
        *cap *= 2;
    }
    (*a)[(*n)++] = x;
    return KEEL_OK;
}

/* Gives up the claims on g[0..n) (cache.c invariant 3) and wakes the
** searches waiting for them. */
static void
release_claims(keel_cache *c, const uint64_t *g, size_t n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n; i++)
        __atomic_fetch_and(&c->state[g[i]], (uint8_t)~KEEL_G_FETCH,
                           __ATOMIC_RELEASE);
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->fetched);
    pthread_mutex_unlock(&c->mu);
}

/* Waits until none of g[0..n) is claimed by another search's fetch, in
** slices that poll stop; KEEL_OK or KEEL_ECANCELED. A granule that is not
** in when its claim ends (that fetch failed, or it was evicted since) is
** left to fault in. */
static int
wait_claims(keel_cache *c, const uint64_t *g, size_t n, keel_stop *stop)
{
    int rc = KEEL_OK;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n && rc == KEEL_OK;) {
        uint8_t st = KEEL_LOAD_ACQUIRE(&c->state[g[i]]);
        if ((st & KEEL_G_IN) || !(st & KEEL_G_FETCH)) {
            i++;
            continue;
        }
        uint32_t ms = KEEL_MIN(keel__stop_slice_ms(stop), 100u);
        keel__cond_wait_ms(&c->fetched, &c->mu, ms);
        /* The callback runs without the cache's lock. */
        pthread_mutex_unlock(&c->mu);
        if (keel__stop_poll(stop))
            rc = keel__fail(KEEL_ECANCELED, "cancelled while waiting for "
                            "pages of %s that another search fetches\nhelp: "
                            "the cancel callback (keel_set_cancel) asked to "
                            "stop", c->url);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* keel__cache_bring, its GETs counted as warm's too with warm. */
static int
bring(keel_cache *c, const keel_br_range *r, size_t n, keel_br_scratch *sc,
      keel_stop *stop, int warm)
{
    /* Only the granules not in memory go to the policy, and of those only
     * the ones no other search is fetching already (it claimed them): this
     * search waits for those instead of asking for them again. */
    uint64_t local_mine[128], local_theirs[64];
    uint64_t *mine = local_mine, *theirs = local_theirs;
    size_t nm = 0, mine_cap = 128, nt = 0, theirs_cap = 64;
    int rc = KEEL_OK;
    for (size_t i = 0; i < n && rc == KEEL_OK; i++) {
        if (!r[i].len)
            continue;
        uint64_t last = (r[i].off + r[i].len - 1) / KEEL_CACHE_GRANULE;
        for (uint64_t g = r[i].off / KEEL_CACHE_GRANULE;
             g <= last && g < c->ngran; g++) {
            uint8_t st = KEEL_LOAD_ACQUIRE(&c->state[g]);
            if (st & KEEL_G_IN) {
                if (!(st & KEEL_G_REF))
                    __atomic_fetch_or(&c->state[g], KEEL_G_REF,
                                      __ATOMIC_RELAXED);
                continue;
            }
            if (nm && mine[nm - 1] == g)
                continue; /* ranges of one granule in a row */
            st = __atomic_fetch_or(&c->state[g], KEEL_G_FETCH,
                                   __ATOMIC_ACQ_REL);
            if (st & KEEL_G_FETCH) {
                /* Claimed by another search (or by this one, earlier in
                 * the list: it is already in mine). */
                int own = 0;
                for (size_t j = 0; j < nm && !own; j++)
                    own = mine[j] == g;
                if (!own && !(st & KEEL_G_IN))
                    rc = push_u64(&theirs, &nt, &theirs_cap, local_theirs, g);
                continue;
            }
            if (st & KEEL_G_IN) { /* installed meanwhile */
                release_claims(c, &g, 1);
                continue;
            }
            if ((rc = push_u64(&mine, &nm, &mine_cap, local_mine, g))) {
                release_claims(c, &g, 1);
                break;
            }
        }
    }
    if (rc == KEEL_OK && nm) {
        keel_br_range *want = keel__malloc(nm * sizeof *want);
        const void **out = keel__malloc(nm * sizeof *out);
        rsrc s = {.c = c, .s3 = keel__remote_client(c), .stop = stop,
                  .warm = warm};
        if (!want || !out || !s.s3) {
            rc = KEEL_ENOMEM;
        } else {
            for (size_t i = 0; i < nm; i++)
                want[i] = (keel_br_range){mine[i] * KEEL_CACHE_GRANULE,
                                          KEEL_CACHE_GRANULE, NULL};
            keel_br_source src = {rsrc_read, rsrc_wait, &s};
            rc = keel__br_read(&src, NULL, want, nm, out, sc);
            /* The fetch's own message (the object, the status, the
             * store's code), whatever failed: a 404 of a pack is no more
             * a local disk's failure than a 503 is. Out of memory and a
             * cancel keep their codes; the rest is a failed read. */
            if (rc && s.failed)
                rc = keel__fail(s.failed == KEEL_ENOMEM ||
                                        s.failed == KEEL_ECANCELED
                                    ? s.failed
                                    : KEEL_EIO,
                                "%s", s.msg);
        }
        keel__remote_release(c, s.s3);
        keel__free(s.g);
        keel__free(out);
        keel__free(want);
    }
    release_claims(c, mine, nm);
    if (rc == KEEL_OK && nt)
        rc = wait_claims(c, theirs, nt, stop);
    if (rc == KEEL_OK && nt && !keel__cache_faults(c)) {
        /* Nothing would fault them in (cache.h invariant 7): the granules
         * whose other fetch failed, this search asks for itself. */
        keel_br_range again[64];
        size_t na = 0;
        for (size_t i = 0; i < nt && rc == KEEL_OK; i++) {
            if (KEEL_LOAD_ACQUIRE(&c->state[theirs[i]]) & KEEL_G_IN)
                continue;
            again[na++] = (keel_br_range){theirs[i] * KEEL_CACHE_GRANULE,
                                          KEEL_CACHE_GRANULE, NULL};
            if (na == sizeof again / sizeof again[0] || i + 1 == nt) {
                rc = bring(c, again, na, sc, stop, warm);
                na = 0;
            }
        }
        if (rc == KEEL_OK && na)
            rc = bring(c, again, na, sc, stop, warm);
    }
    if (mine != local_mine)
        keel__free(mine);
    if (theirs != local_theirs)
        keel__free(theirs);
    return rc;
}

int
keel__cache_bring(keel_cache *c, const keel_br_range *r, size_t n,
                  keel_br_scratch *sc, keel_stop *stop)
{
    return bring(c, r, n, sc, stop, 0);
}

int
keel__cache_bring_addr(keel_cache *c, const keel_br_range *r, size_t n,
                       keel_br_scratch *s, keel_stop *stop)
{
    keel_br_range local[64], *o = local;
    if (n > sizeof local / sizeof local[0] &&
        !(o = keel__malloc(n * sizeof *o)))
        return KEEL_ENOMEM;
    size_t m = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t j = 0; j < n; j++) {
        uintptr_t a = (uintptr_t)r[j].addr;
        for (size_t i = 0; i < c->nregions; i++) {
            const keel_cache_region *g = &c->regions[i];
            if (a >= g->addr && a - g->addr < g->len) {
                o[m].off = g->off + (a - g->addr);
                o[m].len = KEEL_MIN(r[j].len, g->len - (a - g->addr));
                o[m++].addr = NULL;
                break;
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    int rc = m ? bring(c, o, m, s, stop, 1) : KEEL_OK;
    if (o != local)
        keel__free(o);
    return rc;
}
