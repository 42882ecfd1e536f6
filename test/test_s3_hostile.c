/* test_s3_hostile.c -- the S3 client against a store that answers wrongly
** on purpose (test/objstore/hostile_s3.py, started by this test; no Ceph).
**
** Each case runs in a child process of its own, under a watchdog: the
** call must end in a documented error (a KEEL_E* code, a message that
** names the request and a help line) within its deadline, never a crash, a
** hang, unbounded memory or a wrong answer; then the fault is cleared and
** the same call on the same client must work. The parent checks what the
** child reported, how long it took and its peak resident memory (wait4).
*/
#include "test.h"
#include "lib/hostile.h"

#include "base/internal.h"
#include "s3/s3.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define BUCKET "hostile"
#define OBJ "obj/data"
#define OBJ_LEN 65536

static hostile H;
static int H_up;
static unsigned char *obj_data;

static void
stop_server(void)
{
    hostile_stop(&H);
}

/* Starts the server once per run and stores OBJ in it. */
static int
server(void)
{
    if (H_up)
        return hostile_reset(&H, 0) == 0;
    if (hostile_start(&H) != 0) {
        fprintf(stderr, "  hostile server: %s\n", H.err);
        return 0;
    }
    atexit(stop_server);
    H_up = 1;
    obj_data = malloc(OBJ_LEN);
    uint64_t seed = 42;
    for (size_t i = 0; i < OBJ_LEN; i += 8) {
        uint64_t v = test_rand(&seed);
        memcpy(obj_data + i, &v, 8);
    }
    return hostile_put(&H, "/" BUCKET "/" OBJ, obj_data, OBJ_LEN) == 0;
}

#define NEED_HOSTILE() CHECK_MSG(server(), "%s", H.err)

/* What a case's child reports. */
typedef struct outcome {
    int ran;            /* the child got to the end */
    int rc;             /* the faulted call's code */
    double secs;        /* its time */
    int again;          /* the same call after the fault cleared */
    char msg[2048];     /* keel_errmsg() of the faulted call */
    char again_msg[512];
    long maxrss_kb;     /* the child's peak resident memory */
    int sig;            /* the signal that ended the child, or 0 */
    int timed_out;      /* the watchdog killed it */
    uint64_t n;         /* a count the case reports (entries, bytes) */
} outcome;

typedef int (*case_fn)(keel_s3 *s3, outcome *o);

static keel_s3 *
open_client(void)
{
    keel_s3_config c = {.endpoint = H.endpoint,
                        .access_key = "hostile",
                        .secret_key = "hostile-secret",
                        .connect_timeout_ms = 500,
                        .stall_timeout_s = 2,
                        .max_attempts = 2,
                        .max_inflight = 4,
                        .list_max_keys = 20000,
                        .list_max_pages = 50};
    keel_s3 *s3 = NULL;
    if (keel__s3_open(&c, &s3) != KEEL_OK)
        fprintf(stderr, "  keel__s3_open: %s\n", keel_errmsg());
    return s3;
}

/* Runs call under rule (the server's rule query), in a child: the call
** with the fault, then the rule dropped and the call again. The parent
** waits at most limit_s seconds. */
static outcome
run_case(const char *rule, case_fn call, double limit_s)
{
    outcome *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    outcome o = {0};
    if (shared == MAP_FAILED)
        return o;
    memset(shared, 0, sizeof *shared);
    hostile_reset(&H, 0);
    if (rule && hostile_rule(&H, rule) != 0) {
        fprintf(stderr, "  rule %s: %s\n", rule, H.err);
        return o;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        keel_s3 *s3 = open_client();
        if (!s3)
            _exit(2);
        double t0 = test_now();
        shared->rc = call(s3, shared);
        shared->secs = test_now() - t0;
        snprintf(shared->msg, sizeof shared->msg, "%s",
                 shared->rc ? keel_errmsg() : "");
        hostile_reset(&H, 0);
        shared->again = call(s3, shared);
        snprintf(shared->again_msg, sizeof shared->again_msg, "%s",
                 shared->again ? keel_errmsg() : "");
        keel__s3_close(s3);
        shared->ran = 1;
        _exit(0);
    }
    double t0 = test_now();
    int st = 0;
    struct rusage ru = {0};
    for (;;) {
        pid_t w = wait4(pid, &st, WNOHANG, &ru);
        if (w == pid)
            break;
        if (test_now() - t0 > limit_s) {
            kill(pid, SIGKILL);
            wait4(pid, &st, 0, &ru);
            shared->timed_out = 1;
            break;
        }
        usleep(5000);
    }
    o = *shared;
    o.maxrss_kb = ru.ru_maxrss;
    o.sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    munmap(shared, sizeof *shared);
    hostile_reset(&H, 0);
    printf("     %-44s rc %d in %.2f s, %ld MB: %.*s\n", rule ? rule : "none",
           o.rc, o.secs, o.maxrss_kb / 1024,
           (int)strcspn(o.msg, "\n"), o.msg);
    return o;
}

/* The message is one a person can read: printable, with a help line. */
static int
readable(const char *m)
{
    for (const char *p = m; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\n')
            return 0;
    return strstr(m, "\nhelp: ") != NULL;
}

/* The checks every faulted case shares: ended by itself within limit_s,
** with code rc and a readable message that has needle; the call after the
** fault cleared worked. */
#define CHECK_FAULT(o, code, needle, limit_s)                              \
    do {                                                                    \
        CHECK_MSG(!(o).timed_out, "still running after the watchdog");     \
        CHECK_MSG(!(o).sig, "the child died of signal %d", (o).sig);       \
        CHECK((o).ran);                                                     \
        CHECK_EQ((o).rc, (code));                                           \
        CHECK_MSG(readable((o).msg), "message: %s", (o).msg);              \
        CHECK_MSG(strstr((o).msg, (needle)), "no '%s' in: %s", (needle),   \
                  (o).msg);                                                 \
        CHECK_MSG((o).secs < (limit_s), "%.2f s", (o).secs);               \
        CHECK_MSG((o).again == KEEL_OK, "after the fault: %s",             \
                  (o).again_msg);                                           \
        CHECK_MSG((o).maxrss_kb < 256 * 1024, "%ld KB resident",           \
                  (o).maxrss_kb);                                           \
    } while (0)

/* A faulted call: the server's rule, the call, how long the parent waits
** for it (s), and what CHECK_FAULT asks of it: the code, a needle of the
** message, the time it must end within (s). */
typedef struct fault_case {
    const char *rule;
    case_fn call;
    double limit_s;
    int code;
    const char *needle;
    double within_s;
} fault_case;

/* Runs each of f[0..n) in turn and checks it as CHECK_FAULT does. */
static void
expect_faults(const fault_case *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        outcome o = run_case(f[i].rule, f[i].call, f[i].limit_s);
        CHECK_FAULT(o, f[i].code, f[i].needle, f[i].within_s);
    }
}

/* --- the calls ---------------------------------------------------------- */

static unsigned char range_buf[OBJ_LEN];

/* 4 KiB at 4096, compared with the object. */
static int
get_range(keel_s3 *s3, outcome *o)
{
    (void)o;
    memset(range_buf, 0, 4096);
    int rc = keel__s3_get_range(s3, BUCKET, OBJ, 4096, range_buf, 4096);
    if (rc == KEEL_OK && memcmp(range_buf, obj_data + 4096, 4096) != 0)
        return keel__fail(KEEL_EIO, "WRONG BYTES returned as right\nhelp: -");
    return rc;
}

/* The first 4 KiB (offset 0, where a 200 of the whole object could be
** taken for the range). */
static int
get_range0(keel_s3 *s3, outcome *o)
{
    (void)o;
    int rc = keel__s3_get_range(s3, BUCKET, OBJ, 0, range_buf, 4096);
    if (rc == KEEL_OK && memcmp(range_buf, obj_data, 4096) != 0)
        return keel__fail(KEEL_EIO, "WRONG BYTES returned as right\nhelp: -");
    return rc;
}

/* The whole object. */
static int
get_whole(keel_s3 *s3, outcome *o)
{
    void *data = NULL;
    size_t len = 0;
    int rc = keel__s3_get(s3, BUCKET, OBJ, NULL, 1u << 20, &data, &len, NULL);
    if (rc == KEEL_OK && (len != OBJ_LEN || memcmp(data, obj_data, len)))
        rc = keel__fail(KEEL_EIO, "WRONG BYTES returned as right (%zu)\n"
                        "help: -", len);
    o->n = len;
    keel__free(data);
    return rc;
}

static int
head(keel_s3 *s3, outcome *o)
{
    keel_s3_object ob;
    int rc = keel__s3_head(s3, BUCKET, OBJ, &ob);
    if (rc == KEEL_OK && ob.size != OBJ_LEN)
        rc = keel__fail(KEEL_EIO, "WRONG SIZE %" PRIu64 "\nhelp: -", ob.size);
    o->n = ob.size;
    return rc;
}

/* Eight ranges of 4 KiB on the lanes. */
static int
get_ranges(keel_s3 *s3, outcome *o)
{
    (void)o;
    keel_s3_range r[8];
    for (int i = 0; i < 8; i++)
        r[i] = (keel_s3_range){OBJ, (uint64_t)i * 8192, 4096,
                               range_buf + i * 4096};
    int rc = keel__s3_get_ranges(s3, BUCKET, r, 8, 4, NULL);
    for (int i = 0; rc == KEEL_OK && i < 8; i++)
        if (memcmp(range_buf + i * 4096, obj_data + i * 8192, 4096))
            rc = keel__fail(KEEL_EIO, "WRONG BYTES in range %d\nhelp: -", i);
    return rc;
}

/* --- the cases ------------------------------------------------------------ */

TEST(the_server_answers_right_without_a_rule)
{
    NEED_HOSTILE();
    outcome o = run_case(NULL, get_range, 10);
    CHECK(o.ran);
    CHECK_MSG(o.rc == KEEL_OK, "%s", o.msg);
    o = run_case(NULL, get_whole, 10);
    CHECK_MSG(o.rc == KEEL_OK && o.n == OBJ_LEN, "%s", o.msg);
    o = run_case(NULL, get_ranges, 10);
    CHECK_MSG(o.rc == KEEL_OK, "%s", o.msg);
}

TEST(a_5xx_storm_fails_after_the_retries)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=status&code=503", get_range, 10, KEEL_EIO, "503", 5},
        {"mode=status&code=500", get_ranges, 10, KEEL_EIO, "500", 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

TEST(a_lost_answer_times_out_at_the_stall_timeout)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=lost", get_range, 10, KEEL_EIO, "timed out", 6},
        {"mode=lost", get_ranges, 10, KEEL_EIO, "timed out", 6},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

TEST(a_chunked_body_is_read_right)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=chunked&chunk=7", get_range, 10);
    CHECK_MSG(o.ran && o.rc == KEEL_OK, "%s", o.msg);
    o = run_case("mode=chunked&chunk=1000", get_whole, 10);
    CHECK_MSG(o.ran && o.rc == KEEL_OK && o.n == OBJ_LEN, "%s", o.msg);
    o = run_case("mode=chunked&chunk=333", get_ranges, 10);
    CHECK_MSG(o.ran && o.rc == KEEL_OK, "%s", o.msg);
}

TEST(a_bad_chunked_body_fails)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=chunked-bad", get_range, 10, KEEL_EIO, OBJ, 5},
        {"mode=chunked-bad", get_whole, 10, KEEL_EIO, OBJ, 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

TEST(a_content_length_that_disagrees_with_the_body_fails)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=short-length", get_range, 10, KEEL_EIO, OBJ, 5},
        {"mode=short-length", get_ranges, 10, KEEL_EIO, OBJ, 5},
        {"mode=long-length", get_range, 10, KEEL_EIO, OBJ, 5},
        {"mode=long-length", get_whole, 10, KEEL_EIO, OBJ, 5},
        /* the body stops short and the connection stays open: the deadline
        ** (0.5 s + 2 s + 4096 bytes at 32 KiB/s) ends it; before it, 7 s */
        {"mode=long-length&hold=30", get_range, 10, KEEL_EIO, OBJ, 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

TEST(a_200_to_a_ranged_get_is_not_taken_for_the_range)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=no-206", get_range, 10, KEEL_EIO, "range", 5},
        {"mode=no-206", get_range0, 10, KEEL_EIO, "range", 5},
        {"mode=no-206", get_ranges, 10, KEEL_EIO, "range", 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

TEST(a_connection_closed_mid_body_fails)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=close-mid-body", get_range, 10, KEEL_EIO, OBJ, 5},
        {"mode=close-mid-body&at=0", get_whole, 10, KEEL_EIO, OBJ, 5},
        {"mode=close-mid-body", get_ranges, 10, KEEL_EIO, OBJ, 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

TEST(a_header_with_a_nul_byte_fails)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=nul-header", get_range, 10, KEEL_EIO, OBJ, 5},
        {"mode=nul-header&where=etag", head, 10, KEEL_EIO, OBJ, 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

TEST(garbage_and_huge_error_bodies_fail_clearly)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=xml-garbage", get_range, 10, KEEL_EIO, "400", 5},
        {"mode=xml-garbage&code=503", get_whole, 10, KEEL_EIO, "503", 5},
        {"mode=xml-huge", get_range, 20, KEEL_EIO, "400", 5},
        {"mode=xml-huge&size=2000", get_whole, 10, KEEL_EIO, "HostileHuge", 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

/* --- defect 4: every request has a deadline a trickle cannot stretch ---- */

TEST(a_trickled_answer_fails_at_its_deadline)
{
    NEED_HOSTILE();
    /* 2 bytes/s: a byte every half second keeps the stall timeout (2 s)
    ** from ever firing; the deadline is 0.5 s + 2 s + the bytes at 32 KiB/s */
    static const fault_case cases[] = {
        {"mode=trickle&rate=2", get_range, 12, KEEL_EIO, "minimum rate", 7},
        {"mode=trickle&rate=2", get_whole, 12, KEEL_EIO, "minimum rate", 7},
        {"mode=trickle&rate=2", get_ranges, 12, KEEL_EIO, "minimum rate", 7},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
    /* a fast enough trickle is no fault: 64 KiB at 256 KiB/s */
    outcome o = run_case("mode=trickle&rate=262144", get_whole, 12);
    CHECK_MSG(o.ran && o.rc == KEEL_OK && o.n == OBJ_LEN, "%s", o.msg);
}

static int cancel_after_half_a_second(void *arg)
{
    return test_now() - *(double *)arg > 0.5;
}

/* A trickled GET cancelled through the client's stop. */
static int
get_range_cancelled(keel_s3 *s3, outcome *o)
{
    (void)o;
    static double t0;
    static keel_stop stop;
    t0 = test_now();
    keel__stop_init(&stop, cancel_after_half_a_second, &t0);
    keel__s3_set_stop(s3, &stop);
    int rc = get_range(s3, o);
    keel__s3_set_stop(s3, NULL);
    return rc;
}

TEST(a_stop_ends_a_trickled_request)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=trickle&rate=2", get_range_cancelled, 12);
    CHECK_FAULT(o, KEEL_ECANCELED, "cancelled", 2.5);
}

/* --- defect 5: no header value is cut ------------------------------------ */

TEST(a_4000_character_session_token_is_sent_whole)
{
    NEED_HOSTILE();
    static char token[4001], seen[8192];
    for (int i = 0; i < 4000; i++)
        token[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                   "0123456789+/"[(i * 7 + i / 64) % 64];
    keel_s3_config c = {.endpoint = H.endpoint, .access_key = "hostile",
                        .secret_key = "hostile-secret",
                        .session_token = token};
    keel_s3 *s3 = NULL;
    CHECK_OK(keel__s3_open(&c, &s3));
    unsigned char b[16];
    CHECK_OK(keel__s3_get_range(s3, BUCKET, OBJ, 0, b, sizeof b));
    long n = hostile_last_header(&H, "x-amz-security-token", seen,
                                 sizeof seen);
    CHECK_MSG(n == 4000, "the server saw %ld characters of 4000", n);
    CHECK(strcmp(seen, token) == 0);
    /* and every other kind of request carries it whole too */
    CHECK_OK(keel__s3_put(s3, BUCKET, "obj/token", b, sizeof b, 0, NULL));
    CHECK_EQ(hostile_last_header(&H, "x-amz-security-token", seen,
                                 sizeof seen), 4000);
    keel_s3_entry *e = NULL;
    size_t ne = 0;
    CHECK_OK(keel__s3_list(s3, BUCKET, "obj/", &e, &ne));
    keel__s3_list_free(e, ne);
    CHECK_EQ(hostile_last_header(&H, "x-amz-security-token", seen,
                                 sizeof seen), 4000);
    CHECK_OK(keel__s3_delete(s3, BUCKET, "obj/token"));
    keel__s3_close(s3);
}

/* --- defect 6: only documented codes, always with a message ------------- */

static int
put_plain(keel_s3 *s3, outcome *o)
{
    (void)o;
    return keel__s3_put(s3, BUCKET, "obj/plain", "x", 1, 0, NULL);
}

static int
get_if_none_match(keel_s3 *s3, outcome *o)
{
    void *data = NULL;
    size_t len = 0;
    int rc = keel__s3_get(s3, BUCKET, OBJ, "\"some-other-etag\"", 1u << 20,
                          &data, &len, NULL);
    o->n = len;
    keel__free(data);
    return rc;
}

TEST(an_unasked_304_or_412_is_an_error_with_a_message)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=not-modified", get_whole, 10, KEEL_EIO, "did not ask for it", 5},
        {"mode=not-modified", head, 10, KEEL_EIO, "did not ask for it", 5},
        {"mode=not-modified", get_range, 10, KEEL_EIO, "did not ask for it", 5},
        {"mode=not-modified", get_ranges, 10, KEEL_EIO, "did not ask for it", 5},
        {"mode=precondition", put_plain, 10, KEEL_EIO, "did not ask for it", 5},
        {"mode=precondition", get_whole, 10, KEEL_EIO, "412", 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
    /* a 304 to a GET that asked for one is still the result it was */
    outcome o = run_case("mode=not-modified", get_if_none_match, 10);
    CHECK(o.ran);
    CHECK_EQ(o.rc, KEEL_S3_NOT_MODIFIED);
    CHECK_EQ(o.again, KEEL_OK);
}

TEST(a_redirect_is_an_error_that_names_where_to)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=redirect&code=301", get_range, 10, KEEL_EIO, "redirected (301) to http://127.0.0.1:1/", 5},
        {"mode=redirect&code=307", head, 10, KEEL_EIO, "redirected (307)", 5},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

/* --- defect 3: a listing that does not end fails ------------------------ */

static int
list_obj(keel_s3 *s3, outcome *o)
{
    keel_s3_entry *e = NULL;
    size_t n = 0;
    int rc = keel__s3_list(s3, BUCKET, "obj/", &e, &n);
    o->n = n;
    for (size_t i = 0; rc == KEEL_OK && i < n; i++)
        if (strncmp(e[i].key, "obj/", 4) != 0)
            rc = keel__fail(KEEL_EIO, "WRONG KEY %s listed\nhelp: -",
                            e[i].key);
    size_t found = 0;
    for (size_t i = 0; rc == KEEL_OK && i < n; i++)
        found += strcmp(e[i].key, OBJ) == 0 && e[i].size == OBJ_LEN;
    if (rc == KEEL_OK && found != 1)
        rc = keel__fail(KEEL_EIO, "WRONG LISTING (%zu keys, %zu %s)\n"
                        "help: -", n, found, OBJ);
    keel__s3_list_free(e, n);
    return rc;
}

TEST(a_listing_that_repeats_or_never_ends_fails)
{
    NEED_HOSTILE();
    static const fault_case cases[] = {
        {"mode=list-repeat", list_obj, 12, KEEL_EIO, "nothing was listed", 5},
        /* new tokens, new keys: the key cap (20000 here) */
        {"mode=list-endless", list_obj, 12, KEEL_EIO, "more than 20000 keys", 8},
        /* new tokens, no keys: the page cap (50 here) */
        {"mode=list-endless&keys=0", list_obj, 12, KEEL_EIO, "after 50 answers", 8},
    };
    expect_faults(cases, sizeof cases / sizeof cases[0]);
}

TEST(a_listing_answered_404_without_a_code_names_the_bucket)
{
    NEED_HOSTILE();
    /* A listing names no object: its 404 (here with a garbage body) says
     * the bucket is missing, not "no object ''". */
    outcome o = run_case("mode=xml-garbage&code=404", list_obj, 10);
    CHECK_FAULT(o, KEEL_ENOTFOUND, "no bucket 'hostile'", 5);
    CHECK(strstr(o.msg, "object ''") == NULL);
}

TEST(a_listing_with_keys_outside_the_prefix_fails)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=list-outside", list_obj, 10);
    CHECK_FAULT(o, KEEL_EIO, "not under the prefix", 5);
}

/* --- the public calls over the same faults ------------------------------ */

#define API_URL "s3://" BUCKET "/api/idx"
#define API_DIM 8

/* The local index published in the API cases. */
static char api_path[600];

/* A small index file, published once as version 1 (in the parent). */
static int
api_setup(void)
{
    if (api_path[0])
        return 1;
    hostile_env(&H);
    setenv("KEEL_S3_STALL_TIMEOUT_S", "2", 1);
    setenv("KEEL_S3_CONNECT_TIMEOUT_MS", "500", 1);
    snprintf(api_path, sizeof api_path, "%s", test_path("api.keel"));
    keel_index *idx = NULL;
    if (keel_open(api_path, API_DIM, NULL, &idx) != KEEL_OK)
        return 0;
    uint64_t seed = 9;
    for (int i = 0; i < 300; i++) {
        float v[API_DIM];
        for (int d = 0; d < API_DIM; d++)
            v[d] = (float)(test_rand(&seed) % 1000) / 1000.0f;
        if (keel_add(idx, v, NULL) != KEEL_OK)
            return 0;
    }
    int rc = keel_flush(idx);
    if (rc == KEEL_OK)
        rc = keel_publish(idx, API_URL, NULL);
    if (rc != KEEL_OK)
        fprintf(stderr, "  publishing to the hostile server: %s\n",
                keel_errmsg());
    keel_close(idx);
    return rc == KEEL_OK;
}

/* A documented code: one of keel.h's KEEL_E*. */
static int
documented(int rc)
{
    return rc >= KEEL_EINVAL && rc <= KEEL_ECANCELED;
}

static int
api_open_search(keel_s3 *s3, outcome *o)
{
    (void)s3;
    keel_index *r = NULL;
    int rc = keel_open_reader(API_URL, NULL, &r);
    if (rc == KEEL_OK) {
        float q[API_DIM] = {0.5f};
        keel_result res[5];
        size_t n = 0;
        rc = keel_search(r, q, 5, NULL, res, &n);
        o->n = n;
        if (rc == KEEL_OK && n != 5)
            rc = keel__fail(KEEL_EIO, "WRONG ANSWER: %zu results\nhelp: -",
                            n);
        keel_close(r);
    }
    return rc;
}

static int
api_publish(keel_s3 *s3, outcome *o)
{
    (void)s3;
    (void)o;
    keel_index *idx = NULL;
    int rc = keel_open(api_path, API_DIM, NULL, &idx);
    if (rc == KEEL_OK) {
        /* a change, so that the publish has pages to send */
        float v[API_DIM] = {(float)test_now()};
        if ((rc = keel_add(idx, v, NULL)) == KEEL_OK &&
            (rc = keel_flush(idx)) == KEEL_OK)
            rc = keel_publish(idx, API_URL, NULL);
        keel_close(idx);
    }
    return rc;
}

static int
api_prune(keel_s3 *s3, outcome *o)
{
    (void)s3;
    (void)o;
    keel_prune_options po = {.orphan_grace_s = UINT32_MAX};
    return keel_prune(API_URL, 1, &po);
}

static int
count_version(const keel_version *v, void *arg)
{
    (void)v;
    (*(uint64_t *)arg)++;
    return 0;
}

static int
api_versions(keel_s3 *s3, outcome *o)
{
    (void)s3;
    o->n = 0;
    return keel_list_versions(API_URL, count_version, &o->n);
}

/* A public call ended by a fault: a documented code (never the client's
** own -1 or -2), a message with a help line, within limit_s; the call
** after the fault cleared works. */
#define CHECK_API_FAULT(o, limit_s)                                         \
    do {                                                                    \
        CHECK_MSG(!(o).timed_out, "still running after the watchdog");     \
        CHECK_MSG(!(o).sig, "the child died of signal %d", (o).sig);       \
        CHECK((o).ran);                                                     \
        CHECK_MSG(documented((o).rc), "code %d: %s", (o).rc, (o).msg);     \
        CHECK_MSG(readable((o).msg), "message: '%s'", (o).msg);            \
        CHECK_MSG((o).secs < (limit_s), "%.2f s", (o).secs);               \
        CHECK_MSG((o).again == KEEL_OK, "after the fault: %s",             \
                  (o).again_msg);                                           \
    } while (0)

TEST(public_calls_answer_unasked_304_and_412_with_documented_codes)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    outcome o = run_case("mode=not-modified", api_open_search, 20);
    CHECK_API_FAULT(o, 10);
    o = run_case("mode=not-modified", api_publish, 20);
    CHECK_API_FAULT(o, 10);
    o = run_case("mode=precondition&method=GET", api_open_search, 20);
    CHECK_API_FAULT(o, 10);
    o = run_case("mode=precondition&method=HEAD", api_publish, 20);
    CHECK_API_FAULT(o, 10);
    /* 412 to the create-only manifest PUT, then no such manifest: a store
    ** that lies about the create, said once and as what it is */
    o = run_case("mode=precondition&method=PUT&match=*manifest*",
                 api_publish, 20);
    CHECK_API_FAULT(o, 10);
    CHECK_EQ(o.rc, KEEL_EIO);
    CHECK_MSG(strstr(o.msg, "412"), "%s", o.msg);
    const char *twice = strstr(o.msg, "publishing to");
    CHECK_MSG(twice && !strstr(twice + 1, "publishing to"), "%s", o.msg);
}

TEST(public_calls_end_within_their_deadlines_under_slow_or_lost_answers)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    outcome o = run_case("mode=trickle&rate=2", api_open_search, 30);
    CHECK_API_FAULT(o, 15);
    o = run_case("mode=lost&count=8", api_open_search, 40);
    CHECK_API_FAULT(o, 25);
    /* a trickled head (libcurl counts no head bytes as moving, so the
    ** stall timeout or the deadline ends it, whichever comes first) */
    o = run_case("mode=trickle&rate=20&head=1&method=PUT&match=*manifest*",
                 api_publish, 30);
    CHECK_API_FAULT(o, 15);
}

static int
cancel_after_half_a_second_since(void *arg)
{
    return test_now() - *(double *)arg > 0.5;
}

/* A publish whose PUTs are never answered, cancelled after 0.5 s, under a
** stall timeout of 20 s: the cancel ends it, not the timeout. */
static int
api_publish_cancelled(keel_s3 *s3, outcome *o)
{
    (void)s3;
    (void)o;
    setenv("KEEL_S3_STALL_TIMEOUT_S", "20", 1);
    keel_index *idx = NULL;
    static double t0;
    int rc = keel_open(api_path, API_DIM, NULL, &idx);
    if (rc == KEEL_OK) {
        float v[API_DIM] = {(float)test_now()};
        t0 = test_now();
        if ((rc = keel_add(idx, v, NULL)) == KEEL_OK &&
            (rc = keel_flush(idx)) == KEEL_OK &&
            (rc = keel_set_cancel(idx, cancel_after_half_a_second_since,
                                  &t0)) == KEEL_OK)
            rc = keel_publish(idx, API_URL, NULL);
        keel_close(idx);
    }
    setenv("KEEL_S3_STALL_TIMEOUT_S", "2", 1);
    return rc;
}

TEST(a_cancel_ends_a_publish_whose_requests_are_not_answered)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    outcome o = run_case("mode=lost&method=PUT", api_publish_cancelled, 30);
    CHECK_API_FAULT(o, 5);
    CHECK_EQ(o.rc, KEEL_ECANCELED);
}

static int
cancel_after_a_fifth_of_a_second(void *arg)
{
    return test_now() - *(double *)arg > 0.2;
}

/* A refresh whose look for the newest version meets a request the store
** never answers (rule), under a stall timeout of 20 s: a cancel that says
** stop after 0.2 s ends it with KEEL_ECANCELED within about a second (the
** requests of the version walk poll it), and the next refresh, the fault
** cleared, works. publish: a new version first, so that the refresh reads
** the hinted manifest and probes the one after it (on a thread of its
** own). */
static void
refresh_cancelled_under(const char *rule, int publish)
{
    setenv("KEEL_S3_STALL_TIMEOUT_S", "20", 1);
    keel_index *r = NULL;
    CHECK_OK(keel_open_reader(API_URL, NULL, &r));
    setenv("KEEL_S3_STALL_TIMEOUT_S", "2", 1);
    if (publish) {
        outcome o;
        CHECK_OK(api_publish(NULL, &o));
    }
    CHECK(hostile_rule(&H, rule) == 0);
    static double t0;
    t0 = test_now();
    CHECK_OK(keel_set_cancel(r, cancel_after_a_fifth_of_a_second, &t0));
    alarm(30); /* a refresh that hangs fails the test, never the machine */
    int rc = keel_refresh(r);
    double t = test_now() - t0;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", keel_errmsg());
    hostile_reset(&H, 0);
    printf("     refresh under %s: rc %d in %.2f s: %.*s\n", rule, rc, t,
           (int)strcspn(msg, "\n"), msg);
    CHECK_MSG(rc == KEEL_ECANCELED, "rc %d: %s", rc, msg);
    CHECK_MSG(t < 1.6, "%.2f s", t);
    CHECK_MSG(readable(msg), "%s", msg);
    CHECK_OK(keel_set_cancel(r, NULL, NULL));
    CHECK_OK(keel_refresh(r));
    alarm(0);
    float q[API_DIM] = {0.5f};
    keel_result res[5];
    size_t n = 0;
    CHECK_OK(keel_search(r, q, 5, NULL, res, &n));
    CHECK_EQ(n, 5);
    keel_close(r);
}

TEST(a_cancel_ends_a_refresh_whose_version_walk_is_not_answered)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    /* the hint's GET (the owner's first request) */
    refresh_cancelled_under("mode=lost&match=*latest*", 0);
    /* the walk's HEAD of the next version (no newer one: the owner's) */
    refresh_cancelled_under("mode=lost&method=HEAD&match=*manifest*", 0);
    /* a newer version: the hinted manifest's GET on the owner */
    refresh_cancelled_under("mode=lost&method=GET&match=*manifest*", 1);
    /* a newer version: the probe of the one after it, on its own thread */
    refresh_cancelled_under("mode=lost&method=HEAD&match=*manifest*", 1);
    /* a newer version: the GET of its header and live pages (the switch) */
    refresh_cancelled_under("mode=lost&method=GET&match=*pack*", 1);
}

TEST(prune_fails_on_a_listing_that_never_ends_and_deletes_nothing)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    long before = hostile_requests(&H);
    outcome o = run_case("mode=list-repeat", api_prune, 20);
    CHECK_API_FAULT(o, 10);
    o = run_case("mode=list-outside", api_prune, 20);
    CHECK_API_FAULT(o, 10);
    CHECK_MSG(strstr(o.msg, "not under the prefix"), "%s", o.msg);
    CHECK(hostile_requests(&H) > before);
    /* what was published still opens */
    o = run_case(NULL, api_open_search, 20);
    CHECK_MSG(o.ran && o.rc == KEEL_OK && o.n == 5, "%s", o.msg);
}

TEST(versions_fail_on_a_listing_that_never_ends_and_list_none)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    /* the same token, page after page: a listing that never ends (one of
     * new tokens and keys ends at the key cap, 1,000,000: 15 s here) */
    outcome o = run_case("mode=list-repeat", api_versions, 20);
    CHECK_API_FAULT(o, 10);
    CHECK_EQ(o.rc, KEEL_EIO);
    CHECK_MSG(strstr(o.msg, "nothing was listed") &&
              strstr(o.msg, "listing the versions of " API_URL), "%s", o.msg);
    CHECK(o.n >= 1); /* the call after the fault lists what is there */
    o = run_case("mode=list-outside", api_versions, 20);
    CHECK_API_FAULT(o, 10);
    CHECK_MSG(strstr(o.msg, "not under the prefix"), "%s", o.msg);
}

/* The times keel_list_versions gave (-2: none). */
static int
see_time(const keel_version *v, void *arg)
{
    *(int64_t *)arg = v->modified_ms;
    return 0;
}

/* A LastModified with a field out of its range is no time: -1, as one
** keel cannot read, not another day (2026-13-45T25:61:61Z read as
** 2027-02-15) or a year past 9999, which Python's datetime refuses, so
** keel.versions() raised for the whole listing. */
TEST(versions_read_no_time_from_a_lastmodified_out_of_range)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    static const struct {
        const char *time;
        int64_t ms;
    } cases[] = {
        {"2026-12-04T13:40:01.123Z", INT64_C(1796391601123)},
        {"2026-12-04T13:40:01Z", INT64_C(1796391601000)},
        {"9999-12-31T23:59:59.999Z", INT64_C(253402300799999)},
        {"9999-99-99T99:99:99Z", -1},
        {"2026-13-45T25:61:61Z", -1},
        {"2026-12-32T00:00:00Z", -1},
        {"2026-00-01T00:00:00Z", -1},
        {"2026-12-04T24:00:00Z", -1},
        {"2026-12-04T13:60:00Z", -1},
        {"Fri, 04 Dec 2026 13:40:01 GMT", -1},
        {"", -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rule[128];
        snprintf(rule, sizeof rule, "mode=list-time&time=%s", cases[i].time);
        hostile_reset(&H, 0);
        CHECK(hostile_rule(&H, rule) == 0);
        int64_t ms = -2;
        CHECK_OK(keel_list_versions(API_URL, see_time, &ms));
        CHECK_MSG(ms == cases[i].ms, "LastModified '%s' read as %lld ms, "
                  "not %lld", cases[i].time, (long long)ms,
                  (long long)cases[i].ms);
    }
    hostile_reset(&H, 0);
}

/* A store that says every object exists (200 to every HEAD, a manifest for
** every manifest key): opening and publishing end, right or with an
** error, within their deadlines (the version walk is bounded). */
TEST(public_calls_end_when_every_object_seems_to_exist)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    outcome o = run_case("mode=head200", api_open_search, 30);
    CHECK_MSG(!o.timed_out && !o.sig && o.ran, "hung or died");
    CHECK_MSG(o.rc == KEEL_OK || (documented(o.rc) && readable(o.msg)),
              "code %d: %s", o.rc, o.msg);
    CHECK_MSG(o.secs < 15, "%.2f s", o.secs);
    CHECK_MSG(o.again == KEEL_OK, "after the fault: %s", o.again_msg);
    o = run_case("mode=head200", api_publish, 30);
    CHECK_MSG(!o.timed_out && !o.sig && o.ran, "hung or died");
    CHECK_MSG(o.rc == KEEL_OK || (documented(o.rc) && readable(o.msg)),
              "code %d: %s", o.rc, o.msg);
    CHECK_MSG(o.secs < 15, "%.2f s", o.secs);
    CHECK_MSG(o.again == KEEL_OK, "after the fault: %s", o.again_msg);
}

/* A manifest cut short by a Content-Length shorter than its body: the
** client cannot see it in a whole-object GET (HTTP reads what the length
** says, and the store's ETag need not be an MD5), the manifest's own
** sizes and checksum do. */
TEST(a_manifest_cut_short_by_its_content_length_is_refused)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    outcome o = run_case("mode=short-length&match=*manifest*",
                         api_open_search, 30);
    CHECK_API_FAULT(o, 10);
    CHECK_EQ(o.rc, KEEL_ECORRUPT);
}

TEST(the_cli_exits_1_with_a_help_line_on_an_unasked_304)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    const char *b = getenv("BUILD");
    char cmd[1200], out[4096] = "";
    snprintf(cmd, sizeof cmd, "%s/keel info %s 2>&1", b && *b ? b : "build",
             API_URL);
    for (int fault = 1; fault >= 0; fault--) {
        hostile_reset(&H, 0);
        if (fault)
            CHECK(hostile_rule(&H, "mode=not-modified") == 0);
        FILE *f = popen(cmd, "r");
        CHECK(f);
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = '\0';
        int st = pclose(f);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        printf("     keel info under %s: exit %d: %.*s\n",
               fault ? "not-modified" : "no fault", code,
               (int)strcspn(out, "\n"), out);
        if (fault) {
            CHECK_MSG(code == 1, "exit %d: %s", code, out); /* was 254 */
            CHECK_MSG(strstr(out, "did not ask for it") &&
                      strstr(out, "help: "), "%s", out);
        } else {
            CHECK_MSG(code == 0, "exit %d: %s", code, out);
        }
    }
    hostile_reset(&H, 0);
}

/* A refresh whose new version's header pages the store never sends holds
** up no search beside it: the switch fetches them before it holds off the
** handle's readers. A search on another thread, cancelled at once, ends
** within a second (it waited for the refresh's request, to the stall
** timeout, before), and the refresh after the fault reaches the version. */
static pthread_t beside_main;
static keel_index *beside_r;

static int
stop_main_only(void *arg)
{
    (void)arg;
    return pthread_equal(pthread_self(), beside_main);
}

static void *
refresh_thread(void *arg)
{
    int *rc = arg;
    *rc = keel_refresh(beside_r);
    return NULL;
}

TEST(a_refresh_whose_switch_is_not_answered_holds_up_no_search)
{
    NEED_HOSTILE();
    CHECK(api_setup());
    beside_main = pthread_self();
    setenv("KEEL_S3_STALL_TIMEOUT_S", "4", 1);
    CHECK_OK(keel_open_reader(API_URL, NULL, &beside_r));
    outcome o;
    CHECK_OK(api_publish(NULL, &o));
    keel_stats before;
    CHECK_OK(keel_stat(beside_r, &before));
    CHECK_OK(keel_set_cancel(beside_r, stop_main_only, NULL));
    CHECK(hostile_rule(&H, "mode=lost&method=GET&match=*pack*") == 0);
    alarm(30);
    int rrc = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, refresh_thread, &rrc) == 0);
    usleep(300000); /* the refresh waits for its pack GET */
    double t0 = test_now();
    float q[API_DIM] = {0.5f};
    keel_result res[5];
    size_t n = 0;
    int rc = keel_search(beside_r, q, 5, NULL, res, &n);
    double took = test_now() - t0;
    pthread_join(t, NULL);
    hostile_reset(&H, 0);
    printf("     refresh rc %d; a search beside it cancelled at once: rc %d "
           "in %.2f s\n", rrc, rc, took);
    CHECK_MSG(rc == KEEL_OK || rc == KEEL_ECANCELED, "rc %d", rc);
    CHECK_MSG(took < 1.0, "the search waited %.2f s for the refresh", took);
    CHECK_EQ(rrc, KEEL_EIO); /* the pack GET timed out */
    CHECK_OK(keel_set_cancel(beside_r, NULL, NULL));
    setenv("KEEL_S3_STALL_TIMEOUT_S", "20", 1);
    CHECK_OK(keel_refresh(beside_r));
    keel_stats after;
    CHECK_OK(keel_stat(beside_r, &after));
    CHECK(after.count > before.count);
    CHECK_OK(keel_search(beside_r, q, 5, NULL, res, &n));
    CHECK_EQ(n, 5);
    keel_close(beside_r);
    alarm(0);
}

TEST_MAIN()
