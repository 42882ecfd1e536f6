/* list.c -- listing a prefix of a bucket (ListObjectsV2).
**
** Builds the listing URL (url_escape), reads each page with the request
** engine, and takes keys, sizes and times out of its XML with a reader of
** just the elements ListObjectsV2 sends.
*/
#include "base/internal.h"
#include "s3/req.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* --- listing ------------------------------------------------------------- */

#define S3_LIST_MAX (8u << 20) /* bytes of one listing page's answer */

/* Appends s to out percent-encoded (all but A-Z a-z 0-9 - . _ ~), as SigV4
** and a query string want it. 0 when it does not fit. */
static int
url_escape(char *out, size_t cap, const char *s)
{
    size_t n = strlen(out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '-' || c == '.' ||
                    c == '_' || c == '~';
        if (n + 4 > cap)
            return 0;
        if (plain)
            out[n++] = (char)c;
        else
            n += (size_t)snprintf(out + n, cap - n, "%%%02X", c);
    }
    out[n] = '\0';
    return 1;
}

/* The text between <tag> and </tag> in [p, end), or NULL; *len its length.
** No nesting is assumed beyond what ListObjectsV2 sends. */
static const char *
xml_field(const char *p, const char *end, const char *tag, size_t *len)
{
    char open[48], close[48];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    size_t ol = strlen(open), cl = strlen(close);
    for (const char *a = p; a + ol <= end; a++) {
        if (memcmp(a, open, ol) != 0)
            continue;
        a += ol;
        for (const char *b = a; b + cl <= end; b++)
            if (memcmp(b, close, cl) == 0) {
                *len = (size_t)(b - a);
                return a;
            }
        return NULL;
    }
    return NULL;
}

/* Decodes the five XML entities of t (len bytes) into out; 0 on anything
** else or when it does not fit. */
static int
xml_text(char *out, size_t cap, const char *t, size_t len)
{
    static const struct { const char *ent; char c; } ents[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'},
        {"&apos;", '\''}};
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        if (n + 1 >= cap)
            return 0;
        if (t[i] != '&') {
            out[n++] = t[i++];
            continue;
        }
        size_t k = 0;
        while (k < 5 && strncmp(t + i, ents[k].ent, strlen(ents[k].ent)))
            k++;
        if (k == 5 || i + strlen(ents[k].ent) > len)
            return 0;
        out[n++] = ents[k].c;
        i += strlen(ents[k].ent);
    }
    out[n] = '\0';
    return 1;
}

/* "YYYY-MM-DDTHH:MM:SS[.fff]Z" as ms since the epoch, or -1: also for a
** field out of its range (month 13, hour 25), which is no time at all
** (read as one it would be another day, or a year past 9999). */
static int64_t
iso8601_ms(const char *t, size_t len)
{
    char s[40];
    if (len >= sizeof s)
        return -1;
    memcpy(s, t, len);
    s[len] = '\0';
    int y, mo, d, h, mi, sec, ms = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &sec) != 6)
        return -1;
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31,
                                  30, 31};
    if (y < 0 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h < 0 ||
        h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59)
        return -1;
    const char *dot = strchr(s, '.');
    if (dot)
        for (int i = 1, scale = 100; i <= 3 && dot[i] >= '0' && dot[i] <= '9';
             i++, scale /= 10)
            ms += (dot[i] - '0') * scale;
    /* days from civil (Howard Hinnant's algorithm) */
    y -= mo <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = era * 146097 + doe - 719468;
    return ((days * 24 + h) * 60 + mi) * 60000 + (int64_t)sec * 1000 + ms;
}

/* One listing as it goes: what it has gathered, and what it has seen of
** the store's answers, to tell a listing that ends from one that does not. */
typedef struct walk {
    const char *prefix;
    size_t plen;
    keel_s3_entry *out;
    size_t n, cap;
    char last[1100];     /* the last key listed, "" before the first */
    uint64_t *tokens;    /* hashes of the continuation tokens followed */
    uint32_t ntokens;
    uint32_t pages;
} walk;

/* Adds the <Contents> of one answer to w; sets token to the next
** continuation token ("" when the listing is complete). */
static int
list_parse(keel_s3 *s3, const req *r, walk *w, char *token, size_t token_cap)
{
    const char *p = (const char *)r->buf, *end = p + r->got;
    size_t len;
    if (!memmem(p, r->got, "<ListBucketResult", 17))
        return keel__fail(KEEL_EIO, "GET %s did not answer a listing (%zu "
                          "bytes without <ListBucketResult>)\nhelp: check "
                          "that the endpoint is an S3 store that supports "
                          "ListObjectsV2", r->url, r->got);
    const char *c;
    while ((c = xml_field(p, end, "Contents", &len))) {
        const char *ce = c + len;
        p = ce;
        size_t kl, sl, ml;
        const char *k = xml_field(c, ce, "Key", &kl);
        const char *s = xml_field(c, ce, "Size", &sl);
        const char *m = xml_field(c, ce, "LastModified", &ml);
        char key[1100];
        if (!k || !xml_text(key, sizeof key, k, kl))
            continue; /* not a key keel writes */
        if (strncmp(key, w->prefix, w->plen) != 0)
            return keel__fail(KEEL_EIO, "GET %s listed '%.200s', which is "
                              "not under the prefix '%s' asked for\nhelp: "
                              "the store is not answering the listing keel "
                              "asked for; nothing was listed (or deleted)",
                              r->url, key, w->prefix);
        if (w->last[0] && strcmp(key, w->last) <= 0)
            return keel__fail(KEEL_EIO, "GET %s listed '%.200s' after "
                              "'%.200s': keys %s\nhelp: the store's listing "
                              "does not move forward; nothing was listed",
                              r->url, key, w->last,
                              strcmp(key, w->last) ? "out of order"
                                                   : "repeated");
        snprintf(w->last, sizeof w->last, "%s", key);
        if (!s || !m || !keel__s3_key_ok(key))
            continue; /* not a key keel writes */
        if (w->n == s3->list_max_keys)
            return keel__fail(KEEL_EIO, "GET %s: the listing of '%s' holds "
                              "more than %" PRIu64 " keys\nhelp: keel "
                              "writes far fewer under one prefix; check "
                              "the prefix, or the store's listing",
                              r->url, w->prefix, s3->list_max_keys);
        if (keel__grow(&w->out, &w->cap, w->n, sizeof *w->out))
            return KEEL_ENOMEM;
        keel_s3_entry *e = &w->out[w->n];
        if (!(e->key = keel__malloc(strlen(key) + 1)))
            return KEEL_ENOMEM;
        strcpy(e->key, key);
        e->size = strtoull(s, NULL, 10);
        e->mtime_ms = iso8601_ms(m, ml);
        w->n++;
    }
    token[0] = '\0';
    const char *tr = xml_field((const char *)r->buf, end, "IsTruncated", &len);
    if (!tr || len != 4 || memcmp(tr, "true", 4) != 0)
        return KEEL_OK;
    const char *t = xml_field((const char *)r->buf, end,
                              "NextContinuationToken", &len);
    if (!t || len == 0 || !xml_text(token, token_cap, t, len))
        return keel__fail(KEEL_EIO, "GET %s: a truncated listing "
                          "without a usable continuation token\nhelp: "
                          "the store's ListObjectsV2 answer is not "
                          "one keel can follow", r->url);
    uint64_t h = XXH3_64bits(token, strlen(token));
    for (uint32_t i = 0; i < w->ntokens; i++)
        if (w->tokens[i] == h)
            return keel__fail(KEEL_EIO, "GET %s: the listing of '%s' gave "
                              "continuation token '%.100s' a second time, "
                              "after %" PRIu32 " answers\nhelp: the store's "
                              "listing goes round in a circle; nothing was "
                              "listed", r->url, w->prefix, token, w->pages);
    if (w->pages >= s3->list_max_pages)
        return keel__fail(KEEL_EIO, "GET %s: the listing of '%s' is still "
                          "truncated after %" PRIu32 " answers (%zu keys)"
                          "\nhelp: keel writes far fewer keys under one "
                          "prefix; check the prefix, or the store's "
                          "listing", r->url, w->prefix, w->pages, w->n);
    w->tokens[w->ntokens++] = h;
    return KEEL_OK;
}

int
keel__s3_list(keel_s3 *s3, const char *bucket, const char *prefix,
              keel_s3_entry **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    int rc = keel__s3_check_names(bucket, NULL);
    if (rc != KEEL_OK)
        return rc;
    walk w = {.prefix = prefix, .plen = strlen(prefix)};
    w.tokens = keel__malloc((size_t)s3->list_max_pages * sizeof *w.tokens);
    if (!w.tokens)
        return KEEL_ENOMEM;
    char token[1024] = "";
    do {
        req r;
        keel__req_init(&r, s3, "GET", bucket, NULL);
        snprintf(r.url, sizeof r.url, "%s/%s?list-type=2&prefix=",
                 s3->endpoint, bucket);
        int fits = url_escape(r.url, sizeof r.url, prefix);
        if (fits && token[0]) {
            size_t ul = strlen(r.url);
            snprintf(r.url + ul, sizeof r.url - ul, "&continuation-token=");
            fits = url_escape(r.url, sizeof r.url, token);
        }
        if (!fits) {
            rc = keel__fail(KEEL_EINVAL, "listing '%s' in bucket '%s': the "
                            "request URL is longer than %d bytes\nhelp: use "
                            "a shorter prefix", prefix, bucket, S3_URL_MAX);
            break;
        }
        r.grow = 1;
        r.cap = S3_LIST_MAX;
        pthread_mutex_lock(&s3->lock);
        rc = keel__req_run(s3, &r);
        pthread_mutex_unlock(&s3->lock);
        w.pages++;
        if (rc == KEEL_OK)
            rc = list_parse(s3, &r, &w, token, sizeof token);
        free(r.buf);
        keel__req_free(&r);
    } while (rc == KEEL_OK && token[0]);
    keel__free(w.tokens);
    if (rc != KEEL_OK) {
        keel__s3_list_free(w.out, w.n);
        return rc;
    }
    *out = w.out;
    *n = w.n;
    return KEEL_OK;
}

void
keel__s3_list_free(keel_s3_entry *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++)
        keel__free(e[i].key);
    keel__free(e);
}
