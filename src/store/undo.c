/* undo.c -- the undo log: neighbour lists of committed nodes as they were at
** the last commit, so a crash after adds that changed them cannot cut
** committed vectors off the graph.
**
** Adds change the lists of committed nodes in place (back-links, pruning).
** Those changes are derived data, but a crash before the next commit rolls
** the adds back while the changed lists stay: a committed node could then
** have dropped links to committed neighbours in favour of nodes that no
** longer exist. So, before the first change to a committed node's lists since
** the last commit, its lists are appended to <index>.undo; recovery writes
** them back.
**
**   (1) An entry is written (pwrite, through the OS layer) before the node's
**       lists change, so a killed process always leaves it in the file.
**   (2) A flush syncs the undo file before it syncs the index, so the entries
**       are durable before a commit depends on the changed lists.
**   (3) The log names the commit it undoes to (a hash of the committed
**       state); recovery applies it only to that commit, and a completed flush
**       removes it. Entries are checksummed; recovery stops at the first torn
**       one and applies the first entry of each slot.
**   (4) Between flushes the log is also synced at most once a second while it
**       grows, which narrows, but cannot close, the window in which the
**       system writes changed list pages back before the entries that undo
**       them (power loss only; a killed process loses nothing).
**
**   (5) The log is found through the index, not its name: before the log's
**       first entry, the log's absolute path and a tag (a random word, also
**       in the log's header) go into the live page, and the index is synced.
**       A writer open looks for the log at the path the live page names,
**       then beside the name it was opened by (the index and its log moved
**       together: a renamed directory), and applies the first log whose
**       tag and commit hash match.
**   (6) A save that cannot write its entry fails, and the caller leaves the
**       node's lists as they are (the add fails whole): no list of a
**       committed node changes unless its entry is in the log.
**   (7) A log belongs to one file: its header holds the st_dev and st_ino
**       of the index file it was made for (a hard link or a rename keeps
**       them; a copy does not). Applying it to any file whose bytes carry
**       its tag and commit is correct (a copy of the same commit has the
**       same committed lists, and every entry is a committed list, so the
**       log of a writer still running applies too), but only the file it
**       belongs to removes it: opening a copy of a crashed index never uses
**       up the original's log, nor touches a running writer's. A log whose
**       file is gone stays until a writer at its name replaces it.
**   (8) A failed add restores the lists it changed (build.c): those of
**       committed nodes it saved first from the log entries it wrote
**       (keel__undo_mark, keel__undo_restore).
**   (9) An index in memory keeps its log in an anonymous file: no crash
**       leaves anything to undo, so it is never synced, announced or
**       recovered, but a failed add restores from it and keel_backup and
**       keel_publish read the commit's lists from it (keel__undo_log_copy),
**       as they do from a file's log.
**
** File: "KEELUNDO" (8), version u32 = 2, reserved u32, commit hash u64,
** tag u64, owner st_dev u64, owner st_ino u64; then entries: slot u32,
** words u32, words x u32 (level-0 list, then each upper list), xxh3-64 of
** the entry's bytes seeded with the commit hash. Version 1 logs (32-byte
** header, no owner; tag 0 before tags) are read too: the log beside the
** name the index is opened by belongs to it.
*/
#include "store/undo.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define UNDO_MAGIC "KEELUNDO"
#define UNDO_HDR   48u  /* version 2 */
#define UNDO_HDR_1 32u  /* version 1 */


uint64_t
keel__undo_identity(const keel_header *h)
{
    uint64_t f[7] = {h->count, h->entry, h->max_level, h->epoch, h->deleted,
                     h->next_id, h->heap_used};
    return XXH3_64bits(f, sizeof f);
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* How messages name the log: its path, or "(in memory)" for an index in
** memory, whose log has none (rule 9). */
#define LOG_IN_MEMORY "(in memory)"
static const char *
log_name(const keel_store *st)
{
    return st->memory ? LOG_IN_MEMORY : st->undo_path;
}

/* The message of a failed call on the log: KEEL_EFULL for a full disk,
** KEEL_EIO otherwise; err is -errno. full: the log's name (log_name). */
static int
undo_fail(int err, const char *what, const char *full)
{
    /* A path near PATH_MAX would push the help line out of the message. */
    char path[600];
    size_t len = strlen(full);
    if (len < sizeof path)
        snprintf(path, sizeof path, "%s", full);
    else
        snprintf(path, sizeof path, "(%zu bytes) ...%s", len,
                 full + len - (sizeof path - 40));
    if (err == -ENOSPC || err == -EDQUOT)
        return keel__fail(KEEL_EFULL,
                          "%s the undo log %s failed: no space left on the "
                          "device\nhelp: free disk space, then retry the add; "
                          "the index keeps its last flush and the adds since",
                          what, path);
    if (err == -ENAMETOOLONG)
        return keel__fail(KEEL_EIO,
                          "%s the undo log %s failed: the path is too long\n"
                          "help: move the index to a shorter path (its undo "
                          "log is its path plus \".undo\"); the index keeps its "
                          "last flush and the adds since", what, path);
    if (strcmp(full, LOG_IN_MEMORY) == 0)
        return keel__fail(KEEL_EIO,
                          "%s the undo log %s failed: %s\nhelp: adds to an "
                          "index in memory keep an undo log in memory: free "
                          "memory or raise the process's limits (open files, "
                          "file size), then retry the add; the index keeps its "
                          "last flush and the adds since", what, path,
                          strerror(-err));
    return keel__fail(KEEL_EIO,
                      "%s the undo log %s failed: %s\nhelp: adds to an index "
                      "with flushed vectors keep an undo log beside it: make "
                      "its directory writable (or remove a stale log owned by "
                      "another user) and check the disk; the index keeps its "
                      "last flush and the adds since", what, path,
                      strerror(-err));
}

/* A tag no other log has: a hash of the time and this store's address. */
static uint64_t
new_tag(const keel_store *st)
{
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t f[4] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec,
                     (uint64_t)(uintptr_t)st,
                     __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED)};
    uint64_t t = XXH3_64bits(f, sizeof f);
    return t ? t : 1;
}

/* Rule (5): names the log in the live page, then syncs the index so the
** name is durable before any list it guards changes. */
static int
undo_announce(keel_store *st)
{
    size_t len = strlen(st->undo_path);
    uint8_t *lp = st->live;
    KEEL_STORE_RELAXED((uint64_t *)(void *)(lp + LO_UNDO_TAG), (uint64_t)0);
    KEEL_STORE_RELAXED((uint32_t *)(void *)(lp + LO_UNDO_PATH_LEN),
                       (uint32_t)len);
    memcpy(lp + LO_UNDO_PATH, st->undo_path, len);
    KEEL_STORE_RELEASE((uint64_t *)(void *)(lp + LO_UNDO_TAG), st->undo_tag);
    int err = keel__os->sync(st->fd);
    if (err) {
        st->poisoned = 1; /* commit.c invariant (7) */
        return keel__fail(err == -ENOSPC ? KEEL_EFULL : KEEL_EIO,
                          "syncing %s before its first unflushed graph change "
                          "failed: %s\nhelp: check the disk, then close the "
                          "index and open it again; it reopens at its last "
                          "flush", st->path, strerror(-err));
    }
    return KEEL_OK;
}

/* Where this writer's log goes: beside the index, under the absolute path
** of the name it was opened by, fixed at open (a rename while open moves
** nothing: rule (5) finds the log where it is). Placed again only when the
** store takes another name (compaction renames its new file over the
** index's name). */
static int
undo_place(keel_store *st)
{
    if (st->undo_for && strcmp(st->undo_for, st->path) == 0)
        return KEEL_OK;
    char real[PATH_MAX];
    const char *base = keel__os->resolve(st->path, real, sizeof real) == 0
                           ? real : st->path;
    char *p = keel__path_plus(base, ".undo");
    char *f = keel__path_plus(st->path, "");
    if (!p || !f) {
        keel__free(p);
        keel__free(f);
        return KEEL_ENOMEM;
    }
    keel__free(st->undo_path);
    keel__free(st->undo_for);
    st->undo_path = p;
    st->undo_for = f;
    return KEEL_OK;
}

/* A new log's header for the current commit, in hdr (UNDO_HDR bytes; the
** owner's st_dev and st_ino left zero); sets the store's identity and tag. */
static void
undo_header(keel_store *st, uint8_t *hdr)
{
    memset(hdr, 0, UNDO_HDR);
    memcpy(hdr, UNDO_MAGIC, 8);
    keel__put32(hdr + 8, 2);
    st->undo_identity = keel__undo_identity(&st->committed);
    st->undo_tag = new_tag(st);
    keel__put64(hdr + 16, st->undo_identity);
    keel__put64(hdr + 24, st->undo_tag);
}

/* An in-memory index's log: an anonymous file, never synced or announced
** (no crash leaves anything to undo), read by a failed add's restore, by
** keel_backup and by keel_publish, which need the commit's lists. */
static int
undo_begin_memory(keel_store *st)
{
    int fd = keel__os->memfd("keel-undo");
    if (fd < 0)
        return undo_fail(fd, "creating", LOG_IN_MEMORY);
    uint8_t hdr[UNDO_HDR];
    undo_header(st, hdr);
    ssize_t n = keel__os->pwrite(fd, hdr, UNDO_HDR, 0);
    if (n != UNDO_HDR) {
        keel__os->close(fd);
        return undo_fail(n < 0 ? (int)n : -EIO, "writing", LOG_IN_MEMORY);
    }
    st->undo_fd = fd;
    st->undo_end = UNDO_HDR;
    st->undo_synced_at = now_s();
    return KEEL_OK;
}

/* Opens a fresh log for the current commit. Called with undo_lock held. */
static int
undo_begin(keel_store *st)
{
    /* Room for the largest entry, and at least 64 KiB to read entries back
     * a buffer at a time (keel__undo_restore allocates nothing). */
    if (!st->undo_buf) {
        size_t cap = 16 + 4 * ((size_t)st->g.M0 +
                               (KEEL_MAX_LEVELS - 1) * (size_t)st->g.M);
        cap = KEEL_MAX(cap, (size_t)64 << 10);
        if (!(st->undo_buf = keel__malloc(cap)))
            return KEEL_ENOMEM;
        st->undo_buf_cap = cap;
    }
    if (st->memory)
        return undo_begin_memory(st);
    int rc = undo_place(st);
    if (rc)
        return rc;
    const char *p = st->undo_path;
    if (strlen(p) >= KEEL_UNDO_PATH_MAX || strlen(p) >= PATH_MAX)
        return undo_fail(-ENAMETOOLONG, "creating", p);
    keel__os->unlink(p);
    int fd = keel__os->open(p, KEEL_OPEN_WRITE | KEEL_OPEN_CREATE);
    if (fd < 0)
        return undo_fail(fd, "creating", p);
    uint8_t hdr[UNDO_HDR];
    undo_header(st, hdr);
    keel_file_info me; /* rule (7): the file the log belongs to */
    int err = keel__os->stat(st->fd, &me);
    if (!err) {
        keel__put64(hdr + 32, me.dev);
        keel__put64(hdr + 40, me.ino);
        ssize_t n = keel__os->pwrite(fd, hdr, UNDO_HDR, 0);
        err = n < 0 ? (int)n : n != UNDO_HDR ? -EIO : keel__os->sync(fd);
    }
    rc = err ? undo_fail(err, "writing", p) : undo_announce(st);
    if (rc) {
        keel__os->close(fd);
        keel__os->unlink(p);
        return rc;
    }
    st->undo_fd = fd;
    st->undo_end = UNDO_HDR;
    st->undo_synced_at = now_s();
    return KEEL_OK;
}

int
keel__undo_save(keel_store *st, uint64_t slot, int *wrote)
{
    *wrote = 0;
    uint64_t i;
    uint32_t k = keel__slot_segment(&st->g, slot, &i);
    uint64_t bit = (uint64_t)1 << (i & 63);
    uint64_t *bits = KEEL_LOAD_ACQUIRE(&st->saved_bits[k]);
    if ((bits && (KEEL_LOAD_ACQUIRE(&bits[i >> 6]) & bit)) ||
        keel__mutant == KEEL_MUT_NO_UNDO)
        return KEEL_OK;
    pthread_mutex_lock(&st->undo_lock);
    int rc = KEEL_OK;
    bits = st->saved_bits[k];
    if (!bits) {
        bits = keel__calloc((size_t)((st->seg[k].slots + 63) / 64), 8);
        if (!bits) {
            rc = KEEL_ENOMEM;
            goto out;
        }
        KEEL_STORE_RELEASE(&st->saved_bits[k], bits);
    }
    if (bits[i >> 6] & bit)
        goto out;
    if (st->undo_fd < 0 && (rc = undo_begin(st)))
        goto out;
    if (st->undo_saved_n == st->undo_saved_cap) {
        size_t cap = st->undo_saved_cap ? st->undo_saved_cap * 2 : 1024;
        uint32_t *l = keel__realloc(st->undo_saved, cap * sizeof *l);
        if (!l) {
            rc = KEEL_ENOMEM;
            goto out;
        }
        st->undo_saved = l;
        st->undo_saved_cap = cap;
    }
    uint32_t level = (uint32_t)(KEEL_LOAD_ACQUIRE(keel__store_rec(st, slot)) & 0xFF);
    uint32_t words = st->g.M0 + level * st->g.M;
    size_t bytes = 8 + 4 * (size_t)words + 8;
    uint8_t *e = st->undo_buf;
    keel__put32(e, (uint32_t)slot);
    keel__put32(e + 4, words);
    uint8_t *w = e + 8;
    for (uint32_t lv = 0; lv <= level; lv++) {
        uint32_t len;
        const uint32_t *list = keel__store_list(st, slot, lv, &len);
        for (uint32_t j = 0; j < (lv ? st->g.M : st->g.M0); j++, w += 4)
            keel__put32(w, list ? KEEL_LOAD_RELAXED(&list[j]) : KEEL_EMPTY);
    }
    keel__put64(w, XXH3_64bits_withSeed(e, bytes - 8, st->undo_identity));
    ssize_t n = keel__os->pwrite(st->undo_fd, e, bytes, st->undo_end);
    if (n != (ssize_t)bytes) {
        /* Rule (6). A torn entry is written over by the next one. */
        rc = undo_fail(n < 0 ? (int)n : -EIO, "writing", log_name(st));
        goto out;
    }
    st->undo_end += bytes;
    *wrote = 1;
    st->undo_saved[st->undo_saved_n++] = (uint32_t)slot;
    __atomic_fetch_or(&bits[i >> 6], bit, __ATOMIC_RELEASE);
    double t = now_s();
    if (!st->memory && t - st->undo_synced_at >= 1.0) { /* rule (4) */
        keel__os->sync(st->undo_fd);
        st->undo_synced_at = t;
    }
out:
    pthread_mutex_unlock(&st->undo_lock);
    return rc;
}

int
keel__undo_sync(keel_store *st)
{
    if (st->undo_fd < 0 || st->memory)
        return KEEL_OK;
    return keel__os->sync(st->undo_fd);
}

void
keel__undo_end(keel_store *st)
{
    if (st->undo_fd < 0)
        return;
    if (!st->memory)
        keel__os->unlink(st->undo_path);
    keel__os->close(st->undo_fd);
    st->undo_fd = -1;
    for (size_t j = 0; j < st->undo_saved_n; j++) {
        uint64_t i;
        uint32_t k = keel__slot_segment(&st->g, st->undo_saved[j], &i);
        __atomic_fetch_and(&st->saved_bits[k][i >> 6],
                           ~((uint64_t)1 << (i & 63)), __ATOMIC_RELEASE);
    }
    st->undo_saved_n = 0;
}

/* Writes one entry's lists (words words at w) back into slot's lists. */
static void
undo_put(keel_store *st, uint32_t slot, const uint8_t *w, uint32_t words)
{
    uint32_t level = (uint32_t)(KEEL_LOAD_RELAXED(keel__store_rec(st, slot)) & 0xFF);
    for (uint32_t lv = 0; lv <= level; lv++) {
        uint32_t len, n = lv ? st->g.M : st->g.M0;
        uint32_t *list = keel__store_list(st, slot, lv, &len);
        for (uint32_t j = 0; j < n && words; j++, w += 4, words--)
            if (list)
                KEEL_STORE_RELAXED(&list[j], keel__get32(w));
    }
}

/* The size of the whole entry at e (size bytes left) if it is intact, else
** 0 (torn: the rest never reached the file). */
static uint64_t
undo_entry(const keel_geometry *g, const uint8_t *e, uint64_t size,
           uint64_t ident)
{
    if (size < 16)
        return 0;
    uint32_t words = keel__get32(e + 4);
    uint64_t bytes = 16 + 4ull * words;
    if (words > g->M0 + KEEL_MAX_LEVELS * g->M || bytes > size ||
        XXH3_64bits_withSeed(e, bytes - 8, ident) != keel__get64(e + bytes - 8))
        return 0;
    return bytes;
}

/* KEEL_OK if buf (size bytes) starts a log of a version this keel reads;
** *hdr_len, *ident (the commit hash it undoes to) and *tag. */
static int
undo_log_header(const uint8_t *buf, uint64_t size, uint64_t *hdr_len,
                uint64_t *ident, uint64_t *tag)
{
    if (size < UNDO_HDR_1 || memcmp(buf, UNDO_MAGIC, 8) != 0)
        return KEEL_ENOTINDEX;
    uint32_t version = keel__get32(buf + 8);
    uint64_t hdr = version == 2 ? UNDO_HDR : UNDO_HDR_1;
    if ((version != 1 && version != 2) || size < hdr)
        return KEEL_ENOTINDEX;
    *hdr_len = hdr;
    *ident = keel__get64(buf + 16);
    *tag = keel__get64(buf + 24);
    return KEEL_OK;
}

/* Calls fn for the first intact entry of each slot below count, in log
** order, stopping at the first torn entry or when fn returns nonzero
** (which it returns). */
static int
undo_log_walk(const keel_geometry *g, const uint8_t *buf, uint64_t size,
              uint64_t hdr_len, uint64_t ident, uint64_t count,
              keel_undo_entry_fn fn, void *arg)
{
    /* One bit per slot below count: a slot's first entry is its committed
     * state; later ones (none today) would not be. */
    uint8_t *seen = keel__calloc((size_t)(count / 8 + 1), 1);
    if (!seen)
        return KEEL_ENOMEM;
    int rc = 0;
    uint64_t bytes;
    for (uint64_t off = hdr_len;
         !rc && (bytes = undo_entry(g, buf + off, size - off, ident));
         off += bytes) {
        uint32_t slot = keel__get32(buf + off);
        if (slot >= count || (seen[slot / 8] >> (slot % 8) & 1))
            continue;
        seen[slot / 8] |= (uint8_t)(1u << (slot % 8));
        rc = fn(slot, buf + off + 8, keel__get32(buf + off + 4), arg);
    }
    keel__free(seen);
    return rc;
}

int
keel__undo_entry_places(const keel_store *st, const keel_header *h,
                        uint32_t slot, uint32_t n_words, uint64_t off[2],
                        uint64_t len[2])
{
    const keel_geometry *g = &st->g;
    uint64_t i;
    uint32_t k = keel__slot_segment(g, slot, &i);
    keel_seg_layout L;
    keel__seg_layout(g, k, &L);
    uint64_t rec = h->seg_off[k] + L.rec_off + i * g->rec_bytes;
    uint8_t head[8];
    ssize_t r = keel__os->pread(st->fd, head, 8, rec);
    if (r != 8)
        return keel__fail(KEEL_EIO, "reading slot %u's record in %s: %s\n"
                          "help: check the file and its disk", slot, st->path,
                          r < 0 ? strerror((int)-r) : "short read");
    uint64_t hw = keel__get64(head);
    uint32_t level = (uint32_t)(hw & 0xFF);
    if (level >= KEEL_MAX_LEVELS || n_words != g->M0 + level * g->M)
        return KEEL_CORRUPT("the undo log's entry for slot %u holds %u words "
                            "where its level %u needs %u", slot, n_words,
                            level, g->M0 + level * g->M);
    uint64_t ref = hw >> 16;
    uint32_t c = (uint32_t)(ref >> 32);
    if (level && c >= h->heap_chunks)
        return KEEL_CORRUPT("slot %u's heap entry is in chunk %u of %u", slot,
                            c, h->heap_chunks);
    off[0] = rec + 8;
    len[0] = 4ull * g->M0;
    off[1] = level ? h->heap_off[c] + (ref & 0xFFFFFFFFu) : 0;
    len[1] = level ? 4ull * g->M * level : 0;
    return KEEL_OK;
}

int
keel__undo_log_copy(keel_store *st, uint8_t **buf, uint64_t *size)
{
    *buf = NULL;
    *size = 0;
    int rc = KEEL_OK;
    pthread_mutex_lock(&st->undo_lock);
    if (st->undo_fd >= 0 && st->undo_end > 0) {
        uint8_t *p = keel__malloc((size_t)st->undo_end);
        ssize_t n = p ? keel__os->pread(st->undo_fd, p, (size_t)st->undo_end, 0)
                      : 0;
        if (!p) {
            rc = KEEL_ENOMEM;
        } else if (n != (ssize_t)st->undo_end) {
            /* Under undo_lock nothing replaces the log: a failed read. */
            keel__free(p);
            rc = undo_fail(n < 0 ? (int)n : -EIO, "reading",
                           log_name(st));
        } else {
            *buf = p;
            *size = st->undo_end;
        }
    }
    pthread_mutex_unlock(&st->undo_lock);
    return rc;
}

int
keel__undo_commit_entries(const keel_geometry *g, const keel_header *h,
                          const uint8_t *buf, uint64_t size,
                          keel_undo_entry_fn fn, void *arg)
{
    uint64_t hdr, ident, tag;
    if (undo_log_header(buf, size, &hdr, &ident, &tag) != KEEL_OK ||
        ident != keel__undo_identity(h))
        return KEEL_OK;
    return undo_log_walk(g, buf, size, hdr, ident, h->count, fn, arg);
}

typedef struct undo_applying {
    keel_store *st;
    uint64_t applied;
} undo_applying;

static int
apply_one(uint32_t slot, const uint8_t *words, uint32_t n_words, void *arg)
{
    undo_applying *a = arg;
    undo_put(a->st, slot, words, n_words);
    a->applied++;
    return 0;
}

/* Writes back the first entry of each slot of the entries in buf[off, size)
** (made for commit hash ident); *applied: the number of slots restored. */
static int
undo_apply(keel_store *st, const uint8_t *buf, uint64_t off, uint64_t size,
           uint64_t ident, uint64_t *applied)
{
    undo_applying a = {st, 0};
    int rc = undo_log_walk(&st->g, buf, size, off, ident, st->work.count,
                           apply_one, &a);
    *applied = a.applied;
    return rc;
}

/* Tries the log at p for a file whose live page carries tag (rules 5 and
** 7): *found 0 if there is none there or it carries another tag. Else
** applies it if it was made for this file's commit, and removes it if it
** belongs to this file (me). */
static int
undo_try(keel_store *st, const char *p, uint64_t tag,
         const keel_file_info *me, int *found)
{
    *found = 0;
    int fd = keel__os->open(p, KEEL_OPEN_READ);
    if (fd < 0)
        return KEEL_OK; /* no log here */
    keel_file_info fi;
    uint8_t *buf = NULL;
    int rc = KEEL_OK;
    if (keel__os->stat(fd, &fi) != 0 || !fi.is_regular ||
        fi.size < UNDO_HDR_1 || fi.size > ((uint64_t)1 << 40))
        goto done;
    buf = keel__malloc((size_t)fi.size);
    if (!buf) {
        rc = KEEL_ENOMEM;
        goto done;
    }
    if (keel__os->pread(fd, buf, (size_t)fi.size, 0) != (ssize_t)fi.size ||
        memcmp(buf, UNDO_MAGIC, 8) != 0)
        goto done;
    uint64_t hdr, ident, log_tag;
    if (undo_log_header(buf, fi.size, &hdr, &ident, &log_tag) ||
        log_tag != tag)
        goto done; /* rule (5): another index's log, or another cycle's */
    uint32_t version = keel__get32(buf + 8);
    *found = 1;
    /* Rule (7). A version 1 log belongs to the name it is beside. */
    int owner = version == 2 ? keel__get64(buf + 32) == me->dev &&
                                   keel__get64(buf + 40) == me->ino
                             : strcmp(p, st->undo_path) == 0;
    uint64_t applied = 0;
    if (ident == keel__undo_identity(&st->work)) /* rule (3) */
        rc = undo_apply(st, buf, hdr, fi.size, ident, &applied);
    if (rc == KEEL_OK && applied && keel__os->sync(st->fd) != 0)
        rc = keel__fail(KEEL_EIO, "syncing %s after undoing unflushed graph "
                        "changes failed\nhelp: check the disk, then open the "
                        "index again", st->path);
    if (rc == KEEL_OK && owner)
        keel__os->unlink(p);
done:
    keel__free(buf);
    keel__os->close(fd);
    return rc;
}

int
keel__undo_recover(keel_store *st)
{
    if (st->memory)
        return KEEL_OK; /* no crash to undo: memory goes with the process */
    int rc = undo_place(st);
    if (rc)
        return rc;
    keel_file_info me;
    if (keel__os->stat(st->fd, &me) != 0)
        memset(&me, 0, sizeof me); /* owns no log: applies, removes none */
    /* The log the live page names (rule 5), then the one beside the name
    ** the index was opened by: a file whose writers kept no tags (tag 0),
    ** or an index moved together with its log. */
    const uint8_t *lp = st->live;
    uint64_t tag = KEEL_LOAD_ACQUIRE((const uint64_t *)(const void *)(lp + LO_UNDO_TAG));
    uint32_t len = keel__get32(lp + LO_UNDO_PATH_LEN);
    char *named = NULL;
    if (tag != 0 && len > 0 && len < KEEL_UNDO_PATH_MAX) {
        if (!(named = keel__malloc((size_t)len + 1)))
            return KEEL_ENOMEM;
        memcpy(named, lp + LO_UNDO_PATH, len);
        named[len] = '\0';
    }
    int found = 0;
    if (named)
        rc = undo_try(st, named, tag, &me, &found);
    if (rc == KEEL_OK && !found &&
        (!named || strcmp(named, st->undo_path) != 0))
        rc = undo_try(st, st->undo_path, tag, &me, &found);
    keel__free(named);
    /* This file's lists are its commit's now: it needs no log. */
    if (rc == KEEL_OK && found)
        KEEL_STORE_RELEASE((uint64_t *)(void *)(st->live + LO_UNDO_TAG),
                           (uint64_t)0);
    return rc;
}

uint64_t
keel__undo_mark(keel_store *st)
{
    pthread_mutex_lock(&st->undo_lock);
    uint64_t m = st->undo_fd >= 0 ? st->undo_end : UNDO_HDR;
    pthread_mutex_unlock(&st->undo_lock);
    return m;
}

int
keel__undo_restore(keel_store *st, uint64_t mark)
{
    pthread_mutex_lock(&st->undo_lock);
    int rc = KEEL_OK;
    size_t cap = st->undo_buf_cap, have = 0;
    uint8_t *buf = st->undo_buf; /* made with the log */
    uint64_t pos = mark;
    if (st->undo_fd < 0 || st->undo_end <= mark)
        goto out;
    /* Entries are read a buffer at a time; one that does not fit whole
     * moves to the front and the rest of it is read after it. */
    while (pos + have < st->undo_end) {
        size_t want = (size_t)KEEL_MIN((uint64_t)(cap - have),
                                       st->undo_end - pos - have);
        ssize_t n = keel__os->pread(st->undo_fd, buf + have, want, pos + have);
        if (n <= 0) {
            rc = keel__fail(KEEL_EIO, "reading back the undo log %s to undo "
                            "a failed add failed: %s\nhelp: close the index "
                            "and open it again: it reopens at its last flush",
                            log_name(st), n < 0 ? strerror((int)-n)
                                                 : "it is shorter than written");
            goto fail;
        }
        have += (size_t)n;
        size_t off = 0;
        uint64_t bytes;
        while ((bytes = undo_entry(&st->g, buf + off, have - off,
                                   st->undo_identity))) {
            undo_put(st, keel__get32(buf + off), buf + off + 8,
                     keel__get32(buf + off + 4));
            off += (size_t)bytes;
        }
        if (off == 0 && have == cap)
            break; /* cannot happen: cap holds the largest entry */
        memmove(buf, buf + off, have - off);
        have -= off;
        pos += off;
    }
    goto out;
fail:
    /* The lists are not the call's starting ones, and only the log can say
     * what they were: no commit may include them (commit.c invariant 7); a
     * reopen recovers the last commit from the log. */
    st->poisoned = 1;
out:
    pthread_mutex_unlock(&st->undo_lock);
    return rc;
}

/* --- the committed lists of a commit, for copies of it --------------------- */

typedef struct lists_walk {
    const keel_store *st;
    const keel_header *h;
    keel_committed_list_fn fn;
    void *arg;
} lists_walk;

static int
lists_entry(uint32_t slot, const uint8_t *words, uint32_t n_words, void *arg)
{
    lists_walk *w = arg;
    uint64_t off[2], len[2];
    int rc = keel__undo_entry_places(w->st, w->h, slot, n_words, off, len);
    for (int j = 0; j < 2 && rc == KEEL_OK && len[j]; j++)
        rc = w->fn(off[j], len[j], words + (j ? len[0] : 0), w->arg);
    return rc;
}

/* The log a reader's writer keeps (the live page names it; another
** process may be the writer), or the one beside the index when it names
** none: its bytes in *buf (NULL when there is none). */
static int
reader_log(const keel_store *st, uint8_t **buf, uint64_t *size)
{
    *buf = NULL;
    *size = 0;
    const uint8_t *lp = st->pages + KEEL_LIVE_OFF;
    uint32_t len = KEEL_LOAD_ACQUIRE(
        (const uint32_t *)(const void *)(lp + LO_UNDO_PATH_LEN));
    uint64_t tag = KEEL_LOAD_ACQUIRE(
        (const uint64_t *)(const void *)(lp + LO_UNDO_TAG));
    char *path;
    if (tag && len && len < KEEL_UNDO_PATH_MAX) {
        path = keel__malloc((size_t)len + 1);
        if (path) {
            memcpy(path, lp + LO_UNDO_PATH, len);
            path[len] = '\0';
        }
    } else {
        path = keel__path_plus(st->path, ".undo");
    }
    if (!path)
        return KEEL_ENOMEM;
    int fd = keel__os->open(path, KEEL_OPEN_READ);
    keel__free(path);
    if (fd < 0)
        return KEEL_OK; /* none: no committed list changed yet */
    keel_file_info fi;
    int rc = KEEL_OK;
    if (keel__os->stat(fd, &fi) == 0 && fi.size &&
        fi.size <= ((uint64_t)1 << 40)) {
        uint8_t *p = keel__malloc((size_t)fi.size);
        if (!p)
            rc = KEEL_ENOMEM;
        else if (keel__os->pread(fd, p, (size_t)fi.size, 0) !=
                 (ssize_t)fi.size)
            keel__free(p); /* shorter than it was: a log being replaced */
        else
            *buf = p, *size = fi.size;
    }
    keel__os->close(fd);
    return rc;
}

int
keel__store_committed_lists(keel_store *st, const keel_header *h,
                            keel_committed_list_fn fn, void *arg)
{
    uint8_t *log = NULL;
    uint64_t size = 0;
    int rc = st->writer ? keel__undo_log_copy(st, &log, &size)
                        : reader_log(st, &log, &size);
    lists_walk w = {st, h, fn, arg};
    if (!rc && log)
        rc = keel__undo_commit_entries(&st->g, h, log, size, lists_entry, &w);
    keel__free(log);
    return rc;
}
