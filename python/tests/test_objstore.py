"""test_objstore.py -- VectorIndex.publish(url) and IndexReader("s3://...").

Needs an S3-compatible server: `make test-objstore` starts one and runs
this file with its AWS_* variables and KEEL_TEST_BUCKET; without them the
tests are skipped.
"""

import os

import numpy as np
import pytest

import keel

BUCKET = os.environ.get("KEEL_TEST_BUCKET")
pytestmark = pytest.mark.skipif(
    not BUCKET, reason="no object store: make test-objstore starts one")


def url(name):
    return "s3://%s/test-python/%d/%s" % (BUCKET, os.getpid(), name)


def test_a_published_index_searches_like_the_file(tmp_path):
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((2000, 24)).astype(np.float32)
    u = url("search")
    with keel.VectorIndex(str(tmp_path / "i.keel"), 24) as w:
        w.add_batch(vecs)
        w.flush()
        sent = w.publish(u)
        assert sent > 0
        os.environ["KEEL_CACHE_DIR"] = str(tmp_path / "cache")
        try:
            r = keel.IndexReader(u)
        finally:
            del os.environ["KEEL_CACHE_DIR"]
        with r:
            assert len(r) == 2000
            q = rng.standard_normal((20, 24)).astype(np.float32)
            for x in q:
                a_ids, a_d = w.search(x, 10)
                b_ids, b_d = r.search(x, 10)
                assert np.array_equal(a_ids, b_ids)
                assert np.array_equal(a_d.view(np.uint32), b_d.view(np.uint32))
            assert np.array_equal(r.get(7), w.get(7))
            r.check()
            with pytest.raises(keel.ReadOnlyError):
                r.add(vecs[0])
        assert os.listdir(tmp_path / "cache")


def test_a_url_with_no_index_is_not_found():
    with pytest.raises(keel.NotFoundError, match="no index is published"):
        keel.IndexReader(url("nothing-here"))


def test_prune_keeps_the_newest_versions(tmp_path):
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((1500, 16)).astype(np.float32)
    u = url("prune")
    with keel.VectorIndex(str(tmp_path / "p.keel"), 16) as w:
        w.add_batch(vecs)
        w.flush()
        for i in range(3):
            w.publish(u)
            w.delete(i)
            w.flush()
        w.publish(u)
        assert keel.prune(u, keep=1) > 0
        assert keel.prune(u, keep=1) == 0
        with keel.IndexReader(u) as r:
            assert len(r) == len(w) == 1497
            ids_a, _ = r.search(vecs[10], 5)
            ids_b, _ = w.search(vecs[10], 5)
            assert np.array_equal(ids_a, ids_b)
    with pytest.raises(ValueError, match="keep"):
        keel.prune(u, keep=0)
