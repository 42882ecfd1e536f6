"""hnswlib.py -- hnswlib 0.8's Python API on keel: ``import keel.hnswlib as
hnswlib`` runs a program written for hnswlib unchanged.

Index(space, dim) keeps its vectors in a keel index (keel.VectorIndex): in
memory (":memory:"), in a private copy of a loaded file, or, with path=, in
a keel file of the caller's that every save_index() makes durable in place.
This module adds what hnswlib has and keel does not:

* capacity: max_elements and element_count (hnswlib's slots: live labels
  plus labels marked deleted), checked before any add (all or none);
* marked deletion: mark_deleted() deletes the label from keel and keeps its
  vector here, so unmark_deleted() can add it back, get_ids_list() still
  lists it and allow_replace_deleted adds can reuse its slot;
* the auto label counter (cur_l: labels cur_l + row when ids is None);
* hnswlib's distances: squared L2 (keel reports the Euclidean distance),
  1 - dot and 1 - cos, as float32.

That state is saved beside the keel file in ``<file>.hnswlib`` (an npz
file: a JSON header and the marked-deleted labels and vectors); a keel file
without one (from ``keel build``, C or another program) loads with
max_elements = its count and nothing marked deleted. The keel file itself
is complete: every keel tool opens it.

BFIndex is exact search in numpy and saves hnswlib's brute-force format.
convert() reads hnswlib's saved HNSW format (hnswalg.h, saveIndex) into a
keel file. doc/python.md lists every difference from hnswlib and why.
"""

import functools
import operator
import os
import sys
import tempfile
import threading
import warnings

import numpy as np

from . import _keel
from ._errors import IdNotFoundError, NotAnIndexError
from ._hnswfiles import SIDECAR, read_bruteforce, read_hnswlib, read_sidecar, \
    write_bruteforce, write_sidecar
from ._index import IndexReader, VectorIndex

__all__ = ["Index", "BFIndex", "convert", "read_hnswlib"]

_SPACES = ("l2", "ip", "cosine")
_NONE = np.uint64(2**64 - 1)         # keel's padding for a missing result
_MAX_EF = 100000                     # keel's largest ef


def _space(space):
    if space not in _SPACES:
        raise RuntimeError("Space name must be one of l2, ip, or cosine."
                           "\nhelp: %r is not one of them" % (space,))
    return space


def _size_t(value, name):
    """value as hnswlib's size_t arguments take it: an integer (a Python
    or numpy one) at least 0; anything else raises TypeError, as
    hnswlib's binding does (a float is not truncated to a label)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer, not %r\nhelp: give a whole "
                        "number (hnswlib takes no %s here)"
                        % (name, value, type(value).__name__)) from None
    if v < 0:
        raise TypeError("%s must be at least 0, not %d\nhelp: give a whole "
                        "number from 0 up" % (name, v))
    return v


def _rows(data):
    """data as a C-contiguous float32 2-D array (hnswlib's forcecast)."""
    x = np.ascontiguousarray(np.asarray(data, dtype=np.float32))
    if x.ndim not in (1, 2):
        raise RuntimeError(
            "Input vector data wrong shape. Number of dimensions %d. Data "
            "must be a 1D or 2D array.\nhelp: give one vector or a 2-D array "
            "of one vector a row" % x.ndim)
    return x.reshape(1, -1) if x.ndim == 1 else x


def _labels(ids, rows):
    """ids (None or array-like) as uint64 labels for rows vectors, checked
    as hnswlib checks them."""
    if ids is None:
        return None
    a = np.asarray(ids)
    if not (a.ndim == 1 and a.shape[0] == rows or a.ndim == 0 and rows == 1):
        raise RuntimeError(
            "The input label shape %d does not match the input data vector "
            "shape %d\nhelp: give one id a vector (%d), as a list or a 1-D "
            "array" % (a.ndim, rows, rows))
    return _as_uint64(a).reshape(-1)


def _as_uint64(a):
    if a.dtype.kind == "i":
        return a.astype(np.int64).view(np.uint64)    # -1 wraps, as size_t
    return a.astype(np.uint64)


def _check_rows(x, dim, space):
    if x.shape[1] != dim:
        raise RuntimeError("Wrong dimensionality of the vectors\nhelp: give "
                           "vectors of %d values (these have %d)"
                           % (dim, x.shape[1]))
    if x.size and not np.isfinite(x).all():
        row = int(np.nonzero(~np.isfinite(x).all(axis=1))[0][0])
        raise ValueError("vector %d holds a NaN or infinite value\nhelp: "
                         "keel stores finite vectors only" % row)
    if space == "cosine" and x.size:
        zero = np.nonzero(~x.any(axis=1))[0]
        if zero.size:
            raise ValueError(
                "vector %d is all zeros, which has no direction for cosine "
                "distance\nhelp: drop zero vectors, or use space 'l2' or "
                "'ip'" % int(zero[0]))


def _contiguous_error():
    return RuntimeError(
        "Cannot return the results in a contiguous 2D array. Probably ef or "
        "M is too small\nhelp: ask for k at most the number of vectors the "
        "search can reach (live, and passing the filter), or raise ef")


def _not_found(label=None):
    return RuntimeError("Label not found\nhelp: %s is not a live label of "
                        "the index; get_ids_list() lists its labels"
                        % ("a label asked for" if label is None else
                           "label %d" % label))


class _Backing(VectorIndex):
    """A keel writer whose unsaved changes are meant to go (an index in
    memory or a private copy of a loaded file): closing it does not warn.
    A private copy's file is unlinked once open; the undo log keel keeps
    beside it while adds are unflushed would then outlive it, so closing
    (or dropping) the copy removes that log too."""

    _warns_on_drop = False
    _orphan_undo = None     # path + ".undo" of a private copy

    def close(self):
        _keel.Index.close(self)
        self._remove_orphan_undo()

    def __del__(self):
        self._remove_orphan_undo()

    def _remove_orphan_undo(self):
        # The copy's file is gone, so nothing can open the log again.
        if self._orphan_undo is not None:
            try:
                os.unlink(self._orphan_undo)
            except FileNotFoundError:
                pass


def _open_private(tmp, dim):
    """A _Backing on tmp, unlinked at once (its undo log at close)."""
    try:
        ix = _Backing(tmp, dim)
        ix._orphan_undo = tmp + ".undo"
    finally:
        os.unlink(tmp)
    return ix


def _private_copy(path):
    """A writer on a private copy of the keel file at path (its last flush):
    the copy is unlinked once open, so it goes away with the handle."""
    try:
        reader = IndexReader(path)
    except NotAnIndexError:
        raise RuntimeError(
            "%s is not a keel index\nhelp: if hnswlib saved it, convert it "
            "once with keel.hnswlib.convert(%r, 'index.keel') (or keel "
            "import-hnswlib) and load that" % (path, path)) from None
    fd, tmp = tempfile.mkstemp(prefix="keel-hnswlib-", suffix=".keel")
    os.close(fd)
    try:
        reader.backup(tmp)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        reader.close()
    return _open_private(tmp, None)


def _zero_until_made(attr):
    """A read-only property: self.<attr> once init_index or load_index has
    made the index, 0 before, as hnswlib reports."""
    return property(lambda self: getattr(self, attr)
                    if self._ix is not None else 0)


def _changes(method):
    """Runs method holding the index's lock (calls that change it take
    turns; searches do not wait)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


class Index:
    """hnswlib.Index on keel.

    Index(space, dim, path=None): space is 'l2' (squared Euclidean), 'ip'
    (1 - dot) or 'cosine' (1 - cos). With path=, init_index() creates (or
    opens) the keel file there and every save_index() or flush() makes the
    index durable in place, readable meanwhile by keel.IndexReader in other
    processes. Index(params) and Index(index) copy, as hnswlib's do.
    """

    def __init__(self, space=None, dim=None, path=None, *, params=None,
                 index=None):
        if isinstance(space, dict) and dim is None:
            params, space = space, None
        elif isinstance(space, Index) and dim is None:
            index, space = space, None
        if index is not None:
            params = index.__getstate__()
        if params is not None:
            self._restore(params)
            return
        if space is None or dim is None:
            raise TypeError("Index() takes space and dim: Index('l2', 128)"
                            "\nhelp: give the space ('l2', 'ip' or 'cosine') "
                            "and the number of dimensions")
        self._reset(_space(space), int(dim), path)

    def _reset(self, space, dim, path):
        self._space_name = space
        self._dim = dim
        self._path = None if path is None else os.fsdecode(path)
        self._ix = None
        self._ef = 10
        self.num_threads = os.cpu_count() or 1
        self._m = 0
        self._efc = 0
        self._max = 0
        self._count = 0          # hnswlib's cur_element_count
        self._cur_l = 0          # the next automatic label
        self._seed = 100
        self._replace = False    # allow_replace_deleted
        self._deleted = {}       # marked deleted: label -> stored vector
        # Changes (adds, marks, loads, saves) take turns: the state above
        # and keel's must move together. Searches do not take it.
        self._lock = threading.RLock()

    # -- creating and loading -------------------------------------------

    @_changes
    def init_index(self, max_elements, M=16, ef_construction=200,
                   random_seed=100, allow_replace_deleted=False):
        if self._ix is not None:
            raise RuntimeError("The index is already initiated.\nhelp: call "
                               "init_index once; resize_index() grows it")
        self._m = _size_t(M, "M")
        self._efc = _size_t(ef_construction, "ef_construction")
        self._seed = _size_t(random_seed, "random_seed")
        self._replace = bool(allow_replace_deleted)
        self._max = _size_t(max_elements, "max_elements")
        opts = dict(metric=self.space, max_connections=self._m,
                    ef_construction=self._efc)
        if self._path is not None and os.path.exists(self._path):
            # An index made before: reopen it with its own M and state.
            del opts["max_connections"]
            self._ix = VectorIndex(self._path, self.dim, **opts)
            self._m = int(self._ix.stats()["max_connections"])
            self._adopt(self._path, self._max)
        elif self._path is not None:
            self._ix = VectorIndex(self._path, self.dim, **opts)
        else:
            self._ix = _Backing(":memory:", self.dim, **opts)

    @_changes
    def load_index(self, path_to_index, max_elements=0,
                   allow_replace_deleted=False):
        path = os.fsdecode(path_to_index)
        max_elements = _size_t(max_elements, "max_elements")
        if self._ix is not None:
            print("Warning: Calling load_index for an already inited index. "
                  "Old index is being deallocated.", file=sys.stderr)
            self._close_backing()
        url = path.startswith("s3://")
        own = not url and self._path is not None and \
            os.path.abspath(path) == os.path.abspath(self._path)
        if url:
            ix = IndexReader(path)
        elif own:
            ix = VectorIndex(path, None)
        else:
            if not os.path.exists(path):
                raise RuntimeError("Cannot open file\nhelp: %s does not "
                                   "exist; give the path save_index wrote"
                                   % path)
            ix = _private_copy(path)
        st = ix.stats()
        if st["dimensions"] != self.dim or st["metric"] != self.space:
            ix.close()
            raise ValueError(
                "the index at %s holds %s vectors of %d dimensions, not %s of "
                "%d\nhelp: load it into hnswlib.Index(%r, %d)"
                % (path, st["metric"], st["dimensions"], self.space, self.dim,
                   st["metric"], st["dimensions"]))
        self._ix = ix
        if not own:
            # The loaded index is not the file of path=: its saves must not
            # write that file's .hnswlib (nor flush() claim that file).
            self._path = None
        self._m = int(st["max_connections"])
        self._efc = 200
        self._ef = 10
        self._count = 0
        self._deleted = {}
        self._max = 0
        self._adopt(None if url else path, 0)
        self._cur_l = self._count
        self._max = int(max_elements) if int(max_elements) >= self._count \
            else self._max
        self._replace = bool(allow_replace_deleted)

    def _adopt(self, path, max_elements):
        """Takes the hnswlib state saved beside path (or the defaults)."""
        live = len(self._ix)
        meta = read_sidecar(path, self._ix) if path is not None else None
        if meta is None:
            self._deleted = {}
            self._count = live
            self._max = max(live, max_elements)
            self._cur_l = live
            return
        self._deleted = meta["deleted"]
        self._count = max(int(meta["element_count"]),
                          live + len(self._deleted))
        self._max = max(int(meta["max_elements"]), self._count, max_elements)
        self._cur_l = int(meta["cur_l"])
        self._efc = int(meta["ef_construction"])

    def _close_backing(self):
        if self._ix is not None and not self._ix.closed:
            self._ix.close()
        self._ix = None

    def _meta(self):
        return {"max_elements": self._max, "element_count": self._count,
                "cur_l": self._cur_l, "ef_construction": self._efc,
                "M": self._m, "space": self.space}

    @_changes
    def save_index(self, path_to_index):
        ix = self._inited()
        path = os.fsdecode(path_to_index)
        ix.flush()
        if self._path is not None:
            write_sidecar(self._path, ix, self._meta(), self._deleted)
            if os.path.abspath(path) == os.path.abspath(self._path):
                return
        ix.backup(path)
        write_sidecar(path, ix, self._meta(), self._deleted)

    @_changes
    def flush(self):
        """keel: makes an index opened with path= durable (save_index of
        its own path); on other indexes it does nothing lasting."""
        ix = self._inited()
        ix.flush()
        if self._path is not None:
            write_sidecar(self._path, ix, self._meta(), self._deleted)

    def close(self):
        """keel: releases the index's keel handle (and its file lock)."""
        self._close_backing()

    # -- adding ---------------------------------------------------------

    @_changes
    def add_items(self, data, ids=None, num_threads=-1,
                  replace_deleted=False):
        ix = self._inited()
        x = _rows(data)
        rows = x.shape[0]
        _check_rows(x, self.dim, self.space)
        labels = _labels(ids, rows)
        if labels is None:
            labels = np.arange(self._cur_l, self._cur_l + rows,
                               dtype=np.uint64)
        if rows == 0:
            return
        if replace_deleted and not self._replace:
            raise RuntimeError(
                "Replacement of deleted elements is disabled in constructor"
                "\nhelp: init_index (or load_index) with "
                "allow_replace_deleted=True")
        if (labels == _NONE).any():
            raise ValueError("label 18446744073709551615 (2**64-1) cannot be "
                             "stored: keel reserves it\nhelp: use labels "
                             "below 2**64-1")
        # The last row of a label wins, as when hnswlib adds rows in order.
        uniq, last = np.unique(labels[::-1], return_index=True)
        if uniq.shape[0] != rows:
            keep = np.sort(rows - 1 - last)
            labels, x = labels[keep], x[keep]
        live = self._live(labels)
        deleted = self._deleted
        update = labels[live]
        plan_unmark = []        # marked-deleted labels added again
        taken = []              # marked-deleted labels whose slot is reused
        new_slots = 0
        fresh = labels[~live].tolist()
        if deleted:
            again = set(l for l in fresh if l in deleted)
            if again and self._replace and not replace_deleted:
                raise RuntimeError(
                    "Can't use addPoint to update deleted elements if "
                    "replacement of deleted elements is enabled.\nhelp: add "
                    "with replace_deleted=True, or unmark_deleted() first")
            plan_unmark = list(again)
            fresh = [l for l in fresh if l not in again] if again else fresh
            if replace_deleted:
                vacancies = (l for l in deleted if l not in again)
                for _ in fresh:
                    label = next(vacancies, None)
                    if label is None:
                        break
                    taken.append(label)
        new_slots = len(fresh) - len(taken)
        if self._count + new_slots > self._max:
            raise RuntimeError(
                "The number of elements exceeds the specified limit\nhelp: "
                "the index holds %d of max_elements %d and these add %d: call "
                "resize_index() first" % (self._count, self._max, new_slots))
        # keel has no replace: the labels there go, then come back with
        # their new vectors; if keel refuses the batch (all of it), their
        # old vectors come back instead.
        old = ix.get(update) if update.size else None
        if update.size:
            ix.delete(update)
        try:
            ix.add_batch(x, labels)
        except BaseException:
            if old is not None:
                ix.add_batch(old, update)
            raise
        for label in plan_unmark:
            del deleted[label]
        for label in taken:
            del deleted[label]
        self._count += new_slots
        self._cur_l += rows

    def _live(self, labels):
        """A bool array: which labels are live in keel."""
        ix = self._ix
        if len(ix) == 0:
            return np.zeros(labels.shape[0], bool)
        if labels.shape[0] < 64:
            return np.fromiter((int(l) in ix for l in labels.tolist()),
                               bool, count=labels.shape[0])
        return np.isin(labels, ix.ids(), assume_unique=True)

    # -- searching ------------------------------------------------------

    def knn_query(self, data, k=1, num_threads=-1, filter=None):
        ix = self._inited()
        x = _rows(data)
        if x.shape[1] != self.dim:
            raise RuntimeError("Wrong dimensionality of the vectors\nhelp: "
                               "give queries of %d values (these have %d)"
                               % (self.dim, x.shape[1]))
        k = _size_t(k, "k")
        n = x.shape[0]
        if k == 0 or n == 0:
            return (np.zeros((n, k), np.uint64), np.zeros((n, k), np.float32))
        allowed = None
        if filter is not None:
            allowed = _keel_filter(ix.ids(), filter)
        if k > len(ix):
            raise _contiguous_error()
        ef = min(max(self._ef, k), _MAX_EF)
        labels, dist = ix.search_batch(x, k=k, ef=ef, allowed=allowed)
        if labels[:, -1].max() == _NONE:
            raise _contiguous_error()
        if self.space == "l2":
            np.square(dist, out=dist)
        return labels, dist

    def set_ef(self, ef):
        self._ef = _size_t(ef, "ef")

    def set_num_threads(self, num_threads):
        self.num_threads = int(num_threads)

    # -- deleting -------------------------------------------------------

    @_changes
    def mark_deleted(self, label):
        label = _size_t(label, "label")
        ix = self._inited()
        if label in self._deleted:
            raise RuntimeError(
                "The requested to delete element is already deleted\nhelp: "
                "label %d is marked deleted; unmark_deleted() brings it "
                "back" % label)
        try:
            vec = ix.get(label)
        except IdNotFoundError:
            raise _not_found(label) from None
        ix.delete(label)
        self._deleted[label] = vec

    @_changes
    def unmark_deleted(self, label):
        label = _size_t(label, "label")
        ix = self._inited()
        vec = self._deleted.get(label)
        if vec is None:
            if label in ix:
                raise RuntimeError(
                    "The requested to undelete element is not deleted\nhelp: "
                    "label %d is live; only a label mark_deleted() marked "
                    "can be unmarked" % label)
            raise _not_found(label)
        ix.add(vec, id=label)
        del self._deleted[label]

    @_changes
    def resize_index(self, new_size):
        new_size = _size_t(new_size, "new_size")
        self._inited()
        if new_size < self._count:
            raise RuntimeError(
                "Cannot resize, max element is less than the current number "
                "of elements\nhelp: the index holds %d elements (marked "
                "deleted ones count); give at least that" % self._count)
        self._max = new_size

    # -- reading --------------------------------------------------------

    def get_items(self, ids=None, return_type="numpy"):
        if return_type not in ("numpy", "list"):
            raise ValueError('return_type should be "numpy" or "list"\nhelp: '
                             '%r is neither' % (return_type,))
        ix = self._inited()
        if ids is None:
            labels = np.zeros(0, np.uint64)
        else:
            a = np.asarray(ids)
            if a.ndim == 0:
                raise ValueError("get_items accepts a list of indices and "
                                 "returns a list of vectors\nhelp: give "
                                 "[%s] for one" % a.item())
            labels = _as_uint64(a).reshape(-1)[:a.shape[0]]
        if labels.shape[0] == 0:
            out = np.zeros(0, np.float32)
        else:
            try:
                out = ix.get(labels)
            except IdNotFoundError:
                raise _not_found() from None
        return out.tolist() if return_type == "list" else out

    def get_ids_list(self):
        return self._inited().ids().tolist() + list(self._deleted)

    def get_max_elements(self):
        self._inited()
        return self._max

    def get_current_count(self):
        self._inited()
        return self._count

    def index_file_size(self):
        return int(self._inited().stats()["file_bytes"])

    @property
    def space(self):
        """read-only, as in hnswlib: the space the vectors are in."""
        return self._space_name

    @property
    def dim(self):
        """read-only, as in hnswlib: the number of dimensions."""
        return self._dim

    @property
    def ef(self):
        return self._ef

    @ef.setter
    def ef(self, value):
        self._ef = _size_t(value, "ef")

    M = _zero_until_made("_m")
    ef_construction = _zero_until_made("_efc")
    max_elements = _zero_until_made("_max")
    element_count = _zero_until_made("_count")

    @property
    def keel_index(self):
        """keel: the keel.VectorIndex (or IndexReader) holding the vectors."""
        return self._ix

    def _inited(self):
        if self._ix is None:
            raise RuntimeError(
                "The index is not initiated\nhelp: call init_index("
                "max_elements) or load_index(path) first")
        return self._ix

    # -- pickling -------------------------------------------------------

    def __getstate__(self):
        state = {"space": self.space, "dim": self.dim, "ef": self._ef,
                 "num_threads": self.num_threads, "seed": self._seed,
                 "inited": self._ix is not None}
        if self._ix is None:
            return state
        state.update(self._meta(), allow_replace_deleted=self._replace,
                     deleted_labels=list(self._deleted),
                     deleted_vectors=[v.tobytes()
                                      for v in self._deleted.values()])
        ix = self._ix
        fd, tmp = tempfile.mkstemp(prefix="keel-hnswlib-", suffix=".keel")
        os.close(fd)
        try:
            if self._path is not None:
                self.flush()            # its .hnswlib moves with the file
            elif not ix.read_only:
                ix.flush()
            ix.backup(tmp)
            with open(tmp, "rb") as f:
                state["keel"] = f.read()
        finally:
            os.unlink(tmp)
        return state

    def __setstate__(self, state):
        self._restore(state)

    def _restore(self, state):
        self._reset(_space(state["space"]), int(state["dim"]), None)
        self._ef = int(state["ef"])
        self.num_threads = int(state["num_threads"])
        self._seed = int(state.get("seed", 100))
        if not state.get("inited"):
            return
        fd, tmp = tempfile.mkstemp(prefix="keel-hnswlib-", suffix=".keel")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(state["keel"])
        except BaseException:
            os.unlink(tmp)
            raise
        self._ix = _open_private(tmp, self.dim)
        self._m = int(state["M"])
        self._efc = int(state["ef_construction"])
        self._max = int(state["max_elements"])
        self._count = int(state["element_count"])
        self._cur_l = int(state["cur_l"])
        self._replace = bool(state["allow_replace_deleted"])
        self._deleted = {int(l): np.frombuffer(v, np.float32).copy()
                         for l, v in zip(state["deleted_labels"],
                                         state["deleted_vectors"])}

    def __repr__(self):
        return "<keel.hnswlib.Index(space='%s', dim=%d)>" % (self.space,
                                                             self.dim)


def _keel_filter(labels, fn):
    """keel.Filter of the labels (uint64 array) for which fn(label) is
    true: hnswlib's filter callable, asked once per label."""
    from ._allow import Filter
    keep = [l for l in labels.tolist() if fn(l)]
    return Filter(np.array(keep, dtype=np.uint64))


class BFIndex:
    """hnswlib.BFIndex: exact search, here in numpy. save_index writes
    hnswlib's brute-force file format (the real hnswlib reads it)."""

    def __init__(self, space, dim):
        self.space = _space(space)
        self.dim = int(dim)
        self.num_threads = os.cpu_count() or 1
        self._vectors = None

    def init_index(self, max_elements):
        if self._vectors is not None:
            raise RuntimeError("The index is already initiated.\nhelp: call "
                               "init_index once; resize_index() grows it")
        self._alloc(_size_t(max_elements, "max_elements"))

    def _alloc(self, max_elements):
        try:
            vectors = np.zeros((max_elements, self.dim), np.float32)
            labels = np.zeros(max_elements, np.uint64)
        except (MemoryError, ValueError):
            raise RuntimeError(
                "Not enough memory: BruteforceSearch failed to allocate data"
                "\nhelp: max_elements %d of %d dimensions needs %d bytes; "
                "give a smaller max_elements" % (
                    max_elements, self.dim, max_elements * (self.dim * 4 + 8))
            ) from None
        self._max = max_elements
        self._vectors = vectors
        self._labels = labels
        self._where = {}
        self._count = 0
        self._cur_l = 0

    def _inited(self):
        if self._vectors is None:
            raise RuntimeError(
                "The index is not initiated\nhelp: call init_index("
                "max_elements) or load_index(path) first")

    def add_items(self, data, ids=None):
        self._inited()
        x = _rows(data)
        rows = x.shape[0]
        if x.shape[1] != self.dim:
            raise RuntimeError("Wrong dimensionality of the vectors\nhelp: "
                               "give vectors of %d values (these have %d)"
                               % (self.dim, x.shape[1]))
        labels = _labels(ids, rows)
        if labels is None:
            labels = np.arange(self._cur_l, self._cur_l + rows,
                               dtype=np.uint64)
        if self.space == "cosine":
            x = _normalized(x)
        for row, label in enumerate(labels.tolist()):
            at = self._where.get(label)
            if at is None:
                if self._count >= self._max:
                    raise RuntimeError(
                        "The number of elements exceeds the specified limit"
                        "\nhelp: this BFIndex holds max_elements %d; "
                        "init_index a larger one" % self._max)
                at = self._count
                self._count += 1
                self._where[label] = at
                self._labels[at] = label
            self._vectors[at] = x[row]
        self._cur_l += rows

    def delete_vector(self, label):
        label = _size_t(label, "label")
        self._inited()
        at = self._where.pop(label, None)
        if at is None:
            return
        last = self._count - 1
        if at != last:
            moved = int(self._labels[last])
            self._vectors[at] = self._vectors[last]
            self._labels[at] = moved
            self._where[moved] = at
        self._count = last

    def knn_query(self, data, k=1, num_threads=-1, filter=None):
        self._inited()
        x = _rows(data)
        if x.shape[1] != self.dim:
            raise RuntimeError("Wrong dimensionality of the vectors\nhelp: "
                               "give vectors of %d values (these have %d)"
                               % (self.dim, x.shape[1]))
        k = _size_t(k, "k")
        n = self._count
        vec = self._vectors[:n]
        lab = self._labels[:n]
        if filter is not None:
            keep = np.fromiter((bool(filter(l)) for l in lab.tolist()), bool,
                               count=n)
            vec, lab = vec[keep], lab[keep]
        if k > lab.shape[0]:
            raise _contiguous_error()
        out_l = np.zeros((x.shape[0], k), np.uint64)
        out_d = np.zeros((x.shape[0], k), np.float32)
        if k == 0:
            return out_l, out_d
        v64 = vec.astype(np.float64)
        vn = np.einsum("ij,ij->i", v64, v64)
        step = max(1, (1 << 22) // max(1, lab.shape[0]))
        for i in range(0, x.shape[0], step):
            q = x[i:i + step].astype(np.float64)
            dot = q @ v64.T
            if self.space == "l2":
                d = np.maximum(np.einsum("ij,ij->i", q, q)[:, None] + vn -
                               2 * dot, 0)
            else:       # hnswlib's brute force does not normalize queries
                d = 1 - dot
            d = d.astype(np.float32)
            part = np.argpartition(d, k - 1, axis=1)[:, :k] \
                if k < d.shape[1] else np.tile(np.arange(d.shape[1]),
                                               (d.shape[0], 1))
            pd = np.take_along_axis(d, part, axis=1)
            order = np.argsort(pd, axis=1, kind="stable")
            out_l[i:i + step] = lab[np.take_along_axis(part, order, axis=1)]
            out_d[i:i + step] = np.take_along_axis(pd, order, axis=1)
        return out_l, out_d

    def set_num_threads(self, num_threads):
        self.num_threads = int(num_threads)

    def get_max_elements(self):
        self._inited()
        return self._max

    def get_current_count(self):
        self._inited()
        return self._count

    def save_index(self, path_to_index):
        self._inited()
        write_bruteforce(path_to_index, self._max,
                         self._labels[:self._count],
                         self._vectors[:self._count])

    def load_index(self, path_to_index, max_elements=0):
        if self._vectors is not None:
            print("Warning: Calling load_index for an already inited index. "
                  "Old index is being deallocated.", file=sys.stderr)
        cap, labels, vectors = read_bruteforce(path_to_index, self.dim)
        count = labels.shape[0]
        self._alloc(cap)
        self._vectors[:count] = vectors
        self._labels[:count] = labels
        self._where = {l: i for i, l in
                       enumerate(self._labels[:count].tolist())}
        self._count = count
        self._cur_l = count

    def __repr__(self):
        return "<keel.hnswlib.BFIndex(space='%s', dim=%d)>" % (self.space,
                                                               self.dim)


def _normalized(x):
    """hnswlib's normalize_vector: x / (|x| + 1e-30), in float32."""
    norm = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float32))
    return (x * (np.float32(1) / (norm + np.float32(1e-30)))[:, None]) \
        .astype(np.float32)


def convert(hnswlib_file, keel_file, space="l2"):
    """Reads an index saved by hnswlib's save_index into a new keel file
    with the same labels and vectors (keel links its own graph). Labels
    marked deleted stay marked deleted (in keel_file's .hnswlib beside it);
    max_elements and ef_construction carry over. hnswlib's file does not
    record its space: give 'ip' or 'cosine' if it is not 'l2'. Returns the
    Index, open on keel_file."""
    h, labels, vectors, deleted = read_hnswlib(hnswlib_file)
    out = os.fsdecode(keel_file)
    if os.path.exists(out):
        raise FileExistsError(
            "%s already exists\nhelp: give a new path for the keel file"
            % out)
    index = Index(space, h["dim"], path=out)
    try:
        # keel's limits, as keel import-hnswlib takes them: M 2..32767,
        # ef_construction 1..100000 (0 means the default, 200).
        index.init_index(max_elements=max(h["max_elements"], 1),
                         M=min(max(h["m"], 2), 32767),
                         ef_construction=min(h["ef_construction"] or 200,
                                             _MAX_EF))
        live = ~deleted
        index.add_items(vectors[live], labels[live])
        # A label live in one slot and marked deleted in another (hnswlib's
        # replace_deleted can leave that) is live: keel has one per label.
        deleted &= ~np.isin(labels, labels[live])
        for label, vec in zip(labels[deleted].tolist(), vectors[deleted]):
            index._deleted[label] = vec.copy()
        index._count = len(labels)
        index._cur_l = len(labels)
        index.flush()
    except BaseException:
        # A failed convert leaves no half-made keel file (as keel
        # import-hnswlib): a second try with the same path can go ahead.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            index.close()
        for leftover in (out, out + SIDECAR):
            if os.path.exists(leftover):
                os.unlink(leftover)
        raise
    return index
