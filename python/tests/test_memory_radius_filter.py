"""Indexes in memory (":memory:"), search_radius, keel.Filter and per-query
allow-lists in search_batch."""

import os
import resource
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import keel

DIM = 16


@pytest.fixture
def vecs():
    return np.random.default_rng(7).random((3000, DIM), dtype=np.float32)


@pytest.fixture
def mem(vecs):
    with keel.VectorIndex(":memory:", DIM) as ix:
        ix.add_batch(vecs)
        yield ix


# --- :memory: ----------------------------------------------------------------

def test_memory_every_call_and_no_files(tmp_path, monkeypatch, vecs):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    before = set(os.listdir("/tmp"))
    ix = keel.VectorIndex(":memory:", DIM, metric="cosine")
    assert ix.path == ":memory:"
    ids = ix.add_batch(vecs[:100])
    assert ix.add(vecs[100]) == 100
    ix.add(vecs[101], id=5000)
    ix.flush()                      # succeeds; nothing is durable
    ix.delete(5000)
    assert 5000 not in ix and 7 in ix
    assert len(ix) == 101
    found, _ = ix.search(vecs[3], k=5)
    assert found[0] == 3
    assert ix.search_batch(vecs[:4], k=2)[0][:, 0].tolist() == [0, 1, 2, 3]
    assert ix.search_radius(vecs[3], 1e-5)[0].tolist() == [3]
    np.testing.assert_allclose(ix.get(3), vecs[3] / np.linalg.norm(vecs[3]),
                               rtol=1e-6)
    ix.compact()
    ix.check()
    ix.warm()
    ix.refresh()
    assert ix.stats()["deleted"] == 0 and len(ix) == 101
    assert ids.tolist() == list(range(100))
    ix.close()                      # no UnflushedWarning: -W error
    assert os.listdir(tmp_path) == []
    assert not [n for n in set(os.listdir("/tmp")) - before if "memory" in n]


def test_memory_close_with_unflushed_adds_does_not_warn(vecs):
    ix = keel.VectorIndex(":memory:", DIM)
    ix.add_batch(vecs[:10])
    ix.close()                      # -W error turns a warning into a failure


def test_memory_refusals():
    with pytest.raises(keel.InvalidArgumentError, match="has no readers"):
        keel.IndexReader(":memory:")
    with pytest.raises(keel.InvalidArgumentError, match="has no readers"):
        keel.VectorIndex(":memory:", DIM, read_only=True)
    with pytest.raises(keel.InvalidArgumentError, match="dimensions is 0"):
        keel.VectorIndex(":memory:", None)


def test_memory_equals_file_index(tmp_path, vecs):
    q = vecs[:50] + 0.01
    res = []
    for path in (":memory:", str(tmp_path / "f.keel")):
        with keel.VectorIndex(path, DIM, threads=1) as ix:
            ix.add_batch(vecs)
            res.append(ix.search_batch(q, k=10))
    np.testing.assert_array_equal(res[0][0], res[1][0])
    np.testing.assert_array_equal(res[0][1], res[1][1])


# --- search_radius -----------------------------------------------------------

def test_search_radius_recall_against_brute_force(mem, vecs):
    queries = vecs[:60] + 0.02
    d = np.sqrt(((queries[:, None, :] - vecs[None, :, :]) ** 2).sum(-1))
    for radius in (0.3, 0.45, 0.6):
        truth = found = 0
        for i, q in enumerate(queries):
            ids, dist = mem.search_radius(q, radius)
            assert (dist <= radius).all() and (np.diff(dist) >= 0).all()
            want = set(np.nonzero(d[i] <= radius * (1 - 1e-5))[0].tolist())
            truth += len(want)
            found += len(want & set(ids.tolist()))
        assert truth > 0
        assert found / truth >= 0.95, (radius, found / truth)


def test_search_radius_cap_allowed_and_edges(mem, vecs):
    ids, dist = mem.search_radius(vecs[0], 10.0, max_results=7)
    assert len(ids) == 7
    np.testing.assert_array_equal(ids, mem.search(vecs[0], k=7)[0])
    ids, _ = mem.search_radius(vecs[0], 10.0, max_results=3000,
                               allowed=range(0, 3000, 3))
    assert len(ids) == 1000 and (ids % 3 == 0).all()
    ids, dist = mem.search_radius(vecs[0], 0)        # exact copies
    assert ids.tolist() == [0] and dist.tolist() == [0.0]
    with pytest.raises(keel.InvalidArgumentError, match="radius is NaN"):
        mem.search_radius(vecs[0], float("nan"))
    with pytest.raises(keel.InvalidArgumentError,
                       match=r"radius is inf(.|\n)*search\(query"):
        mem.search_radius(vecs[0], float("inf"))
    with pytest.raises(keel.InvalidArgumentError, match="never negative"):
        mem.search_radius(vecs[0], -0.5)
    with pytest.raises(keel.InvalidArgumentError, match="max_results is 0"):
        mem.search_radius(vecs[0], 1.0, max_results=0)
    with pytest.raises(TypeError, match="radius as a number"):
        mem.search_radius(vecs[0], "1")
    with pytest.raises(TypeError, match="search_batch"):
        mem.search_radius(vecs[0], 1.0, allowed=[[1], [2]])


# --- Filter and per-query allow-lists ----------------------------------------

def test_filter_equals_ids_and_range_equals_list(mem, vecs):
    rng = np.random.default_rng(3)
    ids = rng.choice(3000, 400, replace=False).astype(np.uint64)
    f = keel.Filter(ids)
    assert len(f) == f.count == 400
    assert "400 ids" in repr(f)
    for allowed_pair in ((ids, f), (ids, set(ids.tolist())),
                         (list(range(100, 2000, 7)), range(100, 2000, 7)),
                         (list(range(2999, 10, -5)), range(2999, 10, -5)),
                         ([], range(5, 5)),
                         (list(range(0, 3000)), range(-10**20, 10**30))):
        a, b = allowed_pair
        for q in vecs[:20]:
            ra = mem.search(q, k=10, allowed=a)
            rb = mem.search(q, k=10, allowed=b)
            np.testing.assert_array_equal(ra[0], rb[0])
            np.testing.assert_array_equal(ra[1], rb[1])
            if not isinstance(b, keel.Filter):
                rc = mem.search(q, k=10, allowed=keel.Filter(b))
                np.testing.assert_array_equal(ra[0], rc[0])


def test_per_query_equals_single(mem, vecs):
    rng = np.random.default_rng(5)
    lists = []
    for i in range(64):
        kind = i % 4
        if kind == 0:
            lists.append(None)
        elif kind == 1:
            lists.append(range(i * 20, i * 20 + 500))
        elif kind == 2:
            lists.append(rng.choice(3000, 300).astype(np.uint64))
        else:
            lists.append(keel.Filter(rng.choice(3000, 50).tolist()))
    q = vecs[:64] + 0.01
    ids, dist = mem.search_batch(q, k=10, allowed=lists)
    for i in range(64):
        one = mem.search(q[i], k=10, allowed=lists[i])
        n = len(one[0])
        np.testing.assert_array_equal(ids[i, :n], one[0])
        np.testing.assert_array_equal(dist[i, :n], one[1])
        assert (ids[i, n:] == np.iinfo(np.uint64).max).all()
    # a 2-D array: one row of ids per query
    rows = np.stack([np.arange(i, i + 30, dtype=np.uint64)
                     for i in range(64)])
    ids2, _ = mem.search_batch(q, k=5, allowed=rows)
    for i in range(64):
        assert set(ids2[i].tolist()) <= set(rows[i].tolist())


def test_per_query_refusals(mem, vecs):
    with pytest.raises(keel.InvalidArgumentError,
                       match="2 allow-lists for 3 queries"):
        mem.search_batch(vecs[:3], k=2, allowed=[[1], [2]])
    with pytest.raises(TypeError, match="element 0 is an id and element 1"):
        mem.search_batch(vecs[:3], k=2, allowed=[1, [2], [3]])
    with pytest.raises(TypeError, match="one allow-list per query is for"):
        mem.search(vecs[0], k=2, allowed=[[1], [2]])
    with pytest.raises(keel.InvalidArgumentError, match="negative id"):
        keel.Filter([-1])
    with pytest.raises(TypeError, match="cannot be pickled"):
        import pickle
        pickle.dumps(keel.Filter([1]))


def test_huge_range_uses_no_memory():
    """allowed=range(10**9) used to build a list; now it is an interval.
    Run under a 1 GiB address-space limit, in a child process."""
    code = textwrap.dedent("""
        import resource, numpy as np, keel
        ix = keel.VectorIndex(":memory:", 8)
        ix.add_batch(np.random.default_rng(1).random((2000, 8),
                                                      dtype=np.float32))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for r in (range(10**9), range(10**18), range(5, 10**12, 3)):
            ids, _ = ix.search(np.zeros(8, np.float32), k=5, allowed=r)
            assert len(ids) == 5
            ids, _ = ix.search_batch(np.zeros((2, 8), np.float32), k=5,
                                     allowed=[r, r])
        f = keel.Filter(range(10**18))
        assert f.count == 10**18
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert after - before < 50_000, (before, after)   # KiB
        print("ok")
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(keel.__file__))
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True,
        text=True, timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS,
                                              (1 << 30, 1 << 30)))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_a_range_whose_step_passes_every_id_holds_its_first(mem, vecs):
    # range(0, 10, 2**64) holds the one id 0: its step must not wrap to 0.
    for r in (range(0, 10, 2**64), range(3, 2**70, 2**66)):
        f = keel.Filter(r)
        assert f.count == 1
        ids, _ = mem.search(vecs[r.start], k=5, allowed=r)
        assert list(ids) == [r.start]
