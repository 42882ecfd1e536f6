/* error.c -- error codes, the thread-local error message, and allocation.
**
** Every failure in keel returns a KEEL_E* code and leaves a message here: a
** first line naming what was wrong with which value, then "help: " and what
** to do instead. The message is per thread (a handle may be shared by many
** threads, so a per-handle message would race). Allocation passes through
** here too, so tests can make the n-th allocation fail.
*/
#include "base/internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ERRMSG_BYTES 2048

static _Thread_local char errmsg[ERRMSG_BYTES];

const char *
keel_errmsg(void)
{
    return errmsg;
}

const char *
keel_strerror(int rc)
{
    switch (rc) {
    case KEEL_OK: return "not an error";
    case KEEL_EINVAL: return "invalid argument";
    case KEEL_EDIM: return "dimension mismatch";
    case KEEL_EOPTIONS: return "options do not match the index";
    case KEEL_ENOTFOUND: return "not found";
    case KEEL_ENOTINDEX: return "not a keel index";
    case KEEL_EEXIST: return "id already in use";
    case KEEL_ELOCKED: return "index locked by another writer";
    case KEEL_EREADONLY: return "index opened read-only";
    case KEEL_ECORRUPT: return "index file is corrupt";
    case KEEL_EFULL: return "no space left";
    case KEEL_EIO: return "input/output error";
    case KEEL_ENOMEM: return "out of memory";
    case KEEL_EVERSION: return "index written by a newer keel";
    case KEEL_ECANCELED: return "cancelled";
    default: return "unknown error code";
    }
}

int
keel_libversion_number(void)
{
    return KEEL_VERSION_NUMBER;
}

/* A message cut to fit buf (size bytes) may end inside a UTF-8 sequence (a
** path's "é"): drop that partial sequence, so the message stays valid
** UTF-8 wherever its parts were. */
static void
trim_utf8(char *buf, size_t size)
{
    size_t len = strnlen(buf, size);
    if (len + 1 < size)
        return; /* not cut */
    size_t i = len, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)buf[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)buf[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (lead >= 0xC0 && back + 1 < need)
        buf[i - 1] = '\0';
}

void
keel__clear_error(void)
{
    errmsg[0] = '\0';
}

int
keel__fail(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    trim_utf8(errmsg, sizeof errmsg);
    return rc;
}

int
keel__wrap(int rc, const char *fmt, ...)
{
    char old[ERRMSG_BYTES];
    memcpy(old, errmsg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof errmsg)
        snprintf(errmsg + n, sizeof errmsg - (size_t)n, "%s", old);
    trim_utf8(errmsg, sizeof errmsg);
    return rc;
}

int
keel__corrupt(const char *file, int line, const char *fmt, ...)
{
    char what[ERRMSG_BYTES / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    trim_utf8(what, sizeof what);
    /* The check's place in keel's sources means nothing to a user, so it
    ** stays out of the message (a debugger finds it from here). */
    (void)file;
    (void)line;
    snprintf(errmsg, sizeof errmsg,
             "%s\nhelp: the file is damaged; restore it from "
             "a backup (made by keel backup, keel_backup or backup()) or "
             "rebuild the index from its vectors",
             what);
    trim_utf8(errmsg, sizeof errmsg);
    return KEEL_ECORRUPT;
}

/* Allocation failure injection: after keel__fail_alloc_after(n), the n-th
** allocation and every later one fail until it is called with 0. */
static uint64_t alloc_countdown;
static int alloc_failing;

void
keel__fail_alloc_after(uint64_t n)
{
    __atomic_store_n(&alloc_failing, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&alloc_countdown, n, __ATOMIC_RELAXED);
}

static int
alloc_should_fail(void)
{
    if (KEEL_LIKELY(__atomic_load_n(&alloc_countdown, __ATOMIC_RELAXED) == 0 &&
                    !__atomic_load_n(&alloc_failing, __ATOMIC_RELAXED)))
        return 0;
    if (__atomic_load_n(&alloc_failing, __ATOMIC_RELAXED))
        return 1;
    if (__atomic_sub_fetch(&alloc_countdown, 1, __ATOMIC_RELAXED) == 0) {
        __atomic_store_n(&alloc_failing, 1, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

static void *
nomem(size_t n)
{
    keel__fail(KEEL_ENOMEM,
               "could not allocate %zu bytes of memory\n"
               "help: free memory, or use smaller batches", n);
    return NULL;
}

void *
keel__malloc(size_t n)
{
    void *p = alloc_should_fail() ? NULL : malloc(n ? n : 1);
    return p ? p : nomem(n);
}

void *
keel__calloc(size_t count, size_t size)
{
    void *p = alloc_should_fail() ? NULL : calloc(count ? count : 1, size ? size : 1);
    return p ? p : nomem(count * size);
}

void *
keel__realloc(void *p, size_t n)
{
    void *q = alloc_should_fail() ? NULL : realloc(p, n ? n : 1);
    return q ? q : nomem(n);
}

void
keel__free(void *p)
{
    free(p);
}

int
keel__grow(void *arrayp, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return KEEL_OK;
    size_t more = *cap ? 2 * *cap : 64;
    if (more > SIZE_MAX / size) {
        nomem(SIZE_MAX);
        return KEEL_ENOMEM;
    }
    void *old, *p;
    memcpy(&old, arrayp, sizeof old); /* arrayp may point to any T * */
    if (!(p = keel__realloc(old, more * size)))
        return KEEL_ENOMEM;
    memcpy(arrayp, &p, sizeof p);
    *cap = more;
    return KEEL_OK;
}

char *
keel__path_plus(const char *path, const char *suffix)
{
    size_t a = strlen(path), b = strlen(suffix);
    char *p = keel__malloc(a + b + 1);
    if (p) {
        memcpy(p, path, a);
        memcpy(p + a, suffix, b + 1);
    }
    return p;
}

uint32_t
keel__cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1u : (uint32_t)n;
}
