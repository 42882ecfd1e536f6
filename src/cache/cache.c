/* cache.c -- the memfd image of a published index, its fault thread and its
** memory bound (cache.h).
**
** Invariants (beyond cache.h's):
**   (1) A granule's state changes, and its bytes are written or punched,
**       only under mu: an install never interleaves with an eviction of
**       the same granule, so a state of KEEL_G_IN always means its bytes
**       are in the memfd, and the fault thread, finding a granule IN, only
**       has to wake the faulting thread.
**   (2) The fault thread answers every fault it reads with a wake, after
**       the granule is in (fetched, or zeros and poisoned): no thread waits
**       on a fault for longer than one fetch, and none forever.
**   (3) A granule not in memory is fetched on the announced path by one
**       search at a time: the search that sets its KEEL_G_FETCH bit (the
**       claim) fetches it, and gives the claim up (clears the bit, then
**       broadcasts `fetched`) once its batch ended, installed or not, before
**       the call returns, cancelled or not. A search that finds a granule
**       claimed waits for the claim to end (in slices that poll its stop)
**       instead of asking for it again, and a granule still not in then is
**       left to fault. Waits never nest: a search gives up its own claims
**       before it waits for others'. (The fault thread ignores claims: at
**       worst a page is fetched twice, the same bytes.)
*/
#include "cache/cache.h"
#include "os/os.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* --- granules ----------------------------------------------------------- */

/* Whether granule g holds data in the pinned version (under mu). */
static inline int
has_data(const keel_cache *c, uint64_t g)
{
    return g < c->man.npages && c->man.pages[g].pack != KEEL_MAN_ZERO_PAGE;
}

/* Counts the granules with data that are not in (under mu). */
static void
recount_missing(keel_cache *c)
{
    uint64_t m = 0;
    for (uint64_t g = 0; g < c->ngran; g++)
        m += has_data(c, g) && !(KEEL_LOAD_RELAXED(&c->state[g]) & KEEL_G_IN);
    KEEL_STORE_RELAXED(&c->missing, m);
}

/* Granule g went in (+1: out) under mu: keeps missing counted. */
static inline void
note_missing(keel_cache *c, uint64_t g, int out)
{
    if (!has_data(c, g))
        return;
    if (out)
        __atomic_add_fetch(&c->missing, 1, __ATOMIC_RELAXED);
    else
        __atomic_sub_fetch(&c->missing, 1, __ATOMIC_RELAXED);
}

/* Punches cold granules until at most mem_limit are in (under mu): a
** clock over the granules, skipping the pinned ones; a granule used since
** the hand last passed gets another round. */
static void
evict_locked(keel_cache *c)
{
    uint64_t n = c->ngran, passes = 0;
    while (KEEL_LOAD_RELAXED(&c->resident) > c->mem_limit && passes < 2 * n) {
        uint64_t g = c->hand;
        c->hand = g + 1 < n ? g + 1 : KEEL_CACHE_PINNED;
        passes++;
        if (g < KEEL_CACHE_PINNED)
            continue;
        uint8_t s = KEEL_LOAD_RELAXED(&c->state[g]);
        if (!(s & KEEL_G_IN))
            continue;
        if (s & KEEL_G_REF) {
            __atomic_fetch_and(&c->state[g], (uint8_t)~KEEL_G_REF,
                               __ATOMIC_RELAXED);
            continue;
        }
        if (keel__os->punch(c->memfd, g * KEEL_CACHE_GRANULE,
                            KEEL_CACHE_GRANULE) != 0)
            continue; /* stays in; tried again next time */
        __atomic_fetch_and(&c->state[g], (uint8_t)~KEEL_G_IN, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&c->resident, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->n.evictions, 1, __ATOMIC_RELAXED);
        note_missing(c, g, 1);
    }
}

static int
install_locked(keel_cache *c, uint64_t g, const uint8_t *buf, uint8_t flags)
{
    if (g >= c->ngran)
        return KEEL_OK;
    if (KEEL_LOAD_RELAXED(&c->state[g]) & KEEL_G_IN) {
        __atomic_fetch_or(&c->state[g], KEEL_G_REF, __ATOMIC_RELAXED);
        return KEEL_OK; /* the same version's bytes are there */
    }
    ssize_t w = keel__os->pwrite(c->memfd, buf, KEEL_CACHE_GRANULE,
                                 g * KEEL_CACHE_GRANULE);
    if (w != (ssize_t)KEEL_CACHE_GRANULE)
        return keel__fail(KEEL_ENOMEM, "no memory for page %" PRIu64 " of %s "
                          "(%s)\nhelp: free memory, or lower "
                          "KEEL_MEMORY_CACHE_BYTES", g, c->url,
                          strerror(w < 0 ? (int)-w : ENOSPC));
    __atomic_fetch_or(&c->state[g], (uint8_t)(KEEL_G_IN | KEEL_G_REF | flags),
                      __ATOMIC_RELEASE);
    __atomic_add_fetch(&c->resident, 1, __ATOMIC_RELAXED);
    note_missing(c, g, 0);
    if (c->uffd >= 0)
        evict_locked(c); /* else at the end of a call (cache.h invariant 8) */
    return KEEL_OK;
}

int
keel__cache_install(keel_cache *c, uint64_t g, const uint8_t *buf)
{
    pthread_mutex_lock(&c->mu);
    int rc = install_locked(c, g, buf, 0);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int
keel__cache_fetch(keel_cache *c, const keel_manifest *m, keel_s3 *s3,
                  const uint64_t *g, size_t n, uint8_t *bufs,
                  uint32_t inflight, keel_stop *stop, int warm,
                  keel_cache_wq *later, size_t *nlater)
{
    keel_fetch_page local[8], *p = local;
    if (n > sizeof local / sizeof local[0] &&
        !(p = keel__malloc(n * sizeof *p)))
        return KEEL_ENOMEM;
    /* The version's entries (cache.h invariant 3 keeps the pinned one
     * steady while a caller reads; copied under mu all the same). */
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n; i++) {
        p[i].g = g[i];
        p[i].zero = g[i] >= m->npages ||
                    m->pages[g[i]].pack == KEEL_MAN_ZERO_PAGE;
        if (!p[i].zero) {
            p[i].pg = m->pages[g[i]];
            p[i].pk = m->packs[p[i].pg.pack];
        }
    }
    pthread_mutex_unlock(&c->mu);
    keel_fetcher f = {c->url, c->bucket, c->prefix, c->disk, &c->n, warm};
    int rc = keel__remote_fetch(&f, s3, p, n, bufs, inflight, stop, later,
                                nlater);
    if (p != local)
        keel__free(p);
    return rc;
}

/* --- failures ------------------------------------------------------------- */

/* A fault whose fetch failed: zeros let the load finish; the granule is
** poisoned and the generation moves, so the call that loaded fails. */
static void
poison(keel_cache *c, uint64_t g, const uint8_t *zero, const char *msg)
{
    pthread_mutex_lock(&c->mu);
    snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
    if (c->npoison == c->poison_cap) {
        size_t cap = c->poison_cap ? 2 * c->poison_cap : 16;
        uint64_t *p = keel__realloc(c->poison, cap * sizeof *p);
        if (p) {
            c->poison = p;
            c->poison_cap = cap;
        }
    }
    if (c->npoison < c->poison_cap) {
        c->poison[c->npoison] = g;
        KEEL_STORE_RELEASE(&c->npoison, c->npoison + 1);
        install_locked(c, g, zero, KEEL_G_POISON);
    } else {
        /* No room to remember it: zeros that nothing would punch again.
         * Leave the hole; the load faults again (a retry). */
    }
    __atomic_add_fetch(&c->gen, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&c->mu);
}

/* Whether granule g should be a hole now: not in, and not a zero page
** (whose hole reads as the right bytes). Under mu. */
static inline int
hole(const keel_cache *c, uint64_t g)
{
    return !(KEEL_LOAD_RELAXED(&c->state[g]) & KEEL_G_IN) && has_data(c, g);
}

/* KEEL_CACHE_POISON=1: whether a call read a granule it never brought in
** (cache.h): under mu, any page with data in a run of granules that are
** not in (a read through a mapping of a hole filled it). The first such
** granule fails the call; every one found is punched out again. */
static int
check_holes(keel_cache *c)
{
    const uint64_t G = KEEL_CACHE_GRANULE;
    uint64_t bad = UINT64_MAX, found = 0;
    pthread_mutex_lock(&c->mu);
    for (uint64_t g = 0; g < c->ngran;) {
        if (!hole(c, g)) {
            g++;
            continue;
        }
        uint64_t e = g + 1, d;
        while (e < c->ngran && hole(c, e))
            e++;
        while (keel__os->seek_data(c->memfd, g * G, &d) == 0 && d < e * G) {
            g = d / G;
            if (bad == UINT64_MAX)
                bad = g;
            found++;
            keel__os->punch(c->memfd, g * G, G);
            g++;
        }
        g = e;
    }
    pthread_mutex_unlock(&c->mu);
    if (bad == UINT64_MAX)
        return KEEL_OK;
    return keel__fail(KEEL_EIO, "a read of %s touched page %" PRIu64 " (and "
                      "%" PRIu64 " more) before it was brought in: it read "
                      "zeros, not the index\nhelp: a bug in keel's page "
                      "cache, found by KEEL_CACHE_POISON=1; report it with "
                      "the call that failed", c->url, bad, found - 1);
}

/* Without a userfaultfd: punches granules over the bound while no call
** reads through the cache (cache.h invariant 8). Never waits. */
static void
evict_idle(keel_cache *c)
{
    if (KEEL_LOAD_RELAXED(&c->resident) <= c->mem_limit ||
        pthread_rwlock_trywrlock(&c->gate) != 0)
        return;
    pthread_mutex_lock(&c->mu);
    evict_locked(c);
    pthread_mutex_unlock(&c->mu);
    pthread_rwlock_unlock(&c->gate);
}

/* Calls of this thread that hold a cache's gate now (any cache's). */
static _Thread_local unsigned gate_held;

/* The longest a call that begins over the bound waits for the running
** calls to end so that it may evict (cache.h invariant 8): past it, the
** call goes on over the bound. A long call (a cold search of a slow store,
** a keel_check of a whole index) then holds no other call up for longer. */
#define EVICT_WAIT_MS 500u

/* Takes the gate exclusively for eviction, waiting for the calls that
** hold it to end, at most EVICT_WAIT_MS, in slices that poll stop (NULL:
** none): 0 once taken, nonzero when stop said stop or the time ran out
** first (not taken). */
static int
gate_take(keel_cache *c, keel_stop *stop)
{
    double give_up = keel__now_s() + EVICT_WAIT_MS / 1000.0;
    for (;;) {
        double left = give_up - keel__now_s();
        if (left <= 0)
            return 1;
        uint32_t ms = KEEL_MIN(keel__stop_slice_ms(stop),
                               (uint32_t)(left * 1000.0) + 1);
        if (keel__wrlock_ms(&c->gate, ms) == 0)
            return 0;
        if (keel__stop_poll(stop))
            return 1;
    }
}

/* Without a userfaultfd, at the start of a call over the bound: the first
** such call holds new calls off (draining), waits for the running ones to
** end and evicts; the others wait for it. Calls that never all end at once
** then cannot put eviction off for ever (cache.h invariant 8). A call
** whose stop says stop meanwhile, or that has waited EVICT_WAIT_MS, waits
** no more (the drain it ran is
** abandoned, its waiters go on): its own polls then end it, as they end a
** call that waits for a GET. */
static void
evict_drain(keel_cache *c, keel_stop *stop)
{
    pthread_mutex_lock(&c->mu);
    if (c->draining) {
        uint32_t ms = keel__stop_slice_ms(stop);
        while (c->draining) {
            if (ms == UINT32_MAX) {
                pthread_cond_wait(&c->drained, &c->mu);
                continue;
            }
            keel__cond_wait_ms(&c->drained, &c->mu, ms);
            pthread_mutex_unlock(&c->mu);
            int stopped = keel__stop_poll(stop);
            ms = keel__stop_slice_ms(stop);
            pthread_mutex_lock(&c->mu);
            if (stopped)
                break;
        }
        pthread_mutex_unlock(&c->mu);
        return;
    }
    c->draining = 1;
    pthread_mutex_unlock(&c->mu);
    int gave_up = gate_take(c, stop);
    pthread_mutex_lock(&c->mu);
    if (!gave_up)
        evict_locked(c);
    c->draining = 0;
    pthread_cond_broadcast(&c->drained);
    pthread_mutex_unlock(&c->mu);
    if (!gave_up)
        pthread_rwlock_unlock(&c->gate);
}

uint64_t
keel__cache_begin(keel_cache *c, keel_stop *stop)
{
    if (c->uffd < 0) {
        if (KEEL_LOAD_RELAXED(&c->resident) > c->mem_limit && !gate_held)
            evict_drain(c, stop);
        else
            evict_idle(c);
        pthread_rwlock_rdlock(&c->gate);
        gate_held++;
    }
    if (KEEL_LOAD_ACQUIRE(&c->npoison)) {
        pthread_mutex_lock(&c->mu);
        for (size_t i = 0; i < c->npoison; i++) {
            uint64_t g = c->poison[i];
            if (g >= c->ngran || !(c->state[g] & KEEL_G_IN))
                continue;
            keel__os->punch(c->memfd, g * KEEL_CACHE_GRANULE,
                            KEEL_CACHE_GRANULE);
            KEEL_STORE_RELEASE(&c->state[g], 0);
            __atomic_sub_fetch(&c->resident, 1, __ATOMIC_RELAXED);
            note_missing(c, g, 1);
        }
        KEEL_STORE_RELEASE(&c->npoison, 0);
        __atomic_add_fetch(&c->gen, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_unlock(&c->mu);
    }
    return KEEL_LOAD_ACQUIRE(&c->gen);
}

int
keel__cache_end(keel_cache *c, uint64_t gen, int rc)
{
    if (c->uffd < 0) {
        if (c->check_holes) {
            int hrc = check_holes(c);
            if (hrc)
                rc = hrc;
        }
        pthread_rwlock_unlock(&c->gate);
        gate_held--;
        evict_idle(c);
    }
    if (KEEL_LIKELY(KEEL_LOAD_ACQUIRE(&c->gen) == gen))
        return rc;
    char msg[1024];
    pthread_mutex_lock(&c->mu);
    snprintf(msg, sizeof msg, "%s", c->fail_msg);
    pthread_mutex_unlock(&c->mu);
    return keel__fail(KEEL_EIO, "%s", msg);
}

/* --- the fault thread ---------------------------------------------------- */

/* File offset of addr in the memfd, or UINT64_MAX if no mapping holds it. */
static uint64_t
offset_of(keel_cache *c, uintptr_t addr)
{
    uint64_t off = UINT64_MAX;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nregions; i++) {
        const keel_cache_region *r = &c->regions[i];
        if (addr >= r->addr && addr - r->addr < r->len) {
            off = r->off + (addr - r->addr);
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return off;
}

static void *
fault_main(void *arg)
{
    keel_cache *c = arg;
    uint8_t *buf = keel__malloc(KEEL_CACHE_GRANULE);
    uint8_t *zero = keel__calloc(1, KEEL_CACHE_GRANULE);
    size_t page = keel__page_size();
    while (!KEEL_LOAD_ACQUIRE(&c->stop)) {
        if (keel__os->wait_readable(c->uffd, 50) <= 0)
            continue;
        uintptr_t addr;
        while (keel__os->uffd_next(c->uffd, &addr) == 1) {
            uint64_t off = offset_of(c, addr);
            uint64_t g = off / KEEL_CACHE_GRANULE;
            if (off != UINT64_MAX && g < c->ngran &&
                !(KEEL_LOAD_ACQUIRE(&c->state[g]) & KEEL_G_IN)) {
                int rc = buf && zero ? keel__cache_fetch(c, &c->man,
                                                         c->fault_s3, &g, 1,
                                                         buf, 1, NULL, 0,
                                                         NULL, NULL)
                                     : KEEL_ENOMEM;
                if (rc == KEEL_OK)
                    rc = keel__cache_install(c, g, buf);
                if (rc == KEEL_OK)
                    __atomic_add_fetch(&c->n.faults, 1, __ATOMIC_RELAXED);
                else if (zero)
                    poison(c, g, zero, keel_errmsg());
                keel__clear_error();
            }
            uintptr_t p = addr & ~(uintptr_t)(page - 1);
            keel__os->uffd_wake(c->uffd, (void *)p, page);
        }
    }
    keel__free(buf);
    keel__free(zero);
    return NULL;
}

/* --- the disk writer (cache.h invariant 6) -------------------------------- */

/* Writes page w to the disk cache if the memfd still holds it: read back,
** checked against its hash (a punched or replaced granule reads as other
** bytes). buf: KEEL_CACHE_GRANULE bytes of scratch. */
static void
write_back(keel_cache *c, const keel_cache_wq *w, uint8_t *buf)
{
    /* Under mu: the state array may be swapped by a resize (a switch), and
     * the granule cannot be punched while it is read. */
    pthread_mutex_lock(&c->mu);
    int in = w->g < c->ngran && (c->state[w->g] & KEEL_G_IN) &&
             keel__os->pread(c->memfd, buf, KEEL_CACHE_GRANULE,
                             w->g * KEEL_CACHE_GRANULE) ==
                 (ssize_t)KEEL_CACHE_GRANULE;
    pthread_mutex_unlock(&c->mu);
    if (!in)
        return;
    XXH128_hash_t h = XXH3_128bits(buf, KEEL_CACHE_GRANULE);
    if (h.high64 == w->hash_hi && h.low64 == w->hash_lo)
        keel__disk_put(c->disk, w->hash_hi, w->hash_lo, buf);
}

/* Waits while GETs of pages are on the wire (any cache of the process),
** up to WQ_DEFER_MAX_S at a time, polling every WQ_DEFER_POLL_NS; not once
** close asked the writer to stop. The copy on disk is for a later process:
** the fetches this one waits for come first. (GloVe-340k warmed through
** a cache directory, 20 ms per request, 2 cores shared with the store, 8
** rounds: 100th result 946 ms [844-1057] writing beside the fetches, 828
** ms [658-1003] waiting, 702 ms [616-901] with no cache directory;
** doc/object_storage_bench.md.) */
#define WQ_DEFER_MAX_S 2.0
#define WQ_DEFER_POLL_NS 2000000L

static void
defer_to_fetches(keel_cache *c)
{
    double t0 = 0;
    while (keel__cache_inflight_now() > 0 &&
           !__atomic_load_n(&c->wq_stop, __ATOMIC_ACQUIRE)) {
        double now = keel__now_s();
        if (t0 == 0)
            t0 = now;
        else if (now - t0 >= WQ_DEFER_MAX_S)
            return;
        struct timespec ts = {0, WQ_DEFER_POLL_NS};
        nanosleep(&ts, NULL);
    }
}

static void *
writer_main(void *arg)
{
    keel_cache *c = arg;
    uint8_t *buf = keel__malloc(KEEL_CACHE_GRANULE);
    pthread_mutex_lock(&c->wq_lock);
    for (;;) {
        while (!c->wq_head && !c->wq_stop)
            pthread_cond_wait(&c->wq_cond, &c->wq_lock);
        keel_cache_wq *w = c->wq_head;
        if (!w)
            break; /* stopped, and nothing waits */
        c->wq_head = w->next;
        if (!c->wq_head)
            c->wq_tail = NULL;
        c->wq_n--;
        pthread_mutex_unlock(&c->wq_lock);
        defer_to_fetches(c);
        if (buf)
            write_back(c, w, buf);
        keel__free(w);
        pthread_mutex_lock(&c->wq_lock);
    }
    pthread_mutex_unlock(&c->wq_lock);
    keel__free(buf);
    return NULL;
}

void
keel__cache_write_later(keel_cache *c, const keel_cache_wq *w, size_t n)
{
    if (!c->disk || n == 0)
        return;
    size_t i = 0;
    if (c->owner == getpid()) {
        pthread_mutex_lock(&c->wq_lock);
        if (!c->wq_started && !c->wq_failed && !c->wq_stop) {
            if (pthread_create(&c->wq_thread, NULL, writer_main, c) == 0)
                c->wq_started = 1;
            else
                c->wq_failed = 1;
        }
        for (; i < n && c->wq_started && !c->wq_stop &&
               c->wq_n < KEEL_CACHE_WQ_MAX; i++) {
            keel_cache_wq *e = keel__malloc(sizeof *e);
            if (!e)
                break;
            *e = w[i];
            e->next = NULL;
            e->buf = NULL;
            if (c->wq_tail)
                c->wq_tail->next = e;
            else
                c->wq_head = e;
            c->wq_tail = e;
            c->wq_n++;
        }
        if (i)
            pthread_cond_signal(&c->wq_cond);
        pthread_mutex_unlock(&c->wq_lock);
    }
    /* No room (or no thread): written here, from the fetcher's copy. */
    for (; i < n; i++)
        keel__disk_put(c->disk, w[i].hash_hi, w[i].hash_lo, w[i].buf);
}

/* Stops the writer after it wrote every waiting page (before the memfd
** and the disk cache go). */
static void
writer_stop(keel_cache *c)
{
    pthread_mutex_lock(&c->wq_lock);
    int started = c->wq_started;
    __atomic_store_n(&c->wq_stop, 1, __ATOMIC_RELEASE); /* read unlocked too */
    pthread_cond_broadcast(&c->wq_cond);
    pthread_mutex_unlock(&c->wq_lock);
    if (started)
        pthread_join(c->wq_thread, NULL);
}

/* --- opening and closing -------------------------------------------------- */

static int
resize(keel_cache *c, uint64_t npages)
{
    if (npages <= c->ngran)
        return KEEL_OK;
    uint64_t bytes = npages * KEEL_CACHE_GRANULE;
    int err = keel__os->truncate(c->memfd, bytes);
    if (err)
        return keel__fail(KEEL_ENOMEM, "cannot size the memory image of %s "
                          "to %" PRIu64 " bytes (%s)\nhelp: free memory",
                          c->url, bytes, strerror(-err));
    /* A new array swapped in under mu: the disk writer reads states under
     * mu while a switch may resize (cache.h invariant 6). */
    uint8_t *s = keel__malloc((size_t)npages);
    if (!s)
        return KEEL_ENOMEM;
    memset(s + c->ngran, 0, (size_t)(npages - c->ngran));
    pthread_mutex_lock(&c->mu);
    uint8_t *old = c->state;
    if (c->ngran)
        memcpy(s, old, (size_t)c->ngran);
    c->state = s;
    c->ngran = npages;
    c->size = bytes;
    pthread_mutex_unlock(&c->mu);
    keel__free(old);
    return KEEL_OK;
}

/* Fetches the header and live pages of version m into buf
** (KEEL_CACHE_PINNED granules); *n gets how many of them m has. stop
** (NULL: none) abandons the GETs: KEEL_ECANCELED. */
static int
fetch_pinned(keel_cache *c, const keel_manifest *m, uint8_t *buf, size_t *n,
             keel_stop *stop)
{
    uint64_t g[KEEL_CACHE_PINNED] = {0, 1, 2};
    *n = (size_t)KEEL_MIN(m->npages, (uint64_t)KEEL_CACHE_PINNED);
    keel_s3 *s3 = keel__remote_client(c);
    int rc = s3 ? keel__cache_fetch(c, m, s3, g, *n, buf, (uint32_t)*n, stop,
                                    0, NULL, NULL)
                : KEEL_ENOMEM;
    keel__remote_release(c, s3);
    return rc;
}

/* Writes n fetched pinned granules into the memfd (under mu): as installs,
** or over the ones in (overwrite: a switch to another version). */
static int
put_pinned_locked(keel_cache *c, const uint8_t *buf, size_t n, int overwrite)
{
    int rc = KEEL_OK;
    for (size_t i = 0; i < n && rc == KEEL_OK; i++) {
        if (overwrite && (c->state[i] & KEEL_G_IN)) {
            ssize_t w = keel__os->pwrite(c->memfd,
                                         buf + i * KEEL_CACHE_GRANULE,
                                         KEEL_CACHE_GRANULE,
                                         i * KEEL_CACHE_GRANULE);
            rc = w == (ssize_t)KEEL_CACHE_GRANULE ? KEEL_OK : KEEL_ENOMEM;
        } else {
            rc = install_locked(c, i, buf + i * KEEL_CACHE_GRANULE, 0);
        }
    }
    return rc;
}

/* Fetches and installs the header and live pages of the pinned version. */
static int
install_pinned(keel_cache *c)
{
    uint8_t *buf = keel__malloc(KEEL_CACHE_PINNED * KEEL_CACHE_GRANULE);
    if (!buf)
        return KEEL_ENOMEM;
    size_t n;
    int rc = fetch_pinned(c, &c->man, buf, &n, NULL);
    if (rc == KEEL_OK) {
        pthread_mutex_lock(&c->mu);
        rc = put_pinned_locked(c, buf, n, 0);
        pthread_mutex_unlock(&c->mu);
    }
    keel__free(buf);
    return rc;
}

/* Whether to ask for a userfaultfd: 0 no (KEEL_USERFAULTFD=0, or
** KEEL_CACHE_POISON=1, which checks the reads of a cache without one), 1
** if the system grants one, 2 must (KEEL_USERFAULTFD=1: a refusal fails
** the open). */
static int
uffd_wanted(keel_cache *c)
{
    const char *p = getenv("KEEL_CACHE_POISON");
    c->check_holes = p && *p && strcmp(p, "0") != 0;
    const char *u = getenv("KEEL_USERFAULTFD");
    if (c->check_holes || (u && strcmp(u, "0") == 0)) {
        snprintf(c->no_uffd, sizeof c->no_uffd, "%s",
                 c->check_holes ? "KEEL_CACHE_POISON is set"
                                : "KEEL_USERFAULTFD=0");
        return 0;
    }
    return u && strcmp(u, "1") == 0 ? 2 : 1;
}

/* Why the system refused a userfaultfd (errno err), as a cause a reader
** can act on. */
static const char *
uffd_refusal(int err)
{
    switch (err) {
    case EPERM:
        return "the system refused the userfaultfd system call (a seccomp "
               "profile, as containers have by default, or "
               "vm.unprivileged_userfaultfd=0 on a kernel without user-mode "
               "userfaultfd)";
    case ENOSYS:
        return "this kernel (or sandbox, such as gVisor) has no userfaultfd";
    case EINVAL:
        return "this kernel's userfaultfd has no user-mode faults (Linux "
               "5.11 or later has them)";
    default:
        return "the system refused a userfaultfd";
    }
}

keel_cache *
keel__cache_alloc(void)
{
    keel_cache *c = keel__calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->memfd = c->uffd = -1;
    c->owner = getpid();
    pthread_rwlock_init(&c->gate, NULL);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->wq_lock, NULL);
    pthread_cond_init(&c->wq_cond, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->fetched, &ca);
    pthread_cond_init(&c->drained, &ca); /* keel__cond_wait_ms's clock */
    pthread_condattr_destroy(&ca);
    return c;
}

int
keel__cache_start(keel_cache *c, uint64_t memory_bytes)
{
    int rc;
    c->n.seq = c->man.seq;
    uint64_t mem = memory_bytes ? memory_bytes : KEEL_CACHE_MEMORY_DFLT;
    c->mem_limit = KEEL_MAX(mem / KEEL_CACHE_GRANULE,
                            (uint64_t)KEEL_CACHE_MIN_GRANULES);
    c->hand = KEEL_CACHE_PINNED;
    if ((c->memfd = keel__os->memfd("keel:s3")) < 0)
        return keel__fail(KEEL_ENOMEM, "cannot make the memory image of %s "
                          "(%s)\nhelp: free memory", c->url,
                          strerror(-c->memfd));
    pthread_mutex_lock(&c->mu);
    KEEL_STORE_RELAXED(&c->missing, UINT64_MAX); /* until counted */
    pthread_mutex_unlock(&c->mu);
    if ((rc = resize(c, c->man.npages)) || (rc = install_pinned(c)))
        return rc;
    pthread_mutex_lock(&c->mu);
    recount_missing(c);
    pthread_mutex_unlock(&c->mu);
    int want = uffd_wanted(c);
    if (want == 0) {
        c->polled_at = keel__now_s();
        return KEEL_OK; /* every read announced (cache.h invariant 7) */
    }
    c->uffd = keel__os->uffd_open();
    if (c->uffd < 0) {
        int err = -c->uffd;
        c->uffd = -1;
        snprintf(c->no_uffd, sizeof c->no_uffd, "%s", uffd_refusal(err));
        if (want == 2)
            return keel__fail(KEEL_EIO, "cannot serve %s by faults: %s (%s)\n"
                              "help: unset KEEL_USERFAULTFD (or set it to 0): "
                              "a reader needs no userfaultfd", c->url,
                              c->no_uffd, strerror(err));
        c->polled_at = keel__now_s();
        return KEEL_OK;
    }
    if ((rc = keel__s3_open(NULL, &c->fault_s3)))
        return rc;
    if (pthread_create(&c->thread, NULL, fault_main, c) != 0)
        return keel__fail(KEEL_ENOMEM, "cannot start the page thread of %s\n"
                          "help: free memory or raise the thread limit",
                          c->url);
    c->thread_started = 1;
    c->polled_at = keel__now_s();
    return KEEL_OK;
}

int
keel__cache_open(const keel_cache_config *cfg, keel_cache **out)
{
    *out = NULL;
    keel_cache *c = keel__cache_alloc();
    if (!c)
        return KEEL_ENOMEM;
    int rc = keel__s3_url_parse(cfg->url, c->bucket, sizeof c->bucket,
                                c->prefix, sizeof c->prefix);
    if (rc)
        goto fail;
    snprintf(c->url, sizeof c->url, "s3://%s%s%s", c->bucket,
             *c->prefix ? "/" : "", c->prefix);
    if (cfg->cache_dir && *cfg->cache_dir &&
        (rc = keel__disk_open(cfg->cache_dir,
                              cfg->cache_bytes ? cfg->cache_bytes
                                               : KEEL_CACHE_DISK_DFLT,
                              &c->disk)))
        goto fail;
    keel_s3 *s3 = keel__remote_client(c);
    if (!s3) {
        rc = KEEL_ENOMEM;
        goto fail;
    }
    rc = keel__remote_newest(c, s3, 0, NULL, &c->man);
    keel__remote_release(c, s3);
    if (rc)
        goto fail;
    if (c->man.seq == 0) {
        rc = keel__fail(KEEL_ENOTFOUND, "no index is published at %s (no "
                        "manifest under %s%smanifest/)\nhelp: check the URL, "
                        "or publish an index there with keel_publish",
                        c->url, c->prefix, *c->prefix ? "/" : "");
        goto fail;
    }
    if ((rc = keel__cache_start(c, cfg->memory_bytes)))
        goto fail;
    *out = c;
    return KEEL_OK;
fail:
    keel__cache_close(c);
    return rc;
}

void
keel__cache_close(keel_cache *c)
{
    if (!c)
        return;
    int own = c->owner == getpid();
    if (own) {
        if (c->thread_started) {
            KEEL_STORE_RELEASE(&c->stop, 1);
            pthread_join(c->thread, NULL);
        }
        writer_stop(c);
        keel__s3_close(c->fault_s3);
        for (size_t i = 0; i < c->nidle; i++)
            keel__s3_close(c->idle[i]);
    }
    if (c->uffd >= 0)
        keel__os->close(c->uffd);
    if (c->memfd >= 0)
        keel__os->close(c->memfd);
    keel__disk_close(c->disk);
    keel__manifest_free(&c->man);
    keel__free(c->idle);
    keel__free(c->state);
    keel__free(c->regions);
    keel__free(c->poison);
    if (own) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->wq_cond);
        pthread_mutex_destroy(&c->wq_lock);
        pthread_cond_destroy(&c->fetched);
        pthread_cond_destroy(&c->drained);
        pthread_rwlock_destroy(&c->gate);
    }
    keel__free(c);
}

/* Forgets the registered mappings that overlap [a, a+len) (c->mu held);
** returns how many are left. */
static size_t
drop_regions(keel_cache *c, uintptr_t a, size_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < c->nregions; i++) {
        keel_cache_region *r = &c->regions[i];
        if (r->addr < a + len && a < r->addr + r->len)
            continue;
        c->regions[k++] = *r;
    }
    c->nregions = k;
    return k;
}

int
keel__cache_register(keel_cache *c, void *addr, size_t len, uint64_t off)
{
    int err = c->uffd >= 0 ? keel__os->uffd_register(c->uffd, addr, len) : 0;
    if (err)
        return keel__fail(KEEL_EIO, "cannot serve a mapping of %s by faults "
                          "(registering it with the userfaultfd: %s)\nhelp: "
                          "set KEEL_USERFAULTFD=0: a reader needs no "
                          "userfaultfd", c->url, strerror(-err));
    keel__os->advise(addr, len, KEEL_ADV_DONTFORK); /* invariant 5 */
    uintptr_t a = (uintptr_t)addr;
    pthread_mutex_lock(&c->mu);
    /* A new mapping replaces whatever the same addresses held. */
    size_t k = drop_regions(c, a, len);
    if (k == c->regions_cap) {
        size_t cap = k ? 2 * k : 32;
        keel_cache_region *r = keel__realloc(c->regions, cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&c->mu);
            return KEEL_ENOMEM;
        }
        c->regions = r;
        c->regions_cap = cap;
    }
    c->regions[c->nregions++] = (keel_cache_region){a, len, off};
    pthread_mutex_unlock(&c->mu);
    return KEEL_OK;
}

void
keel__cache_unregister(keel_cache *c, void *addr, size_t len)
{
    pthread_mutex_lock(&c->mu);
    drop_regions(c, (uintptr_t)addr, len);
    pthread_mutex_unlock(&c->mu);
}

/* --- versions ----------------------------------------------------------- */

int
keel__cache_poll(keel_cache *c, int force, keel_stop *stop,
                 keel_manifest *next)
{
    memset(next, 0, sizeof *next);
    double t = keel__now_s();
    pthread_mutex_lock(&c->mu);
    int due = force || t - c->polled_at >= KEEL_CACHE_POLL_MS / 1000.0;
    if (due)
        c->polled_at = t;
    pthread_mutex_unlock(&c->mu);
    if (!due)
        return KEEL_OK;
    keel_s3 *s3 = keel__remote_client(c);
    if (!s3)
        return KEEL_ENOMEM;
    int rc = keel__remote_newest(c, s3, KEEL_LOAD_RELAXED(&c->n.seq), stop,
                                 next);
    keel__remote_release(c, s3);
    return rc;
}

static int
same_page(const keel_man_page *a, const keel_man_page *b)
{
    return a->hash_hi == b->hash_hi && a->hash_lo == b->hash_lo &&
           (a->pack == KEEL_MAN_ZERO_PAGE) == (b->pack == KEEL_MAN_ZERO_PAGE);
}

/* The next version's header and live pages are fetched before anything
** changes (keel__cache_fetch_next, before the caller holds off readers): a
** switch that fails on the network (a keel_refresh during an outage)
** leaves the pinned version and every granule of it in memory, so the
** handle goes on serving what it served. */
int
keel__cache_fetch_next(keel_cache *c, const keel_manifest *next,
                       keel_stop *stop, uint8_t *pinned, size_t *n)
{
    return fetch_pinned(c, next, pinned, n, stop);
}

int
keel__cache_switch(keel_cache *c, keel_manifest *next, const uint8_t *buf,
                   size_t n, keel_cache_accept ok, void *arg)
{
    if (next->seq <= c->man.seq) {
        keel__manifest_free(next);
        return KEEL_OK;
    }
    int rc = KEEL_OK;
    if (ok)
        rc = ok(next, buf, n, arg);
    if (rc == KEEL_OK)
        rc = resize(c, next->npages);
    if (rc) {
        keel__manifest_free(next);
        return rc;
    }
    keel_manifest old = c->man;
    pthread_mutex_lock(&c->mu);
    c->man = *next;
    memset(next, 0, sizeof *next);
    for (uint64_t g = KEEL_CACHE_PINNED; g < c->ngran; g++) {
        if (g < old.npages && g < c->man.npages &&
            same_page(&old.pages[g], &c->man.pages[g]))
            continue;
        if (!(c->state[g] & KEEL_G_IN))
            continue;
        keel__os->punch(c->memfd, g * KEEL_CACHE_GRANULE, KEEL_CACHE_GRANULE);
        KEEL_STORE_RELEASE(&c->state[g], 0);
        __atomic_sub_fetch(&c->resident, 1, __ATOMIC_RELAXED);
    }
    /* Over installed pages of the memfd's own: no memory to run out of. */
    rc = put_pinned_locked(c, buf, n, 1);
    pthread_mutex_unlock(&c->mu);
    if (rc) {
        /* A write into pages the memfd holds already failed: back to the
         * old manifest (the network can no longer fail a switch here). */
        pthread_mutex_lock(&c->mu);
        keel__manifest_free(&c->man);
        c->man = old;
        recount_missing(c);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    recount_missing(c);
    pthread_mutex_unlock(&c->mu);
    keel__manifest_free(&old);
    KEEL_STORE_RELAXED(&c->n.seq, c->man.seq);
    return KEEL_OK;
}

void
keel__cache_counters(keel_cache *c, keel_cache_counters *out)
{
    out->gets = KEEL_LOAD_RELAXED(&c->n.gets);
    out->get_bytes = KEEL_LOAD_RELAXED(&c->n.get_bytes);
    out->warm_gets = KEEL_LOAD_RELAXED(&c->n.warm_gets);
    out->warm_bytes = KEEL_LOAD_RELAXED(&c->n.warm_bytes);
    out->meta_gets = KEEL_LOAD_RELAXED(&c->n.meta_gets);
    out->rounds = KEEL_LOAD_RELAXED(&c->n.rounds);
    out->disk_hits = KEEL_LOAD_RELAXED(&c->n.disk_hits);
    out->faults = KEEL_LOAD_RELAXED(&c->n.faults);
    out->evictions = KEEL_LOAD_RELAXED(&c->n.evictions);
    out->resident = KEEL_LOAD_RELAXED(&c->resident);
    out->missing = KEEL_LOAD_RELAXED(&c->missing);
    out->failures = KEEL_LOAD_RELAXED(&c->n.failures);
    out->seq = KEEL_LOAD_RELAXED(&c->n.seq);
}
