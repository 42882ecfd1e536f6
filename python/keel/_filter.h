/* _filter.h -- keel._keel.Filter and the allowed= argument of searches
** (_filter.c), for _keel.c. */
#ifndef KEEL_PY_FILTER_H
#define KEEL_PY_FILTER_H

#include "keel.h"

extern PyTypeObject KeelFilterType;

/* What an allowed= argument holds while a search uses it. */
typedef struct {
    PyObject *keep;           /* a Filter or a tuple of them, kept alive */
    PyArrayObject *ids;       /* a uint64 array of ids */
    const keel_filter **per;  /* one per query (PyMem) */
    size_t nper;
    int per_query;            /* 1: per holds the query_filters */
} keel_py_allowed;

/* Sets p's allow-list from obj (not None): 0, or -1 with an exception.
** batch: whether one allow-list per query is accepted. Release a after the
** search, whatever happened. */
int keel_py_allowed_parse(PyObject *obj, const char *fn, int batch,
                          keel_py_allowed *a, keel_search_params *p);
void keel_py_allowed_release(keel_py_allowed *a);

/* module NULL: connect the helpers (keel._coerce); else add the type. */
int keel_py_filter_setup(PyObject *module, PyObject *helpers);

#endif /* KEEL_PY_FILTER_H */
