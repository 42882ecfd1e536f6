"""test_options.py -- keel.IndexOptions: defaults, names, aliases and the
suggestions for other libraries' option names."""

import inspect
import os

import numpy as np
import pytest

import keel


def test_defaults_and_signature():
    o = keel.IndexOptions()
    assert o.as_dict() == {"max_connections": 16, "ef_construction": 200,
                           "ef_search": 64, "metric": "l2",
                           "precision": "f32", "warm": False,
                           "huge_pages": False, "threads": 0,
                           "cache_dir": None, "cache_bytes": None,
                           "memory_cache_bytes": None, "codes": "none"}
    sig = inspect.signature(keel.IndexOptions)
    assert list(sig.parameters) == list(o.as_dict())
    assert sig.parameters["ef_search"].default == 64
    assert keel.IndexOptions(32).max_connections == 32
    assert "ef_search=64" in repr(o)


@pytest.mark.parametrize("value, canon", [
    ("l2", "l2"), ("L2", "l2"), ("euclidean", "l2"), ("cosine", "cosine"),
    ("cos", "cosine"), ("angular", "cosine"), ("ip", "ip"), ("dot", "ip"),
    ("inner_product", "ip")])
def test_metric_names(value, canon):
    assert keel.IndexOptions(metric=value).metric == canon


@pytest.mark.parametrize("value, canon", [
    ("f32", "f32"), ("float32", "f32"), ("full", "f32"), ("f16", "f16"),
    ("float16", "f16"), ("half", "f16"), (np.float16, "f16"),
    (np.dtype("float32"), "f32")])
def test_precision_names(value, canon):
    assert keel.IndexOptions(precision=value).precision == canon


@pytest.mark.parametrize("name, right", [
    ("M", "max_connections"), ("m", "max_connections"),
    ("ef", "ef_search"), ("efSearch", "ef_search"), ("ef_s", "ef_search"),
    ("efConstruction", "ef_construction"), ("ef_c", "ef_construction"),
    ("space", "metric"), ("distance", "metric"), ("dtype", "precision"),
    ("num_threads", "threads"), ("max_conections", "max_connections"),
    ("ef_serach", "ef_search")])
def test_unknown_names_suggest_the_right_one(name, right, path):
    with pytest.raises(TypeError, match="did you mean %s\\?" % right):
        keel.IndexOptions(**{name: 1})
    with pytest.raises(TypeError, match="did you mean %s\\?" % right):
        keel.VectorIndex(path, 4, {name: 1})
    with pytest.raises(TypeError, match="did you mean %s\\?" % right):
        keel.VectorIndex(path, 4, **{name: 1})


def test_bad_values():
    with pytest.raises(ValueError, match="one of cosine, ip, l2"):
        keel.IndexOptions(metric="hamming")
    with pytest.raises(ValueError, match="f16, f32"):
        keel.IndexOptions(precision="int8")
    with pytest.raises(TypeError, match="integer"):
        keel.IndexOptions(ef_search=6.4)
    with pytest.raises(TypeError, match="True or False"):
        keel.IndexOptions(warm="yes")
    with pytest.raises(TypeError, match="IndexOptions or a dict"):
        keel.VectorIndex("x.keel", 4, options=["metric", "l2"])
    o = keel.IndexOptions()
    with pytest.raises(AttributeError, match="did you mean ef_search"):
        o.efSearch = 10


def test_options_reach_the_handle(path):
    opts = keel.IndexOptions(max_connections=8, ef_search=32,
                             ef_construction=50, metric="cosine", threads=1)
    with keel.VectorIndex(path, 3, opts) as index:
        assert index.stats()["max_connections"] == 8
        assert index.options.ef_search == 32
        assert index.metric == "cosine"
    # Keyword options override the options object.
    with keel.VectorIndex(path, 3, opts, ef_search=99) as index:
        assert index.options.ef_search == 99
    assert opts.ef_search == 32            # the caller's copy is unchanged
    with keel.IndexReader(path, {"ef_search": 7}) as reader:
        assert reader.options.ef_search == 7
        assert reader.options.max_connections == 8


def test_equality_and_replace():
    a = keel.IndexOptions(metric="cos")
    assert a == keel.IndexOptions(metric="cosine")
    b = a.replace(ef_search=10)
    assert b.ef_search == 10 and b.metric == "cosine" and a.ef_search == 64
    assert b.given("ef_search") and b.given("metric")
    assert not b.given("precision")


def test_cache_options_are_checked(tmp_path):
    o = keel.IndexOptions(cache_dir=tmp_path, cache_bytes=2**30,
                          memory_cache_bytes=np.int64(64 << 20))
    assert o.cache_dir == str(tmp_path)          # os.fspath of a PathLike
    assert o.cache_bytes == 2**30 and o.memory_cache_bytes == 64 << 20
    assert keel.IndexOptions(cache_dir=b"/c").cache_dir == b"/c"
    assert keel.IndexOptions(cache_bytes=2**64 - 1).cache_bytes == 2**64 - 1
    for name in ("cache_bytes", "memory_cache_bytes"):
        for bad in (-1, 0, 2**64):
            with pytest.raises(keel.InvalidArgumentError,
                               match="%s is %d.*\nhelp: .*None" % (name, bad)):
                keel.IndexOptions(**{name: bad})
        for bad in (1.5, "1G", True):
            with pytest.raises(TypeError,
                               match="%s takes a number of bytes.*\nhelp: "
                                     % name):
                keel.IndexOptions(**{name: bad})
    with pytest.raises(TypeError, match="cache_dir takes a directory.*not "
                                        "int \\(5\\)\nhelp: "):
        keel.IndexOptions(cache_dir=5)
    with pytest.raises(keel.InvalidArgumentError,
                       match="cache_dir is an empty path\nhelp: "):
        keel.IndexOptions(cache_dir="")
    o = keel.IndexOptions()
    with pytest.raises(TypeError, match="cache_bytes"):
        o.cache_bytes = "big"
    with pytest.raises(TypeError, match="did you mean cache_dir"):
        keel.IndexOptions(cache_dri="/c")


def test_cache_options_are_for_url_readers_only(path, tmp_path):
    with pytest.raises(keel.InvalidArgumentError,
                       match="option cache_dir applies only to a reader of a "
                             "published index .*not to the writer of "
                             ".*test.keel\nhelp: leave cache_dir out"):
        keel.VectorIndex(path, 4, cache_dir=tmp_path)
    assert not os.path.exists(path)              # refused before opening
    with keel.VectorIndex(path, 4, cache_dir=None) as w:   # None: nothing set
        w.add([1, 2, 3, 4])
    opts = keel.IndexOptions(cache_bytes=2**20, memory_cache_bytes=2**24)
    with pytest.raises(keel.InvalidArgumentError,
                       match="options cache_bytes and memory_cache_bytes "
                             "apply only .*not to a reader of the file"):
        keel.IndexReader(path, opts)
    with pytest.raises(keel.InvalidArgumentError, match="not to a reader"):
        keel.VectorIndex(path, None, read_only=True, memory_cache_bytes=2**24)
    with keel.IndexReader(path, opts.replace(cache_bytes=None,
                                             memory_cache_bytes=None)) as r:
        assert len(r) == 1
