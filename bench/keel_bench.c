/* keel_bench.c -- keel's side of the benchmark (bench/run.sh drives it).
**
**   keel_bench build INDEX BASE.fvecs [--metric l2|cosine]
**                    [--precision f32|f16] [--codes none|i8|i4] [-M 16]
**                    [--efc 200] [--threads T] [--label L]
**   keel_bench sweep INDEX QUERIES.fvecs GT.ivecs [--ef 16,24,...]
**                    [--rounds R] [--min-time S] [--k 10] [--label L]
**   keel_bench mt    INDEX QUERIES.fvecs GT.ivecs [--ef 16,24,...]
**                    [--threads T] [--rounds R] [--min-time S] [--k 10]
**                    [--label L]
**   keel_bench cold  INDEX QUERIES.fvecs [--warm] [--ef 64] [--k 10]
**                    [--queries N] [--max-s S] [--label L]
**
** INDEX is a file, or the URL of a published index (s3://BUCKET/PREFIX,
** doc/objstore.md; its cache from KEEL_CACHE_DIR and the rest of the
** environment, as for any reader).
**
** Each prints JSON, one object per line, on standard output.
**
** build: a new file (any old one is removed first), keel_add_batch of every
**   base row under id = row number on T threads, keel_flush (which syncs).
**   Seconds for the add and for the flush; peak RSS from /proc/self/status
**   (VmHWM, reset after the base vectors are loaded, so the figure is the
**   base vectors plus what the index needed); file and allocated bytes from
**   keel_stat; bytes this process sent to storage from /proc/self/io
**   (write_bytes: pages it dirtied, through the mapping or write()).
**   --codes i8 sets keel_options.codes = KEEL_CODES_I8 (int8 traversal
**   codes) when the file is created, --codes i4 KEEL_CODES_I4 (4-bit).
** mt: every core. keel_open_reader with KEEL_WARM and threads = T (default
**   every core), then bench_common.h's bench_sweep_mt: each call is one
**   keel_search_batch of the whole query set, which keel runs on T threads.
** sweep: keel_open_reader with KEEL_WARM (and KEEL_HUGE_PAGES when the
**   environment has BENCH_HUGE=1), then bench_common.h's loop. With
**   internals (below), the sweep first waits for warm to finish (the
**   JSON's warm_ms: from the open), so a URL is measured with its whole
**   index in the page cache.
** cold: keel_open_reader (with KEEL_WARM under --warm), then one query per
**   call (at most --queries N, none started after --max-s S seconds);
**   times run from KEEL_BENCH_T0, which bench/evict sets just before exec,
**   so they include exec, the dynamic loader and reading the queries.
**
** Built with -DKEEL_BENCH_INTERNALS and -Isrc, the sweep also reports the
** distance computations per query, read from the search context the handle
** keeps after each call; a cold run the brings of pages that waited (the
** search context's waits: the 1st search's, and those of the first 10 and
** 100 searches, on a JSON line of its own); and a URL's cold run what its
** page cache fetched (GETs and bytes, warm's share, the fault thread's
** granules, disk cache hits: keel__remote_counters) at the open, the 1st,
** 10th and 100th result and the end (internal structures; diagnostics
** only).
*/
#define _GNU_SOURCE 1

#include "keel.h"

#include "bench_common.h"

#ifdef KEEL_BENCH_INTERNALS
#include "api/api.h"

#include <pthread.h>
#endif

typedef struct kctx {
    keel_index *idx;
    unsigned ef;
    keel_result res[1024];
    long long ndist;
    /* cold with internals: searches, and the brings of pages that waited
     * (keel_search_ctx.waits) over the first 1, 10 and 100 of them. */
    long long nsearch, waits[3], ndist1;
} kctx;

static void
k_set_ef(void *c, unsigned ef)
{
    ((kctx *)c)->ef = ef;
}

static void
k_search(void *cv, const float *q, size_t k, int64_t *ids)
{
    kctx *c = (kctx *)cv;
    keel_search_params p;
    memset(&p, 0, sizeof p);
    p.ef = c->ef;
    size_t n = 0;
    int rc = keel_search(c->idx, q, k, &p, c->res, &n);
    if (rc) {
        fprintf(stderr, "keel_search: %s\n", keel_errmsg());
        exit(1);
    }
#ifdef KEEL_BENCH_INTERNALS
    if (c->idx->pool) {
        c->ndist += (long long)c->idx->pool->ndist;
        long long w = (long long)c->idx->pool->waits;
        c->nsearch++;
        c->waits[0] += c->nsearch <= 1 ? w : 0;
        c->waits[1] += c->nsearch <= 10 ? w : 0;
        c->waits[2] += c->nsearch <= 100 ? w : 0;
        if (c->nsearch == 1)
            c->ndist1 = c->ndist;
    }
#endif
    for (size_t i = 0; i < k; i++)
        ids[i] = i < n ? (int64_t)c->res[i].id : -1;
}

static long long
k_ndist(void *cv)
{
#ifdef KEEL_BENCH_INTERNALS
    return ((kctx *)cv)->ndist;
#else
    (void)cv;
    return -1;
#endif
}

#ifdef KEEL_BENCH_INTERNALS
/* The page cache's counters (bench_common.h's bench_fetch_names order);
** the engine gets this only for a URL. */
static void
k_fetched(void *cv, long long *v)
{
    keel_cache_counters n;
    memset(&n, 0, sizeof n);
    keel__remote_counters(((kctx *)cv)->idx, &n);
    v[0] = (long long)n.gets;
    v[1] = (long long)n.get_bytes;
    v[2] = (long long)n.warm_gets;
    v[3] = (long long)n.warm_bytes;
    v[4] = (long long)n.faults;
    v[5] = (long long)n.disk_hits;
    v[6] = (long long)n.rounds;
}


/* Warm's end, seen from a thread that polls every millisecond (cold
** --warm with internals): ms from exec, -1 while it runs. */
static struct {
    keel_index *idx;
    int64_t t0;
    double done_ms;
    int stop;
    pthread_t tid;
} warm_watch = {NULL, 0, -1, 0, 0};

static void *
warm_watch_main(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&warm_watch.stop, __ATOMIC_ACQUIRE)) {
        if (!keel__warm_running(warm_watch.idx)) {
            warm_watch.done_ms = bench_ms_since(warm_watch.t0);
            break;
        }
        usleep(1000);
    }
    return NULL;
}

static const char *
k_more(void *cv)
{
    static char buf[64];
    (void)cv;
    __atomic_store_n(&warm_watch.stop, 1, __ATOMIC_RELEASE);
    pthread_join(warm_watch.tid, NULL);
    snprintf(buf, sizeof buf, ",\"warm_done_ms\":%.1f", warm_watch.done_ms);
    return buf;
}
#endif

static int
is_url(const char *s)
{
    return strncmp(s, "s3://", 5) == 0;
}

static void
usage(void)
{
    fputs("usage: keel_bench build INDEX BASE.fvecs [--metric l2|cosine] "
          "[--precision f32|f16] [--codes none|i8|i4] [-M 16] [--efc 200] "
          "[--threads T] [--label L]\n"
          "       keel_bench sweep INDEX QUERIES.fvecs GT.ivecs [--ef LIST] "
          "[--rounds R] [--min-time S] [--k 10] [--label L]\n"
          "       keel_bench mt INDEX QUERIES.fvecs GT.ivecs [--ef LIST] "
          "[--threads T] [--rounds R] [--min-time S] [--k 10] "
          "[--label L]\n"
          "       keel_bench cold INDEX QUERIES.fvecs [--warm] [--ef 64] "
          "[--k 10] [--queries N] [--max-s S] [--label L]\n", stderr);
    exit(2);
}

static void
check(int rc, const char *what)
{
    if (rc) {
        fprintf(stderr, "keel_bench: %s: %s\n", what, keel_errmsg());
        exit(1);
    }
}

typedef struct opts {
    const char *pos[3];
    int npos;
    const char *metric, *precision, *codes, *efs, *label;
    unsigned M, efc, threads, ef, rounds;
    size_t k, max_q;
    double min_time, max_s;
    int warm;
} opts;

static void
parse(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    o->metric = "l2";
    o->precision = "f32";
    o->codes = "none";
    o->efs = "16,24,32,48,64,96,128,192,256,384,512";
    o->label = "";
    o->M = 16;
    o->efc = 200;
    o->ef = 64;
    o->rounds = 1;
    o->k = 10;
    o->min_time = 0.5;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--warm") == 0) {
            o->warm = 1;
            continue;
        }
        if (a[0] != '-') {
            if (o->npos == 3)
                usage();
            o->pos[o->npos++] = a;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--metric") == 0)
            o->metric = v;
        else if (strcmp(a, "--precision") == 0)
            o->precision = v;
        else if (strcmp(a, "--codes") == 0)
            o->codes = v;
        else if (strcmp(a, "-M") == 0)
            o->M = (unsigned)atoi(v);
        else if (strcmp(a, "--efc") == 0)
            o->efc = (unsigned)atoi(v);
        else if (strcmp(a, "--threads") == 0)
            o->threads = (unsigned)atoi(v);
        else if (strcmp(a, "--ef") == 0) {
            o->efs = v;
            o->ef = (unsigned)atoi(v);
        } else if (strcmp(a, "--rounds") == 0)
            o->rounds = (unsigned)atoi(v);
        else if (strcmp(a, "--min-time") == 0)
            o->min_time = atof(v);
        else if (strcmp(a, "--k") == 0)
            o->k = (size_t)atoi(v);
        else if (strcmp(a, "--label") == 0)
            o->label = v;
        else if (strcmp(a, "--queries") == 0)
            o->max_q = (size_t)atol(v);
        else if (strcmp(a, "--max-s") == 0)
            o->max_s = atof(v);
        else
            usage();
    }
    if (o->k == 0 || o->k > 1024)
        usage();
}

static int
cmd_build(const opts *o)
{
    if (o->npos != 2)
        usage();
    const char *path = o->pos[0];
    size_t n;
    uint32_t dim;
    float *base = (float *)bench_load_vecs(o->pos[1], &n, &dim);
    uint64_t *ids = (uint64_t *)malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = i;
    unlink(path);

    keel_options opt;
    memset(&opt, 0, sizeof opt);
    if (strcmp(o->metric, "cosine") == 0)
        opt.metric = KEEL_COSINE;
    else if (strcmp(o->metric, "l2") != 0)
        usage();
    if (strcmp(o->precision, "f16") == 0)
        opt.precision = KEEL_F16;
    else if (strcmp(o->precision, "f32") != 0)
        usage();
    if (strcmp(o->codes, "i8") == 0)
        opt.codes = KEEL_CODES_I8;
    else if (strcmp(o->codes, "i4") == 0)
        opt.codes = KEEL_CODES_I4;
    else if (strcmp(o->codes, "none") != 0)
        usage();
    opt.max_connections = o->M;
    opt.ef_construction = o->efc;
    opt.threads = o->threads;

    bench_reset_peak();
    long base_kb = bench_status_kb("VmRSS:");
    long long wb0 = bench_io("write_bytes:"), wc0 = bench_io("wchar:");
    double load0 = bench_loadavg(), cpu0 = bench_cpu_s();
    int64_t t0 = bench_now_ns();
    keel_index *idx;
    check(keel_open(path, dim, &opt, &idx), "keel_open");
    check(keel_add_batch(idx, base, n, ids, NULL), "keel_add_batch");
    int64_t t1 = bench_now_ns();
    check(keel_flush(idx), "keel_flush");
    int64_t t2 = bench_now_ns();
    double cpu = bench_cpu_s() - cpu0;
    keel_stats st;
    check(keel_stat(idx, &st), "keel_stat");
    check(keel_close(idx), "keel_close");
    long peak_kb = bench_status_kb("VmHWM:");
    long long wb1 = bench_io("write_bytes:"), wc1 = bench_io("wchar:");
    printf("{\"engine\":\"keel\",\"label\":\"%s\",\"kind\":\"build\","
           "\"n\":%zu,\"dim\":%u,\"metric\":\"%s\",\"precision\":\"%s\","
           "\"codes\":\"%s\",\"M\":%u,\"efc\":%u,\"threads\":%u,\"add_s\":%.3f,"
           "\"save_s\":%.3f,\"build_s\":%.3f,\"cpu_s\":%.3f,"
           "\"base_rss_kb\":%ld,"
           "\"peak_rss_kb\":%ld,\"file_bytes\":%llu,\"alloc_bytes\":%llu,"
           "\"write_bytes\":%lld,\"wchar\":%lld,\"max_level\":%u,"
           "\"load\":%.2f,\"load_end\":%.2f}\n",
           o->label, n, dim, o->metric, o->precision, o->codes, o->M, o->efc,
           o->threads, (double)(t1 - t0) / 1e9, (double)(t2 - t1) / 1e9,
           (double)(t2 - t0) / 1e9, cpu, base_kb, peak_kb,
           (unsigned long long)st.file_bytes,
           (unsigned long long)st.allocated_bytes, wb1 - wb0, wc1 - wc0,
           st.max_level, load0, bench_loadavg());
    free(ids);
    free(base);
    return 0;
}

static int
cmd_sweep(const opts *o)
{
    if (o->npos != 3)
        usage();
    bench_queries in;
    bench_load_queries(o->pos[1], o->pos[2], o->efs, &in);

    keel_options opt;
    memset(&opt, 0, sizeof opt);
    opt.flags = KEEL_WARM;
    if (getenv("BENCH_HUGE") && atoi(getenv("BENCH_HUGE")))
        opt.flags |= KEEL_HUGE_PAGES;
    static kctx c;
    int64_t open0 = bench_now_ns();
    check(keel_open_reader(o->pos[0], &opt, &c.idx), "keel_open_reader");
    if (keel_dim(c.idx) != in.dim)
        bench_die("%s: the queries' dimensions differ from the index's",
                  o->pos[1]);
    double warm_ms = -1;
    long long missing = -1;
    (void)open0;
#ifdef KEEL_BENCH_INTERNALS
    while (keel__warm_running(c.idx))
        usleep(1000);
    warm_ms = bench_ms_since(open0);
    keel_cache_counters cn;
    if (keel__remote_counters(c.idx, &cn) == KEEL_OK)
        missing = (long long)cn.missing;
    keel__clear_error();
#endif
    bench_engine e = {&c, k_set_ef, k_search, k_ndist, NULL, NULL};
    char tag[256];
    const char *br = getenv("KEEL_BATCH_READS");
    int off = br && *br && atoi(br) == 0; /* batch reads off: its own name */
    snprintf(tag, sizeof tag, "\"engine\":\"keel%s\",\"label\":\"%s\","
             "\"kind\":\"sweep\",\"url\":%d,\"warm_ms\":%.1f,"
             "\"missing\":%lld", off ? "-off" : "", o->label,
             is_url(o->pos[0]), warm_ms, missing);
    bench_sweep(&e, tag, in.q, in.nq, in.dim, &in.gt, in.efs, in.nef,
                (int)o->rounds, o->min_time, o->k);
    keel_close(c.idx);
    bench_free_queries(&in);
    return 0;
}

/* keel_search_batch of every query, on the handle's threads. */
typedef struct kmt {
    kctx *c;
    keel_result *res;
    size_t *n;
} kmt;

static void
k_set_ef_mt(void *m, unsigned ef)
{
    ((kmt *)m)->c->ef = ef;
}

static void
k_search_all(void *mv, const float *q, size_t nq, size_t k, int64_t *ids)
{
    kmt *m = (kmt *)mv;
    keel_search_params p;
    memset(&p, 0, sizeof p);
    p.ef = m->c->ef;
    if (keel_search_batch(m->c->idx, q, nq, k, &p, m->res, m->n)) {
        fprintf(stderr, "keel_search_batch: %s\n", keel_errmsg());
        exit(1);
    }
    for (size_t i = 0; i < nq; i++)
        for (size_t j = 0; j < k; j++)
            ids[i * k + j] = j < m->n[i] ? (int64_t)m->res[i * k + j].id : -1;
}

static long long
k_no_ndist(void *m)
{
    (void)m;
    return -1;
}

static int
cmd_mt(const opts *o)
{
    if (o->npos != 3)
        usage();
    bench_queries in;
    bench_load_queries(o->pos[1], o->pos[2], o->efs, &in);
    unsigned threads = o->threads ? o->threads
                                  : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);

    keel_options opt;
    memset(&opt, 0, sizeof opt);
    opt.flags = KEEL_WARM;
    opt.threads = threads;
    static kctx c;
    check(keel_open_reader(o->pos[0], &opt, &c.idx), "keel_open_reader");
    if (keel_dim(c.idx) != in.dim)
        bench_die("%s: the queries' dimensions differ from the index's",
                  o->pos[1]);
#ifdef KEEL_BENCH_INTERNALS
    while (keel__warm_running(c.idx))
        usleep(1000);
#endif
    kmt m;
    m.c = &c;
    m.res = (keel_result *)malloc(in.nq * o->k * sizeof *m.res);
    m.n = (size_t *)malloc(in.nq * sizeof *m.n);
    if (!m.res || !m.n)
        bench_die("out of memory");
    bench_engine e = {&m, k_set_ef_mt, NULL, k_no_ndist, NULL, NULL};
    char tag[256];
    snprintf(tag, sizeof tag, "\"engine\":\"keel\",\"label\":\"%s\","
             "\"call\":\"keel_search_batch\"", o->label);
    bench_sweep_mt(&e, k_search_all, tag, in.q, in.nq, &in.gt, in.efs,
                   in.nef, (int)o->rounds, o->min_time, o->k, threads);
    keel_close(c.idx);
    free(m.res);
    free(m.n);
    bench_free_queries(&in);
    return 0;
}

static int
cmd_cold(const opts *o, int64_t t0, double main_ms)
{
    if (o->npos != 2)
        usage();
    size_t nq;
    uint32_t dim;
    float *q = (float *)bench_load_vecs(o->pos[1], &nq, &dim);
    double ready_ms = bench_ms_since(t0);
    keel_options opt;
    memset(&opt, 0, sizeof opt);
    if (o->warm)
        opt.flags = KEEL_WARM;
    static kctx c;
    check(keel_open_reader(o->pos[0], &opt, &c.idx), "keel_open_reader");
    double open_ms = bench_ms_since(t0);
    bench_engine e = {&c, k_set_ef, k_search, k_ndist, NULL, NULL};
#ifdef KEEL_BENCH_INTERNALS
    if (is_url(o->pos[0]))
        e.fetched = k_fetched;
    if (o->warm) {
        warm_watch.idx = c.idx;
        warm_watch.t0 = t0;
        if (pthread_create(&warm_watch.tid, NULL, warm_watch_main, NULL) == 0)
            e.more = k_more;
    }
#endif
    char tag[512];
    /* KEEL_BATCH_READS=0 (batch reads off) names its own variant. */
    const char *br = getenv("KEEL_BATCH_READS");
    int off = br && *br && atoi(br) == 0;
    const char *cap = getenv("KEEL_BATCH_READS_MAX_RUNS");
    snprintf(tag, sizeof tag, "\"engine\":\"%s%s\",\"label\":\"%s\","
             "\"kind\":\"cold\",\"url\":%d,\"max_runs\":\"%s\"",
             o->warm ? "keel-warm" : "keel", off ? "-off" : "", o->label,
             is_url(o->pos[0]), cap ? cap : "");
    bench_cold_opts lim = {o->max_q, o->max_s};
    bench_cold(&e, tag, o->pos[0], t0, main_ms, ready_ms, open_ms, q, nq, dim,
               o->ef, o->k, &lim);
#ifdef KEEL_BENCH_INTERNALS
    /* The brings that waited for pages, one after another: the 1st search's
     * round trips, and those of the first 10 and 100 together. */
    printf("{%s,\"kind2\":\"waits\",\"q1_waits\":%lld,\"q10_waits\":%lld,"
           "\"q100_waits\":%lld,\"q1_ndist\":%lld}\n", tag, c.waits[0],
           c.waits[1], c.waits[2], c.ndist1);
#endif
    keel_close(c.idx);
    free(q);
    return 0;
}

int
main(int argc, char **argv)
{
    int64_t t0 = bench_t0_ns();
    double main_ms = bench_ms_since(t0);
    if (argc < 2)
        usage();
    opts o;
    parse(argc, argv, &o);
    if (strcmp(argv[1], "build") == 0)
        return cmd_build(&o);
    if (strcmp(argv[1], "sweep") == 0)
        return cmd_sweep(&o);
    if (strcmp(argv[1], "cold") == 0)
        return cmd_cold(&o, t0, main_ms);
    if (strcmp(argv[1], "mt") == 0)
        return cmd_mt(&o);
    usage();
    return 2;
}
