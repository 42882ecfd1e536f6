/* test_s3.c -- the S3 client (src/s3/) against a real object store.
**
** The first tests need no server: names keel refuses to send, an endpoint
** where nothing listens (a closed port on 127.0.0.1) and one that accepts
** connections but never answers (a listener of ours that never reads). The
** rest run against the Ceph RADOS Gateway that `make test-objstore` starts
** (test/objstore/run.sh exports AWS_* and KEEL_TEST_BUCKET); without
** KEEL_TEST_BUCKET they say so and pass, so `make test` needs no server.
*/
#include "test.h"
#include "lib/objstore.h"

#include "base/internal.h"
#include "s3/s3.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

/* A key unique to this run. */
static const char *
key(const char *name)
{
    static char bufs[8][256];
    static int next;
    char *b = bufs[next++ & 7];
    snprintf(b, sizeof bufs[0], "test-s3/%d/%s", (int)getpid(), name);
    return b;
}

static unsigned char *
random_bytes(size_t n, uint64_t seed)
{
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = test_rand(&seed);
        memcpy(p + i, &v, KEEL_MIN((size_t)8, n - i));
    }
    return p;
}

/* A listening socket on 127.0.0.1 at a free port; *port gets the port. */
static int
listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static keel_s3 *
client_at(const char *endpoint, const char *secret, uint32_t stall_s)
{
    keel_s3_config c = {.endpoint = endpoint,
                        .access_key = endpoint ? "k" : NULL,
                        .secret_key = secret,
                        .stall_timeout_s = stall_s,
                        .connect_timeout_ms = 2000};
    keel_s3 *s3 = NULL;
    if (keel__s3_open(&c, &s3) != KEEL_OK)
        fprintf(stderr, "  keel__s3_open: %s\n", keel_errmsg());
    return s3;
}

static keel_s3 *
client(void)
{
    return client_at(NULL, NULL, 0);
}

/* --- without a server --------------------------------------------------- */

TEST(names_keel_does_not_send_are_refused)
{
    keel_s3 *s3 = client_at("http://127.0.0.1:1", "s", 1);
    CHECK(s3);
    char b[4];
    CHECK_ERR(keel__s3_get_range(s3, "Bad_Bucket", "k", 0, b, 4), KEEL_EINVAL);
    CHECK_MSG_HAS("Bad_Bucket");
    CHECK_ERR(keel__s3_get_range(s3, "keel-test", "a key?", 0, b, 4),
              KEEL_EINVAL);
    CHECK_MSG_HAS("a key?");
    /* A "." or ".." part would resolve into another key or bucket. */
    CHECK_ERR(keel__s3_get_range(s3, "keel-test", "../other/k", 0, b, 4),
              KEEL_EINVAL);
    CHECK_MSG_HAS("../other/k");
    CHECK_ERR(keel__s3_get_range(s3, "keel-test", "x/./k", 0, b, 4),
              KEEL_EINVAL);
    CHECK_ERR(keel__s3_get_range(s3, "keel-test", "x/..", 0, b, 4),
              KEEL_EINVAL);
    keel__s3_close(s3);
}

TEST(an_unreachable_endpoint_names_it)
{
    int port;
    int fd = listener(&port);
    CHECK(fd >= 0);
    close(fd); /* now nothing listens there */
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", port);
    keel_s3 *s3 = client_at(ep, "s", 1);
    CHECK(s3);
    char b[16];
    double t0 = test_now();
    CHECK_ERR(keel__s3_get_range(s3, "keel-test", "some/key", 0, b, 16),
              KEEL_EIO);
    CHECK(test_now() - t0 < 2.0); /* refused is not retried */
    CHECK_MSG_HAS("could not connect");
    CHECK_MSG_HAS(ep);
    CHECK_MSG_HAS("keel-test/some/key");
    CHECK_MSG_HAS("AWS_ENDPOINT_URL");
    keel__s3_close(s3);
}

TEST(a_server_that_never_answers_times_out)
{
    int port;
    int fd = listener(&port); /* accepts into its backlog, never reads */
    CHECK(fd >= 0);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", port);
    keel_s3 *s3 = client_at(ep, "s", 1);
    CHECK(s3);
    char b[16];
    double t0 = test_now();
    int rc = keel__s3_get_range(s3, "keel-test", "slow/key", 0, b, 16);
    double t = test_now() - t0;
    close(fd);
    CHECK_ERR(rc, KEEL_EIO);
    CHECK_MSG_HAS("timed out");
    CHECK_MSG_HAS("keel-test/slow/key");
    CHECK_MSG(t >= 0.9 && t < 5.0, "took %.2f s for a 1 s stall timeout", t);
    keel__s3_close(s3);
}

TEST(the_timeouts_come_from_the_environment)
{
    int port;
    int fd = listener(&port); /* accepts into its backlog, never reads */
    CHECK(fd >= 0);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", port);
    setenv("KEEL_S3_STALL_TIMEOUT_S", "4", 1);
    setenv("KEEL_S3_CONNECT_TIMEOUT_MS", "700", 1);
    keel_s3_config cfg = {.endpoint = ep, .access_key = "k",
                          .secret_key = "s", .max_attempts = 1};
    keel_s3 *s3;
    CHECK_OK(keel__s3_open(&cfg, &s3));
    char b[16];
    double t0 = test_now();
    int rc = keel__s3_get_range(s3, "keel-test", "slow/key", 0, b, 16);
    double t = test_now() - t0;
    CHECK_ERR(rc, KEEL_EIO);
    CHECK_MSG_HAS("timed out");
    CHECK_MSG_HAS("connect timeout 700 ms, stall timeout 4 s");
    CHECK_MSG_HAS("KEEL_S3_STALL_TIMEOUT_S");
    CHECK_MSG(t >= 3.9 && t < 10.0, "took %.2f s for a 4 s stall timeout", t);
    keel__s3_close(s3);
    /* a given value wins over the environment (libcurl looks at the
     * speed once a second, so a loaded machine may take up to 2 s more:
     * what tells them apart is 1 against 4) */
    cfg.stall_timeout_s = 1;
    CHECK_OK(keel__s3_open(&cfg, &s3));
    t0 = test_now();
    CHECK_ERR(keel__s3_get_range(s3, "keel-test", "slow/key", 0, b, 16),
              KEEL_EIO);
    t = test_now() - t0;
    CHECK_MSG(t >= 0.9 && t < 3.5, "took %.2f s for a 1 s stall timeout", t);
    keel__s3_close(s3);
    close(fd);
    /* a value that is not a positive whole number is refused, by name */
    const char *bad[] = {"0", "-5", "10s", "99999999999", " 3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("KEEL_S3_CONNECT_TIMEOUT_MS", bad[i], 1);
        CHECK_ERR(keel__s3_open(&cfg, &s3), KEEL_EINVAL);
        CHECK_MSG_HAS("KEEL_S3_CONNECT_TIMEOUT_MS");
    }
    unsetenv("KEEL_S3_CONNECT_TIMEOUT_MS");
    unsetenv("KEEL_S3_STALL_TIMEOUT_S");
}

/* Accepts connections on a listener and drops each at once, unanswered
** (a connection lost mid-request), counting them. */
struct dropper {
    int fd;
    int dropped;
};

static void *
drop_connections(void *arg)
{
    struct dropper *d = arg;
    int c;
    while ((c = accept(d->fd, NULL, NULL)) >= 0) {
        char b[4096];
        ssize_t got = read(c, b, sizeof b); /* take the request, answer none */
        (void)got;
        close(c);
        __atomic_add_fetch(&d->dropped, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

TEST(dropped_connections_are_retried_a_bounded_number_of_times)
{
    int port;
    struct dropper d = {.fd = listener(&port)};
    CHECK(d.fd >= 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, drop_connections, &d) == 0);
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", port);
    keel_s3_config c = {.endpoint = ep, .access_key = "k", .secret_key = "s",
                        .max_attempts = 3, .stall_timeout_s = 2};
    keel_s3 *s3 = NULL;
    CHECK_OK(keel__s3_open(&c, &s3));
    char b[16];
    int rc = keel__s3_get_range(s3, "keel-test", "gone/key", 0, b, 16);
    int single = __atomic_load_n(&d.dropped, __ATOMIC_RELAXED);
    keel_s3_range r[2] = {{"gone/a", 0, 16, b}, {"gone/b", 0, 16, b}};
    int rc2 = keel__s3_get_ranges(s3, "keel-test", r, 2, 2, NULL);
    shutdown(d.fd, SHUT_RDWR);
    close(d.fd);
    pthread_join(t, NULL);
    keel__s3_close(s3);
    CHECK_ERR(rc, KEEL_EIO);
    CHECK_EQ(single, 3);
    CHECK_ERR(rc2, KEEL_EIO);
    CHECK_MSG_HAS("after 3 attempts");
    CHECK_MSG_HAS("keel-test/gone/");
    CHECK(d.dropped >= 4 && d.dropped <= 3 + 6);
}

/* --- against the gateway -------------------------------------------------- */

TEST(put_get_range_head_delete)
{
    NEED_SERVER();
    keel_s3 *s3 = client();
    CHECK(s3);
    size_t n = (1u << 20) + 123;
    unsigned char *data = random_bytes(n, 1);
    keel_s3_object put, head;
    CHECK_OK(keel__s3_put(s3, bucket(), key("obj"), data, n, 0, &put));
    CHECK(put.etag[0]);
    CHECK_OK(keel__s3_head(s3, bucket(), key("obj"), &head));
    CHECK_U64(head.size, n);
    CHECK(strcmp(head.etag, put.etag) == 0);

    void *all;
    size_t len;
    CHECK_OK(keel__s3_get(s3, bucket(), key("obj"), NULL, 4u << 20, &all,
                          &len, NULL));
    CHECK_U64(len, n);
    CHECK(memcmp(all, data, n) == 0);
    keel__free(all);

    unsigned char part[4096];
    CHECK_OK(keel__s3_get_range(s3, bucket(), key("obj"), 500000, part,
                                sizeof part));
    CHECK(memcmp(part, data + 500000, sizeof part) == 0);
    CHECK_OK(keel__s3_get_range(s3, bucket(), key("obj"), n - 10, part, 10));
    CHECK(memcmp(part, data + n - 10, 10) == 0);
    CHECK_OK(keel__s3_get_range(s3, bucket(), key("obj"), 0, part, 1));
    CHECK_EQ(part[0], data[0]);

    CHECK_OK(keel__s3_delete(s3, bucket(), key("obj")));
    CHECK_ERR(keel__s3_head(s3, bucket(), key("obj"), &head), KEEL_ENOTFOUND);
    CHECK_ERR(keel__s3_get_range(s3, bucket(), key("obj"), 0, part, 8),
              KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no object");
    CHECK_MSG_HAS(key("obj"));
    CHECK_OK(keel__s3_delete(s3, bucket(), key("obj"))); /* absent: fine */
    free(data);
    keel__s3_close(s3);
}

TEST(reads_past_the_end_fail_closed)
{
    NEED_SERVER();
    keel_s3 *s3 = client();
    CHECK(s3);
    unsigned char *data = random_bytes(10000, 2);
    CHECK_OK(keel__s3_put(s3, bucket(), key("short"), data, 10000, 0, NULL));
    unsigned char *buf = malloc(1000);
    memset(buf, 0xAB, 1000);
    /* runs past the end: the server sends 760 bytes with a 206 */
    CHECK_ERR(keel__s3_get_range(s3, bucket(), key("short"), 9240, buf, 1000),
              KEEL_EIO);
    CHECK_MSG_HAS("past the end");
    CHECK_MSG_HAS("10000 bytes");
    /* starts past the end: 416 */
    CHECK_ERR(keel__s3_get_range(s3, bucket(), key("short"), 20000, buf, 10),
              KEEL_EIO);
    CHECK_MSG_HAS("past the end");
    /* the same through the concurrent path, among good ranges */
    unsigned char a[100], b[100];
    keel_s3_range r[3] = {{key("short"), 0, 100, a},
                          {key("short"), 9950, 100, buf},
                          {key("short"), 5000, 100, b}};
    CHECK_ERR(keel__s3_get_ranges(s3, bucket(), r, 3, 3, NULL), KEEL_EIO);
    CHECK_MSG_HAS("past the end");
    free(buf);
    free(data);
    keel__s3_close(s3);
}

TEST(put_from_a_file_range)
{
    NEED_SERVER();
    keel_s3 *s3 = client();
    CHECK(s3);
    size_t n = 300000;
    unsigned char *data = random_bytes(n, 3);
    const char *path = test_path("upload.bin");
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, n, f) == n);
    fclose(f);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    keel_s3_object o;
    CHECK_OK(keel__s3_put_file(s3, bucket(), key("fromfile"), fd, 4096,
                               200000, 0, &o));
    close(fd);
    CHECK_U64(o.size, 200000);
    void *got;
    size_t len;
    CHECK_OK(keel__s3_get(s3, bucket(), key("fromfile"), NULL, n, &got, &len,
                          NULL));
    CHECK_U64(len, 200000);
    CHECK(memcmp(got, data + 4096, 200000) == 0);
    keel__free(got);
    free(data);
    keel__s3_close(s3);
}

TEST(create_only_put_loses_to_an_existing_key)
{
    NEED_SERVER();
    keel_s3 *s3 = client();
    CHECK(s3);
    CHECK_OK(keel__s3_put(s3, bucket(), key("manifest/1"), "first", 5,
                          KEEL_S3_CREATE_ONLY, NULL));
    CHECK_EQ(keel__s3_put(s3, bucket(), key("manifest/1"), "second", 6,
                          KEEL_S3_CREATE_ONLY, NULL),
             KEEL_S3_EXISTS);
    char b[8] = {0};
    CHECK_OK(keel__s3_get_range(s3, bucket(), key("manifest/1"), 0, b, 5));
    CHECK(memcmp(b, "first", 5) == 0);
    keel__s3_close(s3);
}

TEST(get_of_an_unchanged_etag_is_not_modified)
{
    NEED_SERVER();
    keel_s3 *s3 = client();
    CHECK(s3);
    keel_s3_object o, o2;
    CHECK_OK(keel__s3_put(s3, bucket(), key("latest"), "v1", 2, 0, &o));
    void *d;
    size_t len;
    CHECK_EQ(keel__s3_get(s3, bucket(), key("latest"), o.etag, 64, &d, &len,
                          NULL),
             KEEL_S3_NOT_MODIFIED);
    CHECK(d == NULL && len == 0);
    CHECK_OK(keel__s3_put(s3, bucket(), key("latest"), "v22", 3, 0, NULL));
    CHECK_OK(keel__s3_get(s3, bucket(), key("latest"), o.etag, 64, &d, &len,
                          &o2));
    CHECK_U64(len, 3);
    CHECK(memcmp(d, "v22", 3) == 0);
    CHECK(strcmp(o.etag, o2.etag) != 0);
    keel__free(d);
    /* an object larger than the caller allows is refused, not cut */
    CHECK_ERR(keel__s3_get(s3, bucket(), key("latest"), NULL, 2, &d, &len,
                           NULL),
              KEEL_EIO);
    CHECK_MSG_HAS("larger than 2 bytes");
    keel__s3_close(s3);
}

TEST(a_wrong_secret_key_is_named)
{
    NEED_SERVER();
    keel_s3_config c = {.secret_key = "not-the-secret"};
    keel_s3 *s3 = NULL;
    CHECK_OK(keel__s3_open(&c, &s3));
    char b[4];
    CHECK_ERR(keel__s3_get_range(s3, bucket(), key("any"), 0, b, 4), KEEL_EIO);
    CHECK_MSG_HAS("refused the credentials");
    CHECK_MSG_HAS("SignatureDoesNotMatch");
    CHECK_MSG_HAS("AWS_SECRET_ACCESS_KEY");
    keel__s3_close(s3);
    c = (keel_s3_config){.access_key = "no-such-access-key"};
    CHECK_OK(keel__s3_open(&c, &s3));
    CHECK_ERR(keel__s3_put(s3, bucket(), key("any"), "x", 1, 0, NULL),
              KEEL_EIO);
    CHECK_MSG_HAS("refused the credentials");
    CHECK_MSG_HAS("InvalidAccessKeyId");
    keel__s3_close(s3);
}

TEST(a_missing_bucket_is_named)
{
    NEED_SERVER();
    keel_s3 *s3 = client();
    CHECK(s3);
    char b[4];
    CHECK_ERR(keel__s3_get_range(s3, "keel-no-such-bucket", "k", 0, b, 4),
              KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no bucket 'keel-no-such-bucket'");
    CHECK_MSG_HAS("help: ");
    CHECK_ERR(keel__s3_put(s3, "keel-no-such-bucket", "k", "x", 1, 0, NULL),
              KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no bucket");
    keel__s3_close(s3);
}

TEST(concurrent_ranges_land_in_caller_order)
{
    NEED_SERVER();
    keel_s3 *s3 = client();
    CHECK(s3);
    size_t n = 4u << 20, m = 100000;
    unsigned char *big = random_bytes(n, 4), *small = random_bytes(m, 5);
    char kbig[256], ksmall[256], kmissing[256];
    snprintf(kbig, sizeof kbig, "%s", key("big"));
    snprintf(ksmall, sizeof ksmall, "%s", key("small"));
    snprintf(kmissing, sizeof kmissing, "%s", key("no-such-object"));
    CHECK_OK(keel__s3_put(s3, bucket(), kbig, big, n, 0, NULL));
    CHECK_OK(keel__s3_put(s3, bucket(), ksmall, small, m, 0, NULL));
    enum { R = 64 };
    keel_s3_range r[R];
    uint64_t seed = 6;
    for (int i = 0; i < R; i++) {
        int in_big = i % 3 != 0;
        size_t total = in_big ? n : m;
        /* sizes from 1 byte to 256 KiB; every 8th repeats the former range */
        size_t len = 1 + (size_t)(test_rand(&seed) %
                                  (i % 5 == 0 ? total / 4 : 8192));
        uint64_t off = test_rand(&seed) % (total - len);
        if (i % 8 == 7) {
            r[i] = r[i - 1];
        } else {
            r[i] = (keel_s3_range){in_big ? kbig : ksmall, off,
                                   len, NULL};
        }
        r[i].buf = malloc(r[i].len);
    }
    for (uint32_t inflight = 1; inflight <= 16; inflight *= 4) {
        for (int i = 0; i < R; i++)
            memset(r[i].buf, 0, r[i].len);
        double t0 = test_now();
        CHECK_OK(keel__s3_get_ranges(s3, bucket(), r, R, inflight, NULL));
        printf("     %d ranges, %u in flight: %.1f ms\n", R, inflight,
               (test_now() - t0) * 1e3);
        for (int i = 0; i < R; i++) {
            const unsigned char *src =
                r[i].key == kbig ? big : small;
            CHECK_MSG(memcmp(r[i].buf, src + r[i].off, r[i].len) == 0,
                      "range %d [%" PRIu64 ", +%zu) of %s differs", i,
                      r[i].off, r[i].len, r[i].key);
        }
    }
    /* a missing key in a batch fails the batch */
    r[5].key = kmissing;
    CHECK_ERR(keel__s3_get_ranges(s3, bucket(), r, R, 8, NULL), KEEL_ENOTFOUND);
    CHECK_MSG_HAS("no-such-object");
    for (int i = 0; i < R; i++)
        free(r[i].buf);
    free(big);
    free(small);
    keel__s3_close(s3);
}

TEST(small_gets_reuse_the_connection)
{
    NEED_SERVER();
    keel_s3 *s3 = client();
    CHECK(s3);
    unsigned char *data = random_bytes(65536, 7);
    CHECK_OK(keel__s3_put(s3, bucket(), key("hot"), data, 65536, 0, NULL));
    unsigned char b[4096];
    double t0 = test_now();
    for (int i = 0; i < 50; i++) {
        uint64_t off = (uint64_t)(i * 977) % (65536 - sizeof b);
        CHECK_OK(keel__s3_get_range(s3, bucket(), key("hot"), off, b,
                                    sizeof b));
        CHECK(memcmp(b, data + off, sizeof b) == 0);
    }
    double per = (test_now() - t0) / 50 * 1e3;
    printf("     4 KiB ranged GET: %.2f ms each\n", per);
    /* Nagle plus delayed ACK would make each about 40 ms */
    CHECK_MSG(per < 30.0, "%.1f ms per 4 KiB GET", per);
    free(data);
    keel__s3_close(s3);
}

TEST_MAIN()
