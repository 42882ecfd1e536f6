"""test_recall.py -- recall on the GloVe 10k slice, and search_batch rows
equal to single searches."""

import numpy as np

import keel


def recall_at(found, truth, k):
    hits = sum(len(set(f[:k].tolist()) & set(t[:k].tolist()))
               for f, t in zip(found, truth))
    return hits / (len(truth) * k)


def test_recall_l2(glove, glove_index):
    base, queries, gt_l2, _ = glove
    ids, dist = glove_index.search_batch(queries, k=10, ef=64)
    r = recall_at(ids, gt_l2, 10)
    assert r >= 0.95, "recall@10 at ef 64 is %.3f" % r
    # Distances are Euclidean (not squared) and sorted.
    exact = np.linalg.norm(base[ids[:, 0].astype(np.int64)] - queries, axis=1)
    np.testing.assert_allclose(dist[:, 0], exact, rtol=1e-4, atol=1e-4)
    assert (np.diff(dist, axis=1) >= 0).all()


def test_recall_cosine(tmp_path, glove):
    base, queries, _, gt_cos = glove
    with keel.VectorIndex(tmp_path / "cos.keel", 100, metric="cosine") as ix:
        ix.add_batch(base)
        ids, _ = ix.search_batch(queries, k=10)
    r = recall_at(ids, gt_cos, 10)
    assert r >= 0.95, "cosine recall@10 at ef 64 is %.3f" % r


def test_search_batch_rows_equal_single_searches(glove, glove_index):
    _, queries, _, _ = glove
    for kwargs in ({"k": 10}, {"k": 7, "ef": 32},
                   {"k": 10, "allowed": np.arange(0, 10000, 3)}):
        ids, dist = glove_index.search_batch(queries, **kwargs)
        for i, q in enumerate(queries):
            one_ids, one_dist = glove_index.search(q, **kwargs)
            np.testing.assert_array_equal(ids[i, :len(one_ids)], one_ids)
            np.testing.assert_array_equal(dist[i, :len(one_dist)], one_dist)


def test_filtered_recall(glove, glove_index):
    base, queries, _, _ = glove
    allowed = np.arange(0, 10000, 10, dtype=np.uint64)
    ids, _ = glove_index.search_batch(queries, k=10, ef=128, allowed=allowed)
    assert (ids % 10 == 0).all()
    # Exact answers over the allowed tenth.
    sub = base[::10]
    d = ((queries[:, None, :] - sub[None, :, :]) ** 2).sum(-1)
    truth = np.argsort(d, axis=1)[:, :10] * 10
    assert recall_at(ids, truth, 10) >= 0.9
