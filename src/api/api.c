/* api.c -- keel's public functions: argument checks, open and close, adds
** and deletes, searches and reads, and the error message every failure
** leaves.
**
** The top of the module stack: it turns a public call into store, build and
** search calls. The handle and its locks are handle.h's; this file takes
** them in the order written there (write_lock before swap_lock).
*/
#include "api/api.h"
#include "hnsw/filter.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* --- arguments ---------------------------------------------------------- */

static int
need_writer(keel_index *idx, const char *what)
{
    if (idx->writer)
        return KEEL_OK;
    return keel__fail(KEEL_EREADONLY,
                      "cannot %s: the index at %s was opened as a reader, "
                      "which only searches\nhelp: open it as a writer to "
                      "write it; an index has one writer at a time, and "
                      "readers search while it writes", what, idx->path);
}

/* The largest squared length of a vector or query under l2 and ip. Then no
** sum of products or of squared differences a kernel forms, in any lane or
** order, passes 4e37 (|a.b| <= |a||b|, |a-b|^2 <= (|a|+|b|)^2), far below
** FLT_MAX (3.4e38): a distance is never inf or NaN (inf - inf), which would
** rank first or break the ordering. Cosine normalizes in double instead. */
#define KEEL_MAX_NORM2 1e37

/* check_vector's component-by-component pass, which names what it finds:
** taken only when the quick pass below sees something to name. */
static int
check_vector_each(const keel_index *idx, const float *v, const char *what,
                  long long item, int stored)
{
    char who[64];
    if (item >= 0)
        snprintf(who, sizeof who, "%s %lld of the batch", what, item);
    else
        snprintf(who, sizeof who, "the %s", what);
    double norm = 0;
    for (uint32_t i = 0; i < idx->dim; i++) {
        float x = v[i];
        if (!isfinite(x))
            return keel__fail(KEEL_EINVAL,
                              "%s has %s at component %u\nhelp: every "
                              "component has to be a finite number; drop or "
                              "repair the vector", who,
                              isnan(x) ? "NaN" : (x > 0 ? "inf" : "-inf"), i);
        if (stored && idx->precision == KEEL_F16 && idx->metric != KEEL_COSINE &&
            keel__f16_overflows(x))
            return keel__fail(KEEL_EINVAL,
                              "%s has %g at component %u, too large for half "
                              "precision (at most 65504)\nhelp: scale the "
                              "vectors down, or use an f32 index", who,
                              (double)x, i);
        norm += (double)x * x;
        if (idx->metric != KEEL_COSINE && norm > KEEL_MAX_NORM2)
            return keel__fail(KEEL_EINVAL,
                              "%s has %g at component %u, where its squared "
                              "length passes 1e37: %s distances of vectors "
                              "that long overflow a float\nhelp: scale the "
                              "vectors (and queries) down, which scales every "
                              "distance alike; keel takes lengths up to about "
                              "3.1e18", who, (double)x, i,
                              idx->metric == KEEL_IP ? "inner-product" : "l2");
    }
    if (idx->metric == KEEL_COSINE && !(norm > 0) )
        return keel__fail(KEEL_EINVAL,
                          "%s is all zeros, which has no direction for cosine "
                          "distance\nhelp: drop zero vectors, or use metric "
                          "l2 or ip", who);
    if (idx->metric == KEEL_COSINE && !isfinite(norm))
        return keel__fail(KEEL_EINVAL, "%s is too long to normalize\nhelp: "
                          "scale it down", who);
    return KEEL_OK;
}

/* Checks a vector's components: finite, and what the file can store. what is
** "vector" or "query"; item is its position in a batch, or -1. A quick
** pass takes the largest magnitude: when every component is finite, none
** overflows half precision (if stored as it), dim times the largest square
** stays within KEEL_MAX_NORM2 (so no running sum passes it) and a cosine
** vector is not all zeros, nothing can fail (a double sum of finite
** floats' squares stays finite); otherwise check_vector_each finds and
** names the first failure. */
static int
check_vector(const keel_index *idx, const float *v, const char *what,
             long long item, int stored)
{
    /* Eight lanes, so the compiler runs the pass as vector operations. */
    float mx[8] = {0};
    int fin[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    uint32_t i = 0;
    for (; i + 8 <= idx->dim; i += 8)
        for (int j = 0; j < 8; j++) {
            float a = fabsf(v[i + j]);
            fin[j] &= a <= FLT_MAX; /* false for NaN and inf */
            mx[j] = a > mx[j] ? a : mx[j];
        }
    for (; i < idx->dim; i++) {
        float a = fabsf(v[i]);
        fin[0] &= a <= FLT_MAX;
        mx[0] = a > mx[0] ? a : mx[0];
    }
    float most = 0.0f;
    int finite = 1;
    for (int j = 0; j < 8; j++) {
        finite &= fin[j];
        most = mx[j] > most ? mx[j] : most;
    }
    int f16 = stored && idx->precision == KEEL_F16 &&
              idx->metric != KEEL_COSINE;
    int ok = finite && !(f16 && keel__f16_overflows(most)) &&
             (idx->metric == KEEL_COSINE
                  ? most > 0.0f
                  : (double)most * most * idx->dim <= KEEL_MAX_NORM2);
    return ok ? KEEL_OK : check_vector_each(idx, v, what, item, stored);
}

/* The vector as the file stores it: unit length for cosine, f16 if asked. */
static void
to_stored(const keel_index *idx, const float *v, void *out, float *tmp)
{
    const float *src = v;
    if (idx->metric == KEEL_COSINE) {
        double norm = 0;
        for (uint32_t i = 0; i < idx->dim; i++)
            norm += (double)v[i] * v[i];
        double inv = 1.0 / sqrt(norm);
        for (uint32_t i = 0; i < idx->dim; i++)
            tmp[i] = (float)(v[i] * inv);
        src = tmp;
    }
    if (idx->precision == KEEL_F16)
        keel__f32_to_f16_n(src, out, idx->dim);
    else
        memcpy(out, src, idx->dim * sizeof(float));
}

/* The query as searched: normalized for cosine. */
static const float *
prep_query(const keel_index *idx, const float *q, float *buf)
{
    if (idx->metric != KEEL_COSINE)
        return q;
    double norm = 0;
    for (uint32_t i = 0; i < idx->dim; i++)
        norm += (double)q[i] * q[i];
    double inv = 1.0 / sqrt(norm);
    for (uint32_t i = 0; i < idx->dim; i++)
        buf[i] = (float)(q[i] * inv);
    return buf;
}

static int
check_options(const keel_options *o)
{
    if (!o)
        return KEEL_OK;
    NEED((unsigned)o->metric <= KEEL_IP,
         "metric is %d, but has to be KEEL_L2 (0), KEEL_COSINE (1) or KEEL_IP "
         "(2)\nhelp: KEEL_L2 for Euclidean distance, KEEL_COSINE for text "
         "embeddings", (int)o->metric);
    NEED((unsigned)o->precision <= KEEL_F16,
         "precision is %d, but has to be KEEL_F32 (0) or KEEL_F16 (1)\nhelp: "
         "KEEL_F16 halves the file at a small cost in recall", (int)o->precision);
    NEED((unsigned)o->codes <= KEEL_CODES_I4,
         "codes is %d, but has to be KEEL_CODES_NONE (0), KEEL_CODES_I8 (1) "
         "or KEEL_CODES_I4 (2)\nhelp: KEEL_CODES_I8 makes searches faster at "
         "equal recall for 16 + dimensions bytes more per vector, rounded up "
         "to 64; KEEL_CODES_I4 reads about half of that, for long vectors",
         (int)o->codes);
    NEED(o->max_connections != 1 && o->max_connections <= KEEL_MAX_M,
         "max_connections is %u, but has to be between 2 and 32,767\nhelp: 16 "
         "suits most indexes; 32 gives higher recall for more memory",
         o->max_connections);
    NEED(o->ef_construction <= 100000,
         "ef_construction is %u, but has to be at most 100,000\nhelp: 200 "
         "suits most indexes; more builds slower for a little recall",
         o->ef_construction);
    NEED(o->ef_search <= 100000,
         "ef_search is %u, but has to be at most 100,000\nhelp: 64 suits most "
         "searches; raise it for recall, lower it for speed", o->ef_search);
    NEED(o->threads <= 4096,
         "threads is %u, but has to be at most 4,096\nhelp: 0 uses every core",
         o->threads);
    NEED(!(o->flags & ~(KEEL_WARM | KEEL_HUGE_PAGES | KEEL_FILE_OPTIONS)),
         "flags is 0x%x, which has unknown bits\nhelp: combine KEEL_WARM, "
         "KEEL_HUGE_PAGES and KEEL_FILE_OPTIONS, or pass 0", o->flags);
    return KEEL_OK;
}

/* --- open and close ----------------------------------------------------- */

int
keel_open(const char *path, uint32_t dim, const keel_options *opt,
          keel_index **out)
{
    keel__clear_error();
    NEED(out, "keel_open was given out = NULL\nhelp: pass the address of a "
         "keel_index * to receive the handle");
    *out = NULL;
    NEED(path && *path, "keel_open was given no path\nhelp: pass the path of "
         "the index file, such as \"vectors.keel\"");
    if (strncmp(path, "s3://", 5) == 0)
        return keel__fail(KEEL_EREADONLY, "%s is a published index, which "
                          "opens read-only\nhelp: open it with "
                          "keel_open_reader; to change it, open the local "
                          "file as a writer and keel_publish it again", path);
    NEED(dim <= KEEL_MAX_DIM,
         "dimensions is %u, but has to be between 1 and 4096 (or 0 to take "
         "them from an existing file)\nhelp: give the length of the vectors "
         "the index will hold, such as 384, 768 or 1536", dim);
    int rc = check_options(opt);
    if (rc)
        return rc;
    keel_store_params p = {
        .dim = dim,
        .M = opt && opt->max_connections ? opt->max_connections : 16,
        .metric = opt ? (int)opt->metric : KEEL_L2,
        .precision = opt ? (int)opt->precision : KEEL_F32,
        .codes = opt ? (int)opt->codes : KEEL_CODES_NONE,
        .have_options = opt != NULL && !(opt->flags & KEEL_FILE_OPTIONS),
    };
    /* A symbolic link is followed once, here: compaction then replaces the
     * file it points to, and the undo log sits beside that file. */
    char real[4096];
    keel_file_info li;
    int memory = keel__is_memory(path);
    NEED(!memory || dim, "dimensions is 0, but an index in memory starts "
         "empty and has no file to take them from\nhelp: give the length of "
         "the vectors it will hold, such as 384");
    int exists = !memory && keel__os->stat_path(path, &li) == 0;
    /* A FIFO or device is refused here, by the name the caller gave. */
    if (exists && !li.is_regular && li.type != KEEL_FILE_DIRECTORY)
        return keel__not_regular_fail(path, li.type);
    if (exists && keel__os->resolve(path, real, sizeof real) == 0)
        path = real;
    keel_index *idx = keel__index_new(path, opt, 1);
    if (!idx)
        return KEEL_ENOMEM;
    keel_store *st;
    if (opt && !opt->max_connections)
        p.M = 0; /* the file's own, or 16 for a new file (store decides) */
    rc = keel__store_open_writer(path, &p, &st);
    if (rc) {
        keel__index_free(idx);
        return rc;
    }
    if (!memory)
        keel__remove_leftovers(path); /* we hold the writer lock */
    keel__index_attach(idx, st);
    /* Three vectors of scratch and a code row (api.h). */
    idx->conv = keel__malloc((size_t)idx->dim * 4 * 3 +
                             keel__code_row_bytes(idx->dim, KEEL_CODES_I8));
    if (!idx->conv) {
        keel__index_free(idx);
        return KEEL_ENOMEM;
    }
    if (idx->flags & KEEL_HUGE_PAGES)
        keel__huge_pages_advise(idx);
    if (idx->flags & KEEL_WARM)
        keel__warm_start(idx);
    *out = idx;
    return KEEL_OK;
}

/* A byte count from the environment (digits, then K, M or G), or 0. */
static uint64_t
env_bytes(const char *name)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return 0;
    char *end;
    unsigned long long v = strtoull(e, &end, 10);
    switch (*end) {
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return v;
}

/* A reader of the index published at url: its page cache (options, then
** the environment), then a store over the cache's image. */
static int
open_remote(const char *url, const keel_options *o, int warm,
            keel_store **st)
{
    keel_cache_config cfg = {.url = url};
    cfg.cache_dir = o && o->cache_dir ? o->cache_dir : getenv("KEEL_CACHE_DIR");
    cfg.cache_bytes = o && o->cache_bytes ? o->cache_bytes
                                          : env_bytes("KEEL_CACHE_BYTES");
    cfg.memory_bytes = o && o->memory_cache_bytes
                           ? o->memory_cache_bytes
                           : env_bytes("KEEL_MEMORY_CACHE_BYTES");
    keel_cache *c;
    int rc = keel__cache_open(&cfg, &c);
    return rc ? rc : keel__store_open_remote(c, warm, st);
}

int
keel__remote_counters(keel_index *idx, keel_cache_counters *out)
{
    if (!idx || idx->writer)
        return keel__fail(KEEL_EINVAL, "not a reader of a published index\n"
                          "help: open one with keel_open_reader(\"s3://...\")");
    keel__swap_shared(idx);
    keel_cache *c = idx->st->remote;
    if (c)
        keel__cache_counters(c, out);
    keel__swap_unlock(idx);
    if (!c)
        return keel__fail(KEEL_EINVAL, "not a reader of a published index\n"
                          "help: open one with keel_open_reader(\"s3://...\")");
    return KEEL_OK;
}

int
keel_open_reader(const char *path, const keel_options *opt, keel_index **out)
{
    keel__clear_error();
    NEED(out, "keel_open_reader was given out = NULL\nhelp: pass the address "
         "of a keel_index * to receive the handle");
    *out = NULL;
    NEED(path && *path, "keel_open_reader was given no path\nhelp: pass the "
         "path of an existing index file");
    NEED(!keel__is_memory(path), "\":memory:\" names an index in memory, "
         "which has no readers: it lives in the handle keel_open returned\n"
         "help: search through that handle (searches run alongside its "
         "writes); a file named :memory: opens as ./:memory:");
    int rc = check_options(opt);
    if (rc)
        return rc;
    keel_index *idx = keel__index_new(path, opt, 0);
    if (!idx)
        return KEEL_ENOMEM;
    keel_store *st;
    rc = strncmp(path, "s3://", 5) == 0
             ? open_remote(path, opt, (idx->flags & KEEL_WARM) != 0, &st)
             : keel__store_open_reader(path, &st);
    if (rc) {
        keel__index_free(idx);
        return rc;
    }
    keel__index_attach(idx, st);
    if (idx->flags & KEEL_HUGE_PAGES)
        keel__huge_pages_advise(idx);
    if (idx->flags & KEEL_WARM)
        keel__warm_start(idx);
    *out = idx;
    return KEEL_OK;
}

int
keel_close(keel_index *idx)
{
    if (!idx)
        return KEEL_OK;
    /* A forked child waits for no search: the parent's threads that held
     * the lock at the fork do not run here, and will never release it. */
    if (idx->owner == getpid()) {
        keel__swap_exclusive(idx);
        keel__swap_unlock(idx);
        keel__warm_stop(idx);
    }
    keel__index_free(idx);
    return KEEL_OK;
}

int
keel_set_progress(keel_index *idx, keel_progress_fn fn, void *arg)
{
    if (!idx)
        return keel__null_handle("keel_set_progress");
    pthread_mutex_lock(&idx->write_lock);
    keel__swap_exclusive(idx);
    idx->progress = idx->builder.progress = fn;
    idx->progress_arg = idx->builder.progress_arg = arg;
    keel__swap_unlock(idx);
    pthread_mutex_unlock(&idx->write_lock);
    return KEEL_OK;
}

int
keel_set_cancel(keel_index *idx, keel_cancel_fn fn, void *arg)
{
    if (!idx)
        return keel__null_handle("keel_set_cancel");
    pthread_mutex_lock(&idx->write_lock);
    keel__swap_exclusive(idx);
    idx->cancel = idx->builder.cancel = fn;
    idx->cancel_arg = idx->builder.cancel_arg = arg;
    keel__swap_unlock(idx);
    pthread_mutex_unlock(&idx->write_lock);
    return KEEL_OK;
}

int
keel_pending(keel_index *idx, uint64_t *adds, uint64_t *deletes)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_pending");
    uint64_t a = 0, d = 0;
    if (idx->writer) {
        pthread_mutex_lock(&idx->write_lock);
        keel_store *st = idx->st;
        uint64_t n = KEEL_LOAD_ACQUIRE(&st->nslots);
        a = n > st->committed.count ? n - st->committed.count : 0;
        d = keel__store_pending_deletes(st);
        pthread_mutex_unlock(&idx->write_lock);
    }
    if (adds)
        *adds = a;
    if (deletes)
        *deletes = d;
    return KEEL_OK;
}

/* --- writes ------------------------------------------------------------- */

/* Looks up the live slot of id in this writer's own view. */
static int
live_slot(keel_index *idx, uint64_t id, uint64_t *slot)
{
    keel_view v;
    keel__store_view(idx->st, &v);
    return keel__store_id_lookup(&v, id, slot);
}

static int
id_in_use(uint64_t id, long long item)
{
    char where[64] = "";
    if (item >= 0)
        snprintf(where, sizeof where, " (item %lld of the batch)", item);
    return keel__fail(KEEL_EEXIST,
                      "id %llu is already in use%s\nhelp: delete it first to "
                      "replace its vector (delete and add in one flush are "
                      "atomic), or choose another id",
                      (unsigned long long)id, where);
}

static int
reserved_id(long long item)
{
    char where[64] = "";
    if (item >= 0)
        snprintf(where, sizeof where, " (item %lld of the batch)", item);
    return keel__fail(KEEL_EINVAL,
                      "id 18446744073709551615 (UINT64_MAX)%s is reserved\n"
                      "help: use ids from 0 to 18446744073709551614, or leave "
                      "the ids out and let keel choose them", where);
}

static int
ids_exhausted(const keel_index *idx)
{
    return keel__fail(KEEL_EFULL,
                      "the index at %s has used every automatic id up to "
                      "18446744073709551614\nhelp: add vectors with your own "
                      "ids", idx->path);
}

/* An id and its place in a batch, for finding repeats by sorting. */
typedef struct id_at {
    uint64_t id;
    size_t at;
} id_at;

static int
id_at_order(const void *a, const void *b)
{
    const id_at *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

int
keel__first_repeat(const uint64_t *ids, size_t n, size_t *first,
                   size_t *second)
{
    if (n < 2)
        return 0;
    id_at *s = keel__malloc(n * sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < n; i++)
        s[i] = (id_at){ids[i], i};
    qsort(s, n, sizeof *s, id_at_order);
    /* Sorted by (id, place), repeats sit side by side; the repeat named is
     * the one whose second use comes first, with its id's first use. */
    *second = SIZE_MAX;
    for (size_t i = 1; i < n; i++)
        if (s[i].id == s[i - 1].id && (i == 1 || s[i - 1].id != s[i - 2].id) &&
            s[i].at < *second) {
            *first = s[i - 1].at; /* the run's first element */
            *second = s[i].at;
        }
    keel__free(s);
    return *second != SIZE_MAX;
}

/* Refuses a batch that names an id twice, in O(n log n). */
static int
check_distinct(const uint64_t *ids, size_t n)
{
    size_t first, second;
    int found = keel__first_repeat(ids, n, &first, &second);
    if (found < 0)
        return KEEL_ENOMEM;
    if (!found)
        return KEEL_OK;
    return keel__fail(KEEL_EINVAL,
                      "id %llu appears twice in the batch (items %zu and %zu)"
                      "\nhelp: give each vector of a batch its own id",
                      (unsigned long long)ids[second], first, second);
}

/* Gives back what a failed add took: its slots (and the id-table entries
** that name them, which become stale), its heap entries and the ids it
** noted. Lists it changed may name the slots given back; those entries are
** at or past the published count, where searches and links treat them as
** empty, and committed lists are in the undo log. */
static void
add_rollback(keel_store *st, uint64_t next_slot, uint64_t heap_mark,
             uint64_t next_id)
{
    keel__store_unreserve(st, next_slot);
    keel__store_heap_reset(st, heap_mark);
    keel__store_forget_ids(st, next_id);
}

/* A file with codes, its first add: the centre every row is coded about
** is the mean of this call's n vectors as stored (codes.h). */
static int
place_centre(keel_index *idx, const float *vecs, size_t n)
{
    uint32_t dim = idx->dim;
    double *sum = keel__calloc(dim, sizeof *sum);
    float *c = keel__malloc(dim * sizeof *c);
    int rc = sum && c ? KEEL_OK : KEEL_ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        to_stored(idx, vecs + i * dim, idx->conv + dim, idx->conv);
        keel__code_centre_add(idx->conv + dim, idx->precision, dim, sum,
                              idx->conv + 2 * (size_t)dim);
    }
    if (!rc) {
        keel__code_centre_end(sum, n, dim, c);
        rc = keel__store_put_centre(idx->st, c);
    }
    keel__free(sum);
    keel__free(c);
    return rc;
}

/* Writes n vectors (checked) into new slots and links them; all or none:
** on failure the index is as it was before the call. */
static int
add_vectors(keel_index *idx, const float *vecs, size_t n, const uint64_t *ids,
            uint64_t first_auto)
{
    keel_store *st = idx->st;
    uint64_t first, heap_mark = keel__store_heap_mark(st);
    uint64_t next_slot = st->next_slot, next_id = keel__store_next_id(st);
    int rc = keel__store_id_reserve(st, n);
    if (!rc)
        rc = keel__store_reserve(st, n, &first);
    if (rc)
        return rc;
    keel__huge_pages_advise_batch(idx, first, n);
    if (st->g.code_bytes && first == 0 && (rc = place_centre(idx, vecs, n))) {
        add_rollback(st, next_slot, heap_mark, next_id);
        return rc;
    }
    const float *centre = keel__store_centre(st);
    for (size_t i = 0; i < n; i++) {
        uint64_t slot = first + i, ref = 0;
        uint32_t level = keel__graph_level(idx->gr, slot);
        if (level && (rc = keel__store_heap_alloc(st, level, &ref))) {
            add_rollback(st, next_slot, heap_mark, next_id);
            return rc;
        }
        to_stored(idx, vecs + i * idx->dim, idx->conv + idx->dim, idx->conv);
        uint64_t id = ids ? ids[i] : first_auto + i;
        uint8_t *code = (uint8_t *)(idx->conv + 3 * (size_t)idx->dim);
        if (st->g.code_bytes)
            keel__code_encode(idx->conv + idx->dim, idx->precision, centre,
                              idx->dim, (int)st->g.codes,
                              idx->conv + 2 * idx->dim, code,
                              st->g.code_bytes);
        keel__store_write_slot(st, slot, id, idx->conv + idx->dim, code, level,
                               ref);
    }
    keel_search_ctx *c = keel__ctx_get(idx);
    if (!c) {
        add_rollback(st, next_slot, heap_mark, next_id);
        return KEEL_ENOMEM;
    }
    for (size_t i = 0; i < n && !rc; i++)
        rc = keel__store_id_insert(st, ids ? ids[i] : first_auto + i, first + i);
    if (!rc) {
        for (size_t i = 0; i < n; i++)
            keel__store_note_id(st, ids ? ids[i] : first_auto + i);
        rc = keel__build_link(&idx->builder, c, first, n,
                              n > 1 ? idx->threads : 1);
    }
    keel__ctx_put(idx, c);
    if (rc)
        add_rollback(st, next_slot, heap_mark, next_id);
    return rc;
}

int
keel_add(keel_index *idx, const float *vec, uint64_t *id_out)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_add");
    int rc = need_writer(idx, "add");
    if (rc)
        return rc;
    NEED(vec, "keel_add was given vec = NULL\nhelp: pass %u floats", idx->dim);
    if ((rc = check_vector(idx, vec, "vector", -1, 1)))
        return rc;
    pthread_mutex_lock(&idx->write_lock);
    uint64_t id = keel__store_next_id(idx->st);
    if (id == UINT64_MAX)
        rc = ids_exhausted(idx);
    else
        rc = add_vectors(idx, vec, 1, NULL, id);
    pthread_mutex_unlock(&idx->write_lock);
    if (!rc && id_out)
        *id_out = id;
    return rc;
}

int
keel_add_with_id(keel_index *idx, uint64_t id, const float *vec)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_add_with_id");
    int rc = need_writer(idx, "add");
    if (rc)
        return rc;
    if (id == UINT64_MAX)
        return reserved_id(-1);
    NEED(vec, "keel_add_with_id was given vec = NULL\nhelp: pass %u floats",
         idx->dim);
    if ((rc = check_vector(idx, vec, "vector", -1, 1)))
        return rc;
    pthread_mutex_lock(&idx->write_lock);
    uint64_t slot;
    if (live_slot(idx, id, &slot) == KEEL_OK)
        rc = id_in_use(id, -1);
    else
        rc = add_vectors(idx, vec, 1, &id, 0);
    pthread_mutex_unlock(&idx->write_lock);
    return rc;
}

int
keel_add_batch(keel_index *idx, const float *vecs, size_t n,
               const uint64_t *ids, uint64_t *ids_out)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_add_batch");
    int rc = need_writer(idx, "add");
    if (rc)
        return rc;
    if (n == 0)
        return KEEL_OK;
    NEED(vecs, "keel_add_batch was given vecs = NULL for %zu vectors\nhelp: "
         "pass n * %u floats", n, idx->dim);
    NEED(n <= KEEL_MAX_SLOTS, "a batch of %zu vectors is more than an index "
         "holds\nhelp: add at most 4,294,967,294 vectors", n);
    for (size_t i = 0; i < n; i++)
        if ((rc = check_vector(idx, vecs + i * idx->dim, "vector",
                               (long long)i, 1)))
            return rc;
    if (ids) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] == UINT64_MAX)
                return reserved_id((long long)i);
        if ((rc = check_distinct(ids, n)))
            return rc;
    }
    pthread_mutex_lock(&idx->write_lock);
    uint64_t first_auto = keel__store_next_id(idx->st);
    if (ids) {
        for (size_t i = 0; i < n && !rc; i++) {
            uint64_t slot;
            if (live_slot(idx, ids[i], &slot) == KEEL_OK)
                rc = id_in_use(ids[i], (long long)i);
        }
    } else if (first_auto > UINT64_MAX - 1 - n) {
        rc = ids_exhausted(idx);
    }
    if (!rc)
        rc = add_vectors(idx, vecs, n, ids, first_auto);
    pthread_mutex_unlock(&idx->write_lock);
    if (!rc && ids_out)
        for (size_t i = 0; i < n; i++)
            ids_out[i] = ids ? ids[i] : first_auto + i;
    return rc;
}

int
keel_delete(keel_index *idx, uint64_t id)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_delete");
    int rc = need_writer(idx, "delete");
    if (rc)
        return rc;
    pthread_mutex_lock(&idx->write_lock);
    uint64_t slot;
    if (live_slot(idx, id, &slot) != KEEL_OK)
        rc = keel__fail(KEEL_ENOTFOUND,
                        "no live vector has id %llu in %s\nhelp: check the id; "
                        "it may have been deleted already",
                        (unsigned long long)id, idx->path);
    else
        rc = keel__store_delete(idx->st, slot);
    pthread_mutex_unlock(&idx->write_lock);
    return rc;
}

int
keel_flush(keel_index *idx)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_flush");
    int rc = need_writer(idx, "flush");
    if (rc)
        return rc;
    pthread_mutex_lock(&idx->write_lock);
    keel__backup_wait(idx);
    rc = keel__store_commit(idx->st);
    if (!rc && (KEEL_LOAD_RELAXED(&idx->flags) & KEEL_HUGE_PAGES))
        keel__huge_pages_advise(idx);
    pthread_mutex_unlock(&idx->write_lock);
    return rc;
}

/* --- reads -------------------------------------------------------------- */

static int
check_search_args(keel_index *idx, const char *fn, const void *q, size_t k,
                  const keel_search_params *p, const void *out,
                  const void *n_out)
{
    if (!idx)
        return keel__null_handle(fn);
    NEED(q, "%s was given no query\nhelp: pass %u floats", fn, idx->dim);
    NEED(k > 0, "k is 0, but has to be at least 1\nhelp: pass how many "
         "results to return, such as 10");
    NEED(k <= 1000000, "k is %zu, but has to be at most 1,000,000\nhelp: ask "
         "for fewer results", k);
    NEED(out && n_out, "%s was given no room for results\nhelp: pass out with "
         "room for k results and n_out", fn);
    if (p) {
        NEED(p->allowed || p->n_allowed == 0,
             "n_allowed is %zu but allowed is NULL\nhelp: pass the ids, or "
             "n_allowed 0 without a filter", p->n_allowed);
        NEED(p->ef <= 100000, "ef is %u, but has to be at most 100,000\nhelp: "
             "64 to 512 covers most recall targets", p->ef);
    }
    return KEEL_OK;
}

/* A batch of queries shared by threads: each takes the next query. */
typedef struct search_job {
    keel_index *idx;
    const keel_view *view;
    const keel_accept *acc;
    const float *queries;
    size_t nq, k;
    uint32_t ef;
    keel_result *out;
    size_t *n_out;
    const keel_filter *const *filters; /* one per query, or NULL */
    keel_stop *stop;          /* NULL: the search cannot be cancelled */
    size_t next;              /* atomic */
    int rc;                   /* first failure (atomic) */
    char msg[1024];           /* its message, written by the thread that
                                 set rc (messages are per thread) */
    pthread_mutex_t mu;       /* guards running; workers signal done */
    pthread_cond_t done;
    uint32_t running;         /* worker threads not finished */
} search_job;

static void
search_fail(search_job *j, int rc)
{
    int zero = 0;
    if (__atomic_compare_exchange_n(&j->rc, &zero, rc, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
        snprintf(j->msg, sizeof j->msg, "%s", keel_errmsg());
}

/* Searches queries until none is left, one fails, or the call is stopped
** (the owner asks the cancel callback between queries too). */
static void
search_run(search_job *j)
{
    keel_index *idx = j->idx;
    keel_search_ctx *c = keel__ctx_get(idx);
    int rc = c ? KEEL_OK : KEEL_ENOMEM;
    if (c)
        c->stop = j->stop;
    for (;;) {
        size_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->nq || rc || __atomic_load_n(&j->rc, __ATOMIC_RELAXED))
            break;
        if (keel__stop_poll(j->stop)) {
            rc = KEEL_ECANCELED;
            break;
        }
        const float *q = prep_query(idx, j->queries + i * idx->dim, c->vbuf);
        keel_accept own;
        if (j->filters)
            keel__filter_accept(j->filters[i], &own);
        rc = keel__search_knn(idx->gr, j->view, c, q, j->k, j->ef,
                              j->filters ? &own : j->acc, j->out + i * j->k,
                              &j->n_out[i]);
    }
    if (c)
        c->stop = NULL;
    keel__ctx_put(idx, c);
    if (rc)
        search_fail(j, rc);
}

static void *
search_worker(void *arg)
{
    search_job *j = arg;
    search_run(j);
    pthread_mutex_lock(&j->mu);
    j->running--;
    pthread_cond_signal(&j->done);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* The owner, its share done, waits for the workers; a cancellable search
** keeps asking the cancel callback meanwhile (only the owner may), so
** workers waiting for GETs see a cancel. */
static void
search_wait_workers(search_job *j)
{
    pthread_mutex_lock(&j->mu);
    while (j->running) {
        uint32_t ms = keel__stop_slice_ms(j->stop);
        if (ms == UINT32_MAX) {
            pthread_cond_wait(&j->done, &j->mu);
            continue;
        }
        keel__cond_wait_ms(&j->done, &j->mu, ms);
        pthread_mutex_unlock(&j->mu);
        keel__stop_poll(j->stop);
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
}

static int
search_oom(void)
{
    return keel__fail(KEEL_ENOMEM, "out of memory during a search\nhelp: "
                      "free memory, or lower ef and k");
}

/* Runs nq searches under one shared lock and one view; a batch of many
** queries without a callback filter runs on the handle's threads. */
static int
search_many(keel_index *idx, const float *queries, size_t nq, size_t k,
            const keel_search_params *p, keel_result *out, size_t *n_out,
            int batch)
{
    int rc;
    for (size_t i = 0; i < nq; i++)
        if ((rc = check_vector(idx, queries + i * idx->dim, "query",
                               batch ? (long long)i : -1, 0)))
            return rc;
    keel_accept acc;
    keel_idset set;
    if ((rc = keel__params_accept(p, &acc, &set)))
        return rc;
    /* A search of a published index waits for GETs, and for eviction
     * (cache.h invariant 8): it asks the cancel callback (read under
     * swap_lock, which its setter holds exclusive) while it waits. A
     * file's search never does. */
    keel_stop stop;
    keel_read r = {.stop = &stop};
    if ((rc = keel__read_enter(idx, &r, KEEL_READ_VIEW | KEEL_READ_PAGES |
                                            KEEL_READ_CANCEL))) {
        keel__idset_free(&set);
        return rc == KEEL_ENOMEM ? search_oom() : rc;
    }
    search_job job = {.idx = idx, .view = &r.v, .acc = &acc, .queries = queries,
                      .nq = nq, .k = k, .out = out, .n_out = n_out,
                      .filters = p ? p->query_filters : NULL,
                      .stop = stop.fn ? &stop : NULL,
                      .ef = p && p->ef ? p->ef : idx->ef_search};
    uint32_t threads = !keel__accept_threadsafe(&acc) ? 1
                     : (uint32_t)KEEL_MIN(idx->threads, nq / 16);
    pthread_t tid[64];
    uint32_t started = 0;
    if (threads > 1) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&job.done, &ca);
        pthread_condattr_destroy(&ca);
        pthread_mutex_init(&job.mu, NULL);
    }
    for (uint32_t t = 1; t < threads && t <= 64; t++) {
        pthread_mutex_lock(&job.mu);
        job.running++;
        pthread_mutex_unlock(&job.mu);
        if (pthread_create(&tid[started], NULL, search_worker, &job) == 0) {
            started++;
        } else {
            pthread_mutex_lock(&job.mu);
            job.running--;
            pthread_mutex_unlock(&job.mu);
        }
    }
    search_run(&job);
    if (started)
        search_wait_workers(&job);
    for (uint32_t t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    rc = job.rc;
    if (threads > 1) {
        pthread_cond_destroy(&job.done);
        pthread_mutex_destroy(&job.mu);
    }
    rc = keel__read_leave(idx, &r, rc);
    keel__idset_free(&set);
    /* stop.c invariant (2): a stop the callback asked for is the answer,
     * whatever else the search met meanwhile. */
    if (KEEL_LOAD_ACQUIRE(&stop.stopped))
        return keel__fail(KEEL_ECANCELED, "the search of %s was cancelled"
                          "\nhelp: the cancel callback (keel_set_cancel) "
                          "asked to stop; the handle is unchanged (pages "
                          "fetched whole stay cached): search again",
                          idx->path);
    if (rc == KEEL_ENOMEM)
        return search_oom();
    if (rc && rc == job.rc && job.msg[0])
        return keel__fail(rc, "%s", job.msg); /* perhaps a worker's */
    return rc;
}

int
keel_search(keel_index *idx, const float *query, size_t k,
            const keel_search_params *p, keel_result *out, size_t *n_out)
{
    keel__clear_error();
    int rc = check_search_args(idx, "keel_search", query, k, p, out, n_out);
    if (rc || (rc = keel__params_check_filters(p, "keel_search", 0)))
        return rc;
    size_t n = 0;
    rc = search_many(idx, query, 1, k, p, out, &n, 0);
    if (!rc)
        *n_out = n;
    return rc;
}

int
keel_search_batch(keel_index *idx, const float *queries, size_t nq, size_t k,
                  const keel_search_params *p, keel_result *out, size_t *n_out)
{
    keel__clear_error();
    int rc = check_search_args(idx, "keel_search_batch", queries, k, p, out,
                               n_out);
    if (rc || (rc = keel__params_check_filters(p, "keel_search_batch", 1)) ||
        nq == 0)
        return rc;
    return search_many(idx, queries, nq, k, p, out, n_out, 1);
}

int
keel_get(keel_index *idx, uint64_t id, float *vec_out)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_get");
    NEED(vec_out, "keel_get was given vec_out = NULL\nhelp: pass room for %u "
         "floats", idx->dim);
    keel_read r;
    int rc = keel__read_enter(idx, &r, KEEL_READ_VIEW | KEEL_READ_PAGES);
    if (rc)
        return rc;
    uint64_t slot;
    if ((rc = keel__store_id_lookup(&r.v, id, &slot)) == KEEL_ENOTFOUND)
        rc = keel__fail(KEEL_ENOTFOUND, "no live vector has id %llu in %s\n"
                        "help: check the id; deleted vectors cannot be read",
                        (unsigned long long)id, idx->path);
    uint32_t s32 = (uint32_t)slot;
    if (!rc) /* a published index read without faults (store/pagein.h) */
        rc = keel__store_need_slots(idx->st, &s32, 1, KEEL_NEED_VEC);
    if (!rc) {
        const void *src = keel__store_vec(idx->st, slot);
        if (idx->precision == KEEL_F16)
            keel__f16_to_f32_n(src, vec_out, idx->dim);
        else
            memcpy(vec_out, src, idx->dim * sizeof(float));
    }
    return keel__read_leave(idx, &r, rc);
}

uint64_t
keel_count(keel_index *idx)
{
    if (!idx)
        return 0;
    /* A reader counts its view; a reader's failed view counts 0. */
    keel_read r;
    if (keel__read_enter(idx, &r, KEEL_READ_ANYWAY |
                                  (idx->writer ? 0 : KEEL_READ_VIEW)))
        return 0;
    uint64_t n;
    if (idx->writer) {
        keel_store *st = idx->st;
        uint64_t slots = KEEL_LOAD_ACQUIRE(&st->nslots);
        uint64_t dead = KEEL_LOAD_RELAXED(&st->pub_deleted);
        n = slots > dead ? slots - dead : 0;
    } else {
        n = r.v.count - r.v.deleted;
    }
    keel__read_leave(idx, &r, KEEL_OK);
    return n;
}

uint32_t
keel_dim(keel_index *idx)
{
    return idx ? idx->dim : 0;
}

int
keel_refresh(keel_index *idx)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_refresh");
    if (idx->writer)
        return KEEL_OK;
    keel_read r;
    int rc = keel__read_enter(idx, &r, KEEL_READ_REPORT | KEEL_READ_VIEW);
    return rc ? rc : keel__read_leave(idx, &r, KEEL_OK);
}

int
keel_stat(keel_index *idx, keel_stats *out)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_stat");
    NEED(out, "keel_stat was given out = NULL\nhelp: pass a keel_stats to fill");
    keel_stats s;
    keel_read r;
    int rc = keel__read_enter(idx, &r, KEEL_READ_WRITE_LOCK | KEEL_READ_PAGES);
    if (rc)
        return rc;
    rc = keel__store_stats(idx->st, &s);
    rc = keel__read_leave(idx, &r, rc);
    if (!rc)
        *out = s;
    return rc;
}

int
keel_check(keel_index *idx)
{
    keel__clear_error();
    if (!idx)
        return keel__null_handle("keel_check");
    keel_read r;
    int rc = keel__read_enter(idx, &r, KEEL_READ_WRITE_LOCK | KEEL_READ_PAGES |
                                       KEEL_READ_REPORT);
    if (rc)
        return rc;
    /* A check reads every page: a published index read without faults
     * fetches them all first (store/pagein.h; held until the call ends). */
    rc = keel__store_need_all(idx->st);
    if (!rc)
        rc = keel__store_check(idx->st);
    return keel__read_leave(idx, &r, rc);
}

/* For the api layer's other files (radius.c). */
int
keel__check_query(const keel_index *idx, const float *q)
{
    return check_vector(idx, q, "query", -1, 0);
}

const float *
keel__prep_query(const keel_index *idx, const float *q, float *buf)
{
    return prep_query(idx, q, buf);
}
