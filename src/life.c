/* life.c -- an index's file over its life: compaction into a new file, and
** readers that follow the file that replaced their own.
*/
#include "api.h"

int
keel__reader_follow(keel_index *idx)
{
    KEEL_UNUSED(idx);
    return KEEL_OK;
}

int
keel_compact(keel_index *idx)
{
    if (!idx)
        return keel__fail(KEEL_EINVAL, "keel_compact was given a NULL index\n"
                          "help: pass the handle keel_open returned");
    return keel__fail(KEEL_EINVAL, "compaction is not available yet\nhelp: "
                      "rebuild the index from its live vectors");
}
