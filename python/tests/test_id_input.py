"""test_id_input.py -- ids given as Python values convert exactly or are
refused with advice that does not change them.

numpy reads a list that mixes an int only uint64 holds (2**63 and up) with
small ints as float64, which rounds 2**63 + 1 to 2**63; keel takes such a
list id by id instead. A dict is refused rather than read as its keys.
"""

import numpy as np
import pytest

import keel

BIG = 2**63 + 1          # float64 rounds it to 2**63
TOP = 2**64 - 2          # the largest id


@pytest.fixture
def ix(path):
    index = keel.VectorIndex(path, 4, metric="l2")
    yield index
    index.flush()
    index.close()


def _rows(n):
    return np.arange(n * 4, dtype=np.float32).reshape(n, 4)


def test_add_batch_mixed_big_and_small_ids_are_exact(ix):
    ix.add_batch(_rows(3), ids=[BIG, 5, TOP])
    assert sorted(ix.ids()) == sorted([BIG, 5, TOP])
    assert BIG in ix and 2**63 not in ix
    assert np.array_equal(ix.get(BIG), _rows(3)[0])


def test_allowed_mixed_big_and_small_ids_are_exact(ix):
    ix.add_batch(_rows(3), ids=[BIG, 5, 2**63])
    q = _rows(3)[2]
    # Only BIG is allowed: its rounded neighbour 2**63 (the exact match)
    # must not come back.
    ids, _ = ix.search(q, k=3, allowed=[BIG, 7])
    assert [int(i) for i in ids] == [BIG]
    ids, _ = ix.search(q, k=3, allowed=keel.Filter([BIG, 7]))
    assert [int(i) for i in ids] == [BIG]


def test_delete_and_get_take_mixed_ids(ix):
    ix.add_batch(_rows(2), ids=[BIG, 5])
    ix.delete([BIG, 5])
    assert len(ix) == 0


def test_out_of_range_ints_in_a_mixed_list_are_refused(ix):
    with pytest.raises(keel.InvalidArgumentError, match="id -1"):
        ix.add_batch(_rows(2), ids=[-1, BIG])
    with pytest.raises(keel.InvalidArgumentError, match="18446744073709551616"):
        ix.add_batch(_rows(2), ids=[2**64, 5])


def test_float_ids_past_2_53_are_not_told_to_use_astype(ix):
    floats = np.array([float(BIG), 5.0])
    with pytest.raises(TypeError) as e:
        ix.add_batch(_rows(2), ids=floats)
    assert "astype" not in str(e.value)
    assert "np.array(ids, dtype=np.uint64)" in str(e.value)
    # Small integral floats still get the astype advice, which is exact.
    with pytest.raises(TypeError, match=r"astype\(np.uint64\)"):
        ix.add_batch(_rows(2), ids=np.array([7.0, 8.0]))


def test_a_dict_is_not_taken_as_its_keys(ix):
    ix.add_batch(_rows(3), ids=[1, 2, 3])
    with pytest.raises(TypeError, match=r"not dict.*\nhelp: pass list\(d\)"):
        ix.search(_rows(1)[0], k=3, allowed={1: 2})
    with pytest.raises(TypeError, match="not dict"):
        ix.add_batch(_rows(1), ids={9: 9})
    with pytest.raises(TypeError, match="not dict"):
        keel.Filter({1: 2})
