"""test_many.py -- many ids at once (get and delete of sequences and
arrays), listing ids (ids() and iteration) and backup(path)."""

import os
import threading

import numpy as np
import pytest

import keel


def filled(path, rng, n=300, d=8):
    v = rng.standard_normal((n, d)).astype(np.float32)
    index = keel.VectorIndex(path, d)
    index.add_batch(v)
    index.flush()
    return index, v


def test_get_many_returns_rows_in_order(path, rng):
    index, v = filled(path, rng)
    with index:
        rows = index.get([5, 0, 5, 299])
        assert rows.shape == (4, 8) and rows.dtype == np.float32
        np.testing.assert_array_equal(rows, v[[5, 0, 5, 299]])
        np.testing.assert_array_equal(index.get(np.array([7, 8])), v[7:9])
        np.testing.assert_array_equal(index.get(range(3)), v[:3])
        assert index.get([]).shape == (0, 8)
        # One id, however it comes, is still one vector.
        assert index.get(np.uint64(4)).shape == (8,)
        assert index.get(np.array(4)).shape == (8,)


def test_get_many_all_or_nothing(path, rng):
    index, _ = filled(path, rng)
    with index:
        with pytest.raises(keel.IdNotFoundError) as e:
            index.get([1, 2, 1000])
        assert "id 1000 (position 2 of 3)" in str(e.value)
        assert e.value.help
        with pytest.raises(keel.InvalidArgumentError):
            index.get([1, -1])


def test_delete_many_all_or_none(path, rng):
    index, v = filled(path, rng)
    with index:
        with pytest.raises(keel.InvalidArgumentError) as e:
            index.delete([5, 5, 7])
        assert "id 5 is given twice" in str(e.value)
        assert "deleted already" not in str(e.value)
        with pytest.raises(keel.IdNotFoundError) as e:
            index.delete([1, 2, 999])
        assert "id 999" in str(e.value)
        assert len(index) == 300
        index.delete(np.array([1, 2, 3], dtype=np.uint64))
        index.delete(range(10, 20))
        assert len(index) == 287
        assert 2 not in index and 15 not in index and 20 in index
    with keel.IndexReader(path) as r:
        assert len(r) == 287
        with pytest.raises(keel.ReadOnlyError):
            r.delete([4, 5])


def test_ids_and_iteration(path, rng):
    v = rng.standard_normal((50, 8)).astype(np.float32)
    ids = np.array([900, 3, 17, 2**40, 0] + list(range(100, 145)),
                   dtype=np.uint64)
    with keel.VectorIndex(path, 8) as index:
        assert index.ids().tolist() == [] and list(index) == []
        index.add_batch(v, ids=ids)
        index.delete([17, 100])
        want = sorted(set(ids.tolist()) - {17, 100})
        got = index.ids()
        assert got.dtype == np.uint64 and got.tolist() == want
        assert list(index) == want
        assert all(type(i) is int for i in index)
    with keel.IndexReader(path) as r:
        assert r.ids().tolist() == want
        assert [i for i in r] == want


def test_backup_equals_last_flush(path, rng, tmp_path):
    index, v = filled(path, rng, n=500)
    dest = tmp_path / "copy.keel"
    with index:
        index.delete([3, 4])
        index.flush()
        index.add_batch(rng.standard_normal((200, 8)).astype(np.float32))
        index.backup(dest)        # a PathLike; the unflushed adds are not in it
        index.backup(str(dest))   # replaces the copy
        q = rng.standard_normal((20, 8)).astype(np.float32)
        index.flush()
    assert not [n for n in os.listdir(tmp_path) if "keel-tmp" in n]
    with keel.IndexReader(dest) as b:
        b.check()
        assert len(b) == 498
        assert b.ids().tolist() == [i for i in range(500) if i not in (3, 4)]
        np.testing.assert_array_equal(b.get(b.ids()), v[b.ids().astype(np.int64)])
        # A reader's backup of the copy answers like the copy, bit for bit.
        b.backup(tmp_path / "copy2.keel")
        with keel.IndexReader(tmp_path / "copy2.keel") as c:
            for x, y in zip(b.search_batch(q, k=10), c.search_batch(q, k=10)):
                np.testing.assert_array_equal(x, y)


def test_backup_errors(path, rng, tmp_path):
    index, _ = filled(path, rng, n=10)
    with index:
        with pytest.raises(keel.InvalidArgumentError) as e:
            index.backup(path)
        assert "is the index itself" in str(e.value)
        with pytest.raises(keel.InvalidArgumentError):
            index.backup(tmp_path)
        with pytest.raises(keel.NotFoundError):
            index.backup(tmp_path / "missing" / "x.keel")
        with pytest.raises(TypeError):
            index.backup(5)
    with pytest.raises(keel.Error):
        index.backup(tmp_path / "x.keel")     # closed


def test_backups_while_a_thread_writes(path, rng, tmp_path):
    v = rng.standard_normal((4000, 8)).astype(np.float32)
    index = keel.VectorIndex(path, 8)
    flushed = {0}
    stop = threading.Event()

    def writer():
        for i in range(0, len(v), 100):
            if stop.is_set():
                break
            index.add_batch(v[i:i + 100])
            flushed.add(i + 100)      # before the flush: a backup may see it
            index.flush()

    t = threading.Thread(target=writer)
    t.start()
    try:
        for n in range(5):
            dest = tmp_path / ("b%d.keel" % n)
            index.backup(dest)
            with keel.IndexReader(dest) as b:
                b.check()
                count = len(b)
                assert count in flushed
                assert b.ids().tolist() == list(range(count))
                np.testing.assert_array_equal(b.get(range(count)), v[:count])
    finally:
        stop.set()
        t.join()
        index.close()
