"""keel -- an embeddable vector index in one file, for numpy.

    import numpy as np, keel

    with keel.VectorIndex("vectors.keel", 384, metric="cosine") as index:
        ids = index.add_batch(np.random.rand(1000, 384).astype(np.float32))
        found, distances = index.search(np.random.rand(384), k=10)

VectorIndex opens an index as its writer (one per file); IndexReader opens
it for searching, in any number of processes, while the writer writes.
Errors are subclasses of keel.Error, one per keel error code.
"""

import types as _types

from . import _allow, _coerce, _keel
from ._errors import (BY_CODE, CancelledError, CorruptIndexError, DimensionMismatchError,
                      Error, IdInUseError, IdNotFoundError, IndexFullError,
                      IndexIOError, IndexLockedError, IndexNotFoundError,
                      InvalidArgumentError, NotAnIndexError, NotFoundError,
                      OptionsMismatchError, OutOfMemoryError, ReadOnlyError,
                      VersionError)
from ._allow import Filter
from ._index import (IndexReader, PublishResult, UnflushedWarning,
                     VectorIndex, versions)
from ._options import IndexOptions

# The binding's input helpers: _coerce's readers of vectors and ids, and
# _allow's reader of allowed= (which itself uses _coerce, so _coerce does
# not call back into it).
_keel._setup(BY_CODE, IndexNotFoundError, _types.SimpleNamespace(
    vectors=_coerce.vectors, ids=_coerce.ids, one_id=_coerce.one_id,
    count=_coerce.count, bad_keyword=_coerce.bad_keyword, key=_coerce.key,
    allowed=_allow.allowed))

__version__ = _keel.KEEL_VERSION
strerror = _keel.strerror
prune = _keel.prune
__all__ = ["VectorIndex", "IndexReader", "IndexOptions", "Filter", "Error",
           "InvalidArgumentError", "DimensionMismatchError",
           "OptionsMismatchError", "NotFoundError", "IndexNotFoundError",
           "IdNotFoundError", "NotAnIndexError", "IdInUseError",
           "IndexLockedError", "ReadOnlyError", "CorruptIndexError",
           "IndexFullError", "IndexIOError", "OutOfMemoryError",
           "VersionError", "CancelledError", "UnflushedWarning", "strerror",
           "prune", "versions", "PublishResult"]
