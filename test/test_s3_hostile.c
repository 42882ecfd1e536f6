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
                        .connect_timeout_ms = 1000,
                        .stall_timeout_s = 2,
                        .max_attempts = 2,
                        .max_inflight = 4};
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
    outcome o = run_case("mode=status&code=503", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, "503", 5);
    o = run_case("mode=status&code=500", get_ranges, 10);
    CHECK_FAULT(o, KEEL_EIO, "500", 5);
}

TEST(a_lost_answer_times_out_at_the_stall_timeout)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=lost", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, "timed out", 6);
    o = run_case("mode=lost", head, 10);
    CHECK_FAULT(o, KEEL_EIO, "timed out", 6);
    o = run_case("mode=lost", get_ranges, 10);
    CHECK_FAULT(o, KEEL_EIO, "timed out", 6);
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
    outcome o = run_case("mode=chunked-bad", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
    o = run_case("mode=chunked-bad", get_whole, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
}

TEST(a_content_length_that_disagrees_with_the_body_fails)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=short-length", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
    o = run_case("mode=short-length", get_ranges, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
    o = run_case("mode=long-length", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
    o = run_case("mode=long-length", get_whole, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
}

TEST(a_200_to_a_ranged_get_is_not_taken_for_the_range)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=no-206", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, "range", 5);
    o = run_case("mode=no-206", get_range0, 10);
    CHECK_FAULT(o, KEEL_EIO, "range", 5);
    o = run_case("mode=no-206", get_ranges, 10);
    CHECK_FAULT(o, KEEL_EIO, "range", 5);
}

TEST(a_connection_closed_mid_body_fails)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=close-mid-body", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
    o = run_case("mode=close-mid-body&at=0", get_whole, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
    o = run_case("mode=close-mid-body", get_ranges, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
}

TEST(a_header_with_a_nul_byte_fails)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=nul-header", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
    o = run_case("mode=nul-header&where=etag", head, 10);
    CHECK_FAULT(o, KEEL_EIO, OBJ, 5);
}

TEST(garbage_and_huge_error_bodies_fail_clearly)
{
    NEED_HOSTILE();
    outcome o = run_case("mode=xml-garbage", get_range, 10);
    CHECK_FAULT(o, KEEL_EIO, "400", 5);
    o = run_case("mode=xml-garbage&code=503", get_whole, 10);
    CHECK_FAULT(o, KEEL_EIO, "503", 5);
    o = run_case("mode=xml-huge", get_range, 20);
    CHECK_FAULT(o, KEEL_EIO, "400", 5);
    o = run_case("mode=xml-huge&size=2000", get_whole, 10);
    CHECK_FAULT(o, KEEL_EIO, "HostileHuge", 5);
}

TEST_MAIN()
