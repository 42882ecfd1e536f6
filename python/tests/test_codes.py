"""test_codes.py -- traversal codes (codes="i8"): searches walk the graph on
int8 rows and return the exact distances of the stored vectors; codes are
fixed when the file is created, like precision."""

import numpy as np
import pytest

import keel


def brute_force(metric, base, queries):
    """Every distance from each query to each base row, in float64, as
    keel defines them: Euclidean, 1 - cos, 1 - dot."""
    b = base.astype(np.float64)
    q = queries.astype(np.float64)
    if metric == "l2":
        sq = (q * q).sum(1)[:, None] - 2 * q @ b.T + (b * b).sum(1)[None, :]
        return np.sqrt(np.maximum(sq, 0))
    if metric == "cosine":
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    return 1 - q @ b.T


def test_defaults_to_none(path):
    assert keel.IndexOptions().codes == "none"
    with keel.VectorIndex(path, 4) as index:
        assert index.stats()["codes"] == "none"
        assert index.codes == "none" and index.options.codes == "none"


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_i8_search_returns_exact_distances(metric, tmp_path, rng):
    base = rng.standard_normal((3000, 48)).astype(np.float32)
    queries = rng.standard_normal((40, 48)).astype(np.float32)
    exact = brute_force(metric, base, queries)
    truth = np.argsort(exact, axis=1)[:, :10]
    answers = {}
    for codes in ("i8", "none"):
        with keel.VectorIndex(str(tmp_path / (codes + ".keel")), 48,
                              metric=metric, codes=codes) as index:
            assert index.stats()["codes"] == codes
            index.add_batch(base)
            answers[codes] = index.search_batch(queries, k=10, ef=100)
    ids, dists = answers["i8"]
    for q in range(len(queries)):
        # The distances are those of the stored vectors: numpy's, and bit
        # for bit what an index without codes reports for the same ids.
        np.testing.assert_allclose(dists[q], exact[q, ids[q].astype(np.int64)],
                                   rtol=1e-5, atol=1e-5)
        assert np.all(np.diff(dists[q]) >= 0)
        plain = dict(zip(answers["none"][0][q].tolist(),
                         answers["none"][1][q].tolist()))
        for i, d in zip(ids[q].tolist(), dists[q].tolist()):
            if i in plain:
                assert np.float32(d).tobytes() == \
                    np.float32(plain[i]).tobytes(), (q, i)
    recall = np.mean([len(set(ids[q].tolist()) & set(truth[q].tolist()))
                      for q in range(len(queries))]) / 10
    assert recall >= 0.9, recall


@pytest.mark.parametrize("codes", ["i8", "i4"])
def test_codes_on_glove(codes, glove, tmp_path):
    base, queries, gt_l2, _ = glove
    path = str(tmp_path / ("glove-%s.keel" % codes))
    with keel.VectorIndex(path, 100, codes=codes) as index:
        index.add_batch(base)
        assert index.stats()["codes"] == codes and index.codes == codes
    with keel.IndexReader(path) as reader:
        assert reader.stats()["codes"] == codes
        ids, dists = reader.search_batch(queries, k=10)
        one, one_d = reader.search(queries[0], k=10)
    np.testing.assert_array_equal(one, ids[0])
    np.testing.assert_array_equal(one_d, dists[0])
    exact = brute_force("l2", base, queries)
    for q in range(len(queries)):
        np.testing.assert_allclose(dists[q], exact[q, ids[q].astype(np.int64)],
                                   rtol=1e-5)
    recall = np.mean([len(set(ids[q].tolist()) & set(gt_l2[q, :10].tolist()))
                      for q in range(len(queries))]) / 10
    assert recall >= 0.95, recall


def test_i8_with_f16(tmp_path, rng):
    base = rng.standard_normal((500, 20)).astype(np.float32)
    query = rng.standard_normal(20).astype(np.float32)
    found = {}
    for codes in ("i8", "none"):
        with keel.VectorIndex(str(tmp_path / (codes + ".keel")), 20,
                              precision="f16", codes=codes) as index:
            index.add_batch(base)
            assert (index.precision, index.codes) == ("f16", codes)
            found[codes] = index.search(query, k=5, ef=200)
    np.testing.assert_array_equal(found["i8"][0], found["none"][0])
    np.testing.assert_array_equal(found["i8"][1], found["none"][1])


def test_codes_are_fixed_at_creation(path, rng):
    v = rng.standard_normal((200, 8)).astype(np.float32)
    with keel.VectorIndex(path, 8, codes="i8") as index:
        index.add_batch(v)
    # Not named: the file's own, for a writer and a reader.
    with keel.VectorIndex(path, 8, ef_search=30) as index:
        assert index.codes == "i8" and index.options.codes == "i8"
        index.add_batch(v[:10])
        index.delete(range(5))
        index.flush()
        index.compact()
        assert index.stats()["codes"] == "i8"
        index.check()
    with keel.VectorIndex(path, None, metric="l2", precision="f32") as index:
        assert index.codes == "i8"
    with keel.VectorIndex(path, 8, codes="i8") as index:
        assert len(index) == 205
    with keel.IndexReader(path) as reader:
        assert reader.stats()["codes"] == "i8" and reader.codes == "i8"
    # Named otherwise: refused, in Python's terms.
    for open_ in (lambda: keel.VectorIndex(path, 8, codes="none"),
                  lambda: keel.IndexReader(path, codes="none"),
                  lambda: keel.VectorIndex(path, 8, {"codes": "none",
                                                     "metric": "l2"})):
        with pytest.raises(keel.OptionsMismatchError) as e:
            open_()
        text = str(e.value)
        assert "i8, not none" in text and "\nhelp: " in text, text
        assert "leave codes out" in text, text
        assert "KEEL_" not in text and "keel_" not in text, text
    with keel.VectorIndex(path, 8) as index:
        assert len(index) == 205


def test_an_index_without_codes_refuses_i8(path):
    with keel.VectorIndex(path, 4) as index:
        index.add([1, 2, 3, 4])
    with pytest.raises(keel.OptionsMismatchError, match="none, not i8"):
        keel.VectorIndex(path, 4, codes="i8")
    with keel.VectorIndex(path, 4) as index:
        assert index.codes == "none" and len(index) == 1


@pytest.mark.parametrize("bad", ["bogus", "int8", "", 1, None, True])
def test_bad_codes_raise_value_error(bad, path):
    import os
    with pytest.raises(ValueError, match="option codes is %s" %
                       repr(bad).replace("(", "\\(")) as e:
        keel.VectorIndex(path, 4, codes=bad)
    assert "one of i4, i8, none\nhelp: " in str(e.value)
    assert not os.path.exists(path)
    with pytest.raises(ValueError, match="option codes is"):
        keel.IndexOptions(codes=bad)
    o = keel.IndexOptions()
    with pytest.raises(ValueError, match="option codes is"):
        o.codes = bad
    assert o.codes == "none"
