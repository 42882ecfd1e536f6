/* remote.c -- a published index's bytes from its object store: the newest
** manifest, pages fetched and checked, and the batch-read source that
** brings a search's granules in with the seed's policy (cache.h).
**
** Invariants:
**   (1) A page reaches the memfd or the disk cache only after its bytes
**       hashed to the manifest's xxh3-128 for it: a short, damaged or
**       changed object is an error, never a result and never cached.
**   (2) GETs in flight: a batch of the announced path puts at most
**       1 + (runs the allowance granted) GETs on the wire, the fault
**       thread one; the allowance comes back only after they are all
**       answered (batch_reads.h, invariant (a)). inflight_now counts them
**       process-wide, inflight_max keeps the most (tests).
**   (3) The newest version is the largest N whose manifest exists; the
**       `latest` hint only says where to start looking (doc/objstore.md).
**   (4) Every search for the newest version is bounded: from a version
**       known to exist it walks at most KEEL_VERSION_WALK HEADs forward,
**       then asks the listing of PREFIX/manifest/ (one request); without a
**       usable hint it asks the listing at once. Versions are never
**       probed from 1: after a prune the low numbers are gone, and a walk
**       from 1 would find no version where the newest exists.
*/
#include "cache/cache.h"
#include "os/os.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <xxhash.h>

#define G KEEL_CACHE_GRANULE
#define KEY_MAX 1200

static uint64_t inflight_now, inflight_max; /* atomic, invariant (2) */
/* Set while this thread fetches for warm (keel__cache_bring_addr): its
** GETs are counted apart as well (warm_gets, warm_bytes). */
static _Thread_local int for_warm;

uint64_t
keel__cache_inflight_max(void)
{
    return KEEL_LOAD_RELAXED(&inflight_max);
}

uint64_t
keel__cache_inflight_now(void)
{
    return KEEL_LOAD_RELAXED(&inflight_now);
}

void
keel__cache_inflight_reset(void)
{
    KEEL_STORE_RELAXED(&inflight_max, 0);
}

/* --- clients -------------------------------------------------------------- */

keel_s3 *
keel__remote_client(keel_cache *c)
{
    keel_s3 *s3 = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->nidle)
        s3 = c->idle[--c->nidle];
    pthread_mutex_unlock(&c->mu);
    if (!s3 && keel__s3_open(NULL, &s3) != KEEL_OK)
        return NULL;
    return s3;
}

void
keel__remote_release(keel_cache *c, keel_s3 *s3)
{
    if (!s3)
        return;
    pthread_mutex_lock(&c->mu);
    if (c->nidle == c->idle_cap) {
        size_t cap = c->idle_cap ? 2 * c->idle_cap : 8;
        keel_s3 **p = keel__realloc(c->idle, cap * sizeof *p);
        if (p) {
            c->idle = p;
            c->idle_cap = cap;
        }
    }
    if (c->nidle < c->idle_cap) {
        c->idle[c->nidle++] = s3;
        s3 = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    keel__s3_close(s3);
}

/* --- versions ------------------------------------------------------------- */

static int
wrap(keel_cache *c, int rc)
{
    return keel__wrap(rc, "opening %s: ", c->url);
}

/* Whether manifest/<seq> exists: *exists 1 or 0 and KEEL_OK, or the
** request's error (a missing bucket is one). */
static int
man_head(keel_s3 *s3, const char *bucket, const char *prefix, uint64_t seq,
         int *exists)
{
    char key[KEY_MAX];
    keel_s3_object o;
    keel__man_key(key, sizeof key, prefix, seq);
    int rc = keel__s3_head(s3, bucket, key, &o);
    *exists = rc == KEEL_OK;
    if (rc == KEEL_ENOTFOUND && !strstr(keel_errmsg(), "no bucket")) {
        keel__clear_error();
        return KEEL_OK;
    }
    return rc;
}

int
keel__versions_list(keel_s3 *s3, const char *bucket, const char *prefix,
                    uint64_t *newest)
{
    char dir[KEY_MAX];
    keel_s3_entry *e = NULL;
    size_t n = 0;
    *newest = 0;
    keel__man_dir(dir, sizeof dir, prefix);
    int rc = keel__s3_list(s3, bucket, dir, &e, &n);
    for (size_t i = 0; rc == KEEL_OK && i < n; i++)
        *newest = KEEL_MAX(*newest, keel__man_seq(e[i].key, prefix));
    keel__s3_list_free(e, n);
    if (rc && rc != KEEL_ENOMEM)
        rc = keel__wrap(rc, "listing the versions under %s: ", dir);
    return rc;
}

int
keel__versions_walk(keel_s3 *s3, const char *bucket, const char *prefix,
                    uint64_t from, keel_stop *stop, uint64_t *newest,
                    uint64_t *requests)
{
    uint64_t seq = from;
    for (int k = 0; k < KEEL_VERSION_WALK; k++) {
        if (keel__stop_poll(stop))
            return keel__fail(KEEL_ECANCELED, "cancelled while looking for "
                              "the newest version under %s\nhelp: the cancel "
                              "callback (keel_set_cancel) asked to stop",
                              prefix);
        int exists;
        (*requests)++;
        int rc = man_head(s3, bucket, prefix, seq + 1, &exists);
        if (rc)
            return rc;
        if (!exists) {
            *newest = seq;
            return KEEL_OK;
        }
        seq++;
    }
    /* Further than a walk goes (or a store that says every version
     * exists): the listing says which is the newest. */
    (*requests)++;
    return keel__versions_list(s3, bucket, prefix, newest);
}

/* Reads manifest/<seq> (at most KEEL_MAN_MAX_BYTES) and decodes it into m;
** KEEL_ENOTFOUND (message cleared) when there is no such object. */
static int
manifest_get(keel_cache *c, keel_s3 *s3, uint64_t seq, keel_manifest *m)
{
    char key[KEY_MAX];
    void *data = NULL;
    size_t len = 0;
    keel__man_key(key, sizeof key, c->prefix, seq);
    __atomic_add_fetch(&c->n.meta_gets, 1, __ATOMIC_RELAXED);
    int rc = keel__s3_get(s3, c->bucket, key, NULL, KEEL_MAN_MAX_BYTES, &data,
                          &len, NULL);
    if (rc == KEEL_ENOTFOUND && !strstr(keel_errmsg(), "no bucket")) {
        keel__clear_error();
        return KEEL_ENOTFOUND;
    }
    if (rc)
        return wrap(c, rc);
    rc = keel__manifest_decode(data, len, key, seq, m);
    keel__free(data);
    if (rc == KEEL_OK && m->npages < KEEL_CACHE_PINNED) {
        uint64_t np = m->npages;
        keel__manifest_free(m);
        rc = KEEL_CORRUPT("manifest %s describes %" PRIu64 " pages, fewer "
                          "than an index has", key, np);
    }
    return rc ? wrap(c, rc) : KEEL_OK;
}

/* The probe of manifest/<seq> on a thread of its own, beside the GET of
** the hinted manifest (keel__remote_newest). */
typedef struct probe {
    keel_cache *c;
    uint64_t seq;
    int rc, exists;
    char msg[1024];
} probe;

static void *
probe_main(void *arg)
{
    probe *p = arg;
    keel_s3 *s3 = keel__remote_client(p->c);
    __atomic_add_fetch(&p->c->n.meta_gets, 1, __ATOMIC_RELAXED);
    p->rc = s3 ? man_head(s3, p->c->bucket, p->c->prefix, p->seq, &p->exists)
               : KEEL_ENOMEM;
    if (p->rc)
        snprintf(p->msg, sizeof p->msg, "%s", keel_errmsg());
    keel__remote_release(p->c, s3);
    return NULL;
}

/* The hint, 0 when there is none or it cannot be read; a missing bucket is
** an error (*hint 0). */
static int
read_hint(keel_cache *c, keel_s3 *s3, uint64_t *hint)
{
    char key[KEY_MAX], etag[KEEL_S3_ETAG_MAX];
    void *data = NULL;
    size_t len = 0;
    pthread_mutex_lock(&c->mu);
    snprintf(etag, sizeof etag, "%s", c->latest_etag);
    *hint = c->latest_hint;
    pthread_mutex_unlock(&c->mu);
    keel__latest_key(key, sizeof key, c->prefix);
    __atomic_add_fetch(&c->n.meta_gets, 1, __ATOMIC_RELAXED);
    /* Conditional: an unchanged hint is a 304 without a body. */
    keel_s3_object o;
    int rc = keel__s3_get(s3, c->bucket, key, *etag ? etag : NULL, 64, &data,
                          &len, &o);
    if (rc == KEEL_OK) {
        *hint = keel__latest_parse(data, len); /* 0: says nothing */
        keel__free(data);
        pthread_mutex_lock(&c->mu);
        snprintf(c->latest_etag, sizeof c->latest_etag, "%s", o.etag);
        c->latest_hint = *hint;
        pthread_mutex_unlock(&c->mu);
    } else if (rc == KEEL_ENOTFOUND && strstr(keel_errmsg(), "no bucket")) {
        *hint = 0;
        return wrap(c, rc); /* the probes would say the same */
    } else if (rc != KEEL_S3_NOT_MODIFIED) {
        /* No hint, or one that cannot be read (too long, refused, a
         * failed request): the listing says (invariant 4). */
        *hint = 0;
    }
    keel__clear_error();
    return KEEL_OK;
}

int
keel__remote_newest(keel_cache *c, keel_s3 *s3, uint64_t after,
                    keel_stop *stop, keel_manifest *m)
{
    memset(m, 0, sizeof *m);
    uint64_t seq = after, hint, reqs = 0;
    int rc = read_hint(c, s3, &hint);
    if (rc)
        return rc;
    int walk = 0, list = hint == 0;
    if (hint > seq) {
        /* The hinted manifest itself, and beside it (a thread of its own,
         * one round trip for both) whether the next one exists: a hint
         * that is right costs one round trip after it, not three. What
         * was read is verified, never trusted: the manifest decodes and
         * checks as any other, and a newer one wins (invariant 3). */
        probe p = {.c = c, .seq = hint + 1};
        pthread_t tid;
        int threaded = pthread_create(&tid, NULL, probe_main, &p) == 0;
        rc = manifest_get(c, s3, hint, m);
        if (threaded)
            pthread_join(tid, NULL);
        else
            probe_main(&p);
        if (p.rc == KEEL_OK && p.exists) {
            /* The hint is behind: walk on from the next one. */
            if (rc == KEEL_OK)
                keel__manifest_free(m);
            memset(m, 0, sizeof *m);
            seq = hint + 1;
            walk = 1;
        } else if (rc == KEEL_ENOTFOUND) {
            list = 1; /* a wrong hint (a pruned version): the listing says */
        } else if (rc) {
            return rc;
        } else if (p.rc) {
            keel__manifest_free(m);
            memset(m, 0, sizeof *m);
            return wrap(c, keel__fail(p.rc, "%s", p.msg));
        } else {
            return KEEL_OK; /* the hint's is the newest */
        }
    } else if (!list) {
        walk = 1; /* a hint not ahead of us: walk on from where we are */
    }
    rc = KEEL_OK;
    if (walk) {
        rc = keel__versions_walk(s3, c->bucket, c->prefix, seq, stop, &seq,
                                 &reqs);
    } else if (list) {
        reqs++;
        rc = keel__versions_list(s3, c->bucket, c->prefix, &seq);
    }
    __atomic_add_fetch(&c->n.meta_gets, reqs, __ATOMIC_RELAXED);
    if (rc)
        return wrap(c, rc);
    if (seq <= after)
        return KEEL_OK; /* nothing newer */
    rc = manifest_get(c, s3, seq, m);
    if (rc == KEEL_ENOTFOUND)
        rc = wrap(c, keel__fail(KEEL_ENOTFOUND, "manifest %" PRIu64 " was "
                                "there a moment ago and is gone\nhelp: "
                                "retry; something removes versions under "
                                "the reader", seq));
    return rc;
}

/* --- pages ------------------------------------------------------------------ */

typedef struct miss {
    size_t i;                 /* index in the caller's list */
    keel_man_page pg;
    keel_man_pack pk;
} miss;

int
keel__remote_fetch(keel_cache *c, keel_s3 *s3, const uint64_t *g, size_t n,
                   uint8_t *bufs, uint32_t inflight, keel_stop *stop,
                   keel_cache_wq *later, size_t *nlater)
{
    return keel__remote_fetch_of(c, &c->man, s3, g, n, bufs, inflight, stop,
                                 later, nlater);
}

int
keel__remote_fetch_of(keel_cache *c, const keel_manifest *m, keel_s3 *s3,
                      const uint64_t *g, size_t n, uint8_t *bufs,
                      uint32_t inflight, keel_stop *stop,
                      keel_cache_wq *later, size_t *nlater)
{
    if (nlater)
        *nlater = 0;
    if (n == 0)
        return KEEL_OK;
    miss *ms = keel__malloc(n * sizeof *ms);
    keel_s3_range *rs = keel__malloc(n * sizeof *rs);
    char *keys = keel__malloc(n * (size_t)KEY_MAX);
    if (!ms || !rs || !keys) {
        keel__free(ms);
        keel__free(rs);
        keel__free(keys);
        return KEEL_ENOMEM;
    }
    /* The version's entries (cache.h invariant 3 keeps the pinned one
     * steady while a caller reads; copied under mu all the same). Zero
     * pages need no fetch. */
    size_t nm = 0, nr = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < n; i++) {
        if (g[i] >= m->npages || m->pages[g[i]].pack == KEEL_MAN_ZERO_PAGE) {
            memset(bufs + i * G, 0, G);
            continue;
        }
        ms[nm].i = i;
        ms[nm].pg = m->pages[g[i]];
        ms[nm].pk = m->packs[ms[nm].pg.pack];
        nm++;
    }
    pthread_mutex_unlock(&c->mu);
    /* The disk cache, then runs of neighbouring pages of one pack, in the
     * caller's order: one GET each. */
    size_t k = 0;
    for (size_t j = 0; j < nm; j++) {
        uint8_t *b = bufs + ms[j].i * G;
        if (c->disk &&
            keel__disk_get(c->disk, ms[j].pg.hash_hi, ms[j].pg.hash_lo, b)) {
            __atomic_add_fetch(&c->n.disk_hits, 1, __ATOMIC_RELAXED);
            continue;
        }
        ms[k] = ms[j];
        if (k && ms[k - 1].i + 1 == ms[k].i &&
            ms[k - 1].pg.pack == ms[k].pg.pack &&
            ms[k - 1].pg.off + G == ms[k].pg.off) {
            rs[nr - 1].len += G;
        } else {
            char *key = keys + nr * KEY_MAX;
            keel__pack_key(key, KEY_MAX, c->prefix, &ms[k].pk);
            rs[nr++] = (keel_s3_range){key, ms[k].pg.off, G, b};
        }
        k++;
    }
    nm = k;
    int rc = KEEL_OK;
    if (nr) {
        uint64_t fly = KEEL_MIN((uint64_t)KEEL_MAX(inflight, 1u), (uint64_t)nr);
        uint64_t now = __atomic_add_fetch(&inflight_now, fly, __ATOMIC_RELAXED);
        uint64_t max = KEEL_LOAD_RELAXED(&inflight_max);
        while (now > max && !__atomic_compare_exchange_n(
                   &inflight_max, &max, now, 1, __ATOMIC_RELAXED,
                   __ATOMIC_RELAXED))
            ;
        rc = keel__s3_get_ranges(s3, c->bucket, rs, nr, (uint32_t)fly,
                                 stop);
        __atomic_sub_fetch(&inflight_now, fly, __ATOMIC_RELAXED);
        uint64_t bytes = 0;
        for (size_t j = 0; j < nr; j++)
            bytes += rs[j].len;
        __atomic_add_fetch(&c->n.gets, nr, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->n.get_bytes, bytes, __ATOMIC_RELAXED);
        if (for_warm) {
            __atomic_add_fetch(&c->n.warm_gets, nr, __ATOMIC_RELAXED);
            __atomic_add_fetch(&c->n.warm_bytes, bytes, __ATOMIC_RELAXED);
        } else {
            __atomic_add_fetch(&c->n.rounds, 1, __ATOMIC_RELAXED);
        }
        if (rc == KEEL_ECANCELED) {
            /* Invariant (1): cut-short answers are neither checked nor
             * kept; the caller installs nothing. Not a failure. */
            keel__free(ms);
            keel__free(rs);
            keel__free(keys);
            return rc;
        }
        if (rc)
            rc = keel__wrap(rc, "reading page %" PRIu64 " of %s: ",
                            g[ms[0].i], c->url);
    }
    /* Invariant (1). */
    for (size_t j = 0; j < nm && rc == KEEL_OK; j++) {
        const uint8_t *b = bufs + ms[j].i * G;
        XXH128_hash_t h = XXH3_128bits(b, G);
        if (h.high64 != ms[j].pg.hash_hi || h.low64 != ms[j].pg.hash_lo) {
            char key[KEY_MAX];
            keel__pack_key(key, sizeof key, c->prefix, &ms[j].pk);
            rc = keel__fail(KEEL_EIO, "page %" PRIu64 " of %s does not match "
                            "its manifest: the %zu bytes at %" PRIu64 " of "
                            "object %s hash to another value\nhelp: the "
                            "object was changed or damaged on the server; "
                            "publish the index again, then retry",
                            g[ms[j].i], c->url, (size_t)G, ms[j].pg.off, key);
        }
    }
    if (rc == KEEL_OK && c->disk) {
        for (size_t j = 0; j < nm; j++) {
            uint8_t *b = bufs + ms[j].i * G;
            if (later)
                later[(*nlater)++] = (keel_cache_wq){NULL, g[ms[j].i],
                                                     ms[j].pg.hash_hi,
                                                     ms[j].pg.hash_lo, b};
            else
                keel__disk_put(c->disk, ms[j].pg.hash_hi, ms[j].pg.hash_lo,
                               b);
        }
    }
    if (rc)
        __atomic_add_fetch(&c->n.failures, 1, __ATOMIC_RELAXED);
    keel__free(ms);
    keel__free(rs);
    keel__free(keys);
    return rc;
}

/* --- the announced path: a batch-read source -------------------------------- */

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
    int failed;
    char msg[1024];
} rsrc;

static long
rsrc_read(void *self, const keel_br_run *run, const void **out)
{
    rsrc *s = self;
    for (size_t i = 0; i < run->n; i++) {
        const keel_br_range *r = &run->r[i];
        for (uint64_t g = r->off / G; g * G < r->off + r->len; g++) {
            if (s->ng && s->g[s->ng - 1] >= g)
                continue; /* ranges are sorted: a granule met already */
            if (s->ng == s->cap) {
                size_t cap = s->cap ? 2 * s->cap : 64;
                uint64_t *p = keel__realloc(s->g, cap * sizeof *p);
                if (!p)
                    return -ENOMEM;
                s->g = p;
                s->cap = cap;
            }
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
    uint8_t *bufs = keel__malloc(s->ng * G);
    keel_cache_wq *later = keel__malloc(s->ng * sizeof *later);
    size_t nlater = 0;
    int rc = bufs && later ? keel__remote_fetch(s->c, s->s3, s->g, s->ng, bufs,
                                                s->runs, s->stop, later,
                                                &nlater)
                           : KEEL_ENOMEM;
    for (size_t i = 0; i < s->ng && rc == KEEL_OK; i++)
        rc = keel__cache_install(s->c, s->g[i], bufs + i * G);
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

int
keel__cache_bring(keel_cache *c, const keel_br_range *r, size_t n,
                  keel_br_scratch *sc, keel_stop *stop)
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
        uint64_t last = (r[i].off + r[i].len - 1) / G;
        for (uint64_t g = r[i].off / G; g <= last && g < c->ngran; g++) {
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
        rsrc s = {.c = c, .s3 = keel__remote_client(c), .stop = stop};
        if (!want || !out || !s.s3) {
            rc = KEEL_ENOMEM;
        } else {
            for (size_t i = 0; i < nm; i++)
                want[i] = (keel_br_range){mine[i] * G, G, NULL};
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
    if (mine != local_mine)
        keel__free(mine);
    if (theirs != local_theirs)
        keel__free(theirs);
    return rc;
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
    for_warm = 1;
    int rc = m ? keel__cache_bring(c, o, m, s, stop) : KEEL_OK;
    for_warm = 0;
    if (o != local)
        keel__free(o);
    return rc;
}
