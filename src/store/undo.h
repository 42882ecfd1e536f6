/* undo.h -- the undo log's calls (undo.c): saving a committed node's lists
** before they change, syncing and ending the log around a commit, and
** recovering it when a writer opens.
**
** Who calls it: graph.c (save, before a committed node's lists change),
** build.c (mark and restore around an add that fails), commit.c (sync before
** the index is synced, end after a commit) and open.c (recover, at a writer's
** open). The log calls no function of the store back: it reads slots and
** lists through store.h's inline accessors only. The api layer does not
** include this header; it reads a commit's lists through
** keel__store_committed_lists (store.h). undo.c's top comment holds the log's
** invariants (1)-(9) and its format.
*/
#ifndef KEEL_UNDO_H
#define KEEL_UNDO_H

#include "store/store.h"

/* save: call before the first change to the lists of a committed node since
** the last commit; KEEL_OK once its lists are in the log (*wrote 1 if this
** call wrote them, 0 if they were saved before), else KEEL_EIO, KEEL_EFULL or
** KEEL_ENOMEM with a message naming the log (the lists must then stay as they
** are). mark: where the next entry goes; restore: write back the lists of
** every entry written since mark (a failed add: committed nodes it saved
** first hold their committed lists again); a failure to read them poisons the
** writer. sync: make the log durable. end: drop it after a commit. recover:
** writer open, after the intent recovery: restore the lists the log the live
** page names saved, and fix where this writer's log goes. */
int keel__undo_save(keel_store *st, uint64_t slot, int *wrote);
int keel__undo_sync(keel_store *st);
void keel__undo_end(keel_store *st);
int keel__undo_recover(keel_store *st);
uint64_t keel__undo_mark(keel_store *st);
int keel__undo_restore(keel_store *st, uint64_t mark);
uint64_t keel__undo_identity(const keel_header *h);
/* Reading a log's bytes (recovery, and keel__store_committed_lists for
** backups and publishes of a commit). An entry holds words u32: the level-0
** list, then each upper list. commit_entries calls fn for the first intact
** entry of each committed slot in the log buf (size bytes), in log order,
** when it is the log of commit h (of geometry g), stopping at the first torn
** entry or when fn returns nonzero (which it returns); a log of another
** commit, or not a log, holds nothing for h (KEEL_OK). KEEL_ENOMEM too. */
typedef int (*keel_undo_entry_fn)(uint32_t slot, const uint8_t *words,
                                  uint32_t n_words, void *arg);
int keel__undo_commit_entries(const keel_geometry *g, const keel_header *h,
                              const uint8_t *buf, uint64_t size,
                              keel_undo_entry_fn fn, void *arg);
/* Where the file holds the lists of an entry of slot (n_words words) under
** commit h: the level-0 list at off[0] (len[0] bytes) and, for a node with
** upper levels, those lists at off[1] (len[1]; 0 when none). Reads the
** slot's record head through st's descriptor. KEEL_OK, KEEL_EIO or
** KEEL_ECORRUPT (an entry that does not fit the node) with a message. */
int keel__undo_entry_places(const keel_store *st, const keel_header *h,
                            uint32_t slot, uint32_t n_words, uint64_t off[2],
                            uint64_t len[2]);
/* Writer: a copy of its undo log (*buf, *size; NULL and 0 when no list
** changed since the last commit), read under undo_lock so that every entry a
** save wrote is in it. KEEL_OK, KEEL_ENOMEM, or KEEL_EIO naming the log
** when it cannot be read. */
int keel__undo_log_copy(keel_store *st, uint8_t **buf, uint64_t *size);

#endif /* KEEL_UNDO_H */
