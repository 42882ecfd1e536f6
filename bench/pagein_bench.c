/* pagein_bench.c -- which call overlaps cold page reads of a mapping on
** this kernel (doc/batch_reads.md quotes its figures).
**
**   pagein_bench FILE [--batches 200] [--ranges 32] [--span 4096]
**
** For each method, FILE is evicted from the page cache, mapped, and then
** `batches` batches of `ranges` random page-aligned spans of `span` bytes
** are brought in and touched (one byte per page), a batch at a time, as a
** search's expansion would. Methods: plain faults one after another;
** MADV_WILLNEED on each span, then the touches; readahead(2) on each span;
** MADV_POPULATE_READ spread over 4 threads; io_uring reads of each span
** into a scratch buffer (through the page cache), all submitted, then
** waited for. Prints one JSON line per method: ms per batch (median of the
** batch times and the total).
*/
#define _GNU_SOURCE 1

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

#define MAXR 1024

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t
next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

typedef struct job {
    char *base;
    uint64_t *off;
    size_t n, span;
    int first, step;
} job;

static void *
populate_part(void *arg)
{
    job *j = arg;
    for (size_t i = (size_t)j->first; i < j->n; i += (size_t)j->step)
        madvise(j->base + j->off[i], j->span, MADV_POPULATE_READ);
    return NULL;
}

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fputs("usage: pagein_bench FILE [--batches N] [--ranges R] "
              "[--span BYTES]\n", stderr);
        return 2;
    }
    size_t batches = 200, ranges = 32, span = 4096;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batches"))
            batches = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--ranges"))
            ranges = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--span"))
            span = (size_t)atol(argv[i + 1]);
    }
    if (ranges > MAXR)
        ranges = MAXR;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    struct stat sb;
    fstat(fd, &sb);
    size_t len = (size_t)sb.st_size, page = 4096;
    size_t npages = (len - span) / page;
    static const char *names[] = {"fault", "willneed", "readahead",
                                  "populate4", "io_uring"};
    struct io_uring ring;
    if (io_uring_queue_init(MAXR, &ring, 0) != 0) {
        fputs("io_uring unavailable\n", stderr);
        return 1;
    }
    char *scratch = malloc(MAXR * span);
    double *t = malloc(batches * sizeof *t);
    for (int m = 0; m < 5; m++) {
        rng = 0x9E3779B97F4A7C15ull; /* same spans for every method */
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        char *base = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
        volatile unsigned sum = 0;
        int64_t all0 = now_ns();
        for (size_t b = 0; b < batches; b++) {
            uint64_t off[MAXR];
            for (size_t r = 0; r < ranges; r++)
                off[r] = (next() % npages) * page;
            int64_t t0 = now_ns();
            switch (m) {
            case 1:
                for (size_t r = 0; r < ranges; r++)
                    madvise(base + off[r], span, MADV_WILLNEED);
                break;
            case 2:
                for (size_t r = 0; r < ranges; r++)
                    readahead(fd, (off64_t)off[r], span);
                break;
            case 3: {
                pthread_t tid[3];
                job j[4];
                for (int k = 0; k < 4; k++)
                    j[k] = (job){base, off, ranges, span, k, 4};
                for (int k = 0; k < 3; k++)
                    pthread_create(&tid[k], NULL, populate_part, &j[k + 1]);
                populate_part(&j[0]);
                for (int k = 0; k < 3; k++)
                    pthread_join(tid[k], NULL);
                break;
            }
            case 4:
                for (size_t r = 0; r < ranges; r++) {
                    struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
                    io_uring_prep_read(sqe, fd, scratch + r * span,
                                       (unsigned)span, off[r]);
                }
                io_uring_submit_and_wait(&ring, (unsigned)ranges);
                for (size_t r = 0; r < ranges; r++) {
                    struct io_uring_cqe *cqe;
                    io_uring_wait_cqe(&ring, &cqe);
                    io_uring_cqe_seen(&ring, cqe);
                }
                break;
            default:
                break;
            }
            for (size_t r = 0; r < ranges; r++)
                for (size_t p = 0; p < span; p += page)
                    sum += (unsigned char)base[off[r] + p];
            t[b] = (double)(now_ns() - t0) / 1e6;
        }
        double total = (double)(now_ns() - all0) / 1e6;
        qsort(t, batches, sizeof *t, cmp_d);
        printf("{\"method\":\"%s\",\"ranges\":%zu,\"span\":%zu,"
               "\"batches\":%zu,\"median_ms\":%.3f,\"p90_ms\":%.3f,"
               "\"total_ms\":%.1f}\n", names[m], ranges, span, batches,
               t[batches / 2], t[batches * 9 / 10], total);
        fflush(stdout);
        munmap(base, len);
    }
    io_uring_queue_exit(&ring);
    return 0;
}
