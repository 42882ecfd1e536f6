/* stop.c -- cancelling a call while it waits (keel_stop, internal.h).
**
** The caller's cancel callback (keel_set_cancel) runs only on the thread
** that made the call (keel.h: a Python binding runs its signal handlers
** there), so the threads that work for a call share one keel_stop: the
** owner asks the callback, every thread reads the answer.
**
** Invariants:
**   (1) fn runs only on the owner, at most once per KEEL_STOP_ASK_MS, and
**       never in the first KEEL_STOP_ASK_MS of the call: a call that waits
**       for nothing long never runs it.
**   (2) stopped, once set, stays set for the call: a call whose fn asked to
**       stop returns KEEL_ECANCELED (its callers check it last), so the
**       answer is never lost.
*/
#include "base/internal.h"

#include <time.h>

double
keel__now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void
keel__stop_init(keel_stop *s, keel_cancel_fn fn, void *arg)
{
    s->fn = fn;
    s->arg = arg;
    s->owner = pthread_self();
    s->asked = fn ? keel__now_s() : 0;
    s->stopped = 0;
}

int
keel__stop_poll(keel_stop *s)
{
    if (!s || !s->fn)
        return 0;
    if (KEEL_LOAD_ACQUIRE(&s->stopped))
        return 1;
    if (!pthread_equal(pthread_self(), s->owner))
        return 0;
    double t = keel__now_s();
    if (t - s->asked < KEEL_STOP_ASK_MS / 1000.0)
        return 0;
    s->asked = t;
    if (!s->fn(s->arg))
        return 0;
    KEEL_STORE_RELEASE(&s->stopped, 1);
    return 1;
}

uint32_t
keel__stop_slice_ms(const keel_stop *s)
{
    if (!s || !s->fn)
        return UINT32_MAX;
    if (!pthread_equal(pthread_self(), s->owner))
        return KEEL_STOP_ASK_MS; /* stopped is set by the owner's asks */
    double due = s->asked + KEEL_STOP_ASK_MS / 1000.0 - keel__now_s();
    if (due <= 0)
        return 1;
    return KEEL_MIN((uint32_t)(due * 1000.0) + 1, KEEL_STOP_ASK_MS);
}

void
keel__cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *mu, uint32_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_nsec += (long)ms * 1000000L;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cond, mu, &t);
}

int
keel__wrlock_ms(pthread_rwlock_t *rw, uint32_t ms)
{
    /* CLOCK_REALTIME, pthread_rwlock_timedwrlock's: a step of the clock
     * changes one wait, no more. */
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += (long)ms * 1000000L;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    return pthread_rwlock_timedwrlock(rw, &t);
}
