/* hostile.h -- starts and steers test/objstore/hostile_s3.py, an S3
** impersonator that answers wrongly on purpose, from a C test.
**
** hostile_start runs `/usr/bin/python3 test/objstore/hostile_s3.py` (the
** interpreter from KEEL_PYTHON, the script from KEEL_HOSTILE_S3 when set;
** paths are relative to the repository root, where make runs the tests)
** with a port file in a fresh directory, waits for the port (at most 10
** s) and leaves the server running until hostile_stop. The server stops by
** itself when the test process ends. Its modes and the rules that select
** them are described at the top of hostile_s3.py.
**
**   hostile h;
**   if (hostile_start(&h) != 0) ...          (h.err says why)
**   hostile_env(&h);                         (AWS_* for keel__s3_open(NULL))
**   hostile_rule(&h, "mode=lost&match=*manifest*&count=1");
**   ... keel calls against h.endpoint, bucket "hostile" ...
**   hostile_reset(&h, 0);
**   hostile_stop(&h);
*/
#ifndef KEEL_TEST_HOSTILE_H
#define KEEL_TEST_HOSTILE_H

#include <stddef.h>
#include <sys/types.h>

typedef struct hostile {
    pid_t pid;
    int port;
    char endpoint[64];   /* "http://127.0.0.1:PORT" */
    char dir[256];       /* the port file's directory */
    char err[256];       /* why hostile_start failed */
} hostile;

/* 0, or -1 with h->err set. */
int hostile_start(hostile *h);
/* Sends SIGTERM and waits for the server (at most 5 s, then SIGKILL). */
void hostile_stop(hostile *h);
/* Sets AWS_ENDPOINT_URL to the server and dummy keys, region us-east-1. */
void hostile_env(const hostile *h);
/* Adds a rule: query is "mode=M&match=GLOB&method=X&count=N&K=V" (the
** server's control endpoint POST /_hostile/rule). 0, or -1 (h->err). */
int hostile_rule(hostile *h, const char *query);
/* Drops every rule and, with objects, every stored object. */
int hostile_reset(hostile *h, int objects);
/* Requests the server has answered or taken (control requests aside), or
** -1 when it could not be asked. */
long hostile_requests(hostile *h);
/* The last request's header name (lower case) into out: its length, or -1
** when that request had none. */
long hostile_last_header(hostile *h, const char *name, char *out, size_t cap);
/* Stores an object as is: key "/BUCKET/KEY". 0 or -1. */
int hostile_put(hostile *h, const char *key, const void *data, size_t len);

#endif /* KEEL_TEST_HOSTILE_H */
