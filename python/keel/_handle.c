/* _handle.c -- an Index object's hold on its keel handle, for _keel.c's
** methods: the object's life (new, dealloc, _open, close), its read-write
** lock and the bracket every call takes (keel_py_enter / keel_py_leave),
** the refusals that bracket makes (a closed or never opened object, a
** handle inherited across fork(), a signal handler using the index its
** interrupted call holds), and the per-thread list of calls that run
** signal handlers (busy). _keel.c's file comment says why each rule holds
** (Threads, Signals, Fork).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL keel_ARRAY_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "keel.h"
#include "_errors.h"
#include "_handle.h"

/* --- fork ---------------------------------------------------------------- */

static unsigned long fork_generation; /* +1 in every child after fork() */

static void
after_fork_child(void)
{
    fork_generation++;
}

void
keel_py_handle_init(void)
{
    static int forked_hook;
    if (!forked_hook++)
        pthread_atfork(NULL, NULL, after_fork_child);
}

/* --- calls that run signal handlers -------------------------------------- */

static _Thread_local struct busy *busy_top;

/* Marks this thread as inside call (which runs Python signal handlers from
** keel's cancel callback) on self until keel_py_busy_pop(). */
void
keel_py_busy_push(struct busy *b, const void *self, const char *call)
{
    b->obj = self;
    b->call = call;
    b->prev = busy_top;
    busy_top = b;
}

void
keel_py_busy_pop(struct busy *b)
{
    busy_top = b->prev;
}

/* The call this thread is inside on self, or NULL. */
const char *
keel_py_busy_call(const IndexObject *self)
{
    for (const struct busy *b = busy_top; b; b = b->prev)
        if (b->obj == (const void *)self)
            return b->call;
    return NULL;
}

/* --- the object, and the bracket of a call ------------------------------- */

PyObject *
keel_py_index_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    IndexObject *self = (IndexObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    /* Writer preference, so close() and compact() are not starved by
     * threads that search in a loop (glibc prefers readers by default). */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
#ifdef __GLIBC__
    pthread_rwlockattr_setkind_np(
        &attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
    pthread_rwlock_init(&self->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    self->path = Py_None;
    Py_INCREF(Py_None);
    return (PyObject *)self;
}

void
keel_py_index_dealloc(IndexObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    /* No call can be in flight: each holds a reference to self. */
    if (self->idx) {
        keel_index *idx = self->idx;
        self->idx = NULL;
        Py_BEGIN_ALLOW_THREADS
        keel_close(idx);
        Py_END_ALLOW_THREADS
    }
    pthread_rwlock_destroy(&self->lock);
    Py_CLEAR(self->path);
    /* A Python subclass's type reference is dropped by subtype_dealloc. */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

int
keel_py_index_traverse(IndexObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->path);
    return 0;
}

/* RuntimeError if this thread is inside a callback-running call on self
** (a signal handler using the index its interrupted call is using): 0, or
** -1 with the exception set. fn names the method refused. */
static int
check_reentry(IndexObject *self, const char *fn)
{
    for (const struct busy *b = busy_top; b; b = b->prev)
        if (b->obj == (const void *)self) {
            PyErr_Format(PyExc_RuntimeError,
                         "%s cannot use the index at %S: this thread is "
                         "inside its %s(), which runs Python signal handlers "
                         "while it holds the index\nhelp: a signal handler "
                         "cannot use the index of the call it interrupted "
                         "until that call returns; record what to do in the "
                         "handler and do it after %s() returns (or raise in "
                         "the handler to stop the call)",
                         fn, self->path, b->call, b->call);
            return -1;
        }
    return 0;
}

PyObject *
keel_py_closed_error(IndexObject *self)
{
    if (self->path == Py_None)
        return keel_py_raise_code(KEEL_EINVAL, "the index is not open\n"
                                  "help: create it with keel.VectorIndex("
                                  "path, dimensions) or "
                                  "keel.IndexReader(path)");
    return PyErr_Format(keel_py_invalid_class(),
                        "the index at %U is closed\nhelp: open it again; a "
                        "closed index cannot be used", self->path);
}

/* Whether self's handle was opened before fork() in a parent process. */
int
keel_py_inherited(IndexObject *self)
{
    return self->generation != fork_generation && self->idx;
}

/* The checks of keel_py_enter() without the lock, for calls that must fail
** the same way before they look at their arguments: 0 or -1 with an
** exception. */
int
keel_py_check_usable(IndexObject *self, const char *fn)
{
    if (check_reentry(self, fn))
        return -1;
    if (keel_py_inherited(self)) {
        keel_py_raise_code(KEEL_EINVAL, "this index was opened in the "
                           "parent process before fork(); a child may only "
                           "close it\nhelp: open the index again in the "
                           "child process (or use the 'spawn' start "
                           "method)");
        return -1;
    }
    if (!self->idx) {
        keel_py_closed_error(self);
        return -1;
    }
    return 0;
}

/* Takes the handle for one call (shared lock). Returns 0, or -1 with an
** exception set. The caller must call keel_py_leave() after a 0. */
int
keel_py_enter(IndexObject *self, const char *fn)
{
    if (check_reentry(self, fn))
        return -1;
    if (keel_py_inherited(self))
        return keel_py_check_usable(self, fn);
    if (pthread_rwlock_tryrdlock(&self->lock) != 0) {
        Py_BEGIN_ALLOW_THREADS
        pthread_rwlock_rdlock(&self->lock);
        Py_END_ALLOW_THREADS
    }
    if (!self->idx) {
        pthread_rwlock_unlock(&self->lock);
        keel_py_closed_error(self);
        return -1;
    }
    return 0;
}

void
keel_py_leave(IndexObject *self)
{
    pthread_rwlock_unlock(&self->lock);
}

/* keel_py_enter() for a call that reads vectors a (shape (dim,) or
** (n, dim)): their length is checked again under the lock. */
int
keel_py_enter_vectors(IndexObject *self, PyArrayObject *a, int batch,
                      const char *fn)
{
    if (keel_py_enter(self, fn))
        return -1;
    if (PyArray_DIM(a, batch) != (npy_intp)self->dim) {
        keel_py_leave(self);
        keel_py_raise_code(KEEL_EDIM, "the vectors' length no longer "
                           "matches the index's dimensions\nhelp: do not "
                           "open an object again while other threads use "
                           "it");
        return -1;
    }
    return 0;
}

/* --- open and close ------------------------------------------------------ */

/* _open(path, dimensions, metric, precision, codes, max_connections,
**       ef_construction, ef_search, threads, flags, reader,
**       cache_dir=None, cache_bytes=0, memory_cache_bytes=0) -- the Python
** layer has checked and translated every value (the cache fields: a reader
** of a URL only; None and 0 leave them to the environment). */
PyObject *
keel_py_index_open(IndexObject *self, PyObject *args)
{
    PyObject *path_bytes = NULL, *cache_obj = Py_None, *cache_bytes_dir = NULL;
    unsigned dim, metric, precision, codes, m, efc, efs, threads, flags;
    unsigned long long cache_bytes = 0, memory_cache_bytes = 0;
    int reader;
    if (!PyArg_ParseTuple(args, "O&IIIIIIIIIp|OKK:_open",
                          PyUnicode_FSConverter, &path_bytes, &dim, &metric,
                          &precision, &codes, &m, &efc, &efs, &threads,
                          &flags, &reader, &cache_obj, &cache_bytes,
                          &memory_cache_bytes))
        return NULL;
    if (cache_obj != Py_None &&
        !PyUnicode_FSConverter(cache_obj, &cache_bytes_dir)) {
        Py_DECREF(path_bytes);
        return NULL;
    }
    if (check_reentry(self, "__init__()")) {
        Py_DECREF(path_bytes);
        Py_XDECREF(cache_bytes_dir);
        return NULL;
    }
    /* Exclusive: no call may run while the object opens, and two opens of
     * one object must not both succeed. */
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (self->opened) {
        pthread_rwlock_unlock(&self->lock);
        Py_DECREF(path_bytes);
        Py_XDECREF(cache_bytes_dir);
        return keel_py_raise_code(KEEL_EINVAL, "this index object was "
                                  "opened already; an object opens once\n"
                                  "help: create a new object to open an "
                                  "index again or another index");
    }
    keel_options o = {
        .metric = (keel_metric)metric,
        .precision = (keel_precision)precision,
        .codes = (keel_codes)codes,
        .max_connections = m,
        .ef_construction = efc,
        .ef_search = efs,
        .threads = threads,
        .flags = flags,
        .cache_dir = cache_bytes_dir ? PyBytes_AS_STRING(cache_bytes_dir)
                                     : NULL,
        .cache_bytes = cache_bytes,
        .memory_cache_bytes = memory_cache_bytes,
    };
    const char *path = PyBytes_AS_STRING(path_bytes);
    /* A reader of a published index asks the handlers too, while a search
     * waits for the object store (keel_set_cancel). */
    int remote = reader && strncmp(path, "s3://", 5) == 0;
    keel_index *idx = NULL;
    keel_stats st;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = reader ? keel_open_reader(path, &o, &idx)
                : keel_open(path, dim, &o, &idx);
    if (!rc)
        rc = keel_stat(idx, &st);
    if (!rc && (!reader || remote))
        rc = keel_set_cancel(idx, keel_py_cancel_check, NULL);
    Py_END_ALLOW_THREADS
    PyObject *name = NULL;
    if (rc)
        keel_py_raise_opening(rc);
    else
        name = PyUnicode_DecodeFSDefault(path);
    Py_DECREF(path_bytes);
    Py_XDECREF(cache_bytes_dir);
    if (!name) {
        Py_BEGIN_ALLOW_THREADS
        keel_close(idx);
        Py_END_ALLOW_THREADS
        pthread_rwlock_unlock(&self->lock);
        return NULL;
    }
    Py_SETREF(self->path, name);
    self->idx = idx;
    self->opened = 1;
    self->generation = fork_generation;
    self->dim = st.dim;
    self->reader = reader;
    self->remote = remote;
    self->metric = st.metric <= KEEL_IP ? (int)st.metric : 0;
    self->precision = st.precision <= KEEL_F16 ? (int)st.precision : 0;
    self->codes = st.codes <= KEEL_CODES_I4 ? (int)st.codes : 0;
    pthread_rwlock_unlock(&self->lock);
    Py_RETURN_NONE;
}

PyObject *
keel_py_index_close(IndexObject *self, PyObject *unused)
{
    (void)unused;
    if (self->generation != fork_generation) {
        /* In a child after fork(): no other thread can hold the lock here,
         * and its state may be the parent's; close without it. */
        keel_index *idx = self->idx;
        self->idx = NULL;
        Py_BEGIN_ALLOW_THREADS
        keel_close(idx);
        Py_END_ALLOW_THREADS
        Py_RETURN_NONE;
    }
    if (check_reentry(self, "close()"))
        return NULL;
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    keel_index *idx = self->idx;
    self->idx = NULL;
    rc = keel_close(idx);
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (rc)
        return keel_py_raise(rc);
    Py_RETURN_NONE;
}

