/* vecfile.c -- readers for .fvecs, .bvecs, .npy, .ivecs and id-list files
** (the .npy header grammar is npy.c's; what both share is vfread.h).
**
** Owns turning the bytes of a vector, ground-truth or id file into arrays of
** floats, int32 or uint64, and saying precisely what is wrong when it can't.
** The input is untrusted: the CLI reads whatever a user names and fuzz
** targets feed random bytes, so every count, length and shape is checked
** against the bytes actually present before a single element is read, and
** every size is computed with overflow checks. Parsing is done in two steps,
** validate then convert, so nothing is allocated for a file that is refused
** and the conversion loops run without checks of their own.
**
** Files are read whole into memory: that is the fastest way through stdio
** for the sizes involved (a 136 MB .fvecs reads in well under a second from
** the page cache), and for float32 data the read buffer itself becomes the
** result, compacted in place, so loading costs one copy of the file.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "vecfile.h"
#include "npy.h"
#include "vfread.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const char fvecs_help[] =
    "an .fvecs file holds per row an int32 dimension, then that many "
    "float32, little-endian";
static const char bvecs_help[] =
    "a .bvecs file holds per row an int32 dimension, then that many uint8";
static const char ivecs_help[] =
    "an .ivecs file holds per row an int32 count, then that many int32";

/* ------------------------------------------------------------------------ */
/* Element conversion */

/* IEEE half to float. Every half is exactly a float, so this is bit work:
** rebias the exponent, and normalize subnormal halves (which are normal
** floats). */
static float
half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    float f;

    if (exp == 0 && man == 0) {
        bits = sign;
    } else if (exp == 0) {
        exp = 127 - 15 + 1;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        bits = sign | exp << 23 | (man & 0x3ffu) << 13;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13; /* inf, NaN keeps its payload */
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}


/* Converts validated rows to floats. When owned is the malloc'ed buffer that
** holds buf and the rows are float32, the rows are slid down over their
** headers in place and the buffer becomes the result (*owned is then set to
** NULL); each row moves to a lower address, so going in order never
** overwrites a row not yet moved. */
static int
convert(const unsigned char *buf, const struct layout *l,
        unsigned char **owned, const char *name, vecfile *out, char *err,
        size_t errlen)
{
    size_t count, bytes, i, j;
    float *dst;

    if (!mul_ok(l->n, l->dim, &count) || !mul_ok(count, sizeof(float), &bytes))
        return vf_fail(err, errlen, VECFILE_ENOMEM,
                       "%s: %zu vectors of %u floats do not fit in memory"
                       "\nhelp: split the file into smaller ones",
                       vf_name(name), l->n, l->dim);
    if (count == 0) {
        out->data = NULL;
        out->n = 0;
        out->dim = l->dim;
        return VECFILE_OK;
    }
    if (owned && *owned == buf && l->type == ELEM_F32) {
        unsigned char *b = *owned, *shrunk;
        size_t row = (size_t)l->dim * sizeof(float);
        for (i = 0; i < l->n; i++)
            memmove(b + i * row, b + l->start + i * l->stride + l->skip, row);
        shrunk = realloc(b, bytes);
        if (shrunk)
            b = shrunk; /* a failed shrink leaves the larger block valid */
        *owned = NULL;
        out->data = (float *)(void *)b; /* malloc'ed, so aligned for float */
        out->n = l->n;
        out->dim = l->dim;
        return VECFILE_OK;
    }
    dst = malloc(bytes);
    if (!dst)
        return vf_fail(err, errlen, VECFILE_ENOMEM,
                       "%s: no memory for %zu vectors of %u floats (%zu bytes)"
                       "\nhelp: free memory or split the file",
                       vf_name(name), l->n, l->dim, bytes);
    for (i = 0; i < l->n; i++) {
        const unsigned char *src = buf + l->start + i * l->stride + l->skip;
        float *d = dst + i * l->dim;
        switch (l->type) {
        case ELEM_F32:
            memcpy(d, src, (size_t)l->dim * sizeof(float));
            break;
        case ELEM_F16:
            for (j = 0; j < l->dim; j++)
                d[j] = half_to_float((uint16_t)(src[2 * j] |
                                                src[2 * j + 1] << 8));
            break;
        case ELEM_U8:
            for (j = 0; j < l->dim; j++)
                d[j] = (float)src[j];
            break;
        case ELEM_F64:
            /* Rounded to the nearest float, as numpy's astype(float32); a
            ** finite value beyond float's range is refused by value (as a
            ** float it would be an infinity the file does not hold). */
            for (j = 0; j < l->dim; j++) {
                double v;
                memcpy(&v, src + 8 * j, sizeof v);
                if (isfinite(v) && fabs(v) > FLT_MAX) {
                    free(dst);
                    return vf_fail(err, errlen, VECFILE_EFORMAT,
                                   "vector %zu of %s has %.17g at component "
                                   "%zu, beyond a float's range (3.4e38), "
                                   "which keel stores\nhelp: scale the "
                                   "vectors (and queries) down, which scales "
                                   "every distance alike, or drop the vector",
                                   i, vf_name(name), v, j);
                }
                d[j] = (float)v;
            }
            break;
        }
    }
    out->data = dst;
    out->n = l->n;
    out->dim = l->dim;
    return VECFILE_OK;
}

/* ------------------------------------------------------------------------ */
/* .fvecs, .bvecs, .ivecs: rows of (int32 dim, dim elements) */

/* Checks that buf holds whole rows of esize-byte elements that all give the
** same dimension, 1..maxdim, and fills l (n, dim, stride, skip). */
static int
layout_xvecs(const unsigned char *buf, size_t len, size_t esize,
             uint32_t maxdim, const char *ext, const char *help,
             const char *name, struct layout *l, char *err, size_t errlen)
{
    const char *nm = vf_name(name);
    int32_t d0;
    size_t stride, n, rem, i;

    if (len == 0)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s is empty: it holds no rows"
                       "\nhelp: give a %s file with at least one row; %s",
                       nm, ext, help);
    if (len < 4)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: row 0 is cut short: its 4-byte dimension has "
                       "only %zu bytes\nhelp: %s",
                       nm, len, help);
    d0 = rd_i32(buf);
    if (d0 < 1 || (uint32_t)d0 > maxdim) {
        if (len >= sizeof npy_magic &&
            !memcmp(buf, npy_magic, sizeof npy_magic))
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: row 0 gives dimension %ld, but the file "
                           "starts like an .npy file\nhelp: name it .npy so "
                           "it is read as one",
                           nm, (long)d0);
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: row 0 (byte offset 0) gives dimension %ld; it "
                       "must be 1..%lu\nhelp: check that this is a %s file: "
                       "%s",
                       nm, (long)d0, (unsigned long)maxdim, ext, help);
    }
    /* maxdim <= INT32_MAX, so this fits any size_t of 64 bits; check for
    ** the 32-bit case. */
    if ((size_t)d0 > (SIZE_MAX - 4) / esize)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: row 0 gives dimension %ld, too large for this "
                       "machine\nhelp: %s",
                       nm, (long)d0, help);
    stride = 4 + esize * (size_t)d0;
    n = len / stride;
    rem = len % stride;
    for (i = 0; i < n; i++) {
        int32_t d = rd_i32(buf + i * stride);
        if (d != d0)
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: row %zu (byte offset %zu) gives dimension "
                           "%ld, but row 0 gives %ld\nhelp: every row of a "
                           "%s file must have the same dimension; a "
                           "different one means the file is damaged or is "
                           "not %s",
                           nm, i, i * stride, (long)d, (long)d0, ext, ext);
    }
    if (rem != 0) {
        if (rem >= 4 && rd_i32(buf + n * stride) != d0)
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: row %zu (byte offset %zu) gives dimension "
                           "%ld, but row 0 gives %ld\nhelp: every row of a "
                           "%s file must have the same dimension",
                           nm, n, n * stride, (long)rd_i32(buf + n * stride),
                           (long)d0, ext);
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: row %zu (byte offset %zu), the last, is cut "
                       "short: it has %zu of its %zu bytes\nhelp: the file "
                       "was truncated, probably while being written or "
                       "copied; write it again, or cut it to its %zu whole "
                       "rows (%zu bytes)",
                       nm, n, n * stride, rem, stride, n, n * stride);
    }
    l->start = 0;
    l->stride = stride;
    l->skip = 4;
    l->n = n;
    l->dim = (uint32_t)d0;
    return VECFILE_OK;
}

/* ------------------------------------------------------------------------ */
/* Vector files */

static int
parse_vectors(const unsigned char *buf, size_t len, enum vecfile_format fmt,
              const char *name, unsigned char **owned, vecfile *out,
              char *err, size_t errlen)
{
    struct layout l;
    int rc;

    if (!buf && len > 0)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: no buffer for %zu bytes\nhelp: pass the bytes",
                       vf_name(name), len);
    if (!buf)
        buf = (const unsigned char *)"";
    switch (fmt) {
    case VECFILE_FVECS:
        rc = layout_xvecs(buf, len, 4, VECFILE_MAX_DIM, ".fvecs", fvecs_help,
                          name, &l, err, errlen);
        l.type = ELEM_F32;
        break;
    case VECFILE_BVECS:
        rc = layout_xvecs(buf, len, 1, VECFILE_MAX_DIM, ".bvecs", bvecs_help,
                          name, &l, err, errlen);
        l.type = ELEM_U8;
        break;
    case VECFILE_NPY:
        rc = npy_layout(buf, len, name, &l, err, errlen);
        break;
    case VECFILE_UNKNOWN:
    default:
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: unknown vector file format %d\nhelp: give "
                       "VECFILE_FVECS, VECFILE_BVECS or VECFILE_NPY",
                       vf_name(name), (int)fmt);
    }
    if (rc)
        return rc;
    return convert(buf, &l, owned, name, out, err, errlen);
}

enum vecfile_format
vecfile_format_of(const char *path)
{
    const char *dot;

    if (!path)
        return VECFILE_UNKNOWN;
    if (!strcmp(path, "-"))
        return VECFILE_FVECS;
    dot = strrchr(path, '.');
    if (!dot || strchr(dot, '/'))
        return VECFILE_UNKNOWN;
    if (!strcasecmp(dot, ".fvecs"))
        return VECFILE_FVECS;
    if (!strcasecmp(dot, ".bvecs"))
        return VECFILE_BVECS;
    if (!strcasecmp(dot, ".npy"))
        return VECFILE_NPY;
    return VECFILE_UNKNOWN;
}

static int is_space(unsigned char ch);
static int parse_ids_text(const unsigned char *buf, size_t len,
                          const char *name, uint64_t **ids, size_t *n,
                          char *err, size_t errlen);

/* What read_path checks in the first 64 kB of standard input. */
enum prefix { PREFIX_NONE, PREFIX_IVECS, PREFIX_IDS };

/* Whether the first len bytes of standard input already hold an error of
** the format (a dimension below 1, a line that is not an id): then there is
** no need to read on, and parsing what was read reports the same error. */
static int
prefix_bad(const unsigned char *b, size_t len, enum prefix kind)
{
    if (kind == PREFIX_IVECS)
        return len >= 4 && rd_i32(b) < 1;
    if (kind != PREFIX_IDS || len == 0 || b[0] == npy_magic[0])
        return 0;
    const unsigned char *nl = b + len;
    while (nl > b && nl[-1] != '\n')
        nl--;
    /* The line cut short: a byte that is neither a digit nor a space makes
    ** it no id, whatever follows. */
    for (const unsigned char *q = nl; q < b + len; q++)
        if (!(*q >= '0' && *q <= '9') && !is_space(*q))
            return 1;
    uint64_t *ids = NULL;
    size_t n = 0;
    if (nl == b || parse_ids_text(b, (size_t)(nl - b), NULL, &ids, &n, NULL,
                                  0) == VECFILE_OK) {
        free(ids);
        return 0;
    }
    return 1;
}

/* Reads all of path ("-": standard input) into a malloc'ed buffer.
** Standard input stops early when its first 64 kB already fail as kind. */
static int
read_path(const char *path, enum prefix kind, unsigned char **bufp,
          size_t *lenp, char *err, size_t errlen)
{
    int from_stdin = !strcmp(path, "-");
    const char *nm = from_stdin ? "standard input" : path;
    FILE *f = from_stdin ? stdin : fopen(path, "rb");
    size_t cap = 1 << 16, used = 0;
    unsigned char *b;
    struct stat st;
    int have_st, rc = VECFILE_OK;

    if (!f)
        return vf_fail(err, errlen, VECFILE_EIO,
                       "%s: cannot open it: %s\nhelp: check the path and "
                       "that you may read the file",
                       path, strerror(errno));
    have_st = fstat(fileno(f), &st) == 0;
    if (have_st && S_ISDIR(st.st_mode)) {
        if (!from_stdin)
            fclose(f);
        return vf_fail(err, errlen, VECFILE_EIO,
                       "%s: is a directory\nhelp: name a file", nm);
    }
    /* One byte more than the size, so the read that finds the end needs no
    ** second allocation. */
    if (have_st && S_ISREG(st.st_mode) && st.st_size > 0 &&
        (unsigned long long)st.st_size < SIZE_MAX - 1)
        cap = (size_t)st.st_size + 1;
    b = malloc(cap);
    if (!b) {
        if (!from_stdin)
            fclose(f);
        return vf_fail(err, errlen, VECFILE_ENOMEM,
                       "%s: no memory to read its %zu bytes\nhelp: free "
                       "memory or split the file",
                       nm, cap);
    }
    for (;;) {
        size_t got;
        if (used == cap) {
            unsigned char *nb;
            if (cap > SIZE_MAX / 2 || !(nb = realloc(b, cap * 2))) {
                rc = vf_fail(err, errlen, VECFILE_ENOMEM,
                             "%s: no memory to read more than %zu bytes"
                             "\nhelp: free memory or split the file",
                             nm, used);
                break;
            }
            b = nb;
            cap *= 2;
        }
        got = fread(b + used, 1, cap - used, f);
        if (from_stdin && used == 0 && prefix_bad(b, got, kind)) {
            used = got;
            break;
        }
        used += got;
        if (got == 0 || used < cap) {
            if (ferror(f)) {
                rc = vf_fail(err, errlen, VECFILE_EIO,
                             "%s: read failed after %zu bytes: %s\nhelp: "
                             "check the file and the disk",
                             nm, used, strerror(errno));
                break;
            }
            if (feof(f))
                break;
        }
    }
    if (!from_stdin)
        fclose(f);
    if (rc) {
        free(b);
        return rc;
    }
    *bufp = b;
    *lenp = used;
    return VECFILE_OK;
}

/* Standard input as .fvecs, through vecstream: each row's dimension is
** checked as it arrives, so input that is not .fvecs fails after its first
** 4 bytes instead of after all of it is read. */
static int
load_stdin(vecfile *out, char *err, size_t errlen)
{
    vecstream s;
    float *data = NULL;
    size_t n = 0, cap = 0, step;
    int rc = vecstream_open("-", &s, err, errlen);

    if (rc)
        return rc;
    step = ((size_t)8 << 20) / ((size_t)s.dim * sizeof(float));
    if (step == 0)
        step = 1;
    for (;;) {
        size_t got = 0;
        if (n + step > cap) {
            size_t ncap = cap > step ? cap * 2 : step * 2, bytes;
            float *nd;
            if (!mul_ok(ncap, (size_t)s.dim * sizeof(float), &bytes) ||
                !(nd = realloc(data, bytes))) {
                rc = vf_fail(err, errlen, VECFILE_ENOMEM,
                             "standard input: no memory for more than %zu "
                             "vectors of %u floats\nhelp: free memory or "
                             "split the input", n, s.dim);
                break;
            }
            data = nd;
            cap = ncap;
        }
        rc = vecstream_read(&s, data + n * s.dim, step, &got, err, errlen);
        if (rc)
            break;
        n += got;
        if (got < step)
            break;
    }
    if (!rc) {
        out->data = data;
        out->n = n;
        out->dim = s.dim;
        data = NULL;
    }
    free(data);
    vecstream_close(&s);
    return rc;
}

int
vecfile_load(const char *path, vecfile *out, char *err, size_t errlen)
{
    enum vecfile_format fmt = vecfile_format_of(path);
    unsigned char *buf;
    size_t len;
    int rc;

    if (!path || !out)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "vecfile_load: %s is NULL\nhelp: pass a path and an "
                       "output",
                       !path ? "path" : "out");
    if (fmt == VECFILE_UNKNOWN) {
        const char *dot = strrchr(path, '.');
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s is a directory, not a file of vectors\nhelp: "
                           "give a file in it: an .fvecs, .bvecs, .npy or "
                           "ann-benchmarks .hdf5 file", path);
        if (dot && !strchr(dot, '/') && strcmp(dot, ".keel") == 0)
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s looks like a keel index, not a file of "
                           "vectors\nhelp: give it as INDEX, and the vectors "
                           "as an .fvecs, .bvecs, .npy or ann-benchmarks "
                           ".hdf5 file", path);
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: keel does not know the file type '%s'\nhelp: "
                       "give an .fvecs, .bvecs or .npy file (2-D float32, "
                       "float64, float16 or uint8), an ann-benchmarks .hdf5 "
                       "(or .h5) file, or - for .fvecs on standard input",
                       path, dot && !strchr(dot, '/') ? dot : "(none)");
    }
    if (!strcmp(path, "-"))
        return load_stdin(out, err, errlen);
    rc = read_path(path, PREFIX_NONE, &buf, &len, err, errlen);
    if (rc)
        return rc;
    rc = parse_vectors(buf, len, fmt,
                       strcmp(path, "-") ? path : "standard input", &buf, out,
                       err, errlen);
    free(buf); /* NULL when the result took it over */
    return rc;
}

/* Reads exactly n bytes unless the stream ends first; returns the count. */
static size_t
read_full(FILE *f, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        size_t r = fread((char *)buf + got, 1, n - got, f);
        if (r == 0)
            break;
        got += r;
    }
    return got;
}

static int
stream_read_error(vecstream *s, char *err, size_t errlen)
{
    return vf_fail(err, errlen, VECFILE_EIO,
                   "%s: read failed at row %zu: %s\nhelp: check the input "
                   "and what writes it",
                   s->name, s->rows, strerror(errno));
}

int
vecstream_open(const char *path, vecstream *s, char *err, size_t errlen)
{
    int from_stdin = !strcmp(path, "-");
    vecstream v = {.name = from_stdin ? "standard input" : path};
    unsigned char hdr[4];
    size_t got;
    int32_t d0;

    v.f = from_stdin ? stdin : fopen(path, "rb");
    if (!v.f)
        return vf_fail(err, errlen, VECFILE_EIO,
                       "%s: cannot open it: %s\nhelp: check the path and "
                       "that you may read the file",
                       path, strerror(errno));
    v.own = !from_stdin;
    got = read_full(v.f, hdr, sizeof hdr);
    if (got < sizeof hdr && ferror(v.f)) {
        int rc = stream_read_error(&v, err, errlen);
        vecstream_close(&v);
        return rc;
    }
    if (got == 0) {
        vecstream_close(&v);
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s is empty: it holds no rows\nhelp: give an .fvecs "
                       "file with at least one row; %s",
                       v.name, fvecs_help);
    }
    if (got < sizeof hdr) {
        vecstream_close(&v);
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: row 0 is cut short: its 4-byte dimension has "
                       "only %zu bytes\nhelp: %s",
                       v.name, got, fvecs_help);
    }
    d0 = rd_i32(hdr);
    if (d0 < 1 || (uint32_t)d0 > VECFILE_MAX_DIM) {
        vecstream_close(&v);
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: row 0 (byte offset 0) gives dimension %ld; it "
                       "must be 1..%lu\nhelp: check that this is an .fvecs "
                       "stream: %s",
                       v.name, (long)d0, (unsigned long)VECFILE_MAX_DIM,
                       fvecs_help);
    }
    v.dim = (uint32_t)d0;
    v.first = 1;
    *s = v;
    return VECFILE_OK;
}

int
vecstream_read(vecstream *s, float *dst, size_t max, size_t *n, char *err,
               size_t errlen)
{
    size_t row_bytes = (size_t)s->dim * 4, stride = row_bytes + 4, i;

    for (i = 0; i < max; i++) {
        size_t at = s->rows * stride; /* byte offset of this row */
        if (!s->first) {
            unsigned char hdr[4];
            size_t got = read_full(s->f, hdr, sizeof hdr);
            if (got < sizeof hdr && ferror(s->f))
                return stream_read_error(s, err, errlen);
            if (got == 0)
                break;
            if (got < sizeof hdr)
                return vf_fail(err, errlen, VECFILE_EFORMAT,
                               "%s: row %zu (byte offset %zu), the last, is "
                               "cut short: it has %zu of its %zu bytes\n"
                               "help: the input ended in the middle of a "
                               "row; send whole rows",
                               s->name, s->rows, at, got, stride);
            int32_t d = rd_i32(hdr);
            if (d != (int32_t)s->dim)
                return vf_fail(err, errlen, VECFILE_EFORMAT,
                               "%s: row %zu (byte offset %zu) gives "
                               "dimension %ld, but row 0 gives %lu\nhelp: "
                               "every row of an .fvecs file must have the "
                               "same dimension",
                               s->name, s->rows, at, (long)d,
                               (unsigned long)s->dim);
        }
        size_t got = read_full(s->f, dst + i * s->dim, row_bytes);
        if (got < row_bytes && ferror(s->f))
            return stream_read_error(s, err, errlen);
        if (got < row_bytes)
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: row %zu (byte offset %zu), the last, is cut "
                           "short: it has %zu of its %zu bytes\nhelp: the "
                           "input ended in the middle of a row; send whole "
                           "rows",
                           s->name, s->rows, at, got + 4, stride);
        s->first = 0;
        s->rows++;
    }
    *n = i;
    return VECFILE_OK;
}

void
vecstream_close(vecstream *s)
{
    if (s && s->own && s->f)
        fclose(s->f);
    if (s)
        s->f = NULL;
}

int
vecfile_parse(const void *buf, size_t len, enum vecfile_format fmt,
              const char *name, vecfile *out, char *err, size_t errlen)
{
    if (!out)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "vecfile_parse: out is NULL\nhelp: pass an output");
    return parse_vectors(buf, len, fmt, name, NULL, out, err, errlen);
}

void
vecfile_free(vecfile *v)
{
    if (!v)
        return;
    free(v->data);
    v->data = NULL;
    v->n = 0;
    v->dim = 0;
}

/* ------------------------------------------------------------------------ */
/* Ground truth */

int
vecfile_parse_ivecs(const void *bufv, size_t len, const char *name,
                    int32_t **rows, size_t *n, uint32_t *width, char *err,
                    size_t errlen)
{
    const unsigned char *buf = bufv ? bufv : (const unsigned char *)"";
    struct layout l;
    size_t count, bytes, i;
    int32_t *dst;
    int rc;

    if (!bufv && len > 0)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: no buffer for %zu bytes\nhelp: pass the bytes",
                       vf_name(name), len);
    rc = layout_xvecs(buf, len, 4, INT32_MAX, ".ivecs", ivecs_help, name, &l,
                      err, errlen);
    if (rc)
        return rc;
    /* Whole rows fit in len, so n * dim * 4 < len: no overflow. */
    count = l.n * l.dim;
    bytes = count * sizeof(int32_t);
    dst = malloc(bytes);
    if (!dst)
        return vf_fail(err, errlen, VECFILE_ENOMEM,
                       "%s: no memory for %zu rows of %u ids\nhelp: free "
                       "memory or split the file",
                       vf_name(name), l.n, l.dim);
    for (i = 0; i < l.n; i++)
        memcpy(dst + i * l.dim, buf + i * l.stride + l.skip,
               (size_t)l.dim * sizeof(int32_t));
    *rows = dst;
    *n = l.n;
    *width = l.dim;
    return VECFILE_OK;
}

int
vecfile_load_ivecs(const char *path, int32_t **rows, size_t *n,
                   uint32_t *width, char *err, size_t errlen)
{
    unsigned char *buf;
    size_t len;
    int rc = read_path(path, PREFIX_IVECS, &buf, &len, err, errlen);

    if (rc)
        return rc;
    rc = vecfile_parse_ivecs(buf, len,
                             strcmp(path, "-") ? path : "standard input", rows,
                             n, width, err, errlen);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Id lists */

static int
is_space(unsigned char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

static int
parse_ids_text(const unsigned char *buf, size_t len, const char *name,
               uint64_t **ids, size_t *n, char *err, size_t errlen)
{
    const char *nm = vf_name(name);
    const unsigned char *p = buf, *end = buf + len;
    uint64_t *arr = NULL;
    size_t count = 0, cap = 0, line = 0;
    char shown[48];
    int rc = VECFILE_OK;

    while (p < end && rc == VECFILE_OK) {
        const unsigned char *eol = memchr(p, '\n', (size_t)(end - p));
        const unsigned char *q, *tok, *tokend;
        uint64_t v = 0;
        int big = 0;

        if (!eol)
            eol = end;
        line++;
        for (q = p; q < eol && is_space(*q); q++)
            ;
        tok = q;
        while (q < eol && !is_space(*q))
            q++;
        tokend = q;
        while (q < eol && is_space(*q))
            q++;
        p = eol < end ? eol + 1 : end;
        if (tok == tokend)
            continue; /* a blank line */
        if (q < eol) {
            excerpt(tok, (size_t)(eol - tok), shown, sizeof shown);
            rc = vf_fail(err, errlen, VECFILE_EFORMAT,
                         "%s: line %zu holds more than one value: '%s'"
                         "\nhelp: give one decimal id per line",
                         nm, line, shown);
            break;
        }
        for (q = tok; q < tokend; q++) {
            unsigned dig;
            if (*q < '0' || *q > '9')
                break;
            dig = (unsigned)(*q - '0');
            if (v > (UINT64_MAX - dig) / 10)
                big = 1;
            else
                v = v * 10 + dig;
        }
        if (q < tokend) {
            excerpt(tok, (size_t)(tokend - tok), shown, sizeof shown);
            rc = vf_fail(err, errlen, VECFILE_EFORMAT,
                         "%s: line %zu: '%s' is not a decimal id\nhelp: give "
                         "one id per line, as digits only (0..%llu)",
                         nm, line, shown,
                         (unsigned long long)(UINT64_MAX - 1));
            break;
        }
        if (big || v == UINT64_MAX) {
            excerpt(tok, (size_t)(tokend - tok), shown, sizeof shown);
            rc = vf_fail(err, errlen, VECFILE_EFORMAT,
                         "%s: line %zu: id %s is larger than the largest id "
                         "%llu\nhelp: give ids 0..%llu",
                         nm, line, shown,
                         (unsigned long long)(UINT64_MAX - 1),
                         (unsigned long long)(UINT64_MAX - 1));
            break;
        }
        if (count == cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            uint64_t *na = ncap <= SIZE_MAX / sizeof *arr
                               ? realloc(arr, ncap * sizeof *arr)
                               : NULL;
            if (!na) {
                rc = vf_fail(err, errlen, VECFILE_ENOMEM,
                             "%s: no memory for more than %zu ids\nhelp: "
                             "free memory or split the file",
                             nm, count);
                break;
            }
            arr = na;
            cap = ncap;
        }
        arr[count++] = v;
    }
    if (rc) {
        free(arr);
        return rc;
    }
    *ids = arr;
    *n = count;
    return VECFILE_OK;
}

int
vecfile_parse_ids(const void *bufv, size_t len, const char *name,
                  uint64_t **ids, size_t *n, char *err, size_t errlen)
{
    const unsigned char *buf = bufv ? bufv : (const unsigned char *)"";

    if (!bufv && len > 0)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: no buffer for %zu bytes\nhelp: pass the bytes",
                       vf_name(name), len);
    /* 0x93 cannot start a line of decimal ids, so the magic decides. */
    if (len >= 1 && buf[0] == npy_magic[0])
        return npy_parse_ids(buf, len, name, ids, n, err, errlen);
    return parse_ids_text(buf, len, name, ids, n, err, errlen);
}

int
vecfile_load_ids(const char *path, uint64_t **ids, size_t *n, char *err,
                 size_t errlen)
{
    unsigned char *buf;
    size_t len;
    int rc = read_path(path, PREFIX_IDS, &buf, &len, err, errlen);

    if (rc)
        return rc;
    rc = vecfile_parse_ids(buf, len,
                           strcmp(path, "-") ? path : "standard input", ids, n,
                           err, errlen);
    free(buf);
    return rc;
}
