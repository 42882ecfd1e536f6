/* disk.c -- the disk cache directory (disk.h).
**
** Invariants:
**   (1) A file named by a hash holds exactly the page with that hash, or is
**       refused when read (its bytes are checked against its name): a page
**       reaches its final name only by rename of a whole, checked file.
**   (2) Eviction removes only final names, oldest first; a reader that
**       loses a file to another process's eviction between open and read
**       sees a miss.
**   (3) keel__disk_get looks in the directory only for names this handle
**       knows: listed at open or at a later count, or written by it since.
**       A page another process writes after that is a miss (fetched
**       again, never wrong); any other miss costs no system call (a lookup
**       in a directory that a writer is filling waits for its creates: up
**       to 0.7 ms each on a busy disk, doc/object_storage_bench.md).
**   (4) The pages are the index's vectors, a user's data: page files are
**       created mode 0600, and a directory that another user owns or may
**       write (group or others' write bit) is refused at open, as ssh
**       refuses such a ~/.ssh. A directory keel creates is mode 0700.
*/
#include "base/internal.h"
#include "cache/disk.h"
#include "os/os.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

struct keel_disk {
    char *dir;
    uint64_t limit;
    uint64_t bytes;           /* atomic: what we believe the directory holds */
    uint64_t evicted;         /* atomic */
    uint64_t tmp_seq;         /* atomic */
    pthread_mutex_t evict_lock;
    pthread_mutex_t names_lock; /* the known names (invariant 3) */
    uint64_t *names;          /* open addressing: pairs hi, lo; 0, 0 free */
    size_t names_cap, names_n; /* pairs */
};

/* --- the known names (invariant 3) --------------------------------------- */

static size_t
name_slot(uint64_t hi, uint64_t lo, size_t cap)
{
    return (size_t)((hi ^ (lo * 0x9E3779B97F4A7C15ull)) & (cap - 1));
}

/* Adds (hi, lo) under names_lock; out of memory forgets it (a miss later,
** never a wrong page). (0, 0) is never added: it always looks on disk. */
static void
names_add_locked(keel_disk *d, uint64_t hi, uint64_t lo)
{
    if (!hi && !lo)
        return;
    if (2 * (d->names_n + 1) > d->names_cap) {
        size_t cap = d->names_cap ? 2 * d->names_cap : 1024;
        uint64_t *k = keel__calloc(cap, 2 * sizeof *k);
        if (!k)
            return;
        for (size_t i = 0; i < d->names_cap; i++) {
            uint64_t h = d->names[2 * i], l = d->names[2 * i + 1];
            if (!h && !l)
                continue;
            size_t j = name_slot(h, l, cap);
            while (k[2 * j] || k[2 * j + 1])
                j = (j + 1) & (cap - 1);
            k[2 * j] = h;
            k[2 * j + 1] = l;
        }
        keel__free(d->names);
        d->names = k;
        d->names_cap = cap;
    }
    size_t j = name_slot(hi, lo, d->names_cap);
    for (;; j = (j + 1) & (d->names_cap - 1)) {
        uint64_t h = d->names[2 * j], l = d->names[2 * j + 1];
        if (h == hi && l == lo)
            return;
        if (!h && !l)
            break;
    }
    d->names[2 * j] = hi;
    d->names[2 * j + 1] = lo;
    d->names_n++;
}

static void
names_add(keel_disk *d, uint64_t hi, uint64_t lo)
{
    pthread_mutex_lock(&d->names_lock);
    names_add_locked(d, hi, lo);
    pthread_mutex_unlock(&d->names_lock);
}

static int
names_has(keel_disk *d, uint64_t hi, uint64_t lo)
{
    if (!hi && !lo)
        return 1;
    int has = 0;
    pthread_mutex_lock(&d->names_lock);
    if (d->names_cap) {
        size_t j = name_slot(hi, lo, d->names_cap);
        for (;; j = (j + 1) & (d->names_cap - 1)) {
            uint64_t h = d->names[2 * j], l = d->names[2 * j + 1];
            if (h == hi && l == lo) {
                has = 1;
                break;
            }
            if (!h && !l)
                break;
        }
    }
    pthread_mutex_unlock(&d->names_lock);
    return has;
}

static uint64_t
hex64(const char *s)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++)
        v = v << 4 | (uint64_t)(s[i] <= '9' ? s[i] - '0' : s[i] - 'a' + 10);
    return v;
}

static void
name_of(const keel_disk *d, char *out, size_t cap, uint64_t hi, uint64_t lo)
{
    snprintf(out, cap, "%s/%016" PRIx64 "%016" PRIx64, d->dir, hi, lo);
}

/* A final name: 32 hex digits. */
static int
is_page_name(const char *name)
{
    size_t n = 0;
    for (; name[n]; n++)
        if (!((name[n] >= '0' && name[n] <= '9') ||
              (name[n] >= 'a' && name[n] <= 'f')))
            return 0;
    return n == 32;
}

typedef struct scan {
    keel_disk *d;
    struct ent { int64_t mtime; char name[33]; } *e;
    size_t n, cap;
    uint64_t bytes;
} scan;

static int
scan_one(const char *name, void *arg)
{
    scan *s = arg;
    if (!is_page_name(name))
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", s->d->dir, name);
    keel_file_info fi;
    if (keel__os->stat_path(path, &fi) != 0)
        return 0; /* removed meanwhile */
    s->bytes += fi.size;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        struct ent *e = keel__realloc(s->e, cap * sizeof *e);
        if (!e)
            return 0; /* counted, not listed: evicted by a later pass */
        s->e = e;
        s->cap = cap;
    }
    s->e[s->n].mtime = fi.mtime_ns;
    memcpy(s->e[s->n].name, name, 33);
    s->n++;
    names_add(s->d, hex64(name), hex64(name + 16));
    return 0;
}

static int
by_age(const void *a, const void *b)
{
    const struct ent *x = a, *y = b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Counts the directory; with evict, removes the oldest files until it
** holds at most 3/4 of the limit. */
static void
rescan(keel_disk *d, int evict)
{
    scan s = {.d = d};
    keel__os->list_dir(d->dir, scan_one, &s);
    if (evict && d->limit && s.bytes > d->limit) {
        qsort(s.e, s.n, sizeof *s.e, by_age);
        uint64_t goal = d->limit / 4 * 3;
        for (size_t i = 0; i < s.n && s.bytes > goal; i++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", d->dir, s.e[i].name);
            if (keel__os->unlink(path) == 0) {
                s.bytes -= KEEL_MIN(s.bytes, (uint64_t)KEEL_DISK_PAGE);
                __atomic_add_fetch(&d->evicted, 1, __ATOMIC_RELAXED);
            }
        }
    }
    KEEL_STORE_RELAXED(&d->bytes, s.bytes);
    keel__free(s.e);
}

int
keel__disk_open(const char *dir, uint64_t limit, keel_disk **out)
{
    *out = NULL;
    int err = keel__os->mkdir(dir);
    keel_file_info fi;
    if (!err)
        err = keel__os->stat_path(dir, &fi);
    if (!err && fi.type != KEEL_FILE_DIRECTORY)
        err = -ENOTDIR;
    if (err)
        return keel__fail(KEEL_EIO, "cannot use %s as the cache directory "
                          "(%s)\nhelp: set keel_options.cache_dir or "
                          "KEEL_CACHE_DIR to a directory this process may "
                          "write, or leave both unset for no disk cache",
                          dir, strerror(-err));
    /* Invariant (4), as ssh asks of ~/.ssh: another user who owns the
     * directory, or may write it, could read, empty or fill the cache. */
    uint32_t me = keel__euid();
    if (fi.uid != me)
        return keel__fail(KEEL_EINVAL, "cannot use %s as the cache directory: "
                          "it belongs to user %u, not to this process's user "
                          "%u, who could read or change the index's pages "
                          "there\nhelp: use a directory of your own (or one "
                          "that does not exist yet: keel creates it, mode "
                          "0700), or leave cache_dir and KEEL_CACHE_DIR unset",
                          dir, (unsigned)fi.uid, (unsigned)me);
    if (fi.mode & 022)
        return keel__fail(KEEL_EINVAL, "cannot use %s as the cache directory: "
                          "other users may write it (mode %04o), so they "
                          "could remove or replace the index's pages there"
                          "\nhelp: chmod go-w %s, or use a directory of your "
                          "own that only you may write", dir,
                          (unsigned)fi.mode, dir);
    keel_disk *d = keel__calloc(1, sizeof *d);
    if (!d || !(d->dir = keel__malloc(strlen(dir) + 1))) {
        keel__free(d);
        return keel__fail(KEEL_ENOMEM, "out of memory opening the cache "
                          "directory %s\nhelp: free memory", dir);
    }
    memcpy(d->dir, dir, strlen(dir) + 1);
    d->limit = limit;
    pthread_mutex_init(&d->evict_lock, NULL);
    pthread_mutex_init(&d->names_lock, NULL);
    rescan(d, 1);
    *out = d;
    return KEEL_OK;
}

void
keel__disk_close(keel_disk *d)
{
    if (!d)
        return;
    pthread_mutex_destroy(&d->evict_lock);
    pthread_mutex_destroy(&d->names_lock);
    keel__free(d->names);
    keel__free(d->dir);
    keel__free(d);
}

int
keel__disk_get(keel_disk *d, uint64_t hi, uint64_t lo, void *buf)
{
    if (!names_has(d, hi, lo))
        return 0; /* invariant (3) */
    char path[4200];
    name_of(d, path, sizeof path, hi, lo);
    int fd = keel__os->open(path, KEEL_OPEN_READ);
    if (fd < 0)
        return 0;
    ssize_t n = keel__os->pread(fd, buf, KEEL_DISK_PAGE, 0);
    keel__os->close(fd);
    if (n != (ssize_t)KEEL_DISK_PAGE)
        return 0;
    XXH128_hash_t h = XXH3_128bits(buf, KEEL_DISK_PAGE);
    if (h.high64 != hi || h.low64 != lo) {
        keel__os->unlink(path); /* damaged: fetched and written again */
        return 0;
    }
    keel__os->touch(path); /* recently used: evicted last */
    return 1;
}

void
keel__disk_put(keel_disk *d, uint64_t hi, uint64_t lo, const void *buf)
{
    char path[4200], tmp[4300];
    name_of(d, path, sizeof path, hi, lo);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%d-%" PRIu64, d->dir, (int)getpid(),
             __atomic_add_fetch(&d->tmp_seq, 1, __ATOMIC_RELAXED));
    /* Invariant (4): the pages are the index's vectors, a user's data. */
    int fd = keel__os->open(tmp, KEEL_OPEN_WRITE | KEEL_OPEN_CREATE |
                                     KEEL_OPEN_PRIVATE);
    if (fd < 0)
        return;
    ssize_t n = keel__os->pwrite(fd, buf, KEEL_DISK_PAGE, 0);
    keel__os->close(fd);
    if (n != (ssize_t)KEEL_DISK_PAGE || keel__os->rename(tmp, path) != 0) {
        keel__os->unlink(tmp);
        return;
    }
    names_add(d, hi, lo);
    uint64_t b = __atomic_add_fetch(&d->bytes, KEEL_DISK_PAGE,
                                    __ATOMIC_RELAXED);
    if (d->limit && b > d->limit && pthread_mutex_trylock(&d->evict_lock) == 0) {
        rescan(d, 1);
        pthread_mutex_unlock(&d->evict_lock);
    }
}

uint64_t
keel__disk_bytes(const keel_disk *d)
{
    return KEEL_LOAD_RELAXED(&d->bytes);
}

uint64_t
keel__disk_evicted(const keel_disk *d)
{
    return KEEL_LOAD_RELAXED(&d->evicted);
}
