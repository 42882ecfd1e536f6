/* testdata.h -- test helpers: the GloVe slice in test/data, recall, and
** small index fixtures. Linked into every test binary.
*/
#ifndef KEEL_TESTDATA_H
#define KEEL_TESTDATA_H

#include <stddef.h>
#include <stdint.h>

#include "keel.h"

typedef struct test_vecs {
    float *v;       /* n * dim */
    size_t n;
    uint32_t dim;
} test_vecs;

typedef struct test_truth {
    int32_t *ids;   /* n * width */
    size_t n;
    uint32_t width;
} test_truth;

/* The directory of the test data (KEEL_TEST_DATA, else test/data). */
const char *td_dir(void);
/* Loads test/data/<name>; aborts the process with a message on failure. */
test_vecs td_load_fvecs(const char *name);
test_truth td_load_ivecs(const char *name);
/* The GloVe-100 10k slice: its base vectors, queries, and exact top-100 by
** L2 and by cosine, each into its argument unless that is NULL or already
** loaded (so a test may call it before every use). */
void td_glove_slice(test_vecs *base, test_vecs *queries, test_truth *gt_l2,
                    test_truth *gt_cos);
void td_free_vecs(test_vecs *v);
void td_free_truth(test_truth *t);

/* recall@k of results (nq rows of k, n_found per row) against truth, where
** truth ids map to index ids through id_of (NULL = identity). */
double td_recall(const keel_result *res, const size_t *n_found, size_t nq,
                 size_t k, const test_truth *t, const uint64_t *id_of);

/* Searches every query (k results, ef) and returns recall@k. */
double td_search_recall(keel_index *idx, const test_vecs *q, size_t k,
                        uint32_t ef, const test_truth *t, const uint64_t *id_of);

/* Random unit-free vectors in [-1, 1), deterministic by seed. */
float *td_random(size_t n, uint32_t dim, uint64_t seed);

/* Whole file contents (for byte-identical checks); *len gets the size. */
unsigned char *td_read_file(const char *path, size_t *len);
int td_write_file(const char *path, const void *data, size_t len);

/* 1 when a and b answer the nq queries at q (dim floats each) alike: the
** same number of results (at least one), the same ids and the same
** distance bits, with params p (may be NULL) and at most 64 results each.
** Says on stderr where they first differ. Searches with a cold walk's
** beam of 1 (batch_reads.h keel__br_beam), the walk that answers bit for
** bit as a file in memory does. */
int td_same_answers(keel_index *a, keel_index *b, const float *q, size_t nq,
                    uint32_t dim, size_t k, const keel_search_params *p);

/* The vector a test gives id `id`: a fixed function of the id, so any
** process can check a result's distance without sharing data. */
void td_vec_of(uint64_t id, uint32_t dim, float *out);
/* Like td_vec_of, but with the structure of real embeddings: a point of 8
** random coordinates carried into dim dimensions by a fixed linear map, plus
** a little noise. High-dimensional random vectors have "anti-hubs" no graph
** links to; data of low intrinsic dimension, like real embeddings, has
** none, so tests can demand that every vector finds itself. */
void td_vec_embed(uint64_t id, uint32_t dim, float *out);
/* Squared Euclidean distance, in double. */
double td_l2sq(const float *a, const float *b, uint32_t dim);
/* The k rows of base (n rows of dim floats) nearest q by td_l2sq, as row
** numbers, nearest first, among the rows allow(row, arg) says yes to (allow
** NULL: every row); UINT64_MAX past the rows there are. k <= 64. */
void td_exact_knn(const float *base, size_t n, uint32_t dim, const float *q,
                  size_t k, int (*allow)(uint64_t, void *), void *arg,
                  uint64_t *out);
#endif /* KEEL_TESTDATA_H */
