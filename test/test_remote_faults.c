/* test_remote_faults.c -- readers and publishers of published indexes when
** the object store fails, stalls or is slow.
**
** Every test puts test/lib/s3proxy.c between keel and the real Ceph RADOS
** Gateway `make test-objstore` starts: the proxy forwards each request byte
** for byte unless told to answer it with a 5xx itself, to hold it without
** an answer, or to delay it. Indexes are published directly; readers (and,
** in the publish test, the publisher) go through the proxy, by pointing
** AWS_ENDPOINT_URL at it while their clients are made.
**
** What must hold: a failure the retries do not absorb is KEEL_EIO naming
** the status and the object, in bounded time; one they absorb changes no
** result; nothing a failure touched is cached or adopted; the handle keeps
** serving its version and works again once the store does. Results are
** compared with the local file's, id for id and distance bit for bit.
** Without KEEL_TEST_BUCKET the tests say so and pass.
*/
#include "test.h"
#define OBJSTORE_AREA "test-remote-faults"
#include "lib/objstore.h"
#include "lib/testdata.h"
#include "lib/s3proxy.h"
#include "lib/objects.h"

#include "base/internal.h"
#include "api/api.h"
#include "api/publish.h"
#include "cache/cache.h"
#include "s3/s3.h"

#include <signal.h>
#include <sys/wait.h>

#define DIM 32
#define N 3000
#define NQ 30
#define K 10
#define STORM 100000u /* more failures than any test makes requests */
#define ATTEMPTS 4    /* s3.h: tries of a retryable request, in all */

/* --- the proxy -------------------------------------------------------------- */

/* Requests a reader made: ranged GETs of pages, and requests for manifests
** and the hint, each counted once however often it was tried. */
static uint64_t
reader_requests(keel_index *r)
{
    keel_cache_counters n = reader_counters(r);
    return n.gets + n.meta_gets;
}
#define SEQ(r) reader_counters(r).seq
#define DISK_HITS(r) reader_counters(r).disk_hits
#define META_GETS(r) reader_counters(r).meta_gets

/* --- indexes and results ----------------------------------------------------- */

/* An index of N vectors at path, published to url (directly) unless url is
** NULL; the writer stays open. */
static keel_index *
build(const char *path, const char *url, uint64_t seed)
{
    keel_index *w;
    if (keel_open(path, DIM, NULL, &w))
        return NULL;
    float *v = td_random(N, DIM, seed);
    int rc = keel_add_batch(w, v, N, NULL, NULL);
    free(v);
    if (rc || keel_flush(w) || (url && keel_publish(w, url, NULL))) {
        keel_close(w);
        return NULL;
    }
    return w;
}

/* The NQ queries of seed on both handles: the same ids and distance bits
** (1), else a message and 0. */
static int
same_results(keel_index *a, keel_index *b, uint64_t seed)
{
    float *q = td_random(NQ, DIM, seed);
    int same = td_same_answers(a, b, q, NQ, DIM, K, NULL);
    free(q);
    return same;
}

/* The first query of seed on r: its return code. */
static int
one_search(keel_index *r, uint64_t seed)
{
    float *q = td_random(1, DIM, seed);
    keel_result res[K];
    size_t n = 0;
    int rc = keel_search(r, q, K, NULL, res, &n);
    free(q);
    return rc;
}

/* --- 5xx storms ----------------------------------------------------------------- */

/* A storm of status on every GET, longer than the retries, while a reader
** opened through the proxy searches cold: KEEL_EIO naming the status, the
** S3 code and the object, after ATTEMPTS tries of it. Then the storm
** clears: the same handle, and a second one on the same disk cache, search
** exactly like the local file. */
static void
storm_during_a_cold_search(int status, const char *code)
{
    char url[256], name[64];
    snprintf(name, sizeof name, "storm-%d", status);
    url_of(url, sizeof url, name);
    snprintf(name, sizeof name, "storm-%d.keel", status);
    keel_index *w = build(test_path(name), url, 11);
    CHECK(w != NULL);
    keel_index *local;
    CHECK_OK(keel_open_reader(test_path(name), NULL, &local));
    snprintf(name, sizeof name, "cache-storm-%d", status);
    keel_options o = {.cache_dir = test_subdir(name)};
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, &o, &r));
    s3proxy_fail_only_gets(p, 1);
    s3proxy_fail_next(p, STORM, status);
    double t0 = test_now();
    CHECK_ERR(one_search(r, 1), KEEL_EIO);
    double dt = test_now() - t0;
    char want[64];
    snprintf(want, sizeof want, "answered %d %s after %d attempts", status,
             code, ATTEMPTS);
    CHECK_MSG_HAS(want);
    CHECK_MSG_HAS("GET http://");
    CHECK_MSG_HAS("/pack/");
    CHECK_MSG_HAS(url);
    CHECK_MSG_HAS("help: the object store is failing");
    s3proxy_counters n = proxy_counters(p);
    printf("     %d storm: KEEL_EIO in %.2f s after %llu failed GETs\n",
           status, dt, (unsigned long long)n.faults);
    CHECK(n.faults >= ATTEMPTS);
    CHECK(dt < 5.0);
    /* Every query fails while it lasts; so does a load nobody announced
     * (keel_get: the fault thread's fetch fails, the call sees it). */
    for (uint64_t s = 2; s < 5; s++)
        CHECK_ERR(one_search(r, s), KEEL_EIO);
    float v[DIM], u[DIM];
    int grc = KEEL_OK;
    for (uint64_t id = 0; id < N && grc == KEEL_OK; id += 37)
        grc = keel_get(r, id, v);
    CHECK_ERR(grc, KEEL_EIO);
    snprintf(want, sizeof want, "answered %d %s", status, code);
    CHECK_MSG_HAS(want);
    s3proxy_clear(p);
    CHECK(same_results(r, local, 7));
    CHECK(same_results(r, local, 1));
    for (uint64_t id = 0; id < N; id += 37) {
        CHECK_OK(keel_get(r, id, v));
        CHECK_OK(keel_get(local, id, u));
        CHECK(memcmp(u, v, sizeof u) == 0);
    }
    /* A second handle on the same disk cache reads what the first cached,
     * none of it from the storm. */
    keel_index *r2;
    CHECK_OK(keel_open_reader(url, &o, &r2));
    CHECK(same_results(r2, local, 7));
    CHECK(same_results(r2, local, 1));
    CHECK(DISK_HITS(r2) > 0);
    CHECK_OK(keel_check(r2));
    keel_close(r2);
    keel_close(r);
    proxy_down(p);
    keel_close(local);
    keel_close(w);
}

TEST(a_503_storm_longer_than_the_retries_fails_the_search_then_heals)
{
    NEED_SERVER();
    storm_during_a_cold_search(503, "SlowDown");
}

TEST(a_500_storm_longer_than_the_retries_fails_the_search_then_heals)
{
    NEED_SERVER();
    storm_during_a_cold_search(500, "InternalError");
}

/* Fewer failures than a request's retries (5xx answers, or answers cut
** off mid-body: a reset): every search succeeds with the file's results,
** and the proxy saw each failed try as one more request than the reader
** made. */
TEST(a_storm_shorter_than_the_retries_is_retried_away)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "short");
    keel_index *w = build(test_path("short.keel"), url, 21);
    CHECK(w != NULL);
    keel_index *local;
    CHECK_OK(keel_open_reader(test_path("short.keel"), NULL, &local));
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    static const struct {
        int status, only_gets; /* status 0: cut after `cut` bytes */
        unsigned n, cut;
    } storms[] = {{503, 1, ATTEMPTS - 1, 0}, {500, 0, ATTEMPTS - 1, 0},
                  {503, 0, 1, 0}, {0, 1, ATTEMPTS - 1, 5000},
                  {0, 1, 2, 0}};
    for (size_t i = 0; i < sizeof storms / sizeof storms[0]; i++) {
        keel_index *r;
        CHECK_OK(keel_open_reader(url, NULL, &r)); /* cold, no disk cache */
        s3proxy_counters a = proxy_counters(p);
        uint64_t made = reader_requests(r);
        s3proxy_fail_only_gets(p, storms[i].only_gets);
        if (storms[i].status)
            s3proxy_fail_next(p, storms[i].n, storms[i].status);
        else
            s3proxy_cut_after(p, 0, storms[i].n, storms[i].cut);
        CHECK(same_results(r, local, 31 + i));
        s3proxy_counters b = proxy_counters(p);
        made = reader_requests(r) - made;
        printf("     %u x %s %u: %llu requests made, %llu seen by the "
               "proxy\n", storms[i].n, storms[i].status ? "status" : "cut at",
               storms[i].status ? (unsigned)storms[i].status : storms[i].cut,
               (unsigned long long)made,
               (unsigned long long)(b.requests - a.requests));
        CHECK_EQ(b.faults - a.faults + b.cuts - a.cuts, storms[i].n);
        CHECK_EQ(b.requests - a.requests, made + storms[i].n);
        CHECK(made > storms[i].n);
        keel_close(r);
    }
    proxy_down(p);
    keel_close(local);
    keel_close(w);
}

/* --- a stall ------------------------------------------------------------------ */

TEST(a_stalled_get_times_out_in_bounded_time_and_the_next_search_works)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "stall");
    keel_index *w = build(test_path("stall.keel"), url, 41);
    CHECK(w != NULL);
    keel_index *local;
    CHECK_OK(keel_open_reader(test_path("stall.keel"), NULL, &local));
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    setenv("KEEL_S3_STALL_TIMEOUT_S", "1", 1); /* read as clients are made */
    s3proxy_fail_only_gets(p, 1);
    for (int round = 0; round < 2; round++) {
        keel_index *r; /* cold: its first search must fetch */
        CHECK_OK(keel_open_reader(url, NULL, &r));
        s3proxy_stall_next(p, 1);
        double t0 = test_now();
        int rc = one_search(r, 50 + (uint64_t)round);
        double dt = test_now() - t0;
        printf("     stalled GET: search returned %d in %.2f s\n", rc, dt);
        CHECK_ERR(rc, KEEL_EIO);
        CHECK_MSG_HAS("timed out");
        CHECK_MSG_HAS("stall timeout 1 s");
        CHECK_MSG_HAS("/pack/");
        CHECK(dt >= 0.9); /* it was the stall that ended it */
        CHECK(dt < 5.0);
        CHECK_EQ(proxy_counters(p).stalls, round + 1);
        CHECK(same_results(r, local, 50 + (uint64_t)round));
        keel_close(r);
    }
    unsetenv("KEEL_S3_STALL_TIMEOUT_S");
    proxy_down(p);
    keel_close(local);
    keel_close(w);
}

/* Close while warm's GETs stall: warm's fetches are abandoned within a
** poll, not waited out to the stall timeout (20 s here). */
TEST(closing_while_warm_s_gets_stall_returns_at_once)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "warmstall");
    keel_index *w = build(test_path("warmstall.keel"), url, 43);
    CHECK(w != NULL);
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    setenv("KEEL_S3_STALL_TIMEOUT_S", "20", 1); /* read as clients are made */
    s3proxy_fail_only_gets(p, 1);
    for (int round = 0; round < 2; round++) {
        keel_index *r;
        CHECK_OK(keel_open_reader(url, NULL, &r));
        s3proxy_stall_next(p, STORM); /* every GET from now on */
        CHECK_OK(keel_warm(r));
        usleep(300000);               /* warm waits on stalled GETs */
        double t0 = test_now();
        CHECK_OK(keel_close(r));
        double dt = test_now() - t0;
        printf("     close while warm's GETs stall: %.2f s\n", dt);
        CHECK(proxy_counters(p).stalls > 0);
        CHECK(dt < 5.0); /* 20 s before the fix */
        s3proxy_stall_next(p, 0);
    }
    unsetenv("KEEL_S3_STALL_TIMEOUT_S");
    proxy_down(p);
    keel_close(w);
}

/* --- versions under a storm ---------------------------------------------------- */

TEST(open_and_refresh_under_a_storm_fail_clearly_and_keep_the_pinned_version)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "refresh");
    keel_index *w = build(test_path("refresh.keel"), url, 61);
    CHECK(w != NULL);
    CHECK_OK(keel_backup(w, test_path("refresh-v1.keel")));
    keel_index *v1;
    CHECK_OK(keel_open_reader(test_path("refresh-v1.keel"), NULL, &v1));
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK(same_results(r, v1, 1)); /* these searches' pages are now in */
    /* version 2, published directly */
    go_direct();
    float *more = td_random(300, DIM, 62);
    CHECK_OK(keel_add_batch(w, more, 300, NULL, NULL));
    free(more);
    for (uint64_t id = 0; id < N; id += 50)
        CHECK_OK(keel_delete(w, id));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL));
    via(p);
    /* Open under a storm on every request: the hint cannot be read (it
     * is only a hint), and the listing of the versions fails after its
     * tries. */
    s3proxy_fail_next(p, STORM, 503);
    keel_index *x = NULL;
    CHECK_ERR(keel_open_reader(url, NULL, &x), KEEL_EIO);
    CHECK(x == NULL);
    CHECK_MSG_HAS(url);
    CHECK_MSG_HAS("listing the versions under");
    CHECK_MSG_HAS("/manifest/");
    CHECK_MSG_HAS("answered 503 SlowDown after 4 attempts");
    /* Three storms for refresh: on every request (the probe fails), on
     * GETs only (the new manifest's GET fails), and on GETs after the
     * hint and the manifest went through (the new version's header pages
     * fail: the switch must change nothing, every page the reader had
     * staying in memory). */
    static const struct {
        int only_gets;
        unsigned skip;
        const char *names;
    } storms[] = {{0, 0, "/manifest/"}, {1, 0, "/manifest/"}, {1, 2, "/pack/"}};
    for (size_t i = 0; i < sizeof storms / sizeof storms[0]; i++) {
        s3proxy_fail_only_gets(p, storms[i].only_gets);
        s3proxy_fail_after(p, storms[i].skip, STORM, 503);
        CHECK_ERR(keel_refresh(r), KEEL_EIO);
        printf("     refresh storm %zu: %.*s\n", i,
               (int)strcspn(keel_errmsg(), "\n"), keel_errmsg());
        CHECK_MSG_HAS("503");
        CHECK_MSG_HAS(storms[i].names);
        CHECK_MSG_HAS("help:");
        /* still version 1, searched from memory while the storm goes on */
        CHECK_EQ(SEQ(r), 1);
        CHECK_EQ(keel_count(r), N);
        CHECK(same_results(r, v1, 1));
        /* and after it, from the store, pages it never had */
        s3proxy_clear(p);
        CHECK(same_results(r, v1, 100 + i));
        CHECK_EQ(SEQ(r), 1);
    }
    CHECK_OK(keel_check(r));
    /* The storm over: the refresh moves to version 2. */
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 2);
    CHECK_EQ(keel_count(r), keel_count(w));
    CHECK(same_results(r, w, 2));
    CHECK_OK(keel_open_reader(url, NULL, &x));
    CHECK_EQ(SEQ(x), 2);
    CHECK(same_results(x, w, 3));
    keel_close(x);
    keel_close(r);
    proxy_down(p);
    keel_close(v1);
    keel_close(w);
}

/* --- publishing under a storm --------------------------------------------------- */

TEST(publish_under_a_storm_fails_clearly_and_nothing_half_published_is_adopted)
{
    NEED_SERVER();
    char dry[256], url[256];
    url_of(dry, sizeof dry, "publish-dry");
    url_of(url, sizeof url, "publish");
    keel_index *w = build(test_path("publish.keel"), NULL, 71);
    CHECK(w != NULL);
    s3proxy *p = proxy_up(); /* the publisher's client goes through it */
    CHECK(p != NULL);
    /* Without faults, to count a first publish's requests: the hint, the
     * probe of manifest 1, the packs, the manifest, the hint again. */
    s3proxy_counters a = proxy_counters(p);
    CHECK_OK(keel_publish(w, dry, NULL));
    s3proxy_counters b = proxy_counters(p);
    uint64_t reqs = b.requests - a.requests;
    printf("     a first publish: %llu requests (%llu PUTs)\n",
           (unsigned long long)reqs, (unsigned long long)(b.puts - a.puts));
    CHECK(reqs >= 5);
    CHECK_EQ(b.faults, 0);
    /* A storm on every request: nothing is written. */
    s3proxy_fail_next(p, STORM, 503);
    CHECK_ERR(keel_publish(w, url, NULL), KEEL_EIO);
    CHECK_MSG_HAS("publishing to ");
    CHECK_MSG_HAS(url);
    CHECK_MSG_HAS("503");
    CHECK_EQ(obj_count(url, "/"), 0);
    /* A storm from the manifest on: the packs are up, the manifest never
     * is, and a reader finds no version to adopt. */
    s3proxy_fail_after(p, (unsigned)(reqs - 2), STORM, 500);
    CHECK_ERR(keel_publish(w, url, NULL), KEEL_EIO);
    CHECK_MSG_HAS("/manifest/");
    CHECK_MSG_HAS("answered 500 InternalError after 4 attempts");
    CHECK(obj_count(url, "/pack/") > 0);
    CHECK_EQ(obj_count(url, "/manifest/"), 0);
    s3proxy_clear(p);
    keel_index *r;
    CHECK_ERR(keel_open_reader(url, NULL, &r), KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no index is published");
    /* The storm over: the next publish is version 1, and reads right. */
    uint64_t sent = 0;
    keel_publish_options po = {.uploaded = &sent};
    CHECK_OK(keel_publish(w, url, &po));
    CHECK_EQ(obj_count(url, "/manifest/"), 1);
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_EQ(SEQ(r), 1);
    CHECK(same_results(r, w, 5));
    /* Version 2 under a storm on its manifest: readers keep version 1;
     * then it goes up and a refresh finds it. */
    float *more = td_random(200, DIM, 72);
    CHECK_OK(keel_add_batch(w, more, 200, NULL, NULL));
    free(more);
    CHECK_OK(keel_flush(w));
    s3proxy_fail_next(p, STORM, 503);
    CHECK_ERR(keel_publish(w, url, NULL), KEEL_EIO);
    s3proxy_clear(p);
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 1);
    CHECK_EQ(keel_count(r), N);
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 2);
    CHECK_EQ(keel_count(r), N + 200);
    CHECK(same_results(r, w, 6));
    keel_close(r);
    proxy_down(p);
    keel_close(w);
}

/* The manifest's create reaches the store but its answer is lost (the
** connection resets): the retried create finds the manifest there. It is
** this publish's own, so the publish succeeded; it must not report that
** another publisher won, nor leave a version that is not its index. */
TEST(a_lost_answer_to_the_manifest_create_is_not_another_publisher)
{
    NEED_SERVER();
    char dry[256], url[256];
    url_of(dry, sizeof dry, "lost-dry");
    url_of(url, sizeof url, "lost");
    keel_index *w = build(test_path("lost.keel"), NULL, 91);
    CHECK(w != NULL);
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    s3proxy_counters a = proxy_counters(p);
    CHECK_OK(keel_publish(w, dry, NULL));
    uint64_t reqs = proxy_counters(p).requests - a.requests;
    /* every request before the manifest's goes through; its answer (and
     * then, in a second round, half of its head) is lost */
    for (int round = 0; round < 2; round++) {
        char u[300];
        snprintf(u, sizeof u, "%s-%d", url, round);
        a = proxy_counters(p);
        s3proxy_cut_after(p, (unsigned)(reqs - 2), 1, round ? 20 : 0);
        int rc = keel_publish(w, u, NULL);
        s3proxy_counters b = proxy_counters(p);
        printf("     answer cut after %d bytes: publish returned %d (%s)\n",
               round ? 20 : 0, rc, rc ? keel_errmsg() : "ok");
        CHECK_EQ(b.cuts - a.cuts, 1);
        CHECK_OK(rc);
        CHECK_EQ(obj_count(u, "/manifest/"), 1);
        keel_index *r;
        CHECK_OK(keel_open_reader(u, NULL, &r));
        CHECK_EQ(SEQ(r), 1);
        CHECK(same_results(r, w, 8));
        keel_close(r);
        /* the next publish is version 2 */
        CHECK_OK(keel_delete(w, (uint64_t)round));
        CHECK_OK(keel_flush(w));
        CHECK_OK(keel_publish(w, u, NULL));
        CHECK_EQ(obj_count(u, "/manifest/"), 2);
    }
    proxy_down(p);
    keel_close(w);
}

/* --- latency -------------------------------------------------------------------- */

TEST(a_20_ms_delay_on_every_request_changes_no_result)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "delay");
    keel_index *w = build(test_path("delay.keel"), url, 81);
    CHECK(w != NULL);
    keel_index *local;
    CHECK_OK(keel_open_reader(test_path("delay.keel"), NULL, &local));
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    s3proxy_set_delay_ms(p, 20);
    double t0 = test_now();
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    double t_open = test_now() - t0;
    uint64_t opened = reader_requests(r), meta = META_GETS(r);
    t0 = test_now();
    CHECK_OK(one_search(r, 9));
    double t_first = test_now() - t0;
    t0 = test_now();
    CHECK(same_results(r, local, 9));
    double t_all = test_now() - t0;
    s3proxy_counters n = proxy_counters(p);
    printf("     open %.3f s (%llu requests), first search %.3f s, %d "
           "searches %.3f s; %llu GETs, at most %llu requests at once\n",
           t_open, (unsigned long long)opened, t_first, NQ, t_all,
           (unsigned long long)n.gets, (unsigned long long)n.max_active);
    /* Every request was delayed, and each the reader made reached the
     * store once: no retry, no timeout. */
    CHECK_EQ(n.delayed, n.requests);
    CHECK_EQ(n.requests, reader_requests(r));
    CHECK_EQ(n.faults + n.stalls, 0);
    /* The open: the hint, then the hinted manifest with the probe of the
     * next one beside it, then the header pages, one after another; the
     * first search needs at least one round trip. */
    CHECK_EQ(meta, 3);
    CHECK(t_open >= 0.020 * 3);
    CHECK(t_first >= 0.020);
    /* Searches put several GETs on the wire at once: their delays overlap
     * (a per-request latency, not a queue). */
    CHECK(n.max_active > 1);
    keel_close(r);
    proxy_down(p);
    keel_close(local);
    keel_close(w);
}


/* --- versions: a hint that cannot be read, a store that says yes to all ----- */

/* Three versions, pruned to the newest; then every try of the GET of
** `latest` answers 503 (all ATTEMPTS of one request): a reader opens the
** newest version, and the publish after is version 4, not a second
** version 1; after a prune keeping one, readers open version 4. */
TEST(a_hint_lost_to_a_503_storm_after_a_prune_never_forks_the_versions)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "hint-storm");
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    go_direct(); /* the versions go up directly */
    keel_index *w = build(test_path("hint-storm.keel"), url, 81);
    CHECK(w != NULL);
    CHECK_OK(obj_add_flush(w, 100, DIM, 82));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(obj_add_flush(w, 100, DIM, 83));
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_OK(keel_prune(url, 1, NULL));
    CHECK_EQ(obj_count(url, "/manifest/"), 1);
    via(p);
    s3proxy_fail_only_key(p, "/latest");
    s3proxy_fail_only_gets(p, 1);
    s3proxy_fail_next(p, ATTEMPTS, 503);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_EQ(proxy_counters(p).faults, ATTEMPTS);
    CHECK_EQ(SEQ(r), 3);
    CHECK_EQ(keel_count(r), N + 200);
    CHECK_OK(obj_add_flush(w, 100, DIM, 84));
    s3proxy_fail_next(p, ATTEMPTS, 503);
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_EQ(proxy_counters(p).faults, 2 * ATTEMPTS);
    CHECK_EQ(obj_count(url, "/manifest/"), 2);
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 4);
    CHECK_EQ(keel_count(r), N + 300);
    s3proxy_clear(p);
    go_direct();
    CHECK_OK(keel_prune(url, 1, NULL));
    CHECK_OK(obj_set(url, "latest", NULL, 0));
    keel_index *r2;
    CHECK_OK(keel_open_reader(url, NULL, &r2));
    CHECK_EQ(SEQ(r2), 4);
    CHECK(same_results(r2, w, 85));
    keel_close(r2);
    keel_close(r);
    proxy_down(p);
    keel_close(w);
}

/* A store that answers 200 to every HEAD (every version "exists"): open,
** refresh, searches and publish each end in bounded time and requests,
** and at the version the listing names. */
TEST(a_store_that_says_every_version_exists_is_walked_a_bounded_way)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "head-ok");
    keel_index *w = build(test_path("head-ok.keel"), url, 91);
    CHECK(w != NULL);
    CHECK_OK(obj_add_flush(w, 100, DIM, 92));
    CHECK_OK(keel_publish(w, url, NULL));
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    s3proxy_head_always_ok(p, 1);
    alarm(120); /* an endless walk fails the test, not the machine */
    double t0 = test_now();
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    s3proxy_counters a = proxy_counters(p);
    printf("     open: %llu HEADs, %llu requests, %.2f s\n",
           (unsigned long long)a.heads, (unsigned long long)a.requests,
           test_now() - t0);
    CHECK(a.heads <= KEEL_VERSION_WALK + 1);
    CHECK_EQ(SEQ(r), 2);
    CHECK_EQ(keel_count(r), N + 100);
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 2);
    CHECK(same_results(r, w, 93));
    s3proxy_counters b = proxy_counters(p);
    CHECK(b.heads - a.heads <= KEEL_VERSION_WALK + 1);
    CHECK_OK(obj_add_flush(w, 100, DIM, 94));
    CHECK_OK(keel_publish(w, url, NULL));
    s3proxy_counters c = proxy_counters(p);
    printf("     refresh: %llu HEADs; publish: %llu HEADs\n",
           (unsigned long long)(b.heads - a.heads),
           (unsigned long long)(c.heads - b.heads));
    CHECK(c.heads - b.heads <= KEEL_VERSION_WALK + 2);
    CHECK_EQ(obj_count(url, "/manifest/"), 3);
    CHECK_OK(keel_refresh(r));
    CHECK_EQ(SEQ(r), 3);
    CHECK_EQ(keel_count(r), N + 200);
    CHECK(same_results(r, w, 95));
    alarm(0);
    keel_close(r);
    proxy_down(p);
    keel_close(w);
}


/* --- a publisher killed at every request ------------------------------------- */

/* The packs manifest seq of url names, asked of the gateway directly; -1
** on an error. */
static long
named_packs(const char *url, uint64_t seq)
{
    char b[64], prefix[1024], key[1400];
    keel_s3_config cfg = {.endpoint = obj_gateway()};
    keel_s3 *s3;
    if (keel__s3_url_parse(url, b, sizeof b, prefix, sizeof prefix) ||
        keel__s3_open(&cfg, &s3))
        return -1;
    keel__man_key(key, sizeof key, prefix, seq);
    void *d;
    size_t n;
    keel_manifest m;
    long packs = -1;
    if (keel__s3_get(s3, b, key, NULL, KEEL_MAN_MAX_BYTES, &d, &n, NULL) ==
        KEEL_OK) {
        if (keel__manifest_decode(d, n, key, seq, &m) == KEEL_OK) {
            packs = (long)m.npacks;
            keel__manifest_free(&m);
        }
        keel__free(d);
    }
    keel__s3_close(s3);
    return packs;
}

/* A publish (from a reader of the file, in a child process, through the
** proxy) is killed with SIGKILL while the proxy holds its k-th request,
** for k = 0, 1, ... until one gets through: after each kill a reader
** opens version 1 whole (or version 2, once the kill came after its
** manifest), the next publish works, and after one more version a prune
** leaves no pack that a kept manifest does not name. */
TEST(a_publisher_killed_at_every_request_leaves_nothing_half_made)
{
    NEED_SERVER();
    char url[256], path[600];
    url_of(url, sizeof url, "kill-each");
    snprintf(path, sizeof path, "%s", test_path("kill-each.keel"));
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    go_direct();
    keel_index *w = build(path, url, 101);
    CHECK(w != NULL);
    CHECK_OK(obj_add_flush(w, 400, DIM, 102));
    int kills = 0, committed = 0, k = 0;
    for (; k < 64 && !committed; k++) {
        s3proxy_clear(p);
        s3proxy_stall_after(p, (unsigned)k, 1);
        uint64_t stalls = proxy_counters(p).stalls;
        via(p);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            keel_index *r;
            keel_publish_options po = {.pack_bytes = 1u << 17};
            _exit(keel_open_reader(path, NULL, &r) ||
                          keel_publish(r, url, &po)
                      ? 1
                      : 0);
        }
        go_direct();
        int st = 0, done = 0;
        for (int t = 0; t < 3000 && !done; t++) {
            if (proxy_counters(p).stalls > stalls)
                break; /* the child waits on request k */
            done = waitpid(pid, &st, WNOHANG) == pid;
            if (!done) {
                struct timespec ts = {0, 2000000L};
                nanosleep(&ts, NULL);
            }
        }
        if (!done) {
            kill(pid, SIGKILL);
            CHECK(waitpid(pid, &st, 0) == pid);
            kills++;
        } else {
            CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "the publish with nothing held failed");
        }
        long man = obj_count(url, "/manifest/");
        CHECK(man == 1 || man == 2);
        committed = man == 2;
        keel_index *r;
        CHECK_OK(keel_open_reader(url, NULL, &r));
        CHECK_EQ(SEQ(r), (uint64_t)man);
        CHECK_EQ(keel_count(r), man == 2 ? N + 400 : N);
        if (man == 2)
            CHECK(same_results(r, w, 103));
        keel_close(r);
    }
    printf("     %d publishes killed at requests 0..%d, then one went "
           "through\n", kills, k - 1);
    CHECK(committed);
    CHECK(kills >= 5);
    /* a version after it, a second later; then the leftovers go */
    struct timespec sec = {1, 100000000L};
    nanosleep(&sec, NULL);
    CHECK_OK(obj_add_flush(w, 100, DIM, 104));
    CHECK_OK(keel_publish(w, url, NULL));
    keel_prune_options o = {.orphan_grace_s = 1};
    CHECK_OK(keel_prune(url, 1, &o));
    long left = obj_count(url, "/pack/"), named = named_packs(url, 3);
    printf("     after a prune keeping 1: %ld packs, %ld named by version "
           "3\n", left, named);
    CHECK(named > 0);
    CHECK_EQ(left, named);
    keel_index *r;
    CHECK_OK(keel_open_reader(url, NULL, &r));
    CHECK_EQ(SEQ(r), 3);
    CHECK(same_results(r, w, 105));
    keel_close(r);
    proxy_down(p);
    keel_close(w);
}


/* --- cancelling a publish ------------------------------------------------------ */

static int
always_stop(void *arg)
{
    (*(int *)arg)++;
    return 1;
}

/* A publish whose every request is slow (80 ms) is cancelled by the
** handle's callback: KEEL_ECANCELED soon after the first ask, and no
** version is made; without the callback the next publish works. */
TEST(a_cancel_stops_a_slow_publish_and_publishes_nothing)
{
    NEED_SERVER();
    char url[256];
    url_of(url, sizeof url, "cancel-publish");
    s3proxy *p = proxy_up();
    CHECK(p != NULL);
    go_direct();
    keel_index *w = build(test_path("cancel-publish.keel"), url, 111);
    CHECK(w != NULL);
    CHECK_OK(obj_add_flush(w, 200, DIM, 112));
    via(p);
    s3proxy_set_delay_ms(p, 80);
    int asked = 0;
    CHECK_OK(keel_set_cancel(w, always_stop, &asked));
    double t0 = test_now();
    CHECK_ERR(keel_publish(w, url, NULL), KEEL_ECANCELED);
    double dt = test_now() - t0;
    printf("     cancelled after %.2f s, %d asks: %.*s\n", dt, asked,
           (int)strcspn(keel_errmsg(), "\n"), keel_errmsg());
    CHECK(asked >= 1);
    CHECK(dt < 2.0);
    CHECK_MSG_HAS("help:");
    CHECK_EQ(obj_count(url, "/manifest/"), 1);
    CHECK_OK(keel_set_cancel(w, NULL, NULL));
    s3proxy_set_delay_ms(p, 0);
    CHECK_OK(keel_publish(w, url, NULL));
    CHECK_EQ(obj_count(url, "/manifest/"), 2);
    proxy_down(p);
    keel_close(w);
}

TEST_MAIN()
