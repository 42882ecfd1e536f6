"""_allow.py -- keel.Filter, a prepared allow-list, and the reading of a
search's allowed= argument that is not already an id array, a set of ints
or a Filter (those the C extension reads itself).

A Filter holds its ids in C, read once: searches given it skip the
per-call reading of the ids. A range becomes an interval in C (start, end,
step), so range(10**18) costs a few words, never a list.
"""

import numbers

import numpy as np

from . import _coerce, _keel

_ID_END = 2**64 - 1     # ids are 0 .. 2**64 - 2


def _range_bounds(r):
    """(first, end, step) of the ids 0 .. 2**64-2 in range r, increasing."""
    step = r.step
    if step > 0:
        if r.start >= r.stop:
            return (0, 0, 1)
        lo = r.start
        hi = r.start + (r.stop - r.start - 1) // step * step
    else:
        if r.start <= r.stop:
            return (0, 0, 1)
        hi = r.start
        lo = r.start + (r.stop - r.start + 1) // step * step
        step = -step
    if lo < 0:      # negative numbers are no ids: start at the first id
        lo += (-lo + step - 1) // step * step
    end = min(hi + 1, _ID_END)
    if lo >= end:
        return (0, 0, 1)
    if step >= end - lo:  # one id: a step past 2**64 must not wrap in C
        return (lo, lo + 1, 1)
    return (lo, end, step)


class Filter(_keel.Filter):
    """A prepared allow-list: Filter(ids), made once, given to any number of
    searches (allowed=filter) on any index, from any thread.

    ids is a range (kept as an interval: range(10**12) costs nothing), a
    numpy array, a set or any iterable of integer ids. Ids not in an index
    are ignored; an empty Filter matches nothing. len() and count give how
    many distinct ids it holds.
    """

    def __init__(self, ids):
        if isinstance(ids, range):
            self._set_range(*_range_bounds(ids))
            self._described = repr(ids)
        else:
            if isinstance(ids, (set, frozenset)):
                ids = list(ids)
            arr = _coerce.ids(ids, "Filter", -1)
            self._set_ids(arr)
            self._described = "%d ids" % self.count

    def __repr__(self):
        return "keel.Filter(%s)" % getattr(self, "_described", "")

    def __reduce__(self):
        raise TypeError("a keel.Filter cannot be pickled\nhelp: pass its ids "
                        "and make a Filter in the other process")


def _is_id(x):
    return isinstance(x, (numbers.Integral, np.integer)) and \
        not isinstance(x, (bool, np.bool_))


def _is_list(x):
    """Whether x is an allow-list (or None) rather than an id."""
    return x is None or isinstance(
        x, (list, tuple, set, frozenset, range, np.ndarray, _keel.Filter))


def allowed(obj, fn, batch):
    """allowed= as a uint64 array of ids, a Filter, or (search_batch) a
    tuple of Filters or None, one per query."""
    if isinstance(obj, range):
        return Filter(obj)
    if isinstance(obj, _keel.Filter):
        return obj
    if batch and isinstance(obj, np.ndarray) and obj.ndim == 2:
        return tuple(Filter(row) for row in obj)
    if isinstance(obj, (list, tuple)) and any(_is_list(x) for x in obj):
        if not batch:
            raise TypeError(
                "%s() takes allowed as one allow-list of integer ids, not %s,"
                " which holds a %s\nhelp: one allow-list per query is for "
                "search_batch()" % (fn, _coerce.given(obj), type(next(
                    x for x in obj if _is_list(x))).__name__))
        ids = [i for i, x in enumerate(obj) if _is_id(x)]
        if ids:
            raise TypeError(
                "search_batch() takes allowed as one allow-list of ids or "
                "one allow-list per query, but element %d is an id and "
                "element %d a %s\nhelp: pass a list of lists (None for every "
                "id) for one per query" % (
                    ids[0], next(i for i, x in enumerate(obj)
                                 if _is_list(x)),
                    type(next(x for x in obj if _is_list(x))).__name__))
        return tuple(None if x is None else
                     x if isinstance(x, _keel.Filter) else Filter(x)
                     for x in obj)
    if isinstance(obj, (set, frozenset)):
        obj = list(obj)
    return _coerce.ids(obj, fn, -1)
