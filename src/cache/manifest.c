/* manifest.c -- the names of a published index's objects, and its manifest
** encoded and decoded (doc/objstore.md, section 3).
*/
#include "base/internal.h"
#include "cache/manifest.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#define PAGE ((uint64_t)1 << KEEL_MAN_PAGE_LOG2)

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

void
keel__man_dir(char *out, size_t cap, const char *prefix)
{
    key_of(out, cap, prefix, "manifest/");
}

uint64_t
keel__man_seq(const char *key, const char *prefix)
{
    char dir[1200];
    keel__man_dir(dir, sizeof dir, prefix);
    size_t n = strlen(dir);
    if (strncmp(key, dir, n) != 0 || strlen(key + n) != 20)
        return 0;
    uint64_t v = 0;
    for (const char *t = key + n; *t; t++) {
        if (*t < '0' || *t > '9')
            return 0;
        uint64_t d = (uint64_t)(*t - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    return v;
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

uint8_t *
keel__manifest_encode(const keel_manifest *m, size_t *len)
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
                      uint64_t seq, keel_manifest *m)
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
    uint64_t says = m->seq;
    if (says != seq)
        return BAD("manifest %s says it is version %" PRIu64 ", not the "
                   "version %" PRIu64 " its name gives", key, says, seq);
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


uint64_t
keel__latest_parse(const void *data, size_t len)
{
    const char *t = data;
    uint64_t v = 0;
    size_t i = 0;
    for (; i < len && t[i] >= '0' && t[i] <= '9'; i++) {
        uint64_t d = (uint64_t)(t[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    if (i == 0)
        return 0;
    for (; i < len; i++)
        if (t[i] != ' ' && t[i] != '\t' && t[i] != '\r' && t[i] != '\n')
            return 0;
    return v;
}
