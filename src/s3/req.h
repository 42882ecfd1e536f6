/* req.h -- the S3 client's request engine, shared by its files (private).
**
** s3.c (the client and single-object calls), lanes.c (many requests at
** once on the multi handle) and list.c (ListObjectsV2) describe a request
** as a `req` and run it through req.c: setup on an easy handle, the answer
** callbacks, the verdict that turns an answer into KEEL_OK, a conditional
** result or an error message, and retries. Nothing outside src/s3/
** includes this header.
*/
#ifndef KEEL_S3_REQ_H
#define KEEL_S3_REQ_H

#include "s3/s3.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdint.h>

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
    uint32_t min_rate;      /* bytes/s every request must average */
    uint64_t list_max_keys; /* entries of one listing, at most */
    uint32_t list_max_pages; /* answers of one listing, at most */
    keel_stop *stop;        /* polled by single requests, or NULL */
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
    char location[256];      /* a redirect's Location, "" if none */
    int errcut;              /* the error body was cut at S3_ERRBODY_MAX */
    /* the deadline (invariant 5 of req.c) and cancellation */
    uint64_t expect;         /* body bytes expected (range, upload) */
    uint64_t start_ms;       /* when this try began */
    uint64_t allow_ms;       /* connect plus stall allowance */
    uint32_t min_rate;       /* bytes/s */
    uint64_t moved;          /* bytes moved when the deadline hit */
    int late;                /* the deadline ended the try */
    int canceled;            /* stop said stop */
    keel_stop *stop;         /* polled while the request runs, or NULL */
    CURLcode cc;
    char curlerr[CURL_ERROR_SIZE];
    struct curl_slist *headers;
} req;

/* Keys keel sends as they are: [A-Za-z0-9._~/-], no "." or ".." part. */
int keel__s3_key_ok(const char *k);
/* KEEL_OK, or KEEL_EINVAL naming a bucket or key (may be NULL) keel does
** not send. */
int keel__s3_check_names(const char *bucket, const char *key);

/* Fills r for METHOD ENDPOINT/BUCKET/KEY (key NULL: the bucket). */
void keel__req_init(req *r, const keel_s3 *s3, const char *method,
                    const char *bucket, const char *key);
/* Sets the Range header for len bytes at off. */
void keel__req_set_range(req *r, uint64_t off, size_t len);
/* Arms handle h to run r (headers, signing, timeouts, callbacks). */
int keel__req_setup(keel_s3 *s3, CURL *h, req *r);
/* Runs r on the client's easy handle, with retries; the caller holds
** s3->lock. Returns what keel__req_verdict says of the last answer. */
int keel__req_run(keel_s3 *s3, req *r);
/* What the answer to r means: KEEL_OK, KEEL_S3_EXISTS, KEEL_S3_NOT_MODIFIED
** or an error with its message. */
int keel__req_verdict(const keel_s3 *s3, const req *r, uint32_t attempts);
/* Invariant (2) of req.c: a ranged answer must be exactly the range. */
int keel__req_range_verdict(const req *r, uint64_t off, size_t len);
/* Records how a try of r ended (libcurl's result cc), telling a cut error
** body, the deadline and a cancel apart from other aborts. */
void keel__req_ended(req *r, CURLcode cc);
/* Whether a failed try of r may be tried again. */
int keel__req_retryable(const req *r);
/* The wait before try attempt+2, with jitter. */
uint64_t keel__req_backoff_ms(uint32_t attempt);
uint64_t keel__req_now_ms(void);
void keel__req_free(req *r);

#endif /* KEEL_S3_REQ_H */
