/* _handle.h -- the Index object and its hold on a keel handle (_handle.c),
** for _keel.c's methods. A method brackets its use of self->idx with
** keel_py_enter / keel_py_leave (the object's lock, shared), and a call
** that runs Python signal handlers while it holds the handle (keel's cancel
** callback) also with keel_py_busy_push / keel_py_busy_pop. */
#ifndef KEEL_PY_HANDLE_H
#define KEEL_PY_HANDLE_H

#include <pthread.h>
#include <stdint.h>

#include "keel.h"

typedef struct {
    PyObject_HEAD
    keel_index *idx;            /* NULL when closed or not opened */
    pthread_rwlock_t lock;      /* shared: calls; exclusive: close, compact */
    unsigned long generation;   /* fork_generation when opened */
    int opened;                 /* set once, by the first successful open */
    uint32_t dim;
    int reader;
    int remote;                 /* a reader of an s3:// URL: its searches
                                   run the signal handlers
                                   (keel_py_cancel_check) */
    int metric, precision, codes;
    PyObject *path;             /* str, or None */
    PyObject *weakrefs;
} IndexObject;

/* A call that runs Python code (signal handlers) from keel's cancel
** callback while it holds the object's locks: one per such call in
** progress on this thread, innermost first. Pushed and popped with the GIL
** held, by the thread itself. */
struct busy {
    const void *obj;
    const char *call;
    struct busy *prev;
};

void keel_py_busy_push(struct busy *b, const void *self, const char *call);
void keel_py_busy_pop(struct busy *b);
const char *keel_py_busy_call(const IndexObject *self);

/* Once, at import: counts the forks (pthread_atfork). */
void keel_py_handle_init(void);

/* The type's slots (tp_new, tp_dealloc, tp_traverse) and its _open and
** close methods. */
PyObject *keel_py_index_new(PyTypeObject *type, PyObject *args,
                            PyObject *kwds);
void keel_py_index_dealloc(IndexObject *self);
int keel_py_index_traverse(IndexObject *self, visitproc visit, void *arg);
PyObject *keel_py_index_open(IndexObject *self, PyObject *args);
PyObject *keel_py_index_close(IndexObject *self, PyObject *unused);

/* The bracket of a call named fn (such as "add()"): 0, or -1 with an
** exception (the object is closed or was never opened, was inherited
** across fork(), or is held by this thread's interrupted call). */
int keel_py_enter(IndexObject *self, const char *fn);
void keel_py_leave(IndexObject *self);
/* keel_py_enter, then vectors a of shape (dim,) or (n, dim) checked again
** under the lock. */
int keel_py_enter_vectors(IndexObject *self, PyArrayObject *a, int batch,
                          const char *fn);
/* keel_py_enter's refusals without taking the lock. */
int keel_py_check_usable(IndexObject *self, const char *fn);

PyObject *keel_py_closed_error(IndexObject *self);
int keel_py_inherited(IndexObject *self);

#endif /* KEEL_PY_HANDLE_H */
