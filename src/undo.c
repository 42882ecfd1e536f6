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
** File: "KEELUNDO" (8), version u32 = 1, reserved u32, commit hash u64,
** reserved u64; then entries: slot u32, words u32, words x u32 (level-0 list,
** then each upper list), xxh3-64 of the entry's bytes seeded with the commit
** hash.
*/
#include "store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#define UNDO_MAGIC "KEELUNDO"
#define UNDO_HDR   32u


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

/* Opens a fresh log for the current commit. Called with undo_lock held. */
static int
undo_begin(keel_store *st)
{
    char *p = keel__path_plus(st->path, ".undo");
    if (!p)
        return KEEL_ENOMEM;
    keel__os->unlink(p);
    int fd = keel__os->open(p, KEEL_OPEN_WRITE | KEEL_OPEN_CREATE);
    keel__free(p);
    if (fd < 0)
        return KEEL_EIO;
    uint8_t hdr[UNDO_HDR] = {0};
    memcpy(hdr, UNDO_MAGIC, 8);
    keel__put32(hdr + 8, 1);
    st->undo_identity = keel__undo_identity(&st->committed);
    keel__put64(hdr + 16, st->undo_identity);
    if (keel__os->pwrite(fd, hdr, UNDO_HDR, 0) != UNDO_HDR) {
        keel__os->close(fd);
        return KEEL_EIO;
    }
    st->undo_fd = fd;
    st->undo_end = UNDO_HDR;
    st->undo_synced_at = now_s();
    return KEEL_OK;
}

int
keel__undo_save(keel_store *st, uint64_t slot)
{
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
    uint32_t level = (uint32_t)(KEEL_LOAD_ACQUIRE(keel__store_rec(st, slot)) & 0xFF);
    uint32_t words = st->g.M0 + level * st->g.M;
    size_t bytes = 8 + 4 * (size_t)words + 8;
    uint8_t *e = keel__malloc(bytes);
    if (!e) {
        rc = KEEL_ENOMEM;
        goto out;
    }
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
    keel__free(e);
    if (n != (ssize_t)bytes) {
        rc = KEEL_EIO;
        goto out;
    }
    st->undo_end += bytes;
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
    st->undo_saved[st->undo_saved_n++] = (uint32_t)slot;
    __atomic_fetch_or(&bits[i >> 6], bit, __ATOMIC_RELEASE);
    double t = now_s();
    if (t - st->undo_synced_at >= 1.0) { /* rule (4) */
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
    if (st->undo_fd < 0)
        return KEEL_OK;
    return keel__os->sync(st->undo_fd);
}

void
keel__undo_end(keel_store *st)
{
    if (st->undo_fd < 0)
        return;
    char *p = keel__path_plus(st->path, ".undo");
    if (p) {
        keel__os->unlink(p);
        keel__free(p);
    }
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

int
keel__undo_recover(keel_store *st)
{
    char *p = keel__path_plus(st->path, ".undo");
    if (!p)
        return KEEL_ENOMEM;
    int fd = keel__os->open(p, KEEL_OPEN_READ);
    if (fd < 0) {
        keel__free(p);
        return KEEL_OK; /* no log: nothing to undo */
    }
    keel_file_info fi;
    uint8_t *buf = NULL;
    int rc = KEEL_OK, applied = 0;
    if (keel__os->stat(fd, &fi) != 0 || fi.size < UNDO_HDR ||
        fi.size > ((uint64_t)1 << 40))
        goto done;
    buf = keel__malloc((size_t)fi.size);
    if (!buf) {
        rc = KEEL_ENOMEM;
        goto done;
    }
    if (keel__os->pread(fd, buf, (size_t)fi.size, 0) != (ssize_t)fi.size ||
        memcmp(buf, UNDO_MAGIC, 8) != 0 || keel__get32(buf + 8) != 1)
        goto done;
    uint64_t ident = keel__get64(buf + 16);
    if (ident != keel__undo_identity(&st->work))
        goto done; /* rule (3): made for another commit */
    uint8_t *seen[KEEL_MAX_SEGMENTS] = {0};
    for (uint64_t off = UNDO_HDR; off + 16 <= fi.size;) {
        uint32_t slot = keel__get32(buf + off);
        uint32_t words = keel__get32(buf + off + 4);
        uint64_t bytes = 16 + 4ull * words;
        if (words > st->g.M0 + KEEL_MAX_LEVELS * st->g.M ||
            off + bytes > fi.size ||
            XXH3_64bits_withSeed(buf + off, bytes - 8, ident) !=
                keel__get64(buf + off + bytes - 8))
            break; /* torn: the rest never reached the file */
        if (slot < st->work.count) {
            uint64_t i;
            uint32_t k = keel__slot_segment(&st->g, slot, &i);
            if (!seen[k])
                seen[k] = keel__calloc((size_t)st->seg[k].slots, 1);
            if (seen[k] && !seen[k][i]) {
                seen[k][i] = 1;
                const uint8_t *w = buf + off + 8;
                uint32_t level = (uint32_t)(KEEL_LOAD_RELAXED(keel__store_rec(st, slot)) & 0xFF);
                for (uint32_t lv = 0; lv <= level; lv++) {
                    uint32_t len, n = lv ? st->g.M : st->g.M0;
                    uint32_t *list = keel__store_list(st, slot, lv, &len);
                    for (uint32_t j = 0; j < n && words; j++, w += 4, words--)
                        if (list)
                            KEEL_STORE_RELAXED(&list[j], keel__get32(w));
                }
                applied++;
            }
        }
        off += bytes;
    }
    for (uint32_t k = 0; k < KEEL_MAX_SEGMENTS; k++)
        keel__free(seen[k]);
    if (applied && keel__os->sync(st->fd) != 0)
        rc = keel__fail(KEEL_EIO, "syncing %s after undoing unflushed graph "
                        "changes failed\nhelp: check the disk, then open the "
                        "index again", st->path);
done:
    keel__free(buf);
    keel__os->close(fd);
    if (rc == KEEL_OK)
        keel__os->unlink(p);
    keel__free(p);
    return rc;
}
