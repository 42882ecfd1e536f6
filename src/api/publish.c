/* publish.c -- keel_publish: a writer's last flush as a new version on S3.
**
** The published image of an index is its file as a reader of the last
** flush sees it, cut into 64 KiB pages: page 0 the committed header, page 1
** zero (one header copy is enough: nothing writes the image again), page 2
** a live page that routes through exactly the committed slots, then the
** file's bytes up to the committed file_end, of the regions the commit
** names (invariant 9). Pages are named by content
** (xxh3-128), so a page that did not change since the previous version is
** not sent again, and a page rewritten in place (neighbour lists, deleted
** epochs: format.md invariant 3) gets a new hash and is sent again.
**
** Invariants:
** (1) Objects are never overwritten. Packs are named by the xxh3-128 of
**     their bytes and created with If-None-Match: *, so a pack that exists
**     already holds exactly those bytes; manifests are created the same way.
** (2) A manifest is created only after every pack it names exists, so a
**     reader that finds manifest N finds all of N's bytes.
** (3) Version N+1 is the create of PREFIX/manifest/<N+1>. Of two publishers
**     racing for it exactly one succeeds; the other gets KEEL_ELOCKED. A
**     create that finds the manifest there byte for byte its own made it
**     itself, on a try whose answer was lost (the client retries after a
**     reset): that is its success, not a lost race.
** (4) An interrupted publish leaves only packs no manifest names; the next
**     publish takes the same version number and reuses those packs.
** (5) PREFIX/latest is a hint: publish follows it when it names a manifest,
**     then walks forward at most KEEL_VERSION_WALK versions; without a
**     usable hint, or past the walk, the listing of PREFIX/manifest/ says
**     which is the newest. A prefix whose listing cannot be read is not
**     published to: probing from 1 would make a second version 1 after a
**     prune, and the next prune would remove the newest data.
** (6) A pack is named by the xxh3-128 of its bytes seeded with the version
**     number it is written for. So no pack a publish of version N writes
**     can be named by a manifest below N: keel_prune, which removes only
**     packs that manifests it removes name, can never remove a pack an
**     in-flight publish of the next version counts on (prune.c).
** (7) Up to opt->parallel packs are queued and sent at once; the manifest
**     goes only after every queued pack has been sent (invariant 2).
**
** (8) The image holds the commit's neighbour lists, not the file's: adds
**     since the commit rewrite committed nodes' lists in place, and the undo
**     log holds each such node's committed lists (undo.c). Every entry of
**     the writer's log is laid over the pages it falls in, as keel_backup
**     does (backup.c step 3); the write lock keeps adds out meanwhile.
** (9) The image holds only the commit's regions: its segments, heap chunks
**     and id table. Regions the file holds and the commit no longer names
**     (id tables a grown one replaced) are zero in the image, so they are
**     never sent, and a reader's cache is complete once warm has read what
**     the commit names. Deleted epochs above the commit's (deletes since
**     the last flush) are zero in the image, as in a backup of the commit
**     (keel__commit_marks), and so are the slots past the commit's count
**     and the heap past its heap_used (adds since the commit, or ones a
**     writer dropped), and the id table's entries for those slots that no
**     committed probe passes (idtab_commit): the image holds the commit's
**     bytes, so adds since the last flush change no page of it.
**
** (10) A version is the same index as the one before it (identity,
**     dimensions, M, metric, precision, codes: keel__header_same_index), or
**     the caller asked to replace the index there (opt->replace); readers
**     never follow into another index (follow.c), they keep their version.
**
** (11) A reader's publish (keel_publish of a keel_open_reader handle of a
**     local file: another process may be writing it) is of a snapshot, as
**     keel_backup's is (backup.c). Its pages are read with the committed
**     lists of the log read before them laid over; a list whose change
**     began before a page was read has its entry in any log read after
**     (undo.c rule 1). So after the pages, the log is read again, and the
**     pages that a list saved since lies in are built again with it; then
**     again for those pages only, until a round finds no new list in the
**     pages it built (at most SETTLE_ROUNDS). A flush (the header words
**     change) replaces the log: that try commits nothing and the publish
**     starts over from the new snapshot (at most READER_TRIES). Pages of
**     a try that was dropped are packs no manifest names (invariant 4).
**
** (12) A publish whose image is the newest version's, page for page (the
**     same commit: an unchanged republish), makes no version: it sends no
**     pack (every page is one the version holds) and no manifest, and
**     reports that version. Only a hint that is missing or names another
**     version is written again. The image is still built and hashed: a
**     header alone does not tell two copies of one index apart.
**
** This module reads the index file through the store's descriptor (the OS
** layer) and sends bytes through the S3 client; on a writer it holds the
** handle's write lock throughout, so no flush or add changes the file
** under it; on a reader the handle's swap lock, as its searches do.
*/
#include "base/internal.h"
#include "api/api.h"
#include "store/store.h"
#include "api/publish.h"
#include "s3/s3.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#define PAGE        ((uint64_t)1 << KEEL_MAN_PAGE_LOG2)
#define PACK_DFLT   (8u << 20)
#define PENDING     0xFFFFFFFEu /* page entry's pack: in the pack being filled */
#define NAME_MAX_   1280
#define SETTLE_ROUNDS 32   /* a reader's rounds of rebuilt pages (11) */
#define READER_TRIES  16   /* commits a reader's publish starts over at */
#define AGAIN         (-1) /* a flush began: again from a new snapshot */

/* --- the image ------------------------------------------------------------ */

/* A committed list laid over the file's bytes (invariant 8). */
typedef struct patch {
    uint64_t off, len;
    size_t at;                /* its bytes: at arena + at */
} patch;

typedef struct patches {
    patch *p;
    size_t n, cap;
    uint8_t *arena;
    size_t used, room;
} patches;

static int
patch_list(uint64_t off, uint64_t len, const uint8_t *bytes, void *arg)
{
    patches *ps = arg;
    if (keel__grow(&ps->p, &ps->cap, ps->n, sizeof *ps->p))
        return KEEL_ENOMEM;
    if (ps->room - ps->used < len) {
        size_t room = KEEL_MAX(2 * ps->room, ps->used + (size_t)len + 4096);
        uint8_t *na = keel__realloc(ps->arena, room);
        if (!na)
            return KEEL_ENOMEM;
        ps->arena = na;
        ps->room = room;
    }
    memcpy(ps->arena + ps->used, bytes, (size_t)len);
    ps->p[ps->n++] = (patch){off, len, ps->used};
    ps->used += (size_t)len;
    return KEEL_OK;
}

static int
patch_cmp(const void *a, const void *b)
{
    const patch *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static void
patches_free(patches *ps)
{
    keel__free(ps->p);
    keel__free(ps->arena);
    memset(ps, 0, sizeof *ps);
}

/* The committed lists of commit h that the file no longer holds (the
** store's log of it), sorted by offset. */
static int
patches_of(keel_store *st, const keel_header *h, patches *ps)
{
    memset(ps, 0, sizeof *ps);
    int rc = keel__store_committed_lists(st, h, patch_list, ps);
    if (!rc && ps->n)
        qsort(ps->p, ps->n, sizeof *ps->p, patch_cmp);
    return rc;
}

/* Whether ps holds a patch at off. */
static int
patches_have(const patches *ps, uint64_t off)
{
    patch key = {off, 0, 0};
    return ps->n && bsearch(&key, ps->p, ps->n, sizeof *ps->p, patch_cmp);
}

/* Lays the patches over [off, off + n) of the image in buf. */
static void
patch_page(const patches *ps, uint64_t off, size_t n, uint8_t *buf)
{
    /* The first patch ending past off: lists never overlap. */
    size_t lo = 0, hi = ps->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ps->p[mid].off + ps->p[mid].len <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t k = lo; k < ps->n && ps->p[k].off < off + n; k++) {
        uint64_t a = KEEL_MAX(ps->p[k].off, off);
        uint64_t b = KEEL_MIN(ps->p[k].off + ps->p[k].len, off + n);
        memcpy(buf + (a - off), ps->arena + ps->p[k].at + (a - ps->p[k].off),
               (size_t)(b - a));
    }
}

/* The commit's regions (invariant 9), sorted by offset. */
typedef struct region {
    uint64_t off, len;
} region;

static int
region_cmp(const void *a, const void *b)
{
    const region *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

#define MAX_REGIONS (4 * KEEL_MAX_SEGMENTS + KEEL_MAX_HEAP_CHUNKS + 1)

/* Fills r (room for MAX_REGIONS) with the bytes commit h names, as
** keel_backup copies them (backup.c step 2): of each segment the headers,
** vectors, lists and codes of its committed slots; of the heap what
** heap_used covers; the id table. Slots and heap bytes past them (adds
** since the commit, or ones a writer rolled back) are not the commit's.
** Returns how many. */
static size_t
regions_of(const keel_store *st, const keel_header *h, region *r)
{
    const keel_geometry *g = &st->g;
    size_t n = 0;
    for (uint32_t k = 0; k < h->segments; k++) {
        keel_seg_layout L;
        keel__seg_layout(g, k, &L);
        uint64_t first = keel__seg_first_slot(g, k);
        uint64_t s = h->count > first ? KEEL_MIN(L.slots, h->count - first)
                                      : 0;
        uint64_t off = h->seg_off[k];
        if (s == 0)
            continue;
        r[n++] = (region){off, s * KEEL_SLOT_HDR_BYTES};
        r[n++] = (region){off + L.vec_off, s * g->vec_bytes};
        r[n++] = (region){off + L.rec_off, s * g->rec_bytes};
        if (L.code_off)
            r[n++] = (region){off + L.code_off, s * g->code_bytes};
    }
    uint32_t used = (uint32_t)(h->heap_used >> 32);
    for (uint32_t c = 0; c < h->heap_chunks && c <= used; c++) {
        uint64_t len = c < used ? keel__heap_chunk_bytes(g, c)
                                : (h->heap_used & 0xFFFFFFFFu);
        if (len)
            r[n++] = (region){h->heap_off[c], len};
    }
    if (h->idtab_offset)
        r[n++] = (region){h->idtab_offset,
                          KEEL_ALIGN_UP(4ull << h->idtab_log2,
                                        KEEL_REGION_ALIGN)};
    qsort(r, n, sizeof *r, region_cmp);
    return n;
}

/* Zeroes the bytes of [off, off + n) in buf that no region of r covers. */
static void
keep_regions(const region *r, size_t nr, uint64_t off, size_t n, uint8_t *buf)
{
    uint64_t at = off, end = off + n;
    for (size_t k = 0; k < nr && at < end; k++) {
        if (r[k].off + r[k].len <= at)
            continue;
        if (r[k].off > at)
            memset(buf + (at - off), 0,
                   (size_t)(KEEL_MIN(r[k].off, end) - at));
        at = KEEL_MAX(at, r[k].off + r[k].len);
    }
    if (at < end)
        memset(buf + (at - off), 0, (size_t)(end - at));
}

/* Invariant (9): the entries of [off, off + n) of commit h's id table, in
** buf, that name a slot past its count (an add since the commit, or one a
** writer rolled back) are empty in the image, unless a committed entry's
** probe passes them: an add since the commit took an entry empty at the
** commit, which no committed probe passes, so the image holds the
** commit's table whatever was added since. A probe of a committed entry
** at q passes every entry from its home to q, all of them taken; so p's
** run (the taken entries about it) holds every such q and its home. An
** entry a dropped add left naming a slot that holds another id now has
** that id's home, most likely outside the run: it keeps nothing. */
static void
idtab_commit(const keel_store *st, const keel_header *h, uint64_t off,
             size_t n, uint8_t *buf)
{
    uint64_t a = h->idtab_offset, bytes = 4ull << h->idtab_log2;
    if (!a || off + n <= a || off >= a + bytes)
        return;
    const keel_idtab *t = NULL;
    for (uint32_t i = 0; i < st->nidtabs; i++)
        if (st->idtabs[i].off == a && st->idtabs[i].log2 == h->idtab_log2)
            t = &st->idtabs[i];
    if (!t)
        return; /* not mapped: the entries stay as the file has them */
    uint64_t mask = bytes / 4 - 1;
    uint64_t lo = KEEL_MAX(off, a), hi = KEEL_MIN(off + n, a + bytes);
    for (uint64_t at = lo; at + 4 <= hi; at += 4) {
        uint32_t s = keel__get32(buf + (at - off));
        if (s == KEEL_EMPTY || s < h->count)
            continue;
        uint64_t p = (at - a) / 4, back = 0;
        while (back < mask &&
               KEEL_LOAD_RELAXED(&t->tab[(p - back - 1) & mask]) != KEEL_EMPTY)
            back++; /* the run holds [p - back, p] */
        int passed = 0;
        for (uint64_t d = 1; d <= mask && !passed; d++) {
            uint64_t q = (p + d) & mask;
            uint32_t x = KEEL_LOAD_RELAXED(&t->tab[q]);
            if (x == KEEL_EMPTY)
                break;
            /* q's probe starts at its home: in the run, at p or before */
            uint64_t from = x < h->count
                                ? (q - keel__idtab_home(keel__store_id(st, x),
                                                        t->log2)) & mask
                                : 0;
            passed = from >= d && from <= d + back;
        }
        if (!passed)
            keel__put32(buf + (at - off), KEEL_EMPTY);
    }
}

/* Page i of the image of the commit h of st, in buf (PAGE bytes): only the
** regions r (nr of them) of the file's bytes, with the committed lists of
** ps laid over them. */
static int
image_page(keel_store *st, keel_header *h, const region *r, size_t nr,
           const patches *ps, uint64_t i, uint8_t *buf)
{
    memset(buf, 0, PAGE);
    uint64_t off = i * PAGE;
    if (off == KEEL_HDR_A_OFF) {
        keel__header_encode(h, buf);
    } else if (off == KEEL_LIVE_OFF) {
        /* what a writer's open resets the live page to: the commit */
        keel__put64(buf + LO_ROUTING, h->count);
        keel__put32(buf + LO_SEGMENTS, h->segments);
        keel__put32(buf + LO_HEAP_CHUNKS, h->heap_chunks);
        for (uint32_t k = 0; k < h->segments; k++)
            keel__put64(buf + LO_SEG_TABLE + 8 * k, h->seg_off[k]);
        for (uint32_t k = 0; k < h->heap_chunks; k++)
            keel__put64(buf + LO_HEAP_TABLE + 8 * k, h->heap_off[k]);
    } else if (off >= KEEL_DATA_OFF) {
        size_t n = (size_t)KEEL_MIN(PAGE, h->file_end - off);
        ssize_t got = keel__os->pread(st->fd, buf, n, off);
        if (got != (ssize_t)n)
            return keel__fail(KEEL_EIO, "reading %zu bytes at %" PRIu64
                              " of %s to publish: %s\nhelp: check the file "
                              "and its disk", n, off, st->path,
                              got < 0 ? strerror((int)-got) : "short read");
        keep_regions(r, nr, off, n, buf);
        keel__commit_marks(&st->g, h, off, buf, n);
        patch_page(ps, off, n, buf);
        idtab_commit(st, h, off, n, buf);
    }
    return KEEL_OK;
}

static int
all_zero(const uint8_t *p)
{
    for (uint64_t i = 0; i < PAGE; i += 8)
        if (keel__get64(p + i))
            return 0;
    return 1;
}

/* --- publishing ------------------------------------------------------------ */

typedef struct pub {
    keel_s3 *s3;
    char bucket[64], prefix[1024], url[1200];
    keel_manifest prev;       /* seq 0: none */
    keel_manifest next;
    uint32_t packs_cap;
    uint32_t *prev_map;       /* prev pack index -> next pack index */
    uint8_t *pack;            /* the pack being filled: one of bufs */
    uint32_t par, nq;         /* packs sent at once; packs queued */
    uint8_t **bufs;           /* par buffers of pack_cap bytes */
    char (*keys)[NAME_MAX_];  /* the queued packs' keys */
    keel_s3_put_job *jobs;    /* the queued packs */
    uint64_t pack_cap, pack_fill, pack_first; /* first page in it */
    uint64_t uploaded;
    uint64_t hint;            /* the version `latest` named; 0: none */
    int replace;              /* opt->replace: another index may precede */
    int unchanged;            /* prev holds this image already (12) */
    keel_stop *stop;          /* the handle's cancel */
} pub;

static int
add_pack(pub *p, keel_man_pack pk, uint32_t *index)
{
    if (p->next.npacks == p->packs_cap) {
        uint32_t cap = p->packs_cap ? 2 * p->packs_cap : 16;
        keel_man_pack *np = keel__realloc(p->next.packs, cap * sizeof *np);
        if (!np)
            return KEEL_ENOMEM;
        p->next.packs = np;
        p->packs_cap = cap;
    }
    *index = p->next.npacks;
    p->next.packs[p->next.npacks++] = pk;
    return KEEL_OK;
}

/* Sends the queued packs, up to parallel of them at once (invariant 1). A
** pack that exists already holds these bytes: invariant (6) names it after
** this version, so only an interrupted try at this version wrote it. */
static int
send_queue(pub *p)
{
    if (p->nq == 0)
        return KEEL_OK;
    int rc = keel__s3_put_many(p->s3, p->bucket, p->jobs, p->nq, p->par);
    if (rc)
        return keel__wrap(rc, "publishing to %s: ", p->url);
    for (uint32_t i = 0; i < p->nq; i++)
        if (p->jobs[i].rc == KEEL_OK)
            p->uploaded += p->jobs[i].len;
    p->nq = 0;
    p->pack = p->bufs[0];
    return KEEL_OK;
}

/* Queues the pack being filled, named by its bytes and this version
** (invariant 6), and points its pages at it. */
static int
flush_pack(pub *p, uint64_t end_page)
{
    if (p->pack_fill == 0)
        return KEEL_OK;
    XXH128_hash_t id = XXH3_128bits_withSeed(p->pack, p->pack_fill,
                                             p->next.seq);
    keel_man_pack pk = {id.high64, id.low64, p->pack_fill};
    keel__pack_key(p->keys[p->nq], NAME_MAX_, p->prefix, &pk);
    p->jobs[p->nq] = (keel_s3_put_job){p->keys[p->nq], p->pack,
                                       (size_t)p->pack_fill, 0};
    p->nq++;
    uint32_t k;
    int rc = add_pack(p, pk, &k);
    if (rc)
        return rc;
    for (uint64_t i = p->pack_first; i < end_page; i++)
        if (p->next.pages[i].pack == PENDING)
            p->next.pages[i].pack = k;
    p->pack_fill = 0;
    if (p->nq == p->par)
        return send_queue(p);
    p->pack = p->bufs[p->nq];
    return KEEL_OK;
}

/* Page i goes to the manifest: as zero, as a page of a pack the previous
** version holds already, or into the pack being filled. */
static int
place_page(pub *p, uint64_t i, const uint8_t *buf)
{
    keel_man_page *pg = &p->next.pages[i];
    XXH128_hash_t h = XXH3_128bits(buf, PAGE);
    *pg = (keel_man_page){h.high64, h.low64, KEEL_MAN_ZERO_PAGE, 0};
    if (all_zero(buf))
        return KEEL_OK;
    if (i < p->prev.npages) {
        const keel_man_page *old = &p->prev.pages[i];
        if (old->pack != KEEL_MAN_ZERO_PAGE && old->hash_hi == h.high64 &&
            old->hash_lo == h.low64) {
            if (p->prev_map[old->pack] == UINT32_MAX) {
                int rc = add_pack(p, p->prev.packs[old->pack],
                                  &p->prev_map[old->pack]);
                if (rc)
                    return rc;
            }
            pg->pack = p->prev_map[old->pack];
            pg->off = old->off;
            return KEEL_OK;
        }
    }
    if (p->pack_fill == 0)
        p->pack_first = i;
    memcpy(p->pack + p->pack_fill, buf, PAGE);
    pg->pack = PENDING;
    pg->off = p->pack_fill;
    p->pack_fill += PAGE;
    return p->pack_fill == p->pack_cap ? flush_pack(p, i + 1) : KEEL_OK;
}

/* The newest version at the prefix (invariant 5): the hint when it names a
** manifest that exists, a bounded walk on from it (cache.h); without a
** usable hint, the listing of PREFIX/manifest/. A prefix whose versions
** cannot be found is refused: a guess would fork its history (a second
** version 1 after a prune). Leaves p->prev.seq 0 if there is none. */
static int
find_previous(pub *p)
{
    char key[NAME_MAX_];
    void *data = NULL;
    size_t len = 0;
    uint64_t seq = 0, reqs = 0;
    keel__latest_key(key, sizeof key, p->prefix);
    int rc = keel__s3_get(p->s3, p->bucket, key, NULL, 64, &data, &len, NULL);
    if (rc == KEEL_OK) {
        seq = p->hint = keel__latest_parse(data, len);
        keel__free(data);
    } else if ((rc == KEEL_ENOTFOUND && strstr(keel_errmsg(), "no bucket")) ||
               rc == KEEL_ECANCELED) {
        return keel__wrap(rc, "publishing to %s: ", p->url);
    }
    keel__clear_error(); /* a hint that cannot be read says nothing */
    if (seq) {
        /* Only a hint: one naming no manifest says nothing. */
        keel_s3_object o;
        keel__man_key(key, sizeof key, p->prefix, seq);
        rc = keel__s3_head(p->s3, p->bucket, key, &o);
        if (rc == KEEL_ENOTFOUND)
            seq = 0;
        else if (rc != KEEL_OK)
            return keel__wrap(rc, "publishing to %s: ", p->url);
        keel__clear_error();
    }
    rc = seq ? keel__versions_walk(p->s3, p->bucket, p->prefix, seq, p->stop,
                                   &seq, &reqs)
             : keel__versions_list(p->s3, p->bucket, p->prefix, &seq);
    if (rc == KEEL_ECANCELED)
        return rc;
    if (rc)
        return keel__wrap(rc, "publishing to %s: cannot tell which version "
                          "is the newest there, so nothing was published "
                          "(a guess could fork the versions): ", p->url);
    if (seq == 0)
        return KEEL_OK;
    keel__man_key(key, sizeof key, p->prefix, seq);
    rc = keel__s3_get(p->s3, p->bucket, key, NULL, KEEL_MAN_MAX_BYTES, &data,
                      &len, NULL);
    if (rc)
        return keel__wrap(rc, "publishing to %s: reading version %" PRIu64
                          ", the newest: ", p->url, seq);
    rc = keel__manifest_decode(data, len, key, seq, &p->prev);
    keel__free(data);
    if (rc)
        return keel__wrap(rc, "publishing to %s: ", p->url);
    p->prev_map = keel__malloc((p->prev.npacks + 1) * sizeof *p->prev_map);
    if (!p->prev_map)
        return KEEL_ENOMEM;
    memset(p->prev_map, 0xFF, (p->prev.npacks + 1) * sizeof *p->prev_map);
    return KEEL_OK;
}

/* Invariant (10): the previous version's header (its page 0, checked
** against the manifest's hash) names the same index as h, or the caller
** asked to replace it. */
static int
same_index(pub *p, const keel_header *h)
{
    if (p->prev.seq == 0 || p->prev.npages == 0)
        return KEEL_OK;
    const keel_man_page *pg = &p->prev.pages[0];
    if (pg->pack == KEEL_MAN_ZERO_PAGE)
        return keel__fail(KEEL_ECORRUPT, "version %" PRIu64 " of %s has no "
                          "header page\nhelp: publish with replace to start "
                          "a new index there", p->prev.seq, p->url);
    char key[NAME_MAX_];
    keel__pack_key(key, sizeof key, p->prefix, &p->prev.packs[pg->pack]);
    uint8_t *buf = keel__malloc(PAGE);
    keel_header *old = keel__malloc(sizeof *old);
    int rc = buf && old ? KEEL_OK : KEEL_ENOMEM;
    keel_s3_range r = {key, pg->off, PAGE, buf};
    if (!rc)
        rc = keel__s3_get_ranges(p->s3, p->bucket, &r, 1, 1, p->stop);
    if (rc && rc != KEEL_ENOMEM && rc != KEEL_ECANCELED)
        rc = keel__wrap(rc, "publishing to %s: reading the header of version "
                        "%" PRIu64 ": ", p->url, p->prev.seq);
    if (!rc) {
        XXH128_hash_t x = XXH3_128bits(buf, PAGE);
        char why[128] = "";
        if (x.high64 != pg->hash_hi || x.low64 != pg->hash_lo ||
            keel__header_decode(buf + KEEL_HDR_A_OFF, p->prev.image_len, old,
                                why, sizeof why) != KEEL_OK)
            rc = keel__fail(KEEL_ECORRUPT, "the header of version %" PRIu64
                            " of %s (in %s) is damaged%s%s\nhelp: publish "
                            "with replace to start a new index there",
                            p->prev.seq, p->url, key, *why ? ": " : "", why);
    }
    if (!rc && !keel__header_same_index(old, h) && !p->replace) {
        char was[33], now[33];
        keel__identity_hex(old->identity, was);
        keel__identity_hex(h->identity, now);
        rc = keel__fail(old->dim != h->dim ? KEEL_EDIM : KEEL_EOPTIONS,
                        "%s holds another index (version %" PRIu64 ": %u "
                        "dimensions, identity %s) than the one being "
                        "published (%u dimensions, identity %s); nothing "
                        "was published\nhelp: publish it to another "
                        "prefix, or replace the index there (keel publish "
                        "--replace; keel_publish_options.replace): its "
                        "readers keep the version they have",
                        p->url, p->prev.seq, old->dim, was, h->dim, now);
    }
    keel__free(buf);
    keel__free(old);
    return rc;
}

/* The create of manifest key found one there (invariant 3): KEEL_OK when
** it is byte for byte m, len bytes, this publish's own; KEEL_S3_EXISTS when
** it is another's; or the error that kept it from being read. */
static int
own_manifest(pub *p, const char *key, const uint8_t *m, size_t len)
{
    void *data;
    size_t got;
    int rc = keel__s3_get(p->s3, p->bucket, key, NULL, KEEL_MAN_MAX_BYTES,
                          &data, &got, NULL);
    if (rc == KEEL_ENOTFOUND && !strstr(keel_errmsg(), "no bucket"))
        return keel__fail(KEEL_EIO, "publishing to %s: the store refused to "
                          "create %s because it exists (412), then had no "
                          "such object, so nothing was published\nhelp: "
                          "the store or a proxy before it answers "
                          "create-only PUTs wrongly; point AWS_ENDPOINT_URL "
                          "at the store itself, then retry", p->url, key);
    if (rc)
        return keel__wrap(rc, "publishing to %s: version %" PRIu64 " exists "
                          "and could not be read back to tell whether this "
                          "publish made it: ", p->url, p->next.seq);
    int same = got == len && memcmp(data, m, len) == 0;
    keel__free(data);
    return same ? KEEL_OK : KEEL_S3_EXISTS;
}

/* Invariants (2) and (3): the manifest after its packs, create-only. */
static int
commit_manifest(pub *p)
{
    size_t len;
    uint8_t *m = keel__manifest_encode(&p->next, &len);
    if (!m)
        return KEEL_ENOMEM;
    char key[NAME_MAX_];
    keel__man_key(key, sizeof key, p->prefix, p->next.seq);
    int rc = keel__s3_put(p->s3, p->bucket, key, m, len, KEEL_S3_CREATE_ONLY,
                          NULL);
    int owned = rc == KEEL_S3_EXISTS; /* own_manifest's errors say where */
    if (owned)
        rc = own_manifest(p, key, m, len);
    keel__free(m);
    if (rc == KEEL_S3_EXISTS)
        return keel__fail(KEEL_ELOCKED,
                          "another publisher published version %" PRIu64
                          " of %s first (%s exists)\nhelp: publish an index "
                          "to a prefix from one writer at a time; publish "
                          "again to make this commit the next version",
                          p->next.seq, p->url, key);
    if (rc)
        return owned ? rc : keel__wrap(rc, "publishing to %s: ", p->url);
    p->uploaded += len;
    char text[32];
    int n = snprintf(text, sizeof text, "%" PRIu64 "\n", p->next.seq);
    keel__latest_key(key, sizeof key, p->prefix);
    /* the hint is only a hint: the version is published without it */
    (void)keel__s3_put(p->s3, p->bucket, key, text, (size_t)n, 0, NULL);
    return KEEL_OK;
}

static int
u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Invariant (11): a reader's image settles. Each round reads the log
** again; the pages built in the round before that a list saved since lies
** in are built again, with the new log, until a round finds none. */
static int
settle(pub *p, keel_store *st, keel_header *h, const region *r, size_t nr,
       patches *ps, uint8_t *buf)
{
    uint64_t *built = NULL; /* the pages of the round before; NULL: all */
    size_t nbuilt = 0;
    int rc = KEEL_OK;
    for (int round = 0; round < SETTLE_ROUNDS && !rc; round++) {
        patches now;
        if ((rc = patches_of(st, h, &now)))
            break;
        uint64_t *redo = NULL;
        size_t nredo = 0, cap = 0;
        for (size_t k = 0; k < now.n && !rc; k++) {
            if (patches_have(ps, now.p[k].off))
                continue;
            uint64_t a = now.p[k].off / PAGE;
            uint64_t z = (now.p[k].off + now.p[k].len - 1) / PAGE;
            for (uint64_t i = a; i <= z && !rc; i++) {
                if ((round && !bsearch(&i, built, nbuilt, sizeof *built,
                                       u64_cmp)) ||
                    (nredo && redo[nredo - 1] >= i))
                    continue; /* patches are sorted: pages ascend */
                if (nredo == cap) {
                    cap = cap ? 2 * cap : 64;
                    uint64_t *nr_ = keel__realloc(redo, cap * sizeof *redo);
                    if (!nr_) {
                        rc = KEEL_ENOMEM;
                        break;
                    }
                    redo = nr_;
                }
                redo[nredo++] = i;
            }
        }
        patches_free(ps);
        *ps = now;
        keel__free(built);
        built = redo;
        nbuilt = nredo;
        if (!rc && nredo == 0) {
            keel__free(built);
            return KEEL_OK;
        }
        for (size_t j = 0; j < nredo && !rc; j++)
            if (!(rc = image_page(st, h, r, nr, ps, redo[j], buf)))
                rc = place_page(p, redo[j], buf);
        if (!rc)
            rc = flush_pack(p, p->next.npages);
    }
    keel__free(built);
    if (rc)
        return rc;
    return keel__fail(KEEL_ELOCKED, "the writer of %s changed the lists of "
                      "the pages being published in each of %d rounds\n"
                      "help: publish through the writer's handle (its adds "
                      "wait for the publish), or while it adds less",
                      st->path, SETTLE_ROUNDS);
}

/* Invariant (12): whether the image just built is the previous version's,
** page for page: the same commit (header sequence and file end, which the
** manifest records) and every page's hash, page 0 (the header: identity,
** epoch, counts) included. Two writers of copies of one index can commit
** headers alike over other bytes; only the pages tell. */
static int
same_image(const pub *p)
{
    const keel_manifest *a = &p->prev, *b = &p->next;
    if (a->seq == 0 || a->commit_seq != b->commit_seq ||
        a->image_len != b->image_len || a->npages != b->npages)
        return 0;
    for (uint64_t i = 0; i < a->npages; i++)
        if (a->pages[i].hash_hi != b->pages[i].hash_hi ||
            a->pages[i].hash_lo != b->pages[i].hash_lo ||
            (a->pages[i].pack == KEEL_MAN_ZERO_PAGE) !=
                (b->pages[i].pack == KEEL_MAN_ZERO_PAGE))
            return 0;
    return 1;
}

/* An unchanged publish (12) sends nothing but a repair of a hint that is
** missing or names another version. */
static void
repair_hint(pub *p)
{
    if (p->hint == p->prev.seq)
        return;
    char key[NAME_MAX_], text[32];
    int n = snprintf(text, sizeof text, "%" PRIu64 "\n", p->prev.seq);
    keel__latest_key(key, sizeof key, p->prefix);
    /* the hint is only a hint: the version is there without it */
    (void)keel__s3_put(p->s3, p->bucket, key, text, (size_t)n, 0, NULL);
    keel__clear_error();
}

/* Publishes commit h of st. words: a reader's header words at its
** snapshot; AGAIN when a flush began since (nothing was committed). */
static int
publish_commit(pub *p, keel_store *st, keel_header *h, const uint64_t *words)
{
    int rc = find_previous(p);
    if (!rc)
        rc = same_index(p, h);
    if (rc)
        return rc;
    p->next.seq = p->prev.seq + 1;
    p->next.image_len = h->file_end;
    p->next.commit_seq = h->sequence;
    p->next.npages = (h->file_end + PAGE - 1) / PAGE;
    p->next.pages = keel__calloc(p->next.npages, sizeof *p->next.pages);
    uint8_t *buf = keel__malloc(PAGE);
    p->bufs = keel__calloc(p->par, sizeof *p->bufs);
    p->keys = keel__calloc(p->par, sizeof *p->keys);
    p->jobs = keel__calloc(p->par, sizeof *p->jobs);
    int ok = p->next.pages && buf && p->bufs && p->keys && p->jobs;
    for (uint32_t i = 0; ok && i < p->par; i++)
        ok = (p->bufs[i] = keel__malloc(p->pack_cap)) != NULL;
    if (!ok) {
        keel__free(buf);
        return KEEL_ENOMEM;
    }
    p->pack = p->bufs[0];
    patches ps;
    rc = patches_of(st, h, &ps);
    region *regs = keel__malloc(MAX_REGIONS * sizeof *regs);
    size_t nregs = regs ? regions_of(st, h, regs) : 0;
    if (!rc && !regs)
        rc = KEEL_ENOMEM;
    for (uint64_t i = 0; i < p->next.npages && !rc; i++) {
        if (keel__stop_poll(p->stop))
            rc = keel__fail(KEEL_ECANCELED, "publishing to %s was cancelled "
                            "before its manifest: nothing was published\n"
                            "help: the cancel callback (keel_set_cancel) "
                            "asked to stop", p->url);
        else if (!(rc = image_page(st, h, regs, nregs, &ps, i, buf)))
            rc = place_page(p, i, buf);
    }
    if (!rc)
        rc = flush_pack(p, p->next.npages);
    if (!rc && words)
        rc = settle(p, st, h, regs, nregs, &ps, buf);
    keel__free(regs);
    patches_free(&ps);
    keel__free(buf);
    if (!rc)
        rc = send_queue(p);
    if (!rc && words) {
        uint64_t now[4];
        keel__store_header_words(st, now);
        if (memcmp(now, words, sizeof now) != 0)
            return AGAIN; /* the log the image settled on may be gone */
    }
    if (!rc && same_image(p)) {
        /* Invariant (12): no page differed, so no pack was queued or
         * sent (place_page reuses every one), and no manifest goes. */
        p->unchanged = 1;
        repair_hint(p);
        return KEEL_OK;
    }
    if (!rc)
        rc = commit_manifest(p);
    return rc;
}

/* Frees what one try at a version holds; the client and options stay. */
static void
pub_reset(pub *p)
{
    keel__manifest_free(&p->prev);
    keel__manifest_free(&p->next);
    keel__free(p->prev_map);
    for (uint32_t i = 0; p->bufs && i < p->par; i++)
        keel__free(p->bufs[i]);
    keel__free(p->bufs);
    keel__free(p->keys);
    keel__free(p->jobs);
    p->prev_map = NULL;
    p->bufs = NULL;
    p->keys = NULL;
    p->jobs = NULL;
    p->pack = NULL;
    p->packs_cap = p->nq = 0;
    p->pack_fill = p->pack_first = 0;
    p->hint = 0;
    p->unchanged = 0;
}

/* A reader's publish (invariant 11): of a snapshot, again from a new one
** when a flush began meanwhile. */
static int
publish_reader(pub *p, keel_index *idx, keel_header *h)
{
    for (int round = 0; round < READER_TRIES; round++) {
        int rc = keel__reader_follow(idx, 1);
        if (rc)
            return rc;
        keel__swap_shared(idx);
        keel_store *st = idx->st;
        uint64_t words[4];
        keel__store_header_words(st, words);
        keel_view v;
        rc = keel__store_snapshot(st, &v, h);
        if (!rc)
            rc = publish_commit(p, st, h, words);
        keel__swap_unlock(idx);
        if (rc != AGAIN)
            return rc;
        pub_reset(p);
    }
    return keel__fail(KEEL_ELOCKED, "the writer of %s flushed during each of "
                      "%d tries to publish it\nhelp: publish through the "
                      "writer's handle (its flushes wait for the publish), "
                      "or while it flushes less often", idx->path,
                      READER_TRIES);
}

int
keel_publish(keel_index *idx, const char *url, const keel_publish_options *opt)
{
    keel__clear_error();
    if (!idx)
        return keel__fail(KEEL_EINVAL, "keel_publish was given a NULL index"
                          "\nhelp: pass the handle keel_open or "
                          "keel_open_reader returned");
    keel__swap_shared(idx);
    int remote = idx->st->remote != NULL;
    keel__swap_unlock(idx);
    if (remote)
        return keel__fail(KEEL_EINVAL, "cannot publish %s: it is a "
                          "published index already\nhelp: publish from the "
                          "index's file (a writer, or a reader of the file)",
                          idx->path);
    pub *p = keel__calloc(1, sizeof *p);
    keel_header *h = keel__malloc(sizeof *h);
    if (!p || !h) {
        keel__free(p);
        keel__free(h);
        return KEEL_ENOMEM;
    }
    uint32_t cap = opt && opt->pack_bytes ? opt->pack_bytes : PACK_DFLT;
    p->pack_cap = KEEL_MAX(PAGE, cap / PAGE * PAGE);
    p->par = opt && opt->parallel ? KEEL_MIN(opt->parallel, 16u) : 4u;
    p->replace = opt && opt->replace;
    keel_stop stop;
    keel__stop_init(&stop, idx->cancel, idx->cancel_arg);
    p->stop = &stop;
    int rc = keel__s3_url_parse(url, p->bucket, sizeof p->bucket, p->prefix,
                                sizeof p->prefix);
    if (!rc) {
        snprintf(p->url, sizeof p->url, "s3://%s/%s", p->bucket, p->prefix);
        rc = keel__s3_open(NULL, &p->s3);
    }
    if (!rc) /* every request of the publish polls the handle's cancel */
        keel__s3_set_stop(p->s3, &stop);
    if (!rc && !idx->writer) {
        rc = publish_reader(p, idx, h);
    } else if (!rc) {
        /* The handle's lock order (handle.h): write_lock, then swap_lock. */
        pthread_mutex_lock(&idx->write_lock);
        keel__swap_shared(idx);
        *h = idx->st->committed;
        rc = publish_commit(p, idx->st, h, NULL);
        keel__swap_unlock(idx);
        pthread_mutex_unlock(&idx->write_lock);
    }
    if (!rc && opt && opt->uploaded)
        *opt->uploaded = p->uploaded;
    if (!rc && opt && opt->version)
        *opt->version = p->unchanged ? p->prev.seq : p->next.seq;
    if (!rc && opt && opt->unchanged)
        *opt->unchanged = p->unchanged;
    keel__s3_close(p->s3);
    pub_reset(p);
    keel__free(p);
    keel__free(h);
    return rc;
}
