/* manifest.h -- a published index's objects: names and the manifest.
**
** A version of an index at s3://BUCKET/PREFIX is one manifest object that
** maps every 64 KiB page of the index file's image to bytes of an immutable
** pack object (or says the page is zero). doc/objstore.md is the normative
** description; the constants, the encoder and the decoder here follow it,
** so the reader (cache/remote.c), the publisher (api/publish.c) and the
** tests agree on every byte.
*/
#ifndef KEEL_MANIFEST_H
#define KEEL_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define KEEL_MAN_MAGIC     "KEELMAN"   /* 8 bytes with its NUL */
#define KEEL_MAN_VERSION   1u
#define KEEL_MAN_PAGE_LOG2 16u
#define KEEL_MAN_HDR_BYTES 64u
#define KEEL_MAN_PACK_BYTES 24u        /* per pack table entry */
#define KEEL_MAN_PAGE_BYTES 32u        /* per page table entry */
#define KEEL_MAN_ZERO_PAGE 0xFFFFFFFFu /* page entry's pack: all zero */
#define KEEL_MAN_MAX_BYTES (256u << 20)

typedef struct keel_man_pack {
    uint64_t id_hi, id_lo;    /* xxh3-128 of the pack's bytes: its name */
    uint64_t bytes;
} keel_man_pack;

typedef struct keel_man_page {
    uint64_t hash_hi, hash_lo; /* xxh3-128 of the page's bytes */
    uint32_t pack;             /* index in the pack table, or ZERO_PAGE */
    uint64_t off;              /* byte offset in the pack */
} keel_man_page;

typedef struct keel_manifest {
    uint64_t seq;              /* version number: manifest/<seq> */
    uint64_t image_len;        /* bytes of the file image (its file_end) */
    uint64_t commit_seq;       /* header sequence of the published commit */
    uint32_t npacks;
    uint64_t npages;
    keel_man_pack *packs;      /* keel__malloc'd */
    keel_man_page *pages;      /* keel__malloc'd */
} keel_manifest;

/* "s3://BUCKET/PREFIX" split into bucket and prefix (no slash at either
** end; the prefix may be empty). KEEL_EINVAL with a message otherwise. */
int keel__s3_url_parse(const char *url, char *bucket, size_t bucket_cap,
                       char *prefix, size_t prefix_cap);

/* Object keys of a published index: PREFIX/manifest/<seq:020>,
** PREFIX/pack/<id:032x>, PREFIX/latest. */
void keel__man_key(char *out, size_t cap, const char *prefix, uint64_t seq);
void keel__pack_key(char *out, size_t cap, const char *prefix,
                    const keel_man_pack *p);
void keel__latest_key(char *out, size_t cap, const char *prefix);
/* PREFIX/manifest/, the folder the versions are listed from. */
void keel__man_dir(char *out, size_t cap, const char *prefix);
/* The version a key of PREFIX/manifest/ names (exactly 20 digits after the
** folder); 0 for any other key. */
uint64_t keel__man_seq(const char *key, const char *prefix);
/* The version the `latest` hint's len bytes name: decimal digits, then at
** most white space; 0 (no hint) for anything else. Only a hint: callers
** check that the manifest exists. */
uint64_t keel__latest_parse(const void *data, size_t len);

/* Decodes and checks a manifest (magic, version, sizes, checksum, every
** page inside its pack, and that it is version seq, the one its key
** names). KEEL_ECORRUPT naming key on failure. Free with
** keel__manifest_free. */
int keel__manifest_decode(const uint8_t *buf, size_t len, const char *key,
                          uint64_t seq, keel_manifest *m);
void keel__manifest_free(keel_manifest *m);
/* Encodes m (keel__malloc'd, *len bytes); NULL when out of memory. */
uint8_t *keel__manifest_encode(const keel_manifest *m, size_t *len);

#endif /* KEEL_MANIFEST_H */
