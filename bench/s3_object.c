/* s3_object.c -- one object in and out of S3-compatible storage, for
** bench/remote.sh: what a user of a single-file index does today.
**
**   s3_object put FILE s3://BUCKET/KEY
**   s3_object get s3://BUCKET/KEY FILE [--range-mib 8] [--inflight 16]
**                 [-- CMD ARG...]
**
** put: one PUT of the whole file (keel's S3 client, src/s3/s3.h).
** get: HEAD for the size, then the object in ranged GETs of --range-mib MiB
**   with --inflight of them on the wire at once (keel__s3_get_ranges), each
**   straight into a shared mapping of FILE (created, or truncated first), so
**   the bytes land in the page cache as a download tool's writes would; no
**   fsync. Prints {"kind":"download",...} on standard error, then execs CMD
**   if given (hnsw_bench cold FILE ...). KEEL_BENCH_T0 (set by bench/evict
**   just before it started this program) is kept, so CMD's times run from
**   this program's exec and include the download; without it, it is set to
**   this program's start.
**
** Endpoint and keys from AWS_ENDPOINT_URL and the rest of the environment,
** as for keel. Exits 0, 1 on a failure (keel's message on standard error),
** 2 on a usage error, 127 when CMD cannot be run.
*/
#define _GNU_SOURCE 1

#include "keel.h"

#include "base/internal.h"
#include "cache/manifest.h"
#include "s3/s3.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
usage(void)
{
    fputs("usage: s3_object put FILE s3://BUCKET/KEY\n"
          "       s3_object get s3://BUCKET/KEY FILE [--range-mib 8] "
          "[--inflight 16] [-- CMD ARG...]\n", stderr);
    exit(2);
}

static int
fail(const char *what)
{
    fprintf(stderr, "s3_object: %s: %s\n", what, keel_errmsg());
    return 1;
}

static void
split(const char *url, char *bucket, size_t bcap, char *key, size_t kcap)
{
    if (keel__s3_url_parse(url, bucket, bcap, key, kcap) != KEEL_OK ||
        !*key) {
        fprintf(stderr, "s3_object: %s is not s3://BUCKET/KEY: %s\n", url,
                keel_errmsg());
        exit(2);
    }
}

static int
cmd_put(const char *path, const char *url)
{
    char bucket[64], key[1024];
    split(url, bucket, sizeof bucket, key, sizeof key);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "s3_object: cannot open %s: %s\n", path,
                strerror(errno));
        return 1;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    keel_s3 *s3;
    if (keel__s3_open(NULL, &s3) != KEEL_OK)
        return fail("opening the client");
    int64_t t0 = now_ns();
    int rc = keel__s3_put_file(s3, bucket, key, fd, 0, (uint64_t)size, 0,
                               NULL);
    double ms = (double)(now_ns() - t0) / 1e6;
    keel__s3_close(s3);
    close(fd);
    if (rc)
        return fail(url);
    fprintf(stderr, "{\"kind\":\"upload\",\"url\":\"%s\",\"bytes\":%lld,"
            "\"ms\":%.1f}\n", url, (long long)size, ms);
    return 0;
}

static int
cmd_get(int argc, char **argv)
{
    int64_t t0 = now_ns();
    const char *t0s = getenv("KEEL_BENCH_T0");
    if (!t0s || !*t0s) {
        char b[32];
        snprintf(b, sizeof b, "%lld", (long long)t0);
        setenv("KEEL_BENCH_T0", b, 1);
    } else {
        t0 = strtoll(t0s, NULL, 10);
    }
    if (argc < 4)
        usage();
    const char *url = argv[2], *path = argv[3];
    size_t range = (size_t)8 << 20;
    uint32_t inflight = 16;
    int i = 4;
    for (; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (i + 1 >= argc)
            usage();
        if (strcmp(argv[i], "--range-mib") == 0)
            range = (size_t)atol(argv[i + 1]) << 20;
        else if (strcmp(argv[i], "--inflight") == 0)
            inflight = (uint32_t)atol(argv[i + 1]);
        else
            usage();
    }
    if (range == 0 || inflight == 0)
        usage();
    char bucket[64], key[1024];
    split(url, bucket, sizeof bucket, key, sizeof key);

    keel_s3_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.max_inflight = inflight;
    keel_s3 *s3;
    if (keel__s3_open(&cfg, &s3) != KEEL_OK)
        return fail("opening the client");
    keel_s3_object o;
    if (keel__s3_head(s3, bucket, key, &o) != KEEL_OK)
        return fail(url);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (o.size && ftruncate(fd, (off_t)o.size) != 0)) {
        fprintf(stderr, "s3_object: cannot create %s: %s\n", path,
                strerror(errno));
        return 1;
    }
    size_t n = o.size ? (size_t)((o.size + range - 1) / range) : 0;
    uint8_t *map = NULL;
    if (o.size) {
        map = mmap(NULL, (size_t)o.size, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
        if (map == MAP_FAILED) {
            fprintf(stderr, "s3_object: cannot map %s: %s\n", path,
                    strerror(errno));
            return 1;
        }
    }
    keel_s3_range *rs = calloc(n ? n : 1, sizeof *rs);
    if (!rs)
        return 1;
    for (size_t j = 0; j < n; j++) {
        uint64_t off = (uint64_t)j * range;
        rs[j].key = key;
        rs[j].off = off;
        rs[j].len = (size_t)KEEL_MIN((uint64_t)range, o.size - off);
        rs[j].buf = map + off;
    }
    int64_t g0 = now_ns();
    int rc = keel__s3_get_ranges(s3, bucket, rs, n, inflight, NULL);
    int64_t g1 = now_ns();
    keel__s3_close(s3);
    free(rs);
    if (map)
        munmap(map, (size_t)o.size);
    close(fd);
    if (rc)
        return fail(url);
    fprintf(stderr, "{\"kind\":\"download\",\"url\":\"%s\",\"bytes\":%llu,"
            "\"gets\":%zu,\"range_bytes\":%zu,\"inflight\":%u,"
            "\"get_ms\":%.1f,\"done_ms\":%.1f}\n", url,
            (unsigned long long)o.size, n, range, inflight,
            (double)(g1 - g0) / 1e6, (double)(now_ns() - t0) / 1e6);
    if (i + 1 < argc) {
        execvp(argv[i + 1], argv + i + 1);
        fprintf(stderr, "s3_object: cannot run %s: %s\n", argv[i + 1],
                strerror(errno));
        return 127;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    if (strcmp(argv[1], "put") == 0) {
        if (argc != 4)
            usage();
        return cmd_put(argv[2], argv[3]);
    }
    if (strcmp(argv[1], "get") == 0)
        return cmd_get(argc, argv);
    usage();
    return 2;
}
