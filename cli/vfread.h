/* vfread.h -- what the CLI's file parsers (vecfile.c, npy.c) share: the
** error helper, little-endian reads, overflow-checked sizes, quoting of
** untrusted bytes, and the layout of validated rows that both describe and
** vecfile.c converts. Private to cli/; not a public interface.
*/
#ifndef KEEL_VFREAD_H
#define KEEL_VFREAD_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vecfile.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the CLI's parsers copy little-endian values as they are; port the copies"
#endif

static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

#if defined(__GNUC__)
#define VF_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define VF_PRINTF(f, a)
#endif

/* Writes a message to err and returns rc, so error paths are one line. */
static inline int VF_PRINTF(4, 5)
vf_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static inline const char *
vf_name(const char *name)
{
    return name ? name : "input";
}

static inline uint32_t
rd_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static inline int32_t
rd_i32(const unsigned char *p)
{
    uint32_t u = rd_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v); /* no implementation-defined cast */
    return v;
}

/* a * b into *out; 0 if it would not fit in size_t. */
static inline int
mul_ok(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

/* Up to 40 bytes of s as printable ASCII, for quoting bad input in messages
** without copying control bytes or invalid UTF-8 to a terminal. */
static inline void
excerpt(const unsigned char *s, size_t n, char *out, size_t outlen)
{
    size_t i, o = 0, lim = n > 40 ? 40 : n;
    for (i = 0; i < lim && o + 1 < outlen; i++)
        out[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (n > lim && o + 4 < outlen) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
}

enum elem { ELEM_F32, ELEM_F16, ELEM_U8, ELEM_F64 };

/* Where n rows of dim elements sit in a validated buffer: row i's first
** element is at start + i * stride + skip. */
struct layout {
    size_t start, stride, skip, n;
    uint32_t dim;
    enum elem type;
};

#endif /* KEEL_VFREAD_H */
