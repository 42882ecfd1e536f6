/* _args.c -- the arguments of the extension's calls, read as keel takes
** them (_keel.c's methods): vectorcall arguments matched against their
** names, counts (k, ef, max_results), ids, and float32 vector and uint64
** id arrays. Input that already has keel's form is used as it is (an
** array in place, with no copy); anything else goes to a helper in
** keel/_coerce.py, which converts it or raises TypeError / ValueError in
** Python terms. A value out of range raises keel.InvalidArgumentError
** naming it.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL keel_ARRAY_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <math.h>
#include <stdint.h>

#include "_args.h"
#include "_errors.h"

/* --- the helpers (set once by keel/__init__.py through _setup) ----------- */

static PyObject *h_vectors;         /* _coerce.vectors(obj, fn, dim, batch) */
static PyObject *h_ids;             /* _coerce.ids(obj, fn, n) */
static PyObject *h_id;              /* _coerce.one_id(obj, fn) */
static PyObject *h_count;           /* _coerce.count(obj, name, fn) */
static PyObject *h_key;             /* _coerce.key(obj): `obj in index` */
static PyObject *h_keyword;         /* _coerce.bad_keyword(fn, name, names) */

int
keel_py_args_setup(PyObject *helpers)
{
    static const struct {
        PyObject **slot;
        const char *name;
    } hs[] = {{&h_vectors, "vectors"}, {&h_ids, "ids"}, {&h_id, "one_id"},
              {&h_count, "count"}, {&h_keyword, "bad_keyword"},
              {&h_key, "key"}};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) {
        PyObject *f = PyObject_GetAttrString(helpers, hs[i].name);
        if (!f)
            return -1;
        Py_XSETREF(*hs[i].slot, f);
    }
    return 0;
}

/* --- arguments ----------------------------------------------------------- */

/* "a, b, c" for names[0..n-1], into buf. */
static const char *
name_list(char *buf, size_t size, const char *const *names, int n)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s",
                                 i ? ", " : "", names[i]);
    return buf;
}

/* Parses vectorcall arguments against names[0..n-1]; the first nreq are
** required. out[i] receives a borrowed reference or NULL. */
int
keel_py_parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames, const char *const *names, int n,
                   int nreq, PyObject **out)
{
    char list[128];
    nargs = PyVectorcall_NARGS(nargs);
    for (int i = 0; i < n; i++)
        out[i] = NULL;
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments "
                     "(%zd given)\nhelp: %s() takes %s", fn, n, nargs, fn,
                     name_list(list, sizeof list, names, n));
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        int found = -1;
        for (int i = 0; i < n && found < 0; i++)
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0)
                found = i;
        if (found < 0) {
            PyObject *all = PyTuple_New(n);
            if (!all)
                return -1;
            for (int i = 0; i < n; i++) {
                PyObject *name = PyUnicode_FromString(names[i]);
                if (!name) {
                    Py_DECREF(all);
                    return -1;
                }
                PyTuple_SET_ITEM(all, i, name);
            }
            PyObject *r = PyObject_CallFunction(h_keyword, "sOO", fn, key,
                                                all);
            Py_DECREF(all);
            Py_XDECREF(r);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected "
                             "keyword argument '%U'", fn, key);
            return -1;
        }
        if (out[found]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for "
                         "argument '%s'\nhelp: pass %s either by position or "
                         "by name, not both (%s() takes %s)", fn,
                         names[found], names[found], fn,
                         name_list(list, sizeof list, names, n));
            return -1;
        }
        out[found] = args[nargs + j];
    }
    for (int i = 0; i < nreq; i++)
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument "
                         "'%s'\nhelp: %s() takes %s", fn, names[i], fn,
                         name_list(list, sizeof list, names, n));
            return -1;
        }
    return 0;
}

/* Drops o (the value as coerced) and raises keel's InvalidArgumentError
** with msg (NULL: the error making it left is kept). Returns -1. */
static int
refuse(PyObject *o, PyObject *msg)
{
    Py_DECREF(o);
    if (msg) {
        PyErr_SetObject(keel_py_invalid_class(), msg);
        Py_DECREF(msg);
    }
    return -1;
}

/* An integer argument in lo..hi (k, ef). Plain ints take the fast path;
** anything else goes to _coerce.count, which rejects floats and strings.
** A value out of range is named as given, not clamped. */
int
keel_py_get_count(PyObject *obj, const char *name, const char *fn,
                  long long lo, long long hi, const char *limit,
                  const char *help, long long *out)
{
    PyObject *o = obj;
    if (!PyLong_CheckExact(o)) {
        o = PyObject_CallFunction(h_count, "Oss", obj, name, fn);
        if (!o)
            return -1;
    } else {
        Py_INCREF(o);
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(o);
        return -1;
    }
    if (overflow || v < lo || v > hi) {
        int low = overflow < 0 || (!overflow && v < lo);
        return refuse(o, PyUnicode_FromFormat(
            "%s is %S, but has to be %s %s\nhelp: %s", name, o,
            low ? "at least" : "at most", low ? (lo ? "1" : "0") : limit,
            help));
    }
    Py_DECREF(o);
    *out = v;
    return 0;
}

/* An id: an int in 0 .. 2**64-1 (keel itself refuses 2**64-1). */
int
keel_py_get_id(PyObject *obj, const char *fn, uint64_t *out)
{
    PyObject *o = obj;
    if (!PyLong_CheckExact(o)) {
        o = PyObject_CallFunction(h_id, "Os", obj, fn);
        if (!o)
            return -1;
    } else {
        Py_INCREF(o);
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return refuse(o, PyUnicode_FromFormat(
            "id %R is out of range\nhelp: ids are integers from 0 to "
            "18446744073709551614 (2**64 - 2)", o));
    }
    Py_DECREF(o);
    *out = v;
    return 0;
}

/* Float32 input: a new reference to a C-contiguous aligned native float32
** array of shape (dim,) or (n, dim), the caller's own when it already is. */
PyArrayObject *
keel_py_get_vectors(PyObject *obj, uint32_t dim, int batch, const char *fn)
{
    if (PyArray_Check(obj)) {
        PyArrayObject *a = (PyArrayObject *)obj;
        if (PyArray_TYPE(a) == NPY_FLOAT32 && PyArray_ISCARRAY_RO(a) &&
            PyArray_ISNOTSWAPPED(a) && PyArray_NDIM(a) == 1 + batch &&
            PyArray_DIM(a, batch) == (npy_intp)dim) {
            Py_INCREF(a);
            return a;
        }
    }
    PyObject *r = PyObject_CallFunction(h_vectors, "OsIi", obj, fn,
                                        (unsigned)dim, batch);
    if (!r)
        return NULL;
    PyArrayObject *a = (PyArrayObject *)r;
    if (!PyArray_Check(r) || PyArray_TYPE(a) != NPY_FLOAT32 ||
        !PyArray_ISCARRAY_RO(a) || PyArray_NDIM(a) != 1 + batch ||
        PyArray_DIM(a, batch) != (npy_intp)dim) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_SystemError, "keel._coerce.vectors returned "
                        "an array of the wrong kind");
        return NULL;
    }
    return a;
}

/* Id input: a new reference to a 1-D C-contiguous native uint64 array, of n
** entries unless n is -1. */
PyArrayObject *
keel_py_get_ids(PyObject *obj, const char *fn, npy_intp n)
{
    if (PyArray_Check(obj)) {
        PyArrayObject *a = (PyArrayObject *)obj;
        if (PyArray_TYPE(a) == NPY_UINT64 && PyArray_ISCARRAY_RO(a) &&
            PyArray_ISNOTSWAPPED(a) && PyArray_NDIM(a) == 1 &&
            (n < 0 || PyArray_DIM(a, 0) == n)) {
            Py_INCREF(a);
            return a;
        }
    }
    PyObject *r = PyObject_CallFunction(h_ids, "Osn", obj, fn, (Py_ssize_t)n);
    if (!r)
        return NULL;
    PyArrayObject *a = (PyArrayObject *)r;
    if (!PyArray_Check(r) || PyArray_TYPE(a) != NPY_UINT64 ||
        !PyArray_ISCARRAY_RO(a) || PyArray_NDIM(a) != 1 ||
        (n >= 0 && PyArray_DIM(a, 0) != n)) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_SystemError, "keel._coerce.ids returned an "
                        "array of the wrong kind");
        return NULL;
    }
    return a;
}

/* Whether get and delete were given one id (an int, a numpy integer or a
** 0-d array) rather than many (a sequence, a range, a 1-D array). */
int
keel_py_one_id(PyObject *obj)
{
    if (PyArray_Check(obj))
        return PyArray_NDIM((PyArrayObject *)obj) == 0;
    return PyIndex_Check(obj) || PyUnicode_Check(obj) || PyBytes_Check(obj) ||
           PyFloat_Check(obj);
}

/* x is in an index when an id is equal to x with the same hash, as for the
** keys of a dict, so an integral float is that id (5.0 == 5) and True is
** id 1 (True == 1); anything else that is not an id is in no index. */
int
keel_py_key_id(PyObject *arg, uint64_t *id)
{
    if (PyFloat_Check(arg)) {
        double d = PyFloat_AS_DOUBLE(arg);
        if (!(d >= 0 && d < 18446744073709551616.0) || d != floor(d))
            return 0;
        *id = (uint64_t)d;
    } else {
        PyObject *o = arg;
        if (PyLong_CheckExact(arg)) {
            Py_INCREF(o);
        } else if (!(o = PyObject_CallOneArg(h_key, arg))) {
            return -1;
        } else if (o == Py_None) {
            Py_DECREF(o);
            return 0; /* no int equals it: not an id */
        }
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow && v >= 0) {
            *id = (uint64_t)v;
        } else if (overflow > 0) {
            *id = PyLong_AsUnsignedLongLong(o);
            if (*id == (uint64_t)-1 && PyErr_Occurred()) {
                PyErr_Clear(); /* past 2**64 - 1: not an id */
                Py_DECREF(o);
                return 0;
            }
        } else {
            Py_DECREF(o);
            if (PyErr_Occurred())
                return -1;
            return 0; /* negative: not an id */
        }
        Py_DECREF(o);
    }
    return 1;
}
