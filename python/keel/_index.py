"""_index.py -- keel.VectorIndex and keel.IndexReader.

Both are Python subclasses of the C type keel._keel.Index, which holds the
handle and implements every method on the per-call path (add, search, ...)
in C. This module adds what runs once per handle: option translation,
opening (with the file's own metric, precision and codes when the caller
did not name them), the context manager and repr.
"""

import atexit
import os
import warnings
import weakref

from . import _keel
from ._errors import DimensionMismatchError, OptionsMismatchError
from ._options import CODES_CODES, METRIC_CODES, PRECISION_CODES, \
    IndexOptions


def _dimensions(value):
    if value is None:
        return 0
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("dimensions has to be an integer, not %s (%r)\n"
                        "help: give the length of the vectors as an int, "
                        "such as 384 (or None to take it from an existing "
                        "file)" % (type(value).__name__, value))
    value = int(value.__index__())
    if not 0 <= value <= 4096:
        from ._errors import InvalidArgumentError
        raise InvalidArgumentError(
            "dimensions is %d, but has to be between 1 and 4096 (or 0 or "
            "None to take them from an existing file)\nhelp: give the length "
            "of the vectors the index will hold, such as 384, 768 or 1536"
            % value)
    return value


class PublishResult(int):
    """What publish() returns: the bytes sent, an int as before, with two
    attributes: version, the version at the URL that holds the flush, and
    unchanged, True when the newest version held it already (nothing was
    sent and no version made: a publish with no flush since the last)."""

    def __new__(cls, sent, version, unchanged):
        self = super().__new__(cls, sent)
        self._version = int(version)
        self._unchanged = bool(unchanged)
        return self

    @property
    def version(self):
        """The version at the URL that holds the flush."""
        return self._version

    @property
    def unchanged(self):
        """True when that version was there already: nothing was sent."""
        return self._unchanged

    def __repr__(self):
        return "PublishResult(sent=%d, version=%d, unchanged=%r)" % (
            int(self), self._version, self._unchanged)


def versions(url):
    """The versions published at url, "s3://BUCKET/PREFIX", oldest first:
    a list of dicts with version (int), manifest_bytes (int), last_modified
    (a UTC datetime, as the store lists the manifest, or None), newest
    (True for the largest, the one readers open) and latest_hint (True for
    the one the `latest` hint names). One listing and one GET. Nothing
    published there raises IndexNotFoundError; a listing the store does not end
    raises IndexIOError."""
    import datetime
    utc = datetime.timezone.utc
    return [{"version": v, "manifest_bytes": size,
             "last_modified": None if ms < 0 else
             datetime.datetime.fromtimestamp(ms // 1000, utc).replace(
                 microsecond=ms % 1000 * 1000),
             "newest": newest, "latest_hint": hinted}
            for v, size, ms, newest, hinted in _keel.versions(url)]


class UnflushedWarning(UserWarning):
    """Unflushed adds or deletes were dropped (close(), garbage collection,
    interpreter exit) or left out (publish()). A UserWarning, so Python
    shows it by default; turn it into an error with
    warnings.simplefilter("error", keel.UnflushedWarning)."""


# Every open writer, so that interpreter exit can say what it drops.
_writers = weakref.WeakSet()


@atexit.register
def _exit_drops():
    for index in list(_writers):
        if not index._warns_on_drop:
            continue
        adds, deletes = index._dropping()
        if adds or deletes:
            _warn_dropped(index.path, adds, deletes, "interpreter exit", 1)
            _keel.Index.close(index)    # said once; garbage collection is quiet


def _is_url(path):
    prefix = b"s3://" if isinstance(path, bytes) else "s3://"
    return path.startswith(prefix)


def _no_cache_options(opts, path, what):
    """InvalidArgumentError if a page cache option is set for a handle that
    has no page cache (what: "the writer of" or "a reader of the file")."""
    given = opts.cache_given()
    if not given:
        return
    from ._errors import InvalidArgumentError
    names = " and ".join(given)
    raise InvalidArgumentError(
        "option%s %s %s only to a reader of a published index "
        "(keel.IndexReader('s3://BUCKET/PREFIX', ...)), not to %s %s\n"
        "help: leave %s out (or None) here; a file's pages are cached by the "
        "system" % ("s" if len(given) > 1 else "", names,
                    "apply" if len(given) > 1 else "applies", what,
                    os.fsdecode(path), names))


def _path(path):
    try:
        return os.fspath(path)
    except TypeError:
        raise TypeError("path has to be a str, bytes or os.PathLike, not %s "
                        "(%r)\nhelp: pass the index file's path, such as "
                        "'vectors.keel'" % (type(path).__name__, path)) \
            from None


class VectorIndex(_keel.Index):
    """A keel vector index: one file of vectors, ids and an HNSW graph.

    VectorIndex(path, dimensions, options=None, read_only=False, **options)

    Opens the index at path as its writer, creating the file if it is
    missing (dimensions None or 0 takes them from an existing file). With
    read_only=True it opens a reader instead, like IndexReader. options is
    an IndexOptions or a dict; keyword options (metric="cosine", ...) are
    applied on top. metric, precision, codes and max_connections shape a
    new file; an existing file keeps its own, those not named are taken
    from it and naming others raises OptionsMismatchError. codes="i8" makes
    searches walk the graph on an int8 copy of each vector (faster at the
    same recall, 16 + dimensions bytes rounded up to 64 more per vector),
    codes="i4" on a 4-bit copy (half the bytes, for long vectors); the
    distances they return stay exact. The page cache options (cache_dir, cache_bytes,
    memory_cache_bytes) belong to readers of published indexes: set (not
    None) for a writer or a reader of a file, they raise
    InvalidArgumentError.

    Adds and deletes are visible to searches on this handle at once and
    become durable together at flush(). close() does not flush; leaving a
    ``with`` block without an exception flushes, then closes. Closing,
    garbage-collecting or exiting the interpreter with unflushed adds or
    deletes of a writer drops them and emits a keel.UnflushedWarning (shown
    by default) that counts them; so does publish() for the changes it
    leaves out.

    An object opens once: calling __init__ again raises.
    """

    def __init__(self, path, dimensions, options=None, read_only=False,
                 **kwargs):
        opts = IndexOptions.coerce(options, kwargs)
        path = _path(path)
        dim = _dimensions(dimensions)
        if read_only:
            if not _is_url(path):
                _no_cache_options(opts, path, "a reader of the file")
            self._open_reader(path, dim, opts)
        else:
            _no_cache_options(opts, path, "the writer of")
            self._open_writer(path, dim, opts)
            _writers.add(self)
        # The handle's options, with the file's own fixed fields.
        st = self.stats()
        self._options = opts.replace()
        for name, value in (("metric", st["metric"]),
                            ("precision", st["precision"]),
                            ("codes", st["codes"]),
                            ("max_connections", st["max_connections"])):
            object.__setattr__(self._options, name, value)

    def _open_writer(self, path, dim, opts):
        def attempt(metric, precision, codes):
            self._open(path, dim, METRIC_CODES[metric],
                       PRECISION_CODES[precision], CODES_CODES[codes],
                       opts.max_connections
                       if opts.given("max_connections") else 0,
                       opts.ef_construction, opts.ef_search, opts.threads,
                       opts.flags(), False)

        fixed = ("metric", "precision", "codes")
        try:
            attempt(*(getattr(opts, name) for name in fixed))
            return
        except OptionsMismatchError:
            if all(opts.given(name) for name in fixed):
                raise
            # The caller did not name them all: use the file's own for the
            # others.
            peek = _keel.Index()
            peek._open(path, 0, 0, 0, 0, 0, 0, 0, 0, 0, True)
            st = peek.stats()
            peek.close()
            values = tuple(getattr(opts, name) if opts.given(name)
                           else st[name] for name in fixed)
            if values == tuple(getattr(opts, name) for name in fixed):
                raise
        attempt(*values)

    def _open_reader(self, path, dim, opts):
        if path in (":memory:", b":memory:"):
            from ._errors import InvalidArgumentError
            raise InvalidArgumentError(
                "\":memory:\" names an index in memory, which has no "
                "readers: it lives in the VectorIndex that opened it\nhelp: "
                "search through that VectorIndex (searches run alongside its "
                "writes); a file named :memory: opens as \"./:memory:\"")
        self._open(path, 0, 0, 0, 0, 0, opts.ef_construction,
                   opts.ef_search, opts.threads, opts.flags(), True,
                   *opts.cache())
        # keel_open_reader takes these from the file; check what was named.
        st = self.stats()
        if dim and dim != st["dimensions"]:
            self.close()
            raise DimensionMismatchError(
                "the index at %s holds vectors of %d dimensions, not %d\n"
                "help: open it with dimensions %d (or None to take them from "
                "the file)" % (path, st["dimensions"], dim, st["dimensions"]))
        for name in ("metric", "precision", "codes", "max_connections"):
            value = getattr(opts, name)
            if opts.given(name) and value != st[name]:
                self.close()
                raise OptionsMismatchError(
                    "the index at %s was created with %s %s, not %s\nhelp: "
                    "open it with %s %s, or leave %s out to take it from the "
                    "file" % (path, name, st[name], value, name, st[name],
                              name))

    def _dropping(self):
        """(adds, deletes) a close would drop now; (0, 0) if none or
        unknown."""
        if self.read_only or self.closed or self._inherited or \
                self.path == ":memory:":    # nothing there outlives close
            return (0, 0)
        try:
            return self._pending()
        except Exception:
            return (0, 0)

    # Whether dropped changes warn (close, garbage collection, exit); a
    # subclass whose changes are meant to go sets it False.
    _warns_on_drop = True

    def publish(self, url, *, replace=False):
        """Publish the last flush as the next version at
        's3://BUCKET/PREFIX'; returns the bytes sent, as a PublishResult
        (an int) whose .version is the version that holds the flush and
        whose .unchanged is True when the newest version held it already:
        then nothing was sent and no version made. Another index at the
        URL is refused unless replace=True; its readers then keep their
        version. Adds and deletes not flushed are not published: an
        UnflushedWarning counts them."""
        adds, deletes = self._dropping()
        if adds or deletes:
            what = " and ".join(_plural(n, w) for n, w in
                                ((adds, "add"), (deletes, "delete")) if n)
            warnings.warn(
                "publish() sends the last flush of %s: %s not flushed %s not "
                "published\nhelp: call flush() before publish() to publish "
                "them" % (self.path, what,
                          "is" if adds + deletes == 1 else "are"),
                UnflushedWarning, stacklevel=2)
        return PublishResult(*super().publish(url, replace=replace))

    def close(self):
        """Close the handle; unflushed adds and deletes are lost (with an
        UnflushedWarning counting them). Calling it again does nothing."""
        adds, deletes = self._dropping()
        super().close()
        if adds or deletes:
            _warn_dropped(self.path, adds, deletes, "close()", 2)

    def __del__(self):
        adds, deletes = self._dropping()
        if adds or deletes:
            _warn_dropped(self.path, adds, deletes,
                          "garbage collection of the index object", 1)

    @property
    def options(self):
        """The handle's options (a copy), with the file's metric, precision,
        codes and max_connections."""
        return self._options.replace()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None and not self.closed and not self.read_only:
                self.flush()
        finally:
            if exc_type is None:
                self.close()
            else:   # the block failed: dropping its changes is the point
                _keel.Index.close(self)

    def __iter__(self):
        """The live ids, increasing, as Python ints: a snapshot taken when
        the iteration starts (ids() as a numpy array)."""
        return iter(self.ids().tolist())

    def __reduce__(self):
        raise TypeError("a keel index cannot be pickled\nhelp: pass its path "
                        "and open it again in the other process (a writer "
                        "there, or an IndexReader)")

    def __repr__(self):
        kind = type(self).__name__
        if self.closed:
            return "<keel.%s %r closed>" % (kind, self.path)
        if self._inherited:
            return "<keel.%s %r inherited through fork: close only>" % (
                kind, self.path)
        if self._busy:      # in a signal handler that interrupted a call
            return "<keel.%s %r inside %s() on this thread>" % (
                kind, self.path, self._busy)
        return "<keel.%s %r dimensions=%d metric=%r precision=%r len=%d%s>" % (
            kind, self.path, self.dimensions, self.metric, self.precision,
            len(self), " read_only" if self.read_only else "")


def _plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


def _warn_dropped(path, adds, deletes, by, stacklevel):
    what = " and ".join(
        _plural(n, w) for n, w in ((adds, "add"), (deletes, "delete")) if n)
    warnings.warn(
        "%s dropped %s not flushed to the index at %s\nhelp: call flush() "
        "before closing, or use the index in a with block (which flushes "
        "when it ends without an exception)" % (by, what, path),
        UnflushedWarning, stacklevel=stacklevel + 1)


class IndexReader(VectorIndex):
    """A read-only handle on an existing index.

    IndexReader(path, options=None, **options)

    Takes no lock and never writes the file; any number of readers in any
    process search while one writer writes. Each search uses the last
    completed flush; len() counts live vectors at the last snapshot (a
    search or refresh() takes a new one). Only ef_search, warm, huge_pages
    and threads of the options apply; metric, precision, codes and
    max_connections come from the file (naming other values raises
    OptionsMismatchError).

    path may be the URL of a published index, "s3://BUCKET/PREFIX"
    (VectorIndex.publish; endpoint and keys from AWS_ENDPOINT_URL,
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Its pages are fetched as
    searches need them into memory (memory_cache_bytes, default
    KEEL_MEMORY_CACHE_BYTES, else 1 GiB; at least 8 MiB) and a disk cache
    (cache_dir, default KEEL_CACHE_DIR, else none; its size limit
    cache_bytes, default KEEL_CACHE_BYTES, else 10 GiB). Those three
    options apply only to a URL: set for a file, they raise
    InvalidArgumentError. Ctrl-C stops a search or search_batch of a URL
    while it waits for the object store (KeyboardInterrupt within about
    0.05 s plus one request in flight); the reader stays usable.
    """

    def __init__(self, path, options=None, **kwargs):
        super().__init__(path, None, options, read_only=True, **kwargs)

    @property
    def published_version(self):
        """The version of a published index this reader serves (an int):
        the newest when it opened, then each newer one it moved to (by
        itself every 5 s while in use, or at refresh()). None for a reader
        of a file. Asks nothing of the object store."""
        return self._published_version()
