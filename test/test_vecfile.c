/* test_vecfile.c -- tests of the CLI's vector, ground-truth and id readers.
**
** Owns the checks of cli/vecfile.c: each format read back from files the
** test writes, every malformed input the brief lists (and a few more)
** refused with a message that has a help line, exhaustive float16
** conversion, and a cheap mutation pass (every truncation, random byte
** flips) that must never crash or over-read; run it under ASan to see the
** latter. vecfile.c and npy.c live in cli/ and are not in libkeel.a, so
** they are included here whole.
*/
#include "test.h"

#include "../cli/vecfile.c"
#include "../cli/npy.c"

static char err[1024];

/* The call must fail with code rc, a help line, and needle in the message. */
#define CHECK_VF_ERR(expr, rc, needle)                                      \
    do {                                                                    \
        int vf_rc_;                                                         \
        err[0] = '\0';                                                      \
        vf_rc_ = (expr);                                                    \
        if (vf_rc_ != (rc)) {                                               \
            TEST_FAIL_AT("%s returned %d, expected %d; err '%s'", #expr,    \
                         vf_rc_, (int)(rc), err);                           \
            return;                                                         \
        }                                                                   \
        if (!strstr(err, "\nhelp: ")) {                                     \
            TEST_FAIL_AT("%s: message has no help line: '%s'", #expr, err); \
            return;                                                         \
        }                                                                   \
        if (!strstr(err, (needle))) {                                       \
            TEST_FAIL_AT("%s: message '%s' lacks '%s'", #expr, err,         \
                         (needle));                                         \
            return;                                                         \
        }                                                                   \
    } while (0)

#define CHECK_VF_OK(expr)                                                   \
    do {                                                                    \
        int vf_rc_;                                                         \
        err[0] = '\0';                                                      \
        vf_rc_ = (expr);                                                    \
        if (vf_rc_ != VECFILE_OK) {                                         \
            TEST_FAIL_AT("%s returned %d: '%s'", #expr, vf_rc_, err);       \
            return;                                                         \
        }                                                                   \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Writers for test inputs */

struct buf {
    unsigned char *p;
    size_t len, cap;
};

static void
buf_put(struct buf *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void
buf_i32(struct buf *b, int32_t v)
{
    buf_put(b, &v, 4);
}

static void
buf_free(struct buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int
write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    if (n && fwrite(p, 1, n, f) != n) {
        fclose(f);
        return -1;
    }
    return fclose(f) ? -1 : 0;
}

/* The header dictionary numpy writes. */
#define NPY_DICT(descr, fortran, shape)                                     \
    "{'descr': '" descr "', 'fortran_order': " fortran ", 'shape': " shape \
    ", }"

/* An .npy file with the given header dictionary text, padded as numpy pads
** it (data at a multiple of 64), then data. */
static void
npy_build(struct buf *b, int major, const char *dict, const void *data,
          size_t n)
{
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 0, 0};
    size_t pl = major == 1 ? 10 : 12, dl = strlen(dict), total, hl;
    char pad[128];

    pre[6] = (unsigned char)major;
    total = (pl + dl + 1 + 63) / 64 * 64;
    hl = total - pl;
    if (major == 1) {
        pre[8] = (unsigned char)(hl & 0xff);
        pre[9] = (unsigned char)(hl >> 8);
    } else {
        uint32_t h32 = (uint32_t)hl;
        memcpy(pre + 8, &h32, 4);
    }
    buf_put(b, pre, pl);
    buf_put(b, dict, dl);
    memset(pad, ' ', sizeof pad);
    buf_put(b, pad, hl - dl - 1);
    buf_put(b, "\n", 1);
    if (n)
        buf_put(b, data, n);
}

static void
fvecs_build(struct buf *b, const float *v, size_t n, uint32_t dim)
{
    for (size_t i = 0; i < n; i++) {
        buf_i32(b, (int32_t)dim);
        buf_put(b, v + i * dim, dim * sizeof(float));
    }
}

static void
fill_random(float *v, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = test_randf(&seed) * 10.0f;
}

/* ------------------------------------------------------------------------ */
/* Reading each format */

TEST(fvecs_roundtrip)
{
    float v[7 * 5];
    struct buf b = {0};
    vecfile vf;

    fill_random(v, 35, 1);
    v[3] = NAN; /* non-finite values pass through; the library refuses them */
    v[9] = INFINITY;
    fvecs_build(&b, v, 7, 5);
    CHECK(write_file(test_path("a.fvecs"), b.p, b.len) == 0);
    CHECK_VF_OK(vecfile_load(test_path("a.fvecs"), &vf, err, sizeof err));
    CHECK_EQ(vf.n, 7);
    CHECK_EQ(vf.dim, 5);
    CHECK(memcmp(vf.data, v, sizeof v) == 0);
    vecfile_free(&vf);
    CHECK(vf.data == NULL && vf.n == 0);

    /* The same bytes from memory, and the extension in capitals. */
    CHECK_VF_OK(vecfile_parse(b.p, b.len, VECFILE_FVECS, NULL, &vf, err,
                              sizeof err));
    CHECK(memcmp(vf.data, v, sizeof v) == 0);
    vecfile_free(&vf);
    CHECK(write_file(test_path("A.FVECS"), b.p, b.len) == 0);
    CHECK_VF_OK(vecfile_load(test_path("A.FVECS"), &vf, err, sizeof err));
    CHECK_EQ(vf.n, 7);
    vecfile_free(&vf);
    buf_free(&b);
}

TEST(fvecs_stdin)
{
    float v[3 * 4];
    struct buf b = {0};
    vecfile vf;

    fill_random(v, 12, 2);
    fvecs_build(&b, v, 3, 4);
    CHECK(write_file(test_path("in.fvecs"), b.p, b.len) == 0);
    buf_free(&b);
    CHECK(freopen(test_path("in.fvecs"), "rb", stdin) != NULL);
    CHECK_VF_OK(vecfile_load("-", &vf, err, sizeof err));
    CHECK_EQ(vf.n, 3);
    CHECK_EQ(vf.dim, 4);
    CHECK(memcmp(vf.data, v, sizeof v) == 0);
    vecfile_free(&vf);

    /* Truncated input on stdin is named as standard input. */
    CHECK(write_file(test_path("in2.fvecs"), "\x04\0\0\0\0\0", 6) == 0);
    CHECK(freopen(test_path("in2.fvecs"), "rb", stdin) != NULL);
    CHECK_VF_ERR(vecfile_load("-", &vf, err, sizeof err), VECFILE_EFORMAT,
                 "standard input: row 0");
}

TEST(fvecs_large_dim)
{
    size_t n = 3, dim = VECFILE_MAX_DIM;
    float *v = malloc(n * dim * sizeof *v);
    struct buf b = {0};
    vecfile vf;

    CHECK(v);
    fill_random(v, n * dim, 3);
    fvecs_build(&b, v, n, (uint32_t)dim);
    CHECK(write_file(test_path("big.fvecs"), b.p, b.len) == 0);
    buf_free(&b);
    CHECK_VF_OK(vecfile_load(test_path("big.fvecs"), &vf, err, sizeof err));
    CHECK_EQ(vf.dim, VECFILE_MAX_DIM);
    CHECK(memcmp(vf.data, v, n * dim * sizeof *v) == 0);
    vecfile_free(&vf);
    free(v);
}

TEST(bvecs_roundtrip)
{
    struct buf b = {0};
    vecfile vf;

    for (int i = 0; i < 4; i++) {
        unsigned char row[3] = {(unsigned char)i, 255, (unsigned char)(10 * i)};
        buf_i32(&b, 3);
        buf_put(&b, row, 3);
    }
    CHECK(write_file(test_path("a.bvecs"), b.p, b.len) == 0);
    CHECK_VF_OK(vecfile_load(test_path("a.bvecs"), &vf, err, sizeof err));
    CHECK_EQ(vf.n, 4);
    CHECK_EQ(vf.dim, 3);
    for (int i = 0; i < 4; i++) {
        CHECK(vf.data[i * 3] == (float)i);
        CHECK(vf.data[i * 3 + 1] == 255.0f);
        CHECK(vf.data[i * 3 + 2] == (float)(10 * i));
    }
    vecfile_free(&vf);
    buf_free(&b);
}

TEST(npy_f4_versions)
{
    float v[6 * 3];
    vecfile vf;

    fill_random(v, 18, 4);
    for (int major = 1; major <= 3; major++) {
        struct buf b = {0};
        char name[32];
        npy_build(&b, major,
                  NPY_DICT("<f4", "False", "(6, 3)"),
                  v, sizeof v);
        snprintf(name, sizeof name, "v%d.npy", major);
        CHECK(write_file(test_path(name), b.p, b.len) == 0);
        CHECK_VF_OK(vecfile_load(test_path(name), &vf, err, sizeof err));
        CHECK_EQ(vf.n, 6);
        CHECK_EQ(vf.dim, 3);
        CHECK(memcmp(vf.data, v, sizeof v) == 0);
        vecfile_free(&vf);
        CHECK_VF_OK(vecfile_parse(b.p, b.len, VECFILE_NPY, "mem", &vf, err,
                                  sizeof err));
        CHECK(memcmp(vf.data, v, sizeof v) == 0);
        vecfile_free(&vf);
        buf_free(&b);
    }

    /* Another spelling numpy has used: double quotes, Python 2 longs, no
    ** trailing comma, keys in another order. */
    struct buf b = {0};
    npy_build(&b, 1,
              "{\"shape\": (6L, 3L), \"fortran_order\": False, "
              "\"descr\": \"<f4\"}",
              v, sizeof v);
    CHECK_VF_OK(vecfile_parse(b.p, b.len, VECFILE_NPY, "mem", &vf, err,
                              sizeof err));
    CHECK_EQ(vf.n, 6);
    CHECK(memcmp(vf.data, v, sizeof v) == 0);
    vecfile_free(&vf);
    buf_free(&b);

    /* Zero rows is a valid array with a known dim. */
    npy_build(&b, 1, NPY_DICT("<f4", "False", "(0, 3)"),
              NULL, 0);
    CHECK_VF_OK(vecfile_parse(b.p, b.len, VECFILE_NPY, "mem", &vf, err,
                              sizeof err));
    CHECK_EQ(vf.n, 0);
    CHECK_EQ(vf.dim, 3);
    CHECK(vf.data == NULL);
    buf_free(&b);
}

TEST(npy_f8)
{
    /* float64 is rounded to float32, as numpy's astype(float32) does; an
    ** infinity stays one (keel refuses it later, by row); a finite value
    ** beyond float's range is refused here, by value, row and component,
    ** not turned into an infinity the file does not hold. */
    double d[6] = {1.0, -2.5, 0.1, 1e-50, INFINITY, 3.0};
    struct buf b = {0};
    vecfile vf;

    npy_build(&b, 1, NPY_DICT("<f8", "False", "(2, 3)"), d, sizeof d);
    CHECK(write_file(test_path("d.npy"), b.p, b.len) == 0);
    buf_free(&b);
    CHECK_VF_OK(vecfile_load(test_path("d.npy"), &vf, err, sizeof err));
    CHECK_EQ(vf.n, 2);
    CHECK_EQ(vf.dim, 3);
    CHECK(vf.data[0] == 1.0f);
    CHECK(vf.data[1] == -2.5f);
    CHECK(vf.data[2] == (float)0.1);
    CHECK(vf.data[3] == 0.0f);
    CHECK(isinf(vf.data[4]));
    CHECK(vf.data[5] == 3.0f);
    vecfile_free(&vf);

    d[4] = 1e300;
    npy_build(&b, 1, NPY_DICT("<f8", "False", "(2, 3)"), d, sizeof d);
    CHECK(write_file(test_path("d.npy"), b.p, b.len) == 0);
    buf_free(&b);
    CHECK_EQ(vecfile_load(test_path("d.npy"), &vf, err, sizeof err),
             VECFILE_EFORMAT);
    CHECK(strstr(err, "vector 1 of ") != NULL);
    CHECK(strstr(err, "1.0000000000000001e+300 at component 1") != NULL);
    CHECK(strstr(err, "beyond a float's range") != NULL);
    CHECK(strstr(err, "\nhelp: ") != NULL);
}

TEST(npy_f2_u1)
{
    /* 1, -2, 65504 (largest half), 2^-24 (smallest subnormal), -0, inf */
    uint16_t h[6] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00};
    unsigned char u[6] = {0, 1, 127, 128, 254, 255};
    struct buf b = {0};
    vecfile vf;

    npy_build(&b, 1, NPY_DICT("<f2", "False", "(2, 3)"),
              h, sizeof h);
    CHECK(write_file(test_path("h.npy"), b.p, b.len) == 0);
    buf_free(&b);
    CHECK_VF_OK(vecfile_load(test_path("h.npy"), &vf, err, sizeof err));
    CHECK_EQ(vf.n, 2);
    CHECK_EQ(vf.dim, 3);
    CHECK(vf.data[0] == 1.0f);
    CHECK(vf.data[1] == -2.0f);
    CHECK(vf.data[2] == 65504.0f);
    CHECK(vf.data[3] == 0x1p-24f);
    CHECK(vf.data[4] == 0.0f && signbit(vf.data[4]));
    CHECK(isinf(vf.data[5]) && vf.data[5] > 0);
    vecfile_free(&vf);

    const char *dtypes[2] = {"|u1", "<u1"};
    for (int i = 0; i < 2; i++) {
        char dict[128];
        snprintf(dict, sizeof dict,
                 NPY_DICT("%s", "False", "(3, 2)"),
                 dtypes[i]);
        npy_build(&b, 1, dict, u, sizeof u);
        CHECK(write_file(test_path("u.npy"), b.p, b.len) == 0);
        buf_free(&b);
        CHECK_VF_OK(vecfile_load(test_path("u.npy"), &vf, err, sizeof err));
        CHECK_EQ(vf.n, 3);
        CHECK_EQ(vf.dim, 2);
        for (int j = 0; j < 6; j++)
            CHECK(vf.data[j] == (float)u[j]);
        vecfile_free(&vf);
    }
}

/* Every half converts exactly: compare with the value built by arithmetic. */
TEST(half_exhaustive)
{
    for (uint32_t x = 0; x < 65536; x++) {
        uint16_t h = (uint16_t)x;
        int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
        float got = half_to_float(h);
        double want;
        if (exp == 31 && man != 0) {
            CHECK_MSG(isnan(got), "half 0x%04x gave %g, not NaN", x, got);
            continue;
        }
        if (exp == 31)
            want = INFINITY;
        else if (exp == 0)
            want = ldexp(man, -24);
        else
            want = ldexp(1024 + man, exp - 25);
        if (sign)
            want = -want;
        CHECK_MSG((double)got == want && !!signbit(got) == sign,
                  "half 0x%04x gave %a, want %a", x, got, want);
    }
}

TEST(ivecs_roundtrip)
{
    struct buf b = {0};
    int32_t *rows;
    size_t n;
    uint32_t w;

    for (int i = 0; i < 5; i++) {
        buf_i32(&b, 3);
        buf_i32(&b, i);
        buf_i32(&b, -1);
        buf_i32(&b, 1000 * i);
    }
    CHECK(write_file(test_path("gt.ivecs"), b.p, b.len) == 0);
    CHECK_VF_OK(vecfile_load_ivecs(test_path("gt.ivecs"), &rows, &n, &w, err,
                                   sizeof err));
    CHECK_EQ(n, 5);
    CHECK_EQ(w, 3);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(rows[i * 3], i);
        CHECK_EQ(rows[i * 3 + 1], -1);
        CHECK_EQ(rows[i * 3 + 2], 1000 * i);
    }
    free(rows);

    /* A row of another width, named. */
    buf_i32(&b, 2);
    buf_i32(&b, 7);
    buf_i32(&b, 8);
    CHECK_VF_ERR(vecfile_parse_ivecs(b.p, b.len, "gt", &rows, &n, &w, err,
                                     sizeof err),
                 VECFILE_EFORMAT, "row 5 (byte offset 80) gives dimension 2");
    buf_free(&b);

    buf_i32(&b, 0);
    CHECK_VF_ERR(vecfile_parse_ivecs(b.p, b.len, "gt", &rows, &n, &w, err,
                                     sizeof err),
                 VECFILE_EFORMAT, "dimension 0");
    buf_free(&b);
    buf_i32(&b, 4);
    buf_i32(&b, 1);
    CHECK_VF_ERR(vecfile_parse_ivecs(b.p, b.len, "gt", &rows, &n, &w, err,
                                     sizeof err),
                 VECFILE_EFORMAT,
                 "row 0 (byte offset 0), the last, is cut short");
    buf_free(&b);
    buf_i32(&b, INT32_MAX);
    CHECK_VF_ERR(vecfile_parse_ivecs(b.p, b.len, "gt", &rows, &n, &w, err,
                                     sizeof err),
                 VECFILE_EFORMAT, "cut short");
    buf_free(&b);
    CHECK_VF_ERR(vecfile_load_ivecs(test_path("none.ivecs"), &rows, &n, &w,
                                    err, sizeof err),
                 VECFILE_EIO, "none.ivecs: cannot open it");
}

TEST(ids_text)
{
    const char *text = "5\n 7 \r\n\n\t42\n18446744073709551614\n0007";
    uint64_t *ids;
    size_t n;

    CHECK(write_file(test_path("ids.txt"), text, strlen(text)) == 0);
    CHECK_VF_OK(vecfile_load_ids(test_path("ids.txt"), &ids, &n, err,
                                 sizeof err));
    CHECK_EQ(n, 5);
    CHECK_U64(ids[0], 5);
    CHECK_U64(ids[1], 7);
    CHECK_U64(ids[2], 42);
    CHECK_U64(ids[3], UINT64_MAX - 1);
    CHECK_U64(ids[4], 7);
    free(ids);

    /* Empty and blank files hold no ids. */
    CHECK_VF_OK(vecfile_parse_ids("", 0, "e", &ids, &n, err, sizeof err));
    CHECK_EQ(n, 0);
    CHECK_VF_OK(vecfile_parse_ids("\n \n\r\n", 5, "e", &ids, &n, err,
                                  sizeof err));
    CHECK_EQ(n, 0);

    /* Many ids, past the first growth of the array. */
    struct buf b = {0};
    for (int i = 0; i < 5000; i++) {
        char line[32];
        int len = snprintf(line, sizeof line, "%d\n", 3 * i);
        buf_put(&b, line, (size_t)len);
    }
    CHECK_VF_OK(vecfile_parse_ids(b.p, b.len, "many", &ids, &n, err,
                                  sizeof err));
    CHECK_EQ(n, 5000);
    for (int i = 0; i < 5000; i++)
        CHECK_U64(ids[i], 3 * i);
    free(ids);
    buf_free(&b);

#define IDS_BAD(s, needle)                                                  \
    CHECK_VF_ERR(vecfile_parse_ids(s, strlen(s), "ids", &ids, &n, err,      \
                                   sizeof err),                             \
                 VECFILE_EFORMAT, needle)
    IDS_BAD("1\n2\nabc\n", "ids: line 3: 'abc' is not a decimal id");
    IDS_BAD("1 2\n", "line 1 holds more than one value: '1 2'");
    IDS_BAD("\n-5\n", "line 2: '-5' is not a decimal id");
    IDS_BAD("+5\n", "'+5' is not");
    IDS_BAD("1.5\n", "'1.5' is not");
    IDS_BAD("0x10\n", "'0x10' is not");
    IDS_BAD("18446744073709551615\n", "id 18446744073709551615 is larger");
    IDS_BAD("99999999999999999999999\n",
            "id 99999999999999999999999 is larger");
    IDS_BAD("1\n\x01\x02\n", "line 2: '?" "?' is not"); /* no trigraph */
#undef IDS_BAD
    CHECK_VF_ERR(vecfile_parse_ids("1\n\0\n", 4, "ids", &ids, &n, err,
                                   sizeof err),
                 VECFILE_EFORMAT, "line 2: '?' is not");
}

TEST(ids_npy)
{
    uint64_t u[4] = {0, 1, 1ull << 40, UINT64_MAX - 1};
    int64_t s[3] = {3, 2, 1};
    struct buf b = {0};
    uint64_t *ids;
    size_t n;

    npy_build(&b, 1, NPY_DICT("<u8", "False", "(4,)"),
              u, sizeof u);
    CHECK(write_file(test_path("ids.npy"), b.p, b.len) == 0);
    buf_free(&b);
    CHECK_VF_OK(vecfile_load_ids(test_path("ids.npy"), &ids, &n, err,
                                 sizeof err));
    CHECK_EQ(n, 4);
    CHECK(memcmp(ids, u, sizeof u) == 0);
    free(ids);

    npy_build(&b, 2, NPY_DICT("<i8", "True", "(3, 1)"),
              s, sizeof s);
    CHECK_VF_OK(vecfile_parse_ids(b.p, b.len, "ids", &ids, &n, err,
                                  sizeof err));
    CHECK_EQ(n, 3);
    CHECK_U64(ids[0], 3);
    CHECK_U64(ids[2], 1);
    free(ids);
    buf_free(&b);

    s[1] = -2;
    npy_build(&b, 1, NPY_DICT("<i8", "False", "(3,)"),
              s, sizeof s);
    CHECK_VF_ERR(vecfile_parse_ids(b.p, b.len, "ids", &ids, &n, err,
                                   sizeof err),
                 VECFILE_EFORMAT, "id 1 (byte offset 136) is -2");
    buf_free(&b);

    u[2] = UINT64_MAX;
    npy_build(&b, 1, NPY_DICT("<u8", "False", "(4,)"),
              u, sizeof u);
    CHECK_VF_ERR(vecfile_parse_ids(b.p, b.len, "ids", &ids, &n, err,
                                   sizeof err),
                 VECFILE_EFORMAT,
                 "id 2 (byte offset 144) is 18446744073709551615");
    buf_free(&b);

    npy_build(&b, 1, NPY_DICT("<f4", "False", "(2,)"),
              u, 8);
    CHECK_VF_ERR(vecfile_parse_ids(b.p, b.len, "ids", &ids, &n, err,
                                   sizeof err),
                 VECFILE_EFORMAT, "dtype '<f4'; ids must be");
    buf_free(&b);

    npy_build(&b, 1, NPY_DICT("<u8", "False", "(2, 2)"),
              u, sizeof u);
    CHECK_VF_ERR(vecfile_parse_ids(b.p, b.len, "ids", &ids, &n, err,
                                   sizeof err),
                 VECFILE_EFORMAT, "shape (2, 2)");
    buf_free(&b);

    npy_build(&b, 1, NPY_DICT("<u8", "False", "(5,)"),
              u, sizeof u);
    CHECK_VF_ERR(vecfile_parse_ids(b.p, b.len, "ids", &ids, &n, err,
                                   sizeof err),
                 VECFILE_EFORMAT, "needs 40 bytes of data, but only 32");
    buf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Malformed vector files */

static int
parse_f(const void *p, size_t n, vecfile *vf)
{
    return vecfile_parse(p, n, VECFILE_FVECS, "x.fvecs", vf, err, sizeof err);
}

TEST(fvecs_malformed)
{
    struct buf b = {0};
    vecfile vf = {(float *)(void *)&vf, 12345, 77}; /* sentinel: unchanged */
    float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};

    CHECK_VF_ERR(parse_f("", 0, &vf), VECFILE_EFORMAT, "x.fvecs is empty");
    CHECK_VF_ERR(parse_f("\x02\0", 2, &vf), VECFILE_EFORMAT,
                 "row 0 is cut short: its 4-byte dimension has only 2 bytes");

    buf_i32(&b, 0);
    CHECK_VF_ERR(parse_f(b.p, b.len, &vf), VECFILE_EFORMAT,
                 "row 0 (byte offset 0) gives dimension 0; it must be 1..4096");
    buf_free(&b);
    buf_i32(&b, 5000);
    buf_put(&b, v, sizeof v);
    CHECK_VF_ERR(parse_f(b.p, b.len, &vf), VECFILE_EFORMAT, "dimension 5000");
    buf_free(&b);
    buf_i32(&b, -3);
    CHECK_VF_ERR(parse_f(b.p, b.len, &vf), VECFILE_EFORMAT, "dimension -3");
    buf_free(&b);

    /* Rows of different dims: the first one that differs is named. */
    fvecs_build(&b, v, 2, 4);
    buf_i32(&b, 3);
    buf_put(&b, v, 3 * sizeof(float));
    buf_i32(&b, 4); /* pad so the length is whole 4-dim rows */
    CHECK_VF_ERR(parse_f(b.p, b.len, &vf), VECFILE_EFORMAT,
                 "row 2 (byte offset 40) gives dimension 3, but row 0 gives 4");
    buf_free(&b);

    /* A truncated last row names its row and the whole rows there are. */
    fvecs_build(&b, v, 2, 4);
    buf_i32(&b, 4);
    buf_put(&b, v, 6);
    CHECK_VF_ERR(parse_f(b.p, b.len, &vf), VECFILE_EFORMAT,
                 "row 2 (byte offset 40), the last, is cut short: it has 10 "
                 "of its 20 bytes");
    CHECK(strstr(err, "cut it to its 2 whole rows (40 bytes)"));
    b.len = 42;
    CHECK_VF_ERR(parse_f(b.p, b.len, &vf), VECFILE_EFORMAT,
                 "row 2 (byte offset 40), the last, is cut short");
    buf_free(&b);

    /* A .npy file given as .fvecs. */
    npy_build(&b, 1, NPY_DICT("<f4", "False", "(2, 4)"),
              v, sizeof v);
    CHECK_VF_ERR(parse_f(b.p, b.len, &vf), VECFILE_EFORMAT,
                 "starts like an .npy file");
    buf_free(&b);

    /* bvecs read as such: truncated. */
    buf_i32(&b, 3);
    buf_put(&b, "ab", 2);
    CHECK_VF_ERR(vecfile_parse(b.p, b.len, VECFILE_BVECS, "x.bvecs", &vf, err,
                               sizeof err),
                 VECFILE_EFORMAT, "x.bvecs: row 0 (byte offset 0), the last, "
                                  "is cut short: it has 6 of its 7 bytes");
    buf_free(&b);
    CHECK_VF_ERR(vecfile_parse("abcd", 4, VECFILE_UNKNOWN, NULL, &vf, err,
                               sizeof err),
                 VECFILE_EFORMAT, "input: unknown vector file format");

    CHECK(vf.data == (float *)(void *)&vf && vf.n == 12345 && vf.dim == 77);
}

TEST(load_errors)
{
    vecfile vf;

    CHECK(write_file(test_path("v.txt"), "1 2 3\n", 6) == 0);
    CHECK_VF_ERR(vecfile_load(test_path("v.txt"), &vf, err, sizeof err),
                 VECFILE_EFORMAT, "does not know the file type '.txt'");
    CHECK_VF_ERR(vecfile_load("noext", &vf, err, sizeof err), VECFILE_EFORMAT,
                 "file type '(none)'");
    CHECK_VF_ERR(vecfile_load(test_path("missing.fvecs"), &vf, err,
                              sizeof err),
                 VECFILE_EIO, "missing.fvecs: cannot open it: No such file");
    CHECK(mkdir(test_path("dir.fvecs"), 0700) == 0);
    CHECK_VF_ERR(vecfile_load(test_path("dir.fvecs"), &vf, err, sizeof err),
                 VECFILE_EIO, "is a directory");
    CHECK(write_file(test_path("empty.npy"), "", 0) == 0);
    CHECK_VF_ERR(vecfile_load(test_path("empty.npy"), &vf, err, sizeof err),
                 VECFILE_EFORMAT,
                 "empty.npy: the .npy file is cut short after 0 bytes");
    CHECK_EQ(vecfile_format_of("a/b.c/d"), VECFILE_UNKNOWN);
    CHECK_EQ(vecfile_format_of("x.Npy"), VECFILE_NPY);
    CHECK_EQ(vecfile_format_of("x.bvecs"), VECFILE_BVECS);
}

static int
parse_n(const void *p, size_t n)
{
    vecfile vf;
    int rc = vecfile_parse(p, n, VECFILE_NPY, "x.npy", &vf, err, sizeof err);
    if (rc == VECFILE_OK)
        vecfile_free(&vf);
    return rc;
}

/* Builds an .npy with dict and nbytes of data, then expects an error with
** needle. */
#define NPY_BAD(major, dict, nbytes, needle)                                \
    do {                                                                    \
        struct buf nb_ = {0};                                               \
        static unsigned char zeros_[256];                                   \
        npy_build(&nb_, (major), (dict), zeros_, (nbytes));                 \
        CHECK_VF_ERR(parse_n(nb_.p, nb_.len), VECFILE_EFORMAT, needle);     \
        buf_free(&nb_);                                                     \
    } while (0)

TEST(npy_malformed)
{
    struct buf b = {0};

    CHECK_VF_ERR(parse_n("\x93NUM", 4), VECFILE_EFORMAT,
                 "cut short after 4 bytes, inside its magic");
    CHECK_VF_ERR(parse_n("PK\3\4zipfile", 11), VECFILE_EFORMAT,
                 "does not start with the .npy magic");
    CHECK_VF_ERR(parse_n("\x93NUMPY\1", 7), VECFILE_EFORMAT,
                 "before its version");
    CHECK_VF_ERR(parse_n("\x93NUMPY\1\0\x10", 9), VECFILE_EFORMAT,
                 "before its header length");
    CHECK_VF_ERR(parse_n("\x93NUMPY\2\0\x10\0\0", 11), VECFILE_EFORMAT,
                 "before its header length");
    CHECK_VF_ERR(parse_n("\x93NUMPY\4\0\x10\0\0\0", 12), VECFILE_EFORMAT,
                 "format version 4.0");
    CHECK_VF_ERR(parse_n("\x93NUMPY\1\0\x40\0{'descr'", 18), VECFILE_EFORMAT,
                 "header claims 64 bytes, but only 8 follow");
    CHECK_VF_ERR(parse_n("\x93NUMPY\2\0\xff\xff\xff\xff{}", 14),
                 VECFILE_EFORMAT, "header claims 4294967295 bytes");

    NPY_BAD(1, NPY_DICT("<f4", "True", "(2, 3)"),
            24, "Fortran (column) order");
    NPY_BAD(1, NPY_DICT("<f4", "False", "(2, 3, 4)"),
            96, "has 3 dimensions, shape (2, 3, 4)");
    NPY_BAD(1, NPY_DICT("<f4", "False", "(6,)"),
            24, "has 1 dimension, shape (6,)");
    NPY_BAD(1, NPY_DICT("<f4", "False", "()"),
            4, "has 0 dimensions, shape ()");
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': False, "
               "'shape': (1,1,1,1,1,1,1,1,1,1), }",
            4, "has 10 dimensions, shape (1, 1, 1, 1, 1, 1, 1, 1, ...)");
    NPY_BAD(1, NPY_DICT(">f8", "False", "(2, 3)"),
            48, "dtype '>f8' is big-endian");
    NPY_BAD(1, NPY_DICT("<i4", "False", "(2, 3)"),
            24, "dtype '<i4'");
    NPY_BAD(1, NPY_DICT(">f4", "False", "(2, 3)"),
            24, "'>f4' is big-endian");
    NPY_BAD(1, "{'descr': [('a', '<f4'), ('b', '<i4')], "
               "'fortran_order': False, "
               "'shape': (2,), }",
            16, "structured dtype");
    NPY_BAD(1, NPY_DICT("<f4", "False", "(2, 0)"),
            0, "have 0 dimensions; keel takes 1..4096");
    NPY_BAD(1, NPY_DICT("<f4", "False", "(1, 5000)"),
            0, "5000 dimensions");
    NPY_BAD(1, NPY_DICT("<f4", "False", "(2, 3)"),
            20, "needs 24 bytes of data, but only 20 follow the header "
                "(byte offset 128)");
    NPY_BAD(1, NPY_DICT("<f4", "False", "(2, 3)"),
            28, "needs 24 bytes of data, but 28 follow");
    /* Shapes whose byte count overflows size_t, or even 64 bits. */
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': False, "
               "'shape': (4611686018427387904, 4), }",
            16, "more bytes than this machine can address");
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': False, "
               "'shape': (18446744073709551615, 100), }",
            16, "more bytes than this machine can address");
    NPY_BAD(1, "{'descr': '<u1', 'fortran_order': False, "
               "'shape': (99999999999999999999999, 1), }",
            16, "more bytes than this machine can address");
    NPY_BAD(3, "{'descr': '<f4', 'fortran_order': False, "
               "'shape': (1152921504606846976, 16), }",
            16, "more bytes than this machine can address");
    /* Syntax and keys. */
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': False}", 0, "lacks 'shape'");
    NPY_BAD(1, "{'fortran_order': False, 'shape': (1, 1)}", 4, "lacks 'descr'");
    NPY_BAD(1, "{'descr': '<f4', 'shape': (1, 1)}", 4, "lacks 'fortran_order'");
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), "
               "'extra': 1}",
            4, "has a key 'extra'");
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': false, 'shape': (1, 1)}", 4,
            "expected True or False");
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, -1)}", 4,
            "expected a non-negative integer in the shape");
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [1, 1]}", 4,
            "expected '(' opening the shape");
    NPY_BAD(1, "{'descr': '<f4' 'fortran_order': False, 'shape': (1, 1)}", 4,
            "expected ',' or '}'");
    NPY_BAD(1, "{'descr: '<f4', 'fortran_order': False, 'shape': (1, 1)}", 4,
            "expected ':'");
    NPY_BAD(1, "['descr', '<f4']", 4, "the .npy header is malformed at byte "
                                      "offset 10 (expected '{')");
    NPY_BAD(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1", 4,
            "expected ',' or ')' in the shape");

    /* An unterminated header: the dict runs to the end of the header bytes. */
    npy_build(&b, 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1)}",
              NULL, 0);
    memset(b.p + 10, '{', b.len - 10);
    CHECK_VF_ERR(parse_n(b.p, b.len), VECFILE_EFORMAT, "malformed");
    buf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Mutations: every parser on every prefix of a valid input, and on random
** byte flips, must return cleanly; a refusal must carry a help line. */

static int
try_all(const unsigned char *p, size_t n)
{
    vecfile vf;
    int32_t *rows;
    size_t cnt;
    uint32_t w;
    uint64_t *ids;
    int rc, worst = 0;

    for (int fmt = VECFILE_FVECS; fmt <= VECFILE_NPY; fmt++) {
        err[0] = '\0';
        rc = vecfile_parse(p, n, (enum vecfile_format)fmt, "m", &vf, err,
                           sizeof err);
        if (rc == VECFILE_OK) {
            /* Touch every float so ASan sees any bad size. */
            volatile float sink = 0;
            for (size_t i = 0; i < vf.n * vf.dim; i++)
                sink += vf.data[i];
            (void)sink;
            vecfile_free(&vf);
        } else if (!strstr(err, "\nhelp: ")) {
            return -1;
        }
        worst |= rc;
    }
    err[0] = '\0';
    rc = vecfile_parse_ivecs(p, n, "m", &rows, &cnt, &w, err, sizeof err);
    if (rc == VECFILE_OK)
        free(rows);
    else if (!strstr(err, "\nhelp: "))
        return -1;
    err[0] = '\0';
    rc = vecfile_parse_ids(p, n, "m", &ids, &cnt, err, sizeof err);
    if (rc == VECFILE_OK)
        free(ids);
    else if (!strstr(err, "\nhelp: "))
        return -1;
    return worst;
}

TEST(mutations)
{
    struct buf inputs[5] = {{0}};
    float v[4 * 3];
    uint64_t ids[3] = {1, 2, 3};
    uint64_t seed = 99;

    fill_random(v, 12, 5);
    fvecs_build(&inputs[0], v, 4, 3);
    npy_build(&inputs[1], 1,
              NPY_DICT("<f4", "False", "(4, 3)"), v,
              sizeof v);
    npy_build(&inputs[2], 2,
              NPY_DICT("<f2", "False", "(4, 3)"), v,
              24);
    npy_build(&inputs[3], 1, "{'descr': '<u8', 'fortran_order': False, "
                             "'shape': (3,), }",
              ids, sizeof ids);
    buf_put(&inputs[4], "12\n13\n\n14\n", 10);

    for (int k = 0; k < 5; k++) {
        struct buf *in = &inputs[k];
        /* Every prefix, each in a buffer of exactly its size for ASan. */
        for (size_t n = 0; n <= in->len; n++) {
            unsigned char *copy = malloc(n ? n : 1);
            CHECK(copy);
            memcpy(copy, in->p, n);
            int rc = try_all(copy, n);
            free(copy);
            CHECK_MSG(rc >= 0, "input %d cut to %zu bytes: no help line: '%s'",
                      k, n, err);
        }
        /* Random flips of one to four bytes. */
        for (int t = 0; t < 3000; t++) {
            unsigned char *copy = malloc(in->len);
            CHECK(copy);
            memcpy(copy, in->p, in->len);
            int flips = 1 + (int)(test_rand(&seed) % 4);
            for (int f = 0; f < flips; f++)
                copy[test_rand(&seed) % in->len] =
                    (unsigned char)test_rand(&seed);
            int rc = try_all(copy, in->len);
            free(copy);
            CHECK_MSG(rc >= 0, "input %d flipped: no help line: '%s'", k, err);
        }
        buf_free(in);
    }
}

TEST(small_err_buffers)
{
    vecfile vf;
    char tiny[8];

    /* A NULL or short err buffer is fine; messages are cut, not overrun. */
    CHECK_EQ(vecfile_parse("", 0, VECFILE_FVECS, "x", &vf, NULL, 0),
             VECFILE_EFORMAT);
    memset(tiny, 'z', sizeof tiny);
    CHECK_EQ(vecfile_parse("", 0, VECFILE_FVECS, "x", &vf, tiny, 4),
             VECFILE_EFORMAT);
    CHECK(tiny[3] == '\0' && tiny[4] == 'z');
    CHECK_EQ(vecfile_parse(NULL, 0, VECFILE_NPY, NULL, &vf, tiny, 1),
             VECFILE_EFORMAT);
    CHECK(tiny[0] == '\0');
}

TEST_MAIN()
