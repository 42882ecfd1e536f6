/* test_concurrent.c -- threads sharing handles: searches while the same
** handle adds, reader threads searching without pause through adds, deletes
** and compactions, threads sharing one reader handle while it follows
** compactions, checks beside searches, stat and warm beside writes. Every
** result must be a vector that exists at its true distance. Run under TSan
** by `make tsan`.
*/
#include "test.h"
#include "lib/testdata.h"

#include <pthread.h>

#define DIM 16

typedef struct shared {
    keel_index *idx;
    const char *path;         /* readers open their own handle if set */
    int stop;                 /* atomic */
    uint64_t searches, wrong, short_results; /* atomic */
    uint64_t max_id;          /* ids below this were ever added (atomic) */
    const uint8_t *never;     /* ids that must never come back */
} shared;

/* Checks one result list: known ids at their true distances. */
static void
check_results(shared *sh, const keel_result *r, size_t n, const float *q)
{
    float v[DIM];
    uint64_t max_id = __atomic_load_n(&sh->max_id, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++) {
        int bad = r[i].id >= max_id || (sh->never && sh->never[r[i].id]);
        if (!bad) {
            td_vec_of(r[i].id, DIM, v);
            double d = sqrt(td_l2sq(v, q, DIM));
            bad = fabs(d - r[i].distance) > 1e-4 * (1 + d);
        }
        if (bad)
            __atomic_add_fetch(&sh->wrong, 1, __ATOMIC_RELAXED);
    }
}

static void *
searcher(void *arg)
{
    shared *sh = arg;
    keel_index *idx = sh->idx;
    if (sh->path && keel_open_reader(sh->path, NULL, &idx) != KEEL_OK) {
        __atomic_add_fetch(&sh->wrong, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    uint64_t seed = (uint64_t)(uintptr_t)&idx;
    float q[DIM];
    while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE)) {
        for (int c = 0; c < DIM; c++)
            q[c] = test_randf(&seed);
        keel_result r[10];
        size_t n = 0;
        if (keel_search(idx, q, 10, NULL, r, &n) != KEEL_OK) {
            __atomic_add_fetch(&sh->wrong, 1, __ATOMIC_RELAXED);
            continue;
        }
        check_results(sh, r, n, q);
        if (n < 10 && keel_count(idx) >= 10)
            __atomic_add_fetch(&sh->short_results, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&sh->searches, 1, __ATOMIC_RELAXED);
    }
    if (sh->path)
        keel_close(idx);
    return NULL;
}

static int
add_range(keel_index *idx, uint64_t from, uint64_t n, int batch)
{
    float *v = malloc(n * DIM * sizeof *v);
    uint64_t *ids = malloc(n * sizeof *ids);
    for (uint64_t i = 0; i < n; i++) {
        td_vec_of(from + i, DIM, v + i * DIM);
        ids[i] = from + i;
    }
    int rc = KEEL_OK;
    if (batch)
        rc = keel_add_batch(idx, v, n, ids, NULL);
    else
        for (uint64_t i = 0; i < n && !rc; i++)
            rc = keel_add_with_id(idx, from + i, v + i * DIM);
    free(v);
    free(ids);
    return rc;
}

TEST(searches_run_while_the_same_handle_adds)
{
    keel_index *idx;
    CHECK_OK(keel_open(test_path("same.keel"), DIM, NULL, &idx));
    shared sh = {.idx = idx};
    CHECK_OK(add_range(idx, 0, 500, 1));
    __atomic_store_n(&sh.max_id, 500, __ATOMIC_RELEASE);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, searcher, &sh) == 0);
    for (uint64_t from = 500; from < 4500; from += 500) {
        /* Ids are published to the checker before the add: a search may
         * see them as soon as the add links them. */
        __atomic_store_n(&sh.max_id, from + 500, __ATOMIC_RELEASE);
        CHECK_OK(add_range(idx, from, 500, (from / 500) % 2));
        for (uint64_t id = from; id < from + 500; id += 50)
            CHECK_OK(keel_delete(idx, id));
        CHECK_OK(keel_flush(idx));
    }
    __atomic_store_n(&sh.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("    %llu searches during adds, %llu wrong\n",
           (unsigned long long)sh.searches, (unsigned long long)sh.wrong);
    CHECK(sh.searches > 0);
    CHECK_U64(sh.wrong, 0);
    CHECK_U64(sh.short_results, 0);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_close(idx));
}

TEST(reader_threads_through_adds_deletes_and_compactions)
{
    const char *path = test_path("rounds.keel");
    keel_index *w;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    uint8_t *never = calloc(20000, 1);
    /* Ids deleted in the flush that adds them were never live in any
     * commit: no reader may ever return one. */
    for (uint64_t id = 0; id < 20000; id += 7)
        never[id] = 1;
    shared sh = {.path = path, .never = never};
    uint64_t next = 0;
    CHECK_OK(add_range(w, 0, 300, 1));
    for (uint64_t id = 0; id < 300; id += 7)
        CHECK_OK(keel_delete(w, id));
    CHECK_OK(keel_flush(w));
    next = 300;
    __atomic_store_n(&sh.max_id, next, __ATOMIC_RELEASE);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, searcher, &sh) == 0);
    for (int round = 0; round < 10; round++) {
        __atomic_store_n(&sh.max_id, next + 300, __ATOMIC_RELEASE);
        CHECK_OK(add_range(w, next, 300, 1));
        for (uint64_t id = next; id < next + 300; id++)
            if (never[id])
                CHECK_OK(keel_delete(w, id));
        /* Delete 100 older, committed ones too. */
        uint64_t dels = 0;
        for (uint64_t id = next - 300; id < next && dels < 100; id++)
            if (!never[id] && keel_delete(w, id) == KEEL_OK)
                dels++;
        CHECK_OK(keel_flush(w));
        CHECK_OK(keel_compact(w));
        next += 300;
    }
    __atomic_store_n(&sh.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    printf("    %llu reader searches through 10 compactions, %llu wrong, %llu "
           "short\n", (unsigned long long)sh.searches,
           (unsigned long long)sh.wrong, (unsigned long long)sh.short_results);
    CHECK(sh.searches > 0);
    CHECK_U64(sh.wrong, 0);
    CHECK_U64(sh.short_results, 0);
    CHECK_OK(keel_close(w));
    free(never);
}

/* Threads searching and checking one reader handle. */
typedef struct one_reader {
    keel_index *r;
    int stop;                 /* atomic */
    uint64_t calls, failed;   /* atomic */
    int check;                /* this thread checks instead of searching */
} one_reader;

static void *
one_reader_main(void *arg)
{
    one_reader *o = arg;
    uint64_t seed = (uint64_t)(uintptr_t)&seed;
    float q[DIM];
    while (!__atomic_load_n(&o->stop, __ATOMIC_ACQUIRE)) {
        int rc;
        if (o->check) {
            rc = keel_check(o->r);
            if (rc)
                fprintf(stderr, "    check: %s\n", keel_errmsg());
        } else {
            for (int c = 0; c < DIM; c++)
                q[c] = test_randf(&seed);
            keel_result res[10];
            size_t n;
            rc = keel_search(o->r, q, 10, NULL, res, &n);
        }
        if (rc)
            __atomic_add_fetch(&o->failed, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&o->calls, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

TEST(threads_of_one_reader_while_the_same_process_compacts)
{
    const char *path = test_path("onereader.keel");
    keel_index *w, *r;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_OK(add_range(w, 0, 100, 1));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_open_reader(path, NULL, &r));
    enum { T = 4 };
    one_reader o[T];
    pthread_t t[T];
    for (int i = 0; i < T; i++) {
        o[i] = (one_reader){.r = r, .check = i == T - 1};
        CHECK(pthread_create(&t[i], NULL, one_reader_main, &o[i]) == 0);
    }
    int rounds = getenv("KEEL_TSAN") ? 40 : 150;
    uint64_t next = 100;
    for (int round = 0; round < rounds; round++) {
        CHECK_OK(add_range(w, next, 5, round % 2));
        CHECK_OK(keel_delete(w, next - 50));
        next += 5;
        CHECK_OK(keel_compact(w));
    }
    uint64_t calls = 0, failed = 0;
    for (int i = 0; i < T; i++) {
        __atomic_store_n(&o[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(t[i], NULL);
        calls += o[i].calls;
        failed += o[i].failed;
    }
    printf("    %llu searches and checks of one reader through %d "
           "compactions, %llu failed\n", (unsigned long long)calls, rounds,
           (unsigned long long)failed);
    CHECK_U64(failed, 0);
    CHECK(o[T - 1].calls > 0);
    CHECK_U64(keel_count(r), keel_count(w));
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

typedef struct setter {
    keel_index *r;
    int stop;                 /* atomic */
    uint64_t calls;           /* atomic */
} setter;

static int
never_cancel(void *arg)
{
    (void)arg;
    return 0;
}

static void
no_progress(uint64_t done, uint64_t total, void *arg)
{
    (void)arg;
    (void)done;
    (void)total;
}

static void *
setter_main(void *arg)
{
    setter *s = arg;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        keel_set_cancel(s->r, never_cancel, s);
        keel_set_progress(s->r, no_progress, s);
        __atomic_add_fetch(&s->calls, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

TEST(callbacks_set_on_a_reader_while_it_follows_compactions)
{
    /* The reader copies its callbacks into the new file's builder when it
     * follows; a thread sets them meanwhile. */
    const char *path = test_path("setreader.keel");
    keel_index *w, *r;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_OK(add_range(w, 0, 20, 0));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_open_reader(path, NULL, &r));
    setter s = {.r = r};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, setter_main, &s) == 0);
    int rounds = getenv("KEEL_TSAN") ? 30 : 100;
    for (int round = 0; round < rounds; round++) {
        CHECK_OK(add_range(w, 20 + (uint64_t)round, 1, 0));
        CHECK_OK(keel_compact(w));
        CHECK_U64(keel_count(r), 21 + (uint64_t)round);
    }
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    CHECK(s.calls > 0);
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

TEST(checks_of_a_reader_beside_its_searches_and_delete_flushes)
{
    const char *path = test_path("checkreader.keel");
    keel_index *w, *r;
    CHECK_OK(keel_open(path, DIM, NULL, &w));
    CHECK_OK(add_range(w, 0, 2000, 1));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_open_reader(path, NULL, &r));
    enum { T = 3 };
    one_reader o[T];
    pthread_t t[T];
    for (int i = 0; i < T; i++) {
        o[i] = (one_reader){.r = r, .check = i == 0};
        CHECK(pthread_create(&t[i], NULL, one_reader_main, &o[i]) == 0);
    }
    /* Delete flushes and adds while the reader's threads replace its
     * snapshot and the check reads one. */
    uint64_t next = 2000;
    for (uint64_t id = 0; id < 600; id += 2) {
        CHECK_OK(keel_delete(w, id));
        if (id % 20 == 0) {
            CHECK_OK(add_range(w, next, 10, 0));
            next += 10;
        }
        CHECK_OK(keel_flush(w));
        if (id > 100 && __atomic_load_n(&o[0].calls, __ATOMIC_RELAXED) >= 300)
            break;
    }
    for (int i = 0; i < T; i++) {
        __atomic_store_n(&o[i].stop, 1, __ATOMIC_RELEASE);
        pthread_join(t[i], NULL);
    }
    printf("    %llu checks beside %llu searches, %llu failed\n",
           (unsigned long long)o[0].calls,
           (unsigned long long)(o[1].calls + o[2].calls),
           (unsigned long long)(o[0].failed + o[1].failed + o[2].failed));
    CHECK_U64(o[0].failed + o[1].failed + o[2].failed, 0);
    CHECK(o[0].calls > 0);
    CHECK_OK(keel_check(r));
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
}

/* stat and warm on a writer from another thread. */
typedef struct watcher {
    keel_index *w;
    int stop;                 /* atomic */
    uint64_t stats, warms, bad; /* atomic */
} watcher;

static void *
watcher_main(void *arg)
{
    watcher *wa = arg;
    uint64_t last = 0;
    while (!__atomic_load_n(&wa->stop, __ATOMIC_ACQUIRE)) {
        keel_stats st;
        if (keel_stat(wa->w, &st) != KEEL_OK || st.snapshot < last)
            __atomic_add_fetch(&wa->bad, 1, __ATOMIC_RELAXED);
        last = st.snapshot;
        __atomic_add_fetch(&wa->stats, 1, __ATOMIC_RELAXED);
        if (wa->stats % 8 == 0) {
            if (keel_warm(wa->w) != KEEL_OK)
                __atomic_add_fetch(&wa->bad, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&wa->warms, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

TEST(stat_and_warm_of_a_writer_beside_its_adds_and_flushes)
{
    keel_index *w;
    CHECK_OK(keel_open(test_path("statwarm.keel"), DIM, NULL, &w));
    watcher wa = {.w = w};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, watcher_main, &wa) == 0);
    for (uint64_t from = 0; from < 3000; from += 100) {
        CHECK_OK(add_range(w, from, 100, (from / 100) % 2));
        CHECK_OK(keel_delete(w, from));
        CHECK_OK(keel_flush(w));
    }
    __atomic_store_n(&wa.stop, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    printf("    %llu stats and %llu warms beside 30 flushes, %llu bad\n",
           (unsigned long long)wa.stats, (unsigned long long)wa.warms,
           (unsigned long long)wa.bad);
    CHECK_U64(wa.bad, 0);
    CHECK(wa.stats > 0);
    CHECK_U64(keel_count(w), 2970);
    CHECK_OK(keel_close(w));
}

/* Searches that follow each other without a pause, on more threads than
** cores. */
typedef struct nonstop {
    keel_index *idx;
    int stop;                 /* atomic */
    uint64_t searches;        /* atomic */
} nonstop;

static void *
nonstop_searcher(void *arg)
{
    nonstop *n = arg;
    float q[16];
    keel_result r[10];
    size_t got;
    for (uint64_t i = 0; !__atomic_load_n(&n->stop, __ATOMIC_ACQUIRE); i++) {
        td_vec_of(i % 5000, 16, q);
        if (keel_search(n->idx, q, 10, NULL, r, &got) == KEEL_OK)
            __atomic_add_fetch(&n->searches, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* keel_warm and keel_refresh take the handle's swap lock exclusive; eight
** threads whose searches overlap without a pause must not keep them
** waiting (they did, for as long as the searches went on: not within 30 s
** on 2 cores). */
TEST(warm_and_refresh_return_while_searches_never_pause)
{
    const char *path = test_path("nonstop.keel");
    keel_index *w;
    CHECK_OK(keel_open(path, 16, NULL, &w));
    float *v = malloc(5000 * 16 * sizeof *v);
    for (uint64_t i = 0; i < 5000; i++)
        td_vec_of(i, 16, v + i * 16);
    CHECK_OK(keel_add_batch(w, v, 5000, NULL, NULL));
    free(v);
    CHECK_OK(keel_flush(w));
    nonstop n = {0};
    CHECK_OK(keel_open_reader(path, NULL, &n.idx));
    enum { T = 8 };
    pthread_t th[T];
    for (int i = 0; i < T; i++)
        CHECK(pthread_create(&th[i], NULL, nonstop_searcher, &n) == 0);
    while (__atomic_load_n(&n.searches, __ATOMIC_RELAXED) < 1000)
        usleep(1000);
    double worst = 0;
    int rc = KEEL_OK;
    for (int round = 0; round < 5 && rc == KEEL_OK; round++) {
        double t0 = test_now();
        rc = keel_warm(n.idx);
        double t1 = test_now();
        if (rc == KEEL_OK)
            rc = keel_refresh(n.idx);
        double t2 = test_now();
        worst = t1 - t0 > worst ? t1 - t0 : worst;
        worst = t2 - t1 > worst ? t2 - t1 : worst;
    }
    __atomic_store_n(&n.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    printf("    %llu searches; the slowest warm or refresh took %.3f s\n",
           (unsigned long long)n.searches, worst);
    CHECK_OK(rc);
    CHECK_MSG(worst < 10.0, "a warm or refresh waited %.1f s for searches "
              "that never paused", worst);
    CHECK_OK(keel_close(n.idx));
    CHECK_OK(keel_close(w));
}

/* A batch linked on four threads with M 4, so that lists fill and are
** pruned while other threads add links to them and read them (graph.c
** keel__graph_add_link and its closed sets, graph.h invariant 4): the file
** checks, and its recall is that of the same batch linked on one thread
** within 0.03. */
static double
batch_recall(const char *path, uint32_t threads, const float *v, size_t n,
             const float *q, size_t nq)
{
    keel_options o = {.max_connections = 4, .threads = threads};
    keel_index *idx;
    if (keel_open(path, 16, &o, &idx))
        return -1;
    int rc = keel_add_batch(idx, v, n, NULL, NULL);
    if (!rc)
        rc = keel_check(idx);
    size_t hits = 0;
    keel_search_params p = {.ef = 64};
    for (size_t i = 0; i < nq && !rc; i++) {
        keel_result r[10];
        size_t found;
        rc = keel_search(idx, q + i * 16, 10, &p, r, &found);
        uint64_t want[10];
        td_exact_knn(v, n, 16, q + i * 16, 10, NULL, NULL, want);
        for (size_t k = 0; k < found && !rc; k++)
            for (int j = 0; j < 10; j++)
                hits += r[k].id == want[j];
    }
    if (keel_close(idx) || rc)
        return -1;
    return (double)hits / (double)(nq * 10);
}

TEST(batch_linked_on_threads_prunes_shared_lists)
{
    enum { N = 4000, NQ = 100 };
    float *v = td_random(N, 16, 41), *q = td_random(NQ, 16, 42);
    double one = batch_recall(test_path("one.keel"), 1, v, N, q, NQ);
    double four = batch_recall(test_path("four.keel"), 4, v, N, q, NQ);
    free(v);
    free(q);
    printf("    recall@10 at ef 64: %.4f on one thread, %.4f on four\n", one,
           four);
    CHECK(one > 0.5);
    CHECK(four >= one - 0.03);
}

TEST_MAIN()
