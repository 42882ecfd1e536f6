/* objects.c -- the object-store tests' helpers beside keel (objects.h):
** objects under a URL through a client of the gateway, a reader's
** counters, versions added and flushed, and the fault proxy's lifecycle.
*/
#include "objects.h"
#include "testdata.h"

#include "api/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char gateway[512];
static int gateway_kept;
static s3proxy *live; /* the proxy up now */

const char *
obj_gateway(void)
{
    if (!gateway_kept) {
        const char *e = getenv("AWS_ENDPOINT_URL");
        snprintf(gateway, sizeof gateway, "%s", e ? e : "");
        gateway_kept = 1;
    }
    return gateway;
}

/* A client of the gateway, and url's bucket (64 bytes) and prefix. */
static keel_s3 *
client_of(const char *url, char *bucket, char *prefix, size_t cap)
{
    keel_s3_config cfg = {.endpoint = *obj_gateway() ? obj_gateway() : NULL};
    keel_s3 *s3 = NULL;
    if (keel__s3_url_parse(url, bucket, 64, prefix, cap) ||
        keel__s3_open(&cfg, &s3))
        return NULL;
    return s3;
}

keel_s3 *
obj_client(const char *url, const char *rest, char *bucket, char *key,
           size_t cap)
{
    char prefix[1024];
    keel_s3 *s3 = client_of(url, bucket, prefix, sizeof prefix);
    if (s3)
        snprintf(key, cap, "%s/%s", prefix, rest);
    return s3;
}

int
obj_set(const char *url, const char *rest, const void *data, size_t len)
{
    char b[64], key[1400];
    keel_s3 *s3 = obj_client(url, rest, b, key, sizeof key);
    if (!s3)
        return KEEL_EIO;
    int rc = data ? keel__s3_put(s3, b, key, data, len, 0, NULL)
                  : keel__s3_delete(s3, b, key);
    keel__s3_close(s3);
    return rc;
}

long
obj_count(const char *url, const char *part)
{
    char b[64], prefix[1024];
    keel_s3 *s3 = client_of(url, b, prefix, sizeof prefix - 1);
    if (!s3)
        return -1;
    strcat(prefix, "/"); /* not the objects of "PREFIX-more/" */
    keel_s3_entry *e;
    size_t n;
    int rc = keel__s3_list(s3, b, prefix, &e, &n);
    keel__s3_close(s3);
    if (rc)
        return -1;
    long count = 0;
    for (size_t i = 0; i < n; i++)
        count += strstr(e[i].key, part) != NULL;
    keel__s3_list_free(e, n);
    return count;
}

uint64_t
obj_hint(const char *url)
{
    char b[64], key[1400];
    keel_s3 *s3 = obj_client(url, "latest", b, key, sizeof key);
    void *d;
    size_t n;
    uint64_t v = 0;
    if (s3 && keel__s3_get(s3, b, key, NULL, 64, &d, &n, NULL) == KEEL_OK) {
        v = keel__latest_parse(d, n);
        keel__free(d);
    }
    keel__s3_close(s3);
    return v;
}

int
obj_add_flush(keel_index *w, size_t n, size_t dim, uint64_t seed)
{
    float *x = td_random(n, dim, seed);
    int rc = x ? keel_add_batch(w, x, n, NULL, NULL) : KEEL_ENOMEM;
    free(x);
    return rc ? rc : keel_flush(w);
}

keel_cache_counters
reader_counters(keel_index *r)
{
    keel_cache_counters n;
    if (keel__remote_counters(r, &n) != KEEL_OK)
        memset(&n, 0xff, sizeof n);
    return n;
}

void
go_direct(void)
{
    setenv("AWS_ENDPOINT_URL", obj_gateway(), 1);
}

void
via(const s3proxy *p)
{
    obj_gateway();
    setenv("AWS_ENDPOINT_URL", s3proxy_url(p), 1);
}

void
proxy_down(s3proxy *p)
{
    go_direct();
    s3proxy_stop(p, NULL);
    if (p == live)
        live = NULL;
}

s3proxy *
proxy_up(void)
{
    if (live)
        proxy_down(live);
    unsetenv("KEEL_S3_STALL_TIMEOUT_S"); /* a failed test's, read by clients */
    s3proxy *p;
    char err[256];
    if (s3proxy_start(obj_gateway(), &p, err, sizeof err) != 0) {
        fprintf(stderr, "  proxy: %s\n", err);
        return NULL;
    }
    via(p);
    return live = p;
}

s3proxy_counters
proxy_counters(s3proxy *p)
{
    s3proxy_counters n;
    s3proxy_counters_get(p, &n);
    return n;
}
