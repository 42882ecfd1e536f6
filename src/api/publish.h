/* publish.h -- keel_publish's view of the published layout: the names and
** the manifest live in the cache layer (cache/manifest.h), which the reader
** of a published index shares.
*/
#ifndef KEEL_PUBLISH_H
#define KEEL_PUBLISH_H

#include "cache/manifest.h"

#endif /* KEEL_PUBLISH_H */
