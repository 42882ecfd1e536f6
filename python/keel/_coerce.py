"""_coerce.py -- input conversion and argument mistakes, in Python terms.

The C extension uses a float32 or uint64 numpy array in place when it is
already C-contiguous, aligned and native. Anything else comes here: it is
converted (a copy: a C-contiguous, aligned, native array) or refused with
TypeError / ValueError naming the argument, what was given, and what to
pass instead.
"""

import collections.abc
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
              "precision", "codes", "warm", "huge_pages", "threads", "k",
              "ef", "allowed", "query", "dimensions"}


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
    raise TypeError("%s() got an unexpected keyword argument %r%s\nhelp: "
                    "%s() takes %s" % (fn, name, suggest(name, accepted), fn,
                                       ", ".join(accepted)))


def given(obj):
    """obj as the caller wrote it, for a message: its type and repr (cut
    short when long)."""
    text = repr(obj)
    if len(text) > 60:
        text = text[:57] + "..."
    return "%s (%s)" % (type(obj).__name__, text)


def _raw_bytes(obj):
    """Whether obj is raw bytes: bytes, a bytearray, or a memoryview of
    bytes. numpy would read them as one number per byte, which is never
    what a row of floats or a list of 8-byte ids held."""
    if isinstance(obj, (bytes, bytearray)):
        return True
    return isinstance(obj, memoryview) and obj.format in ("B", "b", "c")


def _shape_text(arr):
    return "%d-D array of shape %s" % (arr.ndim, tuple(arr.shape))


def vectors(obj, fn, dim, batch):
    """obj as a C-contiguous float32 array of shape (dim,) or (n, dim)."""
    what = "vectors" if fn == "add_batch" else (
        "queries" if batch else ("vector" if fn == "add" else "query"))
    shape = "(n, %d)" % dim if batch else "(%d,)" % dim
    if obj is None or isinstance(obj, (str, dict)) or _raw_bytes(obj):
        hint = (" (np.frombuffer(data, dtype=np.float32) reads raw float32 "
                "bytes)" if _raw_bytes(obj) else "")
        raise TypeError("%s() takes %s as a numpy array of numbers, not %s"
                        "\nhelp: pass a float32 array of shape %s%s"
                        % (fn, what, given(obj), shape, hint))
    try:
        arr = np.asarray(obj)
    except (ValueError, TypeError) as e:
        raise TypeError("%s() could not read %s %s as an array of numbers: "
                        "%s\nhelp: pass a float32 array of shape %s (rows "
                        "of equal length)" % (fn, what, given(obj), e, shape)) \
            from None
    if arr.dtype.kind not in "fiu" or arr.dtype.kind == "f" and \
            arr.dtype.itemsize > 8:
        raise TypeError("%s() takes %s of numbers (float32 best), not %s, "
                        "an array of dtype %s\nhelp: pass a float32 array of "
                        "shape %s, such as np.asarray(%s, dtype=np.float32) "
                        "if its values are numbers"
                        % (fn, what, given(obj), arr.dtype, shape, what))
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
                             "was given a %s\nhelp: pass one row of %d "
                             "numbers per vector, such as %s.reshape(-1, %d)"
                             % (fn, dim, _shape_text(arr), dim, what, dim))
    else:
        if arr.ndim == 2:
            raise ValueError(
                "%s() takes one %s of %d numbers, but was given a %s\nhelp: "
                "use %s() for several, or pass one row such as %s[0]" % (
                    fn, what, dim, _shape_text(arr),
                    "add_batch" if fn == "add" else "search_batch", what))
        if arr.ndim != 1:
            raise ValueError("%s() takes one %s as a 1-D array of %d numbers,"
                             " but was given a %s\nhelp: pass a 1-D array of "
                             "shape (%d,)" % (fn, what, dim, _shape_text(arr),
                                              dim))
    if arr.shape[-1] != dim:
        got = ("%s of %d numbers each" if batch else "a %s of %d numbers") \
            % (what, arr.shape[-1])
        raise _errors.DimensionMismatchError(
            "%s() was given %s, but the index holds vectors of %d dimensions"
            "\nhelp: pass %d numbers per vector (an index's dimensions are "
            "fixed when it is created)" % (fn, got, dim, dim))
    if arr.dtype.kind == "f" and arr.dtype.itemsize > 4:
        # float32 would make inf of them, and the message would name an inf
        # the caller never passed.
        big = np.isfinite(arr) & (np.abs(arr) > np.finfo(np.float32).max)
        if big.any():
            at = np.unravel_index(int(np.argmax(big)), arr.shape)
            where = ("row %d, component %d" % (at[0], at[1]) if batch
                     else "component %d" % at[0])
            raise _errors.InvalidArgumentError(
                "%s() was given %r at %s of %s, beyond float32's range "
                "(3.4e38), which keel stores\nhelp: scale the vectors (and "
                "queries) down, which scales every distance alike, or drop "
                "the vector" % (fn, float(arr[at]), where, what))
    return _c_array(arr, np.float32)


def _c_array(arr, dtype):
    """arr as a C-contiguous, aligned array of native dtype (a copy unless
    it is one already): np.frombuffer or np.memmap at an odd offset gives
    misaligned arrays, which C must not read in place."""
    return np.require(arr, dtype=np.dtype(dtype).newbyteorder("="),
                      requirements=["C_CONTIGUOUS", "ALIGNED"])


_ID_RANGE = "ids are integers from 0 to 18446744073709551614 (2**64 - 2)"


def _integral(obj):
    """The int equal to a float-like obj (2.0, np.float32(2)), or None."""
    if isinstance(obj, (float, np.floating)):
        try:
            if float(obj).is_integer():
                return int(obj)
        except (OverflowError, ValueError):
            pass
    return None


def one_id(obj, fn):
    """obj as an int id, refusing what is not an integer."""
    if isinstance(obj, (bool, np.bool_)):
        raise TypeError("%s() takes an integer id, not a bool (%r)\nhelp: "
                        "True and False are not ids; pass an int such as %d"
                        % (fn, obj, int(obj)))
    if isinstance(obj, numbers.Integral) or hasattr(obj, "__index__"):
        try:
            return int(obj.__index__())
        except TypeError:
            pass
    if isinstance(obj, (str, bytes)):
        hint = "keel ids are integers; keep your own mapping from names to ids"
    elif _integral(obj) is not None:
        hint = "pass the id as an int: %s" % (
            "id=%d" % _integral(obj) if fn == "add"
            else "%s(%d)" % (fn, _integral(obj)))
    else:
        hint = _ID_RANGE
    raise TypeError("%s() takes an integer id, not %s\nhelp: %s"
                    % (fn, given(obj), hint))


def ids(obj, fn, n):
    """obj (an array or iterable of ints) as a C-contiguous uint64 array."""
    # The argument as the caller named it: add_batch's ids=, get's and
    # delete's first argument, Filter's ids, or a search's allowed=.
    what = {"add_batch": "ids", "get": "ids", "delete": "ids",
            "Filter": "ids"}.get(fn, "allowed")
    example = ("%s=[7, 8, 9]" % what if fn in ("add_batch", "search",
                                               "search_batch",
                                               "search_radius")
               else "[7, 8, 9]")
    if isinstance(obj, str) or _raw_bytes(obj):
        hint = (" (np.frombuffer(data, dtype=np.uint64) reads raw uint64 "
                "bytes)" if _raw_bytes(obj) else "")
        raise TypeError("%s() takes %s as integers, not %s\nhelp: pass a "
                        "list or array of integer ids, such as %s%s"
                        % (fn, what, given(obj), example, hint))
    if isinstance(obj, collections.abc.Mapping):
        # list(d) would take its keys and drop its values without a word.
        raise TypeError("%s() takes %s as a list or array of integer ids, "
                        "not %s\nhelp: pass list(d) for the keys or "
                        "list(d.values()) for the values" % (fn, what,
                                                             given(obj)))
    original = obj
    if isinstance(obj, memoryview):     # typed: numpy keeps its item type
        obj = np.asarray(obj)
    if not isinstance(obj, np.ndarray):
        try:
            obj = list(obj)
        except TypeError:
            raise TypeError("%s() takes %s as an array or iterable of integer "
                            "ids, not %s\nhelp: pass a list or array of "
                            "integer ids, such as %s"
                            % (fn, what, given(obj), example)) from None
    try:
        arr = np.asarray(obj)
    except ValueError as e:     # ragged rows
        raise ValueError("%s() could not read %s %s as a 1-D array of ids: "
                         "%s\nhelp: pass a flat list or array of integer ids,"
                         " such as %s" % (fn, what, given(original), e,
                                          example)) from None
    if arr.size == 0:
        arr = arr.reshape(0).astype(np.uint64)
    if not isinstance(original, np.ndarray) and arr.dtype.kind in "iuf" and \
            any(isinstance(x, (bool, np.bool_)) for x in obj):
        # numpy reads [5, True] as [5, 1]; one id of True is refused, so
        # is one in a list.
        at = next(i for i, x in enumerate(obj)
                  if isinstance(x, (bool, np.bool_)))
        raise TypeError("%s() takes %s as integers, but element %d of %s is "
                        "a bool (%r)\nhelp: True and False are not ids; pass "
                        "ints" % (fn, what, at, given(original), obj[at]))
    if not isinstance(original, np.ndarray) and arr.ndim == 1 and \
            arr.dtype.kind == "f" and \
            all(isinstance(x, (numbers.Integral, np.integer)) and
                not isinstance(x, (bool, np.bool_)) for x in obj):
        # numpy makes float64 of ints that need uint64 and ints that
        # need int64 (2**63 + 1 and 5), rounding them: take them one by
        # one instead, exactly.
        arr = np.array(obj, dtype=object)
    if arr.ndim != 1:
        raise ValueError("%s() takes %s as a 1-D array, but was given %s, a "
                         "%s\nhelp: pass a flat list or array of integer "
                         "ids, such as %s (np.ravel() flattens one)"
                         % (fn, what, given(original), _shape_text(arr),
                            example))
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
        if arr.dtype.kind in "US":
            hint = "keel ids are integers; keep your own mapping from names " \
                "to ids"
        elif arr.dtype.kind == "b":
            hint = "True and False are not ids; to pass the positions of " \
                "the True values of a mask, use np.flatnonzero(mask)"
        elif arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and \
                np.all(arr == np.floor(arr)) and \
                np.all(np.abs(arr) <= 2**53):
            hint = "convert them with %s.astype(np.uint64)" % (
                what if what == "allowed" or fn == "add_batch" else "ids")
        elif arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and \
                np.all(arr == np.floor(arr)):
            # Past 2**53 a float64 no longer holds every integer: the ids
            # were rounded when the array was made, and astype keeps that.
            hint = "a float array holds integers exactly only up to 2**53, " \
                "so these ids may have been rounded already; make the array " \
                "from the int ids with np.array(ids, dtype=np.uint64)"
        else:
            hint = _ID_RANGE
        raise TypeError("%s() takes %s as integers, not %s (such as %r)"
                        "\nhelp: %s" % (fn, what, arr.dtype, first, hint))
    if n >= 0 and len(arr) != n:
        raise ValueError("%s() was given %d ids for %d vectors\nhelp: pass "
                         "one id per row, or ids=None for automatic ids"
                         % (fn, len(arr), n))
    return _c_array(arr, np.uint64)



def count(obj, name, fn):
    """obj (k or ef) as an int, refusing floats, strings and bools."""
    if isinstance(obj, (bool, np.bool_)) or not hasattr(obj, "__index__"):
        if _integral(obj) is not None:
            hint = "pass %s=%d" % (name, _integral(obj))
        elif name == "k":
            hint = "pass how many results to return as an int, such as " \
                "k=10 (leave k out for 10)"
        else:
            hint = "pass a search width as an int, such as ef=64, or " \
                "ef=None for the index's ef_search"
        raise TypeError("%s() takes %s as an integer, not %s\nhelp: %s"
                        % (fn, name, given(obj), hint))
    return int(obj.__index__())


def key(obj):
    """The id that obj is as a dict key, for `obj in index`: an int equal
    to obj with the same hash (True is 1, 5.0 and np.float32(5) are 5), or
    None when no int is (5.5, "5", None, a list)."""
    try:
        h = hash(obj)
        if isinstance(obj, (bool, np.bool_)):
            return int(bool(obj))
        if hasattr(obj, "__index__"):
            i = int(obj.__index__())
        else:
            if isinstance(obj, numbers.Complex) and \
                    not isinstance(obj, numbers.Real):
                if obj.imag:
                    return None
                obj = obj.real
            i = int(obj)
        return i if hash(i) == h and bool(i == obj) else None
    except (TypeError, ValueError, OverflowError, ArithmeticError):
        return None
