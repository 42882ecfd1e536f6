/* s3.h -- keel's client for S3-compatible object stores.
**
** This layer owns all of keel's network I/O, the way os.h owns its file
** system calls. It speaks HTTP through libcurl, signs every request with
** libcurl's SigV4 (the payload is sent unsigned: x-amz-content-sha256:
** UNSIGNED-PAYLOAD), and addresses objects path-style:
** ENDPOINT/BUCKET/KEY. It knows nothing of keel's file format.
**
** Every function returns KEEL_OK or a KEEL_E* code with a message that names
** the URL (and so the bucket and key) and ends in a help line. Two outcomes
** of conditional requests are results, not errors, and have codes of their
** own below zero that never leave keel: KEEL_S3_EXISTS and
** KEEL_S3_NOT_MODIFIED.
**
**   404 NoSuchBucket             KEEL_ENOTFOUND  "no bucket ..."
**   404 NoSuchKey (or on HEAD)   KEEL_ENOTFOUND  "no object ..."
**   403 with a credentials code  KEEL_EIO        "... refused the credentials"
**   connection refused, no host  KEEL_EIO        "could not connect to ..."
**   connect or stall timeout     KEEL_EIO        "... timed out"
**   past the request's deadline  KEEL_EIO        "... timed out ... deadline"
**   a stop (keel_set_cancel)     KEEL_ECANCELED  "cancelled during ..."
**   a redirect (3xx)             KEEL_EIO        "... was redirected ..."
**   304 or 412 not asked for     KEEL_EIO        "... did not ask for it"
**   a listing that repeats a
**   token or key, names a key
**   outside its prefix, or runs
**   past its caps                KEEL_EIO        (never a partial listing)
**   a short, long or misplaced
**   ranged body                  KEEL_EIO        (never a partial result)
**
** Retries: a 5xx answer (except 501) or a connection lost mid-request is
** retried up to max_attempts in all, after a backoff of 50 ms doubling per
** attempt (at most 2 s) with jitter. A timeout is not retried: it has
** already spent the time the caller allowed.
**
** Deadlines: every try of a request must end within
**     connect timeout + stall timeout + B / min_rate
** where B is the most of: the bytes it expects (a range's length, an
** upload's size, the answer's Content-Length) and the bytes moved so far.
** With the defaults (5 s, 10 s, 32768 bytes/s) a 4 KiB range gets 15.1 s
** and a 64 MiB upload 34.4 minutes, however the bytes arrive: a trickle that
** keeps the connection alive fails there, where the stall timeout alone
** (no byte for stall_timeout_s) would let it run for ever. The deadline is
** checked about once a second. A stop set with keel__s3_set_stop is polled
** as often, and ends the request with KEEL_ECANCELED.
**
** Threads: a client serves one request at a time (a mutex inside orders
** callers); its connections stay open between requests (HTTP keep-alive).
*/
#ifndef KEEL_S3_H
#define KEEL_S3_H

#include <stddef.h>
#include <stdint.h>

typedef struct keel_s3 keel_s3;

/* Where and how to connect. NULL strings and zero numbers take the
** defaults named beside them. */
typedef struct keel_s3_config {
    const char *endpoint;      /* http(s)://host[:port]; AWS_ENDPOINT_URL,
                                  else https://s3.REGION.amazonaws.com */
    const char *access_key;    /* AWS_ACCESS_KEY_ID */
    const char *secret_key;    /* AWS_SECRET_ACCESS_KEY */
    const char *session_token; /* AWS_SESSION_TOKEN (none if unset) */
    const char *region;        /* AWS_REGION, else us-east-1 */
    uint32_t connect_timeout_ms; /* KEEL_S3_CONNECT_TIMEOUT_MS, else 5000 */
    uint32_t stall_timeout_s;  /* a request that moves no byte this long
                                  fails; KEEL_S3_STALL_TIMEOUT_S, else 10 */
    uint32_t max_attempts;     /* tries of a retryable request, in all; 4 */
    uint32_t max_inflight;     /* concurrent GETs of get_ranges; 16 */
    uint32_t min_rate;         /* bytes/s a request must average past its
                                  allowances (see Deadlines);
                                  KEEL_S3_MIN_RATE, else 32768 */
    uint64_t list_max_keys;    /* entries of one listing; 1000000 */
    uint32_t list_max_pages;   /* answers of one listing; 10000 */
} keel_s3_config;

/* Results of conditional requests (never returned by public functions). */
#define KEEL_S3_EXISTS       (-1) /* create-only PUT: the key exists (412) */
#define KEEL_S3_NOT_MODIFIED (-2) /* GET if-none-match: same ETag (304) */

/* put flags */
#define KEEL_S3_CREATE_ONLY 1u /* If-None-Match: *, the create is the fence */

#define KEEL_S3_ETAG_MAX 80

/* What the server says about an object. */
typedef struct keel_s3_object {
    uint64_t size;                /* bytes of the whole object */
    char etag[KEEL_S3_ETAG_MAX];  /* as sent, quotes included; "" if none */
} keel_s3_object;

/* One ranged read of get_ranges: len bytes at off of key into buf. */
typedef struct keel_s3_range {
    const char *key;
    uint64_t off;
    size_t len;
    void *buf;
} keel_s3_range;

/* Opens a client (cfg may be NULL: all from the environment). It connects
** lazily: a wrong endpoint shows at the first request. Keys must be
** non-empty and of [A-Za-z0-9._~/-] only; bucket names follow S3's rules. */
int keel__s3_open(const keel_s3_config *cfg, keel_s3 **out);
void keel__s3_close(keel_s3 *s3);

/* Sets the stop that every later single request of this client (and
** get_ranges when given none) polls, or NULL for none; the caller keeps it
** alive until it sets another. */
void keel__s3_set_stop(keel_s3 *s3, keel_stop *stop);

/* The endpoint in use, without a trailing slash. */
const char *keel__s3_endpoint(const keel_s3 *s3);

/* Reads exactly len bytes at off of the object into buf. The answer must be
** 206 with Content-Range off-(off+len-1) (or a 200 of exactly len bytes when
** off is 0) and a body of exactly len bytes; a range that runs past the end
** of the object is KEEL_EIO naming the object's size. */
int keel__s3_get_range(keel_s3 *s3, const char *bucket, const char *key,
                       uint64_t off, void *buf, size_t len);

/* Reads a whole object of at most max bytes into *data (keel__malloc'd,
** free with keel__free) and *len. With if_none_match (an ETag from a former
** read), an unchanged object gives KEEL_S3_NOT_MODIFIED and no data. obj may
** be NULL. */
int keel__s3_get(keel_s3 *s3, const char *bucket, const char *key,
                 const char *if_none_match, size_t max, void **data,
                 size_t *len, keel_s3_object *obj);

/* The size and ETag of an object. */
int keel__s3_head(keel_s3 *s3, const char *bucket, const char *key,
                  keel_s3_object *obj);

/* Writes an object from memory, or from len bytes at off of file fd (read
** through the OS layer). With KEEL_S3_CREATE_ONLY an existing key gives
** KEEL_S3_EXISTS and is left as it was. obj (may be NULL) gets the ETag. */
int keel__s3_put(keel_s3 *s3, const char *bucket, const char *key,
                 const void *data, size_t len, unsigned flags,
                 keel_s3_object *obj);
int keel__s3_put_file(keel_s3 *s3, const char *bucket, const char *key,
                      int fd, uint64_t off, uint64_t len, unsigned flags,
                      keel_s3_object *obj);

/* Removes an object; removing one that is not there succeeds (S3's rule). */
int keel__s3_delete(keel_s3 *s3, const char *bucket, const char *key);

/* One object of a listing. */
typedef struct keel_s3_entry {
    char *key;                /* keel__malloc'd with the array */
    uint64_t size;            /* bytes */
    int64_t mtime_ms;         /* LastModified, ms since the epoch (UTC) */
} keel_s3_entry;

/* Lists every object whose key starts with prefix (ListObjectsV2, following
** continuation tokens), in the store's order (by key). *out gets n entries
** (free with keel__s3_list_free); keys that are not keel's safe characters
** are left out, never decoded. An answer that is not a listing is KEEL_EIO
** naming the URL; so is a listing that does not end: a continuation token
** given twice, a key not after the one before it (S3 lists in key order,
** each key once), more than list_max_pages answers or list_max_keys
** entries. A key outside prefix is KEEL_EIO too: the store is not
** answering the listing asked for, and a caller that deletes what it lists
** must not be handed another's keys. */
int keel__s3_list(keel_s3 *s3, const char *bucket, const char *prefix,
                  keel_s3_entry **out, size_t *n);
void keel__s3_list_free(keel_s3_entry *e, size_t n);

/* One create-only PUT of put_many: len bytes of data under key. rc gets
** KEEL_OK, KEEL_S3_EXISTS or an error code. */
typedef struct keel_s3_put_job {
    const char *key;
    const void *data;
    size_t len;
    int rc;
} keel_s3_put_job;

/* Runs n create-only PUTs with up to inflight (0: max_inflight) on the wire
** at once, each retried as put retries. Returns KEEL_OK when every job
** ended in KEEL_OK or KEEL_S3_EXISTS, else the first failure (message
** set); each job's rc says how it ended. */
int keel__s3_put_many(keel_s3 *s3, const char *bucket, keel_s3_put_job *jobs,
                      size_t n, uint32_t inflight);

/* Reads n ranges with up to inflight of them on the wire at once (0 or more
** than the client's max_inflight: max_inflight). Each range is checked as
** get_range checks it; bytes land in each range's own buffer, so results
** are in the caller's order whatever order the answers come in. One range
** that fails (after its retries) fails the whole call. stop (NULL: none)
** is polled while the call waits, at least every KEEL_STOP_ASK_MS; when it
** says stop, the GETs on the wire are abandoned and the call fails with
** KEEL_ECANCELED, the buffers holding any part of their answers. */
int keel__s3_get_ranges(keel_s3 *s3, const char *bucket,
                        const keel_s3_range *ranges, size_t n,
                        uint32_t inflight, keel_stop *stop);

#endif /* KEEL_S3_H */
