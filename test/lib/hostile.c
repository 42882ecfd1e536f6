/* hostile.c -- starts, steers and stops test/objstore/hostile_s3.py (see
** hostile.h). The control requests are plain HTTP/1.1 on a socket of
** their own, so they never share a connection with the client under test.
*/
#include "hostile.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int
hostile_start(hostile *h)
{
    memset(h, 0, sizeof *h);
    h->pid = -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(h->dir, sizeof h->dir, "%s/keel-hostile.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(h->dir)) {
        snprintf(h->err, sizeof h->err, "mkdtemp: %s", strerror(errno));
        return -1;
    }
    char portfile[300], parent[32];
    snprintf(portfile, sizeof portfile, "%s/port", h->dir);
    snprintf(parent, sizeof parent, "%d", (int)getpid());
    const char *py = getenv("KEEL_PYTHON");
    const char *script = getenv("KEEL_HOSTILE_S3");
    if (!py || !*py)
        py = "/usr/bin/python3";
    if (!script || !*script)
        script = "test/objstore/hostile_s3.py";
    if (access(script, R_OK) != 0) {
        snprintf(h->err, sizeof h->err, "no %s here (run from the "
                 "repository root, or set KEEL_HOSTILE_S3)", script);
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(h->err, sizeof h->err, "fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        execl(py, py, script, "--port-file", portfile, "--parent", parent,
              (char *)NULL);
        _exit(127);
    }
    h->pid = pid;
    for (double t0 = now_s(); now_s() - t0 < 10;) {
        FILE *f = fopen(portfile, "r");
        if (f) {
            int ok = fscanf(f, "%d", &h->port) == 1;
            fclose(f);
            if (ok && h->port > 0) {
                snprintf(h->endpoint, sizeof h->endpoint,
                         "http://127.0.0.1:%d", h->port);
                return 0;
            }
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            h->pid = -1;
            snprintf(h->err, sizeof h->err, "%s %s exited (status %d) "
                     "before listening", py, script, st);
            return -1;
        }
        usleep(20000);
    }
    hostile_stop(h);
    snprintf(h->err, sizeof h->err, "%s did not write its port in 10 s",
             script);
    return -1;
}

void
hostile_stop(hostile *h)
{
    if (h->pid > 0) {
        kill(h->pid, SIGTERM);
        int st;
        double t0 = now_s();
        while (waitpid(h->pid, &st, WNOHANG) == 0) {
            if (now_s() - t0 > 5) {
                kill(h->pid, SIGKILL);
                waitpid(h->pid, &st, 0);
                break;
            }
            usleep(10000);
        }
        h->pid = -1;
    }
    if (h->dir[0]) {
        char p[300];
        snprintf(p, sizeof p, "%s/port", h->dir);
        unlink(p);
        rmdir(h->dir);
        h->dir[0] = '\0';
    }
}

void
hostile_env(const hostile *h)
{
    setenv("AWS_ENDPOINT_URL", h->endpoint, 1);
    setenv("AWS_ACCESS_KEY_ID", "hostile", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "hostile-secret", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    unsetenv("AWS_SESSION_TOKEN");
}

/* One control request; the answer's body (JSON) into out. Status or -1. */
static int
control(hostile *h, const char *method, const char *target, const void *body,
        size_t len, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)h->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        snprintf(h->err, sizeof h->err, "connect to the hostile server: %s",
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char head[1200];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: hostile\r\n"
                     "Content-Length: %zu\r\n\r\n", method, target, len);
    size_t got = 0;
    char buf[65536];
    int status = -1;
    if (write(fd, head, (size_t)n) != n ||
        (len && write(fd, body, len) != (ssize_t)len))
        goto out;
    for (;;) {
        ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        buf[got] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        const char *cl = strcasestr(buf, "content-length:");
        if (end && cl && got >= (size_t)(end + 4 - buf) +
                                    strtoul(cl + 15, NULL, 10))
            break;
        if (got == sizeof buf - 1)
            break;
    }
    if (sscanf(buf, "HTTP/1.1 %d", &status) != 1)
        status = -1;
    char *b = strstr(buf, "\r\n\r\n");
    if (out && cap)
        snprintf(out, cap, "%s", b ? b + 4 : "");
    if (status != 200)
        snprintf(h->err, sizeof h->err, "%s %s: %d %s", method, target,
                 status, b ? b + 4 : "");
out:
    close(fd);
    return status;
}

int
hostile_rule(hostile *h, const char *query)
{
    char t[1024];
    snprintf(t, sizeof t, "/_hostile/rule?%s", query);
    return control(h, "POST", t, NULL, 0, NULL, 0) == 200 ? 0 : -1;
}

int
hostile_reset(hostile *h, int objects)
{
    return control(h, "POST", objects ? "/_hostile/reset?objects=1"
                                      : "/_hostile/reset",
                   NULL, 0, NULL, 0) == 200 ? 0 : -1;
}

long
hostile_requests(hostile *h)
{
    char js[4096];
    if (control(h, "GET", "/_hostile/stats", NULL, 0, js, sizeof js) != 200)
        return -1;
    const char *p = strstr(js, "\"requests\":");
    return p ? strtol(p + 11, NULL, 10) : -1;
}

int
hostile_put(hostile *h, const char *key, const void *data, size_t len)
{
    char t[1200];
    snprintf(t, sizeof t, "/_hostile/object?key=%s", key);
    return control(h, "PUT", t, data, len, NULL, 0) == 200 ? 0 : -1;
}

long
hostile_last_header(hostile *h, const char *name, char *out, size_t cap)
{
    static char js[65536];
    char t[300];
    snprintf(t, sizeof t, "/_hostile/last?header=%s", name);
    if (control(h, "GET", t, NULL, 0, js, sizeof js) != 200)
        return -1;
    const char *a = strstr(js, "\"value\": \"");
    const char *b = a ? strrchr(a + 10, '"') : NULL;
    if (!a || !b)
        return -1;
    a += 10;
    snprintf(out, cap, "%.*s", (int)(b - a), a);
    return (long)(b - a);
}
