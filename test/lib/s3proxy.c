/* s3proxy.c -- the fault-and-delay proxy of s3proxy.h: an acceptor thread,
** a thread per client connection, each with its own upstream connection.
**
** A connection's thread reads one request head, decides its fate (pass,
** fail, cut or stall: decide), waits the delay, then forwards the head and
** the body to the upstream and the answer back (or its first bytes), or
** answers itself. The only
** state shared between connections is the controls (under mu) and the
** counters (atomic).
**
** Invariants:
** (1) A request that is neither failed nor stalled reaches the upstream as
**     the client sent it, head and body, byte for byte and in order, and
**     its answer reaches the client as the upstream sent it (a cut one: a
**     prefix of it, then the close): the proxy adds, drops and rewrites
**     nothing in a forwarded exchange.
** (2) Boundaries come from the messages themselves (RFC 9112, section 6):
**     a request ends after its head and its Content-Length bytes or its
**     last chunk; an answer after its head, then no body for a HEAD request
**     and for 1xx, 204 and 304, else its chunks, its Content-Length bytes,
**     or whatever comes until the upstream closes (then the client's
**     connection closes too). Bytes read past a boundary stay in the
**     connection's buffer for the next message.
** (3) A connection serves one request at a time, in order, over one
**     upstream connection of its own (opened when first needed, opened
**     again when the upstream closed it).
** (4) Each request's fate is decided once, under mu: fail_next(n) fails
**     (cut_after(0, n, b) cuts) exactly n requests (of the kind faults apply to), however many
**     connections race for them.
** (5) The wake pipe is written once, at stop, and never read, so every
**     poll in every thread sees it; stop joins every thread before it
**     closes or frees anything they use.
*/
#include "s3proxy.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF_BYTES (64u << 10)
#define HEAD_MAX (32u << 10) /* a longer head closes the connection */
#define LINE_MAX_ 4096u      /* a chunk-size or trailer line */

typedef struct rbuf {
    int fd;              /* -1: none */
    size_t start, end;   /* unread bytes are b[start, end) */
    char b[BUF_BYTES];
} rbuf;

typedef struct conn {
    struct s3proxy *p;
    pthread_t thread;
    int done;            /* the thread is about to end; under p->mu */
    struct conn *next;   /* the proxy's list, under p->mu */
    rbuf cli, up;        /* the client's connection, the upstream's */
    char head[HEAD_MAX + 1], rhead[HEAD_MAX + 1]; /* request, answer */
} conn;

struct s3proxy {
    int lfd;             /* listening socket */
    int wake[2];         /* invariant (5) */
    int port;
    char url[64];
    struct sockaddr_storage up_addr;
    socklen_t up_len;
    pthread_t acceptor;
    int stop;            /* atomic */
    unsigned delay_ms;   /* atomic */
    pthread_mutex_t mu;  /* the fields below, and each conn's done/next */
    conn *conns;
    unsigned fail_skip, fail_left, stall_left; /* the schedule */
    unsigned stall_skip;
    unsigned every, every_seen; /* fail_every: each every-th request */
    int every_status;
    int fail_status, only_gets;
    char only_key[256];  /* faults only to targets holding it ("" all) */
    int head_ok;         /* answer every HEAD 200 itself */
    int cutting;         /* the schedule cuts (after cut_bytes) */
    uint64_t cut_bytes;
    uint64_t active;     /* requests in progress */
    s3proxy_counters n;  /* atomic fields (max_active under mu) */
};

enum { PASS, FAIL, CUT, STALL };
typedef enum { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_TO_CLOSE,
               BODY_BAD } body_kind;

static void
count(uint64_t *c, uint64_t v)
{
    if (c)
        __atomic_add_fetch(c, v, __ATOMIC_RELAXED);
}

/* Waits for ev on fd (fd -1: only the time) for ms (-1: no limit): 1
** ready, 0 the time passed, -1 the stop or an error. */
static int
wait_fd(const s3proxy *p, int fd, short ev, int ms)
{
    struct pollfd f[2] = {{fd, ev, 0}, {p->wake[0], POLLIN, 0}};
    for (;;) {
        int n = poll(f, 2, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || f[1].revents)
            return -1;
        return n > 0 ? 1 : 0;
    }
}

/* --- bytes ----------------------------------------------------------------- */

/* Reads more into rb: > 0 bytes read, 0 at the peer's end, -1 on an error,
** at the stop, or with a full buffer. */
static long
rb_fill(const s3proxy *p, rbuf *rb)
{
    if (rb->start == rb->end) {
        rb->start = rb->end = 0;
    } else if (rb->end == sizeof rb->b && rb->start > 0) {
        memmove(rb->b, rb->b + rb->start, rb->end - rb->start);
        rb->end -= rb->start;
        rb->start = 0;
    }
    if (rb->end == sizeof rb->b)
        return -1;
    for (;;) {
        if (wait_fd(p, rb->fd, POLLIN, -1) != 1)
            return -1;
        ssize_t n = recv(rb->fd, rb->b + rb->end, sizeof rb->b - rb->end, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return -1;
        rb->end += (size_t)n;
        return (long)n;
    }
}

static int
send_all(const s3proxy *p, int fd, const char *b, size_t n)
{
    while (n) {
        if (wait_fd(p, fd, POLLOUT, -1) != 1)
            return -1;
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The next message head, through its blank line, from rb into out (NUL
** ended): its length; 0 when the peer closed before a byte of it; -1 on an
** error, the stop, a cut head or one over HEAD_MAX. */
static long
read_head(const s3proxy *p, rbuf *rb, char *out)
{
    for (;;) {
        const char *s = rb->b + rb->start;
        size_t have = rb->end - rb->start;
        const char *e = memmem(s, have, "\r\n\r\n", 4);
        if (e) {
            size_t n = (size_t)(e - s) + 4;
            if (n > HEAD_MAX)
                return -1;
            memcpy(out, s, n);
            out[n] = '\0';
            rb->start += n;
            return (long)n;
        }
        if (have > HEAD_MAX)
            return -1;
        long r = rb_fill(p, rb);
        if (r <= 0)
            return r == 0 && have == 0 ? 0 : -1;
    }
}

/* Moves n bytes from src to fd dst (-1: drops them), counting them into c1
** and c2 (either may be NULL). 0, or -1 when a side failed. */
static int
move_bytes(const s3proxy *p, rbuf *src, int dst, uint64_t n, uint64_t *c1,
           uint64_t *c2)
{
    while (n) {
        if (src->start == src->end && rb_fill(p, src) <= 0)
            return -1;
        size_t m = src->end - src->start;
        if (m > n)
            m = (size_t)n;
        if (dst >= 0 && send_all(p, dst, src->b + src->start, m))
            return -1;
        src->start += m;
        n -= m;
        count(c1, m);
        count(c2, m);
    }
    return 0;
}

/* Moves one CRLF-ended line from src to dst; its text without the CRLF
** goes to line (cap bytes, cut to fit). */
static int
move_line(const s3proxy *p, rbuf *src, int dst, char *line, size_t cap)
{
    for (;;) {
        const char *s = src->b + src->start;
        size_t have = src->end - src->start;
        const char *e = memmem(s, have, "\r\n", 2);
        if (e) {
            size_t n = (size_t)(e - s), k = n < cap - 1 ? n : cap - 1;
            memcpy(line, s, k);
            line[k] = '\0';
            if (dst >= 0 && send_all(p, dst, s, n + 2))
                return -1;
            src->start += n + 2;
            return 0;
        }
        if (have > LINE_MAX_ || rb_fill(p, src) <= 0)
            return -1;
    }
}

static int
move_chunked(const s3proxy *p, rbuf *src, int dst, uint64_t *c1,
             uint64_t *c2)
{
    char line[256];
    for (;;) {
        if (move_line(p, src, dst, line, sizeof line))
            return -1;
        char *end;
        errno = 0;
        unsigned long long n = strtoull(line, &end, 16);
        if (end == line || errno)
            return -1;
        if (n == 0)
            break;
        if (move_bytes(p, src, dst, n, c1, c2) ||
            move_line(p, src, dst, line, sizeof line) || line[0])
            return -1;
    }
    do { /* trailers, then the blank line */
        if (move_line(p, src, dst, line, sizeof line))
            return -1;
    } while (line[0]);
    return 0;
}

/* Moves a body of kind k (len bytes for BODY_LENGTH): 0, 1 when it ended
** with the peer's close, -1 on a failure. */
static int
move_body(const s3proxy *p, rbuf *src, int dst, body_kind k, uint64_t len,
          uint64_t *c1, uint64_t *c2)
{
    switch (k) {
    case BODY_NONE:
        return 0;
    case BODY_LENGTH:
        return move_bytes(p, src, dst, len, c1, c2);
    case BODY_CHUNKED:
        return move_chunked(p, src, dst, c1, c2);
    case BODY_TO_CLOSE:
        for (;;) {
            size_t m = src->end - src->start;
            if (m && move_bytes(p, src, dst, m, c1, c2))
                return -1;
            long r = rb_fill(p, src);
            if (r <= 0)
                return r == 0 ? 1 : -1;
        }
    default:
        return -1;
    }
}

/* --- messages ------------------------------------------------------------ */

/* The value of header name in head, trimmed, into v (cut to cap); 1 if
** the head has it. */
static int
header(const char *head, const char *name, char *v, size_t cap)
{
    size_t k = strlen(name);
    const char *line = strstr(head, "\r\n"); /* past the start line */
    while (line && line[2] != '\r' && line[2] != '\0') {
        line += 2;
        const char *eol = strstr(line, "\r\n");
        if (!eol)
            break;
        if (strncasecmp(line, name, k) == 0 && line[k] == ':') {
            const char *a = line + k + 1;
            while (*a == ' ' || *a == '\t')
                a++;
            size_t n = (size_t)(eol - a);
            while (n && (a[n - 1] == ' ' || a[n - 1] == '\t'))
                n--;
            if (n >= cap)
                n = cap - 1;
            memcpy(v, a, n);
            v[n] = '\0';
            return 1;
        }
        line = eol;
    }
    return 0;
}

/* How a message's body is framed (invariant 2). */
static body_kind
framing(const char *head, int response, int status, int to_head,
        uint64_t *len)
{
    char v[128];
    if (response && (to_head || status / 100 == 1 || status == 204 ||
                     status == 304))
        return BODY_NONE;
    if (header(head, "transfer-encoding", v, sizeof v))
        return strcasestr(v, "chunked") ? BODY_CHUNKED
               : response               ? BODY_TO_CLOSE
                                        : BODY_BAD;
    if (header(head, "content-length", v, sizeof v)) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (v[0] < '0' || v[0] > '9' || *end || errno)
            return BODY_BAD;
        *len = n;
        return n ? BODY_LENGTH : BODY_NONE;
    }
    return response ? BODY_TO_CLOSE : BODY_NONE;
}

/* Answers the request itself with status, an S3 error body (none to a
** HEAD) and Connection: close or keep-alive. */
static int
send_fault(s3proxy *p, conn *c, int status, const char *method,
           const char *target, int close_after)
{
    const char *code = "ProxyFault", *reason = "Fault",
               *msg = "The test proxy answered this request itself.";
    if (status == 503) {
        code = "SlowDown";
        reason = "Slow Down";
        msg = "Please reduce your request rate.";
    } else if (status == 500) {
        code = "InternalError";
        reason = "Internal Server Error";
        msg = "We encountered an internal error. Please try again.";
    }
    char res[512];
    size_t i = 0;
    for (; target[i] && target[i] != '?' && i < sizeof res - 1; i++)
        res[i] = strchr("<>&\"'", target[i]) ? '_' : target[i];
    res[i] = '\0';
    unsigned long long id = __atomic_load_n(&p->n.faults, __ATOMIC_RELAXED);
    char body[1024], head[512];
    int bn = snprintf(body, sizeof body,
                      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>"
                      "<Code>%s</Code><Message>%s</Message><Resource>%s"
                      "</Resource><RequestId>s3proxy-%llu</RequestId>"
                      "</Error>", code, msg, res, id);
    if (bn < 0 || (size_t)bn >= sizeof body)
        return -1;
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\n"
                      "Content-Length: %d\r\nx-amz-request-id: s3proxy-%llu"
                      "\r\nConnection: %s\r\n\r\n", status, reason, bn, id,
                      close_after ? "close" : "keep-alive");
    if (hn < 0 || (size_t)hn >= sizeof head ||
        send_all(p, c->cli.fd, head, (size_t)hn))
        return -1;
    if (strcmp(method, "HEAD") != 0 &&
        send_all(p, c->cli.fd, body, (size_t)bn))
        return -1;
    return 0;
}

/* Invariant (4). */
static int
decide(s3proxy *p, int is_get, const char *target, int *status,
       uint64_t *cut)
{
    int act = PASS;
    pthread_mutex_lock(&p->mu);
    if ((!p->only_gets || is_get) &&
        (!p->only_key[0] || strstr(target, p->only_key))) {
        if (p->stall_left && p->stall_skip) {
            p->stall_skip--;
        } else if (p->stall_left) {
            p->stall_left--;
            act = STALL;
        } else if (p->fail_left) {
            if (p->fail_skip) {
                p->fail_skip--;
            } else {
                p->fail_left--;
                *status = p->fail_status;
                *cut = p->cut_bytes;
                act = p->cutting ? CUT : FAIL;
            }
        } else if (p->every && ++p->every_seen % p->every == 0) {
            *status = p->every_status;
            act = FAIL;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return act;
}

/* An upstream connection for the next request: the one kept, unless the
** upstream closed it meanwhile (or sent what nobody asked for). */
static int
upstream(s3proxy *p, conn *c)
{
    if (c->up.fd >= 0) {
        struct pollfd f = {c->up.fd, POLLIN | POLLRDHUP, 0};
        if (c->up.start == c->up.end && poll(&f, 1, 0) == 0)
            return 0;
        close(c->up.fd);
        c->up.fd = -1;
    }
    int fd = socket(p->up_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)&p->up_addr, p->up_len) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->up.fd = fd;
    c->up.start = c->up.end = 0;
    count(&p->n.upstream_connects, 1);
    return 0;
}

/* Serves the request whose head (hl bytes) is in c->head: 1 to go on with
** the connection's next request, 0 to close it. */
static int
serve(s3proxy *p, conn *c, size_t hl, const char *method,
      const char *target)
{
    int is_get = strcmp(method, "GET") == 0;
    int is_head = strcmp(method, "HEAD") == 0;
    uint64_t blen = 0;
    body_kind bk = framing(c->head, 0, 0, 0, &blen);
    if (bk == BODY_BAD)
        return 0;
    char v[128];
    int expect = header(c->head, "expect", v, sizeof v) &&
                 strcasecmp(v, "100-continue") == 0;
    int status = 0;
    uint64_t budget = 0; /* of a cut answer */
    if (is_head && __atomic_load_n(&p->head_ok, __ATOMIC_RELAXED)) {
        /* A store that says every object exists. */
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 4096"
                                 "\r\nETag: \"0123456789abcdef\"\r\n"
                                 "Last-Modified: Mon, 01 Jan 2024 00:00:00 "
                                 "GMT\r\nConnection: keep-alive\r\n\r\n";
        return send_all(p, c->cli.fd, ok, sizeof ok - 1) == 0;
    }
    int act = decide(p, is_get, target, &status, &budget);
    if (act == STALL) { /* keep the request; drop all that follows */
        count(&p->n.stalls, 1);
        for (;;) {
            c->cli.start = c->cli.end = 0;
            if (rb_fill(p, &c->cli) <= 0)
                return 0;
        }
    }
    unsigned delay = __atomic_load_n(&p->delay_ms, __ATOMIC_RELAXED);
    if (delay) {
        count(&p->n.delayed, 1);
        if (wait_fd(p, -1, 0, (int)delay) < 0)
            return 0;
    }
    if (act == FAIL) {
        count(&p->n.faults, 1);
        if (expect) { /* its body never comes: close after the answer */
            send_fault(p, c, status, method, target, 1);
            return 0;
        }
        if (move_body(p, &c->cli, -1, bk, blen, NULL, NULL) != 0)
            return 0;
        return send_fault(p, c, status, method, target, 0) == 0;
    }
    if (act == CUT)
        count(&p->n.cuts, 1);
    if (upstream(p, c) != 0 || send_all(p, c->up.fd, c->head, hl))
        return 0;
    int body_sent = !expect;
    if (!expect && move_body(p, &c->cli, c->up.fd, bk, blen, NULL, NULL))
        return 0;
    for (;;) {
        long rl = read_head(p, &c->up, c->rhead);
        if (rl <= 0)
            return 0; /* the client sees the connection end: a reset */
        int st = 0;
        const char *sp = strchr(c->rhead, ' ');
        if (strncmp(c->rhead, "HTTP/1.", 7) != 0 || !sp ||
            (st = atoi(sp + 1)) < 100)
            return 0;
        if (act == CUT && st / 100 != 1) { /* budget bytes, then the close */
            uint64_t len = 0;
            size_t m = budget < (uint64_t)rl ? (size_t)budget : (size_t)rl;
            if (send_all(p, c->cli.fd, c->rhead, m) == 0 && budget > m &&
                framing(c->rhead, 1, st, is_head, &len) == BODY_LENGTH)
                move_bytes(p, &c->up, c->cli.fd,
                           len < budget - m ? len : budget - m,
                           &p->n.body_bytes, is_get ? &p->n.get_bytes : NULL);
            return 0;
        }
        if (send_all(p, c->cli.fd, c->rhead, (size_t)rl))
            return 0;
        if (st / 100 == 1) {
            if (st == 100 && !body_sent) {
                if (move_body(p, &c->cli, c->up.fd, bk, blen, NULL, NULL))
                    return 0;
                body_sent = 1;
            }
            continue;
        }
        uint64_t len = 0;
        body_kind rk = framing(c->rhead, 1, st, is_head, &len);
        if (move_body(p, &c->up, c->cli.fd, rk, len, &p->n.body_bytes,
                      is_get ? &p->n.get_bytes : NULL) != 0)
            return 0;
        /* an answer before the body went: the client's next bytes may be
         * that body, not a request */
        if (!body_sent)
            return 0;
        return !(header(c->rhead, "connection", v, sizeof v) &&
                 strcasestr(v, "close"));
    }
}

static void *
conn_main(void *arg)
{
    conn *c = arg;
    s3proxy *p = c->p;
    for (;;) {
        long hl = read_head(p, &c->cli, c->head);
        if (hl <= 0)
            break;
        char method[16], target[600];
        const char *sp = strchr(c->head, ' ');
        size_t ml = sp ? (size_t)(sp - c->head) : 0;
        if (ml == 0 || ml >= sizeof method)
            break;
        memcpy(method, c->head, ml);
        method[ml] = '\0';
        size_t tl = strcspn(sp + 1, " \r\n");
        if (tl >= sizeof target)
            tl = sizeof target - 1;
        memcpy(target, sp + 1, tl);
        target[tl] = '\0';
        count(&p->n.requests, 1);
        count(strcmp(method, "GET") == 0    ? &p->n.gets
              : strcmp(method, "HEAD") == 0 ? &p->n.heads
              : strcmp(method, "PUT") == 0  ? &p->n.puts
                                            : NULL, 1);
        pthread_mutex_lock(&p->mu);
        if (++p->active > p->n.max_active)
            __atomic_store_n(&p->n.max_active, p->active, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&p->mu);
        int keep = serve(p, c, (size_t)hl, method, target);
        pthread_mutex_lock(&p->mu);
        p->active--;
        pthread_mutex_unlock(&p->mu);
        if (!keep)
            break;
    }
    close(c->cli.fd);
    if (c->up.fd >= 0)
        close(c->up.fd);
    pthread_mutex_lock(&p->mu);
    c->done = 1;
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Joins and frees the connections whose threads ended (under mu). */
static void
reap_locked(s3proxy *p)
{
    for (conn **pp = &p->conns; *pp;) {
        conn *c = *pp;
        if (!c->done) {
            pp = &c->next;
            continue;
        }
        *pp = c->next;
        pthread_join(c->thread, NULL);
        free(c);
    }
}

static void *
accept_main(void *arg)
{
    s3proxy *p = arg;
    while (wait_fd(p, p->lfd, POLLIN, -1) == 1) {
        int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
                wait_fd(p, -1, 0, 10);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->p = p;
        c->cli.fd = fd;
        c->up.fd = -1;
        pthread_mutex_lock(&p->mu);
        reap_locked(p);
        if (pthread_create(&c->thread, NULL, conn_main, c) == 0) {
            c->next = p->conns;
            p->conns = c;
            c = NULL;
        }
        pthread_mutex_unlock(&p->mu);
        if (c) {
            close(fd);
            free(c);
            continue;
        }
        count(&p->n.connections, 1);
    }
    return NULL;
}

/* --- the proxy ------------------------------------------------------------- */

static int
resolve(s3proxy *p, const char *upstream, char *err, size_t cap)
{
    if (strncmp(upstream, "http://", 7) != 0) {
        snprintf(err, cap, "upstream '%s' is not an http:// URL", upstream);
        return -1;
    }
    char host[256], port[16] = "80";
    const char *h = upstream + 7;
    size_t hl = strcspn(h, ":/");
    if (hl == 0 || hl >= sizeof host) {
        snprintf(err, cap, "upstream '%s' has no host", upstream);
        return -1;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    if (h[hl] == ':') {
        size_t pl = strspn(h + hl + 1, "0123456789");
        const char *rest = h + hl + 1 + pl;
        if (pl == 0 || pl >= sizeof port || (*rest && strcmp(rest, "/"))) {
            snprintf(err, cap, "upstream '%s' has no port number after "
                     "the ':' (or a path after it)", upstream);
            return -1;
        }
        memcpy(port, h + hl + 1, pl);
        port[pl] = '\0';
    } else if (h[hl] && strcmp(h + hl, "/")) {
        snprintf(err, cap, "upstream '%s' has a path", upstream);
        return -1;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0) {
        snprintf(err, cap, "upstream host '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(&p->up_addr, ai->ai_addr, ai->ai_addrlen);
    p->up_len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

int
s3proxy_start(const char *upstream, s3proxy **out, char *err, size_t cap)
{
    *out = NULL;
    s3proxy *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    p->lfd = p->wake[0] = p->wake[1] = -1;
    pthread_mutex_init(&p->mu, NULL);
    if (resolve(p, upstream, err, cap) != 0)
        goto fail;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int one = 1;
    if (pipe2(p->wake, O_CLOEXEC) != 0 ||
        (p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(p->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(p->lfd, 128) != 0 ||
        getsockname(p->lfd, (struct sockaddr *)&a, &al) != 0) {
        snprintf(err, cap, "cannot listen on 127.0.0.1: %s", strerror(errno));
        goto fail;
    }
    p->port = ntohs(a.sin_port);
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%d", p->port);
    if (pthread_create(&p->acceptor, NULL, accept_main, p) != 0) {
        snprintf(err, cap, "cannot start the proxy's thread");
        goto fail;
    }
    *out = p;
    return 0;
fail:
    if (p->lfd >= 0)
        close(p->lfd);
    if (p->wake[0] >= 0) {
        close(p->wake[0]);
        close(p->wake[1]);
    }
    pthread_mutex_destroy(&p->mu);
    free(p);
    return -1;
}

void
s3proxy_stop(s3proxy *p, s3proxy_counters *last)
{
    if (!p)
        return;
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    ssize_t w;
    do
        w = write(p->wake[1], "x", 1);
    while (w < 0 && errno == EINTR);
    pthread_join(p->acceptor, NULL);
    pthread_mutex_lock(&p->mu);
    conn *c = p->conns; /* no new ones: the acceptor has ended */
    p->conns = NULL;
    pthread_mutex_unlock(&p->mu);
    while (c) {
        conn *next = c->next;
        pthread_join(c->thread, NULL);
        free(c);
        c = next;
    }
    if (last)
        s3proxy_counters_get(p, last);
    close(p->lfd);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int
s3proxy_port(const s3proxy *p)
{
    return p->port;
}

const char *
s3proxy_url(const s3proxy *p)
{
    return p->url;
}

void
s3proxy_set_delay_ms(s3proxy *p, unsigned ms)
{
    __atomic_store_n(&p->delay_ms, ms, __ATOMIC_RELAXED);
}

void
s3proxy_fail_after(s3proxy *p, unsigned skip, unsigned n, int status)
{
    pthread_mutex_lock(&p->mu);
    p->fail_skip = n ? skip : 0;
    p->fail_left = n;
    p->fail_status = status;
    p->cutting = 0;
    pthread_mutex_unlock(&p->mu);
}

void
s3proxy_cut_after(s3proxy *p, unsigned skip, unsigned n, uint64_t bytes)
{
    pthread_mutex_lock(&p->mu);
    p->fail_skip = n ? skip : 0;
    p->fail_left = n;
    p->cutting = 1;
    p->cut_bytes = bytes;
    pthread_mutex_unlock(&p->mu);
}

void
s3proxy_fail_next(s3proxy *p, unsigned n, int status)
{
    s3proxy_fail_after(p, 0, n, status);
}

void
s3proxy_fail_every(s3proxy *p, unsigned k, int status)
{
    pthread_mutex_lock(&p->mu);
    p->every = k;
    p->every_seen = 0;
    p->every_status = status;
    pthread_mutex_unlock(&p->mu);
}

void
s3proxy_fail_only_gets(s3proxy *p, int on)
{
    pthread_mutex_lock(&p->mu);
    p->only_gets = on != 0;
    pthread_mutex_unlock(&p->mu);
}

void
s3proxy_fail_only_key(s3proxy *p, const char *part)
{
    pthread_mutex_lock(&p->mu);
    snprintf(p->only_key, sizeof p->only_key, "%s", part ? part : "");
    pthread_mutex_unlock(&p->mu);
}

void
s3proxy_head_always_ok(s3proxy *p, int on)
{
    __atomic_store_n(&p->head_ok, on != 0, __ATOMIC_RELAXED);
}

void
s3proxy_stall_next(s3proxy *p, unsigned n)
{
    s3proxy_stall_after(p, 0, n);
}

void
s3proxy_stall_after(s3proxy *p, unsigned skip, unsigned n)
{
    pthread_mutex_lock(&p->mu);
    p->stall_skip = skip;
    p->stall_left = n;
    pthread_mutex_unlock(&p->mu);
}

void
s3proxy_clear(s3proxy *p)
{
    pthread_mutex_lock(&p->mu);
    p->fail_skip = p->fail_left = p->stall_left = p->stall_skip = 0;
    p->every = 0;
    pthread_mutex_unlock(&p->mu);
}

void
s3proxy_counters_get(s3proxy *p, s3proxy_counters *out)
{
    uint64_t *src = (uint64_t *)&p->n, *dst = (uint64_t *)out;
    for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}
