/* batch_reads.h -- bringing in the byte ranges a search is about to read,
** a batch at a time, with their reads overlapped.
**
** The search says "these ranges of the file are about to be read"; a source
** decides how to bring them in: the local file (this file's local source
** gives the system read-ahead advice for the index's own mappings), and
** later a remote object with a cache. Between the two sits one policy
** (batch_reads.c, after the second seed):
**
**   (1) ranges are sorted by offset, duplicates dropped, and ranges within
**       KEEL_BR_GAP bytes of each other merged into extents of at most
**       KEEL_BR_EXTENT_MAX bytes (unless one range is longer);
**   (2) a batch keeps up to KEEL_BR_MAX_RUNS runs in flight (fewer with
**       KEEL_BATCH_READS_MAX_RUNS, keel__br_max_runs): the first is
**       its own, every further one is taken from an allowance (process-wide:
**       KEEL_BR_ALLOWANCE) without waiting; a batch granted nothing reads
**       with one call;
**   (3) runs are sized to the overlap granted: the extents are cut into
**       exactly 1 + granted runs of near-equal extent counts, never cut
**       first and then read one after another;
**   (4) results come back in caller order, duplicates and absence (NULL)
**       kept; one failed run, or a source answering for fewer ranges than
**       it was asked, fails the whole batch with KEEL_EIO and a message.
**
** Invariants:
**   (a) runs taken from an allowance are given back after the source's
**       wait, so at most KEEL_BR_ALLOWANCE extra runs of the process are
**       ever out at once (test_concurrent_batch_reads.c counts them);
**   (b) every run a batch started is waited for before it returns, failed
**       or not.
**
**
** The residency record and the local file's source are the store's
** (store/pagein.h): this layer knows ranges and sources, not files.
*/
#ifndef KEEL_BATCH_READS_H
#define KEEL_BATCH_READS_H

#include "base/internal.h"

/* Runs in flight per batch, and extra runs of the whole process at once:
** the seed's figures (a 32-key HNSW batch in 8 runs of 4 waited for 4
** fetches instead of 32; 64 bounds what a burst of cold searches asks of a
** remote store). For the local file they change nothing measurable: its
** advice calls only start reads, so every run of a batch is in flight
** anyway (doc/batch_reads.md); they are for the remote source. */
#define KEEL_BR_MAX_RUNS 16u
#define KEEL_BR_ALLOWANCE 64
/* Ranges closer than this merge into one extent: one 4 KiB page, so two
** ranges on one page or on neighbouring pages are one read. The local
** file asks for whole granules, which are either adjacent or at least a
** granule apart, so gaps of 0 and 4 KiB make the same reads there, and
** 64 KiB would also read each granule lying alone between two asked for
** (not measured); the gap matters for sources that read exact ranges. */
#define KEEL_BR_GAP 4096u
/* No extent grows past this (a range that would take it further starts the
** next one), so a long contiguous read -- warm of a published index, which
** asks for tens of MiB at once -- becomes several runs and overlaps
** instead of going out as one GET after another. A search's extents are a
** granule or a few, far below it. */
#define KEEL_BR_EXTENT_MAX ((uint64_t)1 << 20)
/* The residency record's unit and the local source's read unit: a cold
** range brings in its whole 64 KiB granule. Measured against 4 KiB (1st
** result a little sooner, the 10th to 1,000th much later: neighbouring
** vectors are not read along) and 128 KiB (the fault read-around here;
** 1st result later on the 768-d file): doc/batch_reads.md. */
#ifndef KEEL_BR_GRANULE_LOG2 /* -D for measurements */
#define KEEL_BR_GRANULE_LOG2 16u
#endif

/* A range about to be read: file offset and length, and where it is in the
** local mapping (the local source advises that address; others use off). */
typedef struct keel_br_range {
    uint64_t off;
    uint64_t len;
    const void *addr;
} keel_br_range;

/* One run: n distinct ranges, sorted, forming next extents. */
typedef struct keel_br_run {
    const keel_br_range *r;   /* the distinct ranges of the run */
    size_t n;
    const keel_br_range *ext; /* the merged extents (addr of the first) */
    size_t next;
} keel_br_run;

/* A source. read brings one run in, sets out[i] (i < run->n) to where range
** i's bytes are, or NULL if the source does not hold it, and returns the
** number of ranges it answered (run->n) or -errno; it may return before the
** bytes are in, and wait then waits for every run read since the last
** wait (NULL: read waits itself). */
typedef struct keel_br_source {
    long (*read)(void *self, const keel_br_run *run, const void **out);
    int (*wait)(void *self);
    void *self;
} keel_br_source;

/* Extra runs free to take (atomic). */
typedef struct keel_br_allowance {
    int free;
} keel_br_allowance;

/* The process-wide allowance (KEEL_BR_ALLOWANCE). */
extern keel_br_allowance keel__br_shared;

/* Takes up to want extra runs without waiting; returns how many. */
uint32_t keel__br_take(keel_br_allowance *a, uint32_t want);
void keel__br_give(keel_br_allowance *a, uint32_t n);

/* Scratch memory of a batch, grown as needed (one per thread). */
typedef struct keel_br_scratch {
    keel_br_range *dist;      /* distinct ranges, sorted */
    keel_br_range *ext;       /* extents */
    uint32_t *order;          /* caller index by sorted position */
    uint32_t *which;          /* distinct index of each caller range */
    const void **dout;        /* result per distinct range */
    size_t cap;
} keel_br_scratch;

void keel__br_scratch_free(keel_br_scratch *s);

/* Runs in flight per batch (1 to KEEL_BR_MAX_RUNS): KEEL_BR_MAX_RUNS,
** or KEEL_BATCH_READS_MAX_RUNS from the environment, read once (a
** diagnostic: 1 is serial fetches, one run and so one GET of a remote
** source in flight per batch; a value that is not a whole number from 1 to
** KEEL_BR_MAX_RUNS is ignored). Tests set it with keel__br_set_max_runs
** (0: back to the environment's). */
uint32_t keel__br_max_runs(void);
void keel__br_set_max_runs(uint32_t n);

/* A walk on a published index: when an expansion fetches its neighbours,
** the neighbours of the next keel__br_ahead() queued candidates come in the
** same round trip (their lists came with their vectors), so the walk finds
** them in memory when it gets there. It adds ranges only to fetches the
** walk makes anyway (some of them it never reads), and the walk's results
** do not depend on it. Measured
** (doc/object_storage_bench.md, GloVe-340k at 20 ms per request): 8 took
** the first query from 31 fetches one after another to 27, and the 100th
** result of a process from 15.6 s to 10.1 s, at the same GETs. */
#define KEEL_BR_AHEAD 8u
#define KEEL_BR_AHEAD_MAX 16u
/* KEEL_BR_AHEAD, or KEEL_BATCH_READS_AHEAD from the environment, read once
** (a diagnostic: a whole number from 0 to KEEL_BR_AHEAD_MAX; anything else
** is ignored). Tests set it with keel__br_set_ahead (-1: back to the
** environment's). */
uint32_t keel__br_ahead(void);
void keel__br_set_ahead(int n);

/* The beam of a cold walk (DiskANN's beam width): while the pages a walk
** reads are not all in memory, each step expands the nearest
** keel__br_beam() unexpanded candidates together and brings the vectors
** and records of all their neighbours in with one batch, so a walk of 60
** to 100 expansions waits for a quarter to a tenth as many round trips. A
** step that finds everything in memory makes the next one expand one
** candidate, as a walk of a file in memory does (hnsw/search.c). Measured
** in doc/batch_reads.md and doc/object_storage_bench.md. */
#define KEEL_BR_BEAM 8u
#define KEEL_BR_BEAM_MAX 16u
/* KEEL_BR_BEAM, or KEEL_BATCH_READS_BEAM from the environment, read once
** (a diagnostic: a whole number from 1 to KEEL_BR_BEAM_MAX; anything else
** is ignored; 1 is the walk of one expansion at a time). Tests set it with
** keel__br_set_beam (0: back to the environment's). */
uint32_t keel__br_beam(void);
void keel__br_set_beam(uint32_t n);

/* How many runs a batch of `extents` extents reads when granted `granted`
** extra runs, and where run i starts (the sizing rule, (3) above). */
static inline uint32_t
keel__br_runs(size_t extents, uint32_t granted)
{
    if (extents == 0)
        return 0;
    size_t runs = KEEL_MIN((size_t)granted + 1, extents);
    return (uint32_t)KEEL_MIN(runs, (size_t)keel__br_max_runs());
}
static inline size_t
keel__br_run_start(size_t extents, uint32_t runs, uint32_t i)
{
    return i * extents / runs;
}

/* Reads the batch r[0..n) from src (allowance a; NULL: the shared one).
** out[i] gets range i's result. KEEL_OK, KEEL_EIO (message recorded), or
** KEEL_ENOMEM. */
int keel__br_read(const keel_br_source *src, keel_br_allowance *a,
                  const keel_br_range *r, size_t n, const void **out,
                  keel_br_scratch *s);

/* Whether searches use this module: KEEL_BATCH_READS=0/1 in the
** environment, read once (default KEEL_BATCH_READS_DEFAULT); tests switch
** it with keel__br_set_enabled, where 2 also brings in the pages of files
** too small for the rule below. */
#define KEEL_BATCH_READS_DEFAULT 1
int keel__br_enabled(void);
void keel__br_set_enabled(int on);

#endif /* KEEL_BATCH_READS_H */
