/* objstore.h -- what the object-store tests share: the gateway's bucket
** (KEEL_TEST_BUCKET, which test/objstore/run.sh exports), a skip when no
** gateway runs, and object URLs private to one test process (under
** OBJSTORE_AREA, which a test file that wants url_of defines first).
*/
#ifndef KEEL_TEST_OBJSTORE_H
#define KEEL_TEST_OBJSTORE_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline const char *
bucket(void)
{
    return getenv("KEEL_TEST_BUCKET");
}

#define NEED_SERVER()                                                       \
    do {                                                                    \
        if (!bucket())                                                      \
            TEST_SKIP("no object store: make test-objstore starts one");    \
    } while (0)

#ifdef OBJSTORE_AREA
/* s3://BUCKET/AREA/PID/name */
static inline void
url_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "s3://%s/%s/%d/%s", bucket(), OBJSTORE_AREA,
             (int)getpid(), name);
}
#endif

#endif /* KEEL_TEST_OBJSTORE_H */
