/* hnsw_bench.cpp -- hnswlib's side of the benchmark (bench/run.sh drives it).
**
** hnswlib 0.6.2 from Debian's libhnswlib-dev headers (/usr/include/hnswlib),
** through its public C++ API, with the subcommands and JSON of keel_bench.c:
**
**   hnsw_bench build INDEX BASE.fvecs [--metric l2|cosine] [-M 16]
**                    [--efc 200] [--threads T] [--label L]
**   hnsw_bench sweep INDEX QUERIES.fvecs GT.ivecs --metric l2|cosine
**                    [--ef LIST] [--rounds R] [--min-time S] [--k 10]
**   hnsw_bench cold  INDEX QUERIES.fvecs --metric l2|cosine [--ef 64]
**   hnsw_bench mt    INDEX QUERIES.fvecs GT.ivecs --metric l2|cosine
**                    [--ef LIST] [--threads T] [--rounds R] [--min-time S]
**
** build: HierarchicalNSW(space, n, M, efc, seed 100); addPoint of row 0,
**   then of the other rows on T threads taking rows from a shared counter
**   (what the python binding's add_items does with num_threads = T), label
**   = row number; then saveIndex and an fsync of the file, so the index is
**   as durable as keel's after keel_flush. Cosine is hnswlib's own recipe
**   (what its python "cosine" space does): vectors normalized, inner
**   product space; queries are normalized inside the timed search call.
** sweep: loadIndex, then bench_common.h's loop; searchKnn's results are
**   popped into an array inside the timed call. Distance computations come
**   from hnswlib's own metric_distance_computations counter.
** mt: every core. loadIndex, then bench_common.h's bench_sweep_mt: each
**   call answers the whole query set the way the python binding's
**   knn_query does, through a copy of its ParallelFor: T fresh threads (T
**   default: every core) take query rows from a shared counter, each
**   searchKnn's results popped into the output arrays (cosine: each query
**   normalized into the thread's own buffer first, as knn_query does).
** cold: loadIndex (which reads the whole file) and one query per call, times
**   from KEEL_BENCH_T0 as for keel (at most --queries N queries, none
**   started after --max-s S seconds). bench/remote.sh starts it from its
**   download driver (s3_object get ... -- hnsw_bench cold ...), so its
**   times include the download.
**
** Compile with the flags of keel's library plus -march=native, so that
** hnswlib's compile-time SIMD (AVX-512 here) is on, as keel's run-time
** kernels are:  c++ -std=c++11 -O2 -march=native -pthread
*/
#include <hnswlib/hnswlib.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"

struct hctx {
    hnswlib::HierarchicalNSW<float> *h;
    int cosine;
    uint32_t dim;
    std::vector<float> qbuf;
};

static void
h_set_ef(void *c, unsigned ef)
{
    static_cast<hctx *>(c)->h->setEf(ef);
}

static void
h_search(void *cv, const float *q, size_t k, int64_t *ids)
{
    hctx *c = static_cast<hctx *>(cv);
    if (c->cosine) {
        double s = 0;
        for (uint32_t j = 0; j < c->dim; j++)
            s += (double)q[j] * q[j];
        double inv = s > 0 ? 1.0 / sqrt(s) : 1.0;
        for (uint32_t j = 0; j < c->dim; j++)
            c->qbuf[j] = (float)(q[j] * inv);
        q = c->qbuf.data();
    }
    std::priority_queue<std::pair<float, hnswlib::labeltype>> r =
        c->h->searchKnn(q, k);
    size_t n = r.size();
    for (size_t i = n; i < k; i++)
        ids[i] = -1;
    while (!r.empty()) { /* the farthest comes out first */
        ids[--n] = (int64_t)r.top().second;
        r.pop();
    }
}

static long long
h_ndist(void *c)
{
    return static_cast<hctx *>(c)->h->metric_distance_computations.load();
}

/* The python binding's ParallelFor (hnswlib 0.6.2, python_bindings/
** bindings.cpp): numThreads fresh threads per call, rows from an atomic
** counter; one thread runs the rows itself. */
template <class Function>
static void
parallel_for(size_t start, size_t end, size_t num_threads, Function fn)
{
    if (num_threads <= 1) {
        for (size_t id = start; id < end; id++)
            fn(id, 0);
        return;
    }
    std::vector<std::thread> threads;
    std::atomic<size_t> current(start);
    for (size_t tid = 0; tid < num_threads; ++tid)
        threads.push_back(std::thread([&, tid] {
            for (;;) {
                size_t id = current.fetch_add(1);
                if (id >= end)
                    break;
                fn(id, tid);
            }
        }));
    for (size_t t = 0; t < threads.size(); t++)
        threads[t].join();
}

struct hmt {
    hctx *c;
    unsigned threads;
    std::vector<float> norm; /* threads * dim: knn_query's norm_array */
};

static void
h_set_ef_mt(void *m, unsigned ef)
{
    static_cast<hmt *>(m)->c->h->setEf(ef);
}

static void
h_search_all(void *mv, const float *q, size_t nq, size_t k, int64_t *ids)
{
    hmt *m = static_cast<hmt *>(mv);
    hctx *c = m->c;
    uint32_t dim = c->dim;
    parallel_for(0, nq, m->threads, [&](size_t row, size_t tid) {
        const float *v = q + row * dim;
        if (c->cosine) {
            float *nv = m->norm.data() + tid * dim;
            float s = 0;
            for (uint32_t j = 0; j < dim; j++)
                s += v[j] * v[j];
            float inv = 1.0f / (sqrtf(s) + 1e-30f);
            for (uint32_t j = 0; j < dim; j++)
                nv[j] = v[j] * inv;
            v = nv;
        }
        std::priority_queue<std::pair<float, hnswlib::labeltype>> r =
            c->h->searchKnn(v, k);
        int64_t *out = ids + row * k;
        size_t n = r.size();
        for (size_t i = n; i < k; i++)
            out[i] = -1;
        for (int i = (int)n - 1; i >= 0; i--) {
            out[i] = (int64_t)r.top().second;
            r.pop();
        }
    });
}

static long long
h_no_ndist(void *)
{
    return -1;
}

static void
usage()
{
    fputs("usage: hnsw_bench build INDEX BASE.fvecs [--metric l2|cosine] "
          "[-M 16] [--efc 200] [--threads T] [--label L]\n"
          "       hnsw_bench sweep INDEX QUERIES.fvecs GT.ivecs "
          "[--metric l2|cosine] [--ef LIST] [--rounds R] [--min-time S] "
          "[--k 10] [--label L]\n"
          "       hnsw_bench mt INDEX QUERIES.fvecs GT.ivecs "
          "[--metric l2|cosine] [--ef LIST] [--threads T] [--rounds R] "
          "[--min-time S] [--k 10] [--label L]\n"
          "       hnsw_bench cold INDEX QUERIES.fvecs [--metric l2|cosine] "
          "[--ef 64] [--k 10] [--queries N] [--max-s S] [--label L]\n",
          stderr);
    exit(2);
}

struct opts {
    const char *pos[3];
    int npos;
    std::string metric, efs, label;
    unsigned M, efc, threads, ef, rounds;
    size_t k, max_q;
    double min_time, max_s;
};

static void
parse(int argc, char **argv, opts *o)
{
    o->npos = 0;
    o->metric = "l2";
    o->efs = "16,24,32,48,64,96,128,192,256,384,512";
    o->M = 16;
    o->efc = 200;
    o->threads = std::thread::hardware_concurrency();
    o->ef = 64;
    o->rounds = 1;
    o->k = 10;
    o->min_time = 0.5;
    o->max_q = 0;
    o->max_s = 0;
    for (int i = 2; i < argc; i++) {
        std::string a = argv[i];
        if (a[0] != '-') {
            if (o->npos == 3)
                usage();
            o->pos[o->npos++] = argv[i];
            continue;
        }
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (a == "--metric")
            o->metric = v;
        else if (a == "-M")
            o->M = (unsigned)atoi(v);
        else if (a == "--efc")
            o->efc = (unsigned)atoi(v);
        else if (a == "--threads")
            o->threads = (unsigned)atoi(v);
        else if (a == "--ef") {
            o->efs = v;
            o->ef = (unsigned)atoi(v);
        } else if (a == "--rounds")
            o->rounds = (unsigned)atoi(v);
        else if (a == "--min-time")
            o->min_time = atof(v);
        else if (a == "--k")
            o->k = (size_t)atoi(v);
        else if (a == "--label")
            o->label = v;
        else if (a == "--queries")
            o->max_q = (size_t)atol(v);
        else if (a == "--max-s")
            o->max_s = atof(v);
        else if (a == "--precision") {
            if (std::string(v) != "f32")
                bench_die("hnswlib has no %s storage", v);
        } else
            usage();
    }
    if (o->metric != "l2" && o->metric != "cosine")
        usage();
    if (o->k == 0 || o->threads == 0)
        usage();
}

static hnswlib::SpaceInterface<float> *
make_space(const opts *o, uint32_t dim)
{
    if (o->metric == "cosine")
        return new hnswlib::InnerProductSpace(dim);
    return new hnswlib::L2Space(dim);
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
    unlink(path);
    hnswlib::SpaceInterface<float> *space = make_space(o, dim);

    bench_reset_peak();
    long base_kb = bench_status_kb("VmRSS:");
    long long wb0 = bench_io("write_bytes:"), wc0 = bench_io("wchar:");
    double load0 = bench_loadavg(), cpu0 = bench_cpu_s();
    int64_t t0 = bench_now_ns();
    if (o->metric == "cosine")
        bench_normalize(base, n, dim);
    hnswlib::HierarchicalNSW<float> *h =
        new hnswlib::HierarchicalNSW<float>(space, n, o->M, o->efc, 100);
    h->addPoint(base, 0);
    std::atomic<size_t> next(1);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < o->threads; t++)
        pool.push_back(std::thread([&]() {
            for (;;) {
                size_t i = next.fetch_add(1);
                if (i >= n)
                    break;
                h->addPoint(base + i * dim, i);
            }
        }));
    for (size_t t = 0; t < pool.size(); t++)
        pool[t].join();
    int64_t t1 = bench_now_ns();
    h->saveIndex(path);
    if (bench_fsync_path(path) != 0)
        bench_die("cannot fsync %s", path);
    int64_t t2 = bench_now_ns();
    double cpu = bench_cpu_s() - cpu0;
    long peak_kb = bench_status_kb("VmHWM:");
    long long wb1 = bench_io("write_bytes:"), wc1 = bench_io("wchar:");
    long long size, alloc;
    bench_file_bytes(path, &size, &alloc);
    printf("{\"engine\":\"hnswlib\",\"label\":\"%s\",\"kind\":\"build\","
           "\"n\":%zu,\"dim\":%u,\"metric\":\"%s\",\"precision\":\"f32\","
           "\"M\":%u,\"efc\":%u,\"threads\":%u,\"add_s\":%.3f,"
           "\"save_s\":%.3f,\"build_s\":%.3f,\"cpu_s\":%.3f,"
           "\"base_rss_kb\":%ld,"
           "\"peak_rss_kb\":%ld,\"file_bytes\":%lld,\"alloc_bytes\":%lld,"
           "\"write_bytes\":%lld,\"wchar\":%lld,\"max_level\":%d,"
           "\"load\":%.2f,\"load_end\":%.2f}\n",
           o->label.c_str(), n, dim, o->metric.c_str(), o->M, o->efc,
           o->threads, (double)(t1 - t0) / 1e9, (double)(t2 - t1) / 1e9,
           (double)(t2 - t0) / 1e9, cpu, base_kb, peak_kb, size, alloc,
           wb1 - wb0, wc1 - wc0, h->maxlevel_, load0, bench_loadavg());
    delete h;
    delete space;
    free(base);
    return 0;
}

/* Loads the saved index at o->pos[0] into c for searching (over space). */
static void
h_open(const opts *o, uint32_t dim, hnswlib::SpaceInterface<float> *space,
       hctx *c)
{
    c->h = new hnswlib::HierarchicalNSW<float>(space, o->pos[0]);
    c->cosine = o->metric == "cosine";
    c->dim = dim;
    c->qbuf.resize(dim);
}

static int
cmd_sweep(const opts *o)
{
    if (o->npos != 3)
        usage();
    bench_queries in;
    bench_load_queries(o->pos[1], o->pos[2], o->efs.c_str(), &in);
    hnswlib::SpaceInterface<float> *space = make_space(o, in.dim);
    hctx c;
    h_open(o, in.dim, space, &c);
    bench_engine e = {&c, h_set_ef, h_search, h_ndist, NULL, NULL};
    std::string tag = "\"engine\":\"hnswlib\",\"label\":\"" + o->label +
                      "\",\"kind\":\"sweep\"";
    bench_sweep(&e, tag.c_str(), in.q, in.nq, in.dim, &in.gt, in.efs, in.nef,
                (int)o->rounds, o->min_time, o->k);
    delete c.h;
    delete space;
    bench_free_queries(&in);
    return 0;
}

static int
cmd_mt(const opts *o)
{
    if (o->npos != 3)
        usage();
    bench_queries in;
    bench_load_queries(o->pos[1], o->pos[2], o->efs.c_str(), &in);
    hnswlib::SpaceInterface<float> *space = make_space(o, in.dim);
    hctx c;
    h_open(o, in.dim, space, &c);
    hmt m;
    m.c = &c;
    m.threads = o->threads;
    m.norm.resize((size_t)o->threads * in.dim);
    bench_engine e = {&m, h_set_ef_mt, NULL, h_no_ndist, NULL, NULL};
    std::string tag = "\"engine\":\"hnswlib\",\"label\":\"" + o->label +
                      "\",\"call\":\"knn_query\"";
    bench_sweep_mt(&e, h_search_all, tag.c_str(), in.q, in.nq, &in.gt,
                   in.efs, in.nef, (int)o->rounds, o->min_time, o->k,
                   o->threads);
    delete c.h;
    delete space;
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
    hnswlib::SpaceInterface<float> *space = make_space(o, dim);
    hctx c;
    h_open(o, dim, space, &c);
    double open_ms = bench_ms_since(t0);
    bench_engine e = {&c, h_set_ef, h_search, h_ndist, NULL, NULL};
    std::string tag = "\"engine\":\"hnswlib\",\"label\":\"" + o->label +
                      "\",\"kind\":\"cold\"";
    bench_cold_opts lim = {o->max_q, o->max_s};
    bench_cold(&e, tag.c_str(), o->pos[0], t0, main_ms, ready_ms, open_ms, q,
               nq, dim, o->ef, o->k, &lim);
    delete c.h;
    delete space;
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
    try {
        std::string cmd = argv[1];
        if (cmd == "build")
            return cmd_build(&o);
        if (cmd == "sweep")
            return cmd_sweep(&o);
        if (cmd == "cold")
            return cmd_cold(&o, t0, main_ms);
        if (cmd == "mt")
            return cmd_mt(&o);
    } catch (const std::exception &ex) {
        bench_die("hnsw_bench: %s", ex.what());
    }
    usage();
    return 2;
}
