/* test.h -- keel's small test harness.
**
** A test file defines tests with TEST(name) { ... } and gets a main() from
** TEST_MAIN(). Each test runs in order; a failed CHECK prints the file, line,
** both sides where it has them and keel_errmsg(), marks the test failed and
** returns from it. Set KEEL_TEST_FILTER=substring to run only some tests.
** Scratch files go under test_dir(), a fresh directory per test binary run
** (removed at the end unless KEEL_TEST_KEEP is set).
*/
#ifndef KEEL_TEST_H
#define KEEL_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "keel.h"

typedef void (*test_fn)(void);
struct test_case {
    const char *name;
    test_fn fn;
};

#define TEST_MAX 512
static struct test_case test_cases[TEST_MAX];
static int test_count;
static int test_failed_flag;
static int test_skipped_flag;
static char test_dir_path[512];

#define TEST(name)                                                          \
    static void test_##name(void);                                          \
    __attribute__((constructor)) static void test_register_##name(void)    \
    {                                                                       \
        if (test_count < TEST_MAX)                                          \
            test_cases[test_count++] = (struct test_case){#name, test_##name}; \
    }                                                                       \
    static void test_##name(void)

#define TEST_FAIL_AT(...)                                                   \
    do {                                                                    \
        fprintf(stderr, "  FAIL %s:%d: ", __FILE__, __LINE__);              \
        fprintf(stderr, __VA_ARGS__);                                       \
        fprintf(stderr, "\n");                                              \
        if (keel_errmsg()[0])                                               \
            fprintf(stderr, "  keel_errmsg: %s\n", keel_errmsg());          \
        test_failed_flag = 1;                                               \
    } while (0)

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            TEST_FAIL_AT("CHECK(%s)", #cond);                               \
            return;                                                         \
        }                                                                   \
    } while (0)

#define CHECK_MSG(cond, ...)                                                \
    do {                                                                    \
        if (!(cond)) {                                                      \
            TEST_FAIL_AT(__VA_ARGS__);                                      \
            return;                                                         \
        }                                                                   \
    } while (0)

#define CHECK_EQ(a, b)                                                      \
    do {                                                                    \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);     \
        if (check_a_ != check_b_) {                                         \
            TEST_FAIL_AT("%s == %s (%lld != %lld)", #a, #b, check_a_,       \
                         check_b_);                                         \
            return;                                                         \
        }                                                                   \
    } while (0)

#define CHECK_U64(a, b)                                                     \
    do {                                                                    \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);        \
        if (check_a_ != check_b_) {                                         \
            TEST_FAIL_AT("%s == %s (%" PRIu64 " != %" PRIu64 ")", #a, #b,   \
                         check_a_, check_b_);                               \
            return;                                                         \
        }                                                                   \
    } while (0)

#define CHECK_OK(expr)                                                      \
    do {                                                                    \
        int check_rc_ = (expr);                                             \
        if (check_rc_ != KEEL_OK) {                                         \
            TEST_FAIL_AT("%s returned %d (%s)", #expr, check_rc_,           \
                         keel_strerror(check_rc_));                         \
            return;                                                         \
        }                                                                   \
    } while (0)

/* The call must fail with code rc and a message that names something and has
** a help line. */
#define CHECK_ERR(expr, rc)                                                 \
    do {                                                                    \
        int check_rc_ = (expr);                                             \
        if (check_rc_ != (rc)) {                                            \
            TEST_FAIL_AT("%s returned %d (%s), expected %d (%s)", #expr,    \
                         check_rc_, keel_strerror(check_rc_), (int)(rc),    \
                         keel_strerror(rc));                                \
            return;                                                         \
        }                                                                   \
        if (!strstr(keel_errmsg(), "\nhelp: ")) {                           \
            TEST_FAIL_AT("%s: message has no help line: '%s'", #expr,       \
                         keel_errmsg());                                    \
            return;                                                         \
        }                                                                   \
    } while (0)

#define CHECK_MSG_HAS(needle)                                               \
    do {                                                                    \
        if (!strstr(keel_errmsg(), (needle))) {                             \
            TEST_FAIL_AT("message '%s' lacks '%s'", keel_errmsg(), (needle)); \
            return;                                                         \
        }                                                                   \
    } while (0)

static inline const char *
test_dir(void)
{
    return test_dir_path;
}

/* A path under the test directory. The string stays valid and unchanged
** for the life of the process, however many calls follow: a test may hold
** it across loops (each distinct path is made once and kept; the same name
** gives the same pointer). An earlier version handed out 8 rotating static
** buffers, so a path held across 8 later calls silently became another
** file's name (test_publish.c's killed-publisher test then opened and
** published its downloaded copy instead of the index). */
static inline const char *
test_path(const char *name)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char **paths; /* reachable from here: not a leak */
    static size_t n, cap;
    char b[1200];
    snprintf(b, sizeof b, "%s/%s", test_dir_path, name);
    pthread_mutex_lock(&lock);
    const char *found = NULL;
    for (size_t i = n; i-- > 0 && !found;)
        if (strcmp(paths[i], b) == 0)
            found = paths[i];
    if (!found) {
        if (n == cap) {
            size_t c = cap ? 2 * cap : 64;
            char **np = realloc(paths, c * sizeof *np);
            if (!np) {
                fprintf(stderr, "test_path: out of memory\n");
                abort();
            }
            paths = np;
            cap = c;
        }
        char *s = strdup(b);
        if (!s) {
            fprintf(stderr, "test_path: out of memory\n");
            abort();
        }
        found = paths[n++] = s;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

/* A directory under the test directory, made if missing (test_path's). */
static inline const char *
test_subdir(const char *name)
{
    const char *p = test_path(name);
    mkdir(p, 0700);
    return p;
}

static inline void
test_rm_rf(const char *path)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", path);
}

static inline double
test_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Deterministic random numbers for tests (splitmix64). */
static inline uint64_t
test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline float
test_randf(uint64_t *state) /* uniform in [-1, 1) */
{
    return (float)((double)(test_rand(state) >> 11) * 0x1.0p-52 - 1.0);
}

/* Puts the test directory in /dev/shm when there is one and TMPDIR is not
** set: for tests that write thousands of small files or sync a lot, where
** the disk would only cost time. */
#define TEST_PREFER_MEMORY_FS()                                             \
    __attribute__((constructor)) static void test_prefer_memory_fs(void)   \
    {                                                                       \
        struct stat st_;                                                    \
        if (!getenv("TMPDIR") && stat("/dev/shm", &st_) == 0 &&            \
            S_ISDIR(st_.st_mode) && access("/dev/shm", W_OK) == 0)          \
            setenv("TMPDIR", "/dev/shm", 0);                                \
    }

/* Ends the current test as skipped (not passed): it needs something this
** run does not have, named in why. The summary counts skipped tests apart. */
#define TEST_SKIP(why)                                                      \
    do {                                                                    \
        printf("     (skipped: %s)\n", (why));                              \
        test_skipped_flag = 1;                                              \
        return;                                                             \
    } while (0)

#define TEST_MAIN()                                                         \
    int main(int argc, char **argv)                                         \
    {                                                                       \
        (void)argc;                                                         \
        const char *filter = getenv("KEEL_TEST_FILTER");                    \
        const char *tmp_root = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";    \
        const char *prog = strrchr(argv[0], '/');                           \
        prog = prog ? prog + 1 : argv[0];                                   \
        snprintf(test_dir_path, sizeof test_dir_path, "%s/keel-%s-%d",      \
                 tmp_root, prog, (int)getpid());                                \
        test_rm_rf(test_dir_path);                                          \
        if (mkdir(test_dir_path, 0700) != 0) {                              \
            perror(test_dir_path);                                          \
            return 2;                                                       \
        }                                                                   \
        int failed = 0, ran = 0, skipped = 0;                               \
        for (int i = 0; i < test_count; i++) {                              \
            if (filter && !strstr(test_cases[i].name, filter))              \
                continue;                                                   \
            test_failed_flag = 0;                                           \
            test_skipped_flag = 0;                                          \
            double t0 = test_now();                                         \
            test_cases[i].fn();                                             \
            ran++;                                                          \
            printf("%-4s %s.%s (%.2f s)\n", test_failed_flag ? "FAIL"      \
                   : test_skipped_flag ? "skip" : "ok", prog,               \
                   test_cases[i].name, test_now() - t0);                    \
            fflush(stdout);                                                 \
            failed += test_failed_flag;                                     \
            skipped += !test_failed_flag && test_skipped_flag;              \
        }                                                                   \
        if (!getenv("KEEL_TEST_KEEP"))                                      \
            test_rm_rf(test_dir_path);                                      \
        if (skipped)                                                        \
            printf("%s: %d of %d tests passed, %d skipped\n", prog,         \
                   ran - failed - skipped, ran, skipped);                   \
        else                                                                \
            printf("%s: %d of %d tests passed\n", prog, ran - failed, ran); \
        return failed ? 1 : 0;                                              \
    }

#endif /* KEEL_TEST_H */
