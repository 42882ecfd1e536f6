/* s3_proxy.c -- test/lib/s3proxy.c as a program: a proxy in front of an S3
** server that adds a fixed latency to every request (benchmarks of readers
** by URL at a realistic round trip, against a local gateway).
**
**   s3_proxy --upstream http://127.0.0.1:PORT [--delay-ms N] --port-file FILE
**
** It listens on 127.0.0.1 on a port of the kernel's choice and, once it
** listens, writes that port in decimal and a newline to FILE (written
** beside it and renamed, so a reader never sees half of it). It forwards
** every request byte for byte, each after N ms (0 by default; requests on
** separate connections wait at the same time), until SIGTERM or SIGINT;
** then it prints one JSON line on standard output,
**   {"requests":N,"gets":N,"get_bytes":N}
** (requests seen, of which GETs, and the body bytes of the GETs' answers)
** and exits 0. A bad argument: a message naming it and a help line on
** standard error, exit 2. A proxy that cannot start: exit 1.
*/
#define _GNU_SOURCE 1

#include "lib/s3proxy.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE "s3_proxy --upstream http://127.0.0.1:PORT [--delay-ms N] " \
              "--port-file FILE"

static int
usage_error(const char *what, const char *value)
{
    fprintf(stderr, "s3_proxy: %s%s%s%s\nhelp: %s\n", what,
            value ? " '" : "", value ? value : "", value ? "'" : "", USAGE);
    return 2;
}

static int
write_port(const char *path, int port)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >=
        (int)sizeof tmp)
        return -1;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int ok = fprintf(f, "%d\n", port) > 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    const char *upstream = NULL, *port_file = NULL;
    unsigned delay = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("usage: %s\n", USAGE);
            return 0;
        }
        if (strcmp(a, "--upstream") && strcmp(a, "--delay-ms") &&
            strcmp(a, "--port-file"))
            return usage_error("unknown argument", a);
        if (i + 1 == argc)
            return usage_error("no value after", a);
        const char *v = argv[++i];
        if (strcmp(a, "--upstream") == 0) {
            if (strncmp(v, "http://", 7) != 0)
                return usage_error("--upstream is not an http:// URL:", v);
            upstream = v;
        } else if (strcmp(a, "--port-file") == 0) {
            if (!*v)
                return usage_error("--port-file is empty", NULL);
            port_file = v;
        } else {
            char *end;
            errno = 0;
            unsigned long n = strtoul(v, &end, 10);
            if (*v < '0' || *v > '9' || *end || errno || n > 600000)
                return usage_error("--delay-ms is not a whole number of "
                                   "milliseconds from 0 to 600000:", v);
            delay = (unsigned)n;
        }
    }
    if (!upstream)
        return usage_error("--upstream is missing", NULL);
    if (!port_file)
        return usage_error("--port-file is missing", NULL);

    /* The signals wait for sigwait here; no proxy thread takes them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    s3proxy *p;
    char err[512];
    if (s3proxy_start(upstream, &p, err, sizeof err) != 0) {
        fprintf(stderr, "s3_proxy: %s\nhelp: check --upstream\n", err);
        return 1;
    }
    s3proxy_set_delay_ms(p, delay);
    if (write_port(port_file, s3proxy_port(p)) != 0) {
        fprintf(stderr, "s3_proxy: cannot write the port to '%s': %s\nhelp: "
                "give a --port-file in a writable directory\n", port_file,
                strerror(errno));
        s3proxy_stop(p, NULL);
        return 1;
    }
    int sig;
    while (sigwait(&sigs, &sig) != 0)
        ;
    s3proxy_counters n;
    s3proxy_stop(p, &n);
    printf("{\"requests\":%" PRIu64 ",\"gets\":%" PRIu64
           ",\"get_bytes\":%" PRIu64 "}\n", n.requests, n.gets, n.get_bytes);
    return 0;
}
