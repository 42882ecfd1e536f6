/* s3.c -- S3 requests over libcurl: signing, addressing, checks, retries.
**
** The one place keel talks to the network (see s3.h for the contract). A
** request is described by a `req` (method, URL, what to send, where the
** answer goes), run on an easy handle (single requests) or on one of the
** lanes of the multi handle (get_ranges), then judged by one function,
** req_verdict, into KEEL_OK, a conditional result or an error message.
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
*/
#include "base/internal.h"
#include "s3/s3.h"
#include "os/os.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

#define S3_URL_MAX 2048
#define S3_ERRBODY_MAX 1024

struct keel_s3 {
    pthread_mutex_t lock;  /* one request (or get_ranges call) at a time */
    CURL *easy;            /* single requests; its connections persist */
    CURLM *multi;          /* get_ranges; a pool of its own */
    CURL **lanes;          /* max_inflight easy handles for multi */
    char *endpoint;        /* no trailing slash */
    char *access_key, *secret_key, *token;
    char sigv4[96];        /* "aws:amz:REGION:s3" */
    uint32_t connect_timeout_ms, stall_timeout_s, max_attempts, max_inflight;
};

/* One request and its answer. */
typedef struct req {
    const char *method;      /* GET HEAD PUT DELETE */
    const char *bucket, *key;
    char url[S3_URL_MAX];
    char range[64];          /* Range header value, "" for none */
    const char *if_none_match; /* header value or NULL */
    /* upload: from memory (src) or from fd */
    const unsigned char *src;
    int fd;
    uint64_t src_off, src_len, sent;
    int read_errno;          /* a failed pread of the upload, or 0 */
    /* download sink: buf of cap bytes, or grown up to cap when grow */
    unsigned char *buf;
    size_t cap, got;
    int grow, overflow;
    /* answer */
    long status;
    int has_range;
    uint64_t range_first, range_last, range_total;
    int has_length;
    uint64_t length;
    char etag[KEEL_S3_ETAG_MAX];
    char errbody[S3_ERRBODY_MAX];
    size_t errlen;
    CURLcode cc;
    char curlerr[CURL_ERROR_SIZE];
    struct curl_slist *headers;
} req;

/* --- names and URLs ---------------------------------------------------- */

/* A key keel sends as it is: safe characters only, and no "." or ".."
** segment, which an HTTP path would resolve into another key (or another
** bucket: s3://b/../c). */
static int
key_ok(const char *k)
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

static int
check_names(const char *bucket, const char *key)
{
    if (!bucket_ok(bucket))
        return keel__fail(KEEL_EINVAL,
                          "'%s' is not a bucket name\nhelp: bucket names "
                          "are 3 to 63 of a-z, 0-9, '.' and '-'",
                          bucket ? bucket : "(null)");
    if (key && !key_ok(key))
        return keel__fail(KEEL_EINVAL,
                          "object key '%s' has characters or a '.' or '..' "
                          "part keel does not send\nhelp: use keys of A-Z "
                          "a-z 0-9 . _ ~ / - only (at most 1024), without "
                          "'.' or '..' between slashes", key);
    return KEEL_OK;
}

static void
req_init(req *r, const keel_s3 *s3, const char *method, const char *bucket,
         const char *key)
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
    } else if (header_is(line, m, "content-range", &v)) {
        parse_content_range(r, v);
    } else if (header_is(line, m, "content-length", &v)) {
        r->has_length = 1;
        r->length = strtoull(v, NULL, 10);
    } else if (header_is(line, m, "etag", &v)) {
        snprintf(r->etag, sizeof r->etag, "%s", v);
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

/* Appends "name: value" ("name:" alone removes a header libcurl would add). */
static struct curl_slist *
add_header(struct curl_slist *l, int *ok, const char *name, const char *v)
{
    char h[512];
    snprintf(h, sizeof h, *v ? "%s: %s" : "%s:", name, v);
    struct curl_slist *n = curl_slist_append(l, h);
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
    r->cc = CURLE_OK;
}

static int
req_setup(keel_s3 *s3, CURL *h, req *r)
{
    req_rearm(r);
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
        memcpy(out, a, n);
        out[n] = '\0';
    }
}

static int
retryable(const req *r)
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
    switch (r->cc) {
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
    if (r->status == 404 && strcmp(code, "NoSuchBucket") == 0)
        return keel__fail(KEEL_ENOTFOUND,
                          "no bucket '%s' at %s (404 NoSuchBucket for %s %s)"
                          "\nhelp: create the bucket, or check the bucket "
                          "name in the URL",
                          r->bucket, s3->endpoint, r->method, r->url);
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
static int
range_verdict(const req *r, uint64_t off, size_t len)
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
static int
req_verdict(const keel_s3 *s3, const req *r, uint32_t attempts)
{
    if (r->cc != CURLE_OK)
        return transport_error(s3, r, attempts);
    if (r->status == 412 && strcmp(r->method, "PUT") == 0)
        return KEEL_S3_EXISTS;
    if (r->status == 304)
        return KEEL_S3_NOT_MODIFIED;
    if (r->status == 416 || (r->range[0] && r->status == 206))
        return KEEL_OK; /* judged by range_verdict */
    if (r->status < 200 || r->status > 299)
        return status_error(s3, r, attempts);
    return KEEL_OK;
}

static uint64_t
backoff_ms(uint32_t attempt)
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
static int
req_run(keel_s3 *s3, req *r)
{
    uint32_t attempt = 0;
    for (;;) {
        int rc = req_setup(s3, s3->easy, r);
        if (rc != KEEL_OK)
            return rc;
        r->cc = curl_easy_perform(s3->easy);
        attempt++;
        if (!retryable(r) || attempt >= s3->max_attempts)
            return req_verdict(s3, r, attempt);
        sleep_ms(backoff_ms(attempt - 1));
    }
}

static void
req_free(req *r)
{
    curl_slist_free_all(r->headers);
    r->headers = NULL;
}

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

    uint32_t connect_ms, stall_s;
    int rc = pick_timeout(cfg->connect_timeout_ms,
                          "KEEL_S3_CONNECT_TIMEOUT_MS", 5000, &connect_ms);
    if (rc || (rc = pick_timeout(cfg->stall_timeout_s,
                                 "KEEL_S3_STALL_TIMEOUT_S", 10, &stall_s)))
        return rc;

    keel_s3 *s3 = keel__calloc(1, sizeof *s3);
    if (!s3)
        return KEEL_ENOMEM;
    pthread_mutex_init(&s3->lock, NULL);
    s3->connect_timeout_ms = connect_ms;
    s3->stall_timeout_s = stall_s;
    s3->max_attempts = cfg->max_attempts ? cfg->max_attempts : 4;
    s3->max_inflight = cfg->max_inflight ? cfg->max_inflight : 16;
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

const char *
keel__s3_endpoint(const keel_s3 *s3)
{
    return s3->endpoint;
}

/* --- single requests --------------------------------------------------------- */

static void
set_range(req *r, uint64_t off, size_t len)
{
    snprintf(r->range, sizeof r->range, "bytes=%" PRIu64 "-%" PRIu64, off,
             off + len - 1);
}

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
    int rc = check_names(bucket, key);
    if (rc != KEEL_OK || len == 0)
        return rc;
    req r;
    req_init(&r, s3, "GET", bucket, key);
    set_range(&r, off, len);
    r.buf = buf;
    r.cap = len;
    pthread_mutex_lock(&s3->lock);
    rc = req_run(s3, &r);
    if (rc == KEEL_OK)
        rc = range_verdict(&r, off, len);
    pthread_mutex_unlock(&s3->lock);
    req_free(&r);
    return rc;
}

int
keel__s3_get(keel_s3 *s3, const char *bucket, const char *key,
             const char *if_none_match, size_t max, void **data, size_t *len,
             keel_s3_object *obj)
{
    *data = NULL;
    *len = 0;
    int rc = check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    req_init(&r, s3, "GET", bucket, key);
    r.if_none_match = if_none_match;
    r.grow = 1;
    r.cap = max;
    pthread_mutex_lock(&s3->lock);
    rc = req_run(s3, &r);
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
    req_free(&r);
    return rc;
}

int
keel__s3_head(keel_s3 *s3, const char *bucket, const char *key,
              keel_s3_object *obj)
{
    int rc = check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    req_init(&r, s3, "HEAD", bucket, key);
    pthread_mutex_lock(&s3->lock);
    rc = req_run(s3, &r);
    pthread_mutex_unlock(&s3->lock);
    if (rc == KEEL_OK)
        fill_object(&r, obj);
    req_free(&r);
    return rc;
}

static int
put_req(keel_s3 *s3, req *r, unsigned flags, keel_s3_object *obj)
{
    if (flags & KEEL_S3_CREATE_ONLY)
        r->if_none_match = "*";
    pthread_mutex_lock(&s3->lock);
    int rc = req_run(s3, r);
    pthread_mutex_unlock(&s3->lock);
    if (rc == KEEL_OK && obj) {
        obj->size = r->src_len;
        snprintf(obj->etag, sizeof obj->etag, "%s", r->etag);
    }
    req_free(r);
    return rc;
}

int
keel__s3_put(keel_s3 *s3, const char *bucket, const char *key,
             const void *data, size_t len, unsigned flags, keel_s3_object *obj)
{
    int rc = check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    req_init(&r, s3, "PUT", bucket, key);
    r.src = data ? data : (const unsigned char *)"";
    r.src_len = len;
    return put_req(s3, &r, flags, obj);
}

int
keel__s3_put_file(keel_s3 *s3, const char *bucket, const char *key, int fd,
                  uint64_t off, uint64_t len, unsigned flags,
                  keel_s3_object *obj)
{
    int rc = check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    req_init(&r, s3, "PUT", bucket, key);
    r.fd = fd;
    r.src_off = off;
    r.src_len = len;
    return put_req(s3, &r, flags, obj);
}

int
keel__s3_delete(keel_s3 *s3, const char *bucket, const char *key)
{
    int rc = check_names(bucket, key);
    if (rc != KEEL_OK)
        return rc;
    req r;
    req_init(&r, s3, "DELETE", bucket, key);
    pthread_mutex_lock(&s3->lock);
    rc = req_run(s3, &r);
    pthread_mutex_unlock(&s3->lock);
    req_free(&r);
    return rc;
}

/* --- concurrent ranged GETs ------------------------------------------------- */

/* A lane runs one range at a time on its own easy handle in the multi. */
typedef struct lane {
    CURL *h;
    req r;
    size_t idx;          /* the range it serves */
    uint32_t attempts;   /* of that range */
    int busy;            /* added to the multi */
    int waiting;         /* backing off until wake_ms */
    uint64_t wake_ms;
} lane;

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* What one kind of concurrent request does on a lane: prepare fills the
** request for item i; verdict judges an ended one (retries spent or not
** needed) and returns KEEL_OK or the error that stops the whole call. */
typedef struct lane_ops {
    const char *what;    /* "GETs from", "PUTs to": for messages */
    void (*prepare)(keel_s3 *s3, req *r, const char *bucket, size_t i,
                    void *arg);
    int (*verdict)(keel_s3 *s3, req *r, uint32_t attempts, size_t i,
                   void *arg);
} lane_ops;

/* Runs n requests on up to inflight lanes of the client's multi handle:
** each lane takes the next item, retries a retryable failure after a
** backoff (other lanes go on meanwhile), and the first failure the verdict
** returns stops the call. Every lane is taken off the multi handle before
** it returns. stop (may be NULL) is polled before each round and the waits
** between rounds last at most its slice: once it says stop, the requests
** on the wire are abandoned (their lanes taken off, their connections
** closed) and the call fails with KEEL_ECANCELED; a buffer may then hold
** part of an answer, which the caller must not use. */
static int
lanes_run(keel_s3 *s3, const char *bucket, size_t n, uint32_t inflight,
          const lane_ops *ops, void *arg, keel_stop *stop)
{
    if (inflight == 0 || inflight > s3->max_inflight)
        inflight = s3->max_inflight;
    uint32_t nl = (uint32_t)KEEL_MIN((size_t)inflight, n);
    lane *lanes = keel__calloc(nl, sizeof *lanes);
    if (!lanes)
        return KEEL_ENOMEM;
    pthread_mutex_lock(&s3->lock);
    for (uint32_t i = 0; i < nl; i++)
        lanes[i].h = s3->lanes[i];
    size_t next = 0, done = 0;
    int rc = KEEL_OK;
    while (rc == KEEL_OK && done < n) {
        if (keel__stop_poll(stop)) {
            rc = keel__fail(KEEL_ECANCELED, "cancelled with %zu of %zu %s "
                            "%s answered\nhelp: the cancel callback "
                            "(keel_set_cancel) asked to stop; nothing was "
                            "kept of the requests it cut short", done, n,
                            ops->what, s3->endpoint);
            break;
        }
        uint64_t now = now_ms();
        int wait = (int)KEEL_MIN(100u, keel__stop_slice_ms(stop));
        for (uint32_t i = 0; rc == KEEL_OK && i < nl; i++) {
            lane *ln = &lanes[i];
            if (ln->busy)
                continue;
            if (ln->waiting && ln->wake_ms > now) {
                wait = (int)KEEL_MIN((uint64_t)wait, ln->wake_ms - now);
                continue;
            }
            if (!ln->waiting) {
                if (next == n)
                    continue;
                ln->idx = next++;
                ln->attempts = 0;
            }
            req_free(&ln->r);
            ops->prepare(s3, &ln->r, bucket, ln->idx, arg);
            if ((rc = req_setup(s3, ln->h, &ln->r)) != KEEL_OK)
                break;
            if (curl_multi_add_handle(s3->multi, ln->h) != CURLM_OK)
                rc = keel__fail(KEEL_ENOMEM, "could not queue %s %s\nhelp: "
                                "free memory", ln->r.method, ln->r.url);
            ln->busy = rc == KEEL_OK;
            ln->waiting = 0;
        }
        int running = 0;
        if (rc == KEEL_OK &&
            curl_multi_perform(s3->multi, &running) != CURLM_OK)
            rc = keel__fail(KEEL_EIO, "the transfer engine failed during "
                            "%s %s\nhelp: retry", ops->what, s3->endpoint);
        CURLMsg *m;
        int left, ended = 0;
        while (rc == KEEL_OK && (m = curl_multi_info_read(s3->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            req *r = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            lane *ln = (lane *)((char *)r - offsetof(lane, r));
            curl_multi_remove_handle(s3->multi, ln->h);
            ln->busy = 0;
            ln->r.cc = m->data.result;
            ln->attempts++;
            ended = 1;
            if (retryable(&ln->r) && ln->attempts < s3->max_attempts) {
                ln->waiting = 1;
                ln->wake_ms = now_ms() + backoff_ms(ln->attempts - 1);
                continue;
            }
            done++;
            rc = ops->verdict(s3, &ln->r, ln->attempts, ln->idx, arg);
        }
        /* a lane that just ended takes the next item before any wait */
        if (rc == KEEL_OK && done < n && !ended)
            curl_multi_poll(s3->multi, NULL, 0, wait, NULL);
    }
    for (uint32_t i = 0; i < nl; i++) {
        if (lanes[i].busy)
            curl_multi_remove_handle(s3->multi, lanes[i].h);
        req_free(&lanes[i].r);
    }
    pthread_mutex_unlock(&s3->lock);
    keel__free(lanes);
    return rc;
}

/* --- concurrent ranged GETs ---------------------------------------------- */

static void
range_prepare(keel_s3 *s3, req *r, const char *bucket, size_t i, void *arg)
{
    const keel_s3_range *rg = (const keel_s3_range *)arg + i;
    req_init(r, s3, "GET", bucket, rg->key);
    set_range(r, rg->off, rg->len);
    r->buf = rg->buf;
    r->cap = rg->len;
}

static int
range_judge(keel_s3 *s3, req *r, uint32_t attempts, size_t i, void *arg)
{
    const keel_s3_range *rg = (const keel_s3_range *)arg + i;
    int rc = req_verdict(s3, r, attempts);
    if (rc == KEEL_OK)
        return range_verdict(r, rg->off, rg->len);
    if (rc < 0)
        return keel__fail(KEEL_EIO, "GET %s answered %ld to a plain ranged "
                          "read\nhelp: check the store", r->url, r->status);
    return rc;
}

static const lane_ops range_ops = {"GETs from", range_prepare, range_judge};

int
keel__s3_get_ranges(keel_s3 *s3, const char *bucket,
                    const keel_s3_range *ranges, size_t n, uint32_t inflight,
                    keel_stop *stop)
{
    int rc = check_names(bucket, NULL);
    for (size_t i = 0; rc == KEEL_OK && i < n; i++) {
        rc = check_names(bucket, ranges[i].key);
        if (rc == KEEL_OK && ranges[i].len == 0)
            rc = keel__fail(KEEL_EINVAL, "range %zu of %s has length 0\n"
                            "help: leave empty ranges out", i, ranges[i].key);
    }
    if (rc != KEEL_OK || n == 0)
        return rc;
    return lanes_run(s3, bucket, n, inflight, &range_ops, (void *)ranges,
                     stop);
}

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

/* "YYYY-MM-DDTHH:MM:SS[.fff]Z" as ms since the epoch, or -1. */
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

/* Adds the <Contents> of one answer to *out; sets token to the next
** continuation token ("" when the listing is complete). */
static int
list_parse(const req *r, keel_s3_entry **out, size_t *n, size_t *cap,
           char *token, size_t token_cap)
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
        if (!k || !s || !m || !xml_text(key, sizeof key, k, kl) ||
            !key_ok(key))
            continue; /* not a key keel writes */
        if (*n == *cap) {
            size_t nc = *cap ? 2 * *cap : 64;
            keel_s3_entry *ne = keel__realloc(*out, nc * sizeof *ne);
            if (!ne)
                return KEEL_ENOMEM;
            *out = ne;
            *cap = nc;
        }
        keel_s3_entry *e = &(*out)[*n];
        if (!(e->key = keel__malloc(strlen(key) + 1)))
            return KEEL_ENOMEM;
        strcpy(e->key, key);
        e->size = strtoull(s, NULL, 10);
        e->mtime_ms = iso8601_ms(m, ml);
        (*n)++;
    }
    token[0] = '\0';
    const char *tr = xml_field((const char *)r->buf, end, "IsTruncated", &len);
    if (tr && len == 4 && memcmp(tr, "true", 4) == 0) {
        const char *t = xml_field((const char *)r->buf, end,
                                  "NextContinuationToken", &len);
        if (!t || len == 0 || !xml_text(token, token_cap, t, len))
            return keel__fail(KEEL_EIO, "GET %s: a truncated listing "
                              "without a usable continuation token\nhelp: "
                              "the store's ListObjectsV2 answer is not "
                              "one keel can follow", r->url);
    }
    return KEEL_OK;
}

int
keel__s3_list(keel_s3 *s3, const char *bucket, const char *prefix,
              keel_s3_entry **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    int rc = check_names(bucket, NULL);
    if (rc != KEEL_OK)
        return rc;
    size_t cap = 0;
    char token[1024] = "";
    do {
        req r;
        req_init(&r, s3, "GET", bucket, NULL);
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
        rc = req_run(s3, &r);
        pthread_mutex_unlock(&s3->lock);
        if (rc == KEEL_OK)
            rc = list_parse(&r, out, n, &cap, token, sizeof token);
        else if (rc < 0)
            rc = keel__fail(KEEL_EIO, "GET %s answered %ld to a listing\n"
                            "help: check the store", r.url, r.status);
        free(r.buf);
        req_free(&r);
    } while (rc == KEEL_OK && token[0]);
    if (rc != KEEL_OK) {
        keel__s3_list_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

void
keel__s3_list_free(keel_s3_entry *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++)
        keel__free(e[i].key);
    keel__free(e);
}

/* --- concurrent create-only PUTs ---------------------------------------- */

static void
put_prepare(keel_s3 *s3, req *r, const char *bucket, size_t i, void *arg)
{
    const keel_s3_put_job *j = (const keel_s3_put_job *)arg + i;
    req_init(r, s3, "PUT", bucket, j->key);
    r->src = j->data ? j->data : (const unsigned char *)"";
    r->src_len = j->len;
    r->if_none_match = "*";
}

static int
put_judge(keel_s3 *s3, req *r, uint32_t attempts, size_t i, void *arg)
{
    keel_s3_put_job *j = (keel_s3_put_job *)arg + i;
    int jr = req_verdict(s3, r, attempts);
    j->rc = jr;
    if (jr == KEEL_OK || jr == KEEL_S3_EXISTS)
        return KEEL_OK;
    return jr < 0 ? keel__fail(KEEL_EIO, "PUT %s answered %ld\nhelp: check "
                               "the store", r->url, r->status)
                  : jr;
}

static const lane_ops put_ops = {"PUTs to", put_prepare, put_judge};

int
keel__s3_put_many(keel_s3 *s3, const char *bucket, keel_s3_put_job *jobs,
                  size_t n, uint32_t inflight)
{
    int rc = check_names(bucket, NULL);
    for (size_t i = 0; rc == KEEL_OK && i < n; i++)
        rc = check_names(bucket, jobs[i].key);
    if (rc != KEEL_OK || n == 0)
        return rc;
    return lanes_run(s3, bucket, n, inflight, &put_ops, jobs, NULL);
}
