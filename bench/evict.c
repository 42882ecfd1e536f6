/* evict.c -- takes files out of the page cache, checks that they are out,
** and starts a cold-start run (bench/run.sh uses it before every cold run).
**
**   evict FILE...                  evict each file, then check it
**   evict --resident FILE...       only report how much of each is cached
**   evict FILE... -- CMD [ARG...]  evict and check, then exec CMD with
**                                  KEEL_BENCH_T0 set to CLOCK_MONOTONIC ns
**
** Eviction: fdatasync (dirty pages cannot be dropped), then
** posix_fadvise(POSIX_FADV_DONTNEED) over the whole file. The check maps the
** file and asks mincore which pages are still in memory; it prints one JSON
** line per file on standard error (standard output belongs to CMD) and
** fails if more than 1% of a file's pages stayed resident (a page some
** other process has mapped cannot be dropped).
**
** KEEL_BENCH_T0 is read just before execvp, so the measured programs count
** their own exec, dynamic loading (and for Python, interpreter start and
** imports) as part of the cold start: "from process start".
*/
#define _GNU_SOURCE 1

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Resident and total pages of path; -1 on error. */
static int
resident(const char *path, long long *res, long long *total)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    struct stat sb;
    int rc = -1;
    *res = *total = 0;
    if (fstat(fd, &sb) == 0) {
        if (sb.st_size == 0) {
            rc = 0;
        } else {
            size_t page = (size_t)sysconf(_SC_PAGESIZE);
            size_t len = (size_t)sb.st_size, np = (len + page - 1) / page;
            void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
            unsigned char *vec = malloc(np);
            if (p != MAP_FAILED && vec && mincore(p, len, vec) == 0) {
                long long r = 0;
                for (size_t i = 0; i < np; i++)
                    r += vec[i] & 1;
                *res = r;
                *total = (long long)np;
                rc = 0;
            }
            free(vec);
            if (p != MAP_FAILED)
                munmap(p, len);
        }
    }
    close(fd);
    return rc;
}

static int
evict(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "evict: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    long long before, after, total;
    if (resident(path, &before, &total) != 0)
        before = -1;
    if (fdatasync(fd) != 0)
        fprintf(stderr, "evict: fdatasync %s: %s\n", path, strerror(errno));
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (rc != 0) {
        fprintf(stderr, "evict: posix_fadvise %s: %s\n", path, strerror(rc));
        return -1;
    }
    if (resident(path, &after, &total) != 0) {
        fprintf(stderr, "evict: cannot check %s\n", path);
        return -1;
    }
    fprintf(stderr, "{\"evict\":\"%s\",\"pages\":%lld,"
            "\"resident_before\":%lld,\"resident_after\":%lld}\n", path,
            total, before, after);
    if (after * 100 > total) {
        fprintf(stderr, "evict: %lld of %lld pages of %s are still cached "
                "(is another process mapping it?)\n", after, total, path);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fputs("usage: evict FILE... [-- CMD ARG...]\n"
              "       evict --resident FILE...\n", stderr);
        return 2;
    }
    if (strcmp(argv[1], "--resident") == 0) {
        int bad = 0;
        for (int i = 2; i < argc; i++) {
            long long r, t;
            if (resident(argv[i], &r, &t) != 0) {
                fprintf(stderr, "evict: cannot check %s\n", argv[i]);
                bad = 1;
                continue;
            }
            printf("{\"file\":\"%s\",\"pages\":%lld,\"resident\":%lld}\n",
                   argv[i], t, r);
        }
        return bad;
    }
    int i = 1, bad = 0;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (evict(argv[i]) != 0)
            bad = 1;
    if (bad)
        return 1;
    if (i + 1 < argc) {
        char t0[32];
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        snprintf(t0, sizeof t0, "%lld",
                 (long long)ts.tv_sec * 1000000000 + ts.tv_nsec);
        setenv("KEEL_BENCH_T0", t0, 1);
        execvp(argv[i + 1], argv + i + 1);
        fprintf(stderr, "evict: cannot run %s: %s\n", argv[i + 1],
                strerror(errno));
        return 127;
    }
    return 0;
}
