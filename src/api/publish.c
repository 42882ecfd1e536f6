/* publish.c -- keel_publish: a writer's last flush as a new version on S3.
**
** The published image of an index is its file as a reader of the last
** flush sees it, cut into 64 KiB pages: page 0 the committed header, page 1
** zero (one header copy is enough: nothing writes the image again), page 2
** a live page that routes through exactly the committed slots, then the
** file's bytes up to the committed file_end. Pages are named by content
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
**     racing for it exactly one succeeds; the other gets KEEL_ELOCKED.
** (4) An interrupted publish leaves only packs no manifest names; the next
**     publish takes the same version number and reuses those packs.
** (5) PREFIX/latest is a hint: publish follows it, then probes forward.
**
** This module reads the index file through the store's descriptor (the OS
** layer) and sends bytes through the S3 client; it holds the handle's write
** lock throughout, so no flush changes the file under it.
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

/* --- URLs and keys ---------------------------------------------------- */

int
keel__s3_url_parse(const char *url, char *bucket, size_t bucket_cap,
                   char *prefix, size_t prefix_cap)
{
    if (!url || strncmp(url, "s3://", 5) != 0)
        return keel__fail(KEEL_EINVAL, "'%s' is not an s3:// URL\nhelp: give "
                          "s3://BUCKET/PREFIX", url ? url : "(null)");
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    const char *p = slash ? slash + 1 : "";
    while (*p == '/')
        p++;
    size_t pl = strlen(p);
    while (pl && p[pl - 1] == '/')
        pl--;
    if (bl == 0 || bl >= bucket_cap || pl >= prefix_cap)
        return keel__fail(KEEL_EINVAL, "'%s' names no bucket, or one or a "
                          "prefix too long\nhelp: give s3://BUCKET/PREFIX",
                          url);
    memcpy(bucket, b, bl);
    bucket[bl] = '\0';
    memcpy(prefix, p, pl);
    prefix[pl] = '\0';
    return KEEL_OK;
}

static void
key_of(char *out, size_t cap, const char *prefix, const char *rest)
{
    snprintf(out, cap, "%s%s%s", prefix, *prefix ? "/" : "", rest);
}

void
keel__man_key(char *out, size_t cap, const char *prefix, uint64_t seq)
{
    char rest[64];
    snprintf(rest, sizeof rest, "manifest/%020" PRIu64, seq);
    key_of(out, cap, prefix, rest);
}

void
keel__pack_key(char *out, size_t cap, const char *prefix,
               const keel_man_pack *p)
{
    char rest[64];
    snprintf(rest, sizeof rest, "pack/%016" PRIx64 "%016" PRIx64, p->id_hi,
             p->id_lo);
    key_of(out, cap, prefix, rest);
}

void
keel__latest_key(char *out, size_t cap, const char *prefix)
{
    key_of(out, cap, prefix, "latest");
}

/* --- the manifest ------------------------------------------------------- */

enum {
    MO_MAGIC = 0, MO_VERSION = 8, MO_PAGE_LOG2 = 12, MO_SEQ = 16,
    MO_IMAGE_LEN = 24, MO_COMMIT_SEQ = 32, MO_NPACKS = 40, MO_NPAGES = 48,
    MO_CHECKSUM = 56
};

static uint64_t
manifest_checksum(const uint8_t *buf, size_t len)
{
    XXH3_state_t *s = XXH3_createState();
    static const uint8_t zero[8];
    uint64_t h = 0;
    if (s) {
        XXH3_64bits_reset(s);
        XXH3_64bits_update(s, buf, MO_CHECKSUM);
        XXH3_64bits_update(s, zero, 8);
        XXH3_64bits_update(s, buf + MO_CHECKSUM + 8, len - MO_CHECKSUM - 8);
        h = XXH3_64bits_digest(s);
        XXH3_freeState(s);
    }
    return h;
}

static uint8_t *
manifest_encode(const keel_manifest *m, size_t *len)
{
    size_t n = KEEL_MAN_HDR_BYTES + (size_t)m->npacks * KEEL_MAN_PACK_BYTES +
               (size_t)m->npages * KEEL_MAN_PAGE_BYTES;
    uint8_t *b = keel__calloc(1, n);
    if (!b)
        return NULL;
    memcpy(b + MO_MAGIC, KEEL_MAN_MAGIC, 8);
    keel__put32(b + MO_VERSION, KEEL_MAN_VERSION);
    keel__put32(b + MO_PAGE_LOG2, KEEL_MAN_PAGE_LOG2);
    keel__put64(b + MO_SEQ, m->seq);
    keel__put64(b + MO_IMAGE_LEN, m->image_len);
    keel__put64(b + MO_COMMIT_SEQ, m->commit_seq);
    keel__put32(b + MO_NPACKS, m->npacks);
    keel__put64(b + MO_NPAGES, m->npages);
    uint8_t *p = b + KEEL_MAN_HDR_BYTES;
    for (uint32_t i = 0; i < m->npacks; i++, p += KEEL_MAN_PACK_BYTES) {
        keel__put64(p, m->packs[i].id_hi);
        keel__put64(p + 8, m->packs[i].id_lo);
        keel__put64(p + 16, m->packs[i].bytes);
    }
    for (uint64_t i = 0; i < m->npages; i++, p += KEEL_MAN_PAGE_BYTES) {
        keel__put64(p, m->pages[i].hash_hi);
        keel__put64(p + 8, m->pages[i].hash_lo);
        keel__put32(p + 16, m->pages[i].pack);
        keel__put64(p + 24, m->pages[i].off);
    }
    keel__put64(b + MO_CHECKSUM, manifest_checksum(b, n));
    *len = n;
    return b;
}

void
keel__manifest_free(keel_manifest *m)
{
    keel__free(m->packs);
    keel__free(m->pages);
    memset(m, 0, sizeof *m);
}

int
keel__manifest_decode(const uint8_t *buf, size_t len, const char *key,
                      keel_manifest *m)
{
    memset(m, 0, sizeof *m);
#define BAD(...) (keel__manifest_free(m), KEEL_CORRUPT(__VA_ARGS__))
    if (len < KEEL_MAN_HDR_BYTES || memcmp(buf, KEEL_MAN_MAGIC, 8) != 0)
        return BAD("object %s is not a keel manifest", key);
    if (keel__get32(buf + MO_VERSION) != KEEL_MAN_VERSION ||
        keel__get32(buf + MO_PAGE_LOG2) != KEEL_MAN_PAGE_LOG2)
        return BAD("manifest %s has version %u, page log2 %u", key,
                   keel__get32(buf + MO_VERSION),
                   keel__get32(buf + MO_PAGE_LOG2));
    m->seq = keel__get64(buf + MO_SEQ);
    m->image_len = keel__get64(buf + MO_IMAGE_LEN);
    m->commit_seq = keel__get64(buf + MO_COMMIT_SEQ);
    m->npacks = keel__get32(buf + MO_NPACKS);
    m->npages = keel__get64(buf + MO_NPAGES);
    uint64_t need = KEEL_MAN_HDR_BYTES +
                    (uint64_t)m->npacks * KEEL_MAN_PACK_BYTES;
    if (m->npages > len / KEEL_MAN_PAGE_BYTES ||
        need + m->npages * KEEL_MAN_PAGE_BYTES != len)
        return BAD("manifest %s is %zu bytes, not the size its tables say",
                   key, len);
    if (keel__get64(buf + MO_CHECKSUM) != manifest_checksum(buf, len))
        return BAD("manifest %s fails its checksum", key);
    if (m->npages != (m->image_len + PAGE - 1) / PAGE)
        return BAD("manifest %s has %" PRIu64 " pages for %" PRIu64 " bytes",
                   key, m->npages, m->image_len);
    m->packs = keel__calloc(m->npacks, sizeof *m->packs);
    m->pages = keel__calloc(m->npages, sizeof *m->pages);
    if (!m->packs || !m->pages) {
        keel__manifest_free(m);
        return KEEL_ENOMEM;
    }
    const uint8_t *p = buf + KEEL_MAN_HDR_BYTES;
    for (uint32_t i = 0; i < m->npacks; i++, p += KEEL_MAN_PACK_BYTES)
        m->packs[i] = (keel_man_pack){keel__get64(p), keel__get64(p + 8),
                                      keel__get64(p + 16)};
    for (uint64_t i = 0; i < m->npages; i++, p += KEEL_MAN_PAGE_BYTES) {
        keel_man_page *pg = &m->pages[i];
        *pg = (keel_man_page){keel__get64(p), keel__get64(p + 8),
                              keel__get32(p + 16), keel__get64(p + 24)};
        if (pg->pack != KEEL_MAN_ZERO_PAGE &&
            (pg->pack >= m->npacks ||
             pg->off > m->packs[pg->pack].bytes ||
             m->packs[pg->pack].bytes - pg->off < PAGE))
            return BAD("manifest %s: page %" PRIu64 " lies outside its pack",
                       key, i);
    }
#undef BAD
    return KEEL_OK;
}

/* --- the image ------------------------------------------------------------ */

/* Page i of the image of the commit h of st, in buf (PAGE bytes). */
static int
image_page(keel_store *st, keel_header *h, uint64_t i, uint8_t *buf)
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
    uint8_t *pack;            /* the pack being filled */
    uint64_t pack_cap, pack_fill, pack_first; /* first page in it */
    uint64_t uploaded;
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

/* Sends the pack being filled (invariant 1) and points its pages at it. */
static int
flush_pack(pub *p, uint64_t end_page)
{
    if (p->pack_fill == 0)
        return KEEL_OK;
    XXH128_hash_t id = XXH3_128bits(p->pack, p->pack_fill);
    keel_man_pack pk = {id.high64, id.low64, p->pack_fill};
    char key[NAME_MAX_];
    keel__pack_key(key, sizeof key, p->prefix, &pk);
    int rc = keel__s3_put(p->s3, p->bucket, key, p->pack, p->pack_fill,
                          KEEL_S3_CREATE_ONLY, NULL);
    if (rc == KEEL_OK)
        p->uploaded += p->pack_fill;
    else if (rc != KEEL_S3_EXISTS) /* exists: the same bytes, from before */
        return keel__wrap(rc, "publishing to %s: ", p->url);
    uint32_t k;
    if ((rc = add_pack(p, pk, &k)))
        return rc;
    for (uint64_t i = p->pack_first; i < end_page; i++)
        if (p->next.pages[i].pack == PENDING)
            p->next.pages[i].pack = k;
    p->pack_fill = 0;
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

/* The newest version at the prefix (invariant 5): the hint, then forward
** while manifests exist. Leaves p->prev.seq 0 if there is none. */
static int
find_previous(pub *p)
{
    char key[NAME_MAX_];
    void *data = NULL;
    size_t len = 0;
    uint64_t seq = 0;
    keel__latest_key(key, sizeof key, p->prefix);
    int rc = keel__s3_get(p->s3, p->bucket, key, NULL, 64, &data, &len, NULL);
    if (rc == KEEL_OK) {
        char text[65] = {0};
        memcpy(text, data, KEEL_MIN(len, (size_t)64));
        seq = strtoull(text, NULL, 10);
        keel__free(data);
    } else if (rc != KEEL_ENOTFOUND || strstr(keel_errmsg(), "no bucket")) {
        return keel__wrap(rc, "publishing to %s: ", p->url);
    }
    for (;;) {
        keel_s3_object o;
        keel__man_key(key, sizeof key, p->prefix, seq + 1);
        rc = keel__s3_head(p->s3, p->bucket, key, &o);
        if (rc == KEEL_ENOTFOUND)
            break;
        if (rc != KEEL_OK)
            return keel__wrap(rc, "publishing to %s: ", p->url);
        seq++;
    }
    /* a hint past the newest manifest: walk back to one that exists */
    while (seq > 0) {
        keel__man_key(key, sizeof key, p->prefix, seq);
        rc = keel__s3_get(p->s3, p->bucket, key, NULL, KEEL_MAN_MAX_BYTES,
                          &data, &len, NULL);
        if (rc == KEEL_OK)
            break;
        if (rc != KEEL_ENOTFOUND)
            return keel__wrap(rc, "publishing to %s: ", p->url);
        seq--;
    }
    if (seq == 0)
        return KEEL_OK;
    rc = keel__manifest_decode(data, len, key, &p->prev);
    keel__free(data);
    if (rc)
        return keel__wrap(rc, "publishing to %s: ", p->url);
    p->prev_map = keel__malloc((p->prev.npacks + 1) * sizeof *p->prev_map);
    if (!p->prev_map)
        return KEEL_ENOMEM;
    memset(p->prev_map, 0xFF, (p->prev.npacks + 1) * sizeof *p->prev_map);
    return KEEL_OK;
}

/* Invariants (2) and (3): the manifest after its packs, create-only. */
static int
commit_manifest(pub *p)
{
    size_t len;
    uint8_t *m = manifest_encode(&p->next, &len);
    if (!m)
        return KEEL_ENOMEM;
    char key[NAME_MAX_];
    keel__man_key(key, sizeof key, p->prefix, p->next.seq);
    int rc = keel__s3_put(p->s3, p->bucket, key, m, len, KEEL_S3_CREATE_ONLY,
                          NULL);
    keel__free(m);
    if (rc == KEEL_S3_EXISTS)
        return keel__fail(KEEL_ELOCKED,
                          "another publisher published version %" PRIu64
                          " of %s first (%s exists)\nhelp: publish an index "
                          "to a prefix from one writer at a time; publish "
                          "again to make this commit the next version",
                          p->next.seq, p->url, key);
    if (rc)
        return keel__wrap(rc, "publishing to %s: ", p->url);
    p->uploaded += len;
    char text[32];
    int n = snprintf(text, sizeof text, "%" PRIu64 "\n", p->next.seq);
    keel__latest_key(key, sizeof key, p->prefix);
    /* the hint is only a hint: the version is published without it */
    (void)keel__s3_put(p->s3, p->bucket, key, text, (size_t)n, 0, NULL);
    return KEEL_OK;
}

static int
publish_commit(pub *p, keel_store *st, keel_header *h)
{
    int rc = find_previous(p);
    if (rc)
        return rc;
    p->next.seq = p->prev.seq + 1;
    p->next.image_len = h->file_end;
    p->next.commit_seq = h->sequence;
    p->next.npages = (h->file_end + PAGE - 1) / PAGE;
    p->next.pages = keel__calloc(p->next.npages, sizeof *p->next.pages);
    uint8_t *buf = keel__malloc(PAGE);
    p->pack = keel__malloc(p->pack_cap);
    if (!p->next.pages || !buf || !p->pack) {
        keel__free(buf);
        return KEEL_ENOMEM;
    }
    for (uint64_t i = 0; i < p->next.npages && !rc; i++)
        if (!(rc = image_page(st, h, i, buf)))
            rc = place_page(p, i, buf);
    keel__free(buf);
    if (!rc)
        rc = flush_pack(p, p->next.npages);
    if (!rc)
        rc = commit_manifest(p);
    return rc;
}

int
keel_publish(keel_index *idx, const char *url, const keel_publish_options *opt)
{
    keel__clear_error();
    if (!idx)
        return keel__fail(KEEL_EINVAL, "keel_publish was given a NULL index"
                          "\nhelp: pass the handle keel_open returned");
    if (!idx->writer)
        return keel__fail(KEEL_EREADONLY, "cannot publish %s from a reader "
                          "handle\nhelp: publish from the index's writer "
                          "(keel_open)", idx->path);
    pub *p = keel__calloc(1, sizeof *p);
    keel_header *h = keel__malloc(sizeof *h);
    if (!p || !h) {
        keel__free(p);
        keel__free(h);
        return KEEL_ENOMEM;
    }
    uint32_t cap = opt && opt->pack_bytes ? opt->pack_bytes : PACK_DFLT;
    p->pack_cap = KEEL_MAX(PAGE, cap / PAGE * PAGE);
    int rc = keel__s3_url_parse(url, p->bucket, sizeof p->bucket, p->prefix,
                                sizeof p->prefix);
    if (!rc) {
        snprintf(p->url, sizeof p->url, "s3://%s/%s", p->bucket, p->prefix);
        rc = keel__s3_open(NULL, &p->s3);
    }
    if (!rc) {
        /* The handle's lock order (api.c): write_lock, then swap_lock. */
        pthread_mutex_lock(&idx->write_lock);
        pthread_rwlock_rdlock(&idx->swap_lock);
        *h = idx->st->committed;
        rc = publish_commit(p, idx->st, h);
        pthread_rwlock_unlock(&idx->swap_lock);
        pthread_mutex_unlock(&idx->write_lock);
    }
    if (!rc && opt && opt->uploaded)
        *opt->uploaded = p->uploaded;
    keel__s3_close(p->s3);
    keel__manifest_free(&p->prev);
    keel__manifest_free(&p->next);
    keel__free(p->prev_map);
    keel__free(p->pack);
    keel__free(p);
    keel__free(h);
    return rc;
}
