/* _errors.c -- keel's errors as Python exceptions, for the whole extension
** (_keel.c, _args.c, _filter.c): the classes the Python layer hands over
** (keel/_errors.py, through _setup), the raising of keel's code and
** message as one of them, the rewriting of the library's phrases into
** Python's terms (speak_table), and the cancel callback that runs the
** Python signal handlers during long calls, whose exception is raised in
** place of keel's KEEL_ECANCELED when the call returns (_keel.c's file
** comment, "Signals").
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>

#include "keel.h"
#include "_errors.h"

/* --- the classes (set once by keel/__init__.py through _setup) ----------- */

#define MAX_CODE KEEL_ECANCELED
static PyObject *err_class[MAX_CODE + 1]; /* by code; [0] = keel.Error */
static PyObject *index_not_found;   /* ENOTFOUND from an open: no such file */

int
keel_py_errors_setup(PyObject *classes, PyObject *inf)
{
    PyObject *seq = PySequence_Fast(classes, "classes must be a sequence");
    if (!seq)
        return -1;
    if (PySequence_Fast_GET_SIZE(seq) != MAX_CODE + 1) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "_setup needs one class per code");
        return -1;
    }
    for (int i = 0; i <= MAX_CODE; i++) {
        PyObject *c = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(c);
        Py_XSETREF(err_class[i], c);
    }
    Py_DECREF(seq);
    Py_INCREF(inf);
    Py_XSETREF(index_not_found, inf);
    return 0;
}

PyObject *
keel_py_invalid_class(void)
{
    return err_class[KEEL_EINVAL] ? err_class[KEEL_EINVAL] : PyExc_ValueError;
}

/* --- raising ------------------------------------------------------------- */

PyObject *
keel_py_raise_code(int rc, const char *msg)
{
    PyObject *cls = rc > 0 && rc <= MAX_CODE ? err_class[rc]
                  : rc == -1 ? index_not_found : NULL;
    if (!cls)
        cls = err_class[0] ? err_class[0] : PyExc_RuntimeError;
    /* keel's messages quote paths, which need not be UTF-8. */
    PyObject *text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg),
                                          "backslashreplace");
    if (text) {
        PyErr_SetObject(cls, text);
        Py_DECREF(text);
    }
    return NULL;
}

/* The exception a signal handler raised in keel_py_cancel_check, kept for
** the thread whose call it stopped. */
static _Thread_local PyObject *stop_type, *stop_value, *stop_tb;

/* Runs on the main thread; elsewhere PyErr_CheckSignals does nothing. */
int
keel_py_cancel_check(void *arg)
{
    (void)arg;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = PyErr_CheckSignals() < 0;
    if (stop) {
        Py_CLEAR(stop_type);
        Py_CLEAR(stop_value);
        Py_CLEAR(stop_tb);
        PyErr_Fetch(&stop_type, &stop_value, &stop_tb);
    }
    PyGILState_Release(g);
    return stop;
}

/* Raises the exception that stopped this thread's call; 0 if none did. */
static int
raise_stop(void)
{
    if (!stop_type)
        return 0;
    PyErr_Restore(stop_type, stop_value, stop_tb);
    stop_type = stop_value = stop_tb = NULL;
    return 1;
}

/* Library phrases that speak of the C API or the CLI, and what Python says
** instead: the library words its messages for every caller, and here they
** become the classes and methods a Python user calls. */
static const char *const speak_table[][2] = {
    {"(made by keel backup, keel_backup or backup())", "(made by backup())"},
    {"opening it as a writer creates the index, a reader needs an existing "
     "one", "keel.VectorIndex(path, dimensions) creates an index; "
     "keel.IndexReader(path) needs an existing one"},
    {"close the other writer, or open a reader to search while it writes",
     "close the other writer, or open a keel.IndexReader(path) to search "
     "while it writes"},
    {"open the index as a reader to search it",
     "open it with keel.IndexReader(path) to search it"},
    {"open it as a reader to search it",
     "open it with keel.IndexReader(path) to search it"},
    {"or KEEL_FILE_OPTIONS to take the file's own",
     "or leave codes out to take the file's own"},
    {"or publish an index there with keel_publish",
     "or publish an index there with index.publish(url)"},
    {"open it with keel_open_reader; to change it, open the local file as a "
     "writer and keel_publish it again",
     "open it with keel.IndexReader(url); to change it, open the local file "
     "with keel.VectorIndex and publish() it again"},
    {"(keel publish --replace; keel_publish_options.replace)",
     "(publish(url, replace=True))"},
};

/* msg rewritten into Python's terms (speak_table) into out (len bytes). */
static const char *
speak(const char *msg, char *out, size_t len)
{
    size_t o = 0, n = sizeof speak_table / sizeof speak_table[0];
    const char *p = msg;

    while (*p && o + 1 < len) {
        size_t i;
        for (i = 0; i < n; i++)
            if (!strncmp(p, speak_table[i][0], strlen(speak_table[i][0])))
                break;
        if (i == n) {
            out[o++] = *p++;
            continue;
        }
        size_t tl = strlen(speak_table[i][1]);
        if (tl > len - 1 - o)
            tl = len - 1 - o;
        memcpy(out + o, speak_table[i][1], tl);
        o += tl;
        p += strlen(speak_table[i][0]);
    }
    out[o] = '\0';
    return out;
}

/* Raises keel's error for rc with this thread's keel_errmsg(). opening is
** nonzero for keel_open / keel_open_reader, where KEEL_ENOTFOUND means no
** file (FileNotFoundError) rather than no id (KeyError). */
static PyObject *
raise_keel(int rc, int opening)
{
    if (raise_stop()) /* a signal handler stopped the call: its exception */
        return NULL;
    const char *msg = keel_errmsg();
    char buf[160], spoken[2048];
    if (!msg || !*msg) {
        snprintf(buf, sizeof buf, "%s\nhelp: this is a bug in keel: it "
                 "failed without a message; please report it",
                 keel_strerror(rc));
        msg = buf;
    }
    msg = speak(msg, spoken, sizeof spoken);
    if (rc == KEEL_ENOTFOUND && opening && index_not_found)
        return keel_py_raise_code(-1, msg);
    return keel_py_raise_code(rc, msg);
}

PyObject *
keel_py_raise(int rc)
{
    return raise_keel(rc, 0);
}

PyObject *
keel_py_raise_opening(int rc)
{
    return raise_keel(rc, 1);
}

