/* test_remote_memory.c -- a reader of a published index keeps its memory
** bound while 8 threads call it on a cold index through a storm of 503s.
**
** The index (32 MiB) is published directly to the Ceph RADOS Gateway `make
** test-objstore` starts; the reader, with the least memory bound (8 MiB),
** goes through test/lib/s3proxy.c, which answers every third request with
** 503 SlowDown (retries among them: most GETs get through on a retry, some
** fail after the last, and the calls whose pages they are fail with
** KEEL_EIO). 8 threads search, then 8 threads read vectors of random ids
** (keel_get: a call that brings in a granule or two), while a thread
** samples VmRSS (/proc/self/status), the memfd's allocated bytes and the
** cache's resident granules. Both with a userfaultfd (eviction at every
** install) and with KEEL_USERFAULTFD=0 (cache.h invariants 7 and 8:
** eviction only while no call reads through the cache).
**
** What must hold: every call answers right (10 ids of the index; the
** vector stored) or KEEL_EIO (or KEEL_ECANCELED: a search in flight when
** the time is up is cancelled); with a userfaultfd the memfd never holds
** more than the bound and one granule; without, the bound and what the
** running calls brought in (8 gets: GET_GRANULES each; a search of this
** index brings in most of it, so searches only report theirs); VmRSS
** grows past the baseline (the reader opened, before any call) by the
** memfd's pages and at most SLACK more (not checked under a sanitizer:
** its allocator holds freed memory back); once the calls end, the cache is
** within its bound. Without KEEL_TEST_BUCKET the test says so and passes.
**
** And without a userfaultfd, a search that begins over the bound waits for
** the calls running to end (cache.h invariant 8), but a cancel ends that
** wait as it ends a wait for a GET: a search cancelled at once returns
** KEEL_ECANCELED within a second while another thread's search of the
** cold index goes on for seconds through a slow store (100 ms a request).
*/
#include "test.h"
#define OBJSTORE_AREA "test-remote-memory"
#include "lib/objstore.h"
#include "lib/testdata.h"
#include "lib/objects.h"

#include "base/internal.h"
#include "api/api.h"
#include "cache/cache.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#define DIM 512
#define N 14000
#define K 10
#define THREADS 8
#define GET_GRANULES 4 /* granules one keel_get reads, at most */
#define G KEEL_CACHE_GRANULE
#define MIB (1024.0 * 1024.0)
/* The bound: the least a cache keeps (memory_cache_bytes 1 asks for it). */
#define BOUND (KEEL_CACHE_MIN_GRANULES * G)
/* Memory beside the cache's pages that 8 calling threads hold at their
** peak: each search's batch buffers (ng granules of 64 KiB, cache/bring.c)
** and scratch, thread stacks, and what malloc's per-thread arenas keep of
** them after free (measured: +20 MiB with 8 threads searching, most of it
** still held after the reader is closed). */
#define SLACK ((uint64_t)28 << 20)

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

static float *vecs; /* the index's vectors, id i at vecs + i * DIM */

/* --- sampling ---------------------------------------------------------- */

/* A field of /proc/self/status in bytes ("VmRSS:"), 0 if not there. */
static uint64_t
status_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t v = 0;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0) {
            v = strtoull(line + n, NULL, 10) * 1024u;
            break;
        }
    if (f)
        fclose(f);
    return v;
}

typedef struct run {
    keel_index *r;
    int memfd;
    s3proxy *proxy;
    int stop;                  /* atomic */
    uint64_t rss_peak, shmem_peak, memfd_peak, resident_peak;
    uint64_t ok, failed, wrong; /* atomic */
    uint64_t samples;
    char eio[512];             /* the first search's KEEL_EIO message */
    int bad_rc;                /* an undocumented code, or 0 */
    char bad_msg[512];
} run;

static uint64_t
memfd_bytes(int fd)
{
    struct stat s;
    return fstat(fd, &s) == 0 ? (uint64_t)s.st_blocks * 512u : 0;
}

static void *
sampler(void *arg)
{
    run *x = arg;
    while (!KEEL_LOAD_ACQUIRE(&x->stop)) {
        x->rss_peak = KEEL_MAX(x->rss_peak, status_bytes("VmRSS:"));
        x->shmem_peak = KEEL_MAX(x->shmem_peak, status_bytes("RssShmem:"));
        x->memfd_peak = KEEL_MAX(x->memfd_peak, memfd_bytes(x->memfd));
        keel_cache_counters n;
        if (keel__remote_counters(x->r, &n) == KEEL_OK)
            x->resident_peak = KEEL_MAX(x->resident_peak, n.resident);
        x->samples++;
        if (getenv("KEEL_TEST_DEBUG") && x->samples % 50 == 0)
            fprintf(stderr, "sample %llu: resident %llu evictions %llu gets "
                    "%llu faults %llu rss %.1f shmem %.1f memfd %.1f\n",
                    (unsigned long long)x->samples,
                    (unsigned long long)n.resident,
                    (unsigned long long)n.evictions,
                    (unsigned long long)n.gets, (unsigned long long)n.faults,
                    (double)status_bytes("VmRSS:") / MIB,
                    (double)status_bytes("RssShmem:") / MIB,
                    (double)memfd_bytes(x->memfd) / MIB);
        usleep(2000);
    }
    return NULL;
}

/* The storm: every third request is answered 503 (retries too). */
static void
storm(run *x)
{
    s3proxy_fail_every(x->proxy, 3, 503);
}

typedef struct worker {
    run *x;
    uint64_t seed;
    int gets;                  /* keel_get of random ids, not searches */
} worker;

/* A call's answer: right, a documented failure of the storm, or not. */
static void
tally(run *x, int rc, int good)
{
    if (rc == KEEL_OK) {
        __atomic_add_fetch(good ? &x->ok : &x->wrong, 1, __ATOMIC_RELAXED);
    } else if (rc == KEEL_ECANCELED && KEEL_LOAD_ACQUIRE(&x->stop)) {
        /* the time is up: a search in flight ends at once */
    } else if (rc == KEEL_EIO) {
        if (__atomic_add_fetch(&x->failed, 1, __ATOMIC_RELAXED) == 1)
            snprintf(x->eio, sizeof x->eio, "%s", keel_errmsg());
    } else if (!x->bad_rc) {
        x->bad_rc = rc;
        snprintf(x->bad_msg, sizeof x->bad_msg, "%s", keel_errmsg());
    }
}

/* The reader's cancel callback: searches in flight end once time is up. */
static int
time_is_up(void *arg)
{
    run *x = arg;
    return KEEL_LOAD_ACQUIRE(&x->stop);
}

static void *
caller(void *arg)
{
    worker *w = arg;
    run *x = w->x;
    while (!KEEL_LOAD_ACQUIRE(&x->stop)) {
        if (w->gets) {
            float v[DIM];
            uint64_t id = test_rand(&w->seed) % N;
            int rc = keel_get(x->r, id, v);
            tally(x, rc, rc || !memcmp(v, vecs + id * DIM, sizeof v));
            continue;
        }
        float *q = td_random(1, DIM, w->seed++);
        keel_result res[K];
        size_t n = 0;
        int rc = keel_search(x->r, q, K, NULL, res, &n);
        free(q);
        int good = n == K;
        for (size_t i = 0; rc == KEEL_OK && good && i < n; i++)
            good = res[i].id < N;
        tally(x, rc, good);
    }
    return NULL;
}

/* Calls reader r (of the least memory bound, through proxy p) from
** THREADS threads for secs seconds under the storm: searches, or (gets)
** reads of vectors of random ids; then checks the figures. base: VmRSS
** with the reader opened, before any call. */
static void
calls_under_storm(keel_index *r, s3proxy *p, const char *mode, int gets,
                  double secs, uint64_t base)
{
    run x = {.proxy = p, .r = r};
    keel_cache *c = r->st->remote;
    x.memfd = c->memfd;
    int faults = keel__cache_faults(c);
    s3proxy_counters before;
    s3proxy_counters_get(p, &before);
    pthread_t sm, t[THREADS];
    worker w[THREADS];
    CHECK_OK(keel_set_cancel(r, time_is_up, &x));
    CHECK(pthread_create(&sm, NULL, sampler, &x) == 0);
    storm(&x);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){&x, 1000u * (uint64_t)(i + 1), gets};
        CHECK(pthread_create(&t[i], NULL, caller, &w[i]) == 0);
    }
    usleep((useconds_t)(secs * 1e6));
    KEEL_STORE_RELEASE(&x.stop, 1);
    s3proxy_counters during;
    s3proxy_counters_get(p, &during); /* what the storm met in the time */
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_join(sm, NULL);
    s3proxy_clear(p);
    CHECK_OK(keel_set_cancel(r, NULL, NULL));
    keel_cache_counters n;
    CHECK_OK(keel__remote_counters(x.r, &n));
    uint64_t reqs = during.requests - before.requests;
    uint64_t f503 = during.faults - before.faults;
    uint64_t grown = x.rss_peak > base ? x.rss_peak - base : 0;
    printf("     %s, %s (%s): %llu answered, %llu failed (EIO) in %.0f s; "
           "%llu of %llu requests answered 503 (%.0f%%); VmRSS %.1f MiB at "
           "the start, peak %.1f MiB (+%.1f MiB; RssShmem peak %.1f MiB); "
           "memfd peak %.1f MiB (%llu granules resident at most, bound "
           "%u); %llu evictions\n",
           gets ? "gets" : "searches", mode,
           faults ? "userfaultfd" : "no userfaultfd",
           (unsigned long long)x.ok, (unsigned long long)x.failed, secs,
           (unsigned long long)f503, (unsigned long long)reqs,
           reqs ? 100.0 * (double)f503 / (double)reqs : 0.0,
           (double)base / MIB, (double)x.rss_peak / MIB,
           (double)grown / MIB, (double)x.shmem_peak / MIB,
           (double)x.memfd_peak / MIB, (unsigned long long)x.resident_peak,
           KEEL_CACHE_MIN_GRANULES, (unsigned long long)n.evictions);
    if (x.failed)
        printf("     the first KEEL_EIO: %.*s\n", (int)strcspn(x.eio, "\n"),
               x.eio);
    CHECK_MSG(!x.bad_rc, "a call returned %d: %s", x.bad_rc, x.bad_msg);
    CHECK_EQ(x.wrong, 0);
    /* A search of this index needs more pages than the bound holds, and
     * 8 at once evict each other's: few end in the time (none at times,
     * under load); gets always do. */
    CHECK(x.ok > 0 || !gets);
    CHECK(f503 * 5 > reqs); /* a storm: over a fifth answered 503 */
    CHECK(n.evictions > 0);
    /* The cache's pages: with a userfaultfd every install evicts (one
     * granule over at most, between the two); without, the bound plus what
     * the running calls brought in (cache.h invariant 8), which for gets
     * is a vector's and an id table entry's granules each (GET_GRANULES).
     * A search brings in most of this index (a search's pages are spread
     * over all of it): no figure below the index's size bounds it. */
    uint64_t cache_cap = faults ? BOUND + G
                         : gets ? BOUND + THREADS * GET_GRANULES * G
                                : (uint64_t)-1;
    CHECK_MSG(x.memfd_peak <= cache_cap, "the memfd held %.1f MiB (%llu "
              "granules resident at most), over %.1f MiB",
              (double)x.memfd_peak / MIB,
              (unsigned long long)x.resident_peak, (double)cache_cap / MIB);
    /* Beside the cache's pages, only the slack (not under a sanitizer,
     * whose allocator keeps what is freed for a while). */
    CHECK_MSG(SANITIZED || grown <= x.memfd_peak + SLACK, "VmRSS grew %.1f MiB: the "
              "cache's %.1f MiB and %.1f MiB more (slack %.1f MiB)",
              (double)grown / MIB, (double)x.memfd_peak / MIB,
              (double)(grown - KEEL_MIN(grown, x.memfd_peak)) / MIB,
              (double)SLACK / MIB);
    /* once no call runs, the cache is within its bound */
    CHECK(n.resident <= KEEL_CACHE_MIN_GRANULES);
}

TEST(memory_stays_bounded_with_8_threads_calling_through_a_503_storm)
{
    NEED_SERVER();
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(120); /* never hangs the suite */
    double t0 = test_now();
    char url[256];
    url_of(url, sizeof url, "storm");
    keel_index *w;
    /* wide vectors and a small graph: many pages, built in seconds */
    keel_options wo = {.max_connections = 8, .ef_construction = 16};
    CHECK_OK(keel_open(test_path("storm.keel"), DIM, &wo, &w));
    vecs = td_random(N, DIM, 5);
    CHECK_OK(keel_add_batch(w, vecs, N, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL));
    keel_stats s;
    CHECK_OK(keel_stat(w, &s));
    keel_close(w);
    printf("     index: %d x %d, %.1f MiB, built and published in %.1f s\n",
           N, DIM, (double)s.file_bytes / MIB, test_now() - t0);
    CHECK(s.file_bytes > 3 * BOUND);
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    if (!p)
        return;
    for (int mode = 0; mode < 2; mode++) {
        const char *name = mode ? "KEEL_USERFAULTFD=0" : "faults allowed";
        if (mode)
            setenv("KEEL_USERFAULTFD", "0", 1);
        else
            unsetenv("KEEL_USERFAULTFD");
        keel_options o = {.memory_cache_bytes = 1}; /* the least: 8 MiB */
        keel_index *r;
        CHECK_OK(keel_open_reader(url, &o, &r));
        if (!r)
            continue;
        uint64_t base = status_bytes("VmRSS:");
        calls_under_storm(r, p, name, 0, 2.5, base);
        calls_under_storm(r, p, name, 1, 1.5, base); /* the cache full */
        keel_close(r);
    }
    unsetenv("KEEL_USERFAULTFD");
    proxy_down(p);
    free(vecs);
    printf("     in all %.1f s\n", test_now() - t0);
    alarm(0);
}

/* --- a call over the bound beside a long one --------------------------- */

typedef struct long_call {
    keel_index *r;
    int rc;
    double took;
} long_call;

static void *
search_thread(void *arg)
{
    long_call *l = arg;
    double t0 = test_now();
    float *q = td_random(1, DIM, 99);
    keel_result res[K];
    size_t n = 0;
    l->rc = keel_search(l->r, q, K, NULL, res, &n);
    free(q);
    l->took = test_now() - t0;
    return NULL;
}

static pthread_t main_thread;

/* Says stop at once, to the main thread's calls only (the check beside
** them asks nothing: it is no search). */
static int
stop_main(void *arg)
{
    (void)arg;
    return pthread_equal(pthread_self(), main_thread);
}

TEST(a_cancelled_search_over_the_bound_does_not_wait_for_a_long_call)
{
    NEED_SERVER();
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(120);
    main_thread = pthread_self();
    char url[256];
    url_of(url, sizeof url, "drain");
    keel_index *w;
    keel_options wo = {.max_connections = 8, .ef_construction = 16};
    CHECK_OK(keel_open(test_path("drain.keel"), DIM, &wo, &w));
    float *v = td_random(6000, DIM, 7);
    CHECK_OK(keel_add_batch(w, v, 6000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL));
    keel_close(w);
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    if (!p)
        return;
    setenv("KEEL_USERFAULTFD", "0", 1);
    keel_options o = {.memory_cache_bytes = 1};
    keel_index *r;
    CHECK_OK(keel_open_reader(url, &o, &r));
    unsetenv("KEEL_USERFAULTFD");
    CHECK_OK(keel_set_cancel(r, stop_main, NULL));
    s3proxy_set_delay_ms(p, 100); /* a slow store: the check takes seconds */
    long_call l = {.r = r};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, search_thread, &l) == 0);
    /* until the check holds more than the bound */
    double t0 = test_now();
    while (reader_counters(r).resident <= KEEL_CACHE_MIN_GRANULES &&
           test_now() - t0 < 60)
        usleep(10000);
    double s0 = test_now();
    keel_result res[K];
    size_t n = 0;
    int rc = keel_search(r, v, K, NULL, res, &n);
    double took = test_now() - s0;
    s0 = test_now();
    keel_stats st;
    int src = keel_stat(r, &st);
    double stat_took = test_now() - s0;
    pthread_join(t, NULL);
    printf("     long search %.2f s (%d); cancelled search %.2f s (%d); stat "
           "%.2f s (%d); resident after %llu\n", l.took, l.rc, took, rc,
           stat_took, src,
           (unsigned long long)reader_counters(r).resident);
    CHECK_EQ(rc, KEEL_ECANCELED);
    CHECK_MSG(took < 1.0, "a search cancelled at once took %.2f s", took);
    CHECK_OK(src);
    /* A call that begins over the bound waits for the running ones at most
     * 0.5 s (cache.c EVICT_WAIT_MS); it waited for the long search (3-5 s). */
    CHECK_MSG(stat_took < 2.0, "a stat beside a long search took %.2f s",
              stat_took);
    CHECK_OK(l.rc);
    keel_close(r);
    proxy_down(p);
    free(v);
    alarm(0);
}

TEST_MAIN()
