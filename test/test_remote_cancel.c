/* test_remote_cancel.c -- cancelling a search of a published index while it
** waits for the object store (keel_set_cancel on a reader of an s3:// URL).
**
** A slow store is a real one behind the tests' proxy (lib/s3proxy.h) with
** delay_ms set: every request is held that long before it is passed on,
** as a distant server would. A search cancelled while it waits must
** return KEEL_ECANCELED within about one poll slice (KEEL_STOP_ASK_MS) plus
** one GET in flight (a fault being served cannot be interrupted), give back
** every run it took from the process-wide allowance, leave no page of its
** abandoned GETs in the cache, and leave the handle searching exactly like
** the file. Runs under `make test-objstore` (the gateway's environment);
** without KEEL_TEST_BUCKET the tests that need the server say so and pass.
*/
#include "test.h"
#define OBJSTORE_AREA "test-remote-cancel"
#include "lib/objstore.h"
#include "lib/s3proxy.h"
#include "lib/testdata.h"

#include "base/internal.h"
#include "api/api.h"
#include "cache/cache.h"
#include "io/batch_reads.h"

#include <xxhash.h>

#define DIM 32
#define N 24000
#define NQ 20
#define K 10
#define DELAY_MS 300u
#define G KEEL_CACHE_GRANULE

/* --- the proxy ------------------------------------------------------------ */

/* A proxy (lib/s3proxy.h) in front of the gateway; AWS_ENDPOINT_URL is set to
** it until slow_stop puts the saved value back. NULL on failure. */
static s3proxy *
slow_start(char *saved, size_t cap)
{
    const char *ep = getenv("AWS_ENDPOINT_URL");
    snprintf(saved, cap, "%s", ep ? ep : "");
    s3proxy *px = NULL;
    char err[256];
    if (s3proxy_start(saved, &px, err, sizeof err) != 0) {
        fprintf(stderr, "  s3proxy: %s\n", err);
        return NULL;
    }
    setenv("AWS_ENDPOINT_URL", s3proxy_url(px), 1);
    return px;
}

static void
slow_stop(s3proxy *px, const char *saved)
{
    setenv("AWS_ENDPOINT_URL", saved, 1);
    s3proxy_counters n = {0};
    s3proxy_stop(px, &n);
    printf("     the proxy saw %llu requests\n",
           (unsigned long long)n.requests);
}

/* --- fixtures ---------------------------------------------------------- */

/* The cancel callback's side: a helper thread asks for the stop at a
** chosen moment (want, at_s); the callback, on the searching thread,
** counts its calls, notes whether any came from another thread, and
** answers want. */
typedef struct asker {
    int want;                 /* atomic */
    double at_s;              /* when want was set (test_now) */
    unsigned after_ms;        /* the helper sets want after this long */
    int calls;
    int foreign;              /* calls from a thread other than caller */
    pthread_t caller;
    pthread_t helper;
} asker;

static int
ask(void *arg)
{
    asker *a = arg;
    a->calls++;
    if (!pthread_equal(pthread_self(), a->caller))
        a->foreign++;
    return __atomic_load_n(&a->want, __ATOMIC_ACQUIRE);
}

static void *
asker_main(void *arg)
{
    asker *a = arg;
    struct timespec ts = {a->after_ms / 1000, (long)(a->after_ms % 1000) *
                                                 1000000L};
    nanosleep(&ts, NULL);
    a->at_s = test_now();
    __atomic_store_n(&a->want, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void
asker_arm(asker *a, unsigned after_ms)
{
    memset(a, 0, sizeof *a);
    a->caller = pthread_self();
    a->after_ms = after_ms;
    pthread_create(&a->helper, NULL, asker_main, a);
}

/* A writer of N vectors, published at url. */
static keel_index *
build(const char *path, const char *url)
{
    keel_index *w;
    if (keel_open(path, DIM, NULL, &w))
        return NULL;
    float *v = td_random(N, DIM, 17);
    int rc = keel_add_batch(w, v, N, NULL, NULL);
    free(v);
    if (rc || keel_flush(w) || keel_publish(w, url, NULL)) {
        keel_close(w);
        return NULL;
    }
    return w;
}

/* Whether r answers queries q[0..nq) exactly as the file's writer w. */
static int
same_results(keel_index *w, keel_index *r, const float *q, size_t nq,
             const keel_search_params *p)
{
    return td_same_answers(w, r, q, nq, DIM, K, p);
}

/* Every granule r's cache holds in memory hashes to its manifest entry
** (no half-filled page was installed), and no fetch claims one any more
** (with no search running). The number checked, or -1 at the first bad
** one. */
static long
resident_pages_check(keel_index *r)
{
    keel_cache *c = r->st->remote;
    uint8_t *buf = malloc(G);
    long n = 0;
    for (uint64_t g = 0; g < c->ngran && g < c->man.npages && n >= 0; g++) {
        uint8_t st = __atomic_load_n(&c->state[g], __ATOMIC_ACQUIRE);
        if (st & KEEL_G_FETCH) {
            fprintf(stderr, "  page %llu is still claimed by a fetch\n",
                    (unsigned long long)g);
            n = -1;
            break;
        }
        if (!(st & KEEL_G_IN))
            continue;
        if (pread(c->memfd, buf, G, (off_t)(g * G)) != (ssize_t)G) {
            n = -1;
            break;
        }
        const keel_man_page *pg = &c->man.pages[g];
        XXH128_hash_t h = XXH3_128bits(buf, G);
        int zero = pg->pack == KEEL_MAN_ZERO_PAGE;
        if (!zero && (h.high64 != pg->hash_hi || h.low64 != pg->hash_lo)) {
            fprintf(stderr, "  page %llu is resident with wrong bytes\n",
                    (unsigned long long)g);
            n = -1;
        } else {
            n++;
        }
    }
    free(buf);
    return n;
}

/* --- the tests ----------------------------------------------------------- */

/* One round: a fresh (cold) reader through the proxy, a search cancelled
** after_ms into it (with params p; a batch of 64 queries on two threads
** with batch); then the same handle, uncancelled, against the file.
** in_a_row: how many faults the search may meet between two polls. */
static void
cancel_round(s3proxy *px, const char *url, keel_index *w, const float *q,
             unsigned after_ms, int batch, const keel_search_params *p,
             unsigned in_a_row)
{
    keel_options o = {.threads = 2};
    keel_index *r;
    s3proxy_set_delay_ms(px, 0);
    CHECK_OK(keel_open_reader(url, &o, &r));
    s3proxy_set_delay_ms(px, DELAY_MS);
    asker a;
    asker_arm(&a, after_ms);
    CHECK_OK(keel_set_cancel(r, ask, &a));
    uint64_t gets0 = 0;
    keel_cache_counters n0, n1;
    CHECK_OK(keel__remote_counters(r, &n0));
    gets0 = n0.gets;
    keel_result res[64 * K];
    size_t got[64];
    double t0 = test_now();
    int rc = batch ? keel_search_batch(r, q, 64, K, p, res, got)
                   : keel_search(r, q, K, p, res, got);
    double t1 = test_now();
    pthread_join(a.helper, NULL);
    CHECK_OK(keel__remote_counters(r, &n1));
    double late_ms = (t1 - a.at_s) * 1000;
    printf("     %s%s%s cancelled %u ms in: returned %.0f ms after the "
           "cancel was asked for (%.0f ms in all), %d calls of the callback, "
           "%llu GETs, %llu faults\n", batch ? "batch of 64" : "search",
           p ? " (allow-list)" : "",
           keel__br_enabled() ? "" : " (batch reads off)", after_ms,
           late_ms, (t1 - t0) * 1000, a.calls,
           (unsigned long long)(n1.gets - gets0),
           (unsigned long long)(n1.faults - n0.faults));
    CHECK_ERR(rc, KEEL_ECANCELED);
    CHECK_MSG_HAS("cancelled");
    /* One slice (50 ms) plus the GETs of the faults in a row being served,
     * with room for a busy machine. */
    CHECK_MSG(late_ms < KEEL_STOP_ASK_MS + in_a_row * DELAY_MS + 250,
              "returned %.0f ms after the cancel", late_ms);
    CHECK(late_ms >= 0);
    CHECK_EQ(a.foreign, 0);
    /* About twenty times a second, never in the first 50 ms. */
    CHECK(a.calls >= 1);
    CHECK_MSG(a.calls <= (t1 - t0) * 1000 / KEEL_STOP_ASK_MS + 1,
              "%d calls in %.0f ms", a.calls, (t1 - t0) * 1000);
    /* Every run taken from the allowance is back. */
    CHECK_EQ(__atomic_load_n(&keel__br_shared.free, __ATOMIC_ACQUIRE),
             KEEL_BR_ALLOWANCE);
    /* Nothing half-fetched is in memory. */
    CHECK(resident_pages_check(r) >= (long)KEEL_CACHE_PINNED);
    /* The same handle goes on: uncancelled, at full speed, like the file. */
    CHECK_OK(keel_set_cancel(r, NULL, NULL));
    s3proxy_set_delay_ms(px, 0);
    CHECK(same_results(w, r, q, NQ, p));
    if (batch) {
        CHECK_OK(keel_search_batch(r, q, 64, K, p, res, got));
        for (size_t i = 0; i < 64; i++) {
            keel_result one[K];
            size_t n1_ = 0;
            CHECK_OK(keel_search(w, q + i * DIM, K, p, one, &n1_));
            CHECK_U64(got[i], n1_);
            for (size_t j = 0; j < n1_; j++)
                CHECK(one[j].id == res[i * K + j].id &&
                      !memcmp(&one[j].distance, &res[i * K + j].distance, 4));
        }
    }
    CHECK(resident_pages_check(r) > (long)KEEL_CACHE_PINNED);
    CHECK_OK(keel_check(r));
    CHECK_OK(keel_close(r));
}

TEST(a_cancel_stops_a_slow_cold_search_and_the_handle_goes_on)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "one");
    keel_index *w = build(test_path("one.keel"), url);
    CHECK(w != NULL);
    char saved[512];
    s3proxy *px = slow_start(saved, sizeof saved);
    CHECK(px != NULL);
    float *q = td_random(64, DIM, 5);
    /* Early (the first GETs), in the walk and late; a single search and a
     * batch on two threads. Uncancelled, the first query's cold search
     * waits for its GETs in about 28 rounds, over 8 s. */
    static const unsigned at[] = {150, 700, 2000};
    for (size_t i = 0; i < sizeof at / sizeof at[0] && !test_failed_flag; i++)
        cancel_round(px, url, w, q, at[i], 0, NULL, 1);
    if (!test_failed_flag)
        cancel_round(px, url, w, q, 700, 1, NULL, 1);
    /* A filtered walk reads slot headers (ids) as it goes, announced; a
     * small allow-list is an exact scan of its ids, where an id's place
     * in the id table and then its vector fault in a row. */
    uint64_t *allowed = malloc(N / 3 * sizeof *allowed);
    for (size_t i = 0; i < N / 3; i++)
        allowed[i] = 3 * i;
    keel_search_params walk = {.allowed = allowed, .n_allowed = N / 3};
    keel_search_params scan = {.allowed = allowed, .n_allowed = 200};
    if (!test_failed_flag)
        cancel_round(px, url, w, q, 700, 0, &walk, 1);
    if (!test_failed_flag)
        cancel_round(px, url, w, q, 700, 0, &scan, 2);
    free(allowed);
    /* With batch reads off every page is a fault: the walk polls between
     * expansions, and a record and the upper list it points to fault in
     * a row. */
    int was = keel__br_enabled();
    keel__br_set_enabled(0);
    if (!test_failed_flag)
        cancel_round(px, url, w, q, 700, 0, NULL, 2);
    keel__br_set_enabled(was);
    free(q);
    slow_stop(px, saved);
    keel_close(w);
}

TEST(a_callback_that_never_stops_is_asked_and_changes_nothing)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "never");
    keel_index *w = build(test_path("never.keel"), url);
    CHECK(w != NULL);
    char saved[512];
    s3proxy *px = slow_start(saved, sizeof saved);
    CHECK(px != NULL);
    keel_index *r = NULL;
    int rc = keel_open_reader(url, NULL, &r);
    float *q = td_random(NQ, DIM, 9);
    asker a;
    memset(&a, 0, sizeof a);
    a.caller = pthread_self();
    double t0 = test_now(), t1 = t0;
    if (rc == KEEL_OK) {
        s3proxy_set_delay_ms(px, 100);
        keel_set_cancel(r, ask, &a);
        rc = same_results(w, r, q, NQ, NULL) ? KEEL_OK : KEEL_EIO;
        t1 = test_now();
    }
    slow_stop(px, saved);
    free(q);
    printf("     %d searches in %.0f ms asked the callback %d times\n", NQ,
           (t1 - t0) * 1000, a.calls);
    CHECK_OK(rc);
    CHECK(a.calls >= 1);
    CHECK_EQ(a.foreign, 0);
    CHECK_OK(keel_close(r));
    keel_close(w);
}

struct alike {
    keel_index *r;
    const float *q;
    int rc;
};

static void *
alike_main(void *arg)
{
    struct alike *a = arg;
    keel_result res[K];
    size_t n;
    a->rc = keel_search(a->r, a->q, K, NULL, res, &n);
    return NULL;
}

TEST(threads_searching_alike_fetch_about_what_one_search_does)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "alike");
    keel_index *w = build(test_path("alike.keel"), url);
    CHECK(w != NULL);
    char saved[512];
    s3proxy *px = slow_start(saved, sizeof saved);
    CHECK(px != NULL);
    float *q = td_random(1, DIM, 23);
    /* One search alone on a cold reader, then 8 threads searching the
     * same query at once on another: each page a claim fetches once. */
    enum { T = 8 };
    keel_cache_counters one = {0}, many = {0};
    int rc = KEEL_OK;
    for (int round = 0; round < 2 && !rc; round++) {
        keel_index *r = NULL;
        s3proxy_set_delay_ms(px, 0);
        if ((rc = keel_open_reader(url, NULL, &r)))
            break;
        keel_cache_counters n0, n1;
        keel__remote_counters(r, &n0);
        s3proxy_set_delay_ms(px, 100);
        pthread_t t[T];
        struct alike a[T];
        int nt = round ? T : 1;
        for (int i = 0; i < nt; i++) {
            a[i] = (struct alike){r, q, 0};
            pthread_create(&t[i], NULL, alike_main, &a[i]);
        }
        for (int i = 0; i < nt; i++) {
            pthread_join(t[i], NULL);
            rc = rc ? rc : a[i].rc;
        }
        keel__remote_counters(r, &n1);
        keel_cache_counters *d = round ? &many : &one;
        d->gets = n1.gets - n0.gets;
        d->get_bytes = n1.get_bytes - n0.get_bytes;
        d->faults = n1.faults - n0.faults;
        if (resident_pages_check(r) < 0)
            rc = KEEL_EIO;
        keel_close(r);
    }
    slow_stop(px, saved);
    free(q);
    keel_close(w);
    printf("     one search: %llu GETs, %llu pages (%llu faults); %d at once: "
           "%llu GETs, %llu pages (%llu faults)\n",
           (unsigned long long)one.gets,
           (unsigned long long)(one.get_bytes / G),
           (unsigned long long)one.faults, T,
           (unsigned long long)many.gets,
           (unsigned long long)(many.get_bytes / G),
           (unsigned long long)many.faults);
    CHECK_OK(rc);
    CHECK(one.get_bytes > 0);
    /* Faults are served apart from claims: a page or two may come twice. */
    CHECK_MSG(many.get_bytes <= one.get_bytes + 4 * G,
              "%llu pages for %d alike searches, %llu for one",
              (unsigned long long)(many.get_bytes / G), T,
              (unsigned long long)(one.get_bytes / G));
}

TEST(a_search_of_a_file_never_asks)
{
    const char *path = test_path("file.keel");
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    float *v = td_random(2000, DIM, 3);
    CHECK_OK(keel_add_batch(w, v, 2000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    keel_index *r;
    CHECK_OK(keel_open_reader(path, NULL, &r));
    asker a;
    memset(&a, 0, sizeof a);
    a.want = 1; /* would stop anything that asked */
    a.caller = pthread_self();
    CHECK_OK(keel_set_cancel(r, ask, &a));
    CHECK_OK(keel_set_cancel(w, ask, &a));
    keel_result res[64 * K];
    size_t got[64];
    for (int i = 0; i < 20; i++) {
        CHECK_OK(keel_search(r, v + i * DIM, K, NULL, res, got));
        CHECK_OK(keel_search(w, v + i * DIM, K, NULL, res, got));
    }
    CHECK_OK(keel_search_batch(r, v, 64, K, NULL, res, got));
    CHECK_EQ(a.calls, 0);
    free(v);
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

TEST_MAIN()
