/* test_concurrent.c -- threads sharing handles: searches while the same
** handle adds, reader threads searching without pause through adds, deletes
** and compactions. Every result must be a vector that exists at its true
** distance. Run under TSan by `make tsan`.
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

TEST_MAIN()
