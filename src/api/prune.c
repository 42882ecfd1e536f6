/* prune.c -- keel_prune: removes old versions of a published index.
**
** Works on the object store alone (no index handle): lists the prefix's
** manifests, keeps the newest N, and removes the rest and the packs only
** they name. It must stay safe while a publisher runs at the same prefix.
**
** Invariants (publish.c's are cited as P1..P7):
** (1) A pack a kept manifest names is never removed.
** (2) Removed manifests go before any pack, so no manifest that survives a
**     cut-short prune names a removed pack.
** (3) A pack that removed manifests name, and no kept one, is removed. An
**     in-flight publish of version n+1 (n the newest manifest) names only
**     packs of manifest n, which is kept (keep >= 1), and packs seeded with
**     n+1 (P6), which no manifest at or below n names. A publish that
**     started from an older manifest loses the fence on n+1 (P3), so what
**     it names never becomes a version.
** (4) A pack no manifest names (left by an interrupted publish) is removed
**     only when the store dates it more than the grace before the newest
**     manifest n: a publish that can still win wrote its packs after it
**     read manifest n, so after n's date; the grace covers the store's
**     clocks disagreeing.
** (5) Only keys that name a version (PREFIX/manifest/ and 20 digits) are
**     versions; other keys there are left alone. Before removing any, prune
**     points PREFIX/latest at the newest kept version: a hint left naming
**     a removed version is no longer a reader's or a publisher's only
**     way to the newest one (both list when the hint names nothing), but
**     a right hint saves them the listing.
*/
#include "base/internal.h"
#include "api/publish.h"
#include "s3/s3.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define NAME_MAX_ 1280

typedef struct idset {
    keel_man_pack *v;
    size_t n, cap;
} idset;

static int
id_cmp(const void *a, const void *b)
{
    const keel_man_pack *x = a, *y = b;
    if (x->id_hi != y->id_hi)
        return x->id_hi < y->id_hi ? -1 : 1;
    return x->id_lo < y->id_lo ? -1 : x->id_lo > y->id_lo;
}

static int
idset_add(idset *s, const keel_manifest *m)
{
    if (s->n + m->npacks > s->cap) {
        size_t cap = KEEL_MAX(2 * s->cap, s->n + m->npacks);
        keel_man_pack *nv = keel__realloc(s->v, cap * sizeof *nv);
        if (!nv)
            return KEEL_ENOMEM;
        s->v = nv;
        s->cap = cap;
    }
    memcpy(s->v + s->n, m->packs, m->npacks * sizeof *m->packs);
    s->n += m->npacks;
    return KEEL_OK;
}

static int
idset_has(const idset *s, const keel_man_pack *p)
{
    return s->n && bsearch(p, s->v, s->n, sizeof *s->v, id_cmp) != NULL;
}

/* The pack id of key ".../pack/<32 hex>", or 0 when it is not one. */
static int
pack_id(const char *key, keel_man_pack *p)
{
    const char *s = strrchr(key, '/');
    if (!s || strlen(s + 1) != 32)
        return 0;
    char hi[17] = {0}, *end;
    memcpy(hi, s + 1, 16);
    p->id_hi = strtoull(hi, &end, 16);
    if (*end)
        return 0;
    p->id_lo = strtoull(s + 17, &end, 16);
    return *end == '\0';
}

static int
entry_cmp(const void *a, const void *b)
{
    const keel_s3_entry *x = a, *y = b;
    return strcmp(x->key, y->key);
}

/* Reads manifest key into its pack ids (added to s). */
static int
add_manifest(keel_s3 *s3, const char *bucket, const char *key, uint64_t seq,
             idset *s)
{
    void *data;
    size_t len;
    keel_manifest m;
    int rc = keel__s3_get(s3, bucket, key, NULL, KEEL_MAN_MAX_BYTES, &data,
                          &len, NULL);
    if (rc)
        return rc;
    rc = keel__manifest_decode(data, len, key, seq, &m);
    keel__free(data);
    if (rc)
        return rc;
    rc = idset_add(s, &m);
    keel__manifest_free(&m);
    return rc;
}

static int
prune_run(keel_s3 *s3, const char *bucket, const char *prefix,
          const char *url, uint32_t keep, uint64_t grace_ms,
          uint64_t *removed)
{
    char dir[NAME_MAX_];
    keel_s3_entry *man = NULL, *packs = NULL;
    size_t nman = 0, npacks = 0;
    idset kept = {0}, gone = {0};
    keel__man_dir(dir, sizeof dir, prefix);
    int rc = keel__s3_list(s3, bucket, dir, &man, &nman);
    /* Only the keys that name versions, in version order (invariant 5). */
    size_t k = 0;
    for (size_t i = 0; !rc && i < nman; i++) {
        if (keel__man_seq(man[i].key, prefix) == 0) {
            keel__free(man[i].key);
            continue;
        }
        man[k++] = man[i];
    }
    nman = rc ? nman : k;
    if (!rc && nman)
        qsort(man, nman, sizeof *man, entry_cmp);
    if (!rc && nman == 0)
        rc = keel__fail(KEEL_ENOTFOUND, "no index is published at %s (no "
                        "object under %s)\nhelp: check the URL; keel "
                        "publish creates the versions prune removes", url,
                        dir);
    size_t first_kept = nman > keep ? nman - keep : 0;
    for (size_t i = 0; !rc && i < nman; i++)
        rc = add_manifest(s3, bucket, man[i].key,
                          keel__man_seq(man[i].key, prefix),
                          i < first_kept ? &gone : &kept);
    if (rc)
        goto out;
    if (kept.n) /* qsort of NULL, even of none, is undefined */
        qsort(kept.v, kept.n, sizeof *kept.v, id_cmp);
    if (gone.n)
        qsort(gone.v, gone.n, sizeof *gone.v, id_cmp);
    /* Invariant (5): the hint names the newest kept version before any
     * older one goes, so no reader or publisher is pointed at a gap. */
    char text[32], hint[NAME_MAX_];
    int tn = snprintf(text, sizeof text, "%" PRIu64 "\n",
                      keel__man_seq(man[nman - 1].key, prefix));
    keel__latest_key(hint, sizeof hint, prefix);
    if (first_kept &&
        (rc = keel__s3_put(s3, bucket, hint, text, (size_t)tn, 0, NULL)))
        goto out;
    int64_t newest = man[nman - 1].mtime_ms;
    for (size_t i = 0; !rc && i < first_kept; i++) /* invariant (2) */
        if (!(rc = keel__s3_delete(s3, bucket, man[i].key)))
            (*removed)++;
    snprintf(dir, sizeof dir, "%s%spack/", prefix, *prefix ? "/" : "");
    if (rc || (rc = keel__s3_list(s3, bucket, dir, &packs, &npacks)))
        goto out;
    for (size_t i = 0; !rc && i < npacks; i++) {
        keel_man_pack id;
        if (!pack_id(packs[i].key, &id) || idset_has(&kept, &id))
            continue; /* invariant (1) */
        int orphan = !idset_has(&gone, &id);
        if (orphan && (grace_ms == UINT64_MAX || packs[i].mtime_ms < 0 ||
                       packs[i].mtime_ms + (int64_t)grace_ms >= newest))
            continue; /* invariant (4) */
        if (!(rc = keel__s3_delete(s3, bucket, packs[i].key)))
            (*removed)++;
    }
out:
    keel__s3_list_free(man, nman);
    keel__s3_list_free(packs, npacks);
    keel__free(kept.v);
    keel__free(gone.v);
    return rc;
}

int
keel_prune(const char *url, uint32_t keep, const keel_prune_options *opt)
{
    keel__clear_error();
    if (keep == 0)
        return keel__fail(KEEL_EINVAL, "keel_prune was asked to keep 0 "
                          "versions of %s\nhelp: keep at least 1: the newest "
                          "version is what readers open", url ? url : "");
    char bucket[64], prefix[1024], canon[1200];
    int rc = keel__s3_url_parse(url, bucket, sizeof bucket, prefix,
                                sizeof prefix);
    if (rc)
        return rc;
    snprintf(canon, sizeof canon, "s3://%s/%s", bucket, prefix);
    uint32_t g = opt && opt->orphan_grace_s ? opt->orphan_grace_s : 3600u;
    uint64_t grace_ms = g == UINT32_MAX ? UINT64_MAX : (uint64_t)g * 1000u;
    uint64_t removed = 0;
    keel_s3 *s3 = NULL;
    if (!(rc = keel__s3_open(NULL, &s3)))
        rc = prune_run(s3, bucket, prefix, canon, keep, grace_ms, &removed);
    keel__s3_close(s3);
    if (rc && rc != KEEL_ENOMEM && !strstr(keel_errmsg(), canon))
        rc = keel__wrap(rc, "pruning %s: ", canon);
    if (opt && opt->removed)
        *opt->removed = removed;
    return rc;
}
