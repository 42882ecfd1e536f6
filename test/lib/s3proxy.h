/* s3proxy.h -- an HTTP/1.1 proxy that injects faults and latency in front
** of a real S3 server (the tests' Ceph RADOS Gateway).
**
** It listens on 127.0.0.1 (an ephemeral port) and forwards every request
** it does not fault to one upstream, http://HOST:PORT, byte for byte, and
** every byte of the answer back as it arrives. It is not a mock: what the
** client gets is what the server said, unless a control below says
** otherwise for that request.
**
** Controls may be set at any time from any thread; each request reads them
** once, when its head has arrived:
**   delay_ms        sleep that long before answering or forwarding the
**                   request; every connection has its own thread, so
**                   requests in flight on several connections overlap
**                   their delays (a per-request latency, not a queue)
**   stall_next(n)   take the next n requests (of the kind faults apply
**                   to) and never answer them: the connection stays open
**                   until the client gives up or the proxy stops
**   stall_after(k, n)  let k requests through first, then as stall_next
**   fail_next(n, s) answer the next n requests with status s (503: an S3
**                   SlowDown error, 500: InternalError, others a generic
**                   S3 error body), after reading and dropping the
**                   request's body; keep-alive holds, except after an
**                   `Expect: 100-continue` request, whose body never
**                   comes: that answer closes the connection
**   fail_after(k, n, s)  let k requests through first, then as fail_next
**   fail_every(k, s)  answer every k-th request with status s, until
**                   cleared (a storm that fails a share, 1/k, of what
**                   comes, retries and all); the schedule below goes first
**   cut_after(k, n, b)   let k requests through, then forward n more but
**                   cut each one's answer after its first b bytes (head
**                   and body; 0: all of it) and close the connection: the
**                   server did the request, the client never learns how
**                   it ended (a reset, or an answer lost on the way)
**   fail_only_gets  faults and stalls apply to GETs only; other methods
**                   pass (and do not count against n or k)
**   fail_only_key(s) faults and stalls apply only to requests whose target
**                   (path and query) holds s (NULL or "": to all)
**   head_always_ok  answer every HEAD 200 (4096 bytes) itself, never
**                   forwarding it: a store that says every object exists
** Fails and cuts share one schedule: the last fail_* or cut_after call
** replaces what is left of the one before.
**
** Threads: one acceptor, one per client connection. s3proxy_stop wakes
** them all and returns after every one has ended.
*/
#ifndef KEEL_S3PROXY_H
#define KEEL_S3PROXY_H

#include <stddef.h>
#include <stdint.h>

typedef struct s3proxy s3proxy;

typedef struct s3proxy_counters {
    uint64_t requests;    /* request heads read, faulted ones included */
    uint64_t gets, heads, puts; /* of which, by method */
    uint64_t faults;      /* answered with a fault status */
    uint64_t stalls;      /* taken and never answered */
    uint64_t cuts;        /* forwarded, their answers cut */
    uint64_t delayed;     /* waited delay_ms (> 0) before going on */
    uint64_t body_bytes;  /* response body bytes forwarded from upstream */
    uint64_t get_bytes;   /* of which, in answers to GETs */
    uint64_t connections; /* client connections accepted */
    uint64_t upstream_connects; /* connections opened to the upstream */
    uint64_t max_active;  /* most requests in progress at once */
} s3proxy_counters;

/* Starts a proxy to upstream ("http://HOST:PORT", a trailing slash
** allowed). 0 and *out, or -1 with a message in err (cap bytes). */
int s3proxy_start(const char *upstream, s3proxy **out, char *err,
                  size_t cap);
/* Stops it: closes every connection and joins every thread; then the
** final counters go to last (may be NULL). p NULL: a no-op. */
void s3proxy_stop(s3proxy *p, s3proxy_counters *last);

int s3proxy_port(const s3proxy *p);
/* "http://127.0.0.1:PORT", valid until stop. */
const char *s3proxy_url(const s3proxy *p);

void s3proxy_set_delay_ms(s3proxy *p, unsigned ms);
void s3proxy_fail_next(s3proxy *p, unsigned n, int status);
void s3proxy_fail_after(s3proxy *p, unsigned skip, unsigned n, int status);
void s3proxy_cut_after(s3proxy *p, unsigned skip, unsigned n,
                       uint64_t bytes);
void s3proxy_fail_every(s3proxy *p, unsigned k, int status);
void s3proxy_fail_only_gets(s3proxy *p, int on);
void s3proxy_fail_only_key(s3proxy *p, const char *part);
void s3proxy_head_always_ok(s3proxy *p, int on);
void s3proxy_stall_next(s3proxy *p, unsigned n);
/* Lets skip requests through first, then as stall_next. */
void s3proxy_stall_after(s3proxy *p, unsigned skip, unsigned n);
/* Cancels pending fails, cuts and stalls, and fail_every (not the
** delay). */
void s3proxy_clear(s3proxy *p);

void s3proxy_counters_get(s3proxy *p, s3proxy_counters *out);

#endif /* KEEL_S3PROXY_H */
