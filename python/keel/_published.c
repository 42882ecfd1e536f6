/* _published.c -- keel._keel's functions on published indexes, which work
** on the object store alone (no Index): prune(url, keep=2) (keel_prune) and
** versions(url) (keel_list_versions). keel/__init__.py exports them as
** keel.prune and, through keel/_index.py, keel.versions.
**
** The GIL is released around each call into keel (both wait on the
** network); errors are raised as keel.Error subclasses by _errors.c's
** keel_py_raise.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>

#include "keel.h"
#include "_errors.h"
#include "_published.h"

/* prune(url, keep=2): removes published versions but the newest keep
** (keel_prune); returns the number of objects removed. */
static PyObject *
module_prune(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *names[] = {"url", "keep", NULL};
    PyObject *url_obj, *keep_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:prune", names, &url_obj,
                                     &keep_obj))
        return NULL;
    if (!PyUnicode_Check(url_obj))
        return PyErr_Format(PyExc_TypeError, "prune() takes url as a str, not "
                            "%s (%R)\nhelp: pass 's3://BUCKET/PREFIX'",
                            Py_TYPE(url_obj)->tp_name, url_obj);
    long long keep = 2;
    if (keep_obj) {
        int overflow = 0;
        if (!PyLong_Check(keep_obj) || PyBool_Check(keep_obj))
            return PyErr_Format(PyExc_TypeError, "prune() takes keep as an "
                                "int, not %s (%R)\nhelp: pass the number of "
                                "versions to keep, such as keep=2",
                                Py_TYPE(keep_obj)->tp_name, keep_obj);
        keep = PyLong_AsLongLongAndOverflow(keep_obj, &overflow);
        if (keep == -1 && PyErr_Occurred())
            return NULL;
        if (overflow || keep < 1 || keep > UINT32_MAX)
            return PyErr_Format(PyExc_ValueError, "prune() was given keep=%R"
                                "\nhelp: keep at least 1 version (at most "
                                "4294967295)", keep_obj);
    }
    const char *url = PyUnicode_AsUTF8(url_obj);
    if (!url)
        return NULL;
    uint64_t removed = 0;
    keel_prune_options o = {.removed = &removed};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_prune(url, (uint32_t)keep, &o);
    Py_END_ALLOW_THREADS
    if (rc) /* nothing published at url: IndexNotFoundError, as an open */
        return keel_py_raise_opening(rc);
    return PyLong_FromUnsignedLongLong(removed);
}

/* The versions as keel_list_versions gives them, kept until the listing is
** whole (the GIL is released meanwhile: no Python object is made). */
typedef struct vlist {
    keel_version *v;
    size_t n, cap;
} vlist;

static int
keep_version(const keel_version *v, void *arg)
{
    vlist *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        keel_version *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return KEEL_ENOMEM;
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = *v;
    return KEEL_OK;
}

/* versions(url): the versions published at url, oldest first, as tuples
** (version, manifest_bytes, modified_ms, newest, hinted); keel/_index.py
** makes them dicts. */
static PyObject *
module_versions(PyObject *mod, PyObject *url_obj)
{
    (void)mod;
    if (!PyUnicode_Check(url_obj))
        return PyErr_Format(PyExc_TypeError, "versions() takes url as a str, "
                            "not %s (%R)\nhelp: pass 's3://BUCKET/PREFIX'",
                            Py_TYPE(url_obj)->tp_name, url_obj);
    const char *url = PyUnicode_AsUTF8(url_obj);
    if (!url)
        return NULL;
    vlist l = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = keel_list_versions(url, keep_version, &l);
    Py_END_ALLOW_THREADS
    if (rc) {
        free(l.v);
        return keel_py_raise_opening(rc); /* as prune's */
    }
    PyObject *out = PyList_New((Py_ssize_t)l.n);
    for (size_t i = 0; out && i < l.n; i++) {
        const keel_version *v = &l.v[i];
        PyObject *t = Py_BuildValue("(KKLOO)", (unsigned long long)v->version,
                                    (unsigned long long)v->manifest_bytes,
                                    (long long)v->modified_ms,
                                    v->newest ? Py_True : Py_False,
                                    v->hinted ? Py_True : Py_False);
        if (!t)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
    free(l.v);
    return out;
}

PyMethodDef keel_py_published_methods[] = {
    {"prune", (PyCFunction)(void (*)(void))module_prune,
     METH_VARARGS | METH_KEYWORDS, "prune(url, keep=2)\n--\n\nRemove the "
     "versions published at 's3://BUCKET/PREFIX' but the newest keep, and the "
     "objects only they name; returns the number of objects removed."},
    {"versions", (PyCFunction)module_versions, METH_O,
     "versions(url)\n--\n\nInternal (keel.versions): the versions published "
     "at 's3://BUCKET/PREFIX', oldest first, as (version, manifest_bytes, "
     "modified_ms, newest, latest_hint) tuples."},
    {NULL, NULL, 0, NULL},
};
