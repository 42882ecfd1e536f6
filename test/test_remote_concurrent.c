/* test_remote_concurrent.c -- publish and prune in one process beside
** threads that search and refresh a URL reader of the same prefix; built
** under TSan (tools/check.sh runs build/tsan's against a gateway of its own,
** test/objstore/run.sh), where it must report no race.
**
** The main thread writes: it adds a few vectors, flushes, publishes the
** next version and prunes keeping 1, round after round. Beside it,
** SEARCHERS threads search a reader opened by URL and one thread calls
** keel_refresh. What must hold: every search answers K ids of vectors some
** published version holds (ids below the count of the newest publish, the
** one under way included), or
** a documented error of a reader whose pinned version a prune removed
** (KEEL_EIO or KEEL_ENOTFOUND naming the object, which the next refresh
** cures); the version a refresh pins never goes back; no other error; at
** the end a refresh reaches the last published version with its count.
** Without KEEL_TEST_BUCKET the test says so and passes.
*/
#include "test.h"
#define OBJSTORE_AREA "test-remote-concurrent"
#include "lib/objstore.h"
#include "lib/testdata.h"

#include "base/internal.h"
#include "api/api.h"
#include "cache/cache.h"

#include <pthread.h>
#include <unistd.h>

#define DIM 16
#define FIRST 400     /* vectors of version 1 */
#define MORE 40       /* added before each later publish */
#define ROUNDS 12
#define SEARCHERS 3
#define K 5

typedef struct shared {
    keel_index *r;
    int stop;                 /* atomic */
    uint64_t published;       /* atomic: vectors of the newest version */
    uint64_t searches, pruned_away, refreshes; /* atomic */
    uint64_t bad_id;          /* atomic: an id no version holds, +1 */
    int bad_rc;               /* atomic: an undocumented code, or 0 */
    int went_back;            /* atomic: a refresh pinned an older version */
    char msg[512];            /* the first bad_rc's message */
    pthread_mutex_t mu;       /* msg */
} shared;

static void
note_bad(shared *s, int rc)
{
    pthread_mutex_lock(&s->mu);
    if (!s->bad_rc) {
        s->bad_rc = rc;
        snprintf(s->msg, sizeof s->msg, "%s", keel_errmsg());
    }
    pthread_mutex_unlock(&s->mu);
}

/* The errors a reader of a pruned version may meet: a page whose pack is
** gone (its version was removed under the reader). */
static int
pruned(int rc)
{
    return rc == KEEL_EIO || rc == KEEL_ENOTFOUND;
}

static void *
searcher(void *arg)
{
    shared *s = arg;
    uint64_t seed = (uint64_t)(uintptr_t)&seed;
    while (!KEEL_LOAD_ACQUIRE(&s->stop)) {
        float *q = td_random(1, DIM, seed++);
        keel_result res[K];
        size_t n = 0;
        int rc = keel_search(s->r, q, K, NULL, res, &n);
        free(q);
        if (rc == KEEL_OK) {
            if (n != K)
                KEEL_STORE_RELAXED(&s->bad_id, UINT64_MAX);
            /* the reader's version was published (or under way) by
             * this search's end: its ids are below that count */
            uint64_t now = KEEL_LOAD_ACQUIRE(&s->published);
            for (size_t i = 0; i < n; i++)
                if (res[i].id >= now)
                    KEEL_STORE_RELAXED(&s->bad_id, res[i].id + 1);
            __atomic_add_fetch(&s->searches, 1, __ATOMIC_RELAXED);
        } else if (pruned(rc)) {
            __atomic_add_fetch(&s->pruned_away, 1, __ATOMIC_RELAXED);
        } else {
            note_bad(s, rc);
        }
    }
    return NULL;
}

static uint64_t
pinned(keel_index *r)
{
    keel_cache_counters n;
    return keel__remote_counters(r, &n) == KEEL_OK ? n.seq : 0;
}

static void *
refresher(void *arg)
{
    shared *s = arg;
    uint64_t last = pinned(s->r);
    while (!KEEL_LOAD_ACQUIRE(&s->stop)) {
        int rc = keel_refresh(s->r);
        if (rc && !pruned(rc))
            note_bad(s, rc);
        uint64_t seq = pinned(s->r);
        if (seq < last)
            KEEL_STORE_RELAXED(&s->went_back, 1);
        last = KEEL_MAX(last, seq);
        __atomic_add_fetch(&s->refreshes, 1, __ATOMIC_RELAXED);
        usleep(20000);
    }
    return NULL;
}

TEST(publish_and_prune_beside_searching_and_refreshing_threads)
{
    NEED_SERVER();
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(240); /* never hangs the suite */
    double t0 = test_now();
    char url[256];
    url_of(url, sizeof url, "busy");
    keel_index *w;
    CHECK_OK(keel_open(test_path("busy.keel"), DIM, NULL, &w));
    float *v = td_random(FIRST + ROUNDS * MORE, DIM, 17);
    CHECK_OK(keel_add_batch(w, v, FIRST, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_publish(w, url, NULL));
    shared s = {.published = FIRST};
    pthread_mutex_init(&s.mu, NULL);
    CHECK_OK(keel_open_reader(url, NULL, &s.r));
    pthread_t t[SEARCHERS + 1];
    for (int i = 0; i < SEARCHERS; i++)
        CHECK(pthread_create(&t[i], NULL, searcher, &s) == 0);
    CHECK(pthread_create(&t[SEARCHERS], NULL, refresher, &s) == 0);
    keel_prune_options po = {0};
    uint64_t count = FIRST;
    int published = 1;
    for (int round = 0; round < ROUNDS; round++) {
        CHECK_OK(keel_add_batch(w, v + count * DIM, MORE, NULL, NULL));
        count += MORE;
        CHECK_OK(keel_flush(w));
        /* readers may pin the version from its manifest's create on,
         * before the publish returns */
        KEEL_STORE_RELEASE(&s.published, count);
        int rc = keel_publish(w, url, NULL);
        CHECK_MSG(rc == KEEL_OK, "publish %d: %s", round, keel_errmsg());
        if (rc)
            break;
        published++;
        rc = keel_prune(url, 1, &po);
        CHECK_MSG(rc == KEEL_OK, "prune %d: %s", round, keel_errmsg());
        usleep(50000); /* the readers get to the new version */
    }
    KEEL_STORE_RELEASE(&s.stop, 1);
    for (int i = 0; i <= SEARCHERS; i++)
        pthread_join(t[i], NULL);
    CHECK_OK(keel_refresh(s.r));
    CHECK_EQ(pinned(s.r), (uint64_t)published);
    CHECK_EQ(keel_count(s.r), count);
    keel_result res[K];
    size_t n = 0;
    CHECK_OK(keel_search(s.r, v, K, NULL, res, &n));
    CHECK_EQ(n, K);
    printf("     %d versions published and pruned in %.1f s beside %llu "
           "searches (%llu met a pruned version) and %llu refreshes\n",
           published, test_now() - t0, (unsigned long long)s.searches,
           (unsigned long long)s.pruned_away,
           (unsigned long long)s.refreshes);
    CHECK_MSG(!s.bad_rc, "code %d: %s", s.bad_rc, s.msg);
    CHECK_MSG(s.bad_id == 0, "a search answered id %llu of %llu",
              (unsigned long long)(s.bad_id - 1),
              (unsigned long long)count);
    CHECK(!s.went_back);
    CHECK(s.searches > 0);
    CHECK(s.refreshes > 0);
    keel_close(s.r);
    keel_close(w);
    free(v);
    pthread_mutex_destroy(&s.mu);
    alarm(0);
}

TEST_MAIN()
