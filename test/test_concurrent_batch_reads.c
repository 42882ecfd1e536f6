/* test_concurrent_batch_reads.c -- eight threads reading batches through
** the process-wide allowance never have more than KEEL_BR_ALLOWANCE extra
** runs out at once (counted by the source), and give every one back; and
** readers opening, searching cold and closing beside a writer, all through
** the shared record registry. make tsan runs it under ThreadSanitizer.
*/
#include "test.h"
#include "lib/testdata.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "store/pagein.h"

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

/* --- readers beside a writer, every file reported cold ------------------ */

static int
nothing_resident(void *addr, size_t len, unsigned char *vec)
{
    (void)addr;
    memset(vec, 0, (len + keel__page_size() - 1) / keel__page_size());
    return 0;
}

static long advised; /* atomic */

static int
counting_advise(void *addr, size_t len, enum keel_advice advice)
{
    if (advice == KEEL_ADV_WILLNEED)
        __atomic_add_fetch(&advised, 1, __ATOMIC_RELAXED);
    return keel__os_posix.advise(addr, len, advice);
}

#define RDIM 32
static const char *rpath;
static int writer_done; /* atomic */
static int reader_failures; /* atomic */

static void *
writer_main(void *arg)
{
    keel_index *w = arg;
    float v[100 * RDIM];
    for (uint64_t b = 0; b < 10; b++) {
        for (uint64_t i = 0; i < 100; i++)
            td_vec_of(2000 + b * 100 + i, RDIM, v + i * RDIM);
        if (keel_add_batch(w, v, 100, NULL, NULL) || keel_flush(w))
            __atomic_add_fetch(&reader_failures, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&writer_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Opens a reader of rpath with flags, runs `searches` searches and closes
** it; counts a failure in reader_failures. 0, or -1 if it did not open. */
static int
open_search_close(unsigned flags, uint64_t seed, int searches)
{
    keel_options o;
    memset(&o, 0, sizeof o);
    o.flags = flags;
    keel_index *r;
    if (keel_open_reader(rpath, &o, &r) != KEEL_OK) {
        __atomic_add_fetch(&reader_failures, 1, __ATOMIC_RELAXED);
        return -1;
    }
    float q[RDIM];
    keel_result res[10];
    size_t n;
    for (int i = 0; i < searches; i++) {
        td_vec_of(seed + (uint64_t)i, RDIM, q);
        if (keel_search(r, q, 10, NULL, res, &n) != KEEL_OK || n != 10)
            __atomic_add_fetch(&reader_failures, 1, __ATOMIC_RELAXED);
    }
    keel_close(r);
    return 0;
}

static void *
reader_main(void *arg)
{
    uint64_t seed = (uintptr_t)arg;
    for (int round = 0; round < 20 || !__atomic_load_n(&writer_done,
                                                        __ATOMIC_ACQUIRE);
         round++)
        if (open_search_close(0, seed * 1000 + (uint64_t)round * 3, 3))
            break;
    return NULL;
}

/* A file of 2,000 vectors at rpath, flushed; the writer stays open. */
static keel_index *
reader_file(void)
{
    keel_index *w;
    if (keel_open(rpath, RDIM, NULL, &w) != KEEL_OK)
        return NULL;
    float *v = malloc(2000 * RDIM * sizeof *v);
    for (uint64_t i = 0; i < 2000; i++)
        td_vec_of(i, RDIM, v + i * RDIM);
    int rc = v ? keel_add_batch(w, v, 2000, NULL, NULL) : KEEL_ENOMEM;
    free(v);
    if (rc || keel_flush(w)) {
        keel_close(w);
        return NULL;
    }
    return w;
}

TEST(cold_readers_beside_a_writer)
{
    static keel_os cold_os;
    cold_os = keel__os_posix;
    cold_os.resident = nothing_resident;
    cold_os.advise = counting_advise;
    keel__os = &cold_os;
    keel__br_set_enabled(2); /* every file, however small */
    rpath = test_path("cold.keel");
    keel_index *w = reader_file();
    CHECK(w != NULL);
    pthread_t wt, rt[4];
    CHECK(pthread_create(&wt, NULL, writer_main, w) == 0);
    for (uintptr_t i = 0; i < 4; i++)
        CHECK(pthread_create(&rt[i], NULL, reader_main, (void *)(i + 1)) == 0);
    pthread_join(wt, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(rt[i], NULL);
    CHECK_EQ(__atomic_load_n(&reader_failures, __ATOMIC_RELAXED), 0);
    CHECK(__atomic_load_n(&advised, __ATOMIC_RELAXED) > 0);
    CHECK_OK(keel_close(w));
    keel__os = &keel__os_posix;
    keel__br_set_enabled(1);
}

/* --- while warm reads, searches leave the reading to it ---------------- */

static pthread_t main_thread;
static int log_n;                 /* atomic */
static char log_main[4096];       /* per WILLNEED call: 1 from the main thread */

static int
logging_advise(void *addr, size_t len, enum keel_advice advice)
{
    if (advice == KEEL_ADV_WILLNEED) {
        int i = __atomic_fetch_add(&log_n, 1, __ATOMIC_RELAXED);
        if (i < (int)sizeof log_main)
            __atomic_store_n(&log_main[i],
                             (char)pthread_equal(pthread_self(), main_thread),
                             __ATOMIC_RELAXED);
    }
    return keel__os_posix.advise(addr, len, advice);
}

static void *
warm_reader_main(void *arg)
{
    uint64_t seed = (uintptr_t)arg;
    for (int round = 0; round < 10; round++) /* round 0: close at once */
        if (open_search_close(KEEL_WARM, seed * 100, round % 3))
            break;
    return NULL;
}

TEST(while_warm_reads_searches_leave_the_reading_to_it)
{
    static keel_os cold_os;
    cold_os = keel__os_posix;
    cold_os.resident = nothing_resident;
    cold_os.advise = logging_advise;
    keel__os = &cold_os;
    keel__br_set_enabled(2);
    main_thread = pthread_self();
    rpath = test_path("warm.keel");
    keel_index *w = reader_file();
    CHECK(w != NULL);
    CHECK_OK(keel_close(w));
    keel_options o;
    memset(&o, 0, sizeof o);
    o.flags = KEEL_WARM;
    /* Searches right after the open ask for nothing: warm reads. */
    keel_index *r;
    float q[RDIM];
    keel_result res[10];
    size_t n;
    __atomic_store_n(&log_n, 0, __ATOMIC_RELAXED);
    CHECK_OK(keel_open_reader(rpath, &o, &r));
    for (int i = 0; i < 5; i++) {
        td_vec_of(7 + (uint64_t)i, RDIM, q);
        CHECK_OK(keel_search(r, q, 10, NULL, res, &n));
        CHECK_EQ(n, 10);
    }
    for (int t = 0; t < 5000 && !__atomic_load_n(&log_n, __ATOMIC_RELAXED);
         t++)
        usleep(1000);
    CHECK_OK(keel_close(r)); /* joins warm: its log entries are in */
    int total = __atomic_load_n(&log_n, __ATOMIC_RELAXED);
    CHECK(total > 0 && total < (int)sizeof log_main);
    for (int i = 0; i < total; i++)
        CHECK_MSG(log_main[i] == 0, "call %d of %d from the searching thread",
                  i, total);
    /* Readers with warm opening, searching and closing on four threads
     * (closes land while warm reads or after it finished). */
    pthread_t rt[4];
    for (uintptr_t i = 0; i < 4; i++)
        CHECK(pthread_create(&rt[i], NULL, warm_reader_main,
                             (void *)(i + 1)) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(rt[i], NULL);
    CHECK_EQ(__atomic_load_n(&reader_failures, __ATOMIC_RELAXED), 0);
    keel__os = &keel__os_posix;
    keel__br_set_enabled(1);
}

TEST_MAIN()
