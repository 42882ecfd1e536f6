/* cmd_search.c -- keel search: run a file of queries, report throughput,
** latency and recall.
**
** Each query is one keel_search call timed on its own, so the latencies are
** what an application calling keel once per request would see. With
** --threads N the queries are handed out one at a time from a shared
** counter, which keeps threads busy however uneven the queries are.
**
** The queries run twice. The first pass is a freshly opened process: every
** page of the index it touches is read or mapped for the first time, so it
** measures the start, not the search (up to 3x slower on GloVe-100). The
** second pass is the steady state of a running application; QPS, the
** latencies and the results come from it, and the summary says so. With
** --once (for --out, when only the answers matter) they run once, and that
** pass is reported.
*/
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "h5file.h"
#include "vecfile.h"

/* Positions in cmd_search's option table. */
enum {
    O_K,
    O_EF,
    O_READER,
    O_WARM,
    O_HUGE,
    O_THREADS,
    O_ALLOWED,
    O_TRUTH,
    O_OUT,
    O_JSON,
    O_RADIUS,
    O_MAX,
    O_ONCE,
    O_ID,
    O_VECTOR,
    O_COUNT
};

#define MAX_K 1000000u
#define MAX_EF 100000u /* the library's cap (keel.h) */
#define MAX_THREADS 4096u /* as many as the library runs for a build */

/* What the search threads share. */
struct job {
    keel_index *idx;
    const float *queries;
    uint32_t dim;
    size_t nq, k;
    const keel_search_params *params;
    int radius_search;    /* --radius: k is --max */
    float radius;
    keel_result *results; /* nq * k */
    size_t *found;        /* nq */
    double *latency_ms;   /* nq */
    atomic_size_t next;
    atomic_int failed;
    int rc;         /* the first failure, written by the thread that won */
    size_t failed_at; /* its query's row */
    char msg[1024]; /* its keel_errmsg(), which is thread-local */
};

static void *
run_queries(void *arg)
{
    struct job *job = arg;

    while (!atomic_load_explicit(&job->failed, memory_order_relaxed)) {
        size_t i = atomic_fetch_add(&job->next, 1);
        if (i >= job->nq)
            break;
        double t0 = cli_now();
        const float *q = job->queries + i * job->dim;
        int rc = job->radius_search
            ? keel_search_radius(job->idx, q, job->radius, job->k,
                                 job->params, job->results + i * job->k,
                                 &job->found[i])
            : keel_search(job->idx, q, job->k, job->params,
                          job->results + i * job->k, &job->found[i]);
        double t1 = cli_now();
        if (rc != KEEL_OK) {
            if (atomic_exchange(&job->failed, 1) == 0) {
                job->rc = rc;
                job->failed_at = i;
                snprintf(job->msg, sizeof job->msg, "%s", keel_errmsg());
            }
            break;
        }
        job->latency_ms[i] = (t1 - t0) * 1e3;
    }
    return NULL;
}

/* Prints a failed query's message with its row of qpath: the library
** speaks of "the query", which is one of many here. */
static int
query_failed(const struct job *job, const char *qpath)
{
    static const char lead[] = "the query ";
    char msg[1200], spoken[2048];
    const char *m = job->msg;
    const char *shown = strcmp(qpath, "-") == 0 ? "standard input" : qpath;

    if (strncmp(m, lead, sizeof lead - 1) == 0)
        snprintf(msg, sizeof msg, "query %zu of %s %s", job->failed_at,
                 shown, m + sizeof lead - 1);
    else
        snprintf(msg, sizeof msg, "query %zu of %s: %s", job->failed_at,
                 shown, m);
    return cli_fail_msg(cli_speak(msg, spoken, sizeof spoken));
}

/* Runs every query on nthreads threads (the caller's thread among them).
** Returns CLI_OK or prints the failure. */
static int
run_all(struct job *job, unsigned nthreads, const char *qpath)
{
    pthread_t *tids = NULL;
    unsigned started = 0;
    int rc = CLI_OK;

    if (nthreads > 1) {
        tids = calloc(nthreads - 1, sizeof *tids);
        if (tids == NULL)
            return cli_fail("search with fewer --threads",
                            "out of memory for %u threads", nthreads);
        for (; started < nthreads - 1; started++) {
            int e = pthread_create(&tids[started], NULL, run_queries, job);
            if (e != 0) {
                rc = cli_fail("search with fewer --threads",
                              "cannot start search thread %u of %u: %s",
                              started + 2, nthreads, strerror(e));
                atomic_store(&job->failed, 1);
                break;
            }
        }
    }
    if (rc == CLI_OK)
        run_queries(job);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    free(tids);
    if (rc == CLI_OK && job->rc != KEEL_OK)
        rc = job->msg[0] ? query_failed(job, qpath) : cli_keel_error(job->rc);
    return rc;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The nearest-rank percentile of sorted values. */
static double
percentile(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)(p * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

/* The fraction of truth row i's first k ids found among query i's results,
** over all queries. */
static double
recall(const struct job *job, const int32_t *truth, uint32_t width)
{
    uint64_t hits = 0;

    for (size_t i = 0; i < job->nq; i++) {
        const int32_t *row = truth + i * width;
        const keel_result *res = job->results + i * job->k;
        for (size_t r = 0; r < job->found[i]; r++)
            for (size_t t = 0; t < job->k; t++)
                if (row[t] >= 0 && (uint64_t)row[t] == res[r].id) {
                    hits++;
                    break;
                }
    }
    return job->nq ? (double)hits / ((double)job->nq * (double)job->k) : 0;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* --truth exact with --allowed: the exact filtered answer, by brute force
** over the stored vectors of the allowed ids (keel_get), and the fraction of
** it the search found. Each query's exact answer has min(K, live allowed
** ids) entries; ties go to the smaller id, as in keel's results. */
static int
exact_recall(const struct job *job, const uint64_t *allowed, size_t n_allowed,
             double *out)
{
    keel_stats st;
    uint64_t *ids = NULL, *best = NULL;
    double *bestd = NULL;
    size_t *nbest = NULL, k = job->k, nq = job->nq, dim = job->dim;
    float *vec = NULL;
    int rc = CLI_OK, krc;

    if ((krc = keel_stat(job->idx, &st)) != KEEL_OK)
        return cli_keel_error(krc);
    if (nq > SIZE_MAX / sizeof *best / k)
        return cli_fail("search fewer queries or a smaller -k",
                        "no memory for the exact answers of %zu queries", nq);
    ids = malloc((n_allowed + 1) * sizeof *ids);
    best = malloc(nq * k * sizeof *best + 1);
    bestd = malloc(nq * k * sizeof *bestd + 1);
    nbest = calloc(nq + 1, sizeof *nbest);
    vec = malloc(dim * sizeof *vec + 1);
    if (!ids || !best || !bestd || !nbest || !vec) {
        rc = cli_fail("search fewer queries or give a shorter --allowed",
                      "out of memory for the exact answers of %zu queries",
                      nq);
        goto out;
    }
    if (n_allowed > 0) { /* an empty --allowed has no array at all */
        memcpy(ids, allowed, n_allowed * sizeof *ids);
        qsort(ids, n_allowed, sizeof *ids, cmp_u64);
    }
    for (size_t a = 0; a < n_allowed; a++) {
        if (a > 0 && ids[a] == ids[a - 1])
            continue;
        krc = keel_get(job->idx, ids[a], vec);
        if (krc == KEEL_ENOTFOUND)
            continue; /* not in the index: the search ignores it too */
        if (krc != KEEL_OK) {
            rc = cli_keel_error(krc);
            goto out;
        }
        for (size_t i = 0; i < nq; i++) {
            const float *q = job->queries + i * dim;
            double d = 0;
            for (size_t c = 0; c < dim; c++)
                d += st.metric == KEEL_L2
                         ? ((double)q[c] - vec[c]) * ((double)q[c] - vec[c])
                         : -(double)q[c] * vec[c]; /* cosine: |q| is fixed */
            uint64_t *b = best + i * k;
            double *bd = bestd + i * k;
            size_t n = nbest[i];
            if (n == k && !(d < bd[k - 1]))
                continue;
            size_t at = n < k ? n : k - 1;
            while (at > 0 && d < bd[at - 1]) {
                bd[at] = bd[at - 1];
                b[at] = b[at - 1];
                at--;
            }
            bd[at] = d;
            b[at] = ids[a];
            if (n < k)
                nbest[i] = n + 1;
        }
    }
    uint64_t hits = 0, want = 0;
    for (size_t i = 0; i < nq; i++) {
        const keel_result *res = job->results + i * k;
        want += nbest[i];
        for (size_t r = 0; r < job->found[i]; r++)
            for (size_t t = 0; t < nbest[i]; t++)
                if (best[i * k + t] == res[r].id) {
                    hits++;
                    break;
                }
    }
    *out = want ? (double)hits / (double)want : 1.0;
out:
    free(ids);
    free(best);
    free(bestd);
    free(nbest);
    free(vec);
    return rc;
}

static int
write_tsv(FILE *f, const char *name, const struct job *job)
{
    for (size_t i = 0; i < job->nq; i++) {
        const keel_result *res = job->results + i * job->k;
        for (size_t r = 0; r < job->found[i]; r++)
            fprintf(f, "%zu\t%zu\t%llu\t%.9g\n", i, r,
                    (unsigned long long)res[r].id, (double)res[r].distance);
    }
    int bad = fflush(f) != 0 || ferror(f);
    int e = errno;
    if (f != stdout && fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad)
        return cli_fail("check free space and permissions where --out points",
                        "cannot write --out %s: %s", name, strerror(e));
    return CLI_OK;
}

struct summary {
    size_t queries, k;
    uint32_t ef;
    double first_ms;          /* the first query of the first pass */
    double first_qps, first_seconds; /* the first pass */
    double qps, mean, p50, p99, seconds; /* the second pass */
    double recall;
    int has_recall;
    int once;                 /* --once: one pass, no first-pass figures */
    uint64_t live;            /* the index's live vectors */
    int radius_search;        /* k is the cap */
    float radius;
    double mean_found;
    size_t capped;            /* queries that found k */
};

static void
print_summary(FILE *f, const struct summary *s, int json)
{
    if (json) {
        fprintf(f,
                "{\"queries\": %zu, \"k\": %zu, \"ef\": %u, "
                "\"first_query_ms\": %.3f, \"first_pass_qps\": %.1f, "
                "\"first_pass_seconds\": %.3f, \"qps\": %.1f, "
                "\"mean_ms\": %.3f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
                "\"live_vectors\": %llu, \"recall\": ",
                s->queries, s->k, s->ef, s->first_ms, s->first_qps,
                s->first_seconds, s->qps, s->mean, s->p50, s->p99,
                (unsigned long long)s->live);
        if (s->has_recall)
            fprintf(f, "%.4f", s->recall);
        else
            fputs("null", f);
        if (s->radius_search)
            fprintf(f, ", \"radius\": %.9g, \"max\": %zu, \"mean_found\": "
                    "%.2f, \"queries_at_max\": %zu", (double)s->radius, s->k,
                    s->mean_found, s->capped);
        fprintf(f, ", \"seconds\": %.3f}\n", s->seconds);
        return;
    }
    char q[32], label[32], n[32];
    snprintf(label, sizeof label, "recall@%zu:", s->k);
    fprintf(f, "%-12s %s\n", "queries:", cli_commas(s->queries, q, sizeof q));
    if (s->radius_search) {
        fprintf(f, "%-12s %.9g\n", "radius:", (double)s->radius);
        fprintf(f, "%-12s %s\n", "max:", cli_commas(s->k, n, sizeof n));
        fprintf(f, "%-12s %.2f per query\n", "found:", s->mean_found);
        fprintf(f, "%-12s %s queries%s\n", "at max:",
                cli_commas(s->capped, n, sizeof n),
                s->capped ? " (raise --max to see all within the radius)"
                          : "");
    } else {
        fprintf(f, "%-12s %s\n", "k:", cli_commas(s->k, n, sizeof n));
    }
    fprintf(f, "%-12s %s\n", "ef:", cli_commas(s->ef, n, sizeof n));
    if (s->live == 0)
        fprintf(f, "%-12s the index holds no live vectors: no query found "
                "anything\n", "empty:");
    if (s->once) {
        fprintf(f, "one pass (--once), the index's pages touched for the "
                "first time:\n");
    } else {
        fprintf(f, "first pass, the index's pages touched for the first "
                "time:\n");
        fprintf(f, "%-12s %.3f ms\n", "first query:", s->first_ms);
        fprintf(f, "%-12s %.1f (%.3f s)\n", "first QPS:", s->first_qps,
                s->first_seconds);
        fprintf(f, "second pass, the same queries, the steady state:\n");
    }
    fprintf(f, "%-12s %.1f\n", "QPS:", s->qps);
    fprintf(f, "%-12s %.3f ms\n", "mean:", s->mean);
    fprintf(f, "%-12s %.3f ms\n", "p50:", s->p50);
    fprintf(f, "%-12s %.3f ms\n", "p99:", s->p99);
    if (s->has_recall)
        fprintf(f, "%-12s %.4f\n", label, s->recall);
    fprintf(f, "%-12s %.3f\n", "seconds:", s->seconds);
}

/* --id or --vector with --json: the neighbours as one object. */
static void
print_one_json(const struct job *job)
{
    fputs("{\"results\": [", stdout);
    for (size_t r = 0; r < job->found[0]; r++)
        printf("%s{\"id\": %llu, \"distance\": %.9g}", r ? ", " : "",
               (unsigned long long)job->results[r].id,
               (double)job->results[r].distance);
    printf("], \"k\": %zu}\n", job->k);
}

/* Everything cmd_search allocates, freed in one place. */
struct inputs {
    vecfile queries;
    int32_t *truth;
    size_t n_truth;
    uint32_t truth_width;
    uint64_t *allowed;
    size_t n_allowed;
};

static void
free_inputs(struct inputs *in)
{
    vecfile_free(&in->queries);
    free(in->truth);
    free(in->allowed);
}

static int
load_inputs(const char *qpath, cli_opt *opts, size_t k, struct inputs *in)
{
    char err[1024];
    int vrc;

    if (qpath != NULL) { /* else one query from --id or --vector */
        vrc = h5file_is(qpath)
            ? h5file_load(qpath, "test", &in->queries, err, sizeof err)
            : vecfile_load(qpath, &in->queries, err, sizeof err);
        if (vrc != VECFILE_OK)
            return cli_fail_msg(err);
    }
    if (opts[O_ALLOWED].value != NULL &&
        vecfile_load_ids(opts[O_ALLOWED].value, &in->allowed, &in->n_allowed,
                         err, sizeof err) != VECFILE_OK)
        return cli_fail_msg(err);
    if (opts[O_TRUTH].value == NULL)
        return CLI_OK;
    const char *tpath = opts[O_TRUTH].value;
    int exact = strcmp(tpath, "exact") == 0;
    if (exact && opts[O_ALLOWED].value == NULL)
        return cli_usage("search",
                         "give --truth a ground-truth .ivecs file; 'exact' "
                         "is for searches with --allowed",
                         "--truth exact needs --allowed");
    if (!exact && opts[O_ALLOWED].value != NULL)
        return cli_usage("search",
                         "give --truth exact to measure recall against the "
                         "exact answer among the allowed ids, which keel "
                         "computes",
                         "--truth %s holds the unfiltered neighbours, which "
                         "say nothing of a search restricted by --allowed %s",
                         tpath, opts[O_ALLOWED].value);
    if (exact)
        return CLI_OK;
    vrc = h5file_is(tpath)
        ? h5file_load_truth(tpath, k > UINT32_MAX ? UINT32_MAX : (uint32_t)k,
                            &in->truth, &in->n_truth, &in->truth_width, err,
                            sizeof err)
        : vecfile_load_ivecs(tpath, &in->truth, &in->n_truth,
                             &in->truth_width, err, sizeof err);
    if (vrc != VECFILE_OK)
        return cli_fail_msg(err);
    if (in->n_truth != in->queries.n) {
        char a[32], b[32];
        return cli_usage("search",
                         "give --truth the ground truth of these queries, one "
                         "row per query",
                         "--truth %s has %s rows but %s holds %s queries",
                         tpath, cli_commas(in->n_truth, a, sizeof a), qpath,
                         cli_commas(in->queries.n, b, sizeof b));
    }
    if (in->truth_width < k)
        return cli_usage("search",
                         "give -k at most the truth's width, or a wider "
                         "truth file",
                         "--truth %s holds %u ids per query, fewer than "
                         "-k %zu",
                         tpath, in->truth_width, k);
    return CLI_OK;
}

static int
open_index(const char *path, cli_opt *opts, keel_index **idx)
{
    keel_options opt;
    int rc;

    memset(&opt, 0, sizeof opt);
    if (opts[O_WARM].value != NULL)
        opt.flags |= KEEL_WARM;
    if (opts[O_HUGE].value != NULL)
        opt.flags |= KEEL_HUGE_PAGES;
    /* A search never writes: a reader takes no lock, so it works while a
    ** writer is open elsewhere, and it honours --warm and --huge-pages as
    ** a writer does. --reader is accepted and changes nothing. */
    rc = cli_open_reader(path, &opt, idx);
    if (rc == CLI_OK && opts[O_WARM].value != NULL) {
        int krc = keel_warm(*idx);
        if (krc != KEEL_OK)
            rc = cli_keel_error(krc);
    }
    return rc;
}

/* --radius R and --max N (default 1000) into *radius and *cap; -k and
** --truth belong to nearest-neighbour searches. */
static int
parse_radius(cli_opt *opts, float *radius, uint64_t *cap)
{
    const char *r = opts[O_RADIUS].value;
    char *end;
    errno = 0;
    double v = strtod(r, &end);
    if (end == r || *end != '\0' || v != v)
        return cli_usage("search", "give --radius a finite distance, such as "
                         "0.5", "--radius %s is not a number", r);
    /* Underflow (1e-400) is a number that rounds to 0; overflow is not. */
    if ((errno == ERANGE && (v > 1.0 || v < -1.0)) || v > 3.4e38 ||
        v < -3.4e38)
        return cli_usage("search", "give --radius a finite distance, such as "
                         "0.5", "--radius %s is not a finite float (at most "
                         "3.4e38 in size)", r);
    if (opts[O_K].value != NULL)
        return cli_usage("search", "give --max N to cap a radius search, or "
                         "drop --radius for the K nearest",
                         "-k %s and --radius %s were both given",
                         opts[O_K].value, r);
    if (opts[O_TRUTH].value != NULL)
        return cli_usage("search", "drop --truth: it holds nearest "
                         "neighbours, which measure -k searches",
                         "--truth %s says nothing of a search within "
                         "--radius %s", opts[O_TRUTH].value, r);
    *radius = (float)v;
    *cap = 1000;
    if (opts[O_MAX].value != NULL)
        return cli_u64("search", "--max", opts[O_MAX].value, 1, MAX_K, cap);
    return CLI_OK;
}

/* The one query of --id N (the stored vector of id N) or --vector '[x, y,
** ...]' (numbers separated by commas or spaces, brackets optional), of the
** index's dimensions, into q. */
static int
one_query(keel_index *idx, cli_opt *opts, vecfile *q)
{
    uint32_t dim = keel_dim(idx);
    char a[32];

    q->dim = dim;
    q->n = 1;
    q->data = malloc((size_t)dim * sizeof(float) + 1);
    if (q->data == NULL)
        return cli_fail("free memory and retry", "out of memory for a query");
    if (opts[O_ID].value != NULL) {
        uint64_t id;
        int rc = cli_u64("search", "--id", opts[O_ID].value, 0,
                         UINT64_MAX - 1, &id);
        if (rc != CLI_OK)
            return rc;
        int krc = keel_get(idx, id, q->data);
        return krc == KEEL_OK ? CLI_OK : cli_keel_error(krc);
    }
    const char *p = opts[O_VECTOR].value;
    size_t n = 0;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '[' || *p == ']' ||
               *p == '\t' || *p == '\n')
            p++;
        if (*p == '\0')
            break;
        char *end;
        errno = 0;
        float v = strtof(p, &end);
        if (end == p)
            return cli_usage("search", "give --vector numbers separated by "
                             "commas or spaces, such as '[0.1, 0.2, ...]'",
                             "--vector has '%.20s', which is not a number",
                             p);
        /* Underflow (1e-50) is a number that rounds to 0 or near it, as
        ** for --radius; overflow is no float. */
        if (errno == ERANGE && (v > 1.0f || v < -1.0f))
            return cli_usage("search", "give --vector floats, at most 3.4e38 "
                             "in size",
                             "--vector has '%.*s', which is beyond a float's "
                             "range", (int)(end - p < 40 ? end - p : 40), p);
        if (n < dim)
            q->data[n] = v;
        n++;
        p = end;
    }
    if (n != dim)
        return cli_usage("search", "give as many numbers as the index's "
                         "dimensions ('keel info' shows them)",
                         "--vector has %s numbers but the index has %u "
                         "dimensions", cli_commas(n, a, sizeof a), dim);
    return CLI_OK;
}

int
cmd_search(int argc, char **argv)
{
    static const char *const names[] = {"INDEX", "QUERIES"};
    static const uint64_t nothing[1] = {0};
    cli_opt opts[O_COUNT] = {
        [O_K] = {"-k", 1, NULL},
        [O_EF] = {"--ef", 1, NULL},
        [O_READER] = {"--reader", 0, NULL},
        [O_WARM] = {"--warm", 0, NULL},
        [O_HUGE] = {"--huge-pages", 0, NULL},
        [O_THREADS] = {"--threads", 1, NULL},
        [O_ALLOWED] = {"--allowed", 1, NULL},
        [O_TRUTH] = {"--truth", 1, NULL},
        [O_OUT] = {"--out", 1, NULL},
        [O_JSON] = {"--json", 0, NULL},
        [O_RADIUS] = {"--radius", 1, NULL},
        [O_MAX] = {"--max", 1, NULL},
        [O_ONCE] = {"--once", 0, NULL},
        [O_ID] = {"--id", 1, NULL},
        [O_VECTOR] = {"--vector", 1, NULL},
    };
    float radius = 0;
    struct inputs in;
    struct job job;
    struct summary sum;
    keel_search_params params;
    keel_index *idx = NULL;
    FILE *out = NULL;
    uint64_t k = 0;
    uint32_t ef = 0, nthreads = 1;
    double start, seconds;
    int npos, rc;

    memset(&in, 0, sizeof in);
    memset(&job, 0, sizeof job);
    memset(&sum, 0, sizeof sum);
    memset(&params, 0, sizeof params);
    rc = cli_parse("search", argc, argv, opts, O_COUNT, &npos);
    /* --id or --vector is the query: then no QUERIES file. */
    int one = opts[O_ID].value != NULL || opts[O_VECTOR].value != NULL;
    if (rc == CLI_OK && opts[O_ID].value && opts[O_VECTOR].value)
        rc = cli_usage("search", "give one of them", "--id and --vector "
                       "both name the query");
    if (rc == CLI_OK && one && opts[O_TRUTH].value)
        rc = cli_usage("search", "give --truth with a file of queries",
                       "--truth measures a file of queries, not --%s",
                       opts[O_ID].value ? "id" : "vector");
    if (rc == CLI_OK)
        rc = cli_want("search", npos, argv, names, one ? 1 : 2, 0);
    int by_radius = opts[O_RADIUS].value != NULL;
    if (rc == CLI_OK && by_radius)
        rc = parse_radius(opts, &radius, &k);
    else if (rc == CLI_OK && opts[O_MAX].value != NULL)
        rc = cli_usage("search", "give --radius R with --max N, or -k K for "
                       "the K nearest", "--max %s caps a radius search, but "
                       "no --radius was given", opts[O_MAX].value);
    if (rc == CLI_OK && !by_radius && opts[O_K].value == NULL)
        rc = cli_usage("search", "give the number of neighbours, e.g. -k 10, "
                       "or --radius R for every vector within R",
                       "missing -k");
    if (rc == CLI_OK && !by_radius)
        rc = cli_u64("search", "-k", opts[O_K].value, 1, MAX_K, &k);
    if (rc == CLI_OK && opts[O_EF].value != NULL)
        rc = cli_u32("search", "--ef", opts[O_EF].value, 1, MAX_EF, &ef);
    if (rc == CLI_OK && opts[O_THREADS].value != NULL)
        rc = cli_u32("search", "--threads", opts[O_THREADS].value, 0,
                     MAX_THREADS, &nthreads);
    if (rc != CLI_OK)
        return rc;
    const char *path = argv[0], *qpath = one ? NULL : argv[1];
    const char *out_path = opts[O_OUT].value;
    int json = opts[O_JSON].value != NULL;
    const char *from[] = {"QUERIES", "--allowed", "--truth"};
    const char *given[] = {qpath, opts[O_ALLOWED].value, opts[O_TRUTH].value};
    rc = cli_one_stdin("search", from, given, 3);
    if (rc != CLI_OK)
        return rc;
    /* One query: its neighbours are the answer, printed as --out - would
    ** (or in the JSON summary), and one pass is enough. */
    if (one && out_path == NULL && !json)
        out_path = "-";

    rc = load_inputs(qpath, opts, (size_t)k, &in);
    if (rc != CLI_OK)
        goto done;

    /* Create --out before searching, so a bad path fails in a moment, not
    ** after the whole run. */
    if (out_path != NULL) {
        out = strcmp(out_path, "-") == 0 ? stdout : fopen(out_path, "w");
        if (out == NULL) {
            rc = cli_fail("give --out a path in a directory you can write",
                          "cannot create --out %s: %s", out_path,
                          strerror(errno));
            goto done;
        }
    }

    rc = open_index(path, opts, &idx);
    if (rc == CLI_OK && one)
        rc = one_query(idx, opts, &in.queries);
    if (rc != CLI_OK)
        goto done;
    if (one)
        qpath = opts[O_ID].value ? "--id" : "--vector";
    /* keel_search takes a bare pointer, so only we can catch queries of
    ** another length before keel reads past them. */
    if (in.queries.dim != keel_dim(idx)) { /* empty files included */
        rc = cli_fail("give queries of the index's dimensions ('keel info' "
                      "shows them)",
                      "%s has %u-dimensional queries but index %s has %u "
                      "dimensions",
                      qpath, in.queries.dim, path, keel_dim(idx));
        goto done;
    }

    params.ef = ef;
    if (opts[O_ALLOWED].value != NULL) {
        /* An empty allow-list must match nothing, and only a non-NULL
        ** pointer says so. */
        params.allowed = in.allowed ? in.allowed : nothing;
        params.n_allowed = in.n_allowed;
    }

    if (nthreads == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = cores > 0 ? (uint32_t)cores : 1;
    }
    if (nthreads > in.queries.n)
        nthreads = in.queries.n > 0 ? (uint32_t)in.queries.n : 1;

    job.idx = idx;
    job.queries = in.queries.data;
    job.dim = in.queries.dim;
    job.nq = in.queries.n;
    job.k = (size_t)k;
    job.params = &params;
    job.radius_search = by_radius;
    job.radius = radius;
    if (job.nq > SIZE_MAX / sizeof(keel_result) / job.k) {
        rc = cli_fail("search fewer queries or a smaller -k",
                      "%zu queries of -k %zu need more memory than exists",
                      job.nq, job.k);
        goto done;
    }
    job.results = malloc(job.nq * job.k * sizeof *job.results + 1);
    job.found = calloc(job.nq + 1, sizeof *job.found);
    job.latency_ms = calloc(job.nq + 1, sizeof *job.latency_ms);
    if (job.results == NULL || job.found == NULL || job.latency_ms == NULL) {
        rc = cli_fail("search fewer queries or a smaller -k",
                      "out of memory for the results of %zu queries, -k %zu",
                      job.nq, job.k);
        goto done;
    }

    /* The first pass: the start of a fresh process. */
    start = cli_now();
    rc = run_all(&job, nthreads, qpath);
    sum.first_seconds = cli_now() - start;
    if (rc != CLI_OK)
        goto done;
    sum.first_ms = job.nq > 0 ? job.latency_ms[0] : 0;
    sum.first_qps = sum.first_seconds > 0
        ? (double)job.nq / sum.first_seconds : 0;
    seconds = sum.first_seconds;
    sum.once = opts[O_ONCE].value != NULL || one;
    if (!sum.once) {
        /* The second pass: the steady state, which the rest reports. */
        atomic_store(&job.next, 0);
        start = cli_now();
        rc = run_all(&job, nthreads, qpath);
        seconds = cli_now() - start;
        if (rc != CLI_OK)
            goto done;
    }
    sum.live = keel_count(idx);

    if (out != NULL) {
        rc = write_tsv(out, out_path, &job);
        if (out != stdout)
            out = NULL; /* write_tsv closed it */
        if (rc != CLI_OK)
            goto done;
    }

    sum.queries = job.nq;
    sum.k = job.k;
    sum.radius_search = by_radius;
    sum.radius = radius;
    if (by_radius) {
        double total = 0;
        for (size_t i = 0; i < job.nq; i++) {
            total += (double)job.found[i];
            sum.capped += job.found[i] == job.k;
        }
        sum.mean_found = job.nq ? total / (double)job.nq : 0;
    }
    sum.ef = ef ? ef : 64; /* keel.h: ef_search 0 = 64 */
    sum.seconds = seconds;
    sum.qps = seconds > 0 ? (double)job.nq / seconds : 0;
    double total_ms = 0;
    for (size_t i = 0; i < job.nq; i++)
        total_ms += job.latency_ms[i];
    sum.mean = job.nq > 0 ? total_ms / (double)job.nq : 0;
    qsort(job.latency_ms, job.nq, sizeof *job.latency_ms, cmp_double);
    sum.p50 = percentile(job.latency_ms, job.nq, 0.50);
    sum.p99 = percentile(job.latency_ms, job.nq, 0.99);
    if (opts[O_TRUTH].value != NULL && opts[O_ALLOWED].value != NULL) {
        sum.has_recall = 1;
        rc = exact_recall(&job, in.allowed, in.n_allowed, &sum.recall);
        if (rc != CLI_OK)
            goto done;
    } else if (in.truth != NULL || opts[O_TRUTH].value != NULL) {
        sum.has_recall = 1;
        sum.recall = recall(&job, in.truth, in.truth_width);
    }
    /* With --out - the results own stdout; the summary moves aside. One
    ** query's answer is its results: its summary only with --json. */
    if (one && json)
        print_one_json(&job);
    else if (!one)
        print_summary(out == stdout ? stderr : stdout, &sum, json);

done:
    if (out != NULL && out != stdout)
        fclose(out);
    if (idx != NULL) {
        int crc = keel_close(idx);
        if (crc != KEEL_OK && rc == CLI_OK)
            rc = cli_keel_error(crc);
    }
    free(job.results);
    free(job.found);
    free(job.latency_ms);
    free_inputs(&in);
    return rc;
}
