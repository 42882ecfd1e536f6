/* _errors.h -- keel's errors as Python exceptions (_errors.c), for the
** other files of the extension (_keel.c, _args.c, _filter.c, _handle.c,
** _published.c). */
#ifndef KEEL_PY_ERRORS_H
#define KEEL_PY_ERRORS_H

/* Takes keel.Error's classes (a sequence indexed by keel code, [0] =
** keel.Error) and IndexNotFoundError from the Python layer (_setup): 0, or
** -1 with an exception. */
int keel_py_errors_setup(PyObject *classes, PyObject *index_not_found);

/* The class of KEEL_EINVAL (keel.InvalidArgumentError), or ValueError
** before _setup. */
PyObject *keel_py_invalid_class(void);

/* Raises the class of code rc (-1: IndexNotFoundError) with message msg;
** returns NULL. */
PyObject *keel_py_raise_code(int rc, const char *msg);

/* Raises keel's error for rc with this thread's keel_errmsg(), in Python's
** terms; returns NULL. The exception of a signal handler that stopped the
** call (keel_py_cancel_check) is raised instead when there is one. */
PyObject *keel_py_raise(int rc);

/* keel_py_raise() for keel_open / keel_open_reader, where KEEL_ENOTFOUND
** means no file (IndexNotFoundError) rather than no id (KeyError). */
PyObject *keel_py_raise_opening(int rc);

/* keel's cancel callback (keel_set_cancel): runs the Python signal
** handlers; one that raises stops the call, and keel_py_raise raises its
** exception when the call returns. */
int keel_py_cancel_check(void *arg);

#endif /* KEEL_PY_ERRORS_H */
