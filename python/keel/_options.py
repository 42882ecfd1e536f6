"""_options.py -- keel.IndexOptions: the options of an index handle.

Names and defaults are fixed by PRODUCT.md section 5. Unknown names are
refused with a suggestion, including the names other libraries use (M, ef,
space, ...). The object remembers which fields were given explicitly, so an
existing index can be opened with, say, only ef_search and keep its own
metric, precision and codes.
"""

import inspect
import os

from . import _coerce

FIELDS = ("max_connections", "ef_construction", "ef_search", "metric",
          "precision", "warm", "huge_pages", "threads", "cache_dir",
          "cache_bytes", "memory_cache_bytes", "codes")
DEFAULTS = {"max_connections": 16, "ef_construction": 200, "ef_search": 64,
            "metric": "l2", "precision": "f32", "warm": False,
            "huge_pages": False, "threads": 0, "cache_dir": None,
            "cache_bytes": None, "memory_cache_bytes": None,
            "codes": "none"}
# The page cache of a reader of a published index (IndexReader("s3://...")):
# keel_options.cache_dir, cache_bytes and memory_cache_bytes. None leaves
# each to the environment (KEEL_CACHE_DIR, KEEL_CACHE_BYTES,
# KEEL_MEMORY_CACHE_BYTES), then keel's default.
CACHE_FIELDS = ("cache_dir", "cache_bytes", "memory_cache_bytes")
CACHE_ENV = {"cache_dir": ("KEEL_CACHE_DIR", "no disk cache"),
             "cache_bytes": ("KEEL_CACHE_BYTES", "10 GiB"),
             "memory_cache_bytes": ("KEEL_MEMORY_CACHE_BYTES", "1 GiB")}

METRICS = {"l2": "l2", "euclidean": "l2", "euclid": "l2",
           "cosine": "cosine", "cos": "cosine", "angular": "cosine",
           "ip": "ip", "dot": "ip", "inner_product": "ip",
           "innerproduct": "ip"}
METRIC_CODES = {"l2": 0, "cosine": 1, "ip": 2}
PRECISIONS = {"f32": "f32", "float32": "f32", "full": "f32", "single": "f32",
              "f16": "f16", "float16": "f16", "half": "f16"}
PRECISION_CODES = {"f32": 0, "f16": 1}
CODES = {"none": "none", "i8": "i8", "i4": "i4"}
CODES_CODES = {"none": 0, "i8": 1, "i4": 2}
LIMITS = {"max_connections": (2, 32767), "ef_construction": (1, 100000),
          "ef_search": (1, 100000), "threads": (0, 4096)}


def _int_option(name, value):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("option %s takes an integer, not %s (%r)\nhelp: "
                        "pass an int from %d to %d; the default is %d"
                        % (name, type(value).__name__, value, LIMITS[name][0],
                           LIMITS[name][1], DEFAULTS[name]))
    value = int(value.__index__())
    lo, hi = LIMITS[name]
    if not lo <= value <= hi:
        from ._errors import InvalidArgumentError
        raise InvalidArgumentError(
            "option %s is %d, but has to be between %d and %d\nhelp: the "
            "default, %d, suits most indexes" % (name, value, lo, hi,
                                                 DEFAULTS[name]))
    return value


def _bytes_option(name, value):
    """A cache size: None, or a positive int below 2**64."""
    env, dflt = CACHE_ENV[name]
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError("option %s takes a number of bytes (an int) or None, "
                        "not %s (%r)\nhelp: pass an int such as 2**30 for "
                        "1 GiB, or None for %s (else %s)"
                        % (name, type(value).__name__, value, env, dflt))
    value = int(value.__index__())
    if not 0 < value < 2 ** 64:
        from ._errors import InvalidArgumentError
        raise InvalidArgumentError(
            "option %s is %d, but has to be a number of bytes from 1 to "
            "2**64 - 1\nhelp: pass a size such as 2**30 for 1 GiB, or None "
            "for %s (else %s)" % (name, value, env, dflt))
    return value


def _dir_option(name, value):
    """cache_dir: None, or a directory as str or bytes (os.PathLike
    accepted)."""
    if value is None:
        return None
    try:
        path = os.fspath(value)
    except TypeError:
        raise TypeError("option %s takes a directory (str, bytes or "
                        "os.PathLike) or None, not %s (%r)\nhelp: pass the "
                        "directory for the disk cache, such as "
                        "'/var/cache/keel', or None for KEEL_CACHE_DIR (else "
                        "no disk cache)" % (name, type(value).__name__,
                                            value)) from None
    if not path:
        from ._errors import InvalidArgumentError
        raise InvalidArgumentError(
            "option %s is an empty path\nhelp: pass the directory for the "
            "disk cache, such as '/var/cache/keel', or None for "
            "KEEL_CACHE_DIR (else no disk cache)" % name)
    return path


def _name_option(name, value, table):
    key = getattr(value, "name", value)  # numpy dtypes: np.dtype("float16")
    if isinstance(value, type) and hasattr(value, "__name__"):
        key = value.__name__           # np.float16
    if not isinstance(key, str) or key.lower() not in table:
        canon = sorted(set(table.values()))
        if len(table) > len(canon):
            hint = "also accepted: %s" % ", ".join(sorted(table))
        else:
            hint = "pass %s as a string, such as %s=%r" % (
                " or ".join(repr(c) for c in canon), name, canon[0])
        raise ValueError("option %s is %r, but has to be one of %s\nhelp: %s"
                         % (name, value, ", ".join(canon), hint))
    return table[key.lower()]


class IndexOptions:
    """Options of an index handle.

    IndexOptions(max_connections=16, ef_construction=200, ef_search=64,
                 metric="l2", precision="f32", warm=False,
                 huge_pages=False, threads=0, cache_dir=None,
                 cache_bytes=None, memory_cache_bytes=None, codes="none")

    metric, precision, codes and max_connections are fixed when the file
    is created; the others belong to the handle. metric: "l2" (Euclidean),
    "cosine" or "ip" (inner product). precision: "f32" or "f16". codes:
    "none", "i8" or "i4", traversal codes: searches walk the graph on an
    int8 copy of each vector (16 + dimensions bytes rounded up to 64 more
    per vector), faster at the same recall, and still return exact
    distances; "i4" walks on a 4-bit copy, half the bytes, for long vectors
    (784 dimensions: 448 bytes instead of 832).

    cache_dir, cache_bytes and memory_cache_bytes place the page cache of
    a reader of a published index, IndexReader("s3://BUCKET/PREFIX"): the
    disk cache directory (str, bytes or os.PathLike; shared safely by any
    number of processes), its size limit in bytes, and the memory for the
    index's pages in bytes (less than 8 MiB is raised to 8 MiB). None
    takes KEEL_CACHE_DIR, KEEL_CACHE_BYTES and KEEL_MEMORY_CACHE_BYTES from
    the environment, else no disk cache, 10 GiB and 1 GiB. Opening a
    writer or a reader of a file with one of them set (not None) raises
    InvalidArgumentError: they would do nothing there.
    """

    __slots__ = FIELDS + ("_given",)

    def __init__(self, *args, **kwargs):
        if len(args) > len(FIELDS):
            raise TypeError("IndexOptions() takes at most %d positional "
                            "arguments (%d given)\nhelp: the options are %s; "
                            "pass them by name" % (len(FIELDS), len(args),
                                                   ", ".join(FIELDS)))
        given = dict(zip(FIELDS, args))
        for name, value in kwargs.items():
            if name not in FIELDS:
                raise TypeError("unknown option %r%s\nhelp: the options are "
                                "%s" % (name, _coerce.suggest(name, FIELDS),
                                        ", ".join(FIELDS)))
            if name in given:
                raise TypeError("IndexOptions() got multiple values for %r"
                                "\nhelp: pass %s either by position or by "
                                "name, not both" % (name, name))
            given[name] = value
        for name in FIELDS:
            setattr(self, name, DEFAULTS[name])
        for name, value in given.items():
            setattr(self, name, value)
        self._given = frozenset(given)

    def __setattr__(self, name, value):
        if name in LIMITS:
            value = _int_option(name, value)
        elif name == "metric":
            value = _name_option(name, value, METRICS)
        elif name == "precision":
            value = _name_option(name, value, PRECISIONS)
        elif name == "codes":
            value = _name_option(name, value, CODES)
        elif name == "cache_dir":
            value = _dir_option(name, value)
        elif name in CACHE_FIELDS:
            value = _bytes_option(name, value)
        elif name in ("warm", "huge_pages"):
            if not isinstance(value, bool) and value not in (0, 1):
                raise TypeError("option %s takes True or False, not %s (%r)"
                                "\nhelp: pass %s=True or %s=False"
                                % (name, type(value).__name__, value, name,
                                   name))
            value = bool(value)
        elif name != "_given":
            raise AttributeError("unknown option %r%s\nhelp: the options "
                                 "are %s" % (name,
                                             _coerce.suggest(name, FIELDS),
                                             ", ".join(FIELDS)))
        object.__setattr__(self, name, value)
        if name != "_given" and hasattr(self, "_given"):
            object.__setattr__(self, "_given", self._given | {name})

    def given(self, name):
        """True if the field was set explicitly rather than defaulted."""
        return name in self._given

    def replace(self, **changes):
        """A copy with some fields changed."""
        new = IndexOptions.__new__(IndexOptions)
        for name in FIELDS:
            object.__setattr__(new, name, getattr(self, name))
        object.__setattr__(new, "_given", self._given)
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    def as_dict(self):
        """The fields as a dict."""
        return {name: getattr(self, name) for name in FIELDS}

    def __eq__(self, other):
        if not isinstance(other, IndexOptions):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None

    def __repr__(self):
        return "IndexOptions(%s)" % ", ".join(
            "%s=%r" % (n, getattr(self, n)) for n in FIELDS)

    @classmethod
    def coerce(cls, options, extra=None):
        """options (None, an IndexOptions or a dict) plus keyword options
        as a new IndexOptions."""
        if options is None:
            opts = cls()
        elif isinstance(options, IndexOptions):
            opts = options.replace()
        elif isinstance(options, dict):
            opts = cls(**options)
        else:
            raise TypeError("options has to be a keel.IndexOptions or a dict,"
                            " not %s\nhelp: pass keel.IndexOptions(...) or "
                            "a dict such as {'metric': 'cosine'}, or the "
                            "options as keywords" % _coerce.given(options))
        for name, value in (extra or {}).items():
            if name not in FIELDS:
                raise TypeError("unknown option %r%s\nhelp: the options are "
                                "%s" % (name, _coerce.suggest(name, FIELDS),
                                        ", ".join(FIELDS)))
            setattr(opts, name, value)
        return opts

    def flags(self):
        """keel_options.flags: KEEL_WARM (1) | KEEL_HUGE_PAGES (2)."""
        return (1 if self.warm else 0) | (2 if self.huge_pages else 0)

    def cache(self):
        """The page cache fields as _open takes them: (cache_dir or None,
        cache_bytes or 0, memory_cache_bytes or 0); None and 0 leave them
        to the environment."""
        return (self.cache_dir, self.cache_bytes or 0,
                self.memory_cache_bytes or 0)

    def cache_given(self):
        """The page cache fields set to something other than None."""
        return [n for n in CACHE_FIELDS if getattr(self, n) is not None]


IndexOptions.__signature__ = inspect.Signature(
    [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                       default=DEFAULTS[n]) for n in FIELDS])
