/* replay.c -- a plain main() for a fuzz target: runs LLVMFuzzerTestOneInput
** on every file of the corpus directories (and on the files) named on the
** command line, so `make test` replays each committed corpus without
** libFuzzer. Linked with one target at a time.
**
** What it hunts: regressions. Every input in a corpus once ran clean, and
** every reproducer kept in test/fuzz/crashes/ ran clean after its fix; a
** crash, a sanitizer report or a target's abort() fails the run. When one
** does, the message names the input being replayed.
**
**   replay [-v] DIR_OR_FILE...      -v: name each input as it runs
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fuzz.h"

/* Sanitizer runtimes, when linked in, call this before they exit. */
extern void __sanitizer_set_death_callback(void (*fn)(void))
    __attribute__((weak));

static const char *current = "(none)";

static void
name_current(void)
{
    /* Only async-signal-safe calls: this may run in a signal handler. */
    static const char pre[] = "\nreplay: the failing input is ";
    if (write(2, pre, sizeof pre - 1) < 0 ||
        write(2, current, strlen(current)) < 0 || write(2, "\n", 1) < 0)
        return;
}

static void
on_signal(int sig)
{
    name_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int
run_file(const char *path, int verbose)
{
    size_t len = 0;
    uint8_t *buf = fuzz_read_file(path, &len);
    if (!buf) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        return 1;
    }
    if (verbose)
        fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    current = path;
    LLVMFuzzerTestOneInput(buf, len);
    current = "(none)";
    free(buf);
    return 0;
}

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir, in name order; *n counts them. */
static int
run_dir(const char *dir, int verbose, size_t *n)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open %s\n", dir);
        return 1;
    }
    char **names = NULL;
    size_t count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                fuzz_fail("out of memory");
            names = nn;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[count] = malloc(len);
        if (!names[count])
            fuzz_fail("out of memory");
        snprintf(names[count], len, "%s/%s", dir, e->d_name);
        count++;
    }
    closedir(d);
    qsort(names, count, sizeof *names, cmp_names);
    int rc = 0;
    for (size_t i = 0; i < count; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            rc |= run_file(names[i], verbose);
            (*n)++;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int
main(int argc, char **argv)
{
    int verbose = 0, rc = 0;
    size_t n = 0;
    signal(SIGABRT, on_signal); /* a target's fuzz_fail */
    if (__sanitizer_set_death_callback) {
        /* The sanitizers own SIGSEGV and friends: leave them theirs. */
        __sanitizer_set_death_callback(name_current);
    } else {
        signal(SIGSEGV, on_signal);
        signal(SIGBUS, on_signal);
        signal(SIGFPE, on_signal);
    }
    const char *prog = strrchr(argv[0], '/');
    prog = prog ? prog + 1 : argv[0];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (strcmp(argv[i], "-v") == 0) {
            verbose = 1;
        } else if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
            rc = 1;
        } else if (S_ISDIR(st.st_mode)) {
            rc |= run_dir(argv[i], verbose, &n);
        } else {
            rc |= run_file(argv[i], verbose);
            n++;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%-4s %s: replayed %zu inputs (%.2f s)\n", rc ? "FAIL" : "ok", prog,
           n, (double)(t1.tv_sec - t0.tv_sec) +
                  (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return rc;
}
