/* versions.c -- the versions of a published index: those a prefix holds
** (keel_list_versions), and the one a reader of its URL serves
** (keel_published_version).
**
** keel_list_versions works on the object store alone (no index handle), as
** keel_prune does: one listing of PREFIX/manifest/ and one GET of the
** `latest` hint. It reads no manifest: a version's size and time are what
** the listing says of its manifest object.
**
** Invariants:
** (1) Only keys that name a version (PREFIX/manifest/ and 20 digits,
**     keel__man_seq) are versions; other keys there are left out, as
**     prune leaves them alone (prune.c invariant 5).
** (2) The listing is bounded (s3/list.c): a store whose listing repeats a
**     continuation token, never ends, lists keys out of order or outside
**     the prefix fails the call with KEEL_EIO; the caller's function is
**     never called with part of a listing.
** (3) Versions are given oldest first; newest marks the largest, which is
**     what a reader opens (cache/remote.c invariant 3). hinted marks the
**     one `latest` names, if it names a listed one: the hint is only a
**     hint, and a missing or unreadable one marks none.
*/
#include "base/internal.h"
#include "api/api.h"
#include "api/publish.h"
#include "cache/cache.h"
#include "s3/s3.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define NAME_MAX_ 1280

static int
version_cmp(const void *a, const void *b)
{
    const keel_version *x = a, *y = b;
    return x->version < y->version ? -1 : x->version > y->version;
}

/* The version `latest` names; 0 when it is missing or says nothing. */
static uint64_t
read_hint(keel_s3 *s3, const char *bucket, const char *prefix)
{
    char key[NAME_MAX_];
    void *data = NULL;
    size_t len = 0;
    uint64_t seq = 0;
    keel__latest_key(key, sizeof key, prefix);
    if (keel__s3_get(s3, bucket, key, NULL, 64, &data, &len, NULL) ==
        KEEL_OK) {
        seq = keel__latest_parse(data, len);
        keel__free(data);
    }
    keel__clear_error(); /* only a hint: one that cannot be read says none */
    return seq;
}

/* Invariants (1) and (3): the versions of the listing e (n entries) into
** *out (keel__malloc'd, *nout of them), oldest first. */
static int
versions_of(const keel_s3_entry *e, size_t n, const char *prefix,
            keel_version **out, size_t *nout)
{
    keel_version *v = keel__malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return KEEL_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t seq = keel__man_seq(e[i].key, prefix);
        if (seq == 0)
            continue;
        v[k++] = (keel_version){.version = seq,
                                .manifest_bytes = e[i].size,
                                .modified_ms = e[i].mtime_ms};
    }
    if (k)
        qsort(v, k, sizeof *v, version_cmp);
    *out = v;
    *nout = k;
    return KEEL_OK;
}

int
keel_list_versions(const char *url, keel_version_fn fn, void *arg)
{
    keel__clear_error();
    if (!fn)
        return keel__fail(KEEL_EINVAL, "keel_list_versions was given fn = "
                          "NULL\nhelp: pass a function that receives each "
                          "version");
    char bucket[64], prefix[1024], canon[1200], dir[NAME_MAX_];
    int rc = keel__s3_url_parse(url, bucket, sizeof bucket, prefix,
                                sizeof prefix);
    if (rc)
        return rc;
    snprintf(canon, sizeof canon, "s3://%s/%s", bucket, prefix);
    keel__man_dir(dir, sizeof dir, prefix);
    keel_s3 *s3 = NULL;
    keel_s3_entry *e = NULL;
    size_t n = 0, nv = 0;
    keel_version *v = NULL;
    uint64_t hint = 0;
    if (!(rc = keel__s3_open(NULL, &s3)) &&
        !(rc = keel__s3_list(s3, bucket, dir, &e, &n)))
        rc = versions_of(e, n, prefix, &v, &nv);
    keel__s3_list_free(e, n);
    if (!rc && nv == 0)
        rc = keel__fail(KEEL_ENOTFOUND, "no index is published at %s (no "
                        "version under %s)\nhelp: check the URL, or publish "
                        "an index there with keel_publish", canon, dir);
    if (!rc)
        hint = read_hint(s3, bucket, prefix);
    keel__s3_close(s3);
    if (rc) {
        keel__free(v);
        if (rc != KEEL_ENOMEM && !strstr(keel_errmsg(), canon))
            rc = keel__wrap(rc, "listing the versions of %s: ", canon);
        return rc;
    }
    for (size_t i = 0; i < nv && !rc; i++) {
        v[i].newest = i + 1 == nv;
        v[i].hinted = v[i].version == hint;
        rc = fn(&v[i], arg);
    }
    keel__free(v);
    return rc;
}

int
keel_published_version(keel_index *idx, uint64_t *version)
{
    keel__clear_error();
    if (!idx || !version)
        return keel__fail(KEEL_EINVAL, "keel_published_version was given a "
                          "NULL %s\nhelp: pass the handle keel_open_reader "
                          "returned for an s3:// URL, and a uint64_t to "
                          "fill", idx ? "version" : "index");
    keel__swap_shared(idx);
    keel_cache *c = idx->st->remote;
    if (c)
        *version = c->man.seq;
    keel__swap_unlock(idx);
    if (!c)
        return keel__fail(KEEL_EINVAL, "%s is not a published index: "
                          "keel_published_version tells the version a "
                          "reader of an s3:// URL serves\nhelp: open the "
                          "URL with keel_open_reader (a file has no "
                          "published version)", idx->path);
    return KEEL_OK;
}
