/* testdata.c -- test helpers: loading the GloVe slice, recall, fixtures. */
#include "testdata.h"
#include "io/batch_reads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *
td_dir(void)
{
    const char *d = getenv("KEEL_TEST_DATA");
    return d ? d : "test/data";
}

static unsigned char *
load_or_die(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", td_dir(), name);
    unsigned char *b = td_read_file(path, len);
    if (!b) {
        fprintf(stderr, "cannot read test data %s (set KEEL_TEST_DATA)\n", path);
        exit(2);
    }
    return b;
}

/* .fvecs and .ivecs share their layout: per row an int32 count, then the
** row's 4-byte values. */
static void *
load_rows(const char *name, size_t *n, uint32_t *width)
{
    size_t len;
    unsigned char *b = load_or_die(name, &len);
    int32_t w;
    if (len < 4 || (memcpy(&w, b, 4), w <= 0) || len % (4 + 4 * (size_t)w)) {
        fprintf(stderr, "%s is not a vector file\n", name);
        exit(2);
    }
    size_t rows = len / (4 + 4 * (size_t)w);
    unsigned char *out = malloc(rows * (size_t)w * 4);
    for (size_t r = 0; r < rows; r++)
        memcpy(out + r * (size_t)w * 4, b + r * (4 + 4 * (size_t)w) + 4,
               (size_t)w * 4);
    free(b);
    *n = rows;
    *width = (uint32_t)w;
    return out;
}

test_vecs
td_load_fvecs(const char *name)
{
    test_vecs v;
    v.v = load_rows(name, &v.n, &v.dim);
    return v;
}

test_truth
td_load_ivecs(const char *name)
{
    test_truth t;
    t.ids = load_rows(name, &t.n, &t.width);
    return t;
}

void
td_glove_slice(test_vecs *base, test_vecs *queries, test_truth *gt_l2,
               test_truth *gt_cos)
{
    if (base && !base->v)
        *base = td_load_fvecs("glove-100-10k.base.fvecs");
    if (queries && !queries->v)
        *queries = td_load_fvecs("glove-100-10k.query.fvecs");
    if (gt_l2 && !gt_l2->ids)
        *gt_l2 = td_load_ivecs("glove-100-10k.gt.l2.ivecs");
    if (gt_cos && !gt_cos->ids)
        *gt_cos = td_load_ivecs("glove-100-10k.gt.cos.ivecs");
}

void
td_free_vecs(test_vecs *v)
{
    free(v->v);
    v->v = NULL;
}

void
td_free_truth(test_truth *t)
{
    free(t->ids);
    t->ids = NULL;
}

double
td_recall(const keel_result *res, const size_t *n_found, size_t nq, size_t k,
          const test_truth *t, const uint64_t *id_of)
{
    size_t hit = 0;
    for (size_t q = 0; q < nq; q++)
        for (size_t i = 0; i < k && i < t->width; i++) {
            uint64_t want = id_of ? id_of[t->ids[q * t->width + i]]
                                  : (uint64_t)t->ids[q * t->width + i];
            for (size_t j = 0; j < n_found[q]; j++)
                if (res[q * k + j].id == want) {
                    hit++;
                    break;
                }
        }
    return (double)hit / (double)(nq * k);
}

double
td_search_recall(keel_index *idx, const test_vecs *q, size_t k, uint32_t ef,
                 const test_truth *t, const uint64_t *id_of)
{
    keel_result *res = calloc(q->n * k, sizeof *res);
    size_t *nf = calloc(q->n, sizeof *nf);
    keel_search_params p = {.ef = ef};
    double r = -1;
    if (keel_search_batch(idx, q->v, q->n, k, &p, res, nf) == KEEL_OK)
        r = td_recall(res, nf, q->n, k, t, id_of);
    free(res);
    free(nf);
    return r;
}

float *
td_random(size_t n, uint32_t dim, uint64_t seed)
{
    float *v = malloc(n * dim * sizeof *v);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n * dim; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        v[i] = (float)((double)(s >> 11) * 0x1.0p-52 - 1.0);
    }
    return v;
}

unsigned char *
td_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        free(b);
        return NULL;
    }
    *len = (size_t)n;
    return b;
}

int
td_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t put = fwrite(data, 1, len, f);
    return fclose(f) == 0 && put == len ? 0 : -1;
}

void
td_vec_of(uint64_t id, uint32_t dim, float *out)
{
    for (uint32_t c = 0; c < dim; c++) {
        uint64_t z = id * 0x9E3779B97F4A7C15ull + c * 0xBF58476D1CE4E5B9ull + 1;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        out[c] = (float)((double)(z >> 11) * 0x1.0p-52 - 1.0);
    }
}

double
td_l2sq(const float *a, const float *b, uint32_t dim)
{
    double s = 0;
    for (uint32_t c = 0; c < dim; c++)
        s += ((double)a[c] - b[c]) * ((double)a[c] - b[c]);
    return s;
}

void
td_exact_knn(const float *base, size_t n, uint32_t dim, const float *q,
             size_t k, int (*allow)(uint64_t, void *), void *arg,
             uint64_t *out)
{
    double best[64];
    for (size_t j = 0; j < k; j++)
        best[j] = INFINITY, out[j] = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        if (allow && !allow(i, arg))
            continue;
        double d = td_l2sq(base + i * dim, q, dim);
        for (size_t j = 0; j < k; j++)
            if (d < best[j]) {
                memmove(best + j + 1, best + j, (k - j - 1) * sizeof *best);
                memmove(out + j + 1, out + j, (k - j - 1) * sizeof *out);
                best[j] = d;
                out[j] = i;
                break;
            }
    }
}

static double
unit_hash(uint64_t a, uint64_t b)
{
    uint64_t z = a * 0x9E3779B97F4A7C15ull + b * 0xD1B54A32D192ED03ull + 7;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-52 - 1.0;
}

void
td_vec_embed(uint64_t id, uint32_t dim, float *out)
{
    double z[8];
    for (int j = 0; j < 8; j++)
        z[j] = unit_hash(id, (uint64_t)j);
    for (uint32_t c = 0; c < dim; c++) {
        double x = 0.01 * unit_hash(id, 1000 + (uint64_t)c);
        for (int j = 0; j < 8; j++)
            x += unit_hash(0xABCDEF + c, (uint64_t)j) * z[j];
        out[c] = (float)x;
    }
}

int
td_same_answers(keel_index *a, keel_index *b, const float *q, size_t nq,
                uint32_t dim, size_t k, const keel_search_params *p)
{
    if (k > 64)
        return 0;
    /* Bit for bit holds for walks of one expansion at a time: a cold
     * walk's beam (batch_reads.h keel__br_beam) may answer otherwise, with
     * recall not lower (test_batch_reads, test_remote check it). */
    uint32_t beam = keel__br_beam();
    keel__br_set_beam(1);
    int same = 1;
    for (size_t i = 0; i < nq && same; i++) {
        keel_result ra[64], rb[64];
        size_t na = 0, nb = 0;
        int x = keel_search(a, q + i * dim, k, p, ra, &na);
        char msg[512];
        snprintf(msg, sizeof msg, "%s", x ? keel_errmsg() : "");
        int y = keel_search(b, q + i * dim, k, p, rb, &nb);
        if (x || y || na != nb || na == 0) {
            fprintf(stderr, "  query %zu: rc %d/%d, n %zu/%zu: %s%s\n", i, x,
                    y, na, nb, msg, y ? keel_errmsg() : "");
            same = 0;
            break;
        }
        for (size_t j = 0; j < na; j++)
            if (ra[j].id != rb[j].id ||
                memcmp(&ra[j].distance, &rb[j].distance, 4) != 0) {
                fprintf(stderr, "  query %zu, result %zu: id %llu/%llu, "
                        "distance %.9g/%.9g\n", i, j,
                        (unsigned long long)ra[j].id,
                        (unsigned long long)rb[j].id, ra[j].distance,
                        rb[j].distance);
                same = 0;
                break;
            }
    }
    keel__br_set_beam(beam);
    return same;
}
