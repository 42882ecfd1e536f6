/* fuzz.h -- what keel's fuzz targets share: the libFuzzer entry point's
** prototype, scratch paths, whole-file reads and writes, and the checks every
** target makes besides the sanitizers' (file descriptors given back, a
** message and abort() on a broken expectation, so libFuzzer records it as a
** crash and replay.c fails the test run).
**
** Each target is a C file with LLVMFuzzerTestOneInput; it builds twice:
** with clang -fsanitize=fuzzer for fuzzing, and with the normal compiler
** plus replay.c, which feeds it the committed corpus in `make test`.
*/
#ifndef KEEL_FUZZ_H
#define KEEL_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Prints what broke and aborts: libFuzzer saves the input as a crash. */
static inline void __attribute__((noreturn, format(printf, 1, 2)))
fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "\nFUZZ FAILURE: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    abort();
}

/* A scratch path for this process, the same on every call with the same
** tag: $TMPDIR (or /tmp)/keel-fuzz-<tag>-<pid>.keel. */
static inline const char *
fuzz_path(const char *tag)
{
    static char buf[4][512];
    static const char *tags[4];
    for (int i = 0; i < 4; i++) {
        if (tags[i] && strcmp(tags[i], tag) == 0)
            return buf[i];
        if (!tags[i]) {
            const char *dir = getenv("TMPDIR");
            if (!dir || !*dir)
                dir = "/tmp";
            snprintf(buf[i], sizeof buf[i], "%s/keel-fuzz-%s-%d.keel", dir,
                     tag, (int)getpid());
            tags[i] = tag;
            return buf[i];
        }
    }
    fuzz_fail("fuzz_path: too many tags");
}

/* A float in [-1, 1) from a splitmix64 sequence: reproducible vectors. */
static inline float
fuzz_randf(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * 0x1.0p-52 - 1.0);
}

/* Removes the index at path and the files keel keeps next to it. */
static inline void
fuzz_remove(const char *path)
{
    char side[600];
    unlink(path);
    snprintf(side, sizeof side, "%s.undo", path);
    unlink(side);
    snprintf(side, sizeof side, "%s.compacting", path);
    unlink(side);
}

static inline void
fuzz_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        fuzz_fail("cannot create %s: %s", path, strerror(errno));
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            fuzz_fail("cannot write %s: %s", path, strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    close(fd);
}

/* The whole file (malloc'ed; *len gets its size), or NULL if it is
** missing. */
static inline uint8_t *
fuzz_read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0)
        fuzz_fail("cannot stat %s: %s", path, strerror(errno));
    size_t n = (size_t)st.st_size, got = 0;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf)
        fuzz_fail("out of memory reading %s", path);
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            fuzz_fail("cannot read %s: %s", path, strerror(errno));
        got += (size_t)r;
    }
    close(fd);
    *len = n;
    return buf;
}

/* The lowest free file descriptor: the same before and after an input
** unless keel kept a descriptor open. */
static inline int
fuzz_lowest_fd(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fuzz_fail("cannot open /dev/null: %s", strerror(errno));
    close(fd);
    return fd;
}

/* Reads little-endian values from the fuzz input; past its end every read
** gives zeros, so a decoder never needs to check lengths. */
typedef struct fuzz_in {
    const uint8_t *p;
    size_t n, at;
} fuzz_in;

static inline int
fuzz_more(const fuzz_in *in)
{
    return in->at < in->n;
}

static inline uint8_t
fuzz_u8(fuzz_in *in)
{
    return in->at < in->n ? in->p[in->at++] : 0;
}

static inline uint16_t
fuzz_u16(fuzz_in *in)
{
    uint16_t lo = fuzz_u8(in);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(in) << 8);
}

static inline uint32_t
fuzz_u32(fuzz_in *in)
{
    uint32_t lo = fuzz_u16(in);
    return lo | (uint32_t)fuzz_u16(in) << 16;
}

static inline uint64_t
fuzz_u64(fuzz_in *in)
{
    uint64_t lo = fuzz_u32(in);
    return lo | (uint64_t)fuzz_u32(in) << 32;
}

#endif /* KEEL_FUZZ_H */
