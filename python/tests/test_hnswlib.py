"""test_hnswlib.py -- keel.hnswlib: hnswlib's Python API on keel.

Side by side with the real hnswlib (Debian's python3-hnswlib, skipped
without it): the same answers, types, shapes and exceptions; convert() and
`keel import-hnswlib` of files the real hnswlib saved; keel's extras
(save_index writes a keel file, load_index of a file keel made, path=);
recall on GloVe equal to keel.VectorIndex's at the same settings.
hnswlib's own binding tests run against the module in
test/hnswlib_tests.sh (make test-hnswlib).
"""

import gc
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import pytest

import keel
import keel.hnswlib as kh

try:
    import hnswlib as real
except ImportError:     # python3-hnswlib
    real = None

need_real = pytest.mark.skipif(real is None,
                               reason="python3-hnswlib is not installed")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
KEEL = os.environ.get("KEEL", os.path.join(ROOT, "build", "keel"))


def data(n=500, dim=16, seed=0):
    return np.random.default_rng(seed).random((n, dim), dtype=np.float32)


def make(mod, space, x, max_elements=None, **kw):
    p = mod.Index(space=space, dim=x.shape[1])
    p.init_index(max_elements=max_elements or len(x), ef_construction=200,
                 M=16, **kw)
    p.set_ef(200)
    p.add_items(x)
    return p


@pytest.mark.parametrize("space", ["l2", "ip", "cosine"])
def test_distances_as_hnswlib(space):
    x, q = data(), data(20, seed=1)
    mine = make(kh, space, x)
    labels, dist = mine.knn_query(q, k=5)
    assert labels.dtype == np.uint64 and dist.dtype == np.float32
    assert labels.shape == dist.shape == (20, 5)
    # hnswlib's distances, recomputed from the stored vectors.
    v = x.astype(np.float64)
    qq = q.astype(np.float64)
    if space == "cosine":
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        qq /= np.linalg.norm(qq, axis=1, keepdims=True)
    got = v[labels.astype(np.int64)]
    if space == "l2":
        want = ((got - qq[:, None, :]) ** 2).sum(-1)
    else:
        want = 1 - (got * qq[:, None, :]).sum(-1)
    np.testing.assert_allclose(dist, want, rtol=1e-5, atol=1e-5)
    if real is not None:
        theirs = make(real, space, x)
        tl, td = theirs.knn_query(q, k=5)
        assert (tl == labels).mean() > 0.98
        np.testing.assert_allclose(np.sort(td, 1), np.sort(dist, 1),
                                   rtol=1e-5, atol=1e-5)


def both():
    return [kh] + ([real] if real is not None else [])


def v08(mod):
    """Whether mod has hnswlib 0.7's additions (return_type, filter,
    replace_deleted): Debian 12's python3-hnswlib is 0.6.2."""
    return "replace_deleted" in (mod.Index.add_items.__doc__ or "") or \
        mod is kh


@pytest.mark.parametrize("mod", both(), ids=lambda m: m.__name__)
def test_semantics(mod):
    """Each line holds for the real hnswlib and for keel.hnswlib."""
    x = data(100)
    p = mod.Index("l2", 16)
    assert (p.max_elements, p.element_count, p.M, p.ef) == (0, 0, 0, 10)
    p.init_index(max_elements=100, M=8, ef_construction=50)
    assert (p.M, p.ef_construction, p.max_elements) == (8, 50, 100)
    p.add_items(x[:50])                          # labels 0..49
    p.add_items(x[50:60], np.arange(1000, 1010))
    p.add_items(x[60:70])                        # cur_l went on: 60..69
    assert sorted(p.get_ids_list()) == list(range(50)) + \
        list(range(60, 70)) + list(range(1000, 1010))
    assert p.get_current_count() == p.element_count == 70
    # Re-adding a label replaces its vector and takes no slot.
    p.add_items(x[99], 3)
    assert np.array_equal(p.get_items([3])[0], x[99])
    assert p.get_current_count() == 70
    # get_items: numpy (n, dim) float32, or lists; a scalar is refused.
    items = p.get_items([1, 2])
    if v08(mod):
        assert items.dtype == np.float32 and items.shape == (2, 16)
        assert isinstance(p.get_items([1], return_type="list")[0], list)
    with pytest.raises(ValueError):
        p.get_items(1)
    with pytest.raises(RuntimeError, match="Label not found"):
        p.get_items([5000])
    # Marked deleted: not found, not searched, still listed, still a slot.
    p.mark_deleted(7)
    with pytest.raises(RuntimeError, match="Label not found"):
        p.get_items([7])
    with pytest.raises(RuntimeError, match="already deleted"):
        p.mark_deleted(7)
    assert 7 in p.get_ids_list() and p.get_current_count() == 70
    labels, _ = p.knn_query(x[7], k=1)
    assert labels[0, 0] != 7
    p.unmark_deleted(7)
    assert p.knn_query(x[7], k=1)[0][0, 0] == 7
    with pytest.raises(RuntimeError, match="not deleted"):
        p.unmark_deleted(7)
    with pytest.raises(RuntimeError, match="Label not found"):
        p.mark_deleted(5000)
    # Capacity, and resize_index.
    with pytest.raises(RuntimeError, match="exceeds the specified limit"):
        p.add_items(data(31, seed=3))
    with pytest.raises(RuntimeError, match="Cannot resize"):
        p.resize_index(69)
    p.resize_index(101)
    p.add_items(data(31, seed=3))
    assert p.get_max_elements() == 101 and p.get_current_count() == 101
    # k beyond what a search finds, and a wrong dimension.
    with pytest.raises(RuntimeError, match="contig[ui]*ous 2D array"):
        p.knn_query(x[0], k=102)
    with pytest.raises(RuntimeError, match="(?i)wrong dimensionality"):
        p.add_items(np.zeros((2, 15), np.float32))
    if v08(mod):
        with pytest.raises(RuntimeError, match="disabled in constructor"):
            p.add_items(x[0], 5000, replace_deleted=True)
    with pytest.raises(RuntimeError,
                       match="already initiated" if v08(mod) else ""):
        p.init_index(max_elements=10)
    with pytest.raises(RuntimeError, match="Space name" if v08(mod) else ""):
        mod.Index("hamming", 4)


@pytest.mark.parametrize("mod", [m for m in both() if v08(m)],
                         ids=lambda m: m.__name__)
def test_replace_deleted(mod):
    x = data(40)
    p = mod.Index("l2", 16)
    p.init_index(max_elements=20, allow_replace_deleted=True)
    p.add_items(x[:20])
    for label in range(5):
        p.mark_deleted(label)
    with pytest.raises(RuntimeError, match="exceeds the specified limit"):
        p.add_items(x[20:25], np.arange(100, 105))
    p.add_items(x[20:25], np.arange(100, 105), replace_deleted=True)
    assert p.get_current_count() == 20
    assert sorted(p.get_ids_list()) == list(range(5, 20)) + \
        list(range(100, 105))
    assert np.array_equal(p.get_items(np.arange(100, 105)), x[20:25])
    p.mark_deleted(6)
    with pytest.raises(RuntimeError, match="Can't use addPoint"):
        p.add_items(x[0], 6)


@pytest.mark.parametrize("space", ["l2", "cosine"])
def test_pickle_and_copy(space):
    x = data(300)
    p = make(kh, space, x, max_elements=400)
    p.mark_deleted(4)
    q = pickle.loads(pickle.dumps(p))
    for other in (q, kh.Index(p)):
        assert (other.space, other.dim, other.ef, other.max_elements,
                other.element_count) == (space, 16, 200, 400, 300)
        np.testing.assert_array_equal(other.knn_query(x, k=3)[0],
                                      p.knn_query(x, k=3)[0])
        other.unmark_deleted(4)
    blank = pickle.loads(pickle.dumps(kh.Index("ip", 8)))
    assert (blank.space, blank.dim, blank.max_elements) == ("ip", 8, 0)


def test_filter():
    x = data(400)
    p = make(kh, "l2", x)
    labels, _ = p.knn_query(x, k=3, filter=lambda label: label % 4 == 1)
    assert (labels % 4 == 1).all()
    with pytest.raises(RuntimeError, match="contig[ui]*ous 2D array"):
        p.knn_query(x[:1], k=3, filter=lambda label: label < 2)


def test_bfindex_exact_and_hnswlib_format(tmp_path):
    x, q = data(300), data(10, seed=2)
    bf = kh.BFIndex("l2", 16)
    bf.init_index(max_elements=400)
    bf.add_items(x, np.arange(300) * 2)
    bf.delete_vector(2)
    labels, dist = bf.knn_query(q, k=5)
    d = ((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    d[:, 1] = np.inf
    np.testing.assert_array_equal(labels, np.argsort(d, 1)[:, :5] * 2)
    np.testing.assert_allclose(dist, np.sort(d, 1)[:, :5], rtol=1e-5)
    path = str(tmp_path / "bf.bin")
    bf.save_index(path)
    if real is not None:      # the real hnswlib reads what BFIndex saved
        theirs = real.BFIndex("l2", 16)
        theirs.load_index(path)
        np.testing.assert_array_equal(theirs.knn_query(q, k=5)[0], labels)
    again = kh.BFIndex("l2", 16)
    again.load_index(path)
    assert again.get_current_count() == 299
    np.testing.assert_array_equal(again.knn_query(q, k=5)[0], labels)


def test_save_index_is_a_keel_file(tmp_path):
    x = data(200)
    p = make(kh, "cosine", x, max_elements=500)
    p.mark_deleted(9)
    path = tmp_path / "h.keel"
    p.save_index(str(path))
    with keel.IndexReader(path) as r:
        assert r.metric == "cosine" and len(r) == 199 and 9 not in r
    q = kh.Index("cosine", 16)
    q.load_index(str(path))
    assert (q.max_elements, q.element_count) == (500, 200)
    q.unmark_deleted(9)                 # its vector came from the sidecar
    assert q.knn_query(x[9], k=1)[0][0, 0] == 9
    q.add_items(x[:5], np.arange(900, 905))    # the file is not touched
    with keel.IndexReader(path) as r:
        assert len(r) == 199
    # A keel file made without keel.hnswlib: max_elements is its count.
    plain = tmp_path / "plain.keel"
    with keel.VectorIndex(plain, 16) as ix:
        ix.add_batch(x[:50], np.arange(50) + 7)
    z = kh.Index("l2", 16)
    z.load_index(str(plain))
    assert (z.max_elements, z.element_count) == (50, 50)
    assert sorted(z.get_ids_list()) == list(range(7, 57))
    z.add_items(x[0])                   # label 50 is there: an update
    with pytest.raises(RuntimeError, match="exceeds"):
        z.add_items(x[0], 1000)
    with pytest.raises(ValueError, match="load it into"):
        kh.Index("ip", 16).load_index(str(plain))


def test_path_is_durable(tmp_path):
    x = data(100)
    path = str(tmp_path / "d.keel")
    p = kh.Index("l2", 16, path=path)
    p.init_index(max_elements=300)
    p.add_items(x)
    p.mark_deleted(3)
    p.save_index(path)                  # durable in place, no copy
    with keel.IndexReader(path) as r:   # another handle sees it
        assert len(r) == 99
    p.add_items(data(5, seed=4))
    with pytest.warns(keel.UnflushedWarning, match="dropped 5 adds"):
        p.close()                       # the 5 unsaved adds are dropped
    q = kh.Index("l2", 16, path=path)
    q.init_index(max_elements=10)       # reopens; capacity kept
    assert (q.max_elements, q.element_count) == (300, 100)
    q.unmark_deleted(3)
    q.flush()
    q.close()
    with keel.IndexReader(path) as r:
        assert len(r) == 100


def hnswlib_file(tmp_path, space="l2", deleted=(5, 6)):
    x = data(300)
    p = real.Index(space, 16)
    p.init_index(max_elements=1000, M=12, ef_construction=150)
    p.add_items(x, np.arange(300) * 3 + 1)
    for label in deleted:
        p.mark_deleted(label * 3 + 1)
    path = str(tmp_path / ("h-%s.bin" % space))
    p.save_index(path)
    return path, x


@need_real
@pytest.mark.parametrize("space", ["l2", "cosine"])
def test_convert(tmp_path, space):
    src, x = hnswlib_file(tmp_path, space)
    with pytest.raises(RuntimeError, match="convert"):
        kh.Index(space, 16).load_index(src)   # hnswlib's format: convert
    out = str(tmp_path / "c.keel")
    kh.convert(src, out, space=space).close()
    with keel.IndexReader(out) as r:
        assert r.metric == space and len(r) == 298
        ids = r.ids()
        np.testing.assert_array_equal(ids, np.delete(np.arange(300) * 3 + 1,
                                                     [5, 6]))
        want = x if space == "l2" else \
            x / np.linalg.norm(x, axis=1, keepdims=True)
        np.testing.assert_allclose(r.get(ids), want[(ids - 1) // 3],
                                   rtol=1e-6)
    q = kh.Index(space, 16)
    q.load_index(out)
    assert (q.max_elements, q.element_count, q.ef_construction) == \
        (1000, 300, 150)
    q.unmark_deleted(16)
    assert q.knn_query(x[5], k=1)[0][0, 0] == 16
    with pytest.raises(FileExistsError):
        kh.convert(src, out)


@need_real
def test_cli_import(tmp_path):
    if not os.path.exists(KEEL):
        pytest.skip("%s is not built (make)" % KEEL)
    src, x = hnswlib_file(tmp_path)
    out = str(tmp_path / "cli.keel")
    run = subprocess.run([KEEL, "import-hnswlib", src, out, "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert '"vectors": 298' in run.stdout
    assert '"skipped_deleted": 2' in run.stdout
    with keel.IndexReader(out) as r:
        assert len(r) == 298 and 16 not in r and 19 not in r and 22 in r
        np.testing.assert_array_equal(r.get(22), x[7])
    again = subprocess.run([KEEL, "import-hnswlib", src, out],
                           capture_output=True, text=True)
    assert again.returncode == 1 and "help:" in again.stderr
    bad = tmp_path / "bad.bin"
    with open(src, "rb") as f:
        bad.write_bytes(f.read()[:-3])
    cut = subprocess.run([KEEL, "import-hnswlib", str(bad),
                          str(tmp_path / "x.keel")],
                         capture_output=True, text=True)
    assert cut.returncode == 1 and "help:" in cut.stderr
    assert not os.path.exists(tmp_path / "x.keel")
    with pytest.raises(ValueError, match="hnswlib"):
        kh.convert(str(bad), str(tmp_path / "y.keel"))


def recall_at(found, truth, k):
    return np.mean([len(set(f[:k].tolist()) & set(t[:k].tolist())) / k
                    for f, t in zip(found, truth)])


def test_glove_recall_equals_vectorindex(tmp_path, glove):
    """The same recall as keel.VectorIndex at the same settings (M 16,
    ef_construction 200, ef 64, k 10), against the exact ground truth."""
    base, queries, gt_l2, _ = glove
    p = kh.Index("l2", base.shape[1])
    p.init_index(max_elements=len(base), M=16, ef_construction=200)
    p.add_items(base)
    p.set_ef(64)
    labels, dist = p.knn_query(queries, k=10)
    mine = recall_at(labels, gt_l2, 10)
    with keel.VectorIndex(tmp_path / "g.keel", base.shape[1]) as ix:
        ix.add_batch(base)
        ids, edist = ix.search_batch(queries, k=10, ef=64)
    theirs = recall_at(ids, gt_l2, 10)
    assert mine >= 0.95 and abs(mine - theirs) <= 0.01, (mine, theirs)
    # Squared: keel.VectorIndex reports Euclidean distances.
    np.testing.assert_allclose(dist[:, 0], edist[:, 0] ** 2, rtol=1e-5)


def test_load_index_of_a_published_index(tmp_path):
    """load_index("s3://...") opens a published index read-only (run by
    make test-objstore, which starts a gateway; skipped without one)."""
    bucket = os.environ.get("KEEL_TEST_BUCKET")
    if not bucket:
        pytest.skip("no object store: make test-objstore starts one")
    x = data(300)
    p = make(kh, "l2", x)
    p.save_index(str(tmp_path / "p.keel"))
    u = "s3://%s/test-hnswlib/%d/p" % (bucket, os.getpid())
    with keel.VectorIndex(tmp_path / "p.keel", None) as w:
        w.publish(u)
    q = kh.Index("l2", 16)
    q.load_index(u)
    q.set_ef(200)
    assert (q.get_current_count(), q.max_elements) == (300, 300)
    np.testing.assert_array_equal(q.knn_query(x, k=3)[0],
                                  p.knn_query(x, k=3)[0])
    with pytest.raises(keel.ReadOnlyError):
        q.add_items(x[0], 5)


def crafted_hnswlib_file(path, vectors, labels, deleted=()):
    """An hnswlib index file as hnswalg.h's saveIndex lays it out (maxM0 2,
    maxM 1, every element on level 0 only), for files the real hnswlib
    would not write."""
    vectors = np.asarray(vectors, np.float32)
    n, dim = vectors.shape
    off = 4 + 4 * 2
    per = off + 4 * dim + 8
    out = struct.pack("<QQQQQQiIQQQdQ", 0, 10, n, per, off + 4 * dim, off,
                      0, 0, 1, 2, 1, 1.0, 40)
    for i in range(n):
        out += struct.pack("<HBB", 0, i in deleted, 0) + bytes(8)
        out += vectors[i].tobytes() + struct.pack("<Q", labels[i])
    out += bytes(4 * n)
    with open(path, "wb") as f:
        f.write(out)
    return str(path)


def test_refused_update_keeps_the_old_vector():
    """Re-adding a label with a vector keel refuses (a length whose square
    overflows a float) raises and leaves the label's old vector there."""
    p = kh.Index("l2", 2)
    p.init_index(10)
    p.add_items(np.array([[1, 2], [3, 4]], np.float32), [0, 1])
    with pytest.raises(keel.InvalidArgumentError):
        p.add_items(np.array([[1e30, 1e30], [5, 6]], np.float32), [0, 1])
    assert sorted(p.get_ids_list()) == [0, 1]
    np.testing.assert_array_equal(p.get_items([0, 1]), [[1, 2], [3, 4]])
    assert p.knn_query([3, 4], k=2)[0].tolist() == [[1, 0]]


def test_failed_convert_leaves_no_file(tmp_path):
    bad = crafted_hnswlib_file(tmp_path / "nan.bin",
                               [[1, 2], [np.nan, 1]], [7, 8])
    out = str(tmp_path / "c.keel")
    with pytest.raises(ValueError, match="NaN"):
        kh.convert(bad, out)
    assert os.listdir(tmp_path) == ["nan.bin"]
    good = crafted_hnswlib_file(tmp_path / "ok.bin", [[1, 2], [2, 1]],
                                [7, 8])
    kh.convert(good, out).close()         # the same path: nothing in the way
    with keel.IndexReader(out) as r:
        assert r.ids().tolist() == [7, 8]


def test_convert_label_live_and_marked_deleted(tmp_path):
    """A label in two slots, one marked deleted (hnswlib's replace_deleted
    can leave that): it converts live, once."""
    src = crafted_hnswlib_file(tmp_path / "d.bin", [[1, 2], [3, 4], [5, 6]],
                               [5, 5, 6], deleted=(0,))
    p = kh.convert(src, str(tmp_path / "c.keel"))
    assert sorted(p.get_ids_list()) == [5, 6]
    np.testing.assert_array_equal(p.get_items([5]), [[3, 4]])
    with pytest.raises(RuntimeError, match="not deleted"):
        p.unmark_deleted(5)
    p.close()


@pytest.mark.parametrize("mod", both(), ids=lambda m: m.__name__)
def test_size_t_arguments_refuse_floats_and_negatives(mod):
    """hnswlib's labels, k, ef and sizes are size_t: a float or a negative
    number raises TypeError (2.5 does not delete label 2)."""
    p = make(mod, "l2", data(20, dim=4))
    calls = [lambda: p.mark_deleted(2.5), lambda: p.mark_deleted(-1),
             lambda: p.unmark_deleted(2.0), lambda: p.resize_index(-1),
             lambda: p.resize_index(30.0), lambda: p.set_ef(-5),
             lambda: p.knn_query(data(1, dim=4), k=-1),
             lambda: p.knn_query(data(1, dim=4), k=1.5),
             lambda: mod.Index("l2", 4).init_index(-1),
             lambda: mod.Index("l2", 4).init_index(10, M=8.0)]
    for call in calls:
        with pytest.raises(TypeError) as e:
            call()
        if mod is kh:
            assert "\nhelp: " in str(e.value)
    assert p.get_current_count() == 20 and 2 in p.get_ids_list()
    assert p.knn_query(data(20, dim=4)[2], k=1)[0][0, 0] == 2
    p.mark_deleted(np.uint64(2))            # numpy integers are integers
    p.resize_index(np.int32(25))
    assert p.get_max_elements() == 25


def test_load_into_a_path_index_leaves_its_file_alone(tmp_path):
    """load_index of another file into an Index(path=) replaces the index
    (as in hnswlib); saving it elsewhere then does not rewrite the state
    beside the path= file (its marked-deleted labels stay)."""
    x = data(20, dim=4)
    o = kh.Index("l2", 4)
    o.init_index(20)
    o.add_items(x[:3])
    o.save_index(str(tmp_path / "other.keel"))
    own = str(tmp_path / "d.keel")
    d = kh.Index("l2", 4, path=own)
    d.init_index(25)
    d.add_items(x)
    d.mark_deleted(5)
    d.save_index(own)
    d.load_index(str(tmp_path / "other.keel"))
    d.save_index(str(tmp_path / "copy.keel"))
    d.close()
    e = kh.Index("l2", 4, path=own)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e.init_index(25)
    assert (e.get_current_count(), e.get_max_elements()) == (20, 25)
    assert 5 in e.get_ids_list()
    e.unmark_deleted(5)
    np.testing.assert_array_equal(e.get_items([5]), x[5:6])
    e.flush()
    e.close()


def test_bfindex_load_of_a_crafted_count(tmp_path):
    """A brute-force file whose header claims more elements (or capacity)
    than memory holds raises RuntimeError with a help line, asking for no
    memory the file does not hold (it read count * size bytes first)."""
    path = str(tmp_path / "bf.bin")
    for cap, count, what in ((2**40, 2**40, "cut short"),
                             (2**62, 1, "Not enough memory")):
        with open(path, "wb") as f:
            f.write(struct.pack("<QQQ", cap, 4 * 4 + 8, count) + bytes(24))
        with pytest.raises(RuntimeError, match=what) as e:
            kh.BFIndex("l2", 4).load_index(path)
        assert "\nhelp: " in str(e.value)
    with pytest.raises(RuntimeError, match="Not enough memory"):
        kh.BFIndex("l2", 4).init_index(2**62)


def test_damaged_sidecar_loads_the_keel_file(tmp_path):
    """A .hnswlib cut short or overwritten does not keep load_index (or
    Index(path=).init_index) from opening the complete keel file: a
    RuntimeWarning says it was not read, as for one that does not match."""
    x = data(20, dim=4)
    path = str(tmp_path / "a.keel")
    p = kh.Index("l2", 4)
    p.init_index(20)
    p.add_items(x)
    p.mark_deleted(3)
    p.save_index(path)
    side = path + ".hnswlib"
    with open(side, "rb") as f:
        whole = f.read()
    for damaged in (whole[:len(whole) // 2], b"", b"hello"):
        with open(side, "wb") as f:
            f.write(damaged)
        q = kh.Index("l2", 4)
        with pytest.warns(RuntimeWarning, match="cannot be read(.|\n)*help:"):
            q.load_index(path)
        assert q.get_current_count() == 19 and 3 not in q.get_ids_list()
        np.testing.assert_array_equal(q.get_items([4]), x[4:5])
        d = kh.Index("l2", 4, path=path)
        with pytest.warns(RuntimeWarning, match="cannot be read"):
            d.init_index(20)
        assert d.get_current_count() == 19
        d.close()


@pytest.mark.parametrize("mod", both(), ids=lambda m: m.__name__)
def test_space_and_dim_are_read_only(mod):
    """hnswlib's space and dim are read-only: setting space to 'ip' must not
    turn an l2 index's squared distances into unsquared ones."""
    p = make(mod, "l2", data(20, dim=4))
    for name, value in (("space", "ip"), ("dim", 5)):
        with pytest.raises(AttributeError):
            setattr(p, name, value)
    assert (p.space, p.dim) == ("l2", 4)
    q = pickle.loads(pickle.dumps(p))
    assert (q.space, q.dim) == ("l2", 4)


def test_every_refusal_has_a_help_line():
    """doc/python.md: exceptions carry hnswlib's message as their first
    line, then a help: line."""
    x = data(20, dim=4)

    def index(max_elements=30, **kw):
        p = kh.Index("l2", 4)
        p.init_index(max_elements, **kw)
        p.add_items(x)
        return p

    def marked():
        p = index(allow_replace_deleted=True)
        p.mark_deleted(1)
        return p

    def bf():
        b = kh.BFIndex("l2", 4)
        b.init_index(20)
        b.add_items(x)
        return b

    calls = {
        "space": (RuntimeError, lambda: kh.Index("hamming", 4)),
        "3-d data": (RuntimeError,
                     lambda: index().add_items(np.zeros((1, 1, 4)))),
        "ids shape": (RuntimeError, lambda: index().add_items(x[:2], [1])),
        "init twice": (RuntimeError, lambda: index().init_index(5)),
        "BFIndex init twice": (RuntimeError, lambda: bf().init_index(5)),
        "re-add marked": (RuntimeError, lambda: marked().add_items(x[1], 1)),
        "mark twice": (RuntimeError, lambda: marked().mark_deleted(1)),
        "unmark live": (RuntimeError, lambda: index().unmark_deleted(2)),
        "resize below": (RuntimeError, lambda: index().resize_index(3)),
        "get_items(3)": (ValueError, lambda: index().get_items(3)),
        "return_type": (ValueError,
                        lambda: index().get_items([1], return_type="x")),
        "BFIndex dims": (RuntimeError, lambda: bf().add_items(x[:1, :3])),
        "BFIndex query dims": (RuntimeError,
                               lambda: bf().knn_query(x[:1, :3])),
        "BFIndex full": (RuntimeError, lambda: bf().add_items(x[0], 99)),
        "mark missing": (RuntimeError, lambda: index().mark_deleted(99)),
        "unmark missing": (RuntimeError, lambda: index().unmark_deleted(99)),
        "get missing": (RuntimeError, lambda: index().get_items([99])),
    }
    for name, (kind, call) in calls.items():
        with pytest.raises(kind) as e:
            call()
        first, _, rest = str(e.value).partition("\n")
        assert first and rest.startswith("help: "), (name, str(e.value))


@pytest.mark.parametrize("m, efc, want", [(40000, 2**63, (32767, 100000)),
                                          (1, 0, (2, 200))])
def test_convert_takes_settings_as_the_cli_does(tmp_path, m, efc, want):
    """M and ef_construction past keel's limits convert at the limit, as
    keel import-hnswlib takes them (convert refused such a file)."""
    src = crafted_hnswlib_file(tmp_path / "h.bin", [[1, 2], [3, 4]], [7, 8])
    with open(src, "r+b") as f:
        f.seek(72)
        f.write(struct.pack("<Q", m))
        f.seek(88)
        f.write(struct.pack("<Q", efc))
    p = kh.convert(src, str(tmp_path / "c.keel"))
    assert (p.M, p.ef_construction) == want
    assert sorted(p.get_ids_list()) == [7, 8]
    p.close()
    if os.path.exists(KEEL):
        out = str(tmp_path / "cli.keel")
        run = subprocess.run([KEEL, "import-hnswlib", src, out, "--json"],
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert '"M": %d, "ef_construction": %d' % want in run.stdout


def test_convert_of_a_device_is_refused(tmp_path):
    """/dev/zero was read until memory ran out (here bounded, to be safe)."""
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
            "import keel.hnswlib as kh\n"
            "try:\n"
            "    kh.convert('/dev/zero', sys.argv[1])\n"
            "except ValueError as e:\n"
            "    assert 'not a regular file' in str(e) and '\\nhelp: ' in "
            "str(e), e\n"
            "else:\n"
            "    raise SystemExit('converted /dev/zero')\n")
    run = subprocess.run([sys.executable, "-c", code,
                          str(tmp_path / "z.keel")],
                         env=dict(os.environ,
                                  PYTHONPATH=os.path.join(ROOT, "python")),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-500:]
    assert not os.path.exists(tmp_path / "z.keel")


def test_private_copies_leave_no_undo_log(tmp_path, monkeypatch):
    # An unpickled index and load_index of a keel file work on a private,
    # unlinked copy; unflushed adds put an undo log beside it, which must
    # go with the copy (it piled up in /tmp, one per dropped index).
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "t"))
    os.mkdir(tmp_path / "t")
    rng = np.random.default_rng(5)
    p = kh.Index("l2", 8)
    p.init_index(100)
    p.add_items(rng.random((10, 8), dtype=np.float32))
    p.save_index(str(tmp_path / "saved.keel"))
    q = pickle.loads(pickle.dumps(p))
    q.add_items(rng.random((10, 8), dtype=np.float32))
    r = kh.Index("l2", 8)
    r.load_index(str(tmp_path / "saved.keel"))
    r.add_items(rng.random((10, 8), dtype=np.float32))
    assert len(os.listdir(tmp_path / "t")) == 2      # the two live logs
    del q
    del r
    gc.collect()
    assert os.listdir(tmp_path / "t") == []
