/* fuzz_vecfile.c -- fuzz target: the CLI's readers of vector, ground-truth
** and id files (cli/vecfile.c and cli/npy.c, included here whole).
**
** Hunts out-of-bounds reads, overflows in size arithmetic, leaks and
** undefined behaviour in the .fvecs, .bvecs, .npy, .ivecs and id-list
** parsers, and checks their promises on every input:
**   - a success describes exactly the bytes given: row counts times row
**     sizes equal the length, and every value is the one in the file;
**   - a failure writes a message with a help line and leaves every output
**     parameter as it was;
**   - reading the bytes from a file (vecfile_load, which converts .fvecs and
**     float32 .npy in place in its read buffer) gives the same result as
**     parsing them from memory.
*/
#include "fuzz.h"

#include "../../cli/vecfile.c"
#include "../../cli/npy.c"

#define ERRLEN 1024

static void
need_help(int rc, const char *err, const char *what)
{
    if (rc == VECFILE_OK)
        return;
    if (rc != VECFILE_EFORMAT && rc != VECFILE_ENOMEM && rc != VECFILE_EIO)
        fuzz_fail("%s returned unknown code %d", what, rc);
    if (!strstr(err, "\nhelp: "))
        fuzz_fail("%s failed (%d) with a message without a help line: '%s'",
                  what, rc, err);
}

/* An .fvecs or .bvecs success must be the file's rows, value for value. */
static void
check_xvecs(const uint8_t *d, size_t size, const vecfile *v, size_t esize,
            const char *what)
{
    if (v->n == 0 || v->dim < 1 || v->dim > VECFILE_MAX_DIM || !v->data)
        fuzz_fail("%s: success with n %zu, dim %u", what, v->n, v->dim);
    size_t stride = 4 + esize * v->dim;
    if (v->n * stride != size)
        fuzz_fail("%s: %zu rows of %u take %zu bytes, not %zu", what, v->n,
                  v->dim, v->n * stride, size);
    for (size_t i = 0; i < v->n; i++) {
        const uint8_t *row = d + i * stride;
        if (rd_u32(row) != v->dim)
            fuzz_fail("%s: row %zu says dim %u, result %u", what, i,
                      rd_u32(row), v->dim);
        for (uint32_t j = 0; j < v->dim; j++) {
            float want;
            if (esize == 4) {
                uint32_t bits = rd_u32(row + 4 + 4 * j);
                memcpy(&want, &bits, 4);
            } else {
                want = (float)row[4 + j];
            }
            if (memcmp(&want, &v->data[i * v->dim + j], 4) != 0)
                fuzz_fail("%s: row %zu component %u differs", what, i, j);
        }
    }
}

static void
same_vecfile(const vecfile *a, const vecfile *b, const char *what)
{
    if (a->n != b->n || a->dim != b->dim ||
        (a->n && memcmp(a->data, b->data, a->n * a->dim * sizeof(float))))
        fuzz_fail("%s: vecfile_load and vecfile_parse disagree (n %zu/%zu, "
                  "dim %u/%u)", what, a->n, b->n, a->dim, b->dim);
}

/* The bytes through vecfile_load, from a file named for the format. */
static void
load_and_compare(const uint8_t *d, size_t size, enum vecfile_format fmt,
                 int parse_rc, const vecfile *parsed)
{
    static char path[600];
    const char *ext = fmt == VECFILE_NPY ? "npy" : "fvecs";
    snprintf(path, sizeof path, "%s.%s", fuzz_path("vecfile"), ext);
    fuzz_write_file(path, d, size);
    vecfile v;
    char err[ERRLEN] = "";
    int rc = vecfile_load(path, &v, err, sizeof err);
    need_help(rc, err, "vecfile_load");
    unlink(path);
    if ((rc == VECFILE_OK) != (parse_rc == VECFILE_OK))
        fuzz_fail("vecfile_load says %d, vecfile_parse %d, for the same "
                  "bytes (.%s): %s", rc, parse_rc, ext, err);
    if (rc == VECFILE_OK) {
        same_vecfile(&v, parsed, ext);
        vecfile_free(&v);
    }
}

static void
vectors(const uint8_t *d, size_t size, enum vecfile_format fmt)
{
    static const char *names[] = {"unknown", "fvecs", "bvecs", "npy"};
    vecfile v, sentinel;
    memset(&v, 0xA5, sizeof v);
    sentinel = v;
    char err[ERRLEN] = "";
    int rc = vecfile_parse(d, size, fmt, fmt == VECFILE_NPY ? NULL : "fuzz",
                           &v, err, sizeof err);
    need_help(rc, err, names[fmt]);
    if (rc != VECFILE_OK) {
        if (memcmp(&v, &sentinel, sizeof v) != 0)
            fuzz_fail("%s: failed, but wrote its output", names[fmt]);
    } else if (fmt == VECFILE_FVECS) {
        check_xvecs(d, size, &v, 4, names[fmt]);
    } else if (fmt == VECFILE_BVECS) {
        check_xvecs(d, size, &v, 1, names[fmt]);
    } else {
        if (v.dim < 1 || v.dim > VECFILE_MAX_DIM || (v.n == 0) != !v.data)
            fuzz_fail("npy: success with n %zu, dim %u, data %p", v.n, v.dim,
                      (void *)v.data);
        /* Every byte of the result is readable (ASan) and the arithmetic
         * agrees with the length: n * dim elements fit in the file. */
        volatile float sink = 0;
        for (size_t i = 0; i < v.n * v.dim; i++)
            sink += v.data[i];
        (void)sink;
        if (v.n * v.dim > size)
            fuzz_fail("npy: %zu x %u elements from %zu bytes", v.n, v.dim,
                      size);
    }
    if (fmt != VECFILE_BVECS)
        load_and_compare(d, size, fmt, rc, &v);
    if (rc == VECFILE_OK)
        vecfile_free(&v);
}

static void
ivecs(const uint8_t *d, size_t size)
{
    int32_t *rows = (int32_t *)(uintptr_t)0x1;
    size_t n = 7;
    uint32_t w = 9;
    char err[ERRLEN] = "";
    int rc = vecfile_parse_ivecs(d, size, "gt", &rows, &n, &w, err, sizeof err);
    need_help(rc, err, "ivecs");
    if (rc != VECFILE_OK) {
        if (rows != (int32_t *)(uintptr_t)0x1 || n != 7 || w != 9)
            fuzz_fail("ivecs: failed, but wrote its output");
        return;
    }
    if (n == 0 || w == 0 || n * (4 + 4 * (size_t)w) != size)
        fuzz_fail("ivecs: %zu rows of %u from %zu bytes", n, w, size);
    size_t row = 4 * (size_t)w;
    for (size_t i = 0; i < n; i++)
        if (memcmp(rows + i * w, d + i * (4 + row) + 4, row) != 0)
            fuzz_fail("ivecs: row %zu differs", i);
    free(rows);
}

static void
ids(const uint8_t *d, size_t size)
{
    uint64_t *out = (uint64_t *)(uintptr_t)0x1;
    size_t n = 7;
    char err[ERRLEN] = "";
    int rc = vecfile_parse_ids(d, size, NULL, &out, &n, err, sizeof err);
    need_help(rc, err, "ids");
    if (rc != VECFILE_OK) {
        if (out != (uint64_t *)(uintptr_t)0x1 || n != 7)
            fuzz_fail("ids: failed, but wrote its output");
        return;
    }
    if ((n == 0) != !out)
        fuzz_fail("ids: %zu ids at %p", n, (void *)out);
    for (size_t i = 0; i < n; i++)
        if (out[i] == UINT64_MAX)
            fuzz_fail("ids: id %zu is the reserved UINT64_MAX", i);
    if (size && d[0] != 0x93 && n > size / 2 + 1)
        fuzz_fail("ids: %zu ids from %zu bytes of text", n, size);
    free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vectors(data, size, VECFILE_FVECS);
    vectors(data, size, VECFILE_BVECS);
    vectors(data, size, VECFILE_NPY);
    ivecs(data, size);
    ids(data, size);
    /* The start of the input as a path, for the extension rules. */
    char path[33];
    size_t n = size < 32 ? size : 32;
    memcpy(path, data, n);
    path[n] = '\0';
    (void)vecfile_format_of(path);
    return 0;
}
