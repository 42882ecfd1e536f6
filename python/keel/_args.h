/* _args.h -- the reading of call arguments (_args.c), for _keel.c. Each
** returns its value, or fails with a Python exception set that names the
** argument and the call (fn, the method's name, such as "add_batch"). */
#ifndef KEEL_PY_ARGS_H
#define KEEL_PY_ARGS_H

#include <stdint.h>

/* Connects keel._coerce's helpers (helpers, the module, through _setup):
** 0, or -1 with an exception. */
int keel_py_args_setup(PyObject *helpers);

/* Vectorcall arguments matched against names[0..n-1], the first nreq
** required; out[i] receives a borrowed reference or NULL. 0 or -1. */
int keel_py_parse_args(const char *fn, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames,
                       const char *const *names, int n, int nreq,
                       PyObject **out);

/* An integer argument called name in lo..hi (lo 0 or 1); limit is hi as
** said in a message, help the message's help line. 0 or -1. */
int keel_py_get_count(PyObject *obj, const char *name, const char *fn,
                      long long lo, long long hi, const char *limit,
                      const char *help, long long *out);

/* An id (0 .. 2**64-1): 0 or -1. */
int keel_py_get_id(PyObject *obj, const char *fn, uint64_t *out);

/* A new reference to a C-contiguous aligned native float32 array of shape
** (dim,), or (n, dim) when batch, or NULL. */
PyArrayObject *keel_py_get_vectors(PyObject *obj, uint32_t dim, int batch,
                                   const char *fn);

/* A new reference to a 1-D C-contiguous native uint64 array of n entries
** (any number when n is -1), or NULL. */
PyArrayObject *keel_py_get_ids(PyObject *obj, const char *fn, npy_intp n);

/* Whether get and delete were given one id rather than many. */
int keel_py_one_id(PyObject *obj);

/* The id that `arg in index` asks for, as for the keys of a dict: 1 with
** *id set; 0 when arg equals no id (it is then in no index); -1 with an
** exception. */
int keel_py_key_id(PyObject *arg, uint64_t *id);

#endif /* KEEL_PY_ARGS_H */
