/* objects.h -- what the object-store tests do beside keel: objects under a
** published index's URL read, written, counted and deleted through a client
** of the gateway itself, a reader's counters, versions added and flushed,
** and a fault proxy (s3proxy.h) in front of the gateway for the clients a
** test makes while it is up.
**
** The gateway is the endpoint test/objstore/run.sh exported in
** AWS_ENDPOINT_URL, kept at the first call of any function here (before a
** test points AWS_ENDPOINT_URL at a proxy), so the objects a test checks
** are the store's, never what a proxy answers.
**
**   s3proxy *p = proxy_up();       (clients made from now on go through it)
**   go_direct();  ... via(p);      (and back)
**   obj_count(url, "/manifest/")   (objects the gateway holds)
**   proxy_down(p);
*/
#ifndef KEEL_TEST_OBJECTS_H
#define KEEL_TEST_OBJECTS_H

#include "keel.h"
#include "cache/cache.h"
#include "s3proxy.h"
#include "s3/s3.h"

#include <stddef.h>
#include <stdint.h>

/* The gateway's endpoint ("" when none was exported). */
const char *obj_gateway(void);

/* A client of the gateway, and the bucket (64 bytes) and key of url's
** object rest ("latest", "manifest/<20 digits>"); NULL on an error. Close
** it with keel__s3_close. */
keel_s3 *obj_client(const char *url, const char *rest, char *bucket,
                    char *key, size_t cap);

/* Writes len bytes of data as url's object rest; data NULL deletes it. */
int obj_set(const char *url, const char *rest, const void *data, size_t len);

/* How many objects under url's prefix ("PREFIX/...") have part in their
** key ("/pack/", "/manifest/"); -1 on an error. */
long obj_count(const char *url, const char *part);

/* The version url's `latest` hint names; 0 when none can be read. */
uint64_t obj_hint(const char *url);

/* n random vectors of dim dimensions (td_random's seed) added to w, then a
** flush: KEEL_OK or the first failure. */
int obj_add_flush(keel_index *w, size_t n, size_t dim, uint64_t seed);

/* What reader r's page cache counted (keel__remote_counters); every field
** UINT64_MAX when r is no reader of a URL. */
keel_cache_counters reader_counters(keel_index *r);

/* A proxy to the gateway; clients made from now on go through it, with
** the default stall timeout (one a failed test left up is stopped first,
** and KEEL_S3_STALL_TIMEOUT_S it left set is unset). NULL on an error
** (printed). */
s3proxy *proxy_up(void);
/* Stops it; clients made from now on go to the gateway. */
void proxy_down(s3proxy *p);
/* Clients made from now on go to the gateway (go_direct) or through p. */
void go_direct(void);
void via(const s3proxy *p);
/* p's counters now. */
s3proxy_counters proxy_counters(s3proxy *p);

#endif /* KEEL_TEST_OBJECTS_H */
