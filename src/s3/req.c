/* req.c -- the S3 request engine: names, setup, callbacks, verdicts, retries.
**
** The one place keel talks to the network (see s3.h for the contract). A
** request is described by a `req` (method, URL, what to send, where the
** answer goes), run on an easy handle (keel__req_run, single requests) or
** on one of the lanes of the multi handle (lanes.c), then judged by one
** function, keel__req_verdict, into KEEL_OK, a conditional result or an
** error message. The calls that use it: s3.c, lanes.c, list.c.
**
** Invariants:
** (1) A body never lands outside the caller's buffer: the write callback
**     refuses the byte past cap and the request fails.
** (2) A ranged read succeeds only with status, Content-Range and body length
**     all matching the range asked for; otherwise nothing is claimed read.
** (3) Every request carries x-amz-content-sha256: UNSIGNED-PAYLOAD and is
**     signed by libcurl (CURLOPT_AWS_SIGV4) with the client's keys.
** (4) Keys and bucket names are of characters that need no URL encoding, so
**     the path libcurl signs is the path the server sees.
** (5) Every try of a request ends by a deadline that a slow answer cannot
**     stretch: connect timeout + stall timeout + B / min_rate, where B is
**     the most of the bytes expected (the range asked for, the upload, the
**     answer's Content-Length) and the bytes moved so far. A trickle that
**     keeps the connection alive without ever averaging min_rate fails
**     there; so does a stop (keel_set_cancel) within a second.
** (6) Nothing is copied into a fixed buffer that could cut it short: header
**     values of any length reach libcurl whole; what comes from the server
**     (error bodies, header lines) is read up to a bound, and an error body
**     past its bound ends the request as the error its status says.
** (7) The conditional results KEEL_S3_EXISTS and KEEL_S3_NOT_MODIFIED come
**     only from requests that asked for them; an unasked 304 or 412 is an
**     error like any other status.
*/
#include "base/internal.h"
#include "s3/req.h"
#include "os/os.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

/* --- names and URLs ---------------------------------------------------- */

/* A key keel sends as it is: safe characters only, and no "." or ".."
** segment, which an HTTP path would resolve into another key (or another
** bucket: s3://b/../c). */
int
keel__s3_key_ok(const char *k)
{
    if (!k || !*k || strlen(k) > 1024)
        return 0;
    for (const char *p = k; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '~' ||
              c == '/' || c == '-'))
            return 0;
    }
    for (const char *seg = k; seg;) {
        const char *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);
        if ((n == 1 && seg[0] == '.') ||
            (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return 0;
        seg = end ? end + 1 : NULL;
    }
    return 1;
}

static int
bucket_ok(const char *b)
{
    size_t n = b ? strlen(b) : 0;
    if (n < 3 || n > 63)
        return 0;
    for (const char *p = b; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-'))
            return 0;
    return 1;
}

int
keel__s3_check_names(const char *bucket, const char *key)
{
    if (!bucket_ok(bucket))
        return keel__fail(KEEL_EINVAL,
                          "'%s' is not a bucket name\nhelp: bucket names "
                          "are 3 to 63 of a-z, 0-9, '.' and '-'",
                          bucket ? bucket : "(null)");
    if (key && !keel__s3_key_ok(key))
        return keel__fail(KEEL_EINVAL,
                          "object key '%s' has characters or a '.' or '..' "
                          "part keel does not send\nhelp: use keys of A-Z "
                          "a-z 0-9 . _ ~ / - only (at most 1024), without "
                          "'.' or '..' between slashes", key);
    return KEEL_OK;
}

void
keel__req_init(req *r, const keel_s3 *s3, const char *method,
               const char *bucket, const char *key)
{
    memset(r, 0, sizeof *r);
    r->method = method;
    r->bucket = bucket;
    r->key = key;
    r->fd = -1;
    snprintf(r->url, sizeof r->url, "%s/%s/%s", s3->endpoint, bucket,
             key ? key : "");
}

/* --- callbacks ------------------------------------------------------- */

/* Parses "bytes FIRST-LAST/TOTAL" (or "bytes * /TOTAL" on a 416). */
static void
parse_content_range(req *r, const char *v)
{
    unsigned long long a, b, t;
    if (sscanf(v, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
        r->has_range = 1;
        r->range_first = a;
        r->range_last = b;
        r->range_total = t;
    } else if (sscanf(v, "bytes */%llu", &t) == 1) {
        r->range_total = t;
    }
}

static int
header_is(const char *line, size_t n, const char *name, const char **value)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
        return 0;
    const char *v = line + k + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    *value = v;
    return 1;
}

static size_t
on_header(char *data, size_t size, size_t n, void *arg)
{
    req *r = arg;
    size_t len = size * n;
    char line[512];
    size_t m = KEEL_MIN(len, sizeof line - 1);
    memcpy(line, data, m);
    line[m] = '\0';
    while (m && (line[m - 1] == '\r' || line[m - 1] == '\n'))
        line[--m] = '\0';
    const char *v;
    if (strncmp(line, "HTTP/", 5) == 0) {
        /* a new status line (after 100 Continue): forget the former one */
        const char *sp = strchr(line, ' ');
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->has_range = r->has_length = 0;
        r->etag[0] = '\0';
        r->location[0] = '\0';
    } else if (header_is(line, m, "content-range", &v)) {
        parse_content_range(r, v);
    } else if (header_is(line, m, "content-length", &v)) {
        r->has_length = 1;
        r->length = strtoull(v, NULL, 10);
    } else if (header_is(line, m, "etag", &v)) {
        snprintf(r->etag, sizeof r->etag, "%s", v);
    } else if (header_is(line, m, "location", &v)) {
        snprintf(r->location, sizeof r->location, "%s", v);
    }
    return len;
}

/* Invariant (1): the body goes into buf and never past cap; an error
** answer's body goes to errbody (truncated) for its <Code>. */
static size_t
on_body(char *data, size_t size, size_t n, void *arg)
{
    req *r = arg;
    size_t len = size * n;
    if (r->status < 200 || r->status > 299) {
        size_t room = sizeof r->errbody - 1 - r->errlen;
        size_t m = KEEL_MIN(len, room);
        memcpy(r->errbody + r->errlen, data, m);
        r->errlen += m;
        r->errbody[r->errlen] = '\0';
        if (m < len) {
            r->errcut = 1; /* invariant (6): no more of an error body */
            return 0;
        }
        return len;
    }
    if (len > r->cap - r->got) {
        r->overflow = 1;
        return 0; /* CURLE_WRITE_ERROR */
    }
    if (r->grow) {
        unsigned char *nb = realloc(r->buf, r->got + len);
        if (!nb) {
            r->overflow = 1;
            return 0;
        }
        r->buf = nb;
    }
    memcpy(r->buf + r->got, data, len);
    r->got += len;
    return len;
}

static size_t
on_read(char *dst, size_t size, size_t n, void *arg)
{
    req *r = arg;
    size_t want = (size_t)KEEL_MIN((uint64_t)(size * n), r->src_len - r->sent);
    if (want == 0)
        return 0;
    if (r->src) {
        memcpy(dst, r->src + r->sent, want);
    } else {
        ssize_t got = keel__os->pread(r->fd, dst, want, r->src_off + r->sent);
        if (got <= 0) {
            r->read_errno = got < 0 ? (int)-got : EIO;
            return CURL_READFUNC_ABORT;
        }
        want = (size_t)got;
    }
    r->sent += want;
    return want;
}

/* Invariant (5): the deadline, and the stop, polled by libcurl about once
** a second and whenever bytes move. */
static int
on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
            curl_off_t ultotal, curl_off_t ulnow)
{
    req *r = arg;
    if (r->stop && keel__stop_poll(r->stop)) {
        r->canceled = 1;
        return 1;
    }
    uint64_t moved = (uint64_t)KEEL_MAX(dlnow, ulnow);
    uint64_t bytes = KEEL_MAX(r->expect, moved);
    bytes = KEEL_MAX(bytes, (uint64_t)KEEL_MAX(dltotal, ultotal));
    uint64_t limit = r->allow_ms + bytes * 1000u / r->min_rate;
    if (keel__req_now_ms() - r->start_ms > limit) {
        r->late = 1;
        r->moved = moved;
        return 1;
    }
    return 0;
}

static int
on_seek(void *arg, curl_off_t off, int origin)
{
    req *r = arg;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->src_len)
        return CURL_SEEKFUNC_CANTSEEK;
    r->sent = (uint64_t)off;
    return CURL_SEEKFUNC_OK;
}

/* --- setting a request up ------------------------------------------------ */

/* Appends "name: value" ("name:" alone removes a header libcurl would add),
** whatever its length (invariant 6: a session token runs to thousands of
** characters, with no documented maximum). */
static struct curl_slist *
add_header(struct curl_slist *l, int *ok, const char *name, const char *v)
{
    size_t len = strlen(name) + strlen(v) + 3;
    char *h = keel__malloc(len);
    if (!h) {
        *ok = 0;
        return l;
    }
    snprintf(h, len, *v ? "%s: %s" : "%s:", name, v);
    struct curl_slist *n = curl_slist_append(l, h);
    keel__free(h);
    if (!n) {
        *ok = 0;
        return l;
    }
    return n;
}

/* Resets the answer part of r, for a first try or a retry. */
static void
req_rearm(req *r)
{
    r->sent = 0;
    r->got = 0;
    r->overflow = 0;
    r->read_errno = 0;
    r->status = 0;
    r->has_range = r->has_length = 0;
    r->etag[0] = '\0';
    r->errbody[0] = '\0';
    r->errlen = 0;
    r->curlerr[0] = '\0';
    r->location[0] = '\0';
    r->errcut = 0;
    r->late = r->canceled = 0;
    r->moved = 0;
    r->cc = CURLE_OK;
}

int
keel__req_setup(keel_s3 *s3, CURL *h, req *r)
{
    req_rearm(r);
    r->start_ms = keel__req_now_ms();
    r->allow_ms = (uint64_t)s3->connect_timeout_ms +
                  (uint64_t)s3->stall_timeout_s * 1000u;
    r->min_rate = s3->min_rate ? s3->min_rate : 1;
    if (!r->stop)
        r->stop = s3->stop;
    if (r->range[0])
        r->expect = r->cap;
    else if (strcmp(r->method, "PUT") == 0)
        r->expect = r->src_len;
    curl_slist_free_all(r->headers);
    r->headers = NULL;
    curl_easy_reset(h);
    int ok = 1;
    struct curl_slist *l = NULL;
    l = add_header(l, &ok, "x-amz-content-sha256", "UNSIGNED-PAYLOAD");
    if (s3->token)
        l = add_header(l, &ok, "x-amz-security-token", s3->token);
    if (r->range[0])
        l = add_header(l, &ok, "Range", r->range);
    if (r->if_none_match)
        l = add_header(l, &ok, "If-None-Match", r->if_none_match);
    r->headers = l;
    if (!ok)
        return keel__fail(KEEL_ENOMEM, "could not allocate request headers "
                          "for %s\nhelp: free memory", r->url);

    curl_easy_setopt(h, CURLOPT_URL, r->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s3->sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, s3->access_key);
    curl_easy_setopt(h, CURLOPT_PASSWORD, s3->secret_key);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)s3->connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)s3->stall_timeout_s);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 500L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->curlerr);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_PRIVATE, r);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, r);
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, r);
        curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->src_len);
    } else if (strcmp(r->method, "DELETE") == 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    return KEEL_OK;
}

/* --- judging an answer --------------------------------------------------- */

/* The <Code> of an S3 error body, or "" (HEAD answers have no body). */
static void
error_code(const req *r, char *out, size_t cap)
{
    out[0] = '\0';
    const char *a = strstr(r->errbody, "<Code>");
    const char *b = a ? strstr(a, "</Code>") : NULL;
    if (a && b) {
        a += 6;
        size_t n = KEEL_MIN((size_t)(b - a), cap - 1);
        for (size_t i = 0; i < n; i++)
            if (!((a[i] >= 'A' && a[i] <= 'Z') || (a[i] >= 'a' && a[i] <= 'z')
                  || (a[i] >= '0' && a[i] <= '9') || a[i] == '.'))
                return; /* not a code: left out of messages */
        memcpy(out, a, n);
        out[n] = '\0';
    }
}

void
keel__req_ended(req *r, CURLcode cc)
{
    r->cc = cc;
    if (cc == CURLE_WRITE_ERROR && r->errcut)
        r->cc = CURLE_OK; /* judged by its status, as if read whole */
}

int
keel__req_retryable(const req *r)
{
    switch (r->cc) {
    case CURLE_OK:
        return r->status >= 500 && r->status != 501;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static int
transport_error(const keel_s3 *s3, const req *r, uint32_t attempts)
{
    const char *why = r->curlerr[0] ? r->curlerr : curl_easy_strerror(r->cc);
    CURLcode cc = r->cc;
    if (r->late && r->moved == 0) {
        /* the deadline of a request that moved nothing: a stall */
        cc = CURLE_OPERATION_TIMEDOUT;
        why = "no byte of the answer arrived";
    }
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        return keel__fail(KEEL_EIO,
                          "could not connect to %s for %s %s: %s\nhelp: "
                          "check AWS_ENDPOINT_URL (now %s) and that the "
                          "object store there is running and reachable",
                          s3->endpoint, r->method, r->url, why, s3->endpoint);
    case CURLE_OPERATION_TIMEDOUT:
        return keel__fail(KEEL_EIO,
                          "%s %s timed out: %s (connect timeout %" PRIu32
                          " ms, stall timeout %" PRIu32 " s)\nhelp: the "
                          "object store at %s is not answering; check that "
                          "it is up and not overloaded, or raise the "
                          "timeouts (KEEL_S3_CONNECT_TIMEOUT_MS, "
                          "KEEL_S3_STALL_TIMEOUT_S)",
                          r->method, r->url, why, s3->connect_timeout_ms,
                          s3->stall_timeout_s, s3->endpoint);
    case CURLE_ABORTED_BY_CALLBACK:
    case CURLE_READ_ERROR:
        if (r->canceled)
            return keel__fail(KEEL_ECANCELED,
                              "cancelled during %s %s\nhelp: the cancel "
                              "callback (keel_set_cancel) asked to stop; "
                              "nothing was kept of the request",
                              r->method, r->url);
        if (r->late)
            return keel__fail(KEEL_EIO,
                              "%s %s timed out: %" PRIu64 " bytes in %.1f "
                              "s, past its deadline (connect timeout %" PRIu32
                              " ms + stall timeout %" PRIu32 " s + the bytes "
                              "at the minimum rate, %" PRIu32 " bytes/s)\n"
                              "help: the object "
                              "store at %s answers too slowly; check the "
                              "network path and the store's load, or lower "
                              "KEEL_S3_MIN_RATE (bytes/s) or raise "
                              "KEEL_S3_STALL_TIMEOUT_S",
                              r->method, r->url, r->moved,
                              (double)(keel__req_now_ms() - r->start_ms) /
                                  1000.0,
                              s3->connect_timeout_ms, s3->stall_timeout_s,
                              r->min_rate, s3->endpoint);
        if (r->read_errno)
            return keel__fail(KEEL_EIO,
                              "reading the file to upload to %s: %s\nhelp: "
                              "check the file and its disk",
                              r->url, strerror(r->read_errno));
        break;
    case CURLE_WRITE_ERROR:
        if (r->overflow && r->grow)
            return keel__fail(KEEL_EIO,
                              "GET %s: the object is larger than %zu bytes"
                              "\nhelp: this is not an object keel wrote",
                              r->url, r->cap);
        if (r->overflow)
            return keel__fail(KEEL_EIO,
                              "%s %s sent more than the %zu bytes expected"
                              "\nhelp: the object changed or the server "
                              "ignored the range; nothing was read",
                              r->method, r->url, r->cap);
        break;
    default:
        break;
    }
    return keel__fail(KEEL_EIO,
                      "%s %s failed after %" PRIu32 " attempt%s: %s\nhelp: "
                      "check the network path to %s, then retry",
                      r->method, r->url, attempts, attempts == 1 ? "" : "s",
                      why, s3->endpoint);
}

static int
status_error(const keel_s3 *s3, const req *r, uint32_t attempts)
{
    char code[96];
    error_code(r, code, sizeof code);
    /* A request on the bucket itself (a listing) names no object: its 404
     * says the bucket is missing, whatever code (or garbage) came with it. */
    if (r->status == 404 && (strcmp(code, "NoSuchBucket") == 0 ||
                             !r->key || !r->key[0]))
        return keel__fail(KEEL_ENOTFOUND,
                          "no bucket '%s' at %s (404 %s for %s %s)"
                          "\nhelp: create the bucket, or check the bucket "
                          "name in the URL",
                          r->bucket, s3->endpoint,
                          code[0] ? code : "without an S3 error code",
                          r->method, r->url);
    if (r->status == 404)
        return keel__fail(KEEL_ENOTFOUND,
                          "no object '%s' in bucket '%s' at %s (404%s%s)"
                          "\nhelp: check the bucket and prefix in the URL, "
                          "or publish the index there first",
                          r->key ? r->key : "", r->bucket, s3->endpoint,
                          code[0] ? " " : "", code);
    if (r->status == 403 &&
        (strcmp(code, "SignatureDoesNotMatch") == 0 ||
         strcmp(code, "InvalidAccessKeyId") == 0 ||
         strcmp(code, "InvalidToken") == 0 ||
         strcmp(code, "ExpiredToken") == 0 || code[0] == '\0'))
        return keel__fail(KEEL_EIO,
                          "%s refused the credentials for %s %s (403 %s)"
                          "\nhelp: check AWS_ACCESS_KEY_ID, "
                          "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and "
                          "AWS_REGION for this endpoint",
                          s3->endpoint, r->method, r->url,
                          code[0] ? code : "Forbidden");
    if (r->status == 403)
        return keel__fail(KEEL_EIO,
                          "%s denied %s %s (403 %s)\nhelp: grant the key "
                          "access to bucket '%s'",
                          s3->endpoint, r->method, r->url, code, r->bucket);
    if (r->status == 304 || r->status == 412)
        return keel__fail(KEEL_EIO,
                          "%s %s answered %ld (%s) to a request that did "
                          "not ask for it\nhelp: something between keel "
                          "and %s answers conditions keel did not set (a "
                          "caching proxy?); point AWS_ENDPOINT_URL at the "
                          "store itself",
                          r->method, r->url, r->status,
                          r->status == 304 ? "Not Modified"
                                           : "Precondition Failed",
                          s3->endpoint);
    if (r->status >= 300 && r->status <= 399)
        return keel__fail(KEEL_EIO,
                          "%s %s was redirected (%ld%s%s) to %s; keel does "
                          "not follow redirects\nhelp: set AWS_ENDPOINT_URL "
                          "(now %s) to the endpoint that holds bucket '%s' "
                          "(on AWS, its region's: check AWS_REGION)",
                          r->method, r->url, r->status, code[0] ? " " : "",
                          code, r->location[0] ? r->location : "(no Location)",
                          s3->endpoint, r->bucket);
    return keel__fail(KEEL_EIO,
                      "%s %s answered %ld%s%s after %" PRIu32 " attempt%s"
                      "\nhelp: %s",
                      r->method, r->url, r->status, code[0] ? " " : "", code,
                      attempts, attempts == 1 ? "" : "s",
                      r->status >= 500 ? "the object store is failing; "
                                         "retry later"
                                       : "check the URL and the store's "
                                         "support for this request");
}

/* Invariant (2): a ranged answer must be exactly the range asked for. */
int
keel__req_range_verdict(const req *r, uint64_t off, size_t len)
{
    if (r->status == 416)
        return keel__fail(KEEL_EIO,
                          "GET %s bytes [%" PRIu64 ", %" PRIu64 ") starts "
                          "past the end of the object (416)\nhelp: the "
                          "object is shorter than the index says; "
                          "republish it",
                          r->url, off, off + len);
    if (r->status == 200 && off == 0 && r->got == len &&
        (!r->has_length || r->length == len))
        return KEEL_OK; /* the whole object was the range */
    if (r->status == 206 && r->has_range && r->range_first == off &&
        r->range_last == off + len - 1 && r->got == len)
        return KEEL_OK;
    if (r->status == 206 && r->has_range && r->range_first == off &&
        r->range_total < off + len)
        return keel__fail(KEEL_EIO,
                          "GET %s bytes [%" PRIu64 ", %" PRIu64 ") runs "
                          "past the end of the object (%" PRIu64 " bytes): "
                          "got %zu bytes\nhelp: the object is shorter than "
                          "the index says; republish it",
                          r->url, off, off + len, r->range_total, r->got);
    return keel__fail(KEEL_EIO,
                      "GET %s bytes [%" PRIu64 ", %" PRIu64 ") answered %ld "
                      "with %zu bytes%s\nhelp: the store did not return the "
                      "range asked for; nothing was read",
                      r->url, off, off + len, r->status, r->got,
                      r->has_range ? " of another range" : "");
}

/* What the answer to r means: KEEL_OK, KEEL_S3_EXISTS, KEEL_S3_NOT_MODIFIED
** or an error with its message. */
int
keel__req_verdict(const keel_s3 *s3, const req *r, uint32_t attempts)
{
    if (r->cc != CURLE_OK)
        return transport_error(s3, r, attempts);
    /* invariant (7): only what was asked for */
    int inm = r->if_none_match != NULL;
    int create = inm && strcmp(r->if_none_match, "*") == 0;
    if (r->status == 412 && create && strcmp(r->method, "PUT") == 0)
        return KEEL_S3_EXISTS;
    if (r->status == 304 && inm && !create &&
        (strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0))
        return KEEL_S3_NOT_MODIFIED;
    if (r->status == 416 || (r->range[0] && r->status == 206))
        return KEEL_OK; /* judged by keel__req_range_verdict */
    if (r->status < 200 || r->status > 299)
        return status_error(s3, r, attempts);
    return KEEL_OK;
}

uint64_t
keel__req_backoff_ms(uint32_t attempt)
{
    static uint64_t seed = 0x9e3779b97f4a7c15ull;
    uint64_t x = __atomic_add_fetch(&seed, 0x9e3779b97f4a7c15ull,
                                    __ATOMIC_RELAXED);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    uint64_t base = KEEL_MIN(50ull << KEEL_MIN(attempt, 6u), 2000ull);
    return base / 2 + x % (base / 2 + 1); /* jitter: [base/2, base] */
}

static void
sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Runs r on the client's easy handle, with retries. */
int
keel__req_run(keel_s3 *s3, req *r)
{
    uint32_t attempt = 0;
    for (;;) {
        int rc = keel__req_setup(s3, s3->easy, r);
        if (rc != KEEL_OK)
            return rc;
        keel__req_ended(r, curl_easy_perform(s3->easy));
        attempt++;
        if (!keel__req_retryable(r) || attempt >= s3->max_attempts)
            return keel__req_verdict(s3, r, attempt);
        sleep_ms(keel__req_backoff_ms(attempt - 1));
    }
}

void
keel__req_free(req *r)
{
    curl_slist_free_all(r->headers);
    r->headers = NULL;
}

void
keel__req_set_range(req *r, uint64_t off, size_t len)
{
    snprintf(r->range, sizeof r->range, "bytes=%" PRIu64 "-%" PRIu64, off,
             off + len - 1);
}

uint64_t
keel__req_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

