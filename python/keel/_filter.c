/* _filter.c -- keel._keel.Filter (a prepared allow-list, keel_filter) and
** the reading of a search's allowed= argument, for _keel.c.
**
** allowed= may be a Filter (used as it is), a range (an interval in C: no
** list is built, however long), a set or frozenset (read in C, without a
** list), a uint64 array (read in place by _keel.c), any other array or
** iterable of ids (converted by keel/_coerce.py), or, for search_batch, a
** list or tuple with one of those (or None) per query. Python's
** keel.Filter subclasses Filter and fills it once (_set_ids, _set_range).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL keel_ARRAY_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include "_errors.h"
#include "_filter.h"

typedef struct {
    PyObject_HEAD
    keel_filter *f;
    PyObject *described; /* repr text: "range(...)" or "5,000 ids" */
} FilterObject;

static PyObject *coerce_allowed; /* _allow.allowed(obj, fn, batch) */

static void
filter_dealloc(FilterObject *self)
{
    keel_filter_free(self->f);
    Py_CLEAR(self->described);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
filter_unset(FilterObject *self)
{
    if (self->f) {
        PyErr_SetString(PyExc_TypeError, "a keel.Filter is made once and "
                        "never changes\nhelp: make a new keel.Filter");
        return -1;
    }
    return 0;
}

/* _set_ids(uint64 array) */
static PyObject *
filter_set_ids(FilterObject *self, PyObject *arg)
{
    if (filter_unset(self))
        return NULL;
    if (!PyArray_Check(arg) || PyArray_TYPE((PyArrayObject *)arg) != NPY_UINT64
        || !PyArray_ISCARRAY_RO((PyArrayObject *)arg) ||
        PyArray_NDIM((PyArrayObject *)arg) != 1) {
        PyErr_SetString(PyExc_TypeError, "_set_ids takes a 1-D C-contiguous "
                        "uint64 array");
        return NULL;
    }
    PyArrayObject *a = (PyArrayObject *)arg;
    const uint64_t *ids = PyArray_DATA(a);
    size_t n = (size_t)PyArray_DIM(a, 0);
    keel_filter *f = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_filter_new(n ? ids : NULL, n, &f);
    Py_END_ALLOW_THREADS
    if (rc)
        return keel_py_raise(rc);
    self->f = f;
    Py_RETURN_NONE;
}

/* _set_range(first, end, step): ids already in 0 .. 2**64-1 */
static PyObject *
filter_set_range(FilterObject *self, PyObject *args)
{
    unsigned long long first, end, step;
    if (filter_unset(self) ||
        !PyArg_ParseTuple(args, "KKK:_set_range", &first, &end, &step))
        return NULL;
    keel_filter *f = NULL;
    int rc = keel_filter_new_range(first, end, step, &f);
    if (rc)
        return keel_py_raise(rc);
    self->f = f;
    Py_RETURN_NONE;
}

static PyObject *
filter_count(FilterObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(keel_filter_count(self->f));
}

static Py_ssize_t
filter_len(FilterObject *self)
{
    uint64_t n = keel_filter_count(self->f);
    if (n > (uint64_t)PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_OverflowError, "this allow-list holds %llu ids, "
                     "more than len() can say\nhelp: read its count "
                     "attribute", (unsigned long long)n);
        return -1;
    }
    return (Py_ssize_t)n;
}

static PyGetSetDef filter_getset[] = {
    {"count", (getter)filter_count, NULL, "How many ids it holds (distinct; "
     "a range's length, however long).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef filter_methods[] = {
    {"_set_ids", (PyCFunction)filter_set_ids, METH_O,
     "Internal: fill from a uint64 array."},
    {"_set_range", (PyCFunction)filter_set_range, METH_VARARGS,
     "Internal: fill with the ids first, first + step, ... below end."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods filter_as_sequence = {
    .sq_length = (lenfunc)filter_len,
};

PyTypeObject KeelFilterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "keel._keel.Filter",
    .tp_basicsize = sizeof(FilterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A prepared allow-list (base of keel.Filter).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)filter_dealloc,
    .tp_methods = filter_methods,
    .tp_getset = filter_getset,
    .tp_as_sequence = &filter_as_sequence,
};

int
keel_py_filter_setup(PyObject *module, PyObject *helpers)
{
    if (helpers) {
        PyObject *f = PyObject_GetAttrString(helpers, "allowed");
        if (!f)
            return -1;
        Py_XSETREF(coerce_allowed, f);
        return 0;
    }
    if (PyType_Ready(&KeelFilterType) < 0)
        return -1;
    Py_INCREF(&KeelFilterType);
    if (PyModule_AddObject(module, "Filter", (PyObject *)&KeelFilterType) < 0)
    {
        Py_DECREF(&KeelFilterType);
        return -1;
    }
    return 0;
}

/* The keel_filter of a Filter object, or NULL with TypeError. */
static const keel_filter *
filter_of(PyObject *obj, const char *fn)
{
    const keel_filter *f = ((FilterObject *)obj)->f;
    if (!f)
        PyErr_Format(PyExc_TypeError, "%s() was given a keel.Filter that was "
                     "never filled\nhelp: make it with keel.Filter(ids)", fn);
    return f;
}

/* A set's ids read in C (no list): a new uint64 array; NULL without an
** exception when a member is not a plain int in range (_coerce then says
** which), or with one on failure. */
static PyArrayObject *
set_ids(PyObject *set)
{
    npy_intp n = PySet_GET_SIZE(set);
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(1, &n, NPY_UINT64);
    PyObject *it = a ? PyObject_GetIter(set) : NULL;
    if (!it) {
        Py_XDECREF(a);
        return NULL;
    }
    uint64_t *p = PyArray_DATA(a);
    npy_intp i = 0;
    for (PyObject *key; (key = PyIter_Next(it)); Py_DECREF(key)) {
        unsigned long long v = 0;
        if (PyLong_CheckExact(key) && i < n)
            v = PyLong_AsUnsignedLongLong(key);
        if (!PyLong_CheckExact(key) || i >= n ||
            (v == (unsigned long long)-1 && PyErr_Occurred())) {
            PyErr_Clear();
            Py_DECREF(key);
            Py_DECREF(it);
            Py_DECREF(a);
            return NULL;
        }
        p[i++] = v;
    }
    Py_DECREF(it);
    if (PyErr_Occurred() || i != n) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

void
keel_py_allowed_release(keel_py_allowed *a)
{
    Py_CLEAR(a->keep);
    Py_CLEAR(a->ids);
    PyMem_Free(a->per);
    a->per = NULL;
    a->nper = 0;
}

int
keel_py_allowed_parse(PyObject *obj, const char *fn, int batch,
                      keel_py_allowed *a, keel_search_params *p)
{
    static const uint64_t no_ids[1] = {0};
    memset(a, 0, sizeof *a);
    if (obj == Py_None)
        return 0;
    if (PyArray_Check(obj)) {
        PyArrayObject *arr = (PyArrayObject *)obj;
        if (PyArray_TYPE(arr) == NPY_UINT64 && PyArray_ISCARRAY_RO(arr) &&
            PyArray_ISNOTSWAPPED(arr) && PyArray_NDIM(arr) == 1) {
            Py_INCREF(arr);
            a->ids = arr;
            goto ids;
        }
    } else if (PyObject_TypeCheck(obj, &KeelFilterType)) {
        if (!(p->allowed_filter = filter_of(obj, fn)))
            return -1;
        Py_INCREF(obj);
        a->keep = obj;
        return 0;
    } else if (PyAnySet_CheckExact(obj)) {
        if ((a->ids = set_ids(obj)))
            goto ids;
        if (PyErr_Occurred())
            return -1;
    }
    /* Everything else, in Python: ids as a uint64 array, a range or a set
     * of odd members as a Filter, or one per query as a tuple. */
    PyObject *r = PyObject_CallFunction(coerce_allowed, "Osi", obj, fn, batch);
    if (!r)
        return -1;
    if (PyArray_Check(r)) {
        a->ids = (PyArrayObject *)r;
        goto ids;
    }
    if (PyObject_TypeCheck(r, &KeelFilterType)) {
        a->keep = r;
        return (p->allowed_filter = filter_of(r, fn)) ? 0 : -1;
    }
    if (!PyTuple_Check(r)) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_SystemError, "keel._allow.allowed returned "
                        "the wrong kind");
        return -1;
    }
    a->keep = r;
    a->nper = (size_t)PyTuple_GET_SIZE(r);
    a->per = PyMem_Malloc((a->nper ? a->nper : 1) * sizeof *a->per);
    if (!a->per) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < a->nper; i++) {
        PyObject *it = PyTuple_GET_ITEM(r, (Py_ssize_t)i);
        a->per[i] = it == Py_None ? NULL : filter_of(it, fn);
        if (it != Py_None && !a->per[i])
            return -1;
    }
    a->per_query = 1;
    p->query_filters = a->per;
    return 0;
ids:;
    npy_intp n = PyArray_DIM(a->ids, 0);
    p->allowed = n ? PyArray_DATA(a->ids) : no_ids;
    p->n_allowed = (size_t)n;
    return 0;
}
