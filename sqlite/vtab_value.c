/* vtab_value.c -- what every file of the SQLite extension below the module
** shares: a table's error messages (SQLite's zErrMsg, with keel's message
** and help line, and keel's codes mapped to SQLite's), its index file as
** SQLite's VFS sees it, and the vectors a query or an insert gives (a
** float32 BLOB or a JSON array).
**
** It is the extension's bottom file: it calls none of the others, so that
** keel_sqlite.c, admin.c, vtab_read.c and vtab_write.c can all use it
** without calling each other in a circle.
*/
#include "vtab.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* --- messages ----------------------------------------------------------- */

int
kv_error(kv_table *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *m = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_free(t->base.zErrMsg);
    t->base.zErrMsg = m;
    return SQLITE_ERROR;
}

int
kv_grow(void *arrayp, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return SQLITE_OK;
    size_t more = *cap ? 2 * *cap : 64;
    void *old, *p;
    memcpy(&old, arrayp, sizeof old); /* arrayp may point to any T * */
    if (!(p = sqlite3_realloc64(old, (sqlite3_uint64)more * size)))
        return SQLITE_NOMEM;
    memcpy(arrayp, &p, sizeof p);
    *cap = more;
    return SQLITE_OK;
}

int
kv_keel_error(kv_table *t, int rc, const char *doing)
{
    const char *m = keel_errmsg();
    if (!m || !*m)
        m = keel_strerror(rc);
    kv_error(t, "%s: %s: %s", t->name, doing, m);
    if (rc == KEEL_ENOMEM)
        return SQLITE_NOMEM;
    if (rc == KEEL_EREADONLY)
        return SQLITE_READONLY;
    if (rc == KEEL_ELOCKED)
        return SQLITE_BUSY;
    if (rc == KEEL_ECORRUPT)
        return SQLITE_CORRUPT;
    if (rc == KEEL_EFULL)
        return SQLITE_FULL;
    if (rc == KEEL_EIO)
        return SQLITE_IOERR;
    return SQLITE_ERROR;
}

/* The VFS of the table's database (files are checked and removed through
** it, so that the extension makes no system call of its own). */
sqlite3_vfs *
kv_table_vfs(kv_table *t)
{
    sqlite3_vfs *vfs = NULL;
    if (sqlite3_file_control(t->db, t->schema, SQLITE_FCNTL_VFS_POINTER,
                             &vfs) != SQLITE_OK || !vfs)
        vfs = sqlite3_vfs_find(NULL);
    return vfs;
}

/* Whether the index file exists (through the VFS). */
int
kv_file_exists(kv_table *t)
{
    sqlite3_vfs *vfs = kv_table_vfs(t);
    int res = 0;
    if (!vfs || vfs->xAccess(vfs, t->path, SQLITE_ACCESS_EXISTS, &res))
        return 0;
    return res;
}

/* The message of a table whose index file is missing. */
char *
kv_missing_message(kv_table *t)
{
    return sqlite3_mprintf(
        "keel table %s: its index file %s is missing\nhelp: put the file "
        "back (a copy taken with the database), or DROP TABLE %s and "
        "create it again", t->name, t->path, t->name);
}

int
kv_check_file(kv_table *t)
{
    if (t->path && !t->broken && !kv_file_exists(t))
        t->broken = kv_missing_message(t);
    if (t->broken)
        return kv_error(t, "%s", t->broken);
    return SQLITE_OK;
}

/* --- vectors ------------------------------------------------------------ */

const char *
kv_type_name(int type)
{
    switch (type) {
    case SQLITE_INTEGER: return "an INTEGER";
    case SQLITE_FLOAT: return "a REAL";
    case SQLITE_NULL: return "NULL";
    case SQLITE_TEXT: return "TEXT";
    default: return "a BLOB";
    }
}

/* Parses a JSON array of exactly dim numbers. Returns the count read, or -1
** (not an array of numbers), or dim + 1 (more than dim). */
static long
json_vector(const char *s, uint32_t dim, float *out)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    if (*s++ != '[')
        return -1;
    long n = 0;
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            s++;
        if (*s == ']' && n == 0) {
            s++;
            break;
        }
        char *end;
        double x = strtod(s, &end);
        if (end == s)
            return -1;
        if ((uint32_t)n < dim)
            out[n] = (float)x;
        n++;
        s = end;
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            s++;
        if (*s == ',') {
            s++;
            continue;
        }
        if (*s++ != ']')
            return -1;
        break;
    }
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    if (*s)
        return -1;
    return n > (long)dim ? (long)dim + 1 : n;
}

int
kv_value_vector(kv_table *t, sqlite3_value *v, const char *what, float *out)
{
    int type = sqlite3_value_type(v);
    if (type == SQLITE_BLOB) {
        int bytes = sqlite3_value_bytes(v);
        if ((size_t)bytes != (size_t)t->dim * sizeof(float))
            return kv_error(t, "%s: %s is a BLOB of %d bytes, but the table's "
                            "vectors are %u float32, %u bytes\nhelp: pass %u "
                            "float32 values (numpy: v.astype('float32')"
                            ".tobytes()), or a JSON array of %u numbers",
                            t->name, what, bytes, t->dim,
                            (unsigned)(t->dim * sizeof(float)), t->dim,
                            t->dim);
        memcpy(out, sqlite3_value_blob(v), (size_t)bytes);
        return SQLITE_OK;
    }
    if (type == SQLITE_TEXT) {
        const char *s = (const char *)sqlite3_value_text(v);
        long n = s ? json_vector(s, t->dim, out) : -1;
        if (n < 0)
            return kv_error(t, "%s: %s is TEXT that is not a JSON array of "
                            "numbers (\"%.40s\")\nhelp: pass a float32 BLOB of "
                            "%u bytes, or a JSON array such as [0.1, 0.2, ...] "
                            "of %u numbers", t->name, what, s ? s : "",
                            (unsigned)(t->dim * sizeof(float)), t->dim);
        if (n != (long)t->dim)
            return kv_error(t, "%s: %s is a JSON array of %s%ld numbers, but "
                            "the table's vectors have %u\nhelp: pass vectors "
                            "of %u dimensions (the table's dim)", t->name,
                            what, n > (long)t->dim ? "more than " : "",
                            n > (long)t->dim ? (long)t->dim : n, t->dim,
                            t->dim);
        return SQLITE_OK;
    }
    return kv_error(t, "%s: %s is %s, not a vector\nhelp: pass a float32 BLOB "
                    "of %u bytes, or a JSON array of %u numbers", t->name,
                    what, kv_type_name(type),
                    (unsigned)(t->dim * sizeof(float)), t->dim);
}
