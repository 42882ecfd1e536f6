/* test_batch_reads.c -- the batch-read policy against a counting fake
** source (run sizing, caller order, duplicates and absence, failures, the
** allowance), searches with the module on and off, a read failure
** injected through the OS table in the middle of a search, the access
** advice of cold searches, warm's flag after it finished, and children
** forked while warm waits or cold searches run.
*/
#include "test.h"
#include "lib/testdata.h"

#include "api/api.h"
#include "store/pagein.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* --- a fake source ------------------------------------------------------- */

#define DISK 65536u /* bytes the fake holds; ranges past it are absent */

typedef struct fake {
    uint8_t disk[DISK];
    int calls, waits;
    int fail_at;              /* call number that fails with -EIO (0: none) */
    int short_at;             /* call number that answers one range short */
    int unsorted;             /* set if a run came unsorted or duplicated */
} fake;

static long
fake_read(void *self, const keel_br_run *run, const void **out)
{
    fake *f = self;
    int call = ++f->calls;
    for (size_t i = 0; i < run->n; i++) {
        const keel_br_range *r = &run->r[i];
        if (i && (r->off < run->r[i - 1].off ||
                  (r->off == run->r[i - 1].off && r->len <= run->r[i - 1].len)))
            f->unsorted = 1;
        out[i] = r->off + r->len <= DISK ? f->disk + r->off : NULL;
    }
    if (call == f->fail_at)
        return -EIO;
    if (call == f->short_at)
        return (long)run->n - 1;
    return (long)run->n;
}

static int
fake_wait(void *self)
{
    ((fake *)self)->waits++;
    return 0;
}

static fake F;

static keel_br_source
fake_source(void)
{
    memset(&F.calls, 0, sizeof F - offsetof(fake, calls));
    keel_br_source s = {fake_read, fake_wait, &F};
    return s;
}

/* n ranges 8 KiB apart (no two merge). */
static void
spread(keel_br_range *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        r[i].off = (uint64_t)(n - 1 - i) * 8192 % (8 * DISK);
        r[i].len = 16;
        r[i].addr = NULL;
    }
}

TEST(run_sizing_table)
{
    /* extents, granted -> runs */
    static const struct { size_t e; uint32_t g, runs; } t[] = {
        {0, 0, 0},  {0, 15, 0},  {1, 0, 1},   {1, 15, 1},  {2, 0, 1},
        {2, 1, 2},  {2, 15, 2},  {5, 3, 4},   {16, 15, 16}, {17, 15, 16},
        {33, 0, 1}, {33, 7, 8},  {33, 15, 16}, {1031, 15, 16}, {40, 63, 16},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        uint32_t runs = keel__br_runs(t[i].e, t[i].g);
        CHECK_MSG(runs == t[i].runs, "%zu extents, %u granted: %u runs, "
                  "not %u", t[i].e, t[i].g, runs, t[i].runs);
        /* Runs are contiguous, cover every extent, and differ in size by
         * at most one. */
        size_t lo = SIZE_MAX, hi = 0;
        for (uint32_t k = 0; k < runs; k++) {
            size_t a = keel__br_run_start(t[i].e, runs, k);
            size_t b = keel__br_run_start(t[i].e, runs, k + 1);
            CHECK(b > a);
            lo = b - a < lo ? b - a : lo;
            hi = b - a > hi ? b - a : hi;
        }
        if (runs) {
            CHECK_EQ(keel__br_run_start(t[i].e, runs, runs), t[i].e);
            CHECK(hi - lo <= 1);
        }
    }
    /* Through the policy: 33 separate ranges with 7 free make 8 calls,
     * and the sizes the table says. */
    keel_br_range r[33];
    const void *out[33];
    keel_br_scratch s = {0};
    keel_br_allowance a = {7};
    keel_br_source src = fake_source();
    spread(r, 33);
    CHECK_OK(keel__br_read(&src, &a, r, 33, out, &s));
    CHECK_EQ(F.calls, 8);
    CHECK_EQ(F.waits, 1);
    CHECK_EQ(a.free, 7);
    /* Ranges within the gap merge: 32 ranges on two pages are one extent,
     * so one call however much is free. */
    for (int i = 0; i < 32; i++) {
        r[i].off = (uint64_t)i * 200;
        r[i].len = 200;
    }
    a.free = 40;
    src = fake_source();
    CHECK_OK(keel__br_read(&src, &a, r, 32, out, &s));
    CHECK_EQ(F.calls, 1);
    CHECK_EQ(a.free, 40);
    keel__br_scratch_free(&s);
}

/* KEEL_BATCH_READS_MAX_RUNS caps the runs of a batch whatever is free: 1
** is one call, 4 four; a value out of range or not a number is ignored. */
TEST(max_runs_cap)
{
    keel_br_range r[33];
    const void *out[33];
    keel_br_scratch s = {0};
    spread(r, 33);
    static const struct { const char *env; int calls; } t[] = {
        {"1", 1}, {"4", 4}, {"16", 16}, {"0", 16}, {"17", 16}, {"4x", 16},
        {"-1", 16}, {"", 16}, {NULL, 16},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (t[i].env)
            setenv("KEEL_BATCH_READS_MAX_RUNS", t[i].env, 1);
        else
            unsetenv("KEEL_BATCH_READS_MAX_RUNS");
        keel__br_set_max_runs(0); /* read the environment again */
        keel_br_allowance a = {40};
        keel_br_source src = fake_source();
        CHECK_OK(keel__br_read(&src, &a, r, 33, out, &s));
        CHECK_MSG(F.calls == t[i].calls, "KEEL_BATCH_READS_MAX_RUNS=%s: %d "
                  "calls, not %d", t[i].env ? t[i].env : "(unset)", F.calls,
                  t[i].calls);
        CHECK_EQ(a.free, 40);
        CHECK_EQ(keel__br_runs(33, 40), (uint32_t)t[i].calls);
    }
    unsetenv("KEEL_BATCH_READS_MAX_RUNS");
    keel__br_set_max_runs(0);
    keel__br_scratch_free(&s);
}

static uint64_t rng_state = 42;
static uint64_t
rnd(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7,
        rng_state ^= rng_state << 17;
    return rng_state;
}

TEST(caller_order_duplicates_absence)
{
    keel_br_range *r = malloc(1031 * sizeof *r);
    const void **got = malloc(1031 * sizeof *got);
    const void **one = malloc(1031 * sizeof *one);
    keel_br_scratch s = {0};
    for (size_t n = 0; n <= 1031; n++) {
        for (size_t i = 0; i < n; i++) {
            if (i && rnd() % 5 == 0) {
                r[i] = r[rnd() % i]; /* a duplicate */
                continue;
            }
            /* A fifth lie past the end: absent. */
            r[i].off = rnd() % (DISK + DISK / 4);
            r[i].len = 1 + rnd() % 64;
            r[i].addr = NULL;
        }
        /* One call: nothing free. */
        keel_br_allowance none = {0};
        keel_br_source src = fake_source();
        CHECK_OK(keel__br_read(&src, &none, r, n, one, &s));
        CHECK_EQ(F.calls, n ? 1 : 0);
        CHECK(!F.unsorted);
        for (size_t i = 0; i < n; i++) {
            const void *want = r[i].off + r[i].len <= DISK ? F.disk + r[i].off
                                                           : NULL;
            CHECK_MSG(one[i] == want, "n %zu: range %zu answered wrong", n, i);
        }
        /* Overlapped: the same answers in the same order. */
        keel_br_allowance lots = {40};
        src = fake_source();
        CHECK_OK(keel__br_read(&src, &lots, r, n, got, &s));
        CHECK(F.calls <= 16);
        CHECK(!F.unsorted);
        CHECK(memcmp(got, one, n * sizeof *got) == 0);
        CHECK_EQ(lots.free, 40);
    }
    keel__br_scratch_free(&s);
    free(r);
    free(got);
    free(one);
}

TEST(failed_run_and_short_read_fail_the_batch)
{
    keel_br_range r[33];
    const void *out[33];
    keel_br_scratch s = {0};
    spread(r, 33);
    for (int mode = 0; mode < 2; mode++)
        for (int at = 1; at <= 16; at++) {
            keel_br_allowance a = {15};
            keel_br_source src = fake_source();
            if (mode)
                F.short_at = at;
            else
                F.fail_at = at;
            memset(out, 0, sizeof out);
            CHECK_ERR(keel__br_read(&src, &a, r, 33, out, &s), KEEL_EIO);
            CHECK_MSG_HAS("help:");
            CHECK_EQ(F.calls, at);    /* no run started after the failure */
            CHECK_EQ(F.waits, 1);     /* the started ones waited for */
            CHECK_EQ(a.free, 15);     /* the allowance given back */
            for (int i = 0; i < 33; i++)
                CHECK(out[i] == NULL); /* never a partial result */
        }
    keel__br_scratch_free(&s);
}

TEST(allowance_exact_calls)
{
    static const struct { int free; int calls; } t[] = {
        {0, 1}, {3, 4}, {7, 8}, {15, 16}, {40, 16},
    };
    keel_br_range r[64];
    const void *out[64];
    keel_br_scratch s = {0};
    spread(r, 64);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        keel_br_allowance a = {t[i].free};
        keel_br_source src = fake_source();
        CHECK_OK(keel__br_read(&src, &a, r, 64, out, &s));
        CHECK_MSG(F.calls == t[i].calls, "%d free: %d calls, not %d",
                  t[i].free, F.calls, t[i].calls);
        CHECK_EQ(a.free, t[i].free);
    }
    /* Taking never waits and never goes below zero. */
    keel_br_allowance a = {3};
    CHECK_EQ(keel__br_take(&a, 15), 3);
    CHECK_EQ(keel__br_take(&a, 15), 0);
    keel__br_give(&a, 3);
    CHECK_EQ(a.free, 3);
    keel__br_scratch_free(&s);
}

/* --- searches with the module on and off ------------------------------- */

static int fail_countdown = -1; /* advise calls left before -EIO (-1: never) */
static long advise_calls;

static int
counting_advise(void *addr, size_t len, enum keel_advice advice)
{
    if (advice == KEEL_ADV_WILLNEED) {
        advise_calls++;
        if (fail_countdown == 0)
            return -EIO;
        if (fail_countdown > 0)
            fail_countdown--;
    }
    return keel__os_posix.advise(addr, len, advice);
}

/* Every page reported out of memory: the residency record starts empty,
** so searches bring pages in even though the test's files are cached. */
static int
nothing_resident(void *addr, size_t len, unsigned char *vec)
{
    (void)addr;
    memset(vec, 0, (len + keel__page_size() - 1) / keel__page_size());
    return 0;
}

static keel_os counting_os;

static void
use_counting_os(void)
{
    counting_os = keel__os_posix;
    counting_os.advise = counting_advise;
    counting_os.resident = nothing_resident;
    keel__os = &counting_os;
}

/* Searches every query with the module on (the record forgotten first, so
** the search brings its pages in) and off; fails on any difference in ids
** or distance bits. */
static int
same_on_off(keel_index *idx, const test_vecs *q, size_t k,
            const keel_search_params *p)
{
    keel_result on[50], off[50];
    long calls0 = advise_calls;
    /* The walk of one expansion at a time: a cold walk's beam answers
     * differently (a_beam_walk_waits_less_finds_as_much_and_answers_alike
     * checks it). */
    keel__br_set_beam(1);
    for (size_t i = 0; i < q->n; i++) {
        const float *x = q->v + i * q->dim;
        size_t n_on = 0, n_off = 0;
        keel__br_set_enabled(2);
        keel__br_forget(idx->st); /* a cold file, as at open */
        if (keel_search(idx, x, k, p, on, &n_on) != KEEL_OK)
            return 0;
        keel__br_set_enabled(0);
        if (keel_search(idx, x, k, p, off, &n_off) != KEEL_OK)
            return 0;
        if (n_on != n_off) {
            keel__br_set_beam(0);
            return 0;
        }
        for (size_t j = 0; j < n_on; j++)
            if (on[j].id != off[j].id ||
                memcmp(&on[j].distance, &off[j].distance, sizeof(float))) {
                keel__br_set_beam(0);
                return 0;
            }
    }
    keel__br_set_enabled(2);
    keel__br_set_beam(0);
    return advise_calls > calls0; /* the module did bring pages in */
}

static int
drop_fifths(uint64_t id, void *arg)
{
    (void)arg;
    return id % 5 != 0;
}

static void
on_off_case(const char *name, int metric, int precision)
{
    use_counting_os();
    test_vecs base = td_load_fvecs("glove-100-10k.base.fvecs");
    test_vecs q = td_load_fvecs("glove-100-10k.query.fvecs");
    keel_options o;
    memset(&o, 0, sizeof o);
    o.metric = metric;
    o.precision = precision;
    keel_index *idx;
    const char *path = test_path(name);
    CHECK_OK(keel_open(path, base.dim, &o, &idx));
    CHECK_OK(keel_add_batch(idx, base.v, 3000, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    CHECK(same_on_off(idx, &q, 10, NULL));
    /* Filters: an allow-list and a callback. */
    uint64_t *allow = malloc(1000 * sizeof *allow);
    for (uint64_t i = 0; i < 1000; i++)
        allow[i] = i * 3;
    keel_search_params p;
    memset(&p, 0, sizeof p);
    p.allowed = allow;
    p.n_allowed = 1000;
    CHECK(same_on_off(idx, &q, 10, &p));
    memset(&p, 0, sizeof p);
    p.filter = drop_fifths;
    p.ef = 100;
    CHECK(same_on_off(idx, &q, 10, &p));
    free(allow);
    CHECK_OK(keel_close(idx));
    /* Readers next to a writer: the reader sees each commit, the writer
     * its own unflushed adds. */
    keel_index *w, *r;
    path = test_path(name);
    unlink(path);
    CHECK_OK(keel_open(path, base.dim, &o, &w));
    CHECK_OK(keel_add_batch(w, base.v, 1000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_open_reader(path, NULL, &r));
    for (size_t b = 1; b < 5; b++) {
        CHECK_OK(keel_add_batch(w, base.v + b * 1000 * base.dim, 500, NULL,
                                NULL));
        CHECK(same_on_off(w, &q, 10, NULL));
        CHECK_OK(keel_flush(w));
        CHECK(same_on_off(r, &q, 10, NULL));
    }
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
    td_free_vecs(&base);
    td_free_vecs(&q);
    keel__os = &keel__os_posix;
}

TEST(on_off_l2)
{
    on_off_case("l2.keel", KEEL_L2, KEEL_F32);
}

TEST(on_off_cosine)
{
    on_off_case("cos.keel", KEEL_COSINE, KEEL_F32);
}

TEST(on_off_f16)
{
    on_off_case("f16.keel", KEEL_L2, KEEL_F16);
}

/* Searches the nq queries of q (k 10, ef 24), each as the first search of
** a cold file when cold (the record forgotten first) with the module on,
** into res (nq x 10) and nf; adds the brings that waited to *waits. */
static int
search_all(keel_index *idx, const test_vecs *q, int cold, keel_result *res,
           size_t *nf, uint64_t *waits)
{
    keel_search_params p;
    memset(&p, 0, sizeof p);
    p.ef = 24;
    for (size_t i = 0; i < q->n; i++) {
        keel__br_set_enabled(cold ? 2 : 0);
        if (cold)
            keel__br_forget(idx->st);
        if (keel_search(idx, q->v + i * q->dim, 10, &p, res + i * 10,
                        &nf[i]) != KEEL_OK)
            return 0;
        *waits += idx->pool->waits;
    }
    keel__br_set_enabled(2);
    return 1;
}

static int
same_rows(const keel_result *a, const size_t *na, const keel_result *b,
          const size_t *nb, size_t nq)
{
    for (size_t i = 0; i < nq; i++) {
        if (na[i] != nb[i])
            return 0;
        for (size_t j = 0; j < na[i]; j++)
            if (a[i * 10 + j].id != b[i * 10 + j].id ||
                memcmp(&a[i * 10 + j].distance, &b[i * 10 + j].distance, 4))
                return 0;
    }
    return 1;
}

/* A cold walk's beam (batch_reads.h keel__br_beam): with 4 expansions per
** step the first search of a cold file waits for fewer batches one after
** another, and finds as many of the true nearest (GloVe-100 slice, ef 24,
** recall@10) as one expansion at a time, which answers exactly as the
** walk of a file in memory; the searches after it answer as that walk. */
TEST(a_beam_walk_waits_less_finds_as_much_and_answers_alike)
{
    use_counting_os(); /* nothing resident: every first search is cold */
    test_vecs base = {0}, q = {0};
    test_truth gt = {0};
    td_glove_slice(&base, &q, &gt, NULL);
    keel_index *idx;
    CHECK_OK(keel_open(test_path("beam.keel"), base.dim, NULL, &idx));
    CHECK_OK(keel_add_batch(idx, base.v, base.n, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    size_t nq = q.n;
    keel_result *res[4];
    size_t *nf[4];
    uint64_t waits[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        res[i] = calloc(nq * 10, sizeof *res[i]);
        nf[i] = calloc(nq, sizeof *nf[i]);
    }
    keel__br_set_beam(1);
    CHECK(search_all(idx, &q, 1, res[0], nf[0], &waits[0]));
    keel__br_set_beam(4);
    CHECK(search_all(idx, &q, 1, res[1], nf[1], &waits[1]));
    CHECK(search_all(idx, &q, 0, res[2], nf[2], &waits[2]));
    /* After a cold first search, the next search of the file (not cold:
     * KEEL_BR_COLD_SEARCHES) walks as a file in memory. */
    keel_result one[10];
    size_t none;
    for (size_t i = 0; i < nq; i++) {
        keel_search_params p;
        memset(&p, 0, sizeof p);
        p.ef = 24;
        keel__br_forget(idx->st);
        CHECK_OK(keel_search(idx, q.v + i * q.dim, 10, &p, one, &none));
        CHECK_OK(keel_search(idx, q.v + i * q.dim, 10, &p, res[3] + i * 10,
                             &nf[3][i]));
    }
    keel__br_set_beam(0);
    double r1 = td_recall(res[0], nf[0], nq, 10, &gt, NULL);
    double r4 = td_recall(res[1], nf[1], nq, 10, &gt, NULL);
    printf("     beam 1: %llu waits, recall %.4f; beam 4: %llu waits, "
           "recall %.4f (%zu queries)\n", (unsigned long long)waits[0], r1,
           (unsigned long long)waits[1], r4, nq);
    CHECK(same_rows(res[0], nf[0], res[2], nf[2], nq)); /* W = 1: as hot */
    CHECK(same_rows(res[3], nf[3], res[2], nf[2], nq)); /* once in */
    CHECK(waits[2] == 0);
    CHECK(waits[0] > 0);
    CHECK(waits[1] * 5 < waits[0] * 4); /* at least a fifth fewer */
    CHECK(r4 >= r1);
    for (int i = 0; i < 4; i++) {
        free(res[i]);
        free(nf[i]);
    }
    CHECK_OK(keel_close(idx));
    td_free_vecs(&base);
    td_free_vecs(&q);
    td_free_truth(&gt);
    keel__os = &keel__os_posix;
}

TEST(read_failure_mid_search)
{
    use_counting_os();
    test_vecs base = td_load_fvecs("glove-100-10k.base.fvecs");
    test_vecs q = td_load_fvecs("glove-100-10k.query.fvecs");
    keel_index *idx;
    CHECK_OK(keel_open(test_path("eio.keel"), base.dim, NULL, &idx));
    CHECK_OK(keel_add_batch(idx, base.v, 3000, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    keel_result want[10], got[10];
    size_t n_want, n_got;
    keel__br_set_enabled(0);
    CHECK_OK(keel_search(idx, q.v, 10, NULL, want, &n_want));
    keel__br_set_enabled(2);
    for (int after = 0; after < 6; after++) {
        keel__br_forget(idx->st);
        fail_countdown = after;
        long calls0 = advise_calls;
        CHECK_ERR(keel_search(idx, q.v, 10, NULL, got, &n_got), KEEL_EIO);
        CHECK_MSG_HAS("help:");
        CHECK_EQ(advise_calls - calls0, after + 1);
        /* The next search works and gives the same answer. */
        fail_countdown = -1;
        CHECK_OK(keel_search(idx, q.v, 10, NULL, got, &n_got));
        CHECK_EQ(n_got, n_want);
        for (size_t j = 0; j < n_got; j++) {
            CHECK_U64(got[j].id, want[j].id);
            CHECK(memcmp(&got[j].distance, &want[j].distance, 4) == 0);
        }
    }
    /* A batch of queries fails whole. (A callback keeps the batch on this
     * thread, which then holds the message.) */
    keel__br_forget(idx->st);
    fail_countdown = 2;
    keel_result *many = malloc(q.n * 10 * sizeof *many);
    size_t *nf = malloc(q.n * sizeof *nf);
    keel_search_params p;
    memset(&p, 0, sizeof p);
    p.filter = drop_fifths;
    CHECK_ERR(keel_search_batch(idx, q.v, q.n, 10, &p, many, nf), KEEL_EIO);
    fail_countdown = -1;
    CHECK_OK(keel_search_batch(idx, q.v, q.n, 10, &p, many, nf));
    free(many);
    free(nf);
    CHECK_OK(keel_close(idx));
    td_free_vecs(&base);
    td_free_vecs(&q);
    keel__os = &keel__os_posix;
}

TEST(hot_file_and_later_searches_pay_nothing)
{
    test_vecs base = td_load_fvecs("glove-100-10k.base.fvecs");
    test_vecs q = td_load_fvecs("glove-100-10k.query.fvecs");
    keel_index *idx;
    use_counting_os();
    counting_os.resident = keel__os_posix.resident; /* the truth: cached */
    CHECK_OK(keel_open(test_path("hot.keel"), base.dim, NULL, &idx));
    CHECK_OK(keel_add_batch(idx, base.v, 3000, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    keel__br_set_enabled(2);
    keel__br_forget(idx->st);
    long calls0 = advise_calls;
    keel_result res[10];
    size_t n;
    for (size_t i = 0; i < q.n; i++)
        CHECK_OK(keel_search(idx, q.v + i * q.dim, 10, NULL, res, &n));
    CHECK_EQ(advise_calls, calls0); /* known resident from the start */
    /* A cold file too small to gain (3,000 x 100-d, 26 granules): the
     * normal setting leaves it to the system's read-around. */
    counting_os.resident = nothing_resident;
    keel__br_set_enabled(1);
    keel__br_forget(idx->st);
    CHECK_OK(keel_search(idx, q.v, 10, NULL, res, &n));
    CHECK_EQ(advise_calls, calls0);
    /* A cold file: only the first search brings pages in. */
    keel__br_set_enabled(2);
    keel__br_forget(idx->st);
    CHECK_OK(keel_search(idx, q.v, 10, NULL, res, &n));
    long first = advise_calls - calls0;
    CHECK(first > 0);
    for (size_t i = 1; i < q.n; i++)
        CHECK_OK(keel_search(idx, q.v + i * q.dim, 10, NULL, res, &n));
    CHECK_EQ(advise_calls - calls0, first);
    CHECK_OK(keel_close(idx));
    td_free_vecs(&base);
    td_free_vecs(&q);
    keel__os = &keel__os_posix;
}

/* --- access advice while a search brings its pages in ------------------ */

/* Mappings of path in this process, and how many of them have random-access
** advice (VmFlags "rr" in /proc/self/smaps). */
static void
count_random_advice(const char *path, int *mapped, int *random)
{
    *mapped = *random = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return;
    char line[4096];
    int in = 0;
    size_t pl = strlen(path);
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n')
            line[--n] = 0;
        if (strncmp(line, "VmFlags:", 8) == 0) {
            if (in) {
                ++*mapped;
                *random += strstr(line, " rr") != NULL;
            }
            in = 0;
        }
        /* A mapping's first line ends with its path. */
        if (n >= pl && strcmp(line + n - pl, path) == 0 &&
            (n == pl || line[n - pl - 1] == ' '))
            in = 1;
    }
    fclose(f);
}

static const char *advice_path;
static int mid_mapped = -1, mid_random = -1;

/* A filter that accepts everything and, the first time it is called (in
** the middle of a walk), looks at the mappings' advice. */
static int
look_at_advice(uint64_t id, void *arg)
{
    (void)id;
    (void)arg;
    if (mid_mapped < 0)
        count_random_advice(advice_path, &mid_mapped, &mid_random);
    return 1;
}

TEST(a_cold_search_faults_pages_alone_then_gives_advice_back)
{
    test_vecs base = td_load_fvecs("glove-100-10k.base.fvecs");
    test_vecs q = td_load_fvecs("glove-100-10k.query.fvecs");
    use_counting_os(); /* nothing resident: every search here is cold */
    keel_index *idx;
    advice_path = test_path("advice.keel");
    CHECK_OK(keel_open(advice_path, base.dim, NULL, &idx));
    CHECK_OK(keel_add_batch(idx, base.v, 3000, NULL, NULL));
    CHECK_OK(keel_flush(idx));
    keel__br_set_enabled(2);
    keel_search_params p;
    memset(&p, 0, sizeof p);
    p.filter = look_at_advice;
    keel_result res[10], ref[10];
    size_t n, nref;
    int mapped, random;
    for (int round = 0; round < 3; round++) {
        keel__br_forget(idx->st);
        mid_mapped = mid_random = -1;
        CHECK_OK(keel_search(idx, q.v + round * q.dim, 10, &p, res, &n));
        CHECK(mid_mapped > 0);
        CHECK_EQ(mid_random, mid_mapped); /* during: every mapping */
        count_random_advice(advice_path, &mapped, &random);
        CHECK(mapped > 0);
        CHECK_EQ(random, 0); /* after: given back */
        /* The same answer as a search with the module off. */
        keel__br_set_enabled(0);
        CHECK_OK(keel_search(idx, q.v + round * q.dim, 10, &p, ref, &nref));
        keel__br_set_enabled(2);
        CHECK_EQ(n, nref);
        for (size_t j = 0; j < n; j++) {
            CHECK_EQ(res[j].id, ref[j].id);
            CHECK(memcmp(&res[j].distance, &ref[j].distance, 4) == 0);
        }
    }
    /* A filtered search that turns to the exact scan halfway gives the
     * advice back too. */
    uint64_t allow[5] = {1, 2, 3, 4, 5};
    memset(&p, 0, sizeof p);
    p.allowed = allow;
    p.n_allowed = 5;
    keel__br_forget(idx->st);
    CHECK_OK(keel_search(idx, q.v, 5, &p, res, &n));
    CHECK_EQ(n, 5);
    count_random_advice(advice_path, &mapped, &random);
    CHECK_EQ(random, 0);
    /* A later, warm search (the cold searches are spent) leaves it alone. */
    CHECK_OK(keel_search(idx, q.v, 10, NULL, res, &n));
    count_random_advice(advice_path, &mapped, &random);
    CHECK_EQ(random, 0);
    CHECK_OK(keel_close(idx));
    td_free_vecs(&base);
    td_free_vecs(&q);
    keel__os = &keel__os_posix;
    keel__br_set_enabled(2);
}

TEST(huge_page_advice_outlives_cold_searches)
{
    /* 3,000 random 1,024-d vectors (12 MB): whole 2 MiB pieces of them. */
    enum { N = 3000, D = 1024 };
    float *v = malloc(sizeof(float) * N * D);
    CHECK(v != NULL);
    for (size_t i = 0; i < (size_t)N * D; i++)
        v[i] = (float)(rnd() % 1000) / 1000.0f;
    const char *path = test_path("huge.keel");
    keel_index *w, *r;
    keel_options wo;
    memset(&wo, 0, sizeof wo);
    wo.max_connections = 4;
    wo.ef_construction = 20;
    CHECK_OK(keel_open(path, D, &wo, &w));
    CHECK_OK(keel_add_batch(w, v, N, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_close(w));
    use_counting_os();
    keel_options o;
    memset(&o, 0, sizeof o);
    o.flags = KEEL_HUGE_PAGES;
    CHECK_OK(keel_open_reader(path, &o, &r));
    int mapped, random0, random;
    count_random_advice(path, &mapped, &random0);
    CHECK(random0 > 0); /* the 2 MiB pieces of vectors */
    keel__br_set_enabled(2);
    keel_result res[10];
    size_t n;
    for (int round = 0; round < 3; round++) {
        keel__br_forget(r->st);
        long calls0 = advise_calls;
        CHECK_OK(keel_search(r, v + round * D, 10, NULL, res, &n));
        CHECK(advise_calls > calls0); /* a cold search */
        count_random_advice(path, &mapped, &random);
        CHECK_EQ(random, random0);
    }
    /* Warm restarted (which drops the record) changes nothing either. */
    CHECK_OK(keel_warm(r));
    keel__br_forget(r->st);
    CHECK_OK(keel_search(r, v, 10, NULL, res, &n));
    count_random_advice(path, &mapped, &random);
    CHECK_EQ(random, random0);
    CHECK_OK(keel_close(r));
    free(v);
    keel__os = &keel__os_posix;
    keel__br_set_enabled(2);
}

/* A cold search means read-ahead advice was given during it. */
static int
search_was_cold(keel_index *idx, const float *q, uint32_t ef)
{
    long calls0 = advise_calls;
    keel_search_params sp;
    memset(&sp, 0, sizeof sp);
    sp.ef = ef;
    keel_result res[10];
    size_t n;
    if (keel_search(idx, q, 1, &sp, res, &n) != KEEL_OK || n != 1)
        return -1;
    return advise_calls > calls0;
}

TEST(after_warm_finished_at_most_one_search_is_cold_after_growth)
{
    test_vecs base = td_load_fvecs("glove-100-10k.base.fvecs");
    test_vecs q = td_load_fvecs("glove-100-10k.query.fvecs");
    use_counting_os(); /* nothing resident */
    keel__br_set_enabled(2);
    const char *path = test_path("warmed.keel");
    keel_index *w, *r;
    CHECK_OK(keel_open(path, base.dim, NULL, &w));
    CHECK_OK(keel_add_batch(w, base.v, 2000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    keel_options o;
    memset(&o, 0, sizeof o);
    o.flags = KEEL_WARM;
    CHECK_OK(keel_open_reader(path, &o, &r));
    for (int t = 0; t < 10000 && !keel__warm_done(r); t++)
        usleep(1000); /* warm reads it all */
    CHECK(keel__warm_done(r));
    /* The index grows past what warm read: one cold search, as on a
     * handle that never warmed, then none. */
    CHECK_OK(keel_add_batch(w, base.v + 2000 * base.dim, 8000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    int cold = 0;
    for (int i = 0; i < 20; i++) {
        int c = search_was_cold(r, q.v + (size_t)i * q.dim, 10);
        CHECK(c >= 0);
        cold += c;
    }
    CHECK(cold <= 1);
    CHECK_OK(keel_close(r));
    CHECK_OK(keel_close(w));
    td_free_vecs(&base);
    td_free_vecs(&q);
    keel__os = &keel__os_posix;
}

static const char *fork_path;
static int fork_stop; /* atomic */

/* Opens readers and searches each once: every first search is cold, and
** takes the registry's lock to change the mappings' advice. */
static void *
cold_searches(void *arg)
{
    const test_vecs *q = arg;
    keel_result res[10];
    size_t n;
    for (size_t i = 0; !__atomic_load_n(&fork_stop, __ATOMIC_ACQUIRE); i++) {
        keel_index *r;
        if (keel_open_reader(fork_path, NULL, &r) != KEEL_OK)
            continue;
        keel_search(r, q->v + (i % q->n) * q->dim, 10, NULL, res, &n);
        keel_close(r);
    }
    return NULL;
}

/* A child of a process whose threads run cold searches, and whose warm
** threads read, opens readers of its own, with warm, and searches: it must
** not hang on a lock copied mid-use from the parent. */
TEST(a_child_searches_whatever_warm_and_cold_searches_were_doing_at_the_fork)
{
#ifdef __SANITIZE_ADDRESS__
    /* The child allocates, and GCC 12's AddressSanitizer runtime does not
     * hold its allocator's locks across fork() (it intercepts vfork only):
     * a child can hang on a lock a parent's thread held inside malloc. The
     * plain build runs this test. */
    TEST_SKIP("the sanitizer's allocator is not fork-safe in a child that "
              "allocates");
#endif
    test_vecs base = td_load_fvecs("glove-100-10k.base.fvecs");
    test_vecs q = td_load_fvecs("glove-100-10k.query.fvecs");
    use_counting_os(); /* nothing resident: first searches are cold */
    keel__br_set_enabled(2);
    const char *path = fork_path = test_path("forked.keel");
    keel_index *w;
    CHECK_OK(keel_open(path, base.dim, NULL, &w));
    CHECK_OK(keel_add_batch(w, base.v, 3000, NULL, NULL));
    CHECK_OK(keel_flush(w));
    CHECK_OK(keel_close(w));
    keel_options o;
    memset(&o, 0, sizeof o);
    o.flags = KEEL_WARM;
    __atomic_store_n(&fork_stop, 0, __ATOMIC_RELEASE);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, cold_searches, &q) == 0);
    int hung = 0, failed = 0;
    for (int i = 0; i < 60; i++) {
        keel_index *waiting; /* its warm thread reads */
        CHECK_OK(keel_open_reader(path, &o, &waiting));
        usleep(500);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            alarm(10);
            for (int h = 0; h < 2; h++) {
                keel_index *c;
                keel_result res[10];
                size_t n;
                if (keel_open_reader(path, &o, &c) != KEEL_OK)
                    _exit(3);
                if (keel_search(c, q.v + (size_t)h * q.dim, 10, NULL, res,
                                &n) != KEEL_OK || n != 10)
                    _exit(4);
                keel_close(c);
            }
            _exit(0);
        }
        int status;
        CHECK(waitpid(pid, &status, 0) == pid);
        hung += WIFSIGNALED(status);
        failed += WIFEXITED(status) && WEXITSTATUS(status) != 0;
        CHECK_OK(keel_close(waiting));
    }
    __atomic_store_n(&fork_stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(hung, 0);
    CHECK_EQ(failed, 0);
    td_free_vecs(&base);
    td_free_vecs(&q);
    keel__os = &keel__os_posix;
}

TEST_MAIN()
