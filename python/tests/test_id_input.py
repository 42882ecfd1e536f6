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


def test_random_mixes_of_ints_convert_exactly_or_are_refused():
    """Lists mixing Python ints, numpy ints and tuples of them across the
    int64/uint64 boundary: each converts to exactly its values, or (a value
    below 0 or past 2**64 - 1) is refused with InvalidArgumentError."""
    from keel import _coerce
    rng = np.random.default_rng(7)
    pools = [
        lambda: int(rng.integers(0, 1000)),
        lambda: int(rng.integers(2**62, 2**63)) + int(rng.integers(0, 2**63)),
        lambda: 2**63 + int(rng.integers(-2, 3)),
        lambda: 2**64 - 1 - int(rng.integers(0, 3)),
        lambda: np.uint64(2**63 + int(rng.integers(0, 1000))),
        lambda: np.int64(rng.integers(0, 2**62)),
        lambda: -int(rng.integers(1, 3)),
        lambda: 2**64 + int(rng.integers(0, 3)),
    ]
    for _ in range(400):
        n = int(rng.integers(1, 7))
        values = [pools[int(rng.integers(0, len(pools)))]() for _ in range(n)]
        wanted = [int(v) for v in values]
        given = tuple(values) if rng.random() < 0.3 else values
        if all(0 <= v <= 2**64 - 1 for v in wanted):
            arr = _coerce.ids(given, "delete", -1)
            assert arr.dtype == np.uint64
            assert [int(x) for x in arr] == wanted, values
        else:
            with pytest.raises(keel.InvalidArgumentError):
                _coerce.ids(given, "delete", -1)


def test_a_bool_among_ids_is_refused_as_one_id_is(ix):
    ix.add_batch(_rows(2), ids=[1, 5])
    with pytest.raises(TypeError, match="element 1 of .* is a bool"):
        ix.delete([5, True])
    with pytest.raises(TypeError, match="element 0 of .* is a bool"):
        ix.search(_rows(1)[0], k=2, allowed=[np.True_, BIG])
    assert len(ix) == 2


def test_raw_bytes_are_not_one_id_or_value_per_byte(ix):
    # bytes were refused; a bytearray or a memoryview of bytes was read as
    # one id (or one component) per byte: 1000 as uint64 bytes became the
    # ids 232, 3 and 0.
    raw = np.array([1000], dtype=np.uint64).tobytes()
    for data in (bytearray(raw), memoryview(raw), bytes(raw)):
        with pytest.raises(TypeError, match=r"np\.frombuffer\(data, "
                                            r"dtype=np\.uint64\)"):
            keel.Filter(data)
        with pytest.raises(TypeError, match="as integers"):
            ix.search(_rows(1)[0], k=3, allowed=data)
    with pytest.raises(TypeError, match="frombuffer"):
        ix.add_batch(_rows(2), ids=bytearray(b"\x05\x07"))
    four = np.arange(4, dtype=np.float32).tobytes()[:4]
    for data in (bytearray(b"abcd"), memoryview(b"abcd"), bytearray(four)):
        with pytest.raises(TypeError, match=r"dtype=np\.float32\)"):
            ix.add(data, id=9)
    assert len(ix) == 0
    # A typed memoryview keeps its item type: exact ids and values.
    ix.add_batch(memoryview(_rows(2)), ids=memoryview(
        np.array([BIG, 5], dtype=np.uint64)))
    assert sorted(ix.ids()) == [5, BIG]
    assert np.array_equal(ix.get(BIG), _rows(2)[0])
    assert keel.Filter(memoryview(np.array([1000], np.uint64))).count == 1


def test_float64_past_float32_is_named_not_called_inf(ix):
    # float32 turned 1e39 into inf, and the message named an inf the
    # caller never passed.
    with pytest.raises(keel.InvalidArgumentError,
                       match=r"1e\+39 at component 2 of vector, beyond "
                             r"float32's range"):
        ix.add(np.array([0.0, 1.0, 1e39, 2.0]), id=1)
    rows = _rows(3).astype(np.float64)
    rows[2, 1] = -1e300
    with pytest.raises(keel.InvalidArgumentError,
                       match=r"-1e\+300 at row 2, component 1 of vectors"):
        ix.add_batch(rows)
    with pytest.raises(keel.InvalidArgumentError, match="row 0, component 3 of queries"):
        ix.search_batch(np.array([[0, 0, 0, 1e39]]), k=1)
    assert len(ix) == 0
    # Infinities and NaN themselves are still the library's to name.
    with pytest.raises(keel.InvalidArgumentError, match="inf at component 0"):
        ix.add(np.array([np.inf, 0.0, 0.0, 0.0]), id=2)
    ix.add(np.array([3.0e38, 0.0, 0.0, 0.0]) / 1e30, id=3)
    assert len(ix) == 1


def test_an_id_past_64_bits_is_named_with_the_range():
    ix = keel.VectorIndex(":memory:", 2)
    for call in (lambda: ix.get(2**64), lambda: ix.get(2**70)):
        with pytest.raises(keel.InvalidArgumentError,
                           match=r"id 1180591620717411303424 is out of range"
                           r"|id 18446744073709551616 is out of range") as e:
            call()
        assert "\nhelp: ids are integers from 0 to 18446744073709551614" \
            in str(e.value)
    ix.close()
