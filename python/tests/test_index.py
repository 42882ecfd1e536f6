"""test_index.py -- every method of keel.VectorIndex and keel.IndexReader."""

import math
import threading

import numpy as np
import pytest

import keel


def test_add_search_get_len(path, rng):
    v = rng.standard_normal((50, 8)).astype(np.float32)
    with keel.VectorIndex(path, 8) as index:
        assert len(index) == 0
        assert index.add(v[0]) == 0
        assert index.add(v[1], id=100) == 100
        assert index.add(v[2]) == 101          # one past the largest id
        ids = index.add_batch(v[3:])
        assert ids.dtype == np.uint64 and ids.tolist() == list(range(102, 149))
        assert len(index) == 50
        assert index.dimensions == 8
        assert index.metric == "l2" and index.precision == "f32"
        np.testing.assert_array_equal(index.get(100), v[1])
        found, dist = index.search(v[1], k=3)
        assert found.dtype == np.uint64 and dist.dtype == np.float32
        assert found[0] == 100 and dist[0] == 0
        assert list(dist) == sorted(dist)
        assert 100 in index and 5 not in index and "x" not in index


def test_search_returns_fewer_than_k(path):
    with keel.VectorIndex(path, 2) as index:
        found, dist = index.search([0, 0], k=5)
        assert found.shape == (0,) and dist.shape == (0,)
        index.add_batch(np.eye(2))
        found, dist = index.search([1, 0], k=5)
        assert found.tolist() == [0, 1]
        assert dist[0] == 0 and math.isclose(dist[1], math.sqrt(2),
                                             rel_tol=1e-6)


def test_search_batch_pads_short_rows(path):
    with keel.VectorIndex(path, 2) as index:
        index.add_batch(np.eye(2), ids=[7, 9])
        ids, dist = index.search_batch(np.eye(2), k=4)
        assert ids.shape == (2, 4) and dist.shape == (2, 4)
        assert ids.dtype == np.uint64 and dist.dtype == np.float32
        assert ids[0, :2].tolist() == [7, 9] and ids[1, :2].tolist() == [9, 7]
        assert (ids[:, 2:] == 2**64 - 1).all()
        assert np.isinf(dist[:, 2:]).all()
        empty_ids, empty_dist = index.search_batch(np.zeros((0, 2)), k=3)
        assert empty_ids.shape == (0, 3) and empty_dist.shape == (0, 3)


def test_add_batch_with_ids_and_inputs_of_other_kinds(path):
    with keel.VectorIndex(path, 3) as index:
        out = index.add_batch([[1, 0, 0], [0, 1, 0]], ids=np.array([5, 6]))
        assert out.tolist() == [5, 6]
        # float64, Fortran order, a non-contiguous slice, a list, a range
        f64 = np.asfortranarray(np.array([[0, 0, 1], [1, 1, 0]], np.float64))
        assert index.add_batch(f64, ids=range(10, 12)).tolist() == [10, 11]
        wide = np.zeros((2, 6), np.float32)
        wide[:, ::2] = [[2, 0, 0], [0, 2, 0]]
        assert index.add_batch(wide[:, ::2]).tolist() == [12, 13]
        assert index.add((1, 2, 3)) == 14
        assert index.add(np.array([1, 2, 3], np.int64)) == 15
        assert index.add_batch(np.zeros((0, 3), np.float32)).shape == (0,)
        np.testing.assert_array_equal(index.get(13), [0, 2, 0])
        assert len(index) == 8


def test_float32_input_is_not_copied(path, rng):
    # numpy reports its allocations to tracemalloc: a C-contiguous float32
    # batch goes to keel in place, while float64 is converted (a copy).
    import tracemalloc
    v = rng.standard_normal((4000, 64)).astype(np.float32)     # 1 MB
    with keel.VectorIndex(path, 64) as index:
        index.add_batch(v[:100])

        def peak(fn, arr):
            tracemalloc.start()
            fn(arr)
            top = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return top

        assert peak(lambda a: index.search_batch(a, k=1), v) < 300_000
        assert peak(lambda a: index.search_batch(a, k=1),
                    v.astype(np.float64)) > 1_000_000
        assert peak(index.add_batch, v) < 300_000
        assert peak(lambda a: index.search(a, k=1), v[0]) < 10_000


def test_delete_flush_and_reopen(path, rng):
    v = rng.standard_normal((20, 4)).astype(np.float32)
    index = keel.VectorIndex(path, 4)
    index.add_batch(v)
    index.delete(3)
    assert len(index) == 19 and 3 not in index
    assert 3 not in index.search(v[3], k=20)[0]
    index.flush()
    index.add(v[0])                      # not flushed: lost at close
    with pytest.warns(keel.UnflushedWarning, match="dropped 1 add not flushed"):
        index.close()
    index.close()                        # a second close does nothing
    assert index.closed
    with keel.VectorIndex(path, None) as again:   # dimensions from the file
        assert again.dimensions == 4 and len(again) == 19
        with pytest.raises(keel.IdNotFoundError):
            again.get(3)


def test_context_manager_flushes_on_success_only(path):
    with keel.VectorIndex(path, 2) as index:
        index.add([1, 2])
    assert index.closed
    with pytest.raises(RuntimeError):
        with keel.VectorIndex(path, 2) as index:
            index.add([3, 4])
            raise RuntimeError("boom")
    with keel.IndexReader(path) as reader:
        assert len(reader) == 1


def test_filtered_search(path, rng):
    v = rng.standard_normal((200, 8)).astype(np.float32)
    with keel.VectorIndex(path, 8) as index:
        index.add_batch(v)
        allowed = {1, 5, 7, 150, 10**6}
        for kind in (allowed, sorted(allowed), np.array(sorted(allowed)),
                     np.array(sorted(allowed), np.uint64),
                     (i for i in allowed)):
            found, _ = index.search(v[5], k=10, allowed=kind)
            assert set(found.tolist()) == {1, 5, 7, 150}
            assert found[0] == 5
        found, _ = index.search(v[5], k=10, allowed=[])
        assert found.size == 0
        ids, _ = index.search_batch(v[:3], k=2, allowed=[0, 1, 2])
        assert ids[:, 0].tolist() == [0, 1, 2]


def test_ef_changes_nothing_on_a_tiny_index(path, rng):
    v = rng.standard_normal((30, 4)).astype(np.float32)
    with keel.VectorIndex(path, 4, ef_search=16) as index:
        index.add_batch(v)
        a = index.search(v[0], k=5, ef=200)
        b = index.search(v[0], k=5)
        np.testing.assert_array_equal(a[0], b[0])
        assert index.options.ef_search == 16


def test_reader_sees_flushes_only(path, rng):
    v = rng.standard_normal((10, 4)).astype(np.float32)
    writer = keel.VectorIndex(path, 4)
    writer.add_batch(v[:5])
    writer.flush()
    reader = keel.IndexReader(path)
    assert reader.read_only and len(reader) == 5
    writer.add_batch(v[5:])
    reader.refresh()
    assert len(reader) == 5
    assert reader.search(v[7], k=1)[0][0] != 7
    writer.flush()
    assert reader.search(v[7], k=1)[0][0] == 7   # a search takes a snapshot
    reader.refresh()
    assert len(reader) == 10
    writer.refresh()                              # no-op on a writer
    np.testing.assert_array_equal(reader.get(9), v[9])
    reader.close()
    writer.close()


def test_read_only_vector_index(path):
    with keel.VectorIndex(path, 3) as index:
        index.add([1, 2, 3])
    with keel.VectorIndex(path, 3, read_only=True) as reader:
        assert reader.read_only and len(reader) == 1
        assert isinstance(reader, keel.VectorIndex)


def test_cosine_and_ip_and_f16(path, tmp_path):
    v = np.array([[3, 4], [1, 0], [0, 2]], np.float32)
    with keel.VectorIndex(path, 2, metric="cosine") as index:
        index.add_batch(v)
        found, dist = index.search([6, 8], k=1)
        assert found[0] == 0 and abs(dist[0]) < 1e-6
        np.testing.assert_allclose(index.get(0), [0.6, 0.8], rtol=1e-6)
        assert index.metric == "cosine"
    ip = str(tmp_path / "ip.keel")
    with keel.VectorIndex(ip, 2, {"metric": "dot", "precision": "half"}) as ix:
        assert (ix.metric, ix.precision) == ("ip", "f16")
        ix.add_batch(v)
        assert ix.search([-1, 1], k=1)[0][0] == 2
        np.testing.assert_array_equal(ix.get(0), [3, 4])


def test_existing_file_keeps_its_metric(path):
    with keel.VectorIndex(path, 2, metric="cosine", precision="f16") as ix:
        ix.add([1, 1])
    # Options that do not name metric or precision take the file's own.
    with keel.VectorIndex(path, 2, keel.IndexOptions(ef_search=20)) as ix:
        assert (ix.metric, ix.precision) == ("cosine", "f16")
        assert ix.options.ef_search == 20
    with keel.VectorIndex(path, 2, precision="f16") as ix:
        assert ix.metric == "cosine"


def test_warm(path, rng):
    v = rng.standard_normal((500, 16)).astype(np.float32)
    with keel.VectorIndex(path, 16) as index:
        index.add_batch(v)
        index.flush()
        assert index.warm() is None
        assert index.warm() is None          # asking again is harmless
        assert index.search(v[3], k=1)[0][0] == 3
    with keel.IndexReader(path, warm=True) as reader:
        assert reader.options.warm
        reader.warm()
        assert reader.search(v[4], k=1)[0][0] == 4
    with keel.VectorIndex(path, 16, keel.IndexOptions(warm=True,
                                                      huge_pages=True)) as ix:
        assert ix.search(v[5], k=1)[0][0] == 5


def test_compact(path, rng):
    v = rng.standard_normal((100, 4)).astype(np.float32)
    with keel.VectorIndex(path, 4) as index:
        index.add_batch(v)
        index.flush()
        reader = keel.IndexReader(path)
        for i in range(50):
            index.delete(i)
        index.compact()                  # flushes first
        assert len(index) == 50
        assert index.stats()["deleted"] == 0
        assert index.search(v[70], k=1)[0][0] == 70
        assert index.add(v[0]) == 100    # automatic ids are never reused
        index.flush()
        # The reader moves to the compacted file by itself.
        assert reader.search(v[0], k=1)[0][0] == 100
        reader.refresh()
        assert len(reader) == 51
        with pytest.raises(keel.ReadOnlyError):
            reader.compact()
        reader.close()


def test_compact_on_a_closed_index_raises(path):
    index = keel.VectorIndex(path, 2)
    index.close()
    with pytest.raises(keel.InvalidArgumentError, match="closed"):
        index.compact()


def test_stats_check_repr(path):
    with keel.VectorIndex(path, 2) as index:
        index.add_batch(np.eye(2))
        index.flush()
        st = index.stats()
        assert st["count"] == 2 and st["dimensions"] == 2
        assert st["max_connections"] == 16 and not st["read_only"]
        index.check()
        assert "dimensions=2" in repr(index) and "len=2" in repr(index)
    assert "closed" in repr(index)


def test_closed_index_raises(path):
    index = keel.VectorIndex(path, 2)
    index.close()
    for call in (lambda: index.search([0, 0]), lambda: len(index),
                 lambda: index.add([1, 1]), index.flush, index.warm,
                 lambda: index.get(0), index.refresh):
        with pytest.raises(keel.InvalidArgumentError, match="closed"):
            call()


def test_threads_share_a_handle(path, rng):
    v = rng.standard_normal((2000, 16)).astype(np.float32)
    index = keel.VectorIndex(path, 16)
    index.add_batch(v[:1000])
    errors = []

    def search():
        try:
            for i in range(300):
                found, _ = index.search(v[i], k=1)
                assert found[0] == i
        except Exception as e:          # pragma: no cover
            errors.append(e)

    threads = [threading.Thread(target=search) for _ in range(3)]
    for t in threads:
        t.start()
    index.add_batch(v[1000:])            # writes run next to the searches
    for t in threads:
        t.join()
    assert not errors
    assert len(index) == 2000
    index.flush()
    index.close()


def test_close_while_other_threads_search(path, rng):
    v = rng.standard_normal((300, 8)).astype(np.float32)
    index = keel.VectorIndex(path, 8)
    index.add_batch(v)
    index.flush()
    stop = threading.Event()
    outcomes = []

    def search():
        while not stop.is_set():
            try:
                index.search(v[0], k=5)
            except keel.InvalidArgumentError as e:
                outcomes.append(str(e))
                return

    threads = [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    index.close()
    stop.set()
    for t in threads:
        t.join()
    assert all("closed" in o for o in outcomes)


def test_subclass_and_pickle(path):
    import pickle

    class Mine(keel.VectorIndex):
        pass

    with Mine(path, 2) as index:
        index.add([1, 2])
        with pytest.raises(TypeError, match="pickled"):
            pickle.dumps(index)
