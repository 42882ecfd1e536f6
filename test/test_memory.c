/* test_memory.c -- indexes in memory (keel_open(":memory:")): every call
** works on one, nothing appears in any directory, readers are refused, and
** an index built in memory searches exactly like the same index built in
** a file. */
#include "test.h"
#include "lib/testdata.h"

#include <dirent.h>

/* Entries in dir other than . and .. */
static int
dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Whether /tmp holds a name with "memory:" in it (what a path taken for a
** file name would leave). */
static int
tmp_has_memory_names(void)
{
    DIR *d = opendir("/tmp");
    if (!d)
        return 0;
    int found = 0;
    for (struct dirent *e; (e = readdir(d));)
        found |= strstr(e->d_name, "memory:") != NULL;
    closedir(d);
    return found;
}

/* Open descriptors of this process. */
static int
open_fds(void)
{
    return dir_entries("/proc/self/fd");
}

static int
count_progress(void *arg)
{
    (void)arg;
    return 0;
}

TEST(every_call_leaves_no_file)
{
    char cwd[600], work[600], tmp[600];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(work, sizeof work, "%s/cwd", test_dir());
    snprintf(tmp, sizeof tmp, "%s/tmp", test_dir());
    CHECK_EQ(mkdir(work, 0700), 0);
    CHECK_EQ(mkdir(tmp, 0700), 0);
    CHECK_EQ(chdir(work), 0);
    char *old_tmp = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
    setenv("TMPDIR", tmp, 1);
    int fds = open_fds();

    const uint32_t dim = 16;
    keel_index *idx;
    keel_options o = {.threads = 2};
    CHECK_OK(keel_open(KEEL_MEMORY, dim, &o, &idx));
    CHECK_EQ(keel_dim(idx), dim);
    float *v = td_random(300, dim, 7);
    uint64_t id, ids_out[200];
    CHECK_OK(keel_add(idx, v, &id));
    CHECK_U64(id, 0);
    CHECK_OK(keel_add_with_id(idx, 1000, v + dim));
    CHECK_OK(keel_add_batch(idx, v + 2 * dim, 200, NULL, ids_out));
    CHECK_U64(ids_out[0], 1001);
    uint64_t adds, dels;
    CHECK_OK(keel_pending(idx, &adds, &dels));
    CHECK_U64(adds, 202);
    CHECK_OK(keel_flush(idx)); /* succeeds; nothing is durable */
    CHECK_OK(keel_pending(idx, &adds, &dels));
    CHECK_U64(adds, 0);
    CHECK_OK(keel_delete(idx, 1000));
    CHECK_ERR(keel_delete(idx, 1000), KEEL_ENOTFOUND);
    CHECK_U64(keel_count(idx), 201);
    keel_result r[10];
    size_t n;
    CHECK_OK(keel_search(idx, v + 5 * dim, 10, NULL, r, &n));
    CHECK_U64(n, 10);
    CHECK_U64(r[0].id, 1004);
    keel_result rb[3 * 10];
    size_t nb[3];
    CHECK_OK(keel_search_batch(idx, v + 5 * dim, 3, 10, NULL, rb, nb));
    CHECK_U64(rb[0].id, 1004);
    float got[16];
    CHECK_OK(keel_get(idx, 1004, got));
    CHECK(memcmp(got, v + 5 * dim, sizeof got) == 0);
    CHECK_ERR(keel_get(idx, 1000, got), KEEL_ENOTFOUND);
    keel_stats s;
    CHECK_OK(keel_stat(idx, &s));
    CHECK_U64(s.count, 201);
    CHECK_U64(s.deleted, 1);
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_refresh(idx));
    CHECK_OK(keel_warm(idx));
    CHECK_OK(keel_set_cancel(idx, count_progress, NULL));
    CHECK_OK(keel_compact(idx)); /* into new memory */
    CHECK_OK(keel_set_cancel(idx, NULL, NULL));
    CHECK_OK(keel_stat(idx, &s));
    CHECK_U64(s.count, 201);
    CHECK_U64(s.deleted, 0);
    CHECK_OK(keel_check(idx));
    CHECK_OK(keel_search(idx, v + 5 * dim, 10, NULL, r, &n));
    CHECK_U64(r[0].id, 1004);
    CHECK_OK(keel_add_batch(idx, v + 202 * dim, 98, NULL, NULL));
    CHECK_U64(keel_count(idx), 299);
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_check(idx));

    /* A second :memory: is another index: no lock, no sharing. */
    keel_index *other;
    CHECK_OK(keel_open(KEEL_MEMORY, 4, NULL, &other));
    CHECK_U64(keel_count(other), 0);
    CHECK_OK(keel_close(other));

    CHECK_EQ(dir_entries(work), 0);
    CHECK_EQ(dir_entries(tmp), 0);
    CHECK(!tmp_has_memory_names());
    CHECK_OK(keel_close(idx));
    CHECK_EQ(open_fds(), fds); /* the memory went with the handle */
    CHECK_EQ(dir_entries(work), 0);
    CHECK_EQ(dir_entries(tmp), 0);
    free(v);
    if (old_tmp) {
        setenv("TMPDIR", old_tmp, 1);
        free(old_tmp);
    } else {
        unsetenv("TMPDIR");
    }
    CHECK_EQ(chdir(cwd), 0);
}

TEST(refusals)
{
    keel_index *idx = (keel_index *)1;
    CHECK_ERR(keel_open_reader(KEEL_MEMORY, NULL, &idx), KEEL_EINVAL);
    CHECK(idx == NULL);
    CHECK_MSG_HAS("has no readers");
    CHECK_MSG_HAS("help: ");
    CHECK_ERR(keel_open(KEEL_MEMORY, 0, NULL, &idx), KEEL_EINVAL);
    CHECK_MSG_HAS("dimensions is 0");
    CHECK_MSG_HAS("help: ");
}

/* "./:memory:" is a file of that name, as in SQLite. */
TEST(a_file_named_memory)
{
    char cwd[600], work[600];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(work, sizeof work, "%s/named", test_dir());
    CHECK_EQ(mkdir(work, 0700), 0);
    CHECK_EQ(chdir(work), 0);
    keel_index *idx, *rd;
    float v[4] = {1, 2, 3, 4};
    CHECK_OK(keel_open("./:memory:", 4, NULL, &idx));
    CHECK_OK(keel_add(idx, v, NULL));
    CHECK_OK(keel_flush(idx));
    CHECK_OK(keel_open_reader("./:memory:", NULL, &rd));
    CHECK_U64(keel_count(rd), 1);
    CHECK_OK(keel_close(rd));
    CHECK_OK(keel_close(idx));
    CHECK_EQ(dir_entries(work), 1);
    CHECK_EQ(chdir(cwd), 0);
}

/* Built the same way (one linking thread), the memory index and the file
** index are the same graph: every query returns the same results. */
TEST(recall_equals_a_file_index)
{
    test_vecs base = td_load_fvecs("glove-100-10k.base.fvecs");
    test_vecs q = td_load_fvecs("glove-100-10k.query.fvecs");
    test_truth gt = td_load_ivecs("glove-100-10k.gt.l2.ivecs");
    keel_options o = {.threads = 1};
    keel_index *mem, *file;
    CHECK_OK(keel_open(KEEL_MEMORY, base.dim, &o, &mem));
    CHECK_OK(keel_open(test_path("same.keel"), base.dim, &o, &file));
    CHECK_OK(keel_add_batch(mem, base.v, base.n, NULL, NULL));
    CHECK_OK(keel_add_batch(file, base.v, base.n, NULL, NULL));
    CHECK_OK(keel_flush(mem));
    CHECK_OK(keel_flush(file));
    size_t k = 10;
    keel_result *rm = malloc(q.n * k * sizeof *rm);
    keel_result *rf = malloc(q.n * k * sizeof *rf);
    size_t *nm = malloc(q.n * sizeof *nm), *nf = malloc(q.n * sizeof *nf);
    CHECK_OK(keel_search_batch(mem, q.v, q.n, k, NULL, rm, nm));
    CHECK_OK(keel_search_batch(file, q.v, q.n, k, NULL, rf, nf));
    CHECK(memcmp(nm, nf, q.n * sizeof *nm) == 0);
    for (size_t i = 0; i < q.n * k; i++)
        if (rm[i].id != rf[i].id || rm[i].distance != rf[i].distance) {
            TEST_FAIL_AT("result %zu differs", i);
            return;
        }
    double a = td_recall(rm, nm, q.n, k, &gt, NULL);
    double b = td_recall(rf, nf, q.n, k, &gt, NULL);
    printf("    recall@10: memory %.4f, file %.4f\n", a, b);
    CHECK(a == b);
    CHECK(a >= 0.95);
    free(rm);
    free(rf);
    free(nm);
    free(nf);
    CHECK_OK(keel_close(mem));
    CHECK_OK(keel_close(file));
    td_free_vecs(&base);
    td_free_vecs(&q);
    td_free_truth(&gt);
}

TEST_MAIN()
