/* npy.c -- the .npy grammar (npy.h): NumPy's format 1.0, 2.0 and 3.0 header
** dictionary, read as numpy reads it, and what keel takes from it (2-D
** vectors, 1-D or n x 1 ids).
**
** The header is untrusted bytes: the parser walks it with a cursor that
** never passes its declared length, quotes what it refuses through
** excerpt() (printable ASCII only), and checks every shape against the
** bytes that really follow with overflow-checked sizes before a caller
** reads a single element.
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "npy.h"

#include <stdlib.h>
#include <string.h>

#include "vfread.h"

/* ------------------------------------------------------------------------ */
/* .npy */

struct npy_header {
    char descr[24];
    int descr_is_list;  /* a structured dtype */
    int fortran;
    int ndim;           /* may exceed the entries kept in shape */
    uint64_t shape[8];
    int shape_big;      /* some entry did not fit in 64 bits */
    int seen;           /* bit 0 descr, 1 fortran_order, 2 shape */
    size_t data_off;    /* where the array's bytes start */
};

struct cursor {
    const unsigned char *p, *end, *base; /* base: start of the whole buffer */
};

static void
skip_ws(struct cursor *c)
{
    while (c->p < c->end &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int
accept_word(struct cursor *c, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n)) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* A Python string literal without escapes (numpy writes none) into out;
** returns 0 if there is none. Longer strings are cut to fit, which is
** enough: every key and dtype keel knows is short. */
static int
take_string(struct cursor *c, char *out, size_t outlen)
{
    unsigned char q;
    size_t o = 0;

    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return 0;
    q = *c->p++;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || *c->p == '\n')
            return 0;
        if (o + 1 < outlen)
            out[o++] = (*c->p >= 0x20 && *c->p < 0x7f) ? (char)*c->p : '?';
        c->p++;
    }
    if (c->p >= c->end)
        return 0;
    c->p++;
    out[o] = '\0';
    return 1;
}

/* Skips a structured dtype's list, nested brackets and strings included,
** so the message can say what it is rather than that the header is bad. */
static int
skip_list(struct cursor *c)
{
    int depth = 0;
    while (c->p < c->end) {
        unsigned char ch = *c->p;
        if (ch == '\'' || ch == '"') {
            char junk[2];
            if (!take_string(c, junk, sizeof junk))
                return 0;
            continue;
        }
        c->p++;
        if (ch == '[' || ch == '(')
            depth++;
        else if ((ch == ']' || ch == ')') && --depth == 0)
            return 1;
    }
    return 0;
}

static int
npy_bad_header(const struct cursor *c, const unsigned char *hdr,
               size_t hlen, const char *name, const char *expected,
               char *err, size_t errlen)
{
    char shown[48];
    excerpt(hdr, hlen, shown, sizeof shown);
    return vf_fail(err, errlen, VECFILE_EFORMAT,
                   "%s: the .npy header is malformed at byte offset %zu "
                   "(expected %s); it reads \"%s\"\nhelp: write the file "
                   "with numpy.save",
                   vf_name(name), (size_t)(c->p - c->base), expected, shown);
}

/* Reads the preamble and the header dictionary of an .npy file. Checks
** only the syntax; what the values mean is the caller's business. */
static int
npy_parse_header(const unsigned char *buf, size_t len, const char *name,
                 struct npy_header *h, char *err, size_t errlen)
{
    const char *nm = vf_name(name);
    size_t hoff, hlen;
    struct cursor c;
    char key[32];

    memset(h, 0, sizeof *h);
    if (len < sizeof npy_magic || memcmp(buf, npy_magic, sizeof npy_magic)) {
        if (len < sizeof npy_magic && !memcmp(buf, npy_magic, len))
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: the .npy file is cut short after %zu bytes, "
                           "inside its magic\nhelp: write it again with "
                           "numpy.save",
                           nm, len);
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: does not start with the .npy magic "
                       "\\x93NUMPY\nhelp: write the file with numpy.save, "
                       "or give it the extension of its real format "
                       "(.fvecs, .bvecs)",
                       nm);
    }
    if (len < 8)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy file is cut short after %zu bytes, "
                       "before its version\nhelp: write it again with "
                       "numpy.save",
                       nm, len);
    if (buf[6] == 1) {
        hoff = 10;
    } else if (buf[6] == 2 || buf[6] == 3) {
        hoff = 12;
    } else {
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: .npy format version %u.%u; keel reads 1.0, 2.0 "
                       "and 3.0\nhelp: write the file with numpy.save",
                       nm, buf[6], buf[7]);
    }
    if (len < hoff)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy file is cut short after %zu bytes, "
                       "before its header length\nhelp: write it again "
                       "with numpy.save",
                       nm, len);
    hlen = hoff == 10 ? (size_t)(buf[8] | buf[9] << 8)
                      : (size_t)rd_u32(buf + 8);
    if (hlen > len - hoff)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy header claims %zu bytes, but only %zu "
                       "follow its preamble\nhelp: the file is truncated or "
                       "damaged; write it again with numpy.save",
                       nm, hlen, len - hoff);
    h->data_off = hoff + hlen;

    c.base = buf;
    c.p = buf + hoff;
    c.end = buf + hoff + hlen;
#define BAD(what) \
    npy_bad_header(&c, buf + hoff, hlen, name, (what), err, errlen)
    skip_ws(&c);
    if (!accept_word(&c, "{"))
        return BAD("'{'");
    for (;;) {
        skip_ws(&c);
        if (accept_word(&c, "}"))
            break;
        if (!take_string(&c, key, sizeof key))
            return BAD("a quoted key or '}'");
        skip_ws(&c);
        if (!accept_word(&c, ":"))
            return BAD("':'");
        skip_ws(&c);
        if (!strcmp(key, "descr")) {
            if (c.p < c.end && *c.p == '[') {
                if (!skip_list(&c))
                    return BAD("the end of the dtype's list");
                h->descr_is_list = 1;
            } else if (!take_string(&c, h->descr, sizeof h->descr)) {
                return BAD("a quoted dtype");
            }
            h->seen |= 1;
        } else if (!strcmp(key, "fortran_order")) {
            if (accept_word(&c, "True"))
                h->fortran = 1;
            else if (accept_word(&c, "False"))
                h->fortran = 0;
            else
                return BAD("True or False");
            h->seen |= 2;
        } else if (!strcmp(key, "shape")) {
            h->ndim = 0;
            if (!accept_word(&c, "("))
                return BAD("'(' opening the shape");
            for (;;) {
                uint64_t v = 0;
                int digits = 0;
                skip_ws(&c);
                if (accept_word(&c, ")"))
                    break;
                while (c.p < c.end && *c.p >= '0' && *c.p <= '9') {
                    unsigned dig = (unsigned)(*c.p - '0');
                    if (v > (UINT64_MAX - dig) / 10)
                        h->shape_big = 1;
                    else
                        v = v * 10 + dig;
                    c.p++;
                    digits++;
                }
                if (!digits)
                    return BAD("a non-negative integer in the shape");
                if (c.p < c.end && *c.p == 'L') /* Python 2's longs */
                    c.p++;
                if (h->ndim < (int)(sizeof h->shape / sizeof h->shape[0]))
                    h->shape[h->ndim] = v;
                if (h->ndim < 1000)
                    h->ndim++;
                skip_ws(&c);
                if (accept_word(&c, ","))
                    continue;
                if (accept_word(&c, ")"))
                    break;
                return BAD("',' or ')' in the shape");
            }
            h->seen |= 4;
        } else {
            char shown[48];
            excerpt((const unsigned char *)key, strlen(key), shown,
                    sizeof shown);
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: the .npy header has a key '%s' that the "
                           "format does not define\nhelp: write the file "
                           "with numpy.save",
                           nm, shown);
        }
        skip_ws(&c);
        if (accept_word(&c, ","))
            continue;
        if (accept_word(&c, "}"))
            break;
        return BAD("',' or '}'");
    }
    /* numpy evaluates the whole header as one Python literal: after the
    ** dictionary only the padding (spaces, a newline) may follow. */
    skip_ws(&c);
    if (c.p != c.end)
        return BAD("only spaces and a newline after the closing '}'");
#undef BAD
    if (h->seen != 7)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy header lacks '%s'\nhelp: write the "
                       "file with numpy.save",
                       nm, !(h->seen & 1)   ? "descr"
                           : !(h->seen & 2) ? "fortran_order"
                                            : "shape");
    return VECFILE_OK;
}

/* The shape as Python prints it, for messages. */
static void
shape_str(const struct npy_header *h, char *out, size_t outlen)
{
    size_t o = 0;
    int i, kept = (int)(sizeof h->shape / sizeof h->shape[0]);

    o += (size_t)snprintf(out, outlen, "(");
    for (i = 0; i < h->ndim && i < kept && o < outlen; i++)
        o += (size_t)snprintf(out + o, outlen - o, "%s%llu", i ? ", " : "",
                              (unsigned long long)h->shape[i]);
    if (o < outlen)
        snprintf(out + o, outlen - o, "%s)",
                 h->ndim > kept ? ", ..." : h->ndim == 1 ? "," : "");
}

/* Checks that exactly need bytes of array data follow the header. */
static int
npy_check_size(const struct npy_header *h, size_t len, int overflow,
               size_t need, const char *name, char *err, size_t errlen)
{
    char shape[96];
    size_t have = len - h->data_off;

    shape_str(h, shape, sizeof shape);
    if (overflow || h->shape_big)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy shape %s of '%s' would take more bytes "
                       "than this machine can address, and the file has "
                       "%zu\nhelp: the header is damaged; write the file "
                       "again with numpy.save",
                       vf_name(name), shape, h->descr, have);
    if (need > have)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy shape %s of '%s' needs %zu bytes of "
                       "data, but only %zu follow the header (byte offset "
                       "%zu)\nhelp: the file is truncated; write it again "
                       "with numpy.save",
                       vf_name(name), shape, h->descr, need, have,
                       h->data_off);
    if (need < have)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy shape %s of '%s' needs %zu bytes of "
                       "data, but %zu follow the header (byte offset %zu)"
                       "\nhelp: the header does not match the data; write "
                       "the file again with numpy.save",
                       vf_name(name), shape, h->descr, need, have,
                       h->data_off);
    return VECFILE_OK;
}

int
npy_layout(const unsigned char *buf, size_t len, const char *name,
           struct layout *l, char *err, size_t errlen)
{
    const char *nm = vf_name(name);
    struct npy_header h;
    char shape[96];
    size_t esize, row, need = 0;
    int rc, overflow;

    rc = npy_parse_header(buf, len, name, &h, err, errlen);
    if (rc)
        return rc;
    if (h.descr_is_list)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy array has a structured dtype (a list "
                       "of fields)\nhelp: save a plain 2-D array of "
                       "float32: numpy.save(path, a.astype(numpy.float32))",
                       nm);
    if (!strcmp(h.descr, "<f4")) {
        l->type = ELEM_F32;
        esize = 4;
    } else if (!strcmp(h.descr, "<f2")) {
        l->type = ELEM_F16;
        esize = 2;
    } else if (!strcmp(h.descr, "<f8")) {
        l->type = ELEM_F64;
        esize = 8;
    } else if (!strcmp(h.descr, "|u1") || !strcmp(h.descr, "<u1")) {
        l->type = ELEM_U8;
        esize = 1;
    } else if (h.descr[0] == '>') {
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy dtype '%s' is big-endian\nhelp: save "
                       "it little-endian: numpy.save(path, a.astype('<f4'))",
                       nm, h.descr);
    } else {
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy dtype '%s' is not one keel reads\nhelp: "
                       "keel reads float32 ('<f4'), float64 ('<f8', "
                       "converted to float32), float16 ('<f2') and "
                       "uint8 ('|u1'); convert with "
                       "numpy.save(path, a.astype(numpy.float32))",
                       nm, h.descr);
    }
    shape_str(&h, shape, sizeof shape);
    if (h.fortran)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy array of shape %s is stored in Fortran "
                       "(column) order; keel reads C (row) order\nhelp: save "
                       "it in C order: "
                       "numpy.save(path, numpy.ascontiguousarray(a))",
                       nm, shape);
    if (h.ndim != 2)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy array has %d dimension%s, shape %s; "
                       "keel reads 2-D arrays of shape (vectors, dim)\nhelp: "
                       "reshape it first, e.g. numpy.save(path, "
                       "a.reshape(-1, dim))",
                       nm, h.ndim, h.ndim == 1 ? "" : "s", shape);
    if (h.shape[1] < 1 || h.shape[1] > VECFILE_MAX_DIM)
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy array has shape %s, so its vectors have "
                       "%llu dimensions; keel takes 1..%d\nhelp: the shape "
                       "must be (vectors, dim); transpose it if it is the "
                       "other way round",
                       nm, shape, (unsigned long long)h.shape[1],
                       VECFILE_MAX_DIM);
    overflow = h.shape[0] > SIZE_MAX ||
               !mul_ok((size_t)h.shape[1], esize, &row) ||
               !mul_ok((size_t)h.shape[0], row, &need);
    rc = npy_check_size(&h, len, overflow, need, name, err, errlen);
    if (rc)
        return rc;
    l->start = h.data_off;
    l->stride = row;
    l->skip = 0;
    l->n = (size_t)h.shape[0];
    l->dim = (uint32_t)h.shape[1];
    return VECFILE_OK;
}

int
npy_parse_ids(const unsigned char *buf, size_t len, const char *name,
              uint64_t **ids, size_t *n, char *err, size_t errlen)
{
    const char *nm = vf_name(name);
    struct npy_header h;
    char shape[96];
    int rc, is_signed, overflow;
    size_t count = 0, need = 0, i;
    uint64_t *dst;

    rc = npy_parse_header(buf, len, name, &h, err, errlen);
    if (rc)
        return rc;
    shape_str(&h, shape, sizeof shape);
    if (!h.descr_is_list && !strcmp(h.descr, "<u8"))
        is_signed = 0;
    else if (!h.descr_is_list && !strcmp(h.descr, "<i8"))
        is_signed = 1;
    else
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy id array has dtype '%s'; ids must be "
                       "'<u8' or '<i8'\nhelp: save them as 64-bit integers: "
                       "numpy.save(path, ids.astype(numpy.uint64))",
                       nm, h.descr_is_list ? "(structured)" : h.descr);
    /* A column (n, 1) is laid out the same in either order. */
    if (!(h.ndim == 1 || (h.ndim == 2 && h.shape[1] == 1)))
        return vf_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: the .npy id array has shape %s; ids must be a "
                       "1-D array (or one column)\nhelp: save them flat: "
                       "numpy.save(path, ids.ravel())",
                       nm, shape);
    overflow = h.shape[0] > SIZE_MAX ||
               !mul_ok((size_t)h.shape[0], sizeof(uint64_t), &need);
    rc = npy_check_size(&h, len, overflow, need, name, err, errlen);
    if (rc)
        return rc;
    count = (size_t)h.shape[0];
    for (i = 0; i < count; i++) {
        uint64_t v;
        memcpy(&v, buf + h.data_off + i * 8, 8);
        if (is_signed && v >> 63) {
            int64_t s;
            memcpy(&s, &v, sizeof s);
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: id %zu (byte offset %zu) is %lld; ids are "
                           "not negative\nhelp: give ids 0..%llu",
                           nm, i, h.data_off + i * 8, (long long)s,
                           (unsigned long long)(UINT64_MAX - 1));
        }
        if (v == UINT64_MAX)
            return vf_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: id %zu (byte offset %zu) is %llu, which keel "
                           "reserves\nhelp: give ids 0..%llu",
                           nm, i, h.data_off + i * 8, (unsigned long long)v,
                           (unsigned long long)(UINT64_MAX - 1));
    }
    if (count == 0) {
        *ids = NULL;
        *n = 0;
        return VECFILE_OK;
    }
    dst = malloc(need);
    if (!dst)
        return vf_fail(err, errlen, VECFILE_ENOMEM,
                       "%s: no memory for %zu ids\nhelp: free memory or "
                       "split the file",
                       nm, count);
    memcpy(dst, buf + h.data_off, need);
    *ids = dst;
    *n = count;
    return VECFILE_OK;
}
