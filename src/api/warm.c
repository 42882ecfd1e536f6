/* warm.c -- reading an index into memory in the background (warm), and
** huge pages for committed vectors and code rows.
**
** warm: a thread gives the system read-ahead advice for exactly the byte
** ranges the index has written (store.h keel__store_written_ranges), never
** the unwritten tail of a segment or heap chunk, in steps of 8 MiB, checking
** between steps whether to stop. It advises the index's own mappings, so the
** pages end up mapped as well as cached, in two passes: MADV_WILLNEED over
** every range starts all the reads at once (the device gets a deep queue,
** and reads the file at its full rate instead of one fault's read-around at
** a time), then MADV_POPULATE_READ (Linux 5.14 and later) maps each step,
** waiting for its reads, and leaves the pages of a writable shared mapping
** clean; older kernels answer the second with EINVAL and keep the first.
** (make bench, GloVe-100 340k evicted from the page cache: 100th result
** at 95 ms [77-103] with warm against 195 ms [143-205] without; reading
** one step at a time gave no gain over not warming.)
**
** A published index (read by URL) has no system read-ahead to ask: its
** ranges, and its id table, go to its page cache through the batch-read
** policy in steps of 32 MiB, two steps at once (warm_remote).
**
** Order: the heap (upper layers, which every search crosses first), then
** each segment's level-0 records, vectors and slot headers, segment by
** segment. Searches start at the top of the graph, so the pages they need
** first arrive first.
**
** Lifetime rules:
**   (1) Asking while a reading runs does nothing; asking after it finished
**       reads what the index holds then.
**   (2) The thread is stopped (waiting for at most one step) before any
**       mapping it may use goes away: close, and compaction's swap. Readers
**       never unmap before close (region.c invariant 9).
**   (3) A child process after fork() has no thread: closing the handle there
**       does not wait for one.
**   (4) While warm reads a local file, searches leave the reading to it
**       (batch_reads.h; a published index's searches fetch what they miss
**       meanwhile); a warm-up that read everything marks the whole file
**       known resident
**       in the batch-read record, so searches stop calling that module for
**       good; stopping drops the record, since every caller of
**       keel__warm_stop is about to close or swap the store with no search
**       running.
*/
#include "api/warm.h"
#include "store/pagein.h"

#include <pthread.h>
#include <unistd.h>

#define WARM_STEP (8u << 20)
/* A published index's step: up to this many bytes of its written ranges
** (and at most WARM_PIECES of them) go to its page cache at once; the
** batch-read policy cuts them into extents of KEEL_BR_EXTENT_MAX and reads
** up to KEEL_BR_MAX_RUNS runs at once, and the page cache merges
** neighbouring pages of a pack into one GET: 4 or 5 GETs of up to 8 MiB.
** (GloVe-340k, 195 MiB, 20 ms per request: 8 MiB steps of one region
** each, one GET after another, took 2.2 s to warm;
** doc/object_storage_bench.md.) */
#define WARM_STEP_REMOTE (32u << 20)
#define WARM_PIECES 64
/* Steps of a published index's warm in flight at once, each one batch (at
** most KEEL_BR_MAX_RUNS GETs, from the process's allowance): the next step
** starts while the slowest GETs of the one before are still on the wire,
** or while its pages are checked and installed. (GloVe-340k, 20 ms per
** request: 100th result 863 ms [695-942] with one step of 64 MiB at a time,
** 670 ms [551-900] with two of 32 MiB; doc/object_storage_bench.md.) */
#define WARM_LANES 2

typedef struct warm_range {
    uint8_t *addr;
    size_t len;
    int populate_only;        /* vectors or code rows with huge-page advice */
} warm_range;

struct keel_warm {
    pthread_t tid;
    pid_t owner;              /* the process whose thread this is */
    int stop;                 /* atomic */
    int done;                 /* atomic: the thread finished */
    keel_store *st;
    keel_view view;           /* what is read: the index at the start */
    warm_range *ranges;
    size_t n, cap;
    uint64_t advised;         /* bytes advised (tests, stats) */
    int huge;                 /* the handle asked for huge pages */
};

static void
add_range(void *addr, size_t len, int write_once, void *arg)
{
    struct keel_warm *w = arg;
    if (!addr || !len)
        return;
    if (keel__grow(&w->ranges, &w->cap, w->n, sizeof *w->ranges))
        return; /* warm is advice: read less rather than fail */
    w->ranges[w->n].addr = addr;
    w->ranges[w->n].populate_only = write_once && w->huge;
    w->ranges[w->n++].len = len;
}

/* keel_stop's question for warm's GETs: has keel__warm_stop asked? */
static int
warm_asked_to_stop(void *arg)
{
    struct keel_warm *w = arg;
    return __atomic_load_n(&w->stop, __ATOMIC_ACQUIRE);
}

/* A step of a published index's warm: pieces [first, first + n) of the
** list, up to WARM_STEP_REMOTE bytes. */
typedef struct warm_step {
    size_t first, n, bytes;
} warm_step;

/* The steps, shared by warm's lanes: each takes the next step not taken
** yet (steps start in order), brings it in, and takes another. */
typedef struct warm_lanes {
    struct keel_warm *w;
    keel_cache *remote;
    const keel_br_range *piece;
    const warm_step *step;
    size_t nsteps;
    size_t next;              /* atomic: the next step to take */
    int stopped;              /* atomic */
} warm_lanes;

static void *
warm_lane(void *arg)
{
    warm_lanes *L = arg;
    struct keel_warm *w = L->w;
    keel_br_scratch scratch = {0};
    /* Close, refresh and compaction stop warm: its GETs in flight are
     * abandoned within a poll, never waited out to the stall timeout. */
    keel_stop stop;
    keel__stop_init(&stop, warm_asked_to_stop, w);
    for (;;) {
        size_t k = __atomic_fetch_add(&L->next, 1, __ATOMIC_RELAXED);
        if (k >= L->nsteps)
            break;
        if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&L->stopped, 1, __ATOMIC_RELAXED);
            break;
        }
        const warm_step *s = &L->step[k];
        if (keel__cache_bring_addr(L->remote, L->piece + s->first, s->n,
                                   &scratch, &stop))
            keel__clear_error();
        __atomic_add_fetch(&w->advised, (uint64_t)s->bytes,
                           __ATOMIC_RELAXED);
    }
    keel__br_scratch_free(&scratch);
    return NULL;
}

/* A published index: every written range into its page cache, and then
** the id table (keel_get and filters by id read it; a local file's warm
** leaves it to the system), through the batch-read policy,
** WARM_STEP_REMOTE bytes at a time (ranges cut at the step, and several
** small ones in one step), WARM_LANES steps at once: the next step's GETs
** start while the slowest of the one before are still on the wire. A
** failed fetch is left to the search that needs the page. With every page
** in, searches stop announcing theirs (cache.h keel__cache_complete). 0
** when stopped. */
static int
warm_remote(struct keel_warm *w, keel_cache *remote)
{
    const keel_idtab *t = w->view.idtab;
    add_range(t ? t->tab : NULL, t ? (size_t)4 << t->log2 : 0, 0, w);
    /* The steps: each range cut where a step fills. */
    keel_br_range *piece = NULL;
    warm_step *step = NULL;
    size_t np = 0, pcap = 0, ns = 0, scap = 0;
    int ok = 1;
    for (size_t i = 0; i < w->n && ok; i++) {
        uintptr_t a = (uintptr_t)w->ranges[i].addr;
        uintptr_t end = a + w->ranges[i].len;
        while (a < end && ok) {
            if (!ns || step[ns - 1].bytes == WARM_STEP_REMOTE ||
                step[ns - 1].n == WARM_PIECES) {
                if (ns == scap) {
                    scap = scap ? 2 * scap : 16;
                    warm_step *p = keel__realloc(step, scap * sizeof *p);
                    if (!(ok = p != NULL))
                        break;
                    step = p;
                }
                step[ns++] = (warm_step){np, 0, 0};
            }
            warm_step *s = &step[ns - 1];
            size_t len = (size_t)KEEL_MIN(
                (uintptr_t)(WARM_STEP_REMOTE - s->bytes), end - a);
            if (!(ok = !keel__grow(&piece, &pcap, np, sizeof *piece)))
                break;
            piece[np++] = (keel_br_range){0, len, (const void *)a};
            s->n++;
            s->bytes += len;
            a += len;
        }
    }
    warm_lanes L = {.w = w, .remote = remote, .piece = piece, .step = step,
                    .nsteps = ok ? ns : 0};
    pthread_t tid[WARM_LANES];
    int nt = 0;
    for (int k = 1; k < WARM_LANES && L.nsteps > 1; k++)
        if (pthread_create(&tid[nt], NULL, warm_lane, &L) == 0)
            nt++;
    warm_lane(&L);
    for (int k = 0; k < nt; k++)
        pthread_join(tid[k], NULL);
    keel__free(piece);
    keel__free(step);
    /* Out of memory reads nothing more: warm is advice. */
    return !__atomic_load_n(&L.stopped, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE) && ok;
}

/* Advises every range with adv in steps of WARM_STEP; 0 when stopped. The
** populating pass counts the bytes it brought in (w->advised). */
static int
advise_all(struct keel_warm *w, int adv)
{
    size_t page = keel__page_size();
    keel_cache *remote = w->st->remote;
    if (remote) /* one pass fetches it all, vectors with huge pages too */
        return adv == KEEL_ADV_WILLNEED ? warm_remote(w, remote) : 1;
    for (size_t i = 0; i < w->n; i++) {
        if (adv == KEEL_ADV_WILLNEED && w->ranges[i].populate_only)
            continue;
        uintptr_t a = (uintptr_t)w->ranges[i].addr;
        uintptr_t end = a + w->ranges[i].len;
        a &= ~(uintptr_t)(page - 1);
        while (a < end) {
            if (__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
                return 0;
            size_t len = (size_t)KEEL_MIN((uintptr_t)WARM_STEP, end - a);
            keel__os->advise((void *)a, len, adv);
            if (adv == KEEL_ADV_POPULATE_READ)
                w->advised += len;
            a += len;
        }
    }
    return 1;
}

static void *
warm_main(void *arg)
{
    struct keel_warm *w = arg;
    /* WILLNEED over everything first: it only starts reads, so the device
     * gets the whole written range queued at once and reads it at its full
     * rate; read-ahead marks are not set, so the faults of POPULATE_READ
     * that follow find the pages cached and read nothing past the written
     * range (a fault's read-ahead would, up to read_ahead_kb beyond it).
     * Vectors and code rows with huge-page advice skip it: its reads fill
     * the page cache with small pages, while the faults' own reads bring
     * whole 2 MiB pieces the system can map with one huge page each. */
    if (advise_all(w, KEEL_ADV_WILLNEED) &&
        advise_all(w, KEEL_ADV_POPULATE_READ))
        keel__br_warmed(w->st, &w->view); /* rule (4) */
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

int
keel__warm_start(keel_index *idx)
{
    __atomic_fetch_or(&idx->flags, KEEL_WARM, __ATOMIC_RELAXED);
    struct keel_warm *w = idx->warm;
    if (w && w->owner == getpid() &&
        !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE))
        return KEEL_OK; /* rule (1) */
    keel__warm_stop(idx);
    w = keel__calloc(1, sizeof *w);
    if (!w)
        return KEEL_ENOMEM;
    w->owner = getpid();
    w->st = idx->st;
    w->huge = (KEEL_LOAD_RELAXED(&idx->flags) & KEEL_HUGE_PAGES) != 0;
    int rc = keel__store_view(idx->st, &w->view);
    if (rc) {
        keel__free(w);
        return rc;
    }
    keel__store_written_ranges(idx->st, &w->view, add_range, w);
    keel__br_warming(idx->st); /* rule (4) */
    if (pthread_create(&w->tid, NULL, warm_main, w) != 0) {
        keel__br_forget(idx->st); /* searches read for themselves again */
        keel__free(w->ranges);
        keel__free(w);
        return KEEL_OK; /* advice only: a missing thread loses nothing */
    }
    idx->warm = w;
    return KEEL_OK;
}

void
keel__warm_stop(keel_index *idx)
{
    struct keel_warm *w = idx->warm;
    /* Rule (3) again: in a child the record's lock may be held by a thread
     * of the parent that does not exist here; the child leaves the record
     * (advice only) rather than wait for it. */
    int here = idx->owner == getpid();
    if (!w) {
        if (here)
            keel__br_forget(idx->st); /* rule (4) */
        return;
    }
    idx->warm = NULL;
    if (w->owner == getpid()) { /* rule (3) */
        __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
        pthread_join(w->tid, NULL);
    }
    if (here)
        keel__br_forget(idx->st);
    keel__free(w->ranges);
    keel__free(w);
}

int
keel__warm_done(keel_index *idx)
{
    keel__swap_shared(idx);
    struct keel_warm *w = idx->warm;
    int done = w && __atomic_load_n(&w->done, __ATOMIC_ACQUIRE) &&
               !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE);
    keel__swap_unlock(idx);
    return done;
}

int
keel__warm_running(keel_index *idx)
{
    keel__swap_shared(idx);
    struct keel_warm *w = idx->warm;
    int running = w && w->owner == getpid() &&
                  !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
    keel__swap_unlock(idx);
    return running;
}

int
keel_warm(keel_index *idx)
{
    keel__clear_error();
    if (!idx)
        return keel__fail(KEEL_EINVAL, "keel_warm was given a NULL index\n"
                          "help: pass the handle keel_open or "
                          "keel_open_reader returned");
    /* Exclusive: the handle's warm thread changes only under it (follow
     * and compaction swap the store under it too). A writer's written
     * ranges change under write_lock, taken first (handle.h's lock order). */
    if (idx->writer)
        pthread_mutex_lock(&idx->write_lock);
    keel__swap_exclusive(idx);
    int rc = keel__warm_start(idx);
    keel__swap_unlock(idx);
    if (idx->writer)
        pthread_mutex_unlock(&idx->write_lock);
    return rc;
}

/* --- huge pages ---------------------------------------------------------- */

#define HUGE (2u << 20)

/* Advises huge pages and random access for the 2 MiB pieces of rows
** [a, b) of one segment's array whose rows are row_bytes each. */
static void
advise_rows(uint8_t *rows, size_t row_bytes, uint64_t a, uint64_t b)
{
    uintptr_t lo = (uintptr_t)(rows + a * row_bytes);
    uintptr_t hi = (uintptr_t)(rows + b * row_bytes);
    lo = (lo + HUGE - 1) & ~(uintptr_t)(HUGE - 1);
    hi &= ~(uintptr_t)(HUGE - 1);
    if (hi <= lo)
        return;
    keel__os->advise((void *)lo, hi - lo, KEEL_ADV_HUGEPAGE);
    keel__os->advise((void *)lo, hi - lo, KEEL_ADV_RANDOM);
}

/* Advises huge pages for the 2 MiB pieces of the vector and code-row arrays
** that hold only slots in [from, to): both are written once per slot, so a
** huge page never has to be written back whole for a small change. Graph
** records and slot headers never get the advice. (Measured,
** doc/search_tuning.md: code rows on 2 MiB pages, GloVe-100 340k cosine at
** ef 64-256, +2-7% QPS in one set of alternated runs and +0.3% in another;
** level-0 records on them as well, nothing more.) */
static void
advise_slots(keel_store *st, uint64_t from, uint64_t to)
{
    keel__br_own_advice(st); /* before the advice: pagein.c invariant (3) */
    uint32_t nseg = KEEL_LOAD_ACQUIRE(&st->nseg);
    for (uint32_t k = 0; k < nseg; k++) {
        keel_segment *s = &st->seg[k];
        uint64_t first = keel__seg_first_slot(&st->g, k);
        uint64_t a = KEEL_MAX(from, first), b = KEEL_MIN(to, first + s->slots);
        if (a >= b)
            continue;
        advise_rows(KEEL_LOAD_RELAXED(&s->vecs), st->g.vec_bytes, a - first,
                    b - first);
        if (st->g.code_bytes)
            advise_rows(KEEL_LOAD_RELAXED(&s->codes), st->g.code_bytes,
                        a - first, b - first);
    }
}

/* The committed vectors and code rows (at open, after a flush, on a new snapshot). */
void
keel__huge_pages_advise(keel_index *idx)
{
    keel_store *st = idx->st;
    keel_view v;
    if (keel__store_view(st, &v) != KEEL_OK)
        return;
    uint64_t committed = st->writer ? st->committed.count : v.count;
    if (committed > st->huge_advised) {
        advise_slots(st, st->huge_advised, committed);
        st->huge_advised = committed;
    }
}

/* Vectors a batch is about to write: advised before the writes, the page
** cache takes them in huge pieces, and readers map those whole. */
void
keel__huge_pages_advise_batch(keel_index *idx, uint64_t first, uint64_t n)
{
    if (KEEL_LOAD_RELAXED(&idx->flags) & KEEL_HUGE_PAGES)
        advise_slots(idx->st, first, first + n);
}
