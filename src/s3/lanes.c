/* lanes.c -- many S3 requests at once on the client's multi handle.
**
** lanes_run runs n requests on up to max_inflight lanes (easy handles in
** one multi), each retried as single requests are, polling a stop; its
** users are the concurrent ranged GETs of a page fetch
** (keel__s3_get_ranges) and the create-only PUTs of a publish
** (keel__s3_put_many).
*/
#include "base/internal.h"
#include "s3/req.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

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
    if (!stop)
        stop = s3->stop;
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
        uint64_t now = keel__req_now_ms();
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
            keel__req_free(&ln->r);
            ops->prepare(s3, &ln->r, bucket, ln->idx, arg);
            if ((rc = keel__req_setup(s3, ln->h, &ln->r)) != KEEL_OK)
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
            keel__req_ended(&ln->r, m->data.result);
            ln->attempts++;
            ended = 1;
            if (keel__req_retryable(&ln->r) &&
                ln->attempts < s3->max_attempts) {
                ln->waiting = 1;
                ln->wake_ms = keel__req_now_ms() +
                              keel__req_backoff_ms(ln->attempts - 1);
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
        keel__req_free(&lanes[i].r);
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
    keel__req_init(r, s3, "GET", bucket, rg->key);
    keel__req_set_range(r, rg->off, rg->len);
    r->buf = rg->buf;
    r->cap = rg->len;
}

static int
range_judge(keel_s3 *s3, req *r, uint32_t attempts, size_t i, void *arg)
{
    const keel_s3_range *rg = (const keel_s3_range *)arg + i;
    int rc = keel__req_verdict(s3, r, attempts);
    if (rc == KEEL_OK)
        return keel__req_range_verdict(r, rg->off, rg->len);
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
    int rc = keel__s3_check_names(bucket, NULL);
    for (size_t i = 0; rc == KEEL_OK && i < n; i++) {
        rc = keel__s3_check_names(bucket, ranges[i].key);
        if (rc == KEEL_OK && ranges[i].len == 0)
            rc = keel__fail(KEEL_EINVAL, "range %zu of %s has length 0\n"
                            "help: leave empty ranges out", i, ranges[i].key);
    }
    if (rc != KEEL_OK || n == 0)
        return rc;
    return lanes_run(s3, bucket, n, inflight, &range_ops, (void *)ranges,
                     stop);
}

/* --- concurrent create-only PUTs ---------------------------------------- */

static void
put_prepare(keel_s3 *s3, req *r, const char *bucket, size_t i, void *arg)
{
    const keel_s3_put_job *j = (const keel_s3_put_job *)arg + i;
    keel__req_init(r, s3, "PUT", bucket, j->key);
    r->src = j->data ? j->data : (const unsigned char *)"";
    r->src_len = j->len;
    r->if_none_match = "*";
}

static int
put_judge(keel_s3 *s3, req *r, uint32_t attempts, size_t i, void *arg)
{
    keel_s3_put_job *j = (keel_s3_put_job *)arg + i;
    int jr = keel__req_verdict(s3, r, attempts);
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
    int rc = keel__s3_check_names(bucket, NULL);
    for (size_t i = 0; rc == KEEL_OK && i < n; i++)
        rc = keel__s3_check_names(bucket, jobs[i].key);
    if (rc != KEEL_OK || n == 0)
        return rc;
    return lanes_run(s3, bucket, n, inflight, &put_ops, jobs, NULL);
}
