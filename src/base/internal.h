/* internal.h -- what every module of keel shares: feature macros, error
** capture, allocation and small helpers.
**
** Every C file of the library includes this file first. It defines no state of its own;
** the thread-local error message lives in error.c. Internal symbols with
** external linkage are named keel__name; nothing without a prefix may have
** external linkage.
*/
#ifndef KEEL_INTERNAL_H
#define KEEL_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "keel.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "keel reads its file in place and needs a little-endian machine"
#endif

#define KEEL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define KEEL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define KEEL_UNUSED(x)   ((void)(x))
#define KEEL_MIN(a, b)   ((a) < (b) ? (a) : (b))
#define KEEL_MAX(a, b)   ((a) > (b) ? (a) : (b))
#define KEEL_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((uint64_t)(a) - 1))

#if defined(__GNUC__)
#define KEEL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define KEEL_COLD         __attribute__((cold, noinline))
#else
#define KEEL_PRINTF(f, a)
#define KEEL_COLD
#endif

/* Records this thread's error message (printf-style; the text should end with
** "\nhelp: ...") and returns rc, so error paths are one line:
**     return keel__fail(KEEL_EINVAL, "k is 0, ...\nhelp: ...");
*/
int keel__fail(int rc, const char *fmt, ...) KEEL_PRINTF(2, 3) KEEL_COLD;

/* Prepends context to this thread's current message ("what: <old>"). Returns
** rc. Used where a lower layer failed and an upper layer knows the value. */
int keel__wrap(int rc, const char *fmt, ...) KEEL_PRINTF(2, 3) KEEL_COLD;

/* Clears this thread's message (a successful public call). */
void keel__clear_error(void);

/* A corrupt-file failure: names the check that failed and where, with the
** help line every corruption shares. */
#define KEEL_CORRUPT(...) keel__corrupt(__FILE__, __LINE__, __VA_ARGS__)
int keel__corrupt(const char *file, int line, const char *fmt, ...)
    KEEL_PRINTF(3, 4) KEEL_COLD;

/* Allocation through one place, so tests can fail the n-th allocation.
** keel__malloc records KEEL_ENOMEM's message itself on failure. */
void *keel__malloc(size_t n);
void *keel__calloc(size_t count, size_t size);
void *keel__realloc(void *p, size_t n);
void keel__free(void *p);
/* Makes room for element n of the array whose pointer is at arrayp (room
** for *cap elements of size bytes): when n == *cap the array grows to twice
** as many (64 at first). KEEL_OK, or KEEL_ENOMEM with the array as it was. */
int keel__grow(void *arrayp, size_t *cap, size_t n, size_t size);
/* Test seam: fail the n-th allocation from now on (0 = never). */
void keel__fail_alloc_after(uint64_t n);

/* Relaxed and ordered atomics on words shared with searches and other
** processes. Everything a search may read while a write changes it goes
** through these, never through plain loads and stores. */
#define KEEL_LOAD_RELAXED(p)     __atomic_load_n((p), __ATOMIC_RELAXED)
#define KEEL_LOAD_ACQUIRE(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define KEEL_STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define KEEL_STORE_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

static inline uint32_t
keel__log2_floor64(uint64_t x)
{
    return 63u - (uint32_t)__builtin_clzll(x);
}

static inline uint32_t
keel__log2_ceil64(uint64_t x)
{
    return x <= 1 ? 0 : 64u - (uint32_t)__builtin_clzll(x - 1);
}

/* splitmix64: the next of a fixed sequence from state *z (a well-mixed
** 64-bit value for each step; the same sequence on every machine). */
static inline uint64_t
keel__splitmix64(uint64_t *z)
{
    uint64_t r = (*z += 0x9E3779B97F4A7C15ull);
    r = (r ^ (r >> 30)) * 0xBF58476D1CE4E5B9ull;
    r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
    return r ^ (r >> 31);
}

/* Little-endian field access on the file's bytes (the host is little-endian;
** memcpy keeps unaligned access defined). */
static inline uint64_t
keel__get64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint32_t
keel__get32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void
keel__put64(void *p, uint64_t v)
{
    memcpy(p, &v, sizeof v);
}
static inline void
keel__put32(void *p, uint32_t v)
{
    memcpy(p, &v, sizeof v);
}

/* path followed by suffix, allocated with keel__malloc (free with
** keel__free); NULL with KEEL_ENOMEM's message on failure. */
char *keel__path_plus(const char *path, const char *suffix);

/* Whether path names an index in memory (KEEL_MEMORY, ":memory:"). */
static inline bool
keel__is_memory(const char *path)
{
    return path && strcmp(path, KEEL_MEMORY) == 0;
}

/* The number of online cores, at least 1. */
uint32_t keel__cpu_count(void);

/* A call its caller may cancel (keel_set_cancel), as the layers that wait
** for it see it (stop.c): the thread that made the call (the owner) asks
** fn, at most every KEEL_STOP_ASK_MS and not before the call has run that
** long, so a call that ends sooner never runs it; a nonzero answer sets
** stopped, which every thread working for the call reads. A layer that
** waits (for a GET, for worker threads) waits in slices of at most
** keel__stop_slice_ms and polls between them; once stopped, the call fails
** with KEEL_ECANCELED. NULL stands for a call nothing can cancel. */
#define KEEL_STOP_ASK_MS 50u
typedef struct keel_stop {
    keel_cancel_fn fn;        /* NULL: nothing to ask */
    void *arg;
    pthread_t owner;          /* the thread that made the call */
    double asked;             /* owner only: when fn was last asked, or
                                 the call began (monotonic seconds) */
    int stopped;              /* atomic: fn asked the call to stop */
} keel_stop;

/* Starts s for a call made by this thread that asks fn (may be NULL). */
void keel__stop_init(keel_stop *s, keel_cancel_fn fn, void *arg);
/* Nonzero once the call is stopped. On the owner, asks fn when it is due;
** elsewhere only reads stopped. s NULL: 0. */
int keel__stop_poll(keel_stop *s);
/* Milliseconds a wait may last before the next poll (1..KEEL_STOP_ASK_MS);
** UINT32_MAX for s NULL or without fn. */
uint32_t keel__stop_slice_ms(const keel_stop *s);
/* Seconds of CLOCK_MONOTONIC. */
double keel__now_s(void);
/* Waits on cond (mu held; cond made with CLOCK_MONOTONIC) for at most ms
** milliseconds. */
void keel__cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mu,
                        uint32_t ms);
/* Takes rw exclusively if it can within ms milliseconds: 0, or nonzero
** (not taken). */
int keel__wrlock_ms(pthread_rwlock_t *rw, uint32_t ms);

#endif /* KEEL_INTERNAL_H */
