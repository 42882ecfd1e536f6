/* s3.c -- the S3 client: open and close, and the single-object calls.
**
** get_range, get, head, put, put_file and delete, each one request run by
** the engine in req.c (see s3.h for the contract). Many requests at once
** are in lanes.c, listings in list.c.
*/
#include "base/internal.h"
#include "s3/req.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* --- the client ------------------------------------------------------------ */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void
curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static const char *
pick(const char *given, const char *env, const char *dflt)
{
    if (given)
        return given;
    const char *v = getenv(env);
    return v && *v ? v : dflt;
}

/* A timeout: given, else the environment's variable env (a whole number
** from 1 to 86400000), else dflt. */
static int
pick_timeout(uint32_t given, const char *env, uint32_t dflt, uint32_t *out)
{
    *out = given ? given : dflt;
    const char *v = getenv(env);
    if (given || !v || !*v)
        return KEEL_OK;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (*v < '0' || *v > '9' || errno || *end || n == 0 || n > 86400000ull)
        return keel__fail(KEEL_EINVAL, "%s is '%s', not a whole number from "
                          "1 to 86400000\nhelp: set it to a positive number, "
                          "or unset it for the default (%" PRIu32 ")",
                          env, v, dflt);
    *out = (uint32_t)n;
    return KEEL_OK;
}

static char *
dup_str(const char *s)
{
    return s ? keel__path_plus(s, "") : NULL;
}

int
keel__s3_open(const keel_s3_config *cfg, keel_s3 **out)
{
    static const keel_s3_config none;
    if (!cfg)
        cfg = &none;
    *out = NULL;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return keel__fail(KEEL_EIO, "libcurl did not initialise: %s\nhelp: "
                          "check the libcurl and TLS libraries installed",
                          curl_easy_strerror(curl_init_rc));
    const char *region = pick(cfg->region, "AWS_REGION", "us-east-1");
    const char *ak = pick(cfg->access_key, "AWS_ACCESS_KEY_ID", NULL);
    const char *sk = pick(cfg->secret_key, "AWS_SECRET_ACCESS_KEY", NULL);
    const char *tok = pick(cfg->session_token, "AWS_SESSION_TOKEN", NULL);
    if (!ak || !sk)
        return keel__fail(KEEL_EINVAL, "no credentials for the object store"
                          "\nhelp: set AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY");
    char dflt[128];
    snprintf(dflt, sizeof dflt, "https://s3.%s.amazonaws.com", region);
    const char *ep = pick(cfg->endpoint, "AWS_ENDPOINT_URL", dflt);
    if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0)
        return keel__fail(KEEL_EINVAL, "endpoint '%s' is not an http(s) URL"
                          "\nhelp: set AWS_ENDPOINT_URL to "
                          "http://HOST:PORT or https://HOST", ep);

    uint32_t connect_ms, stall_s, min_rate;
    int rc = pick_timeout(cfg->connect_timeout_ms,
                          "KEEL_S3_CONNECT_TIMEOUT_MS", 5000, &connect_ms);
    if (rc || (rc = pick_timeout(cfg->stall_timeout_s,
                                 "KEEL_S3_STALL_TIMEOUT_S", 10, &stall_s)) ||
        (rc = pick_timeout(cfg->min_rate, "KEEL_S3_MIN_RATE", 32768,
                           &min_rate)))
        return rc;

    keel_s3 *s3 = keel__calloc(1, sizeof *s3);
    if (!s3)
        return KEEL_ENOMEM;
    pthread_mutex_init(&s3->lock, NULL);
    s3->connect_timeout_ms = connect_ms;
    s3->stall_timeout_s = stall_s;
    s3->max_attempts = cfg->max_attempts ? cfg->max_attempts : 4;
    s3->max_inflight = cfg->max_inflight ? cfg->max_inflight : 16;
    s3->min_rate = min_rate;
    s3->list_max_keys = cfg->list_max_keys ? cfg->list_max_keys : 1000000;
    s3->list_max_pages = cfg->list_max_pages ? cfg->list_max_pages : 10000;
    snprintf(s3->sigv4, sizeof s3->sigv4, "aws:amz:%s:s3", region);
    s3->endpoint = dup_str(ep);
    s3->access_key = dup_str(ak);
    s3->secret_key = dup_str(sk);
    s3->token = dup_str(tok);
    s3->lanes = keel__calloc(s3->max_inflight, sizeof *s3->lanes);
    if (!s3->endpoint || !s3->access_key || !s3->secret_key ||
        (tok && !s3->token) || !s3->lanes)
        goto nomem;
    size_t n = strlen(s3->endpoint);
    while (n && s3->endpoint[n - 1] == '/')
        s3->endpoint[--n] = '\0';
    s3->easy = curl_easy_init();
    s3->multi = curl_multi_init();
    if (!s3->easy || !s3->multi)
        goto nomem;
    curl_multi_setopt(s3->multi, CURLMOPT_MAXCONNECTS, (long)s3->max_inflight);
    for (uint32_t i = 0; i < s3->max_inflight; i++)
        if (!(s3->lanes[i] = curl_easy_init()))
            goto nomem;
    *out = s3;
    return KEEL_OK;
nomem:
    keel__s3_close(s3);
    return keel__fail(KEEL_ENOMEM, "could not set up the object-store client"
                      " for %s\nhelp: free memory", ep);
}

void
keel__s3_close(keel_s3 *s3)
{
    if (!s3)
        return;
    if (s3->lanes)
        for (uint32_t i = 0; i < s3->max_inflight; i++)
            if (s3->lanes[i])
                curl_easy_cleanup(s3->lanes[i]);
    if (s3->multi)
        curl_multi_cleanup(s3->multi);
    if (s3->easy)
        curl_easy_cleanup(s3->easy);
    keel__free(s3->lanes);
    keel__free(s3->endpoint);
    keel__free(s3->access_key);
    if (s3->secret_key)
        memset(s3->secret_key, 0, strlen(s3->secret_key));
    keel__free(s3->secret_key);
    keel__free(s3->token);
    pthread_mutex_destroy(&s3->lock);
    keel__free(s3);
}

void
keel__s3_set_stop(keel_s3 *s3, keel_stop *stop)
{
    pthread_mutex_lock(&s3->lock);
    s3->stop = stop;
    pthread_mutex_unlock(&s3->lock);
}

const char *
keel__s3_endpoint(const keel_s3 *s3)
{
    return s3->endpoint;
}

/* --- single requests --------------------------------------------------------- */

static void
fill_object(const req *r, keel_s3_object *obj)
{
    if (!obj)
        return;
    obj->size = r->has_range ? r->range_total : r->has_length ? r->length : r->got;
    snprintf(obj->etag, sizeof obj->etag, "%s", r->etag);
}

int
keel__s3_get_range(keel_s3 *s3, const char *bucket, const char *key,
                   uint64_t off, void *buf, size_t len)
{
    int rc = keel__s3_check_names(bucket, key);
    if (rc != KEEL_OK || len == 0)
        return rc;
    req r;
    keel__req_init(&r, s3, "GET", bucket, key);
    keel__req_set_range(&r, off, len);
    r.buf = buf;
    r.cap = len;
    pthread_mutex_lock(&s3->lock);
    rc = keel__req_run(s3, &r);
    if (rc == KEEL_OK)
        rc = keel__req_range_verdict(&r, off, len);
    pthread_mutex_unlock(&s3->lock);
    keel__req_free(&r);
    return rc;
}

int
keel__s3_get(keel_s3 *s3, const char *bucket, const char *key,
             const char *if_none_match, size_t max, void **data, size_t *len,
             keel_s3_object *obj)
{
    *data = NULL;
    *len = 0;
    int rc = keel__s3_check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    keel__req_init(&r, s3, "GET", bucket, key);
    r.if_none_match = if_none_match;
    r.grow = 1;
    r.cap = max;
    pthread_mutex_lock(&s3->lock);
    rc = keel__req_run(s3, &r);
    pthread_mutex_unlock(&s3->lock);
    if (rc == KEEL_OK && r.has_length && r.length != r.got)
        rc = keel__fail(KEEL_EIO, "GET %s: %zu bytes arrived of %" PRIu64
                        "\nhelp: retry; the connection was cut",
                        r.url, r.got, r.length);
    if (rc == KEEL_OK) {
        fill_object(&r, obj);
        *data = r.buf;
        *len = r.got;
        r.buf = NULL;
    }
    free(r.buf);
    keel__req_free(&r);
    return rc;
}

int
keel__s3_head(keel_s3 *s3, const char *bucket, const char *key,
              keel_s3_object *obj)
{
    int rc = keel__s3_check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    keel__req_init(&r, s3, "HEAD", bucket, key);
    pthread_mutex_lock(&s3->lock);
    rc = keel__req_run(s3, &r);
    pthread_mutex_unlock(&s3->lock);
    if (rc == KEEL_OK)
        fill_object(&r, obj);
    keel__req_free(&r);
    return rc;
}

static int
put_req(keel_s3 *s3, req *r, unsigned flags, keel_s3_object *obj)
{
    if (flags & KEEL_S3_CREATE_ONLY)
        r->if_none_match = "*";
    pthread_mutex_lock(&s3->lock);
    int rc = keel__req_run(s3, r);
    pthread_mutex_unlock(&s3->lock);
    if (rc == KEEL_OK && obj) {
        obj->size = r->src_len;
        snprintf(obj->etag, sizeof obj->etag, "%s", r->etag);
    }
    keel__req_free(r);
    return rc;
}

int
keel__s3_put(keel_s3 *s3, const char *bucket, const char *key,
             const void *data, size_t len, unsigned flags, keel_s3_object *obj)
{
    int rc = keel__s3_check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    keel__req_init(&r, s3, "PUT", bucket, key);
    r.src = data ? data : (const unsigned char *)"";
    r.src_len = len;
    return put_req(s3, &r, flags, obj);
}

int
keel__s3_put_file(keel_s3 *s3, const char *bucket, const char *key, int fd,
                  uint64_t off, uint64_t len, unsigned flags,
                  keel_s3_object *obj)
{
    int rc = keel__s3_check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    keel__req_init(&r, s3, "PUT", bucket, key);
    r.fd = fd;
    r.src_off = off;
    r.src_len = len;
    return put_req(s3, &r, flags, obj);
}

int
keel__s3_delete(keel_s3 *s3, const char *bucket, const char *key)
{
    int rc = keel__s3_check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    keel__req_init(&r, s3, "DELETE", bucket, key);
    pthread_mutex_lock(&s3->lock);
    rc = keel__req_run(s3, &r);
    pthread_mutex_unlock(&s3->lock);
    keel__req_free(&r);
    return rc;
}
