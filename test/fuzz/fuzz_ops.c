/* fuzz_ops.c -- fuzz target: random sequences of API calls on one writer
** (and maybe a reader), checked after every step against a simple model.
**
** Hunts wrong answers, not only crashes: lost or resurrected vectors, wrong
** counts, wrong return codes, results with deleted ids or wrong distances,
** filtered searches that miss their exact answer, a crash (close without
** flush) that does not revert to the last flush, compaction that changes
** what is stored, readers that do not see the last flush. Any mismatch
** aborts with a message, so libFuzzer records it as a crash.
**
** The index: dim 4, L2 or inner product, f32 or f16, M 2..16, small
** segments and id tables. Vector components are multiples of 1/16 in
** [-8, 8): exact in f16, and every squared distance and dot product of such
** vectors is exact in float, so the model can demand exact distances and
** exact orders. Ids come from a small space (0..23) so they collide, plus a
** few special ones (UINT64_MAX, UINT64_MAX - 1, large values); batches may
** also take ids that all hash to one position of the id table.
**
** The model: id -> vector for the live vectors of the writer (work) and of
** the last flush (committed), the next automatic id and the slot count of
** each. After every step: keel_count, keel_get of every id in the small
** space (every live id after a flush, a reopen or a compaction, with
** keel_check), and a reader's count after keel_refresh. Searches: results
** live, distinct, at their exact distance, sorted by distance then id;
** allow-list searches (scanned exactly) and filter searches (which fall back
** to a scan) must find exactly min(k, matches). Unfiltered searches are
** approximate: a node whose in-links were all pruned cannot be reached, so
** min(k, live) results are demanded only while the file has at most M0 + 1
** slots (no list was ever full, nothing was pruned).
**
** Input: byte 0 configures the index (bit 0 f16, bit 1 inner product, bits
** 2-3 M, bits 4-5 ef_search); then operations, an op byte and its operands
** each (see the OP_ names). Reads past the end give zeros.
*/
#include "fuzz.h"
#include "keel.h"

#include <math.h>

void keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                         uint32_t heap_base, uint32_t heap_doublings,
                         uint32_t idtab_log2);

#define DIM         4
#define IDSPACE     24
#define MAX_OPS     200
#define MAX_ADDED   320   /* vectors added per input, at most */
#define MAX_BATCH   40

/* The multiplicative inverse of the id table's hash multiplier
** 0x9E3779B97F4A7C15 mod 2^64: ids j * GOLDEN_INVERSE all have home
** position 0, at every table size, for small j. */
#ifndef GOLDEN_INVERSE
#define GOLDEN_INVERSE 0xF1DE83E19937733Dull
#endif

enum {
    OP_ADD, OP_ADD_WITH_ID, OP_ADD_BATCH, OP_DELETE, OP_FLUSH,
    OP_CRASH_REOPEN, OP_COMPACT, OP_SEARCH, OP_FILTERED, OP_READER, OP_GET,
    OP_DELETE_LIVE, OP_READD_DELETED, OP_SEARCH_BATCH, OP_STAT,
    OP_FILTER_FN, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "add", "add_with_id", "add_batch", "delete", "flush", "crash_reopen",
    "compact", "search", "filtered", "reader", "get", "delete_live",
    "readd_deleted", "search_batch", "stat", "filter_fn"};

typedef struct entry {
    uint64_t id;
    float v[DIM];
} entry;

typedef struct model {
    entry *e;
    size_t n, cap;
    uint64_t next_id;
    uint64_t slots;           /* vectors in the file, live or deleted */
} model;

/* Everything one input works on. */
typedef struct state {
    const char *path;
    keel_options opt;
    keel_index *wr, *rd;
    model work, committed;
    uint64_t deleted[64];     /* recently deleted ids, for re-adding */
    size_t ndeleted;
    size_t added;             /* vectors added so far */
    int step;
    int op;
} state;

static state S;

#define MIN_SZ(a, b) ((a) < (b) ? (a) : (b))

/* A broken expectation: where in the sequence, then what. */
#define MISMATCH(...)                                                       \
    do {                                                                    \
        fprintf(stderr, "\nfuzz_ops: step %d (%s)", S.step,                 \
                S.op >= 0 && S.op < OP_COUNT ? op_names[S.op] : "setup");   \
        fuzz_fail(__VA_ARGS__);                                             \
    } while (0)

/* --- the model ----------------------------------------------------------- */

static ptrdiff_t
model_find(const model *m, uint64_t id)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].id == id)
            return (ptrdiff_t)i;
    return -1;
}

static void
model_put(model *m, uint64_t id, const float *v)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        entry *e = realloc(m->e, cap * sizeof *e);
        if (!e)
            fuzz_fail("out of memory");
        m->e = e;
        m->cap = cap;
    }
    m->e[m->n].id = id;
    memcpy(m->e[m->n].v, v, sizeof m->e[m->n].v);
    m->n++;
    if (id >= m->next_id)
        m->next_id = id + 1;
}

static void
model_del(model *m, uint64_t id)
{
    ptrdiff_t i = model_find(m, id);
    if (i >= 0)
        m->e[i] = m->e[--m->n];
}

static void
model_copy(model *dst, const model *src)
{
    dst->n = 0;
    for (size_t i = 0; i < src->n; i++)
        model_put(dst, src->e[i].id, src->e[i].v);
    dst->next_id = src->next_id;
    dst->slots = src->slots;
}

static void
remember_deleted(uint64_t id)
{
    S.deleted[S.ndeleted++ % 64] = id;
}

/* --- decoding ------------------------------------------------------------ */

static void
read_vec(fuzz_in *in, float *v)
{
    for (int j = 0; j < DIM; j++)
        v[j] = (float)(int8_t)fuzz_u8(in) / 16.0f;
}

static uint64_t
read_id(fuzz_in *in)
{
    static const uint64_t special[] = {
        UINT64_MAX, UINT64_MAX - 1, 1ull << 40, 0xFFFFFFFFull, 1000,
        (1ull << 63) + 5, 99, 0x100000000ull};
    uint8_t b = fuzz_u8(in);
    if (b < 0xF8)
        return b % IDSPACE;
    return special[b - 0xF8];
}

/* --- distances ----------------------------------------------------------- */

/* The internal distance keel sorts by: squared L2, or 1 - dot for inner
** product. Exact for the lattice vectors this target uses. */
static float
internal_dist(const float *q, const float *v)
{
    double s = 0;
    for (int j = 0; j < DIM; j++) {
        double d = (double)q[j] - v[j];
        s += S.opt.metric == KEEL_L2 ? d * d : (double)q[j] * v[j];
    }
    return S.opt.metric == KEEL_L2 ? (float)s : (float)(1.0 - s);
}

static float
reported(float internal)
{
    return S.opt.metric == KEEL_L2 ? sqrtf(internal) : internal;
}

static int
dist_ok(float got, float want)
{
    return fabsf(got - want) <= 1e-4f * fabsf(want) + 1e-6f;
}

typedef struct cand {
    uint64_t id;
    float internal;
} cand;

static int
cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->internal != y->internal)
        return x->internal < y->internal ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* For a failure report: what came back and what the model holds. */
static void
dump_results(const model *m, const float *q, const keel_result *r, size_t n)
{
    fprintf(stderr, "\nquery (%g %g %g %g)\nresults:", (double)q[0],
            (double)q[1], (double)q[2], (double)q[3]);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %llu@%.6g", (unsigned long long)r[i].id,
                (double)r[i].distance);
    fprintf(stderr, "\nmodel:");
    for (size_t i = 0; i < m->n; i++)
        fprintf(stderr, " %llu@%.6g", (unsigned long long)m->e[i].id,
                (double)reported(internal_dist(q, m->e[i].v)));
    fprintf(stderr, "\n");
}

/* Whether an unfiltered search must find min(k, live): while the file holds
** at most M0 + 1 slots no neighbour list was ever full, so no link was ever
** pruned and every node is reachable. Past that, HNSW may cut a node off
** (its in-links pruned), and a search finds fewer. */
static int
search_is_exhaustive(void)
{
    return S.work.slots <= 2ull * S.opt.max_connections + 1;
}

/* Checks results of a search on a handle whose live set is m: each id live
** and accepted, no id twice, each distance exact, sorted by distance then
** id; exactly min(k, live and accepted) of them if exact, else at most. */
static void
check_results(const model *m, const float *q, size_t k, const keel_result *r,
              size_t n, int (*accept)(uint64_t), int exact, const char *what)
{
    size_t acceptable = 0;
    for (size_t i = 0; i < m->n; i++)
        acceptable += !accept || accept(m->e[i].id);
    size_t want = MIN_SZ(k, acceptable);
    if (exact ? n != want : n > want) {
        dump_results(m, q, r, n);
        MISMATCH("%s: %zu results for k %zu with %zu live, want %zu", what, n,
                 k, acceptable, want);
    }
    for (size_t i = 0; i < n; i++) {
        ptrdiff_t at = model_find(m, r[i].id);
        if (at < 0)
            MISMATCH("%s: result %zu is id %llu, which is not live", what, i,
                     (unsigned long long)r[i].id);
        if (accept && !accept(r[i].id))
            MISMATCH("%s: result %zu is id %llu, which the filter refuses",
                     what, i, (unsigned long long)r[i].id);
        float want_d = reported(internal_dist(q, m->e[at].v));
        if (!dist_ok(r[i].distance, want_d))
            MISMATCH("%s: result %zu (id %llu) at distance %.9g, want %.9g",
                     what, i, (unsigned long long)r[i].id,
                     (double)r[i].distance, (double)want_d);
        for (size_t j = 0; j < i; j++)
            if (r[j].id == r[i].id)
                MISMATCH("%s: id %llu appears twice", what,
                         (unsigned long long)r[i].id);
        if (i > 0 && (r[i - 1].distance > r[i].distance ||
                      (r[i - 1].distance == r[i].distance &&
                       r[i - 1].id > r[i].id)))
            MISMATCH("%s: results %zu and %zu out of order (%llu at %.9g, "
                     "%llu at %.9g)", what, i - 1, i,
                     (unsigned long long)r[i - 1].id,
                     (double)r[i - 1].distance,
                     (unsigned long long)r[i].id, (double)r[i].distance);
    }
}

/* --- checks -------------------------------------------------------------- */

static void
check_get(keel_index *idx, const model *m, uint64_t id, const char *who)
{
    float got[DIM];
    ptrdiff_t at = model_find(m, id);
    int rc = keel_get(idx, id, got);
    if (at < 0) {
        if (rc != KEEL_ENOTFOUND)
            MISMATCH("%s keel_get(%llu) gave rc %d for an id that is not "
                     "live, want KEEL_ENOTFOUND", who,
                     (unsigned long long)id, rc);
        return;
    }
    if (rc != KEEL_OK)
        MISMATCH("%s keel_get(%llu) gave rc %d (%s) for a live id", who,
                 (unsigned long long)id, rc, keel_errmsg());
    if (memcmp(got, m->e[at].v, sizeof got) != 0)
        MISMATCH("%s keel_get(%llu) gave (%g %g %g %g), stored (%g %g %g %g)",
                 who, (unsigned long long)id, (double)got[0], (double)got[1],
                 (double)got[2], (double)got[3], (double)m->e[at].v[0],
                 (double)m->e[at].v[1], (double)m->e[at].v[2],
                 (double)m->e[at].v[3]);
}

static void
expect_rc(int rc, int want, const char *call)
{
    if (rc != want)
        MISMATCH("%s returned %d (%s), want %d (%s)\n%s", call, rc,
                 keel_strerror(rc), want, keel_strerror(want), keel_errmsg());
}

static void
check_stat(void)
{
    keel_stats st;
    expect_rc(keel_stat(S.wr, &st), KEEL_OK, "keel_stat");
    if (st.count != S.work.n || st.next_id != S.work.next_id ||
        st.dim != DIM || st.slots != S.work.slots ||
        st.slots - st.deleted != st.count || st.is_reader)
        MISMATCH("keel_stat: count %llu next_id %llu dim %u slots %llu "
                 "deleted %llu; model count %zu next_id %llu slots %llu",
                 (unsigned long long)st.count, (unsigned long long)st.next_id,
                 st.dim, (unsigned long long)st.slots,
                 (unsigned long long)st.deleted, S.work.n,
                 (unsigned long long)S.work.next_id,
                 (unsigned long long)S.work.slots);
}

/* Count and the small id space after every step; every live id after the
** steps that rebuild state (full). */
static void
check_state(int full)
{
    uint64_t c = keel_count(S.wr);
    if (c != S.work.n)
        MISMATCH("keel_count %llu, model %zu", (unsigned long long)c,
                 S.work.n);
    check_stat();
    for (uint64_t id = 0; id < IDSPACE; id++)
        check_get(S.wr, &S.work, id, "writer");
    check_get(S.wr, &S.work, UINT64_MAX, "writer");
    if (full) {
        for (size_t i = 0; i < S.work.n; i++)
            check_get(S.wr, &S.work, S.work.e[i].id, "writer");
        int rc = keel_check(S.wr);
        if (rc != KEEL_OK)
            MISMATCH("keel_check: rc %d: %s", rc, keel_errmsg());
    }
    if (S.rd) {
        int rc = keel_refresh(S.rd);
        if (rc != KEEL_OK)
            MISMATCH("reader keel_refresh: rc %d: %s", rc, keel_errmsg());
        c = keel_count(S.rd);
        if (c != S.committed.n)
            MISMATCH("reader keel_count %llu, last flush had %zu",
                     (unsigned long long)c, S.committed.n);
        if (full) {
            for (size_t i = 0; i < S.committed.n; i++)
                check_get(S.rd, &S.committed, S.committed.e[i].id, "reader");
            for (uint64_t id = 0; id < IDSPACE; id++)
                check_get(S.rd, &S.committed, id, "reader");
        }
    }
}


/* --- operations ---------------------------------------------------------- */

static void
op_add(fuzz_in *in)
{
    float v[DIM];
    read_vec(in, v);
    if (S.added >= MAX_ADDED)
        return;
    uint64_t id = 12345;
    int rc = keel_add(S.wr, v, &id);
    if (S.work.next_id == UINT64_MAX) {
        expect_rc(rc, KEEL_EFULL, "keel_add with every id used");
        return;
    }
    expect_rc(rc, KEEL_OK, "keel_add");
    if (id != S.work.next_id)
        MISMATCH("keel_add gave id %llu, want the next id %llu",
                 (unsigned long long)id, (unsigned long long)S.work.next_id);
    model_put(&S.work, id, v);
    S.work.slots++;
    S.added++;
}

static void
op_add_with_id(fuzz_in *in, uint64_t id)
{
    float v[DIM];
    read_vec(in, v);
    if (S.added >= MAX_ADDED)
        return;
    int rc = keel_add_with_id(S.wr, id, v);
    if (id == UINT64_MAX)
        expect_rc(rc, KEEL_EINVAL, "keel_add_with_id(UINT64_MAX)");
    else if (model_find(&S.work, id) >= 0)
        expect_rc(rc, KEEL_EEXIST, "keel_add_with_id of a live id");
    else {
        expect_rc(rc, KEEL_OK, "keel_add_with_id");
        model_put(&S.work, id, v);
        S.work.slots++;
        S.added++;
    }
    check_get(S.wr, &S.work, id, "writer");
}

static void
op_add_batch(fuzz_in *in)
{
    uint8_t b = fuzz_u8(in), mode = fuzz_u8(in);
    size_t n = b % (MAX_BATCH + 1);
    float vecs[MAX_BATCH * DIM];
    uint64_t ids[MAX_BATCH] = {0}, out[MAX_BATCH];
    int explicit_ids = mode & 1;
    /* mode bit 2: ids from one family that all hash to the same place in
     * the id table, j / 0x9E3779B97F4A7C15 (mod 2^64) for j = base + i. */
    uint64_t base = (mode & 4) ? 1 + 40ull * fuzz_u8(in) : 0;
    for (size_t i = 0; i < n; i++) {
        read_vec(in, vecs + i * DIM);
        if (explicit_ids && (mode & 4))
            ids[i] = (base + i) * GOLDEN_INVERSE;
        else if (explicit_ids)
            ids[i] = (mode & 2) ? read_id(in) : 100 + (uint64_t)fuzz_u8(in);
    }
    if (S.added + n > MAX_ADDED)
        return;
    for (size_t i = 0; i < n; i++)
        out[i] = 777;
    int want = KEEL_OK;
    if (n == 0) {
        want = KEEL_OK;
    } else if (explicit_ids) {
        for (size_t i = 0; i < n && want == KEEL_OK; i++)
            if (ids[i] == UINT64_MAX)
                want = KEEL_EINVAL;
        for (size_t i = 0; i < n && want == KEEL_OK; i++)
            for (size_t j = 0; j < i; j++)
                if (ids[i] == ids[j])
                    want = KEEL_EINVAL;
        for (size_t i = 0; i < n && want == KEEL_OK; i++)
            if (model_find(&S.work, ids[i]) >= 0)
                want = KEEL_EEXIST;
    } else if (S.work.next_id > UINT64_MAX - 1 - n) {
        want = KEEL_EFULL;
    }
    int rc = keel_add_batch(S.wr, n ? vecs : NULL, n,
                            explicit_ids ? ids : NULL, out);
    expect_rc(rc, want, "keel_add_batch");
    if (rc != KEEL_OK || n == 0) {
        for (size_t i = 0; i < n; i++)
            if (out[i] != 777)
                MISMATCH("keel_add_batch failed but wrote ids_out[%zu]", i);
        if (explicit_ids)
            for (size_t i = 0; i < n; i++)
                check_get(S.wr, &S.work, ids[i], "writer");
        return;
    }
    uint64_t first = S.work.next_id;
    for (size_t i = 0; i < n; i++) {
        uint64_t id = explicit_ids ? ids[i] : first + i;
        if (out[i] != id)
            MISMATCH("keel_add_batch ids_out[%zu] = %llu, want %llu", i,
                     (unsigned long long)out[i], (unsigned long long)id);
        model_put(&S.work, id, vecs + i * DIM);
    }
    S.work.slots += n;
    S.added += n;
}

static void
op_delete(uint64_t id)
{
    int rc = keel_delete(S.wr, id);
    if (model_find(&S.work, id) >= 0) {
        expect_rc(rc, KEEL_OK, "keel_delete of a live id");
        model_del(&S.work, id);
        remember_deleted(id);
    } else {
        expect_rc(rc, KEEL_ENOTFOUND, "keel_delete of an id that is not live");
    }
    check_get(S.wr, &S.work, id, "writer");
}

static void
open_writer(int own_options)
{
    int rc = keel_open(S.path, own_options ? DIM : 0,
                       own_options ? &S.opt : NULL, &S.wr);
    if (rc != KEEL_OK)
        MISMATCH("keel_open: rc %d: %s", rc, keel_errmsg());
}

static void
op_crash_reopen(uint8_t b)
{
    keel_close(S.wr); /* no flush: as if the process died */
    S.wr = NULL;
    open_writer(!(b & 1));
    model_copy(&S.work, &S.committed);
}

static void
op_flush(void)
{
    expect_rc(keel_flush(S.wr), KEEL_OK, "keel_flush");
    model_copy(&S.committed, &S.work);
}

static void
op_compact(void)
{
    expect_rc(keel_compact(S.wr), KEEL_OK, "keel_compact");
    S.work.slots = S.work.n; /* the new file holds the live vectors only */
    model_copy(&S.committed, &S.work);
}

static void
do_search(keel_index *idx, const model *m, fuzz_in *in, const char *what)
{
    float q[DIM];
    size_t k = 1 + fuzz_u8(in) % 10, n = 99;
    read_vec(in, q);
    keel_result r[10];
    int rc = keel_search(idx, q, k, NULL, r, &n);
    expect_rc(rc, KEEL_OK, what);
    check_results(m, q, k, r, n, NULL, search_is_exhaustive(), what);
}

static void
op_filtered(fuzz_in *in)
{
    uint8_t b = fuzz_u8(in);
    size_t k = 1 + b % 10, na = (b >> 4) % 4, n = 99;
    uint64_t allowed[3];
    float q[DIM];
    for (size_t i = 0; i < na; i++)
        allowed[i] = read_id(in);
    read_vec(in, q);
    keel_search_params p = {.allowed = allowed, .n_allowed = na};
    keel_result r[10];
    expect_rc(keel_search(S.wr, q, k, &p, r, &n), KEEL_OK,
              "keel_search with an allow-list");
    /* Brute force: allowed, live, unique; nearest first, ties by id. */
    cand c[3];
    size_t nc = 0;
    for (size_t i = 0; i < na; i++) {
        ptrdiff_t at = model_find(&S.work, allowed[i]);
        int dup = 0;
        for (size_t j = 0; j < nc; j++)
            dup |= c[j].id == allowed[i];
        if (at < 0 || dup)
            continue;
        c[nc].id = allowed[i];
        c[nc].internal = internal_dist(q, S.work.e[at].v);
        nc++;
    }
    qsort(c, nc, sizeof *c, cmp_cand);
    size_t want = MIN_SZ(k, nc);
    if (n != want)
        MISMATCH("allow-list search: %zu results, want %zu", n, want);
    for (size_t j = 0; j < want && c[j].internal != c[want - 1].internal; j++) {
        size_t i = 0;
        while (i < n && r[i].id != c[j].id)
            i++;
        if (i == n)
            MISMATCH("allow-list search: id %llu (distance %.9g) is missing",
                     (unsigned long long)c[j].id,
                     (double)reported(c[j].internal));
    }
    /* Ties at the cut may be broken either way; the order is by reported
     * distance, then id. */
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < nc && c[j].id != r[i].id)
            j++;
        if (j == nc)
            MISMATCH("allow-list search: result %zu is id %llu, not an "
                     "allowed live id", i, (unsigned long long)r[i].id);
        if (j >= want && c[j].internal != c[want - 1].internal)
            MISMATCH("allow-list search: result %zu is id %llu, not among "
                     "the %zu nearest", i, (unsigned long long)r[i].id, want);
        if (!dist_ok(r[i].distance, reported(c[j].internal)))
            MISMATCH("allow-list search: id %llu at %.9g, want %.9g",
                     (unsigned long long)r[i].id, (double)r[i].distance,
                     (double)reported(c[j].internal));
        if (i > 0 && (r[i - 1].distance > r[i].distance ||
                      (r[i - 1].distance == r[i].distance &&
                       r[i - 1].id >= r[i].id)))
            MISMATCH("allow-list search: results %zu and %zu out of order",
                     i - 1, i);
    }
}

static int
even_id(uint64_t id)
{
    return (id & 1) == 0;
}

static int
even_filter(uint64_t id, void *arg)
{
    (void)arg;
    return even_id(id);
}

static void
op_filter_fn(fuzz_in *in)
{
    float q[DIM];
    size_t k = 1 + fuzz_u8(in) % 10, n = 99;
    read_vec(in, q);
    keel_search_params p = {.filter = even_filter};
    keel_result r[10];
    expect_rc(keel_search(S.wr, q, k, &p, r, &n), KEEL_OK,
              "keel_search with a filter");
    /* A filtered walk that finds fewer than k falls back to an exact scan,
     * so the count is exact. */
    check_results(&S.work, q, k, r, n, even_id, 1, "filter search");
}

static void
op_search_batch(fuzz_in *in)
{
    float q[2 * DIM];
    size_t k = 1 + fuzz_u8(in) % 10, n[2] = {99, 99};
    read_vec(in, q);
    read_vec(in, q + DIM);
    keel_result r[2 * 10];
    expect_rc(keel_search_batch(S.wr, q, 2, k, NULL, r, n), KEEL_OK,
              "keel_search_batch");
    int exact = search_is_exhaustive();
    check_results(&S.work, q, k, r, n[0], NULL, exact, "search_batch row 0");
    check_results(&S.work, q + DIM, k, r + k, n[1], NULL, exact,
                  "search_batch row 1");
}

static void
op_reader(fuzz_in *in)
{
    uint8_t b = fuzz_u8(in);
    if (!S.rd) {
        keel_options ro = {.ef_search = (b & 2) ? 8 : 0};
        int rc = keel_open_reader(S.path, &ro, &S.rd);
        if (rc != KEEL_OK)
            MISMATCH("keel_open_reader: rc %d: %s", rc, keel_errmsg());
    }
    uint64_t c = keel_count(S.rd);
    if (c != S.committed.n)
        MISMATCH("reader sees %llu vectors, the last flush had %zu",
                 (unsigned long long)c, S.committed.n);
    check_get(S.rd, &S.committed, read_id(in), "reader");
    do_search(S.rd, &S.committed, in, "reader search");
    if (b & 1) {
        keel_close(S.rd);
        S.rd = NULL;
    }
}

/* --- the driver ---------------------------------------------------------- */

/* KEEL_FUZZ_DEBUG=1 in the environment: trace the operations. */
static void
trace(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("KEEL_FUZZ_DEBUG") != NULL;
    if (on)
        fprintf(stderr, "fuzz_ops: step %d %s: live %zu slots %llu next_id "
                "%llu; flushed %zu\n", S.step, op_names[S.op], S.work.n,
                (unsigned long long)S.work.slots,
                (unsigned long long)S.work.next_id, S.committed.n);
}

static void
run_op(fuzz_in *in)
{
    uint8_t op = fuzz_u8(in);
    int full = 0;
    S.op = op % OP_COUNT;
    trace();
    switch (S.op) {
    case OP_ADD:
        op_add(in);
        break;
    case OP_ADD_WITH_ID: {
        uint64_t id = read_id(in);
        op_add_with_id(in, id);
        break;
    }
    case OP_ADD_BATCH:
        op_add_batch(in);
        break;
    case OP_DELETE:
        op_delete(read_id(in));
        break;
    case OP_FLUSH:
        op_flush();
        full = 1;
        break;
    case OP_CRASH_REOPEN:
        op_crash_reopen(op >> 4);
        full = 1;
        break;
    case OP_COMPACT:
        op_compact();
        full = 1;
        break;
    case OP_SEARCH:
        do_search(S.wr, &S.work, in, "search");
        break;
    case OP_FILTERED:
        op_filtered(in);
        break;
    case OP_READER:
        op_reader(in);
        break;
    case OP_GET:
        check_get(S.wr, &S.work, read_id(in), "writer");
        break;
    case OP_DELETE_LIVE: {
        uint8_t j = fuzz_u8(in);
        if (S.work.n)
            op_delete(S.work.e[j % S.work.n].id);
        break;
    }
    case OP_READD_DELETED: {
        uint8_t j = fuzz_u8(in);
        uint64_t id = S.ndeleted ? S.deleted[j % MIN_SZ(S.ndeleted, 64)]
                                 : read_id(in);
        op_add_with_id(in, id);
        break;
    }
    case OP_SEARCH_BATCH:
        op_search_batch(in);
        break;
    case OP_STAT: /* check_state checks it after every step */
        break;
    default:
        op_filter_fn(in);
        break;
    }
    check_state(full);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t Ms[4] = {2, 4, 6, 16};
    static const uint32_t efs[4] = {0, 8, 16, 100};
    fuzz_in in = {data, size, 0};
    uint8_t cfg = fuzz_u8(&in);

    keel__test_geometry(2, 1, 10, 1, 4); /* 4- and 8-slot segments */
    S.path = fuzz_path("ops");
    fuzz_remove(S.path);
    int fd0 = fuzz_lowest_fd();
    S.opt = (keel_options){
        .metric = (cfg & 2) ? KEEL_IP : KEEL_L2,
        .precision = (cfg & 1) ? KEEL_F16 : KEEL_F32,
        .max_connections = Ms[(cfg >> 2) & 3],
        .ef_construction = 16,
        .ef_search = efs[(cfg >> 4) & 3],
        .threads = 1,
    };
    S.work.n = S.committed.n = 0;
    S.work.next_id = S.committed.next_id = 0;
    S.work.slots = S.committed.slots = 0;
    S.ndeleted = S.added = 0;
    S.step = 0;
    S.op = -1;
    S.rd = NULL;
    open_writer(1);
    check_state(1);
    for (S.step = 1; S.step <= MAX_OPS && fuzz_more(&in); S.step++)
        run_op(&in);
    keel_close(S.rd);
    keel_close(S.wr);
    S.rd = S.wr = NULL;
    fuzz_remove(S.path);
    int fd1 = fuzz_lowest_fd();
    if (fd1 != fd0)
        MISMATCH("a file descriptor was left open: lowest free %d, was %d",
                 fd1, fd0);
    free(S.work.e);
    free(S.committed.e);
    S.work = S.committed = (model){0};
    return 0;
}
