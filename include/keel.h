/* keel.h -- an embeddable vector index in one file.
**
** keel keeps vectors, their 64-bit ids and an HNSW graph in one file. The file
** opens in about a millisecond (only its headers are read), survives a crash
** or a power loss with every completed flush intact, and can be searched by
** any number of processes while one process writes it.
**
** THREADS
**   A keel_index handle may be shared by threads. Searches (keel_search,
**   keel_search_batch, keel_get, keel_get_batch, keel_ids, keel_count,
**   keel_dim) run concurrently with
**   each other and, on a writer, with adds, deletes and flushes on the same
**   handle: writes are serialized among themselves, searches take no lock
**   that a write holds. During keel_compact, searches go on against the
**   old file until the new one is swapped in (the swap waits for searches
**   in flight). keel_close must not race other calls on the same handle.
**   A handle must not be used in a child process after fork(); the child may
**   only keel_close it, which releases what the child holds and nothing else
**   (it never waits for the parent's threads, whatever they were doing).
**
** PROCESSES
**   One writer per file (keel_open takes an exclusive flock; a second writer,
**   in this process or another, gets KEEL_ELOCKED). A child made by fork()
**   does not keep the lock (on Linux): once the parent closes the writer,
**   it can open it again while the child lives on. Any number of readers
**   (keel_open_reader) in any process, lock-free: each search takes a fresh
**   snapshot of the last completed flush. A reader follows a compaction of
**   its index to the new file, but never into another index put at its path
**   (a file made by another keel_open), nor back in time: it moves only to
**   a file of the same index whose committed epoch is greater than the one
**   it has served and whose next id is not smaller (as a compaction's file
**   is), never to an older copy put back (a restored backup). Otherwise it
**   keeps its last snapshot, and keel_refresh and keel_check say so.
**
** REPLACING THE FILE
**   keel maps the file. Truncating it or overwriting it in place (cp over
**   it, a shell's >, a restore) while any handle has it open kills that
**   process with SIGBUS when it touches a page that is gone; no return code
**   can report it. To replace an index, write the new file beside it, then
**   rename it over the path: open handles keep searching the old file until
**   closed, and handles opened after the rename get the new one.
**
** OWNERSHIP
**   keel never returns memory the caller must free, except the handle itself
**   (keel_close). Every output buffer is the caller's and is written only on
**   success. Strings returned by keel_errmsg and keel_strerror belong to keel.
**
** ERRORS
**   Every function that can fail returns an int: KEEL_OK (0) or a positive
**   KEEL_E* code. On failure keel_errmsg() returns this thread's message: what
**   was wrong with which value, then a line starting "help: " saying what to
**   do instead. Output parameters are unchanged on failure.
**
** DURABILITY
**   Adds and deletes are visible to searches on the same handle at once and
**   become durable, together, when keel_flush returns KEEL_OK. After a crash
**   or power loss the file opens at exactly the last completed flush (or the
**   one that was in progress). A failed fsync poisons the writer: every later
**   flush fails until the index is reopened.
*/
#ifndef KEEL_H
#define KEEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KEEL_VERSION        "0.1.0"
#define KEEL_VERSION_NUMBER 1000 /* X*1000000 + Y*1000 + Z */

/* Return codes. The values are stable. */
#define KEEL_OK        0
#define KEEL_EINVAL    1  /* a bad argument */
#define KEEL_EDIM      2  /* a vector or file of other dimensions */
#define KEEL_EOPTIONS  3  /* file made with another metric, precision or M */
#define KEEL_ENOTFOUND 4  /* no such id, or no index at the path */
#define KEEL_ENOTINDEX 5  /* the file is not a keel index */
#define KEEL_EEXIST    6  /* the id is in use */
#define KEEL_ELOCKED   7  /* another writer has the file */
#define KEEL_EREADONLY 8  /* a write through a reader handle */
#define KEEL_ECORRUPT  9  /* the file fails a check */
#define KEEL_EFULL     10 /* disk full, or no room for more vectors or regions */
#define KEEL_EIO       11 /* the system refused a read, write or sync */
#define KEEL_ENOMEM    12 /* out of memory */
#define KEEL_EVERSION  13 /* the file was written by a newer keel */
#define KEEL_ECANCELED 14 /* the cancel callback stopped the call */

typedef struct keel_index keel_index; /* opaque; a writer or a reader */

typedef enum { KEEL_L2 = 0, KEEL_COSINE = 1, KEEL_IP = 2 } keel_metric;
typedef enum { KEEL_F32 = 0, KEEL_F16 = 1 } keel_precision;
/* Traversal codes: a compact copy of every vector that searches walk the
** graph on, the stored vectors then giving the returned distances exactly.
** KEEL_CODES_I8: one signed byte per dimension and 16 bytes of scale per
** vector (the row rounded up to 64 bytes). KEEL_CODES_I4: four bits per
** dimension (fifteen steps; the row 16 + 16 ceil(dim / 32) bytes rounded up
** to 64), about half the bytes a walk reads, at a coarser distance: for
** long vectors, where a search waits on reading rows. Fixed when the file is
** created. */
typedef enum {
    KEEL_CODES_NONE = 0,
    KEEL_CODES_I8 = 1,
    KEEL_CODES_I4 = 2
} keel_codes;

/* keel_options.flags */
#define KEEL_WARM       1u /* read the index into memory in the background */
#define KEEL_HUGE_PAGES 2u /* huge pages for committed vectors and code rows */
#define KEEL_FILE_OPTIONS 4u /* keel_open of an existing file keeps the file's
                               metric, precision and M: the options' values
                               for them apply only when it creates the file */

/* Options for keel_open and keel_open_reader. NULL or all zero = defaults.
** metric, precision and max_connections are fixed when the file is created.
** keel_open with options (opt not NULL) checks them against an existing
** file: other values get KEEL_EOPTIONS, except max_connections 0 and the
** KEEL_FILE_OPTIONS flag, which take the file's own. With opt NULL the file's
** own are used. ef_construction, ef_search, threads and flags belong to the
** handle, not the file. */
typedef struct keel_options {
    keel_metric metric;       /* default KEEL_L2 */
    keel_precision precision; /* default KEEL_F32 */
    uint32_t max_connections; /* M; 0 = 16; 2..32767 */
    uint32_t ef_construction; /* 0 = 200 */
    uint32_t ef_search;       /* 0 = 64 */
    uint32_t threads;         /* batch builds; 0 = every core */
    unsigned flags;           /* KEEL_WARM | KEEL_HUGE_PAGES */
    /* A reader of a published index (keel_open_reader of "s3://..."): */
    const char *cache_dir;    /* disk cache directory, shared safely by any
                                 number of processes of one user; NULL = the
                                 environment's KEEL_CACHE_DIR, and with
                                 neither set, no disk cache. Made mode 0700
                                 if missing, its files 0600; one another
                                 user owns or may write is KEEL_EINVAL */
    uint64_t cache_bytes;     /* its size limit (oldest pages go first);
                                 0 = KEEL_CACHE_BYTES, else 10 GiB */
    uint64_t memory_cache_bytes; /* memory for the index's pages; colder
                                 pages are dropped past it and fetched again
                                 when needed; 0 = KEEL_MEMORY_CACHE_BYTES,
                                 else 1 GiB; at least 8 MiB */
    keel_codes codes;         /* a new file: KEEL_CODES_I8 walks searches on
                                 int8 codes (faster at equal recall, for a
                                 row of 16 + dim bytes rounded up to 64 per
                                 vector: 128 at 100 dimensions, 832 at 784),
                                 KEEL_CODES_I4 on 4-bit codes (448 bytes at
                                 784); fixed at creation like precision */
} keel_options;

/* One search result. distance is the true distance: Euclidean (not squared)
** for KEEL_L2, 1 - cos for KEEL_COSINE, 1 - dot for KEEL_IP. */
typedef struct {
    uint64_t id;
    float distance;
} keel_result;

/* A prepared allow-list: a set of ids (or an interval of them) made once
** and given to any number of searches, on any index and from any thread,
** without the per-call cost of reading an id array. Immutable once made;
** free it only after the searches that use it have returned. */
typedef struct keel_filter keel_filter;

/* Per-call search parameters. NULL or all zero = defaults. Give at most one
** of: an allow-list (ids; ids not in the index are ignored; n_allowed 0 with
** a non-NULL pointer matches nothing), a prepared allow-list (allowed_filter),
** per-query prepared allow-lists (query_filters, keel_search_batch only), and
** a filter callback (returns nonzero to accept an id; called from the
** searching thread, possibly many times per id). */
typedef struct keel_search_params {
    uint32_t ef; /* 0 = the handle's ef_search */
    const uint64_t *allowed;
    size_t n_allowed;
    int (*filter)(uint64_t id, void *arg);
    void *filter_arg;
    const keel_filter *allowed_filter;
    /* keel_search_batch: nq entries, query i searches only query_filters[i]
     * (a NULL entry: every id). Results equal keel_search of each query with
     * allowed_filter = query_filters[i], bit for bit. */
    const keel_filter *const *query_filters;
} keel_search_params;

/* Makes a prepared allow-list of n ids (ids may repeat; UINT64_MAX and ids
** not in an index are ignored; n 0 matches nothing). Costs about what one
** search with the same ids in keel_search_params.allowed spends reading
** them. *out is NULL on failure. */
int keel_filter_new(const uint64_t *ids, size_t n, keel_filter **out);

/* Makes a prepared allow-list of the ids first, first + step, ... below end
** (Python's range(first, end, step)): an interval, in constant memory
** however many ids it spans. first >= end matches nothing; step >= 1. */
int keel_filter_new_range(uint64_t first, uint64_t end, uint64_t step,
                          keel_filter **out);

/* How many ids the allow-list holds (distinct; a range's count). 0 for
** NULL. */
uint64_t keel_filter_count(const keel_filter *f);

/* Frees a prepared allow-list. NULL is a no-op. */
int keel_filter_free(keel_filter *f);

/* The path of an index in memory (as SQLite's ":memory:"): keel_open(
** KEEL_MEMORY, dim, opt, &idx) makes a new, empty index that lives in
** anonymous memory (a memfd) and goes away at keel_close; nothing is
** written to any directory. Every call works on it as on a file, except:
** keel_open_reader refuses it (each keel_open of it is a new, private
** index: search through the handle itself); keel_flush succeeds and
** makes nothing durable; keel_compact rewrites it into new memory. dim 0
** is refused. A file named :memory: opens as "./:memory:". */
#define KEEL_MEMORY ":memory:"

/* Opens the index at path as its writer, creating the file if it is missing.
** dim is the vectors' length, 1..4096; 0 takes it from an existing file.
** Recovers the file to its last completed flush if a writer crashed.
** An index is a regular file: a directory at path gets KEEL_EINVAL, and a
** FIFO, device or socket KEEL_ENOTINDEX, at once and without reading it
** (this holds for keel_open_reader too). */
int keel_open(const char *path, uint32_t dim, const keel_options *opt,
              keel_index **out);

/* Opens an existing index read-only. Takes no lock and never writes the file.
** The metric, precision, M and dimensions come from the file; opt supplies
** ef_search and flags (other fields are ignored).
**
** path may be the URL of a published index, "s3://BUCKET/PREFIX"
** (keel_publish; endpoint and keys from the same environment). The reader
** pins the newest version, fetches pages as searches need them (ranged
** GETs, several in flight, each page checked against the manifest's hash)
** into memory (opt->memory_cache_bytes) and a disk cache (opt->cache_dir),
** and moves to a newer version at keel_refresh, and by itself every 5 s,
** between calls. keel_search, keel_search_batch, keel_get, keel_get_batch,
** keel_ids, keel_count, keel_stat, keel_check, keel_refresh and keel_warm
** work on it; writes give KEEL_EREADONLY and keel_backup KEEL_EINVAL. A
** search waiting for the store can be cancelled (keel_set_cancel). A
** page that cannot be fetched or fails its hash makes the call KEEL_EIO;
** the next call fetches it again. At open: KEEL_ENOTFOUND for a missing
** bucket or no index published at the prefix, KEEL_EIO naming a refused
** key, an unreachable endpoint or a timeout. Linux only (a memfd image;
** a userfaultfd where the system grants one, else every read is fetched
** before it is made: it works in containers whose seccomp profile refuses
** userfaultfd, and with KEEL_USERFAULTFD=0). */
int keel_open_reader(const char *path, const keel_options *opt,
                     keel_index **out);

/* Closes the handle. Unflushed adds and deletes are lost. NULL is a no-op. */
int keel_close(keel_index *idx);

/* Adds a vector of keel_dim(idx) floats under the next automatic id: one past
** the largest id ever used in this file.
** What keel takes, in vectors and queries alike (else KEEL_EINVAL naming the
** vector, the component and its value): finite components; under KEEL_L2
** and KEEL_IP a squared length (sum of squares) of at most 1e37, a length of
** about 3.1e18, so that no distance overflows a float and none is NaN; under
** KEEL_COSINE not all zeros; in a KEEL_F16 file components of at most 65504
** in magnitude (l2 and ip). */
int keel_add(keel_index *idx, const float *vec, uint64_t *id_out);

/* Adds a vector under the caller's id (any value but UINT64_MAX). */
int keel_add_with_id(keel_index *idx, uint64_t id, const float *vec);

/* Adds n vectors (n * dim floats, back to back) in one step: all or none.
** ids may be NULL (automatic ids) or hold n distinct ids; ids_out (n entries)
** may be NULL. Linking runs on opt->threads threads (0 = every core), in
** the order given, or, for a batch of 1,024 or more whose order walks
** through space (sorted by cluster or category: neighbouring vectors much
** nearer each other than random pairs), in a shuffled order, since HNSW
** linked cluster by cluster leaves clusters hard to reach. */
int keel_add_batch(keel_index *idx, const float *vecs, size_t n,
                   const uint64_t *ids, uint64_t *ids_out);

/* Deletes the live vector with this id: hidden from searches on this handle
** at once, durable at the next flush. KEEL_ENOTFOUND if no live vector has
** it. */
int keel_delete(keel_index *idx, uint64_t id);

/* Commits every add and delete since the last flush. Durable on KEEL_OK. */
int keel_flush(keel_index *idx);

/* Flushes, then rewrites the live vectors into a new file with a new graph
** and swaps it in atomically. Readers move to the new file by themselves. */
int keel_compact(keel_index *idx);

/* Starts reading the index into memory in the background and returns at
** once. Asking again while a reading runs does nothing. Also turns on
** KEEL_WARM for the handle, so a reader warms a compacted file it moves to. */
int keel_warm(keel_index *idx);

/* Reader: take a new snapshot of the last flush now (searches do this by
** themselves). On a writer it does nothing. KEEL_EDIM or KEEL_EOPTIONS if
** the path now names another index, KEEL_EOPTIONS if it names an older state
** of this one (the reader keeps its last snapshot; the message names both
** files' epochs). */
int keel_refresh(keel_index *idx);

/* Finds the k nearest live vectors to query (keel_dim(idx) floats). out holds
** k entries; *n_out receives how many were found (fewer than k when the index
** or the filter has fewer). Results are sorted by distance, ties by id.
**
** ef (keel_search_params, or the handle's ef_search) is the HNSW candidate
** list: larger finds more of the true nearest and costs more. The walk ends
** as HNSW's does, or sooner once its nearest 2k (at least 20) matches have
** not changed over 3/8 ef (at least 12) steps from matches in a row, so an
** easy query stops early. The same query on the same file gives the same
** results, bit for bit.
**
** Cold files: the first search of a handle on a file that is not in memory
** (and large enough to gain) asks the system at each step for the pages of
** the neighbours it is about to measure, all together, instead of waiting
** for one page fault after another (doc/batch_reads.md). KEEL_BATCH_READS=0
** in the environment turns this off for the process, =1 on (the default);
** the results are the same either way. A read the system reports failed
** makes the search fail with KEEL_EIO; the next search tries again. */
int keel_search(keel_index *idx, const float *query, size_t k,
                const keel_search_params *p, keel_result *out, size_t *n_out);

/* Searches nq queries (nq * dim floats). Row i of out (k entries) holds the
** results of query i; n_out[i] how many of them are valid. A large batch
** without a filter callback runs on the handle's threads (keel_options
** threads; 0 = every core); with a callback it runs on the calling thread. */
int keel_search_batch(keel_index *idx, const float *queries, size_t nq,
                      size_t k, const keel_search_params *p, keel_result *out,
                      size_t *n_out);

/* Finds the live vectors within distance radius of query (the distance
** keel_result reports: Euclidean for KEEL_L2, 1 - cos, 1 - dot), nearest
** first, ties by id; at most max_results of them (the nearest), in out
** (max_results entries), with their number in *n_out. *n_out ==
** max_results means there may be more. p as for keel_search (ef, one
** allow-list or callback; not query_filters).
** Approximate like keel_search: the walk explores like a k-NN search with
** ef at least max_results and goes on while it meets vectors within the
** radius, so it finds most of them (recall against an exact scan is
** measured in test_radius.c); with an allow-list of few ids it scans them
** exactly. radius is finite; under KEEL_L2 and KEEL_COSINE it is >= 0
** (0 finds exact copies; under cosine rounding puts copies about 1e-7
** apart, and up to about 1e-3 in a KEEL_F16 file, whose unit vectors are
** rounded to half precision); under KEEL_IP distances, and so radius, may
** be negative.
** max_results 1..1,000,000; the walk's cost grows with it like k's. */
int keel_search_radius(keel_index *idx, const float *query, float radius,
                       size_t max_results, const keel_search_params *p,
                       keel_result *out, size_t *n_out);

/* Copies the stored vector of a live id into vec_out (dim floats). Cosine
** indexes store vectors normalized; f16 indexes return the rounded values. */
int keel_get(keel_index *idx, uint64_t id, float *vec_out);

/* Live vectors (reader: at its last snapshot). 0 for NULL. */
uint64_t keel_count(keel_index *idx);

/* The vectors' dimensions. 0 for NULL. */
uint32_t keel_dim(keel_index *idx);

/* Progress of long calls (keel_add_batch linking, keel_compact): called from
** one thread of the call, at most about ten times a second, with how many
** vectors are done of how many. NULL turns it off. Belongs to the handle. */
typedef void (*keel_progress_fn)(uint64_t done, uint64_t total, void *arg);
int keel_set_progress(keel_index *idx, keel_progress_fn fn, void *arg);

/* Cancelling long calls (keel_add_batch linking, keel_compact): while one
** works, fn is called from the thread that made the call, about twenty times
** a second. A nonzero return stops the call, which then fails with
** KEEL_ECANCELED and changes nothing: keel_add_batch adds none of its
** vectors, keel_compact leaves the index and its file as they were.
** keel_search and keel_search_batch on a reader of a published index
** ("s3://...") ask fn too: never in their first 0.05 s (a search that
** ends sooner never calls it), then about twenty times a second, between
** expansions and queries and while they wait for the object store; a
** nonzero return abandons the GETs in flight and the search returns
** KEEL_ECANCELED within about 0.05 s plus one GET (a page fault being
** served finishes first). The reader is unchanged (pages fetched whole
** stay cached; nothing partial is kept) and the next search works as
** before. Searches of a file never call fn. keel_publish asks fn the
** same way, between pages and while its requests wait; a nonzero return
** publishes nothing (packs already sent are left
** for keel_prune, as an interrupted publish's are). The version walk of a
** URL reader's refresh asks it too, between its requests and while each
** waits (a refresh the store does not answer ends within about a second
** of fn saying stop). Once fn has returned nonzero
** the call fails with KEEL_ECANCELED, whatever else happened. fn must not
** call keel on the handle. NULL turns it off. Belongs to the handle. Both
** setters wait for a write or a search in progress on the handle. */
typedef int (*keel_cancel_fn)(void *arg);
int keel_set_cancel(keel_index *idx, keel_cancel_fn fn, void *arg);

/* Writer: the adds and deletes since the last flush (what keel_close would
** drop) into *adds and *deletes (either may be NULL). A reader has none. */
int keel_pending(keel_index *idx, uint64_t *adds, uint64_t *deletes);

/* Facts about an index, for tools. */
typedef struct keel_stats {
    uint32_t dim;
    keel_metric metric;
    keel_precision precision;
    uint32_t max_connections;  /* M (layer 0 holds 2M) */
    uint64_t count;            /* live vectors */
    uint64_t deleted;          /* deleted vectors still in the file */
    uint64_t slots;            /* committed slots (live + deleted) */
    uint64_t next_id;          /* the next automatic id */
    uint32_t max_level;        /* top layer of the graph */
    uint32_t segments;         /* committed slot segments */
    uint32_t heap_chunks;      /* committed upper-layer heap chunks */
    uint64_t file_bytes;       /* length of the file */
    uint64_t allocated_bytes;  /* bytes the file system holds for it */
    uint64_t snapshot;         /* sequence number of the commit in use */
    int is_reader;             /* 1 for a reader handle */
    keel_codes codes;          /* the file's traversal codes */
} keel_stats;

int keel_stat(keel_index *idx, keel_stats *out);

/* Verifies every structure of the index's last commit: headers, regions,
** slot headers, ids, delete marks, neighbour lists, the id table. Returns
** KEEL_OK or KEEL_ECORRUPT with the first problem in keel_errmsg(). */
int keel_check(keel_index *idx);

/* Publishing to S3-compatible object storage (doc/objstore.md). The endpoint
** and keys come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
** AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION (default
** us-east-1); buckets are addressed path-style. A request fails with
** KEEL_EIO ("timed out") when connecting takes longer than
** KEEL_S3_CONNECT_TIMEOUT_MS milliseconds (default 5000), when no byte
** moves for KEEL_S3_STALL_TIMEOUT_S seconds (default 10), or past its
** deadline: those two plus its bytes at KEEL_S3_MIN_RATE bytes/s (default
** 32768), however slowly they come; each a whole number from 1 to
** 86400000, read when a client is made (every publish, every reader opened
** by URL). */
typedef struct keel_publish_options {
    uint32_t pack_bytes;   /* most bytes per uploaded object; 0 = 8 MiB */
    uint64_t *uploaded;    /* if not NULL, receives the bytes this publish
                              sent (changed pages and the manifest) */
    uint32_t parallel;     /* packs uploaded at once; 0 = 4, 1 = one at a
                              time (memory: parallel x pack_bytes) */
    int replace;           /* nonzero: the index may differ from the one
                              published there (identity, dimensions,
                              metric, precision, codes); else that is
                              KEEL_EOPTIONS (KEEL_EDIM for dimensions).
                              Readers of the old index keep their version
                              and keel_refresh reports the replacement. */
    uint64_t *version;     /* if not NULL, receives the version that holds
                              the flush: the new one, or, unchanged, the
                              newest one already there */
    int *unchanged;        /* if not NULL, receives 1 when the newest
                              version held this flush already (nothing was
                              published, no version made), else 0 */
} keel_publish_options;

/* Publishes the writer's last flush to url, "s3://BUCKET/PREFIX", as the
** next version: the pages that changed since the version before go up as
** new immutable objects, then a manifest naming every page is created only
** if its version number is still free, which is the commit point. A
** publisher that loses that race to another gets KEEL_ELOCKED and leaves
** nothing a reader would adopt. The newest version is found from the
** `latest` hint, or the listing of PREFIX/manifest/ when the hint is
** missing or wrong; a prefix whose versions cannot be listed is refused
** (KEEL_EIO), never guessed at. opt may be NULL. On a writer's handle the
** handle's adds and flushes wait while it runs. A reader's handle of a
** local file (keel_open_reader) publishes the file's last flush while
** another process goes on writing it, from a snapshot as keel_backup makes
** one: the committed neighbour lists come from the writer's undo log, and
** a flush meanwhile starts the publish over at the new flush
** (KEEL_ELOCKED after 16 flushes in a row, or when the writer's adds keep
** changing the pages being published for 32 rounds). A flush the newest
** version holds already, page for page (a publish with no flush since the
** last one), makes no version and sends nothing (at most a `latest` hint
** that was missing or wrong): KEEL_OK with *opt->unchanged 1 and
** *opt->version that version. The flush is still read and hashed to tell.
** A URL reader's
** handle is KEEL_EINVAL. The handle's cancel callback (keel_set_cancel)
** can stop it between requests (KEEL_ECANCELED). */
int keel_publish(keel_index *idx, const char *url,
                 const keel_publish_options *opt);

typedef struct keel_prune_options {
    uint32_t orphan_grace_s; /* packs no manifest names are removed once
                                older than the newest manifest by this many
                                seconds; 0 = 3600; UINT32_MAX = never */
    uint64_t *removed;       /* if not NULL, receives the objects removed */
} keel_prune_options;

/* Removes the versions of the index published at url but the newest keep
** (keep >= 1), then every pack that only removed versions name, and packs
** of interrupted publishes older than the newest version by the grace
** (doc/objstore.md, section 6, has the rules that make this safe against a
** publisher running at the same time). A reader pinned on a removed version
** fails at its next fetch of a page it has not cached; readers of kept
** versions are untouched. opt may be NULL. KEEL_EINVAL for keep 0,
** KEEL_ENOTFOUND when nothing is published at url. */
int keel_prune(const char *url, uint32_t keep, const keel_prune_options *opt);

/* One version of an index published at a URL (keel_list_versions). */
typedef struct keel_version {
    uint64_t version;        /* its number: PREFIX/manifest/<version> */
    uint64_t manifest_bytes; /* size of its manifest object */
    int64_t modified_ms;     /* the manifest's LastModified as the store
                                lists it, in ms since 1970 (UTC); -1 if the
                                store gave none it could read */
    int newest;              /* 1 for the largest: what readers open */
    int hinted;              /* 1 for the one PREFIX/latest names (none
                                when the hint is missing or names a version
                                not listed) */
} keel_version;

/* Receives one version; a nonzero return stops the listing, and
** keel_list_versions returns it. */
typedef int (*keel_version_fn)(const keel_version *v, void *arg);

/* Lists the versions published at url, "s3://BUCKET/PREFIX", oldest first,
** calling fn once for each: one listing of PREFIX/manifest/ (keys there
** that name no version are left out) and one GET of the `latest` hint; no
** manifest is read. fn is called only once the whole listing was read.
** KEEL_ENOTFOUND when nothing is published at url (or the bucket is
** missing), KEEL_EINVAL for a URL that is not s3://BUCKET/PREFIX, KEEL_EIO
** for a listing the store does not end (a continuation token repeated,
** keys out of order or outside the prefix, more than 10,000 answers or
** 1,000,000 keys). */
int keel_list_versions(const char *url, keel_version_fn fn, void *arg);

/* The version a reader of a published index (keel_open_reader of an s3://
** URL) serves now: the newest when it opened, then the newer ones it moved
** to (every 5 s while it is used, or at keel_refresh). It asks nothing of
** the store. KEEL_EINVAL for a handle of a local file. */
int keel_published_version(keel_index *idx, uint64_t *version);

/* Many at once. */

/* Copies the stored vectors of n ids into out (n * dim floats, row i for
** ids[i]; an id may repeat). With found NULL it is all or nothing: if any id
** has no live vector, KEEL_ENOTFOUND names the first such id and its
** position, and out is unchanged. With found (n bytes) every id is looked
** up: found[i] = 1 and row i holds the vector, or found[i] = 0 and row i is
** NaN, and the call returns KEEL_OK even if none was found. All ids are read
** from one view: a reader's one snapshot, a writer's own state at the call.
** Vectors are stored as keel_get describes. */
int keel_get_batch(keel_index *idx, const uint64_t *ids, size_t n,
                   float *out, unsigned char *found);

/* Deletes the live vectors of n distinct ids, all or none: if an id repeats
** (KEEL_EINVAL) or has no live vector (KEEL_ENOTFOUND), the message names it
** and its position, and nothing is deleted. Like keel_delete, hidden at
** once and durable at the next flush. n 0 does nothing. */
int keel_delete_batch(keel_index *idx, const uint64_t *ids, size_t n);

/* Listing the live ids, in increasing order, a page at a time: out (cap
** entries) receives up to cap live ids greater than after, smallest first,
** and *n_out how many. after = KEEL_IDS_FIRST starts at the smallest id
** (UINT64_MAX is never an id). The listing is complete when *n_out < cap;
** otherwise call again with after = the last id returned:
**
**     uint64_t after = KEEL_IDS_FIRST, buf[4096];
**     size_t n;
**     do {
**         if (keel_ids(idx, after, buf, 4096, &n)) break;   (error)
**         ... use buf[0..n) ...
**         if (n) after = buf[n - 1];
**     } while (n == 4096);
**
** Each page is one consistent view: on a reader, a fresh snapshot of the
** last flush; on a writer, its own state (unflushed adds and deletes
** included). Between pages a writer may go on: ids it adds past `after`
** appear in later pages, ids it deletes before their page never appear, and
** a page never repeats or reorders ids. Each call reads every slot's id
** (O(count)): ask for large pages (cap >= keel_count lists all at once). */
#define KEEL_IDS_FIRST UINT64_MAX
int keel_ids(keel_index *idx, uint64_t after, uint64_t *out, size_t cap,
             size_t *n_out);

/* Backup: writes a copy of the index's last flush to path, a file that
** opens as an index of its own and holds exactly that flush's ids, vectors
** and graph (searches on it return what searches on that flush return, bit
** for bit). A writer goes on adding and deleting while the copy is made;
** its flushes (and keel_compact) wait until the copy is done. On a reader
** the copy is of a snapshot; a flush of the writer during the copy makes it
** start again from the new flush (KEEL_ELOCKED after 16 such rounds).
** Only written regions are copied: holes stay holes. The copy is written to
** a temporary file beside path (path.keel-tmp-PID-N), synced, renamed over
** path, and the directory synced: path holds either its old content or the
** whole copy, never part of it, even after a crash or power loss (a killed
** backup may leave its temporary file). path must not name the index
** itself; an existing file at path is replaced. */
int keel_backup(keel_index *idx, const char *path);

/* This thread's last failure: what, then "help: ...". "" if none. */
const char *keel_errmsg(void);

/* A short, static description of a return code. */
const char *keel_strerror(int rc);

/* The library's version, to compare with KEEL_VERSION_NUMBER. */
int keel_libversion_number(void);

#ifdef __cplusplus
}
#endif

#endif /* KEEL_H */
