/* cache.h -- a published index (doc/objstore.md) as a file image in memory:
** the page cache under a reader opened by URL.
**
** The store of a reader opened with "s3://BUCKET/PREFIX" maps a memfd as
** long as the published image instead of a local file, so the store and
** the graph read it exactly as they read a file. The memfd starts as holes
** and gets the image's 64 KiB pages (granules) two ways:
**
**   announced  a search says which granules it is about to read
**              (store/pagein.c calls keel__cache_bring at each expansion);
**              the missing ones come from the disk cache, else from ranged
**              GETs of their packs with the batch-read policy (io/), are
**              checked against the manifest's hashes and written into the
**              memfd before the search touches them. A failure is KEEL_EIO
**              for that search and installs nothing.
**   faulted    (only where the system grants a userfaultfd, and not with
**              KEEL_USERFAULTFD=0) anything else (a granule nobody
**              announced, or one evicted since) faults: the memfd's
**              mappings are registered with a
**              userfaultfd (missing pages, user-mode faults only), and a
**              thread per cache fetches the granule the same way, writes it
**              and wakes the faulting thread. A fetch that fails there
**              cannot fail the load that faulted: the thread writes zeros
**              so the load completes, marks the granule poisoned and bumps
**              the cache's generation; every call that read through the
**              cache compares the generation at its start and end
**              (keel__cache_begin/end) and returns KEEL_EIO instead of a
**              result when it moved; the next call punches the poisoned
**              granules out first, so they are fetched again.
**
** Without a userfaultfd (a container's seccomp profile refuses it with
** EPERM, gVisor and hardened kernels have none, or KEEL_USERFAULTFD=0)
** nothing faults: a hole reads as zeros. Every read of the image then goes
** through the announced path or reads a granule that is pinned or already
** brought in by the same call (invariant 7), and granules are punched only
** while no call reads through the cache (invariant 8). KEEL_CACHE_POISON=1
** checks it: each call that ends finds, under mu, any granule not brought
** in whose memfd pages hold data (a read through a mapping of a hole fills
** it; a prefetch does not), fails with KEEL_EIO naming it, and punches it
** out again. It turns the userfaultfd off.
**
** Invariants:
**   (1) Every byte a reader sees in the memfd is the pinned version's byte
**       at that offset, or a zero of a poisoned granule seen only by calls
**       that then fail with KEEL_EIO.
**   (2) Granules 0-2 (header copies, live page) are installed before the
**       store reads the memfd (a pread of a hole gives zeros without a
**       fault), and are never evicted: the store's own reads of the
**       descriptor see only installed bytes. Nothing else reads the memfd
**       through its descriptor (backup and publish refuse a URL) but the
**       disk writer, which checks what it reads (invariant 6).
**   (3) The pinned manifest changes only in keel__cache_switch, which the
**       caller runs with no search, get or warm running on the store (the
**       handle's swap lock held exclusively): one call reads one version.
**   (4) A granule is evicted (punched) only when installed and not pinned;
**       a load that meets the hole faults and fetches it again.
**   (5) A child made by fork() gets none of the mappings (MADV_DONTFORK)
**       and never touches the thread: keel__cache_close there only frees.
**   (6) A page the announced path fetched reaches the disk cache from the
**       cache's writer thread, which reads it back from the memfd after it
**       was installed and writes it only if it still hashes to the
**       manifest's value (a page punched or replaced meanwhile reads as
**       other bytes and is skipped): searches and warm never wait for the
**       file system, and no copy of a page waits in memory. The writer
**       waits while GETs of pages are on the wire (up to 2 s at a time):
**       it competes with them for the machine. Close writes every waiting
**       page first, without waiting.
**   (7) Without a userfaultfd, a call reads a granule outside 0-2 only
**       after keel__cache_bring (or keel__cache_has) said it is in, within
**       the same keel__cache_begin/end: search, get, radius, filters,
**       check and warm's own reads all announce theirs (store/pagein.c,
**       hnsw/search.c, api/).
**   (8) Without a userfaultfd, installs never evict: eviction runs with
**       the gate held exclusively, so a granule in at any point of a call
**       stays in until it ends. keel__cache_end takes it (never waiting)
**       when the last running call ends over the bound; a call that
**       begins over the bound waits for it instead (one such call takes
**       the gate, the others wait for its eviction, and no new call
**       begins meanwhile): calls that overlap without end (threads
**       searching one after another) cannot put eviction off for ever.
**       Memory exceeds the bound by at most what running calls brought
**       in; a call that begins over the bound first waits for the calls
**       running then to end, for at most 0.5 s (EVICT_WAIT_MS), and less
**       if its cancel says stop meanwhile (a search: keel__cache_begin):
**       past that it goes on over the bound, and the last call to end
**       evicts. (A call made inside another on the
**       same thread never waits: it would wait for itself.)
*/
#ifndef KEEL_CACHE_H
#define KEEL_CACHE_H

#include "base/internal.h"
#include "cache/disk.h"
#include "cache/manifest.h"
#include "io/batch_reads.h"
#include "s3/s3.h"

#include <pthread.h>
#include <stdint.h>

#define KEEL_CACHE_GRANULE_LOG2 16u
#define KEEL_CACHE_GRANULE ((uint64_t)1 << KEEL_CACHE_GRANULE_LOG2)
#define KEEL_CACHE_PINNED 3u      /* granules 0-2: headers and live page */
/* Defaults: memory for the image 1 GiB, disk cache 10 GiB (when a directory
** is given), a reader looks for a newer version every 5 s. */
#define KEEL_CACHE_MEMORY_DFLT ((uint64_t)1 << 30)
#define KEEL_CACHE_DISK_DFLT ((uint64_t)10 << 30)
#define KEEL_CACHE_POLL_MS 5000u
/* The least memory a cache keeps, in granules: one expansion of a search
** announces up to 2 x 32 neighbours' vectors and records, and a bound below
** twice that would evict a batch's own granules before the search reads
** them (measured: a 19-granule bound under a 150-granule index cost 1,500
** GETs per search, against 60-130 GETs with this floor). 8 MiB. */
#define KEEL_CACHE_MIN_GRANULES (128u + KEEL_CACHE_PINNED)

/* Granule state bits. */
#define KEEL_G_IN     1u   /* installed in the memfd */
#define KEEL_G_REF    2u   /* used since the clock hand last passed */
#define KEEL_G_POISON 4u   /* zeros a failed fault wrote */
#define KEEL_G_FETCH  8u   /* claimed: a search's announced fetch of it is
                              in flight (cache.c invariant 3) */

typedef struct keel_cache_config {
    const char *url;           /* s3://BUCKET/PREFIX */
    const char *cache_dir;     /* NULL or "": no disk cache */
    uint64_t cache_bytes;      /* disk limit; 0: KEEL_CACHE_DISK_DFLT */
    uint64_t memory_bytes;     /* memory limit; 0: KEEL_CACHE_MEMORY_DFLT */
} keel_cache_config;

/* What a cache did (tests, and the numbers of doc/objstore.md). */
typedef struct keel_cache_counters {
    uint64_t gets;             /* ranged GETs of pack bytes */
    uint64_t get_bytes;
    uint64_t warm_gets;        /* the part of gets and get_bytes that warm */
    uint64_t warm_bytes;       /* asked for (keel__cache_bring_addr) */
    uint64_t meta_gets;        /* requests for manifests and the hint */
    uint64_t rounds;           /* fetches that sent GETs, warm's left out:
                                  a search's round trips, one after another */
    uint64_t disk_hits;        /* pages read from the disk cache */
    uint64_t faults;           /* granules the fault thread installed */
    uint64_t evictions;        /* granules punched out of memory */
    uint64_t resident;         /* granules in memory now */
    uint64_t missing;          /* granules with data not in memory now */
    uint64_t failures;         /* fetches that failed */
    uint64_t seq;              /* the pinned version */
} keel_cache_counters;

/* A fetched page waiting for the disk writer (invariant 6). */
typedef struct keel_cache_wq {
    struct keel_cache_wq *next;
    uint64_t g, hash_hi, hash_lo;
    const uint8_t *buf;        /* the fetcher's copy: valid only during
                                  keel__cache_write_later */
} keel_cache_wq;

/* Most pages waiting for the disk writer (32 MiB of entries); past that,
** the fetching thread writes its pages itself. */
#define KEEL_CACHE_WQ_MAX ((size_t)1 << 20)

typedef struct keel_cache_region {
    uintptr_t addr;
    size_t len;
    uint64_t off;
} keel_cache_region;

typedef struct keel_cache {
    char url[1200], bucket[64], prefix[1024];
    keel_manifest man;         /* the pinned version (invariant 3) */
    int memfd;
    uint64_t size;             /* the memfd's length */
    uint8_t *state;            /* per granule, atomic; ngran entries */
    uint64_t ngran;
    uint64_t mem_limit;        /* granules */
    uint64_t resident;         /* atomic */
    uint64_t missing;          /* atomic, changed under mu: granules of
                                  pages with data (not zero pages) that are
                                  not in (keel__cache_complete) */
    uint64_t hand;             /* clock hand, under mu */
    pthread_mutex_t mu;        /* regions, eviction, poison, pool, message */
    pthread_cond_t fetched;    /* with mu: broadcast when claims end */
    keel_cache_region *regions;
    size_t nregions, regions_cap;
    uint64_t *poison;          /* poisoned granules, under mu */
    size_t npoison, poison_cap;
    uint64_t gen;              /* atomic: bumped by every poisoning and heal */
    char fail_msg[1024];       /* the last failure, under mu */
    keel_disk *disk;
    keel_s3 **idle;            /* clients not in use, under mu */
    size_t nidle, idle_cap;
    keel_s3 *fault_s3;         /* the fault thread's own client */
    int uffd;                  /* -1: no userfaultfd (invariants 7, 8) */
    int check_holes;           /* KEEL_CACHE_POISON=1 */
    char no_uffd[256];         /* why there is none ("" while there is) */
    pthread_rwlock_t gate;     /* without one: calls shared, eviction
                                  exclusive (invariant 8) */
    int draining;              /* under mu: a call over the bound waits
                                  for the gate to evict (invariant 8) */
    pthread_cond_t drained;    /* with mu: broadcast when it has */
    pthread_t thread;
    int thread_started;
    int stop;                  /* atomic */
    pid_t owner;
    pthread_mutex_t wq_lock;   /* the disk writer's queue and state */
    pthread_cond_t wq_cond;
    keel_cache_wq *wq_head, *wq_tail;
    size_t wq_n;
    int wq_stop, wq_started, wq_failed;
    pthread_t wq_thread;
    double polled_at;          /* seconds (monotonic), last look for newer */
    char latest_etag[KEEL_S3_ETAG_MAX]; /* of the hint at the last look, */
    uint64_t latest_hint;      /* and what it said (both under mu) */
    keel_cache_counters n;     /* atomic fields */
} keel_cache;

/* Opens url's newest version (cache.c). Errors name the URL: no version
** published, the server's refusals (s3.h) with the bucket or key. */
int keel__cache_open(const keel_cache_config *cfg, keel_cache **out);
void keel__cache_close(keel_cache *c);
/* The parts of open (tests build a cache of a manifest of their own):
** alloc, then fill url, bucket, prefix and man, then start (memfd, the
** pinned pages, the userfaultfd and its thread); close either way. */
keel_cache *keel__cache_alloc(void);
int keel__cache_start(keel_cache *c, uint64_t memory_bytes);

/* A new mapping of the memfd at addr (len bytes, file offset off): faults
** in it are the cache's from now on. */
int keel__cache_register(keel_cache *c, void *addr, size_t len, uint64_t off);
/* Forgets the mappings in [addr, addr + len) (a store closed while the
** cache lives on: keel__store_reopen_remote). */
void keel__cache_unregister(keel_cache *c, void *addr, size_t len);

/* The announced path: brings the granules of r[0..n) in (r[i].off and
** len: file offsets) with the batch-read policy. KEEL_OK, KEEL_EIO with
** the fetch's message, KEEL_ENOMEM, or KEEL_ECANCELED when stop (the
** search's, or NULL) said stop while it waited for GETs: those GETs are
** abandoned and none of the batch's granules is installed (those of
** earlier batches stay: they were whole and checked). */
int keel__cache_bring(keel_cache *c, const keel_br_range *r, size_t n,
                      keel_br_scratch *s, keel_stop *stop);

/* The same for r[i].len bytes at r[i].addr in mappings of the memfd
** (r[i].off unused), all in one batch: warm. Its GETs count in warm_gets
** and warm_bytes too. Addresses in no mapping are skipped. stop (may be
** NULL) abandons the batch's GETs: KEEL_ECANCELED. */
int keel__cache_bring_addr(keel_cache *c, const keel_br_range *r, size_t n,
                           keel_br_scratch *s, keel_stop *stop);

/* A call that reads through the cache: begin heals poisoned granules and
** returns the generation; end returns rc, or KEEL_EIO with the failure's
** message if a fault failed meanwhile. stop (NULL: none; a search's) is
** polled while begin waits for eviction (invariant 8): once it says stop,
** begin waits no more and the call goes on, to end at its own next poll.
** */
uint64_t keel__cache_begin(keel_cache *c, keel_stop *stop);
int keel__cache_end(keel_cache *c, uint64_t gen, int rc);

/* Looks for a version newer than the pinned one (always with force, else
** at most every KEEL_CACHE_POLL_MS): *next gets it (free with
** keel__manifest_free; seq 0: none newer). The network part: no lock
** needed. */
int keel__cache_poll(keel_cache *c, int force, keel_stop *stop,
                     keel_manifest *next);
/* Whether the reader takes version m, whose n pinned granules (header and
** live pages) are in pinned: KEEL_OK, or the error that refuses it. */
typedef int (*keel_cache_accept)(const keel_manifest *m, const uint8_t *pinned,
                                 size_t n, void *arg);
/* The network part of a switch to version next, run before the caller
** holds off readers (a store that does not answer then holds up no
** search): fetches next's header and live pages into pinned
** (KEEL_CACHE_PINNED granules of the caller's), *n of them. stop (NULL:
** none; a refresh's cancel) abandons the GETs: KEEL_ECANCELED. */
int keel__cache_fetch_next(keel_cache *c, const keel_manifest *next,
                           keel_stop *stop, uint8_t *pinned, size_t *n);
/* Pins next (taken over) with the n pages keel__cache_fetch_next brought:
** punches the granules whose hash changed and installs the new header and
** live pages, once ok (NULL: any) accepted them; a refused version changes
** nothing. Invariant 3: the caller holds off every reader of the store. */
int keel__cache_switch(keel_cache *c, keel_manifest *next,
                       const uint8_t *pinned, size_t n, keel_cache_accept ok,
                       void *arg);

void keel__cache_counters(keel_cache *c, keel_cache_counters *out);

/* Whether every page of the pinned version that holds data is in memory
** now (warm finished, nothing evicted since): searches then have nothing
** to announce (store/pagein.c), and a granule evicted later faults in as
** any unannounced read does. */
static inline int
keel__cache_complete(const keel_cache *c)
{
    return KEEL_LOAD_RELAXED(&c->missing) == 0;
}

/* Whether granules [off/G, (off+len-1)/G] are all installed (a lock-free
** read of their states): a call that finds them in reads them without
** announcing them (invariant 7), and marks them used. */
static inline int
keel__cache_has(keel_cache *c, uint64_t off, uint64_t len)
{
    uint64_t g = off >> KEEL_CACHE_GRANULE_LOG2;
    uint64_t last = (off + len - 1) >> KEEL_CACHE_GRANULE_LOG2;
    if (KEEL_UNLIKELY(last >= c->ngran))
        return 0;
    for (; g <= last; g++) {
        uint8_t st = KEEL_LOAD_ACQUIRE(&c->state[g]);
        if (!(st & KEEL_G_IN))
            return 0;
        if (!(st & KEEL_G_REF))
            __atomic_fetch_or(&c->state[g], KEEL_G_REF, __ATOMIC_RELAXED);
    }
    return 1;
}

/* Whether the cache serves unannounced reads by faults (a userfaultfd). */
static inline int
keel__cache_faults(const keel_cache *c)
{
    return c->uffd >= 0;
}

/* Most GETs in flight at once in this process since the last reset
** (counted by remote.c around every batch of ranged GETs). */
uint64_t keel__cache_inflight_max(void);
/* GETs of pages on the wire now, process-wide. */
uint64_t keel__cache_inflight_now(void);
void keel__cache_inflight_reset(void);

/* One granule as the fetcher sees it: its manifest entry and pack, copied
** by the caller from the version it reads (keel__cache_fetch: under mu). */
typedef struct keel_fetch_page {
    uint64_t g;
    keel_man_page pg;
    keel_man_pack pk;
    int zero;                  /* a zero page (or past the version's end) */
} keel_fetch_page;

/* Where the fetcher gets pages and counts what it did. */
typedef struct keel_fetcher {
    const char *url, *bucket, *prefix;
    keel_disk *disk;           /* NULL: none */
    keel_cache_counters *n;    /* atomic adds */
    int warm;                  /* count the GETs in warm_gets too */
} keel_fetcher;

/* remote.c: fetches pages p[0..n) into bufs (n x KEEL_CACHE_GRANULE bytes)
** from the disk cache or with ranged GETs (up to inflight at once) through
** client s3; checks each against its hash. KEEL_ECANCELED when stop (NULL:
** none) said stop during the GETs: bufs then hold nothing usable, and
** nothing reached the disk cache. Fetched pages go to the disk cache at
** once, or with later (room for n entries) are listed there (*nlater of
** them) for keel__cache_write_later once they are installed. Touches no
** state of a cache: the fetcher sits below cache.c. */
int keel__remote_fetch(const keel_fetcher *f, keel_s3 *s3,
                       const keel_fetch_page *p, size_t n, uint8_t *bufs,
                       uint32_t inflight, keel_stop *stop,
                       keel_cache_wq *later, size_t *nlater);
/* cache.c: the same for granules g[0..n) of version m (the pinned one, or
** the next a switch fetches the header pages of), their entries copied
** under mu; warm: count the GETs as warm's. */
int keel__cache_fetch(keel_cache *c, const keel_manifest *m, keel_s3 *s3,
                      const uint64_t *g, size_t n, uint8_t *bufs,
                      uint32_t inflight, keel_stop *stop, int warm,
                      keel_cache_wq *later, size_t *nlater);
/* Hands installed pages to the disk writer (invariant 6); when its queue
** is full (or it cannot start), writes them from w[i].buf itself. */
void keel__cache_write_later(keel_cache *c, const keel_cache_wq *w, size_t n);
/* The newest version at the URL no older than `after` (0: any), decoded
** into *m; seq 0 if none is newer. Requests go through s3; bounded
** (remote.c invariant 4); stop (NULL: none) cancels between requests and
** during each one (remote.c invariant 5). */
int keel__remote_newest(keel_cache *c, keel_s3 *s3, uint64_t after,
                        keel_stop *stop, keel_manifest *m);
/* Versions without a cache (the publisher, prune, the reader): the most
** HEADs a walk takes before it asks the listing. */
#define KEEL_VERSION_WALK 8
/* The newest version the listing of PREFIX/manifest/ names (0: none). */
int keel__versions_list(keel_s3 *s3, const char *bucket, const char *prefix,
                        uint64_t *newest);
/* The newest version from `from` (one known to exist, or 0) on: at most
** KEEL_VERSION_WALK HEADs, then the listing; *requests counts them. */
int keel__versions_walk(keel_s3 *s3, const char *bucket, const char *prefix,
                        uint64_t from, keel_stop *stop, uint64_t *newest,
                        uint64_t *requests);
/* A client from the cache's pool, and back. */
keel_s3 *keel__remote_client(keel_cache *c);
void keel__remote_release(keel_cache *c, keel_s3 *s3);
/* Writes granule g's bytes into the memfd and marks it installed. */
int keel__cache_install(keel_cache *c, uint64_t g, const uint8_t *buf);

#endif /* KEEL_CACHE_H */
