/* compact.h -- compaction's one call besides keel_compact (compact.c). */
#ifndef KEEL_COMPACT_H
#define KEEL_COMPACT_H

/* A writer removes what a crashed compaction left beside path (with the
** writer lock of the file held). */
void keel__remove_leftovers(const char *path);

#endif /* KEEL_COMPACT_H */
