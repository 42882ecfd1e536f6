"""vecs.py -- what the Python benches share: the repository's python/ on
the import path (so `import keel` finds the built package), .fvecs/.ivecs
reading, and recall@k against exact ground truth.
"""

import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))


def read_vecs(path, dtype):
    """The rows of an .fvecs (dtype float32) or .ivecs (int32) file."""
    raw = np.fromfile(path, dtype=np.int32)
    dim = int(raw[0])
    return raw.reshape(-1, dim + 1)[:, 1:].copy().view(dtype)


def recall(found, truth, k=10):
    """Mean share of each query's true k nearest among the first k found."""
    return float(np.mean([len(set(np.asarray(f)[:k].tolist())
                              & set(np.asarray(t)[:k].tolist())) / k
                          for f, t in zip(found, truth)]))
