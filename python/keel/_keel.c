/* _keel.c -- the CPython extension behind the keel package: one type,
** keel._keel.Index, whose methods call the C library (libkeel.a, linked in).
**
** The Python layer (keel/_index.py) subclasses Index as VectorIndex and
** IndexReader and adds what is easier in Python: option names, the context
** manager, repr. Everything on the per-call path is in this extension, so a
** search is one C call from Python with no Python frame in between.
**
** Inputs: a C-contiguous, aligned, native float32 numpy array of the right
** shape is used in place (zero-copy), and so is a uint64 array of ids. Any
** other input goes to a helper in keel/_coerce.py, which converts it or
** raises TypeError / ValueError in Python terms.
**
** Threads: the GIL is released around every call into keel, however
** short: any call may wait for one of keel's locks (keel_stat and keel_check
** on a writer take its write_lock), and add_batch and compact hold the
** write_lock while their cancel callback waits for the GIL, so a call that
** waited with the GIL held would deadlock. Each object has a read-write lock: calls hold it shared while they
** use the handle (compact too: keel lets searches go on during it); open
** and close hold it exclusive (keel_close must not race other calls on a
** handle). An object opens once, so its dimensions never change while a
** call holds the lock. The lock is always taken without holding the GIL, or
** with trylock, so it cannot deadlock against the GIL.
**
** Signals: long calls (add_batch, compact, and search and search_batch on
** a reader of an s3:// URL while they wait for the object store) ask the
** Python signal handlers through keel_set_cancel about twenty times a
** second; a handler that raises (Ctrl-C's KeyboardInterrupt) stops the
** call, which changes nothing, and the exception is raised when it
** returns. Such a handler runs on the
** thread that holds keel's write_lock and the object's lock, so it must not
** use that object (keel.h: the callback must not call keel on the handle):
** each thread keeps a list of the objects it is inside a callback-running
** call of (busy_top, _handle.c), and every method of one of them raises
** RuntimeError there instead of deadlocking.
**
** Fork: a handle opened before fork() may only be closed in the child
** (keel.h); every other call there raises InvalidArgumentError.
**
** Files: _keel.c holds the Index type's methods (a method reads its
** arguments, takes the handle, calls keel without the GIL and builds its
** result) and the module. Below it, each a job of its own: _handle.c, the
** object's hold on its handle (open, close, the lock, the refusals above);
** _args.c, the reading of arguments; _filter.c, keel._keel.Filter and
** allowed=; _published.c, the module's functions on published indexes
** (prune, versions); _errors.c, keel's errors as Python exceptions, which
** all of them raise.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define PY_ARRAY_UNIQUE_SYMBOL keel_ARRAY_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "keel.h"
#include "_args.h"
#include "_errors.h"
#include "_filter.h"
#include "_handle.h"
#include "_published.h"

#define MAX_K 1000000 /* keel's own limit on k (checked before allocating) */

/* --- the Index type ------------------------------------------------------ */

static const char *const metric_names[] = {"l2", "cosine", "ip"};
static const char *const precision_names[] = {"f32", "f16"};
static const char *const codes_names[] = {"none", "i8", "i4"};

/* The vectors argument of a call on self (keel_py_get_vectors): shape
** (dim,), or (n, dim) when batch. */
static PyArrayObject *
index_vectors(IndexObject *self, PyObject *obj, int batch, const char *fn)
{
    if (self->dim == 0) { /* never opened: say so, not "0 dimensions" */
        keel_py_closed_error(self);
        return NULL;
    }
    return keel_py_get_vectors(obj, self->dim, batch, fn);
}

/* --- writes -------------------------------------------------------------- */

static PyObject *
index_add(IndexObject *self, PyObject *const *args, Py_ssize_t nargs,
          PyObject *kwnames)
{
    static const char *const names[] = {"vector", "id"};
    PyObject *a[2];
    if (keel_py_parse_args("add", args, nargs, kwnames, names, 2, 1, a))
        return NULL;
    uint64_t id = 0;
    int with_id = a[1] && a[1] != Py_None;
    if (with_id && keel_py_get_id(a[1], "add", &id))
        return NULL;
    PyArrayObject *v = index_vectors(self, a[0], 0, "add");
    if (!v)
        return NULL;
    if (keel_py_enter_vectors(self, v, 0, "add()")) {
        Py_DECREF(v);
        return NULL;
    }
    const float *data = PyArray_DATA(v);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = with_id ? keel_add_with_id(self->idx, id, data)
                 : keel_add(self->idx, data, &id);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    Py_DECREF(v);
    if (rc)
        return keel_py_raise(rc);
    return PyLong_FromUnsignedLongLong(id);
}

static PyObject *
index_add_batch(IndexObject *self, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    static const char *const names[] = {"vectors", "ids"};
    PyObject *a[2];
    if (keel_py_parse_args("add_batch", args, nargs, kwnames, names, 2, 1,
                           a))
        return NULL;
    /* Inputs are converted before the handle is taken: conversion runs
     * Python code, which must not wait for this handle's lock. */
    PyArrayObject *v = index_vectors(self, a[0], 1, "add_batch");
    PyArrayObject *ids = NULL, *out = NULL;
    if (!v)
        goto fail;
    npy_intp n = PyArray_DIM(v, 0);
    if (a[1] && a[1] != Py_None &&
        !(ids = keel_py_get_ids(a[1], "add_batch", n)))
        goto fail;
    out = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_UINT64);
    if (!out || keel_py_enter_vectors(self, v, 1, "add_batch()"))
        goto fail;
    const float *data = PyArray_DATA(v);
    const uint64_t *idp = ids ? PyArray_DATA(ids) : NULL;
    uint64_t *outp = PyArray_DATA(out);
    struct busy b;
    keel_py_busy_push(&b, self, "add_batch");
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_add_batch(self->idx, data, (size_t)n, idp, outp);
    Py_END_ALLOW_THREADS
    keel_py_busy_pop(&b);
    keel_py_leave(self);
    Py_DECREF(v);
    Py_XDECREF(ids);
    if (rc) {
        Py_DECREF(out);
        return keel_py_raise(rc);
    }
    return (PyObject *)out;
fail:
    Py_XDECREF(v);
    Py_XDECREF(ids);
    Py_XDECREF(out);
    return NULL;
}

/* --- many ids at once, listing ids, backup ------------------------------- */

/* get(ids): the (n, d) float32 array of their vectors, all or nothing. */
static PyObject *
index_get_many(IndexObject *self, PyObject *arg)
{
    PyArrayObject *ids = keel_py_get_ids(arg, "get", -1);
    if (!ids)
        return NULL;
    if (keel_py_enter(self, "get()")) {
        Py_DECREF(ids);
        return NULL;
    }
    npy_intp shape[2] = {PyArray_DIM(ids, 0), (npy_intp)self->dim};
    PyArrayObject *v = (PyArrayObject *)PyArray_SimpleNew(2, shape,
                                                          NPY_FLOAT32);
    int rc = 0;
    if (v) {
        const uint64_t *ip = PyArray_DATA(ids);
        float *vp = PyArray_DATA(v);
        size_t n = (size_t)shape[0];
        Py_BEGIN_ALLOW_THREADS
        rc = keel_get_batch(self->idx, ip, n, vp, NULL);
        Py_END_ALLOW_THREADS
    }
    keel_py_leave(self);
    Py_DECREF(ids);
    if (!v)
        return NULL;
    if (rc) {
        Py_DECREF(v);
        return keel_py_raise(rc);
    }
    return (PyObject *)v;
}

/* delete(ids): all or none. */
static PyObject *
index_delete_many(IndexObject *self, PyObject *arg)
{
    PyArrayObject *ids = keel_py_get_ids(arg, "delete", -1);
    if (!ids)
        return NULL;
    if (keel_py_enter(self, "delete()")) {
        Py_DECREF(ids);
        return NULL;
    }
    const uint64_t *ip = PyArray_DATA(ids);
    size_t n = (size_t)PyArray_DIM(ids, 0);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_delete_batch(self->idx, ip, n);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    Py_DECREF(ids);
    if (rc)
        return keel_py_raise(rc);
    Py_RETURN_NONE;
}

/* ids(): every live id, increasing, as one uint64 array from one view. */
static PyObject *
index_ids(IndexObject *self, PyObject *unused)
{
    (void)unused;
    if (keel_py_enter(self, "ids()"))
        return NULL;
    size_t cap = (size_t)keel_count(self->idx) + 1024, n = 0;
    uint64_t *buf = NULL;
    int rc = KEEL_OK;
    for (;;) {
        uint64_t *b = realloc(buf, cap * sizeof *b);
        if (!b) {
            rc = KEEL_ENOMEM;
            break;
        }
        buf = b;
        Py_BEGIN_ALLOW_THREADS
        rc = keel_ids(self->idx, KEEL_IDS_FIRST, buf, cap, &n);
        Py_END_ALLOW_THREADS
        if (rc || n < cap)
            break;
        cap *= 2; /* a writer added meanwhile: again, from one view */
    }
    keel_py_leave(self);
    if (rc) {
        free(buf);
        if (rc == KEEL_ENOMEM && !keel_errmsg()[0])
            return PyErr_NoMemory();
        return keel_py_raise(rc);
    }
    npy_intp dim = (npy_intp)n;
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(1, &dim, NPY_UINT64);
    if (a && n)
        memcpy(PyArray_DATA(a), buf, n * sizeof *buf);
    free(buf);
    return (PyObject *)a;
}

/* backup(path): a copy of the last flush (keel_backup). */
static PyObject *
index_backup(IndexObject *self, PyObject *arg)
{
    PyObject *path = NULL;
    if (!PyUnicode_Check(arg) && !PyBytes_Check(arg) &&
        !PyObject_HasAttrString(arg, "__fspath__"))
        return PyErr_Format(PyExc_TypeError, "backup() takes a path (str, "
                            "bytes or os.PathLike), not %s (%R)\nhelp: pass "
                            "the file to write, such as "
                            "backup('copy.keel')", Py_TYPE(arg)->tp_name, arg);
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    if (keel_py_enter(self, "backup()")) {
        Py_DECREF(path);
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(path);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_backup(self->idx, p);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    Py_DECREF(path);
    if (rc)
        return keel_py_raise(rc);
    Py_RETURN_NONE;
}

/* publish(url, replace=False): the last flush as the next version at
** s3://BUCKET/PREFIX (keel_publish); returns (bytes sent, the version that
** holds the flush, whether it was there already), which _index.py makes a
** PublishResult. */
static PyObject *
index_publish(IndexObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"url", "replace", NULL};
    PyObject *url_obj;
    int replace = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$p:publish", names,
                                     &url_obj, &replace))
        return NULL;
    if (!PyUnicode_Check(url_obj)) {
        PyErr_Format(PyExc_TypeError, "url has to be a str, not %s\nhelp: "
                     "pass 's3://BUCKET/PREFIX'", Py_TYPE(url_obj)->tp_name);
        return NULL;
    }
    const char *url = PyUnicode_AsUTF8(url_obj);
    if (!url || keel_py_enter(self, "publish()"))
        return NULL;
    uint64_t sent = 0, version = 0;
    int unchanged = 0;
    keel_publish_options o = {.uploaded = &sent, .replace = replace,
                              .version = &version, .unchanged = &unchanged};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_publish(self->idx, url, &o);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    if (rc)
        return keel_py_raise(rc);
    return Py_BuildValue("(KKO)", (unsigned long long)sent,
                         (unsigned long long)version,
                         unchanged ? Py_True : Py_False);
}

/* _published_version(): the version a reader of a URL serves
** (keel_published_version); None for a handle of a file. */
static PyObject *
index_published_version(IndexObject *self, PyObject *unused)
{
    (void)unused;
    if (keel_py_enter(self, "published_version"))
        return NULL;
    uint64_t version = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_published_version(self->idx, &version);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    if (rc == KEEL_EINVAL)
        Py_RETURN_NONE; /* a file: no published version */
    if (rc)
        return keel_py_raise(rc);
    return PyLong_FromUnsignedLongLong(version);
}

static PyObject *
index_delete(IndexObject *self, PyObject *arg)
{
    uint64_t id;
    if (!keel_py_one_id(arg))
        return index_delete_many(self, arg);
    if (keel_py_get_id(arg, "delete", &id) || keel_py_enter(self, "delete()"))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_delete(self->idx, id);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    if (rc)
        return keel_py_raise(rc);
    Py_RETURN_NONE;
}

/* flush, warm, refresh, check, compact: no arguments, GIL released. name
** is the method; runs_handlers is nonzero for a call that runs the cancel
** callback (compact). */
static PyObject *
simple_call(IndexObject *self, int (*fn)(keel_index *), const char *name,
            int runs_handlers)
{
    char what[32];
    snprintf(what, sizeof what, "%s()", name);
    if (keel_py_enter(self, what))
        return NULL;
    struct busy b;
    if (runs_handlers)
        keel_py_busy_push(&b, self, name);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fn(self->idx);
    Py_END_ALLOW_THREADS
    if (runs_handlers)
        keel_py_busy_pop(&b);
    keel_py_leave(self);
    if (rc)
        return keel_py_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *
index_flush(IndexObject *self, PyObject *unused)
{
    (void)unused;
    return simple_call(self, keel_flush, "flush", 0);
}

static PyObject *
index_warm(IndexObject *self, PyObject *unused)
{
    (void)unused;
    return simple_call(self, keel_warm, "warm", 0);
}

static PyObject *
index_refresh(IndexObject *self, PyObject *unused)
{
    (void)unused;
    return simple_call(self, keel_refresh, "refresh", 0);
}

static PyObject *
index_check(IndexObject *self, PyObject *unused)
{
    (void)unused;
    return simple_call(self, keel_check, "check", 0);
}

static PyObject *
index_compact(IndexObject *self, PyObject *unused)
{
    (void)unused;
    /* Shared, like a search: keel lets searches (and waits writes) go on
     * during a compaction; only close must wait for it. */
    return simple_call(self, keel_compact, "compact", 1);
}

/* --- reads --------------------------------------------------------------- */

typedef struct {
    keel_search_params p;
    keel_py_allowed allow;
    size_t k;
} search_args;

/* Parses (query(ies), k=10, ef=None, allowed=None). */
static int
parse_search(int batch, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames, PyObject **query, search_args *s)
{
    static const char *const names[] = {"query", "k", "ef", "allowed"};
    static const char *const bnames[] = {"queries", "k", "ef", "allowed"};
    const char *fn = batch ? "search_batch" : "search";
    PyObject *a[4];
    memset(s, 0, sizeof *s);
    if (keel_py_parse_args(fn, args, nargs, kwnames, batch ? bnames : names,
                           4, 1, a))
        return -1;
    *query = a[0];
    long long k = 10, ef = 0;
    if (a[1] && keel_py_get_count(a[1], "k", fn, 1, MAX_K, "1,000,000",
                                  "pass how many results to return, such "
                                  "as 10", &k))
        return -1;
    if (a[2] && a[2] != Py_None &&
        keel_py_get_count(a[2], "ef", fn, 1, 100000, "100,000",
                          "pass a search width such as 64 (at least k), or "
                          "None for the index's ef_search", &ef))
        return -1;
    s->k = (size_t)k;
    s->p.ef = (uint32_t)ef;
    if (a[3] && keel_py_allowed_parse(a[3], fn, batch, &s->allow, &s->p)) {
        keel_py_allowed_release(&s->allow);
        return -1;
    }
    return 0;
}

/* Splits n keel_results into two new arrays of shape dims, padding rows
** past got[i] with UINT64_MAX and inf. got NULL means dims[0] results. */
static PyObject *
split_results(const keel_result *r, const size_t *got, int nd, npy_intp *dims)
{
    PyArrayObject *ids = (PyArrayObject *)PyArray_SimpleNew(nd, dims,
                                                            NPY_UINT64);
    PyArrayObject *dist = (PyArrayObject *)PyArray_SimpleNew(nd, dims,
                                                             NPY_FLOAT32);
    if (!ids || !dist) {
        Py_XDECREF(ids);
        Py_XDECREF(dist);
        return NULL;
    }
    uint64_t *ip = PyArray_DATA(ids);
    float *dp = PyArray_DATA(dist);
    npy_intp rows = nd == 2 ? dims[0] : 1, k = dims[nd - 1];
    for (npy_intp i = 0; i < rows; i++) {
        npy_intp valid = got ? (npy_intp)got[i] : k;
        const keel_result *row = r + i * k;
        for (npy_intp j = 0; j < valid; j++) {
            ip[i * k + j] = row[j].id;
            dp[i * k + j] = row[j].distance;
        }
        for (npy_intp j = valid; j < k; j++) {
            ip[i * k + j] = UINT64_MAX;
            dp[i * k + j] = INFINITY;
        }
    }
    return Py_BuildValue("(NN)", ids, dist);
}

static PyObject *
index_search(IndexObject *self, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    PyObject *query, *res = NULL;
    search_args s;
    keel_result stack[32], *out = stack;
    if (parse_search(0, args, nargs, kwnames, &query, &s))
        return NULL;
    PyArrayObject *q = index_vectors(self, query, 0, "search");
    if (!q)
        goto done;
    if (s.k > sizeof stack / sizeof *stack &&
        !(out = PyMem_Malloc(s.k * sizeof *out))) {
        PyErr_NoMemory();
        goto done;
    }
    if (keel_py_enter_vectors(self, q, 0, "search()"))
        goto done;
    const float *qp = PyArray_DATA(q);
    size_t n = 0;
    int rc;
    struct busy b;
    if (self->remote)
        keel_py_busy_push(&b, self, "search");
    Py_BEGIN_ALLOW_THREADS
    rc = keel_search(self->idx, qp, s.k, &s.p, out, &n);
    Py_END_ALLOW_THREADS
    if (self->remote)
        keel_py_busy_pop(&b);
    keel_py_leave(self);
    if (rc) {
        keel_py_raise(rc);
        goto done;
    }
    npy_intp dims[1] = {(npy_intp)n};
    res = split_results(out, NULL, 1, dims);
done:
    if (out && out != stack)
        PyMem_Free(out);
    Py_XDECREF(q);
    keel_py_allowed_release(&s.allow);
    return res;
}

static PyObject *
index_search_batch(IndexObject *self, PyObject *const *args,
                   Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *queries, *res = NULL;
    search_args s;
    keel_result *out = NULL;
    size_t *got = NULL;
    if (parse_search(1, args, nargs, kwnames, &queries, &s))
        return NULL;
    PyArrayObject *q = index_vectors(self, queries, 1, "search_batch");
    if (!q)
        goto done;
    npy_intp nq = PyArray_DIM(q, 0);
    if (s.allow.per_query && s.allow.nper != (size_t)nq) {
        PyErr_Format(keel_py_invalid_class(),
                     "search_batch() was given %zu allow-lists for %zd "
                     "queries\nhelp: pass one per query (None for every id), "
                     "or one allow-list for all", s.allow.nper, nq);
        goto done;
    }
    if ((size_t)nq > SIZE_MAX / sizeof *out / s.k) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyMem_Malloc(nq ? (size_t)nq * s.k * sizeof *out : 1);
    got = PyMem_Malloc(nq ? (size_t)nq * sizeof *got : 1);
    if (!out || !got) {
        PyErr_NoMemory();
        goto done;
    }
    if (keel_py_enter_vectors(self, q, 1, "search_batch()"))
        goto done;
    const float *qp = PyArray_DATA(q);
    int rc;
    struct busy b;
    if (self->remote)
        keel_py_busy_push(&b, self, "search_batch");
    Py_BEGIN_ALLOW_THREADS
    rc = keel_search_batch(self->idx, qp, (size_t)nq, s.k, &s.p, out, got);
    Py_END_ALLOW_THREADS
    if (self->remote)
        keel_py_busy_pop(&b);
    keel_py_leave(self);
    if (rc) {
        keel_py_raise(rc);
        goto done;
    }
    npy_intp dims[2] = {nq, (npy_intp)s.k};
    res = split_results(out, got, 2, dims);
done:
    PyMem_Free(out);
    PyMem_Free(got);
    Py_XDECREF(q);
    keel_py_allowed_release(&s.allow);
    return res;
}

/* search_radius(query, radius, max_results=1000, ef=None, allowed=None) */
static PyObject *
index_search_radius(IndexObject *self, PyObject *const *args,
                    Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"query", "radius", "max_results",
                                        "ef", "allowed"};
    const char *fn = "search_radius";
    PyObject *a[5], *res = NULL;
    keel_py_allowed allow = {0};
    keel_search_params p = {0};
    keel_result *out = NULL;
    PyArrayObject *q = NULL;
    long long cap = 1000, ef = 0;
    if (keel_py_parse_args(fn, args, nargs, kwnames, names, 5, 2, a))
        return NULL;
    if (PyBool_Check(a[1]) || !(PyFloat_Check(a[1]) || PyLong_Check(a[1]) ||
                                PyNumber_Check(a[1])) ||
        PyComplex_Check(a[1]))
        return PyErr_Format(PyExc_TypeError, "search_radius() takes radius "
                            "as a number, not %s (%R)\nhelp: pass a distance "
                            "such as radius=0.5", Py_TYPE(a[1])->tp_name,
                            a[1]);
    double r = PyFloat_AsDouble(a[1]);
    if (r == -1.0 && PyErr_Occurred())
        return NULL;
    if (isinf(r))
        return PyErr_Format(keel_py_invalid_class(), "radius is %R, but "
                            "has to be finite\nhelp: for the nearest "
                            "max_results whatever their distance, use "
                            "search(query, k=max_results)", a[1]);
    if (isfinite(r) && fabs(r) > 3.4028234663852886e38)
        return PyErr_Format(keel_py_invalid_class(), "radius is %R, "
                            "beyond what a float32 distance reaches\nhelp: "
                            "pass a finite distance such as 0.5", a[1]);
    if (a[2] && keel_py_get_count(a[2], "max_results", fn, 1, MAX_K,
                                  "1,000,000", "pass how many results to "
                                  "return at most, such as 1000", &cap))
        return NULL;
    if (a[3] && a[3] != Py_None &&
        keel_py_get_count(a[3], "ef", fn, 1, 100000, "100,000",
                          "pass a search width such as 64, or None for the "
                          "index's ef_search", &ef))
        return NULL;
    p.ef = (uint32_t)ef;
    if (a[4] && keel_py_allowed_parse(a[4], fn, 0, &allow, &p))
        goto done;
    if (!(q = index_vectors(self, a[0], 0, fn)))
        goto done;
    if (!(out = PyMem_Malloc((size_t)cap * sizeof *out))) {
        PyErr_NoMemory();
        goto done;
    }
    if (keel_py_enter_vectors(self, q, 0, "search_radius()"))
        goto done;
    const float *qp = PyArray_DATA(q);
    size_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_search_radius(self->idx, qp, (float)r, (size_t)cap, &p, out,
                            &n);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    if (rc) {
        keel_py_raise(rc);
        goto done;
    }
    npy_intp dims[1] = {(npy_intp)n};
    res = split_results(out, NULL, 1, dims);
done:
    PyMem_Free(out);
    Py_XDECREF(q);
    keel_py_allowed_release(&allow);
    return res;
}

static PyObject *
index_get(IndexObject *self, PyObject *arg)
{
    uint64_t id;
    if (!keel_py_one_id(arg))
        return index_get_many(self, arg);
    if (keel_py_get_id(arg, "get", &id) || keel_py_enter(self, "get()"))
        return NULL;
    npy_intp dim = (npy_intp)self->dim;
    PyArrayObject *v = (PyArrayObject *)PyArray_SimpleNew(1, &dim,
                                                          NPY_FLOAT32);
    if (!v) {
        keel_py_leave(self);
        return NULL;
    }
    float *vp = PyArray_DATA(v);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_get(self->idx, id, vp);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    if (rc) {
        Py_DECREF(v);
        return keel_py_raise(rc);
    }
    return (PyObject *)v;
}

/* `x in index`, as for the keys of a dict: x is in it when an id is equal
** to x with the same hash, so an integral float is that id (5.0 == 5) and
** True is id 1 (True == 1); anything else that is not an id is not in it.
** A closed index raises whatever x is. */
static int
index_contains(IndexObject *self, PyObject *arg)
{
    uint64_t id;
    if (keel_py_check_usable(self, "the in operator"))
        return -1;
    int is_id = keel_py_key_id(arg, &id);
    if (is_id <= 0)
        return is_id;
    if (keel_py_enter(self, "the in operator"))
        return -1;
    float *buf = PyMem_Malloc(self->dim * sizeof *buf);
    if (!buf) {
        keel_py_leave(self);
        PyErr_NoMemory();
        return -1;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_get(self->idx, id, buf);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    PyMem_Free(buf);
    if (rc == KEEL_ENOTFOUND)
        return 0;
    if (rc) {
        keel_py_raise(rc);
        return -1;
    }
    return 1;
}

static Py_ssize_t
index_len(IndexObject *self)
{
    if (keel_py_enter(self, "len()"))
        return -1;
    uint64_t n;
    Py_BEGIN_ALLOW_THREADS
    n = keel_count(self->idx);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    return (Py_ssize_t)n;
}

static PyObject *
index_pending(IndexObject *self, PyObject *unused)
{
    (void)unused;
    if (keel_py_enter(self, "_pending()"))
        return NULL;
    uint64_t adds = 0, deletes = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_pending(self->idx, &adds, &deletes);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    if (rc)
        return keel_py_raise(rc);
    return Py_BuildValue("(KK)", (unsigned long long)adds,
                         (unsigned long long)deletes);
}

static PyObject *
index_stats(IndexObject *self, PyObject *unused)
{
    (void)unused;
    if (keel_py_enter(self, "stats()"))
        return NULL;
    keel_stats st;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_stat(self->idx, &st);
    Py_END_ALLOW_THREADS
    keel_py_leave(self);
    if (rc)
        return keel_py_raise(rc);
    return Py_BuildValue(
        "{sIsssssssIsKsKsKsKsIsIsIsKsKsKsO}",
        "dimensions", st.dim,
        "metric", metric_names[st.metric <= KEEL_IP ? st.metric : 0],
        "precision", precision_names[st.precision <= KEEL_F16 ? st.precision
                                                                : 0],
        "codes", codes_names[st.codes <= KEEL_CODES_I4 ? st.codes : 0],
        "max_connections", st.max_connections,
        "count", (unsigned long long)st.count,
        "deleted", (unsigned long long)st.deleted,
        "slots", (unsigned long long)st.slots,
        "next_id", (unsigned long long)st.next_id,
        "max_level", st.max_level,
        "segments", st.segments,
        "heap_chunks", st.heap_chunks,
        "file_bytes", (unsigned long long)st.file_bytes,
        "allocated_bytes", (unsigned long long)st.allocated_bytes,
        "snapshot", (unsigned long long)st.snapshot,
        "read_only", st.is_reader ? Py_True : Py_False);
}

/* --- attributes ---------------------------------------------------------- */

static PyObject *
get_dimensions(IndexObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLong(self->dim);
}

static PyObject *
get_metric(IndexObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(metric_names[self->metric]);
}

static PyObject *
get_precision(IndexObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(precision_names[self->precision]);
}

static PyObject *
get_codes(IndexObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(codes_names[self->codes]);
}

static PyObject *
get_path(IndexObject *self, void *closure)
{
    (void)closure;
    Py_INCREF(self->path);
    return self->path;
}

static PyObject *
get_read_only(IndexObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->reader);
}

static PyObject *
get_closed(IndexObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->idx == NULL);
}

static PyObject *
get_inherited(IndexObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(keel_py_inherited(self));
}

/* The call this thread is inside on self, running a signal handler
** (such as 'add_batch'), or None. */
static PyObject *
get_busy(IndexObject *self, void *closure)
{
    (void)closure;
    const char *call = keel_py_busy_call(self);
    if (call)
        return PyUnicode_FromString(call);
    Py_RETURN_NONE;
}

static PyGetSetDef index_getset[] = {
    {"dimensions", (getter)get_dimensions, NULL,
     "Length of the vectors (int).", NULL},
    {"metric", (getter)get_metric, NULL,
     "Distance: 'l2', 'cosine' or 'ip'.", NULL},
    {"precision", (getter)get_precision, NULL,
     "Stored precision: 'f32' or 'f16'.", NULL},
    {"codes", (getter)get_codes, NULL,
     "Traversal codes: 'none', 'i8' or 'i4'.", NULL},
    {"path", (getter)get_path, NULL, "Path of the index file.", NULL},
    {"read_only", (getter)get_read_only, NULL,
     "True for a reader handle.", NULL},
    {"closed", (getter)get_closed, NULL, "True once closed.", NULL},
    {"_inherited", (getter)get_inherited, NULL, "True in a child process "
     "for a handle opened before fork() (it may only be closed).", NULL},
    {"_busy", (getter)get_busy, NULL, "The call ('add_batch', 'compact', "
     "a URL reader's 'search' or 'search_batch') "
     "this thread is inside on the index, running a signal handler; None "
     "when it is in none.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

#define FAST (METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef index_methods[] = {
    {"_open", (PyCFunction)keel_py_index_open, METH_VARARGS,
     "_open(path, dim, metric, precision, codes, M, ef_construction, "
     "ef_search, threads, flags, reader, cache_dir=None, cache_bytes=0, "
     "memory_cache_bytes=0): internal; use VectorIndex or IndexReader."},
    {"close", (PyCFunction)keel_py_index_close, METH_NOARGS,
     "close()\n--\n\nClose the handle; unflushed changes are lost. Calling "
     "it again does nothing."},
    {"add", (PyCFunction)(void (*)(void))index_add, FAST,
     "add(vector, id=None)\n--\n\nAdd one vector (dimensions floats) and "
     "return its id: the given one, or the next automatic id."},
    {"add_batch", (PyCFunction)(void (*)(void))index_add_batch, FAST,
     "add_batch(vectors, ids=None)\n--\n\nAdd the rows of a 2-D array as "
     "one step (all or none); return their ids as a uint64 array."},
    {"delete", (PyCFunction)index_delete, METH_O,
     "delete(ids)\n--\n\nDelete the live vector with this id, or those of "
     "a sequence or array of distinct ids, all or none (durable at the next "
     "flush)."},
    {"flush", (PyCFunction)index_flush, METH_NOARGS,
     "flush()\n--\n\nCommit every add and delete since the last flush."},
    {"compact", (PyCFunction)index_compact, METH_NOARGS,
     "compact()\n--\n\nFlush, then rewrite the live vectors into a new file "
     "and swap it in."},
    {"warm", (PyCFunction)index_warm, METH_NOARGS,
     "warm()\n--\n\nStart reading the index into memory in the background; "
     "returns at once."},
    {"refresh", (PyCFunction)index_refresh, METH_NOARGS,
     "refresh()\n--\n\nReader: take a new snapshot of the last flush now. "
     "Does nothing on a writer."},
    {"search", (PyCFunction)(void (*)(void))index_search, FAST,
     "search(query, k=10, ef=None, allowed=None)\n--\n\nThe k nearest "
     "vectors to one query: (ids uint64, distances float32), nearest "
     "first."},
    {"search_batch", (PyCFunction)(void (*)(void))index_search_batch, FAST,
     "search_batch(queries, k=10, ef=None, allowed=None)\n--\n\nSearch each "
     "row of a 2-D array: (ids, distances) of shape (n, k); short rows are "
     "padded with 2**64-1 and inf."},
    {"search_radius", (PyCFunction)(void (*)(void))index_search_radius, FAST,
     "search_radius(query, radius, max_results=1000, ef=None, allowed=None)"
     "\n--\n\nEvery vector within distance radius of query, nearest first, "
     "at most max_results (approximate, like search)."},
    {"get", (PyCFunction)index_get, METH_O,
     "get(ids)\n--\n\nThe stored vector of a live id (float32 array of "
     "shape (d,)), or of a sequence or array of ids (shape (n, d)), all or "
     "nothing."},
    {"ids", (PyCFunction)index_ids, METH_NOARGS,
     "ids()\n--\n\nEvery live id, increasing (uint64 array); a reader's "
     "from one snapshot."},
    {"backup", (PyCFunction)index_backup, METH_O,
     "backup(path)\n--\n\nWrite a copy of the last flush to path (a "
     "temporary file beside it, synced, renamed over it), while the writer "
     "goes on writing."},
    {"publish", (PyCFunction)(void (*)(void))index_publish,
     METH_VARARGS | METH_KEYWORDS,
     "publish(url, *, replace=False)\n--\n\nPublish the last flush to "
     "'s3://BUCKET/PREFIX' as the next version (only changed pages are sent; "
     "endpoint and keys from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
     "AWS_SECRET_ACCESS_KEY); returns (bytes sent, version, unchanged). "
     "IndexReader('s3://...') opens it. Another index at the URL is refused "
     "unless replace=True; its readers then keep their version."},
    {"_published_version", (PyCFunction)index_published_version, METH_NOARGS,
     "_published_version()\n--\n\nInternal: the version a reader of a URL "
     "serves, or None for a file."},
    {"_pending", (PyCFunction)index_pending, METH_NOARGS,
     "_pending()\n--\n\nInternal: (adds, deletes) since the last flush."},
    {"stats", (PyCFunction)index_stats, METH_NOARGS,
     "stats()\n--\n\nFacts about the index as a dict."},
    {"check", (PyCFunction)index_check, METH_NOARGS,
     "check()\n--\n\nVerify the last commit; raise CorruptIndexError if "
     "damaged."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods index_as_sequence = {
    .sq_length = (lenfunc)index_len,
    .sq_contains = (objobjproc)index_contains,
};

static PyTypeObject IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keel._keel.Index",
    .tp_basicsize = sizeof(IndexObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A keel index handle (base of keel.VectorIndex).",
    .tp_new = keel_py_index_new,
    .tp_dealloc = (destructor)keel_py_index_dealloc,
    .tp_traverse = (traverseproc)keel_py_index_traverse,
    .tp_weaklistoffset = offsetof(IndexObject, weakrefs),
    .tp_methods = index_methods,
    .tp_getset = index_getset,
    .tp_as_sequence = &index_as_sequence,
};

/* --- module -------------------------------------------------------------- */

/* _setup(classes, index_not_found, helpers): classes is a sequence of 15
** exception classes indexed by keel code ([0] = keel.Error). */
static PyObject *
module_setup(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *classes, *inf, *helpers;
    if (!PyArg_ParseTuple(args, "OOO:_setup", &classes, &inf, &helpers))
        return NULL;
    if (keel_py_errors_setup(classes, inf))
        return NULL;
    if (keel_py_args_setup(helpers))
        return NULL;
    if (keel_py_filter_setup(NULL, helpers))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
module_strerror(PyObject *mod, PyObject *arg)
{
    (void)mod;
    if (!PyLong_Check(arg))
        return PyErr_Format(PyExc_TypeError, "strerror() takes an integer "
                            "code, not %s (%R)\nhelp: pass an int, such as "
                            "the .code of a keel.Error",
                            Py_TYPE(arg)->tp_name, arg);
    int overflow;
    long long rc = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (rc == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || rc < INT_MIN || rc > INT_MAX)
        rc = -1; /* no code: keel says "unknown error code" */
    return PyUnicode_FromString(keel_strerror((int)rc));
}

static PyMethodDef module_methods[] = {
    {"_setup", module_setup, METH_VARARGS, "Internal: connect the Python "
     "layer (exception classes and input helpers)."},
    {"strerror", module_strerror, METH_O, "strerror(code)\n--\n\nkeel's short "
     "description of an error code."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef keel_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "keel._keel",
    .m_doc = "C extension of keel; use the keel package.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__keel(void)
{
    import_array();
    if (PyType_Ready(&IndexType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&keel_module);
    if (!m)
        return NULL;
    Py_INCREF(&IndexType);
    if (PyModule_AddObject(m, "Index", (PyObject *)&IndexType) < 0) {
        Py_DECREF(&IndexType);
        Py_DECREF(m);
        return NULL;
    }
    if (keel_py_filter_setup(m, NULL) < 0 ||
        PyModule_AddFunctions(m, keel_py_published_methods) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddStringConstant(m, "KEEL_VERSION", KEEL_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "KEEL_VERSION_NUMBER",
                                keel_libversion_number()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    keel_py_handle_init();
    return m;
}
