/* test_concurrent_batch_reads.c -- eight threads reading batches through
** the process-wide allowance never have more than KEEL_BR_ALLOWANCE extra
** runs out at once (counted by the source), and give every one back.
** make tsan runs it under ThreadSanitizer.
*/
#include "test.h"

#include <pthread.h>

#include "batch_reads.h"

#define THREADS 8
#define BATCHES 400

static int out_now;   /* extra runs read and not yet waited for (atomic) */
static int out_max;   /* the most seen (atomic) */
static long runs_total;

typedef struct batch_src {
    int runs;         /* runs read since the last wait */
    uint8_t disk[4096];
} batch_src;

static long
count_read(void *self, const keel_br_run *run, const void **out)
{
    batch_src *b = self;
    if (b->runs++ > 0) {
        int now = __atomic_add_fetch(&out_now, 1, __ATOMIC_RELAXED);
        int max = __atomic_load_n(&out_max, __ATOMIC_RELAXED);
        while (now > max &&
               !__atomic_compare_exchange_n(&out_max, &max, now, 1,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
    }
    for (size_t i = 0; i < run->n; i++)
        out[i] = b->disk;
    __atomic_add_fetch(&runs_total, 1, __ATOMIC_RELAXED);
    sched_yield(); /* stay in flight a while, as a real read would */
    return (long)run->n;
}

static int
count_wait(void *self)
{
    batch_src *b = self;
    if (b->runs > 1)
        __atomic_sub_fetch(&out_now, b->runs - 1, __ATOMIC_RELAXED);
    b->runs = 0;
    return 0;
}

static void *
hammer(void *arg)
{
    uintptr_t seed = (uintptr_t)arg;
    batch_src *b = calloc(1, sizeof *b);
    keel_br_source src = {count_read, count_wait, b};
    keel_br_scratch s = {0};
    keel_br_range r[40];
    const void *out[40];
    for (int i = 0; i < BATCHES; i++) {
        size_t n = 1 + (seed + (uintptr_t)i * 7) % 40;
        for (size_t j = 0; j < n; j++) {
            r[j].off = (uint64_t)j * 65536;
            r[j].len = 64;
            r[j].addr = NULL;
        }
        if (keel__br_read(&src, NULL, r, n, out, &s) != KEEL_OK)
            break;
    }
    keel__br_scratch_free(&s);
    free(b);
    return NULL;
}

TEST(shared_allowance_bounds_extra_runs)
{
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, hammer, (void *)i) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int max = __atomic_load_n(&out_max, __ATOMIC_RELAXED);
    CHECK_MSG(max <= KEEL_BR_ALLOWANCE, "%d extra runs out at once", max);
    CHECK(max > 0);
    CHECK_EQ(__atomic_load_n(&out_now, __ATOMIC_RELAXED), 0);
    CHECK_EQ(__atomic_load_n(&keel__br_shared.free, __ATOMIC_RELAXED),
             KEEL_BR_ALLOWANCE);
    CHECK(runs_total > THREADS * BATCHES);
}

TEST_MAIN()
