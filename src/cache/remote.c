/* remote.c -- a published index's bytes from its object store: the newest
** manifest, and pages fetched and checked (cache.h). The fetcher below the
** page cache: it fills buffers it is given and never touches the memfd or
** a granule's state (cache/bring.c and cache.c install what it fetched).
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
**   (5) Every request of a search for the newest version (the hint, the
**       manifests, the HEADs of the walk, the probe on its own thread, the
**       listing) polls the caller's stop: a refresh a store does not
**       answer ends KEEL_ECANCELED within about a second of the cancel
**       callback saying stop (s3.h, Deadlines), not at the stall timeout.
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

#define KEY_MAX 1200

static uint64_t inflight_now, inflight_max; /* atomic, invariant (2) */

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
** the hinted manifest (keel__remote_newest). Its request polls the call's
** stop (it reads what the owner's polls set). */
typedef struct probe {
    keel_cache *c;
    uint64_t seq;
    keel_stop *stop;
    int rc, exists;
    char msg[1024];
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* CLOCK_MONOTONIC; with mu: done is set */
    int done;                  /* under mu */
} probe;

static void *
probe_main(void *arg)
{
    probe *p = arg;
    keel_s3 *s3 = keel__remote_client(p->c);
    __atomic_add_fetch(&p->c->n.meta_gets, 1, __ATOMIC_RELAXED);
    if (s3)
        keel__s3_set_stop(s3, p->stop);
    p->rc = s3 ? man_head(s3, p->c->bucket, p->c->prefix, p->seq, &p->exists)
               : KEEL_ENOMEM;
    if (p->rc)
        snprintf(p->msg, sizeof p->msg, "%s", keel_errmsg());
    if (s3)
        keel__s3_set_stop(s3, NULL);
    keel__remote_release(p->c, s3);
    pthread_mutex_lock(&p->mu);
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Waits for the probe's thread to end, asking the caller's cancel
** meanwhile: once it says stop, the probe's request sees it and ends. */
static void
probe_wait(probe *p, pthread_t tid)
{
    pthread_mutex_lock(&p->mu);
    while (!p->done) {
        uint32_t ms = keel__stop_slice_ms(p->stop);
        keel__cond_wait_ms(&p->cv, &p->mu, KEEL_MIN(ms, 1000u));
        pthread_mutex_unlock(&p->mu);
        keel__stop_poll(p->stop);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    pthread_join(tid, NULL);
}

static int
cancelled(keel_cache *c)
{
    return wrap(c, keel__fail(KEEL_ECANCELED, "cancelled while looking for "
                              "the newest version\nhelp: the cancel callback "
                              "(keel_set_cancel) asked to stop"));
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
    } else if (rc == KEEL_ECANCELED) {
        *hint = 0;
        return wrap(c, rc);
    } else if (rc != KEEL_S3_NOT_MODIFIED) {
        /* No hint, or one that cannot be read (too long, refused, a
         * failed request): the listing says (invariant 4). */
        *hint = 0;
    }
    keel__clear_error();
    return KEEL_OK;
}

static int newest(keel_cache *c, keel_s3 *s3, uint64_t after,
                  keel_stop *stop, keel_manifest *m);

/* Every request of the search polls stop (keel__s3_set_stop), so a cancel
** ends one the store does not answer, within a second (s3.h). */
int
keel__remote_newest(keel_cache *c, keel_s3 *s3, uint64_t after,
                    keel_stop *stop, keel_manifest *m)
{
    keel__s3_set_stop(s3, stop);
    int rc = newest(c, s3, after, stop, m);
    keel__s3_set_stop(s3, NULL);
    if (rc == KEEL_OK && keel__stop_poll(stop)) {
        keel__manifest_free(m);
        memset(m, 0, sizeof *m);
        rc = cancelled(c);
    }
    return rc;
}

static int
newest(keel_cache *c, keel_s3 *s3, uint64_t after, keel_stop *stop,
       keel_manifest *m)
{
    memset(m, 0, sizeof *m);
    uint64_t seq = after, hint, reqs = 0;
    int rc = read_hint(c, s3, &hint);
    if (rc)
        return rc;
    if (keel__stop_poll(stop))
        return cancelled(c);
    int walk = 0, list = hint == 0;
    if (hint > seq) {
        /* The hinted manifest itself, and beside it (a thread of its own,
         * one round trip for both) whether the next one exists: a hint
         * that is right costs one round trip after it, not three. What
         * was read is verified, never trusted: the manifest decodes and
         * checks as any other, and a newer one wins (invariant 3). */
        probe p = {.c = c, .seq = hint + 1, .stop = stop};
        pthread_mutex_init(&p.mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&p.cv, &ca);
        pthread_condattr_destroy(&ca);
        pthread_t tid;
        int threaded = pthread_create(&tid, NULL, probe_main, &p) == 0;
        rc = manifest_get(c, s3, hint, m);
        if (threaded)
            probe_wait(&p, tid);
        else
            probe_main(&p);
        pthread_cond_destroy(&p.cv);
        pthread_mutex_destroy(&p.mu);
        if (rc == KEEL_OK &&
            (p.rc == KEEL_ECANCELED || keel__stop_poll(stop))) {
            keel__manifest_free(m);
            memset(m, 0, sizeof *m);
            return cancelled(c);
        }
        if (rc == KEEL_ECANCELED)
            return rc;
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

/* --- pages ---------------------------------------------------------------- */

int
keel__remote_fetch(const keel_fetcher *f, keel_s3 *s3,
                   const keel_fetch_page *p, size_t n, uint8_t *bufs,
                   uint32_t inflight, keel_stop *stop, keel_cache_wq *later,
                   size_t *nlater)
{
    if (nlater)
        *nlater = 0;
    if (n == 0)
        return KEEL_OK;
    size_t *ms = keel__malloc(n * sizeof *ms); /* indexes of pages to get */
    keel_s3_range *rs = keel__malloc(n * sizeof *rs);
    char *keys = keel__malloc(n * (size_t)KEY_MAX);
    if (!ms || !rs || !keys) {
        keel__free(ms);
        keel__free(rs);
        keel__free(keys);
        return KEEL_ENOMEM;
    }
    /* Zero pages need no fetch; the disk cache, then runs of neighbouring
     * pages of one pack, in the caller's order: one GET each. */
    size_t nm = 0, nr = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t *b = bufs + i * KEEL_CACHE_GRANULE;
        if (p[i].zero) {
            memset(b, 0, KEEL_CACHE_GRANULE);
            continue;
        }
        if (f->disk &&
            keel__disk_get(f->disk, p[i].pg.hash_hi, p[i].pg.hash_lo, b)) {
            __atomic_add_fetch(&f->n->disk_hits, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (nm && ms[nm - 1] + 1 == i && p[i - 1].pg.pack == p[i].pg.pack &&
            p[i - 1].pg.off + KEEL_CACHE_GRANULE == p[i].pg.off) {
            rs[nr - 1].len += KEEL_CACHE_GRANULE;
        } else {
            char *key = keys + nr * KEY_MAX;
            keel__pack_key(key, KEY_MAX, f->prefix, &p[i].pk);
            rs[nr++] = (keel_s3_range){key, p[i].pg.off, KEEL_CACHE_GRANULE, b};
        }
        ms[nm++] = i;
    }
    int rc = KEEL_OK;
    if (nr) {
        uint64_t fly = KEEL_MIN((uint64_t)KEEL_MAX(inflight, 1u), (uint64_t)nr);
        uint64_t now = __atomic_add_fetch(&inflight_now, fly, __ATOMIC_RELAXED);
        uint64_t max = KEEL_LOAD_RELAXED(&inflight_max);
        while (now > max && !__atomic_compare_exchange_n(
                   &inflight_max, &max, now, 1, __ATOMIC_RELAXED,
                   __ATOMIC_RELAXED))
            ;
        rc = keel__s3_get_ranges(s3, f->bucket, rs, nr, (uint32_t)fly, stop);
        __atomic_sub_fetch(&inflight_now, fly, __ATOMIC_RELAXED);
        uint64_t bytes = 0;
        for (size_t j = 0; j < nr; j++)
            bytes += rs[j].len;
        __atomic_add_fetch(&f->n->gets, nr, __ATOMIC_RELAXED);
        __atomic_add_fetch(&f->n->get_bytes, bytes, __ATOMIC_RELAXED);
        if (f->warm) {
            __atomic_add_fetch(&f->n->warm_gets, nr, __ATOMIC_RELAXED);
            __atomic_add_fetch(&f->n->warm_bytes, bytes, __ATOMIC_RELAXED);
        } else {
            __atomic_add_fetch(&f->n->rounds, 1, __ATOMIC_RELAXED);
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
                            p[ms[0]].g, f->url);
    }
    /* Invariant (1). */
    for (size_t j = 0; j < nm && rc == KEEL_OK; j++) {
        const keel_fetch_page *q = &p[ms[j]];
        XXH128_hash_t h = XXH3_128bits(bufs + ms[j] * KEEL_CACHE_GRANULE,
                                       KEEL_CACHE_GRANULE);
        if (h.high64 != q->pg.hash_hi || h.low64 != q->pg.hash_lo) {
            char key[KEY_MAX];
            keel__pack_key(key, sizeof key, f->prefix, &q->pk);
            rc = keel__fail(KEEL_EIO, "page %" PRIu64 " of %s does not match "
                            "its manifest: the %zu bytes at %" PRIu64 " of "
                            "object %s hash to another value\nhelp: the "
                            "object was changed or damaged on the server; "
                            "publish the index again, then retry",
                            q->g, f->url, (size_t)KEEL_CACHE_GRANULE,
                            q->pg.off, key);
        }
    }
    if (rc == KEEL_OK && f->disk) {
        for (size_t j = 0; j < nm; j++) {
            const keel_fetch_page *q = &p[ms[j]];
            uint8_t *b = bufs + ms[j] * KEEL_CACHE_GRANULE;
            if (later)
                later[(*nlater)++] = (keel_cache_wq){NULL, q->g, q->pg.hash_hi,
                                                     q->pg.hash_lo, b};
            else
                keel__disk_put(f->disk, q->pg.hash_hi, q->pg.hash_lo, b);
        }
    }
    if (rc)
        __atomic_add_fetch(&f->n->failures, 1, __ATOMIC_RELAXED);
    keel__free(ms);
    keel__free(rs);
    keel__free(keys);
    return rc;
}
