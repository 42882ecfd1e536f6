/* bench_common.h -- what keel_bench.c and hnsw_bench.cpp share: vector and
** ground-truth files, clocks, memory and I/O counters, recall, and the two
** measurement loops (sweep and cold), so both C programs measure in exactly
** the same way.
**
** Written in the common subset of C11 and C++11 (every malloc is cast, no
** designated initializers, no VLAs). Everything is static: each program
** includes this once.
**
** Measurement rules (doc/benchmarks.md repeats them):
**   sweep  one thread, one query per call. Before timing, one untimed pass
**          over all queries at the largest ef up to 256. For each ef, passes
**          over all queries repeat until min_time seconds have passed; QPS
**          is queries / seconds over all passes of that ef. Recall is
**          checked after the clock stops (every pass gives the same
**          results), distance computations over the first pass.
**   recall |results among the true top-k| / k, where a result also counts
**          when its true distance ties the k-th true distance (read from the
**          .dist.fvecs beside the ground truth; ann-benchmarks counts ties
**          the same way). The strict id-only figure is printed as well.
**   cold   time from KEEL_BENCH_T0 (CLOCK_MONOTONIC ns, set by bench/evict
**          just before it execs this program) to the open, and to the 1st,
**          10th, 100th and 1,000th query answered, one query per call, and
**          the mean per query after the 100th; an index opened by URL also
**          reports what it fetched (GETs, bytes) at each of those points.
*/
#ifndef KEEL_BENCH_COMMON_H
#define KEEL_BENCH_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_EF 64

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static inline void
bench_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static inline int64_t
bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The sweep's clock: wall time, or with BENCH_CLOCK=cpu the search
** thread's CPU time, which a shared machine's other tenants disturb far less
** (they still share the caches); for comparing changes, not for reporting. */
static inline int64_t
bench_sweep_ns(void)
{
    static int cpu = -1;
    struct timespec ts;
    if (cpu < 0) {
        const char *s = getenv("BENCH_CLOCK");
        cpu = s && strcmp(s, "cpu") == 0;
    }
    clock_gettime(cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The launch time bench/evict recorded, or now when run by hand. */
static inline int64_t
bench_t0_ns(void)
{
    const char *s = getenv("KEEL_BENCH_T0");
    if (s && *s)
        return strtoll(s, NULL, 10);
    return bench_now_ns();
}

static inline double
bench_ms_since(int64_t t0)
{
    return (double)(bench_now_ns() - t0) / 1e6;
}

/* Reads a whole file into malloc'ed memory. */
static inline unsigned char *
bench_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        bench_die("cannot open %s", path);
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0)
        bench_die("cannot stat %s", path);
    size_t n = (size_t)sb.st_size;
    unsigned char *buf = (unsigned char *)malloc(n ? n : 1);
    if (!buf)
        bench_die("out of memory reading %s", path);
    if (n && fread(buf, 1, n, f) != n)
        bench_die("short read from %s", path);
    fclose(f);
    *len = n;
    return buf;
}

/* An .fvecs or .ivecs file (int32 width, then width 4-byte values, per row)
** as n rows of width values, back to back. */
static inline void *
bench_load_vecs(const char *path, size_t *n_out, uint32_t *width_out)
{
    size_t len;
    unsigned char *raw = bench_slurp(path, &len);
    int32_t w = 0;
    if (len < 4)
        bench_die("%s is empty", path);
    memcpy(&w, raw, 4);
    if (w <= 0 || w > 100000 || len % (4 + 4 * (size_t)w) != 0)
        bench_die("%s is not a .fvecs/.ivecs file", path);
    size_t row = 4 + 4 * (size_t)w, n = len / row;
    unsigned char *out = (unsigned char *)malloc(n * 4 * (size_t)w + 1);
    if (!out)
        bench_die("out of memory reading %s", path);
    for (size_t i = 0; i < n; i++) {
        int32_t wi;
        memcpy(&wi, raw + i * row, 4);
        if (wi != w)
            bench_die("%s has rows of different widths", path);
        memcpy(out + i * 4 * (size_t)w, raw + i * row + 4, 4 * (size_t)w);
    }
    free(raw);
    *n_out = n;
    *width_out = (uint32_t)w;
    return out;
}

/* User + system CPU seconds of this process so far (all its threads). */
static inline double
bench_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* A field of /proc/self/status in kB ("VmHWM:", "VmRSS:"), or -1. */
static inline long
bench_status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t fl = strlen(field);
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0) {
            v = strtol(line + fl, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* Resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+). */
static inline void
bench_reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* A field of /proc/self/io ("write_bytes:", "wchar:"), or -1. */
static inline long long
bench_io(const char *field)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[256];
    long long v = -1;
    size_t fl = strlen(field);
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0) {
            v = strtoll(line + fl, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

static inline void
bench_file_bytes(const char *path, long long *size, long long *alloc)
{
    struct stat sb;
    *size = *alloc = -1;
    if (stat(path, &sb) == 0) {
        *size = (long long)sb.st_size;
        *alloc = (long long)sb.st_blocks * 512;
    }
}

static inline int
bench_fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Pages of the file in the page cache, and its total pages. */
static inline void
bench_resident(const char *path, long long *res, long long *total)
{
    *res = *total = -1;
    int fd = open(path, O_RDONLY);
    struct stat sb;
    if (fd < 0)
        return;
    if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t np = ((size_t)sb.st_size + page - 1) / page;
        size_t len = (size_t)sb.st_size;
        void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        unsigned char *vec = (unsigned char *)malloc(np);
        if (p != MAP_FAILED && vec && mincore(p, len, vec) == 0) {
            long long r = 0;
            for (size_t i = 0; i < np; i++)
                r += vec[i] & 1;
            *res = r;
            *total = (long long)np;
        }
        free(vec);
        if (p != MAP_FAILED)
            munmap(p, len);
    }
    close(fd);
}

static inline double
bench_loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

/* "16,24,32" into efs[]; returns how many. */
static inline int
bench_parse_efs(const char *s, unsigned *efs)
{
    int n = 0;
    while (*s && n < BENCH_MAX_EF) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || v == 0 || v > 100000)
            bench_die("bad ef list: %s", s);
        efs[n++] = (unsigned)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            bench_die("bad ef list: %s", end);
    }
    return n;
}

/* Normalizes n rows of dim floats in place (cosine as inner product). */
static inline void
bench_normalize(float *x, size_t n, uint32_t dim)
{
    for (size_t i = 0; i < n; i++) {
        float *v = x + i * dim;
        double s = 0;
        for (uint32_t j = 0; j < dim; j++)
            s += (double)v[j] * v[j];
        if (s > 0) {
            double inv = 1.0 / sqrt(s);
            for (uint32_t j = 0; j < dim; j++)
                v[j] = (float)(v[j] * inv);
        }
    }
}

/* Ground truth: ids (and distances, or NULL) of the true top `width`. */
typedef struct bench_gt {
    const int32_t *ids;
    const float *dist;
    uint32_t width;
} bench_gt;

static inline void
bench_load_gt(const char *path, size_t nq, bench_gt *gt)
{
    size_t n;
    uint32_t w;
    gt->ids = (const int32_t *)bench_load_vecs(path, &n, &w);
    gt->width = w;
    gt->dist = NULL;
    if (n < nq)
        bench_die("%s has fewer rows than there are queries", path);
    /* X.ivecs -> X.dist.fvecs, when it is there. */
    size_t pl = strlen(path);
    if (pl > 6 && strcmp(path + pl - 6, ".ivecs") == 0) {
        char *dp = (char *)malloc(pl + 16);
        memcpy(dp, path, pl - 6);
        strcpy(dp + pl - 6, ".dist.fvecs");
        if (access(dp, R_OK) == 0) {
            size_t dn;
            uint32_t dw;
            gt->dist = (const float *)bench_load_vecs(dp, &dn, &dw);
            if (dn != n || dw != w)
                bench_die("%s does not match its ground truth", dp);
        }
        free(dp);
    }
}

static inline void
bench_free_gt(bench_gt *gt)
{
    free((void *)gt->ids);
    free((void *)gt->dist);
    gt->ids = NULL;
    gt->dist = NULL;
}

/* What a sweep runs (the drivers' `sweep` and `mt`): the queries, their
** ground truth and the efs. */
typedef struct bench_queries {
    float *q;
    size_t nq;
    uint32_t dim;
    bench_gt gt;
    unsigned efs[BENCH_MAX_EF];
    int nef;
} bench_queries;

/* The queries at qpath, the ground truth at gtpath (a row per query at
** least) and the ef list efs ("16,24,32"). */
static inline void
bench_load_queries(const char *qpath, const char *gtpath, const char *efs,
                   bench_queries *in)
{
    in->q = (float *)bench_load_vecs(qpath, &in->nq, &in->dim);
    bench_load_gt(gtpath, in->nq, &in->gt);
    in->nef = bench_parse_efs(efs, in->efs);
}

static inline void
bench_free_queries(bench_queries *in)
{
    bench_free_gt(&in->gt);
    free(in->q);
    in->q = NULL;
}

/* Hits of one query's k results: strict (id in the true top k) and with
** ties (true distance equal to the k-th true distance also counts). */
static inline void
bench_hits(const bench_gt *gt, size_t qi, const int64_t *res, size_t k,
           long *strict, long *ties)
{
    const int32_t *g = gt->ids + qi * gt->width;
    const float *gd = gt->dist ? gt->dist + qi * gt->width : NULL;
    size_t kk = k < gt->width ? k : gt->width;
    for (size_t i = 0; i < k; i++) {
        if (res[i] < 0)
            continue;
        for (uint32_t j = 0; j < gt->width; j++) {
            if (g[j] != res[i])
                continue;
            if (j < kk) {
                (*strict)++;
                (*ties)++;
            } else if (gd && gd[j] <= gd[kk - 1]) {
                (*ties)++;
            }
            break;
        }
    }
}

/* An engine as the loops see it. */
typedef struct bench_engine {
    void *ctx;
    void (*set_ef)(void *ctx, unsigned ef);
    /* k results' ids into ids (-1 where fewer were found). */
    void (*search)(void *ctx, const float *q, size_t k, int64_t *ids);
    /* Distance computations so far, or -1 if the engine cannot say. */
    long long (*ndist)(void *ctx);
    /* What the engine fetched from object storage so far, into
    ** v[BENCH_FETCH_N] (the names below); NULL: it fetches nothing. */
    void (*fetched)(void *ctx, long long *v);
    /* More JSON fields for the cold line (",\"name\":value..."), asked
    ** for after the last query; NULL: none. */
    const char *(*more)(void *ctx);
} bench_engine;

#define BENCH_FETCH_N 7
static const char *const bench_fetch_names[BENCH_FETCH_N] = {
    "gets", "get_bytes", "warm_gets", "warm_bytes", "faults", "disk_hits",
    "rounds"};

/* Limits of a cold run: at most max_q queries (0: every query of the file),
** and none started after max_s seconds from exec (0: no limit). */
typedef struct bench_cold_opts {
    size_t max_q;
    double max_s;
} bench_cold_opts;

/* The ef of a sweep's untimed first pass: the largest of efs up to 256,
** else the first. */
static inline unsigned
bench_warm_ef(const unsigned *efs, int nef)
{
    unsigned warm_ef = 0;
    for (int i = 0; i < nef; i++)
        if (efs[i] > warm_ef && efs[i] <= 256)
            warm_ef = efs[i];
    return warm_ef ? warm_ef : efs[0];
}

/* The recall / QPS sweep; prints one JSON line per ef and round. `tag` is
** the JSON object's opening fields, such as "\"engine\":\"keel\"". */
static inline void
bench_sweep(const bench_engine *e, const char *tag, const float *queries,
            size_t nq, uint32_t dim, const bench_gt *gt, const unsigned *efs,
            int nef, int rounds, double min_time, size_t k)
{
    int64_t *ids = (int64_t *)malloc(nq * k * sizeof *ids);
    e->set_ef(e->ctx, bench_warm_ef(efs, nef));
    for (size_t i = 0; i < nq; i++)
        e->search(e->ctx, queries + i * dim, k, ids);
    for (int r = 0; r < rounds; r++) {
        for (int fi = 0; fi < nef; fi++) {
            e->set_ef(e->ctx, efs[fi]);
            long strict = 0, ties = 0;
            long long d0 = e->ndist(e->ctx), d1 = -1;
            double load = bench_loadavg();
            int64_t t0 = bench_sweep_ns(), t = t0;
            long passes = 0;
            do {
                for (size_t i = 0; i < nq; i++)
                    e->search(e->ctx, queries + i * dim, k, ids + i * k);
                if (passes == 0)
                    d1 = e->ndist(e->ctx);
                passes++;
                t = bench_sweep_ns();
            } while ((double)(t - t0) < min_time * 1e9);
            for (size_t i = 0; i < nq; i++) /* the last pass's results */
                bench_hits(gt, i, ids + i * k, k, &strict, &ties);
            double secs = (double)(t - t0) / 1e9;
            printf("{%s,\"round\":%d,\"ef\":%u,\"k\":%zu,\"queries\":%zu,"
                   "\"passes\":%ld,\"seconds\":%.6f,\"qps\":%.2f,"
                   "\"recall\":%.5f,\"recall_strict\":%.5f,"
                   "\"ndist\":%.1f,\"load\":%.2f}\n",
                   tag, r, efs[fi], k, nq, passes, secs,
                   (double)nq * (double)passes / secs,
                   (double)ties / (double)(nq * k),
                   (double)strict / (double)(nq * k),
                   d0 >= 0 ? (double)(d1 - d0) / (double)nq : -1.0, load);
            fflush(stdout);
        }
    }
    free(ids);
}

/* Every core: one call answers all nq queries on `threads` threads
** (ids: nq * k, -1 where fewer were found). */
typedef void (*bench_search_all_fn)(void *ctx, const float *queries,
                                     size_t nq, size_t k, int64_t *ids);

/* The sweep with every core: per ef, calls of search_all over the whole
** query set repeat until min_time seconds of wall time have passed; QPS is
** queries / seconds over all calls. One untimed call first, at the largest
** ef up to 256. Prints one JSON line per ef and round ("kind":"mt"). */
static inline void
bench_sweep_mt(const bench_engine *e, bench_search_all_fn search_all,
               const char *tag, const float *queries, size_t nq,
               const bench_gt *gt, const unsigned *efs, int nef, int rounds,
               double min_time, size_t k, unsigned threads)
{
    int64_t *ids = (int64_t *)malloc(nq * k * sizeof *ids);
    e->set_ef(e->ctx, bench_warm_ef(efs, nef));
    search_all(e->ctx, queries, nq, k, ids);
    for (int r = 0; r < rounds; r++) {
        for (int fi = 0; fi < nef; fi++) {
            e->set_ef(e->ctx, efs[fi]);
            long strict = 0, ties = 0, passes = 0;
            double load = bench_loadavg(), cpu0 = bench_cpu_s();
            int64_t t0 = bench_now_ns(), t = t0;
            do {
                search_all(e->ctx, queries, nq, k, ids);
                passes++;
                t = bench_now_ns();
            } while ((double)(t - t0) < min_time * 1e9);
            double cpu = bench_cpu_s() - cpu0;
            for (size_t i = 0; i < nq; i++)
                bench_hits(gt, i, ids + i * k, k, &strict, &ties);
            double secs = (double)(t - t0) / 1e9;
            printf("{%s,\"kind\":\"mt\",\"threads\":%u,\"round\":%d,"
                   "\"ef\":%u,\"k\":%zu,\"queries\":%zu,\"passes\":%ld,"
                   "\"seconds\":%.6f,\"cpu_s\":%.3f,\"qps\":%.2f,"
                   "\"recall\":%.5f,\"recall_strict\":%.5f,\"load\":%.2f}\n",
                   tag, threads, r, efs[fi], k, nq, passes, secs, cpu,
                   (double)nq * (double)passes / secs,
                   (double)ties / (double)(nq * k),
                   (double)strict / (double)(nq * k), load);
            fflush(stdout);
        }
    }
    free(ids);
}

/* After the open: answer queries one per call, note the times of the 1st,
** 10th, 100th and 1,000th results, and of the last (the mean ms per query
** after the 100th is (end_ms - q100_ms) / (queries - 100)); with an engine
** that fetches, its counters at the open, the 1st, 10th and 100th result and
** the end. Prints one JSON line. */
static inline void
bench_cold(const bench_engine *e, const char *tag, const char *index_path,
           int64_t t0, double main_ms, double ready_ms, double open_ms,
           const float *queries, size_t nq, uint32_t dim, unsigned ef,
           size_t k, const bench_cold_opts *lim)
{
    static const size_t marks[] = {1, 10, 100, 1000};
    double at[4] = {-1, -1, -1, -1};
    long long f[5][BENCH_FETCH_N]; /* open, 1st, 10th, 100th, end */
    memset(f, 0xff, sizeof f);     /* -1: not reached */
    int64_t *ids = (int64_t *)malloc(k * sizeof *ids);
    size_t want = lim && lim->max_q && lim->max_q < nq ? lim->max_q : nq;
    double max_ms = lim && lim->max_s > 0 ? lim->max_s * 1e3 : 0;
    e->set_ef(e->ctx, ef);
    if (e->fetched)
        e->fetched(e->ctx, f[0]);
    size_t m = 0, done = 0;
    double end_ms = bench_ms_since(t0);
    int capped = 0;
    for (size_t i = 0; i < want; i++) {
        if (max_ms && bench_ms_since(t0) > max_ms) {
            capped = 1;
            break;
        }
        e->search(e->ctx, queries + i * dim, k, ids);
        done = i + 1;
        end_ms = bench_ms_since(t0);
        if (m < 4 && done == marks[m]) {
            at[m] = end_ms;
            if (m < 3 && e->fetched)
                e->fetched(e->ctx, f[m + 1]);
            m++;
        }
    }
    if (e->fetched)
        e->fetched(e->ctx, f[4]);
    long long res, total;
    bench_resident(index_path, &res, &total);
    printf("{%s,\"ef\":%u,\"main_ms\":%.3f,\"ready_ms\":%.3f,"
           "\"open_ms\":%.3f,\"q1_ms\":%.3f,\"q10_ms\":%.3f,"
           "\"q100_ms\":%.3f,\"q1000_ms\":%.3f,\"queries\":%zu,"
           "\"capped\":%d,\"end_ms\":%.3f,\"after100_ms_per_q\":%.4f,"
           "\"resident_pages\":%lld,"
           "\"file_pages\":%lld,\"rss_kb\":%ld,\"load\":%.2f",
           tag, ef, main_ms, ready_ms, open_ms, at[0], at[1], at[2], at[3],
           done, capped, end_ms,
           done > 100 && at[2] >= 0 ? (end_ms - at[2]) / (double)(done - 100)
                                    : -1.0,
           res, total, bench_status_kb("VmRSS:"), bench_loadavg());
    if (e->fetched)
        for (int c = 0; c < BENCH_FETCH_N; c++)
            printf(",\"%s_at\":[%lld,%lld,%lld,%lld,%lld]",
                   bench_fetch_names[c], f[0][c], f[1][c], f[2][c], f[3][c],
                   f[4][c]);
    if (e->more)
        fputs(e->more(e->ctx), stdout);
    printf("}\n");
    fflush(stdout);
    free(ids);
}

#endif /* KEEL_BENCH_COMMON_H */
