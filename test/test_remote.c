/* test_remote.c -- readers of published indexes (keel_open_reader of an
** s3:// URL) against a real object store, and the page cache under them.
**
** The tests that need a server run under `make test-objstore`, which starts
** a Ceph RADOS Gateway on 127.0.0.1; without KEEL_TEST_BUCKET they say so
** and pass. The page cache's own tests (disk directory, memory bound, a
** fault whose fetch fails) need no server and run in `make test` too.
*/
#include "test.h"
#define OBJSTORE_AREA "test-remote"
#include "lib/objstore.h"
#include "lib/testdata.h"
#include "lib/objects.h"

#include "base/internal.h"
#include "api/api.h"
#include "api/publish.h"
#include "cache/cache.h"
#include "s3/s3.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <xxhash.h>

#define DIM 32
#define N 3000
#define NQ 30
#define K 10
#define G KEEL_CACHE_GRANULE

#define GETS(r) reader_counters(r).gets
#define EVICTIONS(r) reader_counters(r).evictions
#define DISK_HITS(r) reader_counters(r).disk_hits
#define FAULTS(r) reader_counters(r).faults
#define SEQ(r) reader_counters(r).seq
#define META_GETS(r) reader_counters(r).meta_gets
#define ROUNDS(r) reader_counters(r).rounds

/* Builds an index of n vectors at path (options o) and publishes it to
** url. */
static keel_index *
build_opts(const char *path, const char *url, const keel_options *o,
           uint64_t seed, size_t n)
{
    keel_index *w;
    if (keel_open(path, DIM, o, &w))
        return NULL;
    float *v = td_random(n, DIM, seed);
    int rc = keel_add_batch(w, v, n, NULL, NULL);
    free(v);
    if (rc || keel_flush(w) || keel_publish(w, url, NULL)) {
        keel_close(w);
        return NULL;
    }
    return w;
}

/* The URL of name (url_of) into url, and an index of n vectors (L2, f32)
** built at test_path("<name>.keel") and published there; NULL on failure. */
static keel_index *
published(char *url, size_t cap, const char *name, uint64_t seed, size_t n)
{
    keel_options o = {.metric = KEEL_L2, .precision = KEEL_F32};
    char file[64];
    url_of(url, cap, name);
    snprintf(file, sizeof file, "%s.keel", name);
    return build_opts(test_path(file), url, &o, seed, n);
}

/* Publishes the next version of w with the same live vectors: a publish
** with no flush since the last makes no version (publish.c invariant 12),
** so a vector is added and deleted, and that flushed, first. */
static int
republish(keel_index *w, const char *url)
{
    float v[DIM] = {1.0f};
    uint64_t id;
    int rc = keel_add(w, v, &id);
    if (!rc)
        rc = keel_delete(w, id);
    if (!rc)
        rc = keel_flush(w);
    return rc ? rc : keel_publish(w, url, NULL);
}

/* Waits up to 20 s for r's warm to finish; 1 if it has. */
static int
warm_finished(keel_index *r)
{
    for (int i = 0; i < 20000 && keel__warm_running(r); i++)
        usleep(1000);
    return !keel__warm_running(r);
}

/* Searches both handles with the same nq queries (and params): equal ids
** and distance bits; 1 if so. */
static int
same_results_of(keel_index *a, keel_index *b, uint64_t seed,
                const keel_search_params *p, int nq)
{
    float *q = td_random(nq, DIM, seed);
    int same = td_same_answers(a, b, q, nq, DIM, K, p);
    free(q);
    return same;
}

static int
same_results(keel_index *a, keel_index *b, uint64_t seed,
             const keel_search_params *p)
{
    return same_results_of(a, b, seed, p, NQ);
}

/* Queries for a reader under the least memory bound (8 MiB), which fetches
** about a thousand granules a query here: enough to evict and fault. */
#define NQ_SMALL 8

/* The results of the NQ queries of seed as one hash (for other processes). */
static uint64_t
results_hash(keel_index *r, uint64_t seed, int *rc)
{
    float *q = td_random(NQ, DIM, seed);
    uint64_t h = 1469598103934665603ull;
    *rc = KEEL_OK;
    for (int i = 0; i < NQ && !*rc; i++) {
        keel_result res[K];
        size_t n = 0;
        *rc = keel_search(r, q + i * DIM, K, NULL, res, &n);
        for (size_t j = 0; j < n; j++) {
            uint32_t d;
            memcpy(&d, &res[j].distance, 4);
            h = (h ^ res[j].id ^ ((uint64_t)d << 32)) * 1099511628211ull;
        }
    }
    free(q);
    return h;
}

/* --- the page cache, no server --------------------------------------------- */

TEST(the_disk_cache_is_checked_bounded_and_shared_by_name)
{
    const char *dir = test_subdir("disk");
    keel_disk *d;
    CHECK_OK(keel__disk_open(dir, 4 * KEEL_DISK_PAGE, &d));
    uint8_t *page = malloc(KEEL_DISK_PAGE), *back = malloc(KEEL_DISK_PAGE);
    XXH128_hash_t h[8];
    for (int i = 0; i < 8; i++) {
        memset(page, 'a' + i, KEEL_DISK_PAGE);
        h[i] = XXH3_128bits(page, KEEL_DISK_PAGE);
        keel__disk_put(d, h[i].high64, h[i].low64, page);
        struct timespec t = {0, 2000000};
        nanosleep(&t, NULL); /* distinct ages */
    }
    /* Bounded: the oldest went first. */
    CHECK(keel__disk_evicted(d) > 0);
    CHECK(keel__disk_bytes(d) <= 4 * KEEL_DISK_PAGE);
    CHECK(keel__disk_get(d, h[7].high64, h[7].low64, back) == 1);
    CHECK(back[100] == 'a' + 7);
    CHECK(keel__disk_get(d, h[0].high64, h[0].low64, back) == 0);
    /* A second handle on the same directory (another process) sees it. */
    keel_disk *d2;
    CHECK_OK(keel__disk_open(dir, 4 * KEEL_DISK_PAGE, &d2));
    CHECK(keel__disk_get(d2, h[7].high64, h[7].low64, back) == 1);
    /* A damaged file is a miss, never a page. */
    char path[1024];
    snprintf(path, sizeof path, "%s/%016llx%016llx", dir,
             (unsigned long long)h[7].high64, (unsigned long long)h[7].low64);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    fseek(f, 5000, SEEK_SET);
    fputc('Z', f);
    fclose(f);
    CHECK(keel__disk_get(d2, h[7].high64, h[7].low64, back) == 0);
    CHECK(keel__disk_get(d, h[7].high64, h[7].low64, back) == 0);
    keel__disk_close(d);
    keel__disk_close(d2);
    free(page);
    free(back);
}

static void
set_env(const char *name, const char *value, char *saved, size_t cap)
{
    const char *e = getenv(name);
    snprintf(saved, cap, "%s", e ? e : "");
    setenv(name, value, 1);
}

static void
restore_env(const char *name, const char *saved)
{
    if (*saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
}

/* A cache over a manifest of our own: npages pages, all zero but page
** `bad`, which lies in a pack on an endpoint nothing listens on (the
** client is made at start, with that endpoint and made-up keys). */
static keel_cache *
fake_cache(uint64_t npages, uint64_t bad, uint64_t memory, int *rc)
{
    keel_cache *c = keel__cache_alloc();
    snprintf(c->url, sizeof c->url, "s3://nobucket/p");
    snprintf(c->bucket, sizeof c->bucket, "nobucket");
    snprintf(c->prefix, sizeof c->prefix, "p");
    c->man.seq = 1;
    c->man.npages = npages;
    c->man.image_len = npages * G;
    c->man.npacks = 1;
    c->man.packs = keel__calloc(1, sizeof *c->man.packs);
    c->man.packs[0].bytes = G;
    c->man.pages = keel__calloc(npages, sizeof *c->man.pages);
    for (uint64_t i = 0; i < npages; i++)
        c->man.pages[i].pack = i == bad ? 0 : KEEL_MAN_ZERO_PAGE;
    char ep[512], ak[128], sk[128];
    set_env("AWS_ENDPOINT_URL", "http://127.0.0.1:1", ep, sizeof ep);
    set_env("AWS_ACCESS_KEY_ID", "k", ak, sizeof ak);
    set_env("AWS_SECRET_ACCESS_KEY", "s", sk, sizeof sk);
    *rc = keel__cache_start(c, memory);
    restore_env("AWS_ENDPOINT_URL", ep);
    restore_env("AWS_ACCESS_KEY_ID", ak);
    restore_env("AWS_SECRET_ACCESS_KEY", sk);
    return c;
}

TEST(the_memory_bound_evicts_and_a_failed_fault_fails_the_call)
{
    int rc;
    uint64_t npages = 2 * KEEL_CACHE_MIN_GRANULES, bad = 40;
    keel_cache *c = fake_cache(npages, bad, 1, &rc);
    if (rc) {
        keel__cache_close(c);
        CHECK_OK(rc);
    }
    if (!keel__cache_faults(c)) {
        keel__cache_close(c);
        TEST_SKIP("no userfaultfd here (the next test covers a cache "
                  "without one)");
    }
    void *m;
    CHECK_OK(keel__os->map(c->memfd, 0, npages * G, 0, &m));
    CHECK_OK(keel__cache_register(c, m, npages * G, 0));
    const volatile uint8_t *p = m;
    /* Every page but `bad` faults in (zeros, no network), within the
     * bound: the rest were punched (counted). */
    uint64_t gen = keel__cache_begin(c, NULL);
    unsigned sum = 0;
    for (int round = 0; round < 2; round++)
        for (uint64_t g = 0; g < npages; g++)
            if (g != bad)
                sum += p[g * G + 123];
    CHECK_EQ(sum, 0);
    CHECK_OK(keel__cache_end(c, gen, KEEL_OK));
    keel_cache_counters n;
    keel__cache_counters(c, &n);
    printf("     %llu faults, %llu evictions, %llu resident of %u\n",
           (unsigned long long)n.faults, (unsigned long long)n.evictions,
           (unsigned long long)n.resident, KEEL_CACHE_MIN_GRANULES);
    CHECK(n.faults >= npages - 4);
    CHECK(n.evictions > 0);
    CHECK(n.resident <= KEEL_CACHE_MIN_GRANULES);
    CHECK_EQ(n.gets, 0);
    /* The pinned pages stayed. */
    CHECK(c->state[0] & KEEL_G_IN);
    /* A fault whose fetch fails: the load completes, the call fails. */
    gen = keel__cache_begin(c, NULL);
    sum = p[bad * G + 7];
    CHECK_ERR(keel__cache_end(c, gen, KEEL_OK), KEEL_EIO);
    CHECK_MSG_HAS("127.0.0.1:1");
    CHECK_MSG_HAS("help:");
    /* The next call starts clean (the poisoned page is punched) and meets
     * the same failure again rather than the zeros. */
    gen = keel__cache_begin(c, NULL);
    CHECK(!(c->state[bad] & KEEL_G_IN));
    CHECK_OK(keel__cache_end(c, gen, KEEL_OK));
    gen = keel__cache_begin(c, NULL);
    sum += p[bad * G + 9];
    CHECK_ERR(keel__cache_end(c, gen, KEEL_OK), KEEL_EIO);
    keel__os->unmap(m, npages * G);
    keel__cache_close(c);
}

TEST(without_a_userfaultfd_the_bound_waits_for_calls_and_hole_reads_are_caught)
{
    char po[16];
    set_env("KEEL_CACHE_POISON", "1", po, sizeof po);
    int rc;
    uint64_t npages = 2 * KEEL_CACHE_MIN_GRANULES, bad = 40;
    keel_cache *c = fake_cache(npages, bad, 1, &rc);
    restore_env("KEEL_CACHE_POISON", po);
    if (rc) {
        keel__cache_close(c);
        CHECK_OK(rc);
    }
    CHECK(!keel__cache_faults(c)); /* the check turns the userfaultfd off */
    void *m;
    CHECK_OK(keel__os->map(c->memfd, 0, npages * G, 0, &m));
    CHECK_OK(keel__cache_register(c, m, npages * G, 0));
    const volatile uint8_t *p = m;
    /* A call brings every page but `bad` in (zeros, no network): twice the
     * bound, all kept until the call ends, then punched down to it. */
    uint64_t gen = keel__cache_begin(c, NULL);
    keel_br_range r[2] = {{KEEL_CACHE_PINNED * G, (bad - KEEL_CACHE_PINNED) * G,
                           NULL},
                          {(bad + 1) * G, (npages - bad - 1) * G, NULL}};
    keel_br_scratch s = {0};
    CHECK_OK(keel__cache_bring(c, r, 2, &s, NULL));
    keel_cache_counters n;
    keel__cache_counters(c, &n);
    CHECK_EQ(n.resident, npages - 1);
    CHECK_EQ(n.evictions, 0);
    unsigned sum = 0;
    for (uint64_t g = 0; g < npages; g++)
        if (g != bad)
            sum += p[g * G + 123];
    CHECK_EQ(sum, 0);
    CHECK_OK(keel__cache_end(c, gen, KEEL_OK));
    keel__cache_counters(c, &n);
    printf("     %llu resident during the call, %llu after it (bound %u), "
           "%llu evictions\n", (unsigned long long)(npages - 1),
           (unsigned long long)n.resident, KEEL_CACHE_MIN_GRANULES,
           (unsigned long long)n.evictions);
    CHECK(n.resident <= KEEL_CACHE_MIN_GRANULES);
    CHECK(n.evictions > 0);
    CHECK_EQ(n.faults, 0);
    CHECK(c->state[0] & KEEL_G_IN); /* the pinned pages stayed */
    /* A read of a page nobody brought in reads zeros: the check fails the
     * call and names the page. */
    gen = keel__cache_begin(c, NULL);
    sum = p[bad * G + 7];
    CHECK_EQ(sum, 0);
    CHECK_ERR(keel__cache_end(c, gen, KEEL_OK), KEEL_EIO);
    CHECK_MSG_HAS("touched page 40 ");
    CHECK_MSG_HAS("help:");
    /* Punched out again: the next clean call passes. */
    gen = keel__cache_begin(c, NULL);
    CHECK_OK(keel__cache_end(c, gen, KEEL_OK));
    /* An announced fetch that fails fails its call and installs nothing. */
    gen = keel__cache_begin(c, NULL);
    keel_br_range rb = {bad * G, G, NULL};
    CHECK_ERR(keel__cache_bring(c, &rb, 1, &s, NULL), KEEL_EIO);
    CHECK_MSG_HAS("127.0.0.1:1");
    CHECK(!(c->state[bad] & KEEL_G_IN));
    CHECK_OK(keel__cache_end(c, gen, KEEL_OK));
    keel__br_scratch_free(&s);
    keel__os->unmap(m, npages * G);
    keel__cache_close(c);
}

TEST(a_refused_userfaultfd_is_passed_over_or_named)
{
    char po[16], uf[16];
    set_env("KEEL_CACHE_POISON", "0", po, sizeof po);
    set_env("KEEL_USERFAULTFD", "", uf, sizeof uf);
    unsetenv("KEEL_USERFAULTFD");
    int rc;
    /* As the system lets it: a refusal (a seccomp filter, as under
     * test/objstore/no_userfaultfd) only turns faults off. */
    keel_cache *c = fake_cache(2 * KEEL_CACHE_MIN_GRANULES, 40, 1, &rc);
    CHECK_OK(rc);
    int granted = keel__cache_faults(c);
    char why[256];
    snprintf(why, sizeof why, "%s", c->no_uffd);
    printf("     userfaultfd %s%s\n", granted ? "granted" : "refused: ", why);
    if (!granted)
        CHECK(*why != 0);
    keel__cache_close(c);
    /* Required: a refusal fails the open and names its cause. */
    setenv("KEEL_USERFAULTFD", "1", 1);
    c = fake_cache(2 * KEEL_CACHE_MIN_GRANULES, 40, 1, &rc);
    if (granted) {
        CHECK_OK(rc);
    } else {
        CHECK_ERR(rc, KEEL_EIO);
        CHECK_MSG_HAS(why);
        CHECK_MSG_HAS("help:");
        CHECK(strstr(keel_errmsg(), "5.11 or later") == NULL ||
              strstr(why, "5.11") != NULL);
    }
    keel__cache_close(c);
    /* Off: no faults, whatever the system allows. */
    setenv("KEEL_USERFAULTFD", "0", 1);
    c = fake_cache(2 * KEEL_CACHE_MIN_GRANULES, 40, 1, &rc);
    CHECK_OK(rc);
    CHECK(!keel__cache_faults(c));
    CHECK(strstr(c->no_uffd, "KEEL_USERFAULTFD=0") != NULL);
    keel__cache_close(c);
    restore_env("KEEL_USERFAULTFD", uf);
    restore_env("KEEL_CACHE_POISON", po);
}

/* --- readers of published indexes -------------------------------------------- */

TEST(a_url_searches_like_the_file)
{
    NEED_SERVER();
    static const struct {
        keel_metric m;
        keel_precision p;
        keel_codes c;
        const char *name;
    } kinds[] = {{KEEL_L2, KEEL_F32, KEEL_CODES_NONE, "l2"},
                 {KEEL_COSINE, KEEL_F32, KEEL_CODES_NONE, "cos"},
                 {KEEL_L2, KEEL_F16, KEEL_CODES_NONE, "f16"},
                 {KEEL_L2, KEEL_F32, KEEL_CODES_I8, "i8"},
                 {KEEL_COSINE, KEEL_F16, KEEL_CODES_I8, "cos-f16-i8"}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char url[256], file[64];
        url_of(url, sizeof url, kinds[k].name);
        snprintf(file, sizeof file, "%s.keel", kinds[k].name);
        keel_options bo = {.metric = kinds[k].m, .precision = kinds[k].p,
                           .codes = kinds[k].c};
        keel_index *w = build_opts(test_path(file), url, &bo, 100 + k, N);
        CHECK(w != NULL);
        keel_options o = {.cache_dir = test_subdir("cache-search")};
        keel_index *r;
        CHECK_OK(keel_open_reader(url, &o, &r));
        CHECK(same_results(w, r, 7 + k, NULL));
        /* allow-lists: an id array, and a prepared one */
        uint64_t *ids = malloc(N / 3 * sizeof *ids);
        for (size_t i = 0; i < N / 3; i++)
            ids[i] = 3 * i + 1;
        keel_search_params p = {.allowed = ids, .n_allowed = N / 3};
        CHECK(same_results(w, r, 17 + k, &p));
        keel_filter *f;
        CHECK_OK(keel_filter_new(ids, 40, &f));
        keel_search_params pf = {.allowed_filter = f};
        CHECK(same_results(w, r, 27 + k, &pf));
        keel_filter_free(f);
        free(ids);
        printf("     %s: %llu GETs, %llu faults\n", kinds[k].name,
               (unsigned long long)GETS(r), (unsigned long long)FAULTS(r));
        CHECK(GETS(r) > 0);
        keel_close(r);
        keel_close(w);
    }
}

TEST(get_ids_count_stat_and_check_work_on_a_url)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "calls", 5, N);
    CHECK(w != NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_EQ(keel_count(r), N);
    CHECK_EQ(keel_dim(r), DIM);
    float a[DIM], b[DIM];
    for (uint64_t id = 0; id < N; id += 97) {
        CHECK_OK(keel_get(w, id, a));
        CHECK_OK(keel_get(r, id, b));
        CHECK(memcmp(a, b, sizeof a) == 0);
    }
    CHECK_ERR(keel_get(r, N + 5, b), KEEL_ENOTFOUND);
    uint64_t want[5] = {4, 400, 1999, 7, 2999};
    float *ga = malloc(5 * DIM * sizeof *ga), *gb = malloc(5 * DIM * sizeof *gb);
    CHECK_OK(keel_get_batch(w, want, 5, ga, NULL));
    CHECK_OK(keel_get_batch(r, want, 5, gb, NULL));
    CHECK(memcmp(ga, gb, 5 * DIM * sizeof *ga) == 0);
    free(ga);
    free(gb);
    uint64_t ia[50], ib[50];
    size_t na, nb;
    CHECK_OK(keel_ids(w, 100, ia, 50, &na));
    CHECK_OK(keel_ids(r, 100, ib, 50, &nb));
    CHECK_EQ(na, nb);
    CHECK(memcmp(ia, ib, na * sizeof *ia) == 0);
    keel_stats s;
    CHECK_OK(keel_stat(r, &s));
    CHECK_EQ(s.count, N);
    CHECK_EQ(s.dim, DIM);
    CHECK_EQ(s.is_reader, 1);
    CHECK_OK(keel_check(r));
    /* writes and backups are refused, each with its own word */
    float v[DIM] = {0};
    uint64_t id;
    CHECK_ERR(keel_add(r, v, &id), KEEL_EREADONLY);
    CHECK_ERR(keel_delete(r, 3), KEEL_EREADONLY);
    CHECK_ERR(keel_flush(r), KEEL_EREADONLY);
    CHECK_ERR(keel_backup(r, test_path("b.keel")), KEEL_EINVAL);
    CHECK_MSG_HAS("published index");
    keel_index *x;
    CHECK_ERR(keel_open(url, DIM, NULL, &x), KEEL_EREADONLY);
    CHECK_MSG_HAS("keel_open_reader");
    /* warm reads the rest in; searches then fetch nothing */
    CHECK_OK(keel_warm(r));
    for (int i = 0; i < 200; i++) {
        struct timespec t = {0, 20000000};
        nanosleep(&t, NULL);
        keel_stats st;
        CHECK_OK(keel_stat(r, &st));
        if (st.allocated_bytes >= st.file_bytes * 9 / 10)
            break;
    }
    uint64_t before = GETS(r);
    CHECK(same_results(w, r, 99, NULL));
    printf("     after warm: %llu GETs for %d searches\n",
           (unsigned long long)(GETS(r) - before), NQ);
    keel_close(r);
    keel_close(w);
}

TEST(a_reader_follows_a_newer_publish_on_refresh)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "follow", 9, N);
    CHECK(w != NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK(same_results(w, r, 1, NULL));
    CHECK_EQ(SEQ(r), 1);
    /* 10% more and some deletes: pages change in place */
    float *more = td_random(N / 10, DIM, 10);
    CHECK_OK(keel_add_batch(w, more, N / 10, NULL, NULL));
    free(more);
    for (uint64_t id = 0; id < 200; id += 7)
        CHECK_OK(keel_delete(w, id));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_refresh(r)); /* nothing newer yet */
    CHECK_EQ(SEQ(r), 1);
    CHECK_EQ(keel_count(r), N);
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 2);
    CHECK_EQ(keel_count(r), keel_count(w));
    CHECK(same_results(w, r, 2, NULL));
    float v[DIM];
    CHECK_ERR(keel_get(r, 7, v), KEEL_ENOTFOUND);
    CHECK_OK(keel_get(r, N + 5, v));
    CHECK_OK(keel_check(r));
    /* without keel_refresh: a call looks by itself every 5 s */
    float *third = td_random(50, DIM, 11);
    CHECK_OK(keel_add_batch(w, third, 50, NULL, NULL));
    free(third);
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL));
    struct timespec t = {KEEL_CACHE_POLL_MS / 1000, 200000000};
    nanosleep(&t, NULL);
    CHECK(same_results(w, r, 3, NULL));
    CHECK_EQ(SEQ(r), 3);
    keel_close(r);
    keel_close(w);
}

/* r against a fresh reader of url and a reader of the local file at path:
** the same count, keel_check passing on r, and the same searches, bit for
** bit; 1 if so. */
static int
same_as_fresh_and_local(keel_index *r, const char *url, const char *path,
                        uint64_t seed)
{
    keel_index *fresh = NULL, *local = NULL;
    int ok = keel_open_reader(url, NULL, &fresh) == KEEL_OK &&
             keel_open_reader(path, NULL, &local) == KEEL_OK;
    if (ok && keel_check(r) != KEEL_OK) {
        fprintf(stderr, "  following reader: %s\n", keel_errmsg());
        ok = 0;
    }
    if (ok && (keel_count(r) != keel_count(fresh) ||
               keel_count(r) != keel_count(local))) {
        fprintf(stderr, "  count %llu, fresh %llu, local %llu\n",
                (unsigned long long)keel_count(r),
                (unsigned long long)keel_count(fresh),
                (unsigned long long)keel_count(local));
        ok = 0;
    }
    ok = ok && same_results(r, fresh, seed, NULL) &&
         same_results(r, local, seed, NULL);
    keel_close(fresh);
    keel_close(local);
    return ok;
}

TEST(a_reader_follows_a_compaction_to_the_new_file)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "compact", 61, N);
    const char *path = test_path("compact.keel");
    CHECK(w != NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK(same_as_fresh_and_local(r, url, path, 1));
    /* v2: deletes and adds in place */
    float *more = td_random(400, DIM, 62);
    for (uint64_t id = 1; id < N; id += 75)
        CHECK_OK(keel_delete(w, id));
    CHECK_OK(keel_add_batch(w, more, 400, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 2);
    CHECK(same_as_fresh_and_local(r, url, path, 2));
    /* v3: the compacted file, whose header sequence starts again */
    CHECK_OK(keel_compact(w));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 3);
    CHECK(same_as_fresh_and_local(r, url, path, 3));
    /* v4: adds after the compaction */
    CHECK_OK(keel_add_batch(w, more, 200, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 4);
    CHECK_EQ(keel_count(r), keel_count(w));
    CHECK(same_as_fresh_and_local(r, url, path, 4));
    float v[DIM];
    CHECK_ERR(keel_get(r, 1, v), KEEL_ENOTFOUND);
    CHECK_OK(keel_get(r, N + 400 + 100, v));
    /* v5 and v6 published between two looks: it moves to the newest */
    CHECK_OK(keel_compact(w));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_delete(w, 2));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 6);
    CHECK(same_as_fresh_and_local(r, url, path, 5));
    free(more);
    keel_close(r);
    keel_close(w);
}

/* A `latest` hint that cannot be read or says nothing is ignored: readers
** open and follow by probing the manifests. */
TEST(a_bad_latest_hint_is_only_ignored)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "hint", 71, N);
    CHECK(w != NULL);
    CHECK_OK(republish(w, url)); /* v2 */
    char b[64], key[1400];
    keel_s3 *s3 = obj_client(url, "latest", b, key, sizeof key);
    CHECK(s3 != NULL);
    char big[100];
    memset(big, '0', sizeof big);
    big[sizeof big - 1] = '2';
    const char *bad[] = {NULL, "2\n                                        "
                                "                                        ",
                         "garbage\n", "2x\n", "99999\n", "1\n",
                         "18446744073709551615\n", "-1\n", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *d = bad[i] ? bad[i] : big;
        size_t len = bad[i] ? strlen(bad[i]) : sizeof big;
        CHECK_OK(keel__s3_put(s3, b, key, d, len, 0, NULL));
        keel_index *r;
        int rc = keel_open_reader(url, NULL, &r);
        CHECK_MSG(rc == KEEL_OK, "hint %zu: %s", i, keel_errmsg());
        if (rc)
            continue;
        CHECK_EQ(SEQ(r), 2);
        CHECK_EQ(keel_count(r), N);
        keel_close(r);
    }
    /* ... and a reader follows past it */
    keel_index *r;
    CHECK_OK(keel__s3_put(s3, b, key, big, sizeof big, 0, NULL));
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_OK(keel_delete(w, 3));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL)); /* v3, rewrites the hint */
    CHECK_OK(keel__s3_put(s3, b, key, big, sizeof big, 0, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 3);
    CHECK_EQ(keel_count(r), N - 1);
    CHECK_OK(keel__s3_delete(s3, b, key)); /* no hint at all */
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 3);
    keel_close(r);
    keel__s3_close(s3);
    keel_close(w);
}

/* A right hint costs one round trip after it: the hinted manifest's GET,
** with the probe of the next one beside it (3 requests). A hint that is
** behind, or names no manifest, still ends at the newest one. */
TEST(a_right_hint_opens_in_three_requests_and_a_stale_one_still_ends_newest)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "hint3", 73, N);
    CHECK(w != NULL);
    CHECK_OK(republish(w, url)); /* v2 */
    CHECK_OK(keel_delete(w, 5));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL)); /* v3 */
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    /* the hint, manifest 3, and the probe of manifest 4 */
    CHECK_EQ(META_GETS(r), 3);
    CHECK_EQ(SEQ(r), 3);
    CHECK_EQ(keel_count(r), N - 1);
    CHECK(same_results(w, r, 74, NULL));
    keel_close(r);
    char b[64], key[1400];
    keel_s3 *s3 = obj_client(url, "latest", b, key, sizeof key);
    CHECK(s3 != NULL);
    static const struct {
        const char *hint;
        uint64_t meta;
    } cases[] = {
        /* behind: manifest 1, then probes of 2, 3 and 4, then 3's GET */
        {"1\n", 6},
        {"2\n", 5},
        /* names no manifest (a pruned version, say): 7's GET and the
         * probe of 8, then the listing (never a walk from 1), 3's GET */
        {"7\n", 5},
        {"3\n", 3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_OK(keel__s3_put(s3, b, key, cases[i].hint,
                              strlen(cases[i].hint), 0, NULL));
        int rc = keel_open_reader(url, NULL, &r);
        CHECK_MSG(rc == KEEL_OK, "hint %zu: %s", i, keel_errmsg());
        if (rc)
            continue;
        CHECK_EQ(SEQ(r), 3);
        CHECK_EQ(META_GETS(r), cases[i].meta);
        CHECK_EQ(keel_count(r), N - 1);
        CHECK(same_results(w, r, 75 + i, NULL));
        keel_close(r);
    }
    keel__s3_close(s3);
    keel_close(w);
}

/* With warm, the open does not bring the heap in a batch of its own
** (warm brings it first): besides warm's, only the header pages' GETs. */
TEST(with_warm_the_open_leaves_the_heap_to_warm)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "warmheap", 87, 4 * N);
    CHECK(w != NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    uint64_t cold = GETS(r); /* the header pages and the heap */
    keel_close(r);
    keel_options o = {.flags = KEEL_WARM};
    CHECK_OK(keel_open_reader(url, &o, &r));
    CHECK(warm_finished(r));
    keel_cache_counters n;
    CHECK_OK(keel__remote_counters(r, &n));
    printf("     open without warm: %llu GETs; with warm: %llu besides "
           "warm's %llu\n", (unsigned long long)cold,
           (unsigned long long)(n.gets - n.warm_gets),
           (unsigned long long)n.warm_gets);
    CHECK(n.gets - n.warm_gets < cold);
    CHECK_EQ(n.missing, 0);
    CHECK(same_results(w, r, 88, NULL));
    keel_close(r);
    keel_close(w);
}

TEST(a_small_memory_cache_gives_the_same_results_and_evicts)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "small", 21, 16 * N);
    CHECK(w != NULL);
    keel_stats s;
    CHECK_OK(keel_stat(w, &s));
    keel_options o = {.memory_cache_bytes = 1}; /* the least: 8 MiB */
    keel_index *r;
    CHECK_OK(keel_open_reader(url, &o, &r));
    CHECK(same_results_of(w, r, 3, NULL, NQ_SMALL));
    keel_stats rs;
    CHECK_OK(keel_stat(r, &rs));
    printf("     file %llu bytes, memory bound %llu bytes: %llu GETs, "
           "%llu evictions, %llu faults\n", (unsigned long long)s.file_bytes,
           (unsigned long long)(KEEL_CACHE_MIN_GRANULES * G),
           (unsigned long long)GETS(r),
           (unsigned long long)EVICTIONS(r), (unsigned long long)FAULTS(r));
    CHECK(EVICTIONS(r) > 0);
    CHECK(s.file_bytes > 2 * KEEL_CACHE_MIN_GRANULES * G);
    CHECK(rs.allocated_bytes <= KEEL_CACHE_MIN_GRANULES * G + (1u << 20));
    keel_close(r);
    keel_close(w);
}

/* Runs the NQ queries of seed in a new process with cache dir dir; its
** results hash and GETs through the pipe. */
static pid_t
child_run(const char *url, const char *dir, uint64_t seed, int fd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    keel_options o = {.cache_dir = dir};
    keel_index *r;
    uint64_t out[3] = {0, UINT64_MAX, 0};
    int rc = keel_open_reader(url, &o, &r);
    if (!rc) {
        out[0] = results_hash(r, seed, &rc);
        out[1] = GETS(r);
        out[2] = DISK_HITS(r);
        keel_close(r);
    }
    if (rc)
        fprintf(stderr, "  child: %s\n", keel_errmsg());
    if (write(fd, out, sizeof out) != (ssize_t)sizeof out)
        _exit(2);
    _exit(rc ? 1 : 0);
}

static int
child_wait(pid_t pid, int fd, uint64_t out[3])
{
    int st;
    ssize_t n = read(fd, out, 3 * sizeof *out);
    waitpid(pid, &st, 0);
    return n == 3 * (ssize_t)sizeof *out && WIFEXITED(st) &&
           WEXITSTATUS(st) == 0;
}

TEST(the_disk_cache_survives_a_restart_and_is_shared_by_processes)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "restart", 31, N);
    CHECK(w != NULL);
    int rc;
    keel_index *r0;
    CHECK_OK(keel_open_reader(url, NULL, &r0));
    uint64_t want = results_hash(r0, 41, &rc);
    CHECK_OK(rc);
    keel_close(r0);
    int fds[2];
    CHECK(pipe(fds) == 0);
    const char *dir = test_subdir("cache-restart");
    uint64_t a[3], b[3];
    CHECK(child_wait(child_run(url, dir, 41, fds[1]), fds[0], a));
    CHECK(child_wait(child_run(url, dir, 41, fds[1]), fds[0], b));
    printf("     first process: %llu GETs; second: %llu GETs, %llu pages "
           "from disk\n", (unsigned long long)a[1], (unsigned long long)b[1],
           (unsigned long long)b[2]);
    CHECK_EQ(a[0], want);
    CHECK_EQ(b[0], want);
    CHECK(a[1] > 0);
    CHECK_EQ(b[1], 0);
    CHECK(b[2] > 0);
    /* four processes at once on a fresh directory */
    const char *shared = test_subdir("cache-shared");
    pid_t pid[4];
    for (int i = 0; i < 4; i++)
        pid[i] = child_run(url, shared, 41, fds[1]);
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        uint64_t x[3];
        /* answers come in any order; each must be the right one */
        ok &= child_wait(pid[i], fds[0], x) && x[0] == want;
    }
    CHECK(ok);
    CHECK(child_wait(child_run(url, shared, 41, fds[1]), fds[0], b));
    CHECK_EQ(b[1], 0);
    close(fds[0]);
    close(fds[1]);
    keel_close(w);
}

/* An index published as name (seed), and the first pack of its version 1:
** a client, the pack's bucket and key, and its bytes, to damage or remove
** and put back. */
typedef struct pack_fixture {
    keel_index *w;
    keel_s3 *s3;
    char url[256], b[64], key[1400];
    void *orig;
    size_t len;
} pack_fixture;

static void
pack_fixture_close(pack_fixture *f)
{
    keel__free(f->orig);
    keel__s3_close(f->s3);
    keel_close(f->w);
}

static int
pack_open(pack_fixture *f, const char *name, uint64_t seed)
{
    char prefix[1024], mkey[1400];
    memset(f, 0, sizeof *f);
    f->w = published(f->url, sizeof f->url, name, seed, N);
    if (!f->w)
        return KEEL_EIO;
    int rc = keel__s3_url_parse(f->url, f->b, sizeof f->b, prefix,
                                sizeof prefix);
    if (rc || (rc = keel__s3_open(NULL, &f->s3)))
        return rc;
    keel__man_key(mkey, sizeof mkey, prefix, 1);
    void *md;
    size_t ml;
    keel_manifest m;
    if ((rc = keel__s3_get(f->s3, f->b, mkey, NULL, KEEL_MAN_MAX_BYTES, &md,
                           &ml, NULL)))
        return rc;
    rc = keel__manifest_decode(md, ml, mkey, 1, &m);
    keel__free(md);
    if (rc)
        return rc;
    keel__pack_key(f->key, sizeof f->key, prefix, &m.packs[0]);
    keel__manifest_free(&m);
    return keel__s3_get(f->s3, f->b, f->key, NULL, 1u << 30, &f->orig,
                        &f->len, NULL);
}

/* KEEL_OK, or the error, with nothing left open. */
static int
pack_fixture_open(pack_fixture *f, const char *name, uint64_t seed)
{
    int rc = pack_open(f, name, seed);
    if (rc)
        pack_fixture_close(f);
    return rc;
}

/* Searches r; KEEL_EIO expected for every query (rc_all 1) or at least one. */
static int
search_rc(keel_index *r, uint64_t seed)
{
    float *q = td_random(NQ, DIM, seed);
    int rc = KEEL_OK;
    for (int i = 0; i < NQ && !rc; i++) {
        keel_result res[K];
        size_t n;
        rc = keel_search(r, q + i * DIM, K, NULL, res, &n);
    }
    free(q);
    return rc;
}

TEST(a_truncated_or_damaged_pack_fails_closed_and_heals)
{
    NEED_SERVER();
    pack_fixture f;
    CHECK_OK(pack_fixture_open(&f, "damage", 51));
    CHECK(f.len > 4 * G);
    for (int mode = 0; mode < 2; mode++) {
        keel_index *r;
        CHECK_OK(keel_open_reader(f.url, NULL, &r)); /* header pages in */
        uint8_t *bad = malloc(f.len);
        memcpy(bad, f.orig, f.len);
        size_t bad_len = f.len;
        if (mode == 0) {
            bad_len = 3 * G + 100; /* truncated past the header pages */
        } else {
            for (size_t off = 3 * G + 77; off < f.len; off += G)
                bad[off] ^= 0x20; /* a flipped byte in every other page */
        }
        CHECK_OK(keel__s3_put(f.s3, f.b, f.key, bad, bad_len, 0, NULL));
        /* the announced path fails */
        CHECK_ERR(search_rc(r, 61), KEEL_EIO);
        CHECK_MSG_HAS(mode == 0 ? "pack/" : "does not match");
        CHECK_MSG_HAS("help:");
        /* a fault (a page nobody announced) fails closed too */
        float v[DIM];
        int grc = KEEL_OK;
        for (uint64_t id = 0; id < N && !grc; id += 37)
            grc = keel_get(r, id, v);
        CHECK_ERR(grc, KEEL_EIO);
        /* the fault cleared: the next calls work and are right */
        CHECK_OK(keel__s3_put(f.s3, f.b, f.key, f.orig, f.len, 0, NULL));
        CHECK(same_results(f.w, r, 62, NULL));
        for (uint64_t id = 0; id < N; id += 37) {
            float u[DIM];
            CHECK_OK(keel_get(r, id, v));
            CHECK_OK(keel_get(f.w, id, u));
            CHECK(memcmp(u, v, sizeof u) == 0);
        }
        free(bad);
        keel_close(r);
    }
    pack_fixture_close(&f);
}


/* A pack that is gone (404, as after a prune under a reader of a removed
** version): a search, the announced path, fails with the object, the
** status and the store's code, never as a local disk's failure; and heals
** once the pack is back. */
TEST(a_missing_pack_fails_a_search_naming_the_object_and_the_status)
{
    NEED_SERVER();
    pack_fixture f;
    CHECK_OK(pack_fixture_open(&f, "gone", 57));
    keel_index *r;
    CHECK_OK(keel_open_reader(f.url, NULL, &r)); /* header pages in */
    CHECK_OK(keel__s3_delete(f.s3, f.b, f.key));
    CHECK_ERR(search_rc(r, 63), KEEL_EIO);
    printf("     %.*s\n", (int)strcspn(keel_errmsg(), "\n"), keel_errmsg());
    CHECK_MSG_HAS(f.key);
    CHECK_MSG_HAS("404");
    CHECK_MSG_HAS("NoSuchKey");
    CHECK_MSG_HAS("help:");
    CHECK(strstr(keel_errmsg(), "check the disk") == NULL);
    CHECK_OK(keel__s3_put(f.s3, f.b, f.key, f.orig, f.len, 0, NULL));
    CHECK(same_results(f.w, r, 64, NULL));
    keel_close(r);
    pack_fixture_close(&f);
}

/* The uid of the second user the cache test runs as, made if missing
** (root only); 0 when there is none to be had. */
static uid_t
second_user(gid_t *gid)
{
    struct passwd *pw = getpwnam("keel-cache-test");
    if (!pw && system("useradd --system --no-create-home --shell "
                      "/usr/sbin/nologin keel-cache-test >/dev/null 2>&1") == 0)
        pw = getpwnam("keel-cache-test");
    if (!pw || pw->pw_uid == 0)
        return 0;
    *gid = pw->pw_gid;
    return pw->pw_uid;
}

/* Mode bits of each page file in dir into modes (at most cap); how many. */
static size_t
page_modes(const char *dir, unsigned *modes, size_t cap, char *one,
           size_t one_cap)
{
    DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < cap) {
        if (e->d_name[0] == '.')
            continue;
        char p[1200];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            modes[n++] = st.st_mode & 07777;
            snprintf(one, one_cap, "%s", p);
        }
    }
    if (d)
        closedir(d);
    return n;
}

/* The disk cache holds the index's vectors: its page files are 0600; a
** directory other users may write, or that another user owns, is refused;
** a second user cannot read a page (root makes one with useradd; else
** that part says why it is skipped). */
TEST(the_disk_cache_is_private_to_its_user)
{
    NEED_SERVER();
    char url[256], dir[128], theirs[128];
    keel_index *w = published(url, sizeof url, "private", 58, N);
    CHECK(w != NULL);
    /* under /tmp, which every user may traverse: only the modes below
     * keep another user out */
    snprintf(dir, sizeof dir, "/tmp/keel-cache-%d", (int)getpid());
    snprintf(theirs, sizeof theirs, "/tmp/keel-cache-%d-theirs",
             (int)getpid());
    keel_options o = {.cache_dir = dir};
    keel_index *r;
    CHECK_OK(keel_open_reader(url, &o, &r));
    CHECK(same_results(w, r, 65, NULL));
    keel_close(r);
    struct stat st;
    CHECK(stat(dir, &st) == 0 && (st.st_mode & 07777) == 0700);
    unsigned modes[4096];
    char one[1200] = "";
    size_t n = page_modes(dir, modes, 4096, one, sizeof one), bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += modes[i] != 0600;
    printf("     %zu page files, %zu not mode 0600\n", n, bad);
    CHECK(n > 0);
    CHECK_EQ(bad, 0);
    /* a directory others may write */
    CHECK(chmod(dir, 0777) == 0);
    CHECK_ERR(keel_open_reader(url, &o, &r), KEEL_EINVAL);
    CHECK_MSG_HAS("other users may write it (mode 0777)");
    CHECK_MSG_HAS("help: chmod go-w");
    CHECK(chmod(dir, 0770) == 0);
    CHECK_ERR(keel_open_reader(url, &o, &r), KEEL_EINVAL);
    CHECK(chmod(dir, 0755) == 0); /* others may look, not write */
    CHECK_OK(keel_open_reader(url, &o, &r));
    keel_close(r);
    gid_t gid = 0;
    uid_t other = geteuid() == 0 ? second_user(&gid) : 0;
    if (!other) {
        printf("     second user: skipped (%s)\n",
               geteuid() ? "not root: useradd and setuid need root"
                         : "useradd failed");
    } else {
        /* a directory another user owns */
        CHECK(mkdir(theirs, 0700) == 0);
        CHECK(chown(theirs, other, gid) == 0);
        keel_options t = {.cache_dir = theirs};
        CHECK_ERR(keel_open_reader(url, &t, &r), KEEL_EINVAL);
        CHECK_MSG_HAS("belongs to user");
        /* the second user reads no page, and refuses this user's
         * directory for its own cache */
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            if (setgroups(0, NULL) || setgid(gid) || setuid(other))
                _exit(10);
            int fd = open(one, O_RDONLY);
            int code = fd >= 0 ? 1 : errno == EACCES ? 0 : 2;
            keel_index *x;
            if (keel_open_reader(url, &o, &x) != KEEL_EINVAL)
                code |= 4;
            _exit(code);
        }
        int wst;
        CHECK(waitpid(pid, &wst, 0) == pid);
        CHECK(WIFEXITED(wst));
        printf("     second user (uid %u): page %s, cache directory %s\n",
               (unsigned)other,
               WEXITSTATUS(wst) & 3 ? "READ" : "refused (EACCES)",
               WEXITSTATUS(wst) & 4 ? "USED" : "refused");
        CHECK_EQ(WEXITSTATUS(wst), 0);
        rmdir(theirs);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    keel_close(w);
}

TEST(open_names_a_wrong_key_a_missing_bucket_and_an_unreachable_server)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "errors", 71, N);
    CHECK(w != NULL);
    keel_index *r;
    char saved[512];
    set_env("AWS_SECRET_ACCESS_KEY", "not-the-secret", saved, sizeof saved);
    int rc = keel_open_reader(url, NULL, &r);
    restore_env("AWS_SECRET_ACCESS_KEY", saved);
    CHECK_ERR(rc, KEEL_EIO);
    CHECK_MSG_HAS("credentials");
    CHECK_MSG_HAS("help:");
    CHECK_ERR(keel_open_reader("s3://keel-no-such-bucket/x", NULL, &r),
              KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no bucket");
    char none[256];
    url_of(none, sizeof none, "never-published");
    CHECK_ERR(keel_open_reader(none, NULL, &r), KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no index is published");
    set_env("AWS_ENDPOINT_URL", "http://127.0.0.1:1", saved, sizeof saved);
    rc = keel_open_reader(url, NULL, &r);
    restore_env("AWS_ENDPOINT_URL", saved);
    CHECK_ERR(rc, KEEL_EIO);
    CHECK_MSG_HAS("connect");
    CHECK_MSG_HAS("help:");
    keel_close(w);
}

TEST(a_child_only_closes_and_the_parent_goes_on)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "fork", 91, N);
    CHECK(w != NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK(same_results(w, r, 92, NULL));
    pid_t pid = fork();
    if (pid == 0)
        _exit(keel_close(r) == KEEL_OK ? 0 : 1); /* no thread to touch */
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(same_results(w, r, 93, NULL));
    keel_close(r);
    keel_close(w);
}

struct searcher {
    keel_index *r;
    uint64_t seed;
    int rc;
};

static void *
search_thread(void *arg)
{
    struct searcher *s = arg;
    s->rc = search_rc(s->r, s->seed);
    return NULL;
}

TEST(many_threads_never_exceed_the_allowance)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "threads", 81, 8 * N);
    CHECK(w != NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    keel__cache_inflight_reset();
    enum { T = 12 };
    pthread_t t[T];
    struct searcher s[T];
    for (int i = 0; i < T; i++) {
        s[i] = (struct searcher){r, 200 + (uint64_t)i, 0};
        CHECK(pthread_create(&t[i], NULL, search_thread, &s[i]) == 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        CHECK_OK(s[i].rc);
    }
    uint64_t most = keel__cache_inflight_max();
    printf("     %d threads: at most %llu GETs in flight (allowance %d + one "
           "per batch + the fault thread), %llu GETs\n", T,
           (unsigned long long)most, KEEL_BR_ALLOWANCE,
           (unsigned long long)GETS(r));
    CHECK(most > 1);
    CHECK(most <= KEEL_BR_ALLOWANCE + T + 1);
    CHECK(same_results(w, r, 200, NULL));
    keel_close(r);
    keel_close(w);
}

/* KEEL_BATCH_READS_MAX_RUNS bounds a reader's GETs in flight: one search
** thread has at most that many out (its batches wait for their GETs, so
** the fault thread has nothing to fetch meanwhile); with warm, warm's
** two batches at once (warm.c WARM_LANES) add as many again each, and the
** fault thread one. */
TEST(max_runs_bounds_gets_in_flight)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "maxruns", 83, 8 * N);
    CHECK(w != NULL);
    static const uint32_t caps[] = {1, 4};
    for (size_t i = 0; i < 2; i++) {
        for (int warm = 0; warm < 2; warm++) {
            keel__br_set_max_runs(caps[i]);
            keel_options o = {.flags = warm ? KEEL_WARM : 0u};
            keel_index *r;
            /* With warm, counted from before the open: a warm that
             * finished before the search would leave nothing to count. */
            if (warm)
                keel__cache_inflight_reset();
            CHECK_OK(keel_open_reader(url, &o, &r));
            if (!warm)
                keel__cache_inflight_reset();
            CHECK_OK(search_rc(r, 300 + i));
            uint64_t most = keel__cache_inflight_max();
            printf("     cap %u%s: at most %llu GETs in flight, %llu GETs\n",
                   caps[i], warm ? ", warm" : "", (unsigned long long)most,
                   (unsigned long long)GETS(r));
            CHECK(most >= 1);
            CHECK(most <= (warm ? 3 * caps[i] + 1 : caps[i]));
            CHECK(same_results(w, r, 300 + i, NULL));
            keel_close(r);
        }
    }
    keel__br_set_max_runs(0);
    keel_close(w);
}

/* Searches r for the nq queries q (K results, ef 16); counts the results
** among the exact K nearest (truth, K per query); with w, 0 unless each
** answer equals w's bit for bit. -1 when a search fails. */
static long
beam_pass(keel_index *r, keel_index *w, const float *q, int nq,
          const uint64_t *truth)
{
    keel_search_params p = {.ef = 16};
    long hits = 0;
    for (int i = 0; i < nq; i++) {
        keel_result a[K], b[K];
        size_t na = 0, nb = 0;
        if (keel_search(r, q + i * DIM, K, &p, a, &na) ||
            (w && keel_search(w, q + i * DIM, K, &p, b, &nb)))
            return -1;
        if (w && na != nb)
            return 0;
        for (size_t j = 0; w && j < na; j++)
            if (a[j].id != b[j].id ||
                memcmp(&a[j].distance, &b[j].distance, 4) != 0)
                return 0;
        for (size_t j = 0; j < na; j++)
            for (int t = 0; t < K; t++)
                hits += a[j].id == truth[i * K + t];
    }
    return hits;
}

/* A cold walk's beam (batch_reads.h keel__br_beam): a first pass of
** searches with 4 expansions per step waits for fewer fetches in a row
** than with 1 and finds as many of the exact nearest; once a pass's pages
** are all in memory, its steps expand one each and answer bit for bit as
** the file. */
TEST(a_beam_walk_fetches_in_fewer_round_trips_finds_as_much)
{
    NEED_SERVER();
    char url[256];
    size_t n = 16 * N;
    keel_index *w = published(url, sizeof url, "beam", 91, n);
    CHECK(w != NULL);
    float *base = td_random(n, DIM, 91);
    float *q = td_random(NQ, DIM, 501);
    uint64_t *truth = malloc(NQ * K * sizeof *truth);
    for (int i = 0; i < NQ; i++)
        td_exact_knn(base, n, DIM, q + i * DIM, K, NULL, NULL, truth + i * K);
    free(base);
    static const uint32_t beams[2] = {1, 4};
    uint64_t rounds[2];
    long hits[2];
    /* Without the look-ahead, which also saves fetches (its own test). */
    keel__br_set_ahead(0);
    for (int b = 0; b < 2; b++) {
        keel__br_set_beam(beams[b]);
        keel_index *r;
        CHECK_OK(keel_open_reader(url, NULL, &r));
        uint64_t r0 = ROUNDS(r);
        hits[b] = beam_pass(r, NULL, q, NQ, truth);
        rounds[b] = ROUNDS(r) - r0;
        keel_close(r);
        CHECK(hits[b] > 0);
    }
    keel__br_set_ahead(-1);
    printf("     beam 1: %llu fetches in a row, recall %.3f; beam 4: %llu, "
           "%.3f\n", (unsigned long long)rounds[0],
           (double)hits[0] / (NQ * K), (unsigned long long)rounds[1],
           (double)hits[1] / (NQ * K));
    CHECK(rounds[1] < rounds[0]);
    CHECK(hits[1] >= hits[0]);
    /* Once in: a pass of one expansion per step brings its pages in, and
     * the same pass with a beam of 4 fetches nothing, so every step
     * expands one: the file's answers. */
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    keel__br_set_beam(1);
    CHECK(beam_pass(r, w, q, NQ, truth) > 0);
    keel__br_set_beam(4);
    uint64_t r0 = ROUNDS(r);
    CHECK(beam_pass(r, w, q, NQ, truth) > 0);
    CHECK_U64(ROUNDS(r) - r0, 0);
    keel__br_set_beam(0);
    keel_close(r);
    free(truth);
    free(q);
    keel_close(w);
}

/* A remote walk's look-ahead (batch_reads.h keel__br_ahead) only adds
** ranges to fetches the walk makes anyway: the same results, never more
** fetches in a row, and on a graph wider than one fetch, fewer. */
TEST(looking_ahead_fetches_in_fewer_round_trips_alike)
{
    NEED_SERVER();
    char url[256];
    keel_index *w = published(url, sizeof url, "ahead", 89, 16 * N);
    CHECK(w != NULL);
    uint64_t rounds[2], gets[2];
    static const int aheads[2] = {0, (int)KEEL_BR_AHEAD};
    for (int i = 0; i < 2; i++) {
        keel__br_set_ahead(aheads[i]);
        keel_index *r;
        CHECK_OK(keel_open_reader(url, NULL, &r));
        uint64_t r0 = ROUNDS(r), g0 = GETS(r);
        CHECK(same_results(w, r, 401, NULL));
        rounds[i] = ROUNDS(r) - r0;
        gets[i] = GETS(r) - g0;
        keel_close(r);
    }
    keel__br_set_ahead(-1);
    printf("     look-ahead 0: %llu fetches in a row, %llu GETs; %d: %llu, "
           "%llu\n", (unsigned long long)rounds[0], (unsigned long long)gets[0],
           aheads[1], (unsigned long long)rounds[1],
           (unsigned long long)gets[1]);
    CHECK(rounds[0] > 0);
    CHECK(rounds[1] < rounds[0]);
    /* A memory bound too small for a fetch with the look-ahead's ranges
     * turns it off: installing them would evict what the walk fetched a
     * step before, each page then coming back by a fault. */
    uint64_t faults[2];
    for (int i = 0; i < 2; i++) {
        keel__br_set_ahead(aheads[i]);
        keel_options small = {.memory_cache_bytes = 1}; /* 8 MiB */
        keel_index *r;
        CHECK_OK(keel_open_reader(url, &small, &r));
        CHECK_U64(keel__br_remote_ahead(r->st, r->st->g.M0, 1), 0);
        uint64_t f0 = FAULTS(r);
        CHECK(same_results_of(w, r, 402, NULL, NQ_SMALL));
        faults[i] = FAULTS(r) - f0;
        keel_close(r);
    }
    keel__br_set_ahead(-1);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r)); /* 1 GiB */
    CHECK_U64(keel__br_remote_ahead(r->st, r->st->g.M0, 1), KEEL_BR_AHEAD);
    keel_close(r);
    printf("     8 MiB bound: %llu faults with look-ahead 0, %llu with %d\n",
           (unsigned long long)faults[0], (unsigned long long)faults[1],
           aheads[1]);
    CHECK_U64(faults[1], faults[0]);
    keel_close(w);
}

/* Warm brings every page with data in (the id table too); then searches
** announce nothing and fetch nothing, and give the file's results. */
TEST(a_finished_warm_leaves_nothing_to_fetch)
{
    NEED_SERVER();
    /* Twelve flushes: the id table grows and leaves old ones in the file,
     * which the image holds as zero pages (publish.c invariant 9). */
    char url[256];
    url_of(url, sizeof url, "warmall");
    keel_options wo = {.metric = KEEL_L2, .precision = KEEL_F32};
    keel_index *w;
    CHECK_OK(keel_open(test_path("warmall.keel"), DIM, &wo, &w));
    for (int b = 0; b < 12; b++) {
        float *v = td_random(N, DIM, 85 + (uint64_t)b);
        CHECK_OK(keel_add_batch(w, v, N, NULL, NULL));
        CHECK_OK(keel_flush(w));
        free(v);
    }
    uint64_t sent = 0;
    keel_publish_options po = {.uploaded = &sent};
    CHECK_OK(keel_publish(w, url, &po));
    keel_stats ws;
    CHECK_OK(keel_stat(w, &ws));
    printf("     12 flushes: %llu bytes published, %llu allocated in the file\n",
           (unsigned long long)sent, (unsigned long long)ws.allocated_bytes);
    keel_options o = {.flags = KEEL_WARM};
    keel_index *r;
    CHECK_OK(keel_open_reader(url, &o, &r));
    CHECK(warm_finished(r));
    keel_cache_counters n;
    CHECK_OK(keel__remote_counters(r, &n));
    CHECK_EQ(n.missing, 0);
    CHECK(n.warm_gets > 0);
    CHECK(keel__cache_complete(r->st->remote));
    uint64_t gets = GETS(r), faults = FAULTS(r);
    CHECK(same_results(w, r, 400, NULL));
    CHECK_EQ(GETS(r), gets);
    CHECK_EQ(FAULTS(r), faults);
    keel_close(r);
    keel_close(w);
}

TEST_MAIN()
