/* warm.c -- reading an index into memory in the background, and huge pages.
*/
#include "api.h"

int
keel__warm_start(keel_index *idx)
{
    KEEL_UNUSED(idx);
    return KEEL_OK;
}

void
keel__warm_stop(keel_index *idx)
{
    KEEL_UNUSED(idx);
}

void
keel__huge_pages_advise(keel_index *idx)
{
    KEEL_UNUSED(idx);
}

int
keel_warm(keel_index *idx)
{
    if (!idx)
        return keel__fail(KEEL_EINVAL, "keel_warm was given a NULL index\n"
                          "help: pass an open handle");
    return keel__warm_start(idx);
}
