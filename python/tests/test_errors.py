"""test_errors.py -- one test per keel error code, and the mistakes caught
in Python terms before keel sees them."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import keel
from conftest import subprocess_env


def raises(cls, builtin, fn, *args, **kwargs):
    """fn(*args) raises cls (a keel.Error and a builtin) with a help line."""
    with pytest.raises(cls) as info:
        fn(*args, **kwargs)
    e = info.value
    assert isinstance(e, keel.Error) and isinstance(e, builtin)
    assert "\nhelp: " in str(e), str(e)
    assert e.help and e.code == cls.code
    return str(e)


@pytest.fixture
def index(path):
    ix = keel.VectorIndex(path, 4)
    ix.add_batch(np.eye(4))
    ix.flush()
    yield ix
    ix.close()


def test_every_code_has_a_class():
    assert len(keel.BY_CODE) == 15
    for code, cls in enumerate(keel.BY_CODE[1:], 1):
        assert cls.code == code and issubclass(cls, keel.Error)
        assert keel._keel.strerror(code) != "unknown error code"


def test_einval(index):
    v = np.ones(4, np.float32)
    v[2] = np.nan
    msg = raises(keel.InvalidArgumentError, ValueError, index.add, v)
    assert "NaN at component 2" in msg
    batch = np.ones((3, 4))
    batch[1, 3] = np.inf
    msg = raises(keel.InvalidArgumentError, ValueError, index.add_batch, batch)
    assert "vector 1 of the batch" in msg
    raises(keel.InvalidArgumentError, ValueError, index.search, v)
    raises(keel.InvalidArgumentError, ValueError, index.search, np.ones(4),
           k=0)
    raises(keel.InvalidArgumentError, ValueError, index.search, np.ones(4),
           ef=10**6)
    raises(keel.InvalidArgumentError, ValueError, index.add, np.ones(4),
           id=2**64 - 1)
    raises(keel.InvalidArgumentError, ValueError, index.add_batch,
           np.ones((2, 4)), ids=[20, 20])
    raises(keel.InvalidArgumentError, ValueError, index.get, -1)
    raises(keel.InvalidArgumentError, ValueError, index.add_batch,
           np.ones((1, 4)), ids=[-5])
    raises(keel.InvalidArgumentError, ValueError, keel.IndexOptions,
           max_connections=1)
    raises(keel.InvalidArgumentError, ValueError, keel.VectorIndex,
           index.path + "2", 5000)


def test_edim(index, path):
    raises(keel.DimensionMismatchError, ValueError, index.add, np.ones(5))
    raises(keel.DimensionMismatchError, ValueError, index.search_batch,
           np.ones((2, 3)))
    index.close()
    msg = raises(keel.DimensionMismatchError, ValueError, keel.VectorIndex,
                 path, 8)
    assert "4 dimensions, not 8" in msg
    raises(keel.DimensionMismatchError, ValueError, keel.VectorIndex, path,
           8, read_only=True)


def test_eoptions(index, path):
    index.close()
    msg = raises(keel.OptionsMismatchError, ValueError, keel.VectorIndex,
                 path, 4, metric="cosine", precision="f32")
    assert "metric l2, not cosine" in msg
    raises(keel.OptionsMismatchError, ValueError, keel.VectorIndex, path, 4,
           max_connections=8)
    raises(keel.OptionsMismatchError, ValueError, keel.IndexReader, path,
           metric="ip")


def test_enotfound(index, tmp_path):
    missing = str(tmp_path / "missing.keel")
    msg = raises(keel.IndexNotFoundError, FileNotFoundError, keel.IndexReader,
                 missing)
    assert missing in msg
    assert isinstance(keel.IndexNotFoundError(""), keel.NotFoundError)
    raises(keel.IndexNotFoundError, FileNotFoundError, keel.VectorIndex,
           str(tmp_path / "no" / "dir.keel"), 4)
    for fn in (index.get, index.delete):
        with pytest.raises(keel.IdNotFoundError) as info:
            fn(99)
        e = info.value
        assert isinstance(e, KeyError) and isinstance(e, keel.NotFoundError)
        assert not isinstance(e, FileNotFoundError)
        assert "help: " in str(e) and str(e).startswith("no live vector")


def test_enotindex(tmp_path):
    p = tmp_path / "text.keel"
    p.write_text("id,vector\n1,0.5 0.25\n")
    raises(keel.NotAnIndexError, ValueError, keel.IndexReader, p)
    raises(keel.NotAnIndexError, ValueError, keel.VectorIndex, p, 4)
    assert p.read_text() == "id,vector\n1,0.5 0.25\n"


def test_eexist(index):
    msg = raises(keel.IdInUseError, ValueError, index.add, np.ones(4), id=2)
    assert "id 2 is already in use" in msg
    raises(keel.IdInUseError, ValueError, index.add_batch, np.ones((2, 4)),
           ids=[50, 1])


def test_elocked(index, path):
    msg = raises(keel.IndexLockedError, OSError, keel.VectorIndex, path, 4)
    assert "open for writing elsewhere, in this process" in msg
    with keel.IndexReader(path) as reader:     # readers are fine
        assert len(reader) == 4


def test_ereadonly(index, path):
    with keel.IndexReader(path) as reader:
        for call in (lambda: reader.add(np.ones(4)),
                     lambda: reader.add_batch(np.ones((1, 4))),
                     lambda: reader.delete(0), reader.flush, reader.compact):
            msg = raises(keel.ReadOnlyError, OSError, call)
            assert "reader" in msg
        assert isinstance(keel.ReadOnlyError(""), ValueError)


def _damaged_copy(index, tmp_path, name, change):
    index.close()
    with open(index.path, "rb") as f:
        data = bytearray(f.read())
    change(data)
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return out


def test_ecorrupt(index, tmp_path):
    def flip_both_headers(data):
        data[100] ^= 1
        data[65536 + 100] ^= 1
    p = _damaged_copy(index, tmp_path, "bad.keel", flip_both_headers)
    raises(keel.CorruptIndexError, OSError, keel.IndexReader, p)
    raises(keel.CorruptIndexError, OSError, keel.VectorIndex, p, 4)


def test_eversion(index, tmp_path):
    def newer(data):                  # read_version 1000 in both copies
        data[8:12] = (1000).to_bytes(4, "little")
        data[65536 + 8:65536 + 12] = (1000).to_bytes(4, "little")
    p = _damaged_copy(index, tmp_path, "new.keel", newer)
    msg = raises(keel.VersionError, ValueError, keel.IndexReader, p)
    assert "newer keel" in msg


def test_efull(index):
    # No room for more automatic ids after the largest possible id.
    index.add(np.ones(4), id=2**64 - 2)
    msg = raises(keel.IndexFullError, OSError, index.add, np.ones(4))
    assert "automatic id" in msg
    raises(keel.IndexFullError, OSError, index.add_batch, np.ones((2, 4)))
    index.flush()


def test_eio(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    raises(keel.IndexIOError, OSError, keel.VectorIndex, f / "x.keel", 4)


def test_enomem(index):
    # In a child with a capped address space, an allow-list of 8M ids needs
    # a 256 MiB set that keel cannot allocate.
    script = textwrap.dedent("""
        import resource, numpy as np, keel
        ix = keel.IndexReader(%r)
        allowed = np.arange(8_000_000, dtype=np.uint64)
        ix.search(np.ones(4), k=1, allowed=[1])
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        limit = pages * resource.getpagesize() + (96 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            ix.search(np.ones(4), k=1, allowed=allowed)
        except keel.OutOfMemoryError as e:
            assert isinstance(e, MemoryError) and "help: " in str(e)
            print("ENOMEM", e.code)
    """ % index.path)
    out = subprocess.run([sys.executable, "-c", script], env=subprocess_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ENOMEM 12", out.stderr


# --- mistakes caught in Python terms ------------------------------------


def test_two_d_array_where_one_vector_belongs(index):
    with pytest.raises(ValueError, match="search_batch"):
        index.search(np.ones((2, 4)))
    with pytest.raises(ValueError, match="add_batch"):
        index.add(np.ones((1, 4)))
    with pytest.raises(ValueError, match="reshape"):
        index.add_batch(np.ones(4))
    with pytest.raises(ValueError, match="2-D"):
        index.search_batch(np.ones((2, 2, 4)))


def test_wrong_types(index):
    with pytest.raises(TypeError, match="k=10"):
        index.search(np.ones(4), k=10.0)
    with pytest.raises(TypeError, match="integer"):
        index.search(np.ones(4), k="10")
    with pytest.raises(TypeError, match="integer"):
        index.search(np.ones(4), ef=1.5)
    with pytest.raises(TypeError, match="integer id, not str"):
        index.get("cat")
    with pytest.raises(TypeError, match="integer id"):
        index.add(np.ones(4), id=1.0)
    with pytest.raises(TypeError, match="integer id, not a bool"):
        index.delete(True)
    with pytest.raises(TypeError, match="integers"):
        index.search(np.ones(4), allowed=["a", "b"])
    with pytest.raises(TypeError, match="integers"):
        index.add_batch(np.ones((2, 4)), ids=np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="numbers"):
        index.add(["a", "b", "c", "d"])
    with pytest.raises(TypeError, match="numbers"):
        index.search("1234")
    with pytest.raises(ValueError, match="3 ids for 2 vectors"):
        index.add_batch(np.ones((2, 4)), ids=[7, 8, 9])
    with pytest.raises(TypeError, match="dimensions"):
        keel.VectorIndex(index.path + "x", 4.0)
    with pytest.raises(TypeError, match="path"):
        keel.VectorIndex(42, 4)


def test_unknown_keywords_suggest_the_right_name(index):
    with pytest.raises(TypeError, match="did you mean ef\\?"):
        index.search(np.ones(4), ef_search=10)
    with pytest.raises(TypeError, match="did you mean k\\?"):
        index.search(np.ones(4), top_k=10)
    with pytest.raises(TypeError, match="did you mean allowed\\?"):
        index.search_batch(np.ones((1, 4)), filter=[1])
    with pytest.raises(TypeError, match="did you mean allowed\\?"):
        index.search(np.ones(4), alowed=[1])
    with pytest.raises(TypeError, match="multiple values"):
        index.search(np.ones(4), 5, k=5)
    with pytest.raises(TypeError, match="missing required argument"):
        index.search(k=5)
    with pytest.raises(TypeError, match="at most"):
        index.search(np.ones(4), 5, 5, None, 1)


def bad_arguments(ix):
    """(call as written, what the message quotes, fn) for each mistake."""
    q = np.ones(4, np.float32)
    return [
        ("search(q, k=1.5)", "float (1.5)", lambda: ix.search(q, k=1.5)),
        ("search(q, k=2.0)", "k=2", lambda: ix.search(q, k=2.0)),
        ("search(q, k=True)", "bool (True)", lambda: ix.search(q, k=True)),
        ("search(q, k=None)", "NoneType (None)",
         lambda: ix.search(q, k=None)),
        ("search(q, k=np.float32(2))", "k=2",
         lambda: ix.search(q, k=np.float32(2))),
        ("search(q, ef='64')", "str ('64')", lambda: ix.search(q, ef="64")),
        ("search_batch(q2, k=2.5)", "float (2.5)",
         lambda: ix.search_batch(q[None], k=2.5)),
        ("get(1.0)", "float (1.0)", lambda: ix.get(1.0)),
        ("get(1.5)", "float (1.5)", lambda: ix.get(1.5)),
        ("get('1')", "str ('1')", lambda: ix.get("1")),
        ("get(True)", "bool (True)", lambda: ix.get(True)),
        ("get(np.True_)", "bool (True)", lambda: ix.get(np.True_)),
        ("get(None)", "NoneType (None)", lambda: ix.get(None)),
        ("delete(1.0)", "float (1.0)", lambda: ix.delete(1.0)),
        ("delete(False)", "bool (False)", lambda: ix.delete(False)),
        ("add(q, id=1.0)", "id=1", lambda: ix.add(q, id=1.0)),
        ("add(q, id=True)", "bool (True)", lambda: ix.add(q, id=True)),
        ("add_batch(ids=floats)", "float64 (such as 7.0)",
         lambda: ix.add_batch(np.ones((2, 4)), ids=np.array([7.0, 8.0]))),
        ("add_batch(ids=bools)", "bool (such as True)",
         lambda: ix.add_batch(np.ones((2, 4)), ids=[True, False])),
        ("add_batch(ids='ab')", "str ('ab')",
         lambda: ix.add_batch(np.ones((2, 4)), ids="ab")),
        ("add_batch(ids=5)", "int (5)",
         lambda: ix.add_batch(np.ones((2, 4)), ids=5)),
        ("search(q, allowed=[[1]])", "list ([[1]])",
         lambda: ix.search(q, allowed=[[1]])),
        ("search(q, allowed=[1.5])", "float64 (such as 1.5)",
         lambda: ix.search(q, allowed=[1.5])),
        ("search(q, allowed=mask)", "np.flatnonzero",
         lambda: ix.search(q, allowed=np.array([True, False]))),
        ("search(None)", "NoneType (None)", lambda: ix.search(None)),
        ("search({})", "dict ({})", lambda: ix.search({})),
        ("search(ragged)", "list ([[1, 2], [3]])",
         lambda: ix.search([[1, 2], [3]])),
        ("search(3-D)", "3-D array", lambda: ix.search(np.ones((1, 1, 4)))),
        ("search_batch(3-D)", "3-D array",
         lambda: ix.search_batch(np.ones((1, 1, 4)))),
        ("search(strings)", "list (['a', 'b'", lambda: ix.search(list("abcd"))),
        ("search(q, 1, 2, 3, 4)", "5 given",
         lambda: ix.search(q, 1, 2, None, 4)),
        ("search(q, 5, k=5)", "'k'", lambda: ix.search(q, 5, k=5)),
        ("search(k=5)", "'query'", lambda: ix.search(k=5)),
        ("search(q, top_k=5)", "'top_k'", lambda: ix.search(q, top_k=5)),
        ("VectorIndex(p, 4.0)", "float (4.0)",
         lambda: keel.VectorIndex(ix.path + "x", 4.0)),
        ("VectorIndex(42, 4)", "int (42)", lambda: keel.VectorIndex(42, 4)),
        ("VectorIndex(p, 4, M=2.5)", "float (2.5)",
         lambda: keel.VectorIndex(ix.path + "x", 4, max_connections=2.5)),
        ("VectorIndex(p, 4, warm='yes')", "str ('yes')",
         lambda: keel.VectorIndex(ix.path + "x", 4, warm="yes")),
        ("VectorIndex(p, 4, options=[1])", "list ([1])",
         lambda: keel.VectorIndex(ix.path + "x", 4, options=[1])),
        ("strerror('1')", "str ('1')", lambda: keel.strerror("1")),
    ]


def test_every_mistake_names_the_value_and_ends_with_help(index):
    quiet = []
    for label, quoted, call in bad_arguments(index):
        try:
            call()
        except (TypeError, ValueError, AttributeError) as e:
            text = str(e)
            lines = text.split("\n")
            if quoted not in text or len(lines) < 2 or \
                    not lines[-1].startswith("help: "):
                quiet.append("%s: %r" % (label, text))
        else:
            quiet.append("%s: no error" % label)
    assert not quiet, "\n".join(quiet)
    assert len(index) == 4


def test_membership_is_that_of_dict_keys(index):
    from decimal import Decimal
    from fractions import Fraction
    keys = dict.fromkeys(range(4))       # the index holds ids 0..3
    for x in (True, False, np.True_, 1, 1.0, np.float32(2), np.int64(3),
              Decimal(2), Fraction(3), complex(1, 0), 4, 3.5, -1, -1.0,
              2**64 - 1, 2**64, 2**70, float("inf"), float("nan"), "1",
              b"1", None, (1,), Decimal("NaN"), complex(1, 1)):
        assert (x in index) == (x in keys), x


def test_messages_speak_python(tmp_path):
    """Library messages reach Python in its own terms: no C calls, no CLI
    commands (issue 14, item 12)."""
    import re
    path = str(tmp_path / "missing.keel")
    with pytest.raises(keel.IndexNotFoundError) as e:
        keel.IndexReader(path)
    assert "keel.VectorIndex(path, dimensions) creates an index" in str(e.value)
    assert not re.search(r"keel_[a-z]+|keel build", str(e.value))
    corrupt = tmp_path / "bad.keel"
    with keel.VectorIndex(str(corrupt), 4) as w:
        w.add_batch(np.ones((3, 4), np.float32))
    data = bytearray(corrupt.read_bytes())
    for off in (100, 65636):
        data[off:off + 28] = b"CORRUPT" * 4
    corrupt.write_bytes(bytes(data))
    with pytest.raises(keel.Error) as e:
        keel.IndexReader(str(corrupt))
    assert "backup()" in str(e.value)
    assert not re.search(r"keel_[a-z]+|keel backup", str(e.value))


def test_batch_ids_backup_and_radius_mistakes_name_their_own_argument(index):
    cases = [
        (lambda: index.get(np.array([1.0])), "get() takes ids", "ids.astype"),
        (lambda: index.delete(np.array([1.0])), "delete() takes ids",
         "ids.astype"),
        (lambda: index.search_radius(np.ones(4), "1"), "radius", "radius="),
        (lambda: index.backup(3), "int (3)", "backup('copy.keel')"),
        (lambda: index.backup(""), '""', "name the file"),
    ]
    for call, named, helped in cases:
        with pytest.raises((TypeError, ValueError, keel.Error)) as e:
            call()
        text = str(e.value)
        assert named in text and "allowed" not in text, text
        assert "keel_" not in text, text
        assert text.split("\n")[-1].startswith("help: ") and helped in text, \
            text
