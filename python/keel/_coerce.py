"""_coerce.py -- input conversion and argument mistakes, in Python terms.

The C extension uses a float32 or uint64 numpy array in place when it is
already C-contiguous, aligned and native. Anything else comes here: it is
converted (a copy: a C-contiguous, aligned, native array) or refused with
TypeError / ValueError naming the argument, what was given, and what to
pass instead.
"""

import difflib
import numbers

import numpy as np

from . import _errors

_U64_MAX = 2**64 - 1

# Other libraries' names for keel's arguments and options.
ALIASES = {
    # search arguments
    "top_k": "k", "topk": "k", "n": "k", "limit": "k", "count": "k",
    "n_results": "k", "num_results": "k", "n_neighbors": "k",
    "ef_search": "ef", "efSearch": "ef", "ef_s": "ef",
    "filter": "allowed", "ids": "allowed", "allow": "allowed",
    "allow_list": "allowed", "allowlist": "allowed", "allowed_ids": "allowed",
    "vector": "query", "vec": "query", "q": "query", "x": "query",
    # index options
    "M": "max_connections", "m": "max_connections",
    "efConstruction": "ef_construction", "ef_c": "ef_construction",
    "construction_ef": "ef_construction",
    "ef": "ef_search", "space": "metric", "distance": "metric",
    "metric_type": "metric", "dtype": "precision",
    "num_threads": "threads", "n_threads": "threads", "n_jobs": "threads",
    "dim": "dimensions", "dims": "dimensions", "d": "dimensions",
}


# keel's own option names: not "other libraries' names" when misplaced.
KEEL_NAMES = {"max_connections", "ef_construction", "ef_search", "metric",
              "precision", "warm", "huge_pages", "threads", "k", "ef",
              "allowed", "query", "dimensions"}


def suggest(name, accepted):
    """A ' (did you mean X?)' hint for an unknown name, or ''."""
    target = ALIASES.get(name)
    if target in accepted:
        if name in KEEL_NAMES:      # keel's name for something else
            return "; did you mean %s?" % target
        return "; did you mean %s? (other libraries call it %s)" % (
            target, name)
    close = difflib.get_close_matches(name, accepted, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(name.lower(), accepted, n=1,
                                          cutoff=0.6)
    if close:
        return "; did you mean %s?" % close[0]
    return ""


def bad_keyword(fn, name, accepted):
    """Raise the TypeError for an unknown keyword argument of fn()."""
    raise TypeError("%s() got an unexpected keyword argument %r%s "
                    "(it takes %s)" % (fn, name, suggest(name, accepted),
                                       ", ".join(accepted)))


def _shape_text(arr):
    return "%d-D array of shape %s" % (arr.ndim, tuple(arr.shape))


def vectors(obj, fn, dim, batch):
    """obj as a C-contiguous float32 array of shape (dim,) or (n, dim)."""
    what = "vectors" if fn == "add_batch" else (
        "queries" if batch else ("vector" if fn == "add" else "query"))
    if obj is None or isinstance(obj, (str, bytes, dict)):
        raise TypeError("%s() takes %s as a numpy array of numbers, not %s"
                        % (fn, what, type(obj).__name__))
    try:
        arr = np.asarray(obj)
    except (ValueError, TypeError) as e:
        raise TypeError("%s() could not read %s as an array of numbers: %s"
                        % (fn, what, e)) from None
    if arr.dtype.kind not in "fiu" or arr.dtype.kind == "f" and \
            arr.dtype.itemsize > 8:
        raise TypeError("%s() takes %s of numbers (float32 best), not an "
                        "array of dtype %s" % (fn, what, arr.dtype))
    if batch:
        if arr.ndim == 1 and arr.size == 0:
            arr = arr.reshape(0, dim)
        if arr.ndim == 1:
            raise ValueError(
                "%s() takes a 2-D array of shape (n, %d), but was given a "
                "1-D array of shape %s\nhelp: use %s() for one vector, or "
                "pass %s.reshape(1, -1)" % (
                    fn, dim, tuple(arr.shape),
                    "add" if fn == "add_batch" else "search", what))
        if arr.ndim != 2:
            raise ValueError("%s() takes a 2-D array of shape (n, %d), but "
                             "was given a %s" % (fn, dim, _shape_text(arr)))
    else:
        if arr.ndim == 2:
            raise ValueError(
                "%s() takes one %s of %d numbers, but was given a %s\nhelp: "
                "use %s() for several, or pass one row such as %s[0]" % (
                    fn, what, dim, _shape_text(arr),
                    "add_batch" if fn == "add" else "search_batch", what))
        if arr.ndim != 1:
            raise ValueError("%s() takes one %s as a 1-D array of %d numbers,"
                             " but was given a %s" % (fn, what, dim,
                                                      _shape_text(arr)))
    if arr.shape[-1] != dim:
        given = ("%s of %d numbers each" if batch else "a %s of %d numbers") \
            % (what, arr.shape[-1])
        raise _errors.DimensionMismatchError(
            "%s() was given %s, but the index holds vectors of %d dimensions"
            "\nhelp: pass %d numbers per vector (an index's dimensions are "
            "fixed when it is created)" % (fn, given, dim, dim))
    return _c_array(arr, np.float32)


def _c_array(arr, dtype):
    """arr as a C-contiguous, aligned array of native dtype (a copy unless
    it is one already): np.frombuffer or np.memmap at an odd offset gives
    misaligned arrays, which C must not read in place."""
    return np.require(arr, dtype=np.dtype(dtype).newbyteorder("="),
                      requirements=["C_CONTIGUOUS", "ALIGNED"])


def one_id(obj, fn):
    """obj as an int id, refusing what is not an integer."""
    if isinstance(obj, (bool, np.bool_)):
        raise TypeError("%s() takes an integer id, not a bool" % fn)
    if isinstance(obj, numbers.Integral) or hasattr(obj, "__index__"):
        try:
            return int(obj.__index__())
        except TypeError:
            pass
    raise TypeError("%s() takes an integer id, not %s (%r)%s" % (
        fn, type(obj).__name__, obj,
        "\nhelp: keel ids are integers; keep your own mapping from names "
        "to ids" if isinstance(obj, (str, bytes)) else ""))


def ids(obj, fn, n):
    """obj (an array or iterable of ints) as a C-contiguous uint64 array."""
    what = "ids" if fn == "add_batch" else "allowed"
    if isinstance(obj, (str, bytes)):
        raise TypeError("%s() takes %s as integers, not a %s" % (
            fn, what, type(obj).__name__))
    if not isinstance(obj, np.ndarray):
        try:
            obj = list(obj)
        except TypeError:
            raise TypeError("%s() takes %s as an array or iterable of integer "
                            "ids, not %s" % (fn, what, type(obj).__name__)) \
                from None
    arr = np.asarray(obj)
    if arr.size == 0:
        arr = arr.reshape(0).astype(np.uint64)
    if arr.ndim != 1:
        raise ValueError("%s() takes %s as a 1-D array, but was given a %s"
                         % (fn, what, _shape_text(arr)))
    if arr.dtype.kind == "O":
        # Mixed or very large Python ints: check each.
        arr = np.array([one_id(x, fn) for x in arr], dtype=object)
        if len(arr) and (min(arr) < 0 or max(arr) > _U64_MAX):
            bad = next(x for x in arr if x < 0 or x > _U64_MAX)
            raise _errors.InvalidArgumentError(
                "%s() was given id %d, out of range\nhelp: ids are integers "
                "from 0 to 18446744073709551614 (2**64 - 2)" % (fn, bad))
        arr = arr.astype(np.uint64)
    elif arr.dtype.kind == "i":
        if arr.size and arr.min() < 0:
            raise _errors.InvalidArgumentError(
                "%s() was given a negative id (%d)\nhelp: ids are integers "
                "from 0 to 18446744073709551614 (2**64 - 2)"
                % (fn, arr.min()))
        arr = arr.astype(np.uint64)
    elif arr.dtype.kind != "u":
        first = arr.flat[0]
        raise TypeError("%s() takes %s as integers, not %s (such as %r)%s" % (
            fn, what, arr.dtype, first,
            "\nhelp: keel ids are integers; keep your own mapping from names "
            "to ids" if arr.dtype.kind in "US" else ""))
    if n >= 0 and len(arr) != n:
        raise ValueError("%s() was given %d ids for %d vectors\nhelp: pass "
                         "one id per row, or ids=None for automatic ids"
                         % (fn, len(arr), n))
    return _c_array(arr, np.uint64)


def allowed(obj, fn, batch):
    """A search's allowed= argument (keel/_allow.py)."""
    from . import _allow
    return _allow.allowed(obj, fn, batch)


def count(obj, name, fn):
    """obj (k or ef) as an int, refusing floats, strings and bools."""
    if isinstance(obj, (bool, np.bool_)) or not hasattr(obj, "__index__"):
        hint = ""
        if isinstance(obj, float) and obj.is_integer():
            hint = "\nhelp: pass %s=%d" % (name, int(obj))
        raise TypeError("%s() takes %s as an integer, not %s (%r)%s" % (
            fn, name, type(obj).__name__, obj, hint))
    return int(obj.__index__())
