"""conftest.py -- shared fixtures for the keel Python tests.

Run from the repository root after `make python`:
    /usr/bin/python3 -m pytest -q python/tests
The in-place build in python/ is imported ahead of any installed keel.
"""

import os
import sys

import numpy as np
import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(PYTHON_DIR)
DATA = os.path.join(ROOT, "test", "data")
sys.path.insert(0, PYTHON_DIR)

import keel  # noqa: E402


def read_vecs(path, dtype):
    """Rows of an .fvecs / .ivecs file (int32 length, then the values)."""
    raw = np.fromfile(path, dtype=np.int32)
    dim = int(raw[0])
    return raw.reshape(-1, dim + 1)[:, 1:].copy().view(dtype)


@pytest.fixture(scope="session")
def glove():
    """The GloVe 10k slice: (base, queries, gt_l2, gt_cos)."""
    name = os.path.join(DATA, "glove-100-10k")
    if not os.path.exists(name + ".base.fvecs"):
        pytest.skip("test/data/glove-100-10k.* is missing")
    return (read_vecs(name + ".base.fvecs", np.float32),
            read_vecs(name + ".query.fvecs", np.float32),
            read_vecs(name + ".gt.l2.ivecs", np.int32),
            read_vecs(name + ".gt.cos.ivecs", np.int32))


@pytest.fixture(scope="session")
def glove_index(tmp_path_factory, glove):
    """A flushed L2 writer holding the GloVe base vectors (ids 0..9999)."""
    path = tmp_path_factory.mktemp("glove") / "glove.keel"
    index = keel.VectorIndex(path, 100)
    index.add_batch(glove[0])
    index.flush()
    yield index
    index.close()


@pytest.fixture
def path(tmp_path):
    """A path for a new index."""
    return str(tmp_path / "test.keel")


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def subprocess_env():
    """Environment for child interpreters that import this keel."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    return env
