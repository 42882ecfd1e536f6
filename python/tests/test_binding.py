"""test_binding.py -- the C extension's edges: opening once, locking,
misaligned arrays, messages that are not UTF-8, Ctrl-C during long calls,
dropped changes, fork, and the small rules of its methods."""

import errno
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import keel
from conftest import subprocess_env


def vectors(n, dim, seed=1):
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(
        np.float32)


# --- an object opens once; shapes are checked under its lock ---------------

def test_an_object_opens_once(tmp_path):
    p8, p16 = str(tmp_path / "a.keel"), str(tmp_path / "b.keel")
    index = keel.VectorIndex(p8, 8)
    with pytest.raises(keel.InvalidArgumentError, match="opens once"):
        index.__init__(p16, 16)              # while open
    index.close()
    with pytest.raises(keel.InvalidArgumentError, match="opens once"):
        index.__init__(p16, 16)              # after close
    assert index.closed and index.dimensions == 8
    assert not os.path.exists(p16)


def test_reopening_while_threads_add_never_reads_past_an_array(tmp_path):
    p8, p16 = str(tmp_path / "a.keel"), str(tmp_path / "b.keel")
    index = keel.VectorIndex(p8, 8)
    stop = threading.Event()
    errors = []

    def add():
        while not stop.is_set():
            try:
                index.add(np.ones(8, np.float32))
            except keel.InvalidArgumentError as e:
                if "closed" not in str(e):
                    errors.append(e)

    threads = [threading.Thread(target=add) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.05)
        with warnings.catch_warnings():       # adds since the flush drop
            warnings.simplefilter("ignore", keel.UnflushedWarning)
            index.flush()
            index.close()
        for _ in range(20):
            with pytest.raises(keel.InvalidArgumentError, match="opens once"):
                index.__init__(p16, 16)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert not os.path.exists(p16)
    with keel.IndexReader(p8) as reader:
        assert reader.dimensions == 8


# --- compact lets searches go on -------------------------------------------

def test_searches_run_during_a_compaction(path):
    v = vectors(12000, 32)
    index = keel.VectorIndex(path, 32, threads=2)
    index.add_batch(v)
    index.flush()
    compacting = path + ".compacting"
    done = threading.Event()
    failures = []

    def compact():
        try:
            index.compact()
        except Exception as e:              # pragma: no cover
            failures.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=compact)
    thread.start()
    during = 0
    try:
        # Each search that returns while the compaction's new file still
        # exists ran next to the compaction, not after it.
        while not done.is_set():
            if not os.path.exists(compacting):
                time.sleep(0.001)
                continue
            found, _ = index.search(v[7], k=1)
            assert found[0] == 7
            if os.path.exists(compacting) and not done.is_set():
                during += 1
    finally:
        thread.join()
    assert not failures
    assert during >= 1
    assert index.search(v[7], k=1)[0][0] == 7
    index.close()


# --- misaligned and odd layouts are copied ---------------------------------

def misaligned(a):
    """a's values in a C-contiguous array that is not aligned."""
    raw = bytearray(a.nbytes + 2)
    raw[2:] = a.tobytes()
    out = np.frombuffer(raw, a.dtype, offset=2).reshape(a.shape)
    assert not out.flags.aligned
    return out


def test_misaligned_arrays_are_copied(path, tmp_path):
    v = vectors(20, 4)
    with keel.VectorIndex(path, 4) as index:
        assert index.add(misaligned(v[0])) == 0
        ids = index.add_batch(misaligned(v[1:10]))
        assert list(ids) == list(range(1, 10))
        wanted = np.arange(100, 110, dtype=np.uint64)
        assert list(index.add_batch(misaligned(v[10:20]),
                                    ids=misaligned(wanted))) == list(wanted)
        found, _ = index.search(misaligned(v[3]), k=1)
        assert found[0] == 3
        allowed = misaligned(np.array([5, 105], np.uint64))
        found, _ = index.search(misaligned(v[3]), k=2, allowed=allowed)
        assert set(found) == {5, 105}
        found, _ = index.search_batch(misaligned(v[:3]), k=1,
                                      allowed=misaligned(
                                          np.arange(10, dtype=np.uint64)))
        assert list(found[:, 0]) == [0, 1, 2]
        # A memory-mapped file at an odd offset, and a byte-swapped array.
        mm_path = tmp_path / "vecs.bin"
        mm_path.write_bytes(b"xx" + v.tobytes())
        mm = np.memmap(mm_path, np.float32, "r", offset=2, shape=v.shape)
        try:
            found, _ = index.search_batch(mm[:4], k=1)
            assert list(found[:, 0]) == [0, 1, 2, 3]
            assert index.add(mm[4], id=500) == 500
        finally:
            mm._mmap.close()
        swapped = v[5].astype(">f4")
        assert index.search(swapped, k=1)[0][0] == 5


# --- messages that are not UTF-8 ---------------------------------------------

def test_a_latin1_path_keeps_its_message(tmp_path):
    bad = os.fsencode(str(tmp_path)) + b"/missing/caf\xe9.keel"
    with pytest.raises(keel.IndexNotFoundError) as e:
        keel.IndexReader(bad)
    assert "caf\\xe9.keel" in str(e.value) and e.value.help


def test_a_message_cut_inside_a_character_keeps_its_text(tmp_path):
    # A 2,429-byte path overflows keel's 2,048-byte message buffer.
    for pad in range(4):
        long = str(tmp_path) + "/missing" + "a" * pad + "/" + "\u00e9" * 1200
        with pytest.raises(keel.IndexNotFoundError) as e:
            keel.IndexReader(long)
        assert len(str(e.value)) > 1000 and "\u00e9\u00e9" in str(e.value)


# --- Ctrl-C stops long calls, which then change nothing ----------------------

def interrupt_after(seconds, started):
    """SIGINT to this (the main) thread once `started` is set, plus
    seconds."""
    main = threading.get_ident()

    def send():
        started.wait()
        time.sleep(seconds)
        signal.pthread_kill(main, signal.SIGINT)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_cancels_add_batch(path, sigint_raises):
    v = vectors(60000, 32)
    index = keel.VectorIndex(path, 32, threads=2)
    index.add_batch(v[:100])
    index.flush()
    wanted = np.arange(10**6, 10**6 + 59900, dtype=np.uint64)
    started = threading.Event()
    sender = interrupt_after(0.3, started)
    try:
        started.set()
        with pytest.raises(KeyboardInterrupt):
            index.add_batch(v[100:], ids=wanted)
        sender.join()
    except KeyboardInterrupt:                 # pragma: no cover
        pytest.fail("SIGINT arrived outside add_batch")
    assert len(index) == 100
    assert index._pending() == (0, 0)
    for i in wanted[::997]:
        assert int(i) not in index
    index.close()
    with keel.VectorIndex(path, None) as again:
        assert len(again) == 100


def test_an_add_after_a_cancelled_batch_adds_only_itself(path, sigint_raises):
    v = vectors(30000, 32)
    index = keel.VectorIndex(path, 32, threads=2)
    index.add_batch(v[:100])
    index.flush()
    started = threading.Event()
    sender = interrupt_after(0.2, started)
    started.set()
    with pytest.raises(KeyboardInterrupt):
        index.add_batch(v[100:])
    sender.join()
    new = index.add(v[0])
    index.flush()
    assert len(index) == 101 and new in index
    index.check()
    index.close()


def test_ctrl_c_cancels_compact(path, sigint_raises):
    v = vectors(12000, 32)
    index = keel.VectorIndex(path, 32, threads=2)
    index.add_batch(v)
    for i in range(0, 12000, 3):
        index.delete(i)
    index.flush()
    before = index.stats()
    started = threading.Event()
    sender = interrupt_after(0.1, started)
    started.set()
    with pytest.raises(KeyboardInterrupt):
        index.compact()
    sender.join()
    after = index.stats()
    assert after["deleted"] == before["deleted"] == 4000
    assert after["snapshot"] == before["snapshot"]
    assert not os.path.exists(path + ".compacting")
    assert index.search(v[1], k=1)[0][0] == 1
    index.check()
    index.close()
    with keel.VectorIndex(path, None) as again:
        assert len(again) == 8000
        again.compact()
        assert again.stats()["deleted"] == 0


# --- dropped changes warn ----------------------------------------------------

def test_close_warns_about_dropped_changes(path):
    index = keel.VectorIndex(path, 2)
    index.add_batch(np.eye(2) + 1)
    index.flush()
    index.add_batch(np.ones((3, 2)))
    index.delete(0)
    with pytest.warns(keel.UnflushedWarning, match="dropped 3 adds and 1 delete"):
        index.close()


def test_garbage_collection_warns_about_dropped_changes(path):
    index = keel.VectorIndex(path, 2)
    index.add([1, 2])
    with pytest.warns(keel.UnflushedWarning, match="garbage collection.*1 add"):
        del index
        gc.collect()


def test_no_warning_when_nothing_is_dropped(path, recwarn):
    with keel.VectorIndex(path, 2) as index:
        index.add([1, 2])
    index = keel.VectorIndex(path, 2)
    index.close()
    with pytest.raises(ValueError):
        with keel.VectorIndex(path, 2) as index:   # a failed block rolls back
            index.add([3, 4])
            raise ValueError("boom")
    reader = keel.IndexReader(path)
    del reader
    gc.collect()
    assert not [w for w in recwarn if w.category is keel.UnflushedWarning]


def run_plain(code, tmp_path):
    """Runs code with /usr/bin/python3 as a user would: no -X dev, no -W,
    so only the warnings Python shows by default reach stderr."""
    env = subprocess_env()
    env.pop("PYTHONWARNINGS", None)
    env.pop("PYTHONDEVMODE", None)
    return subprocess.run(["/usr/bin/python3", "-c", textwrap.dedent(code)],
                          cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)


def test_dropped_adds_are_shown_by_default(tmp_path):
    # close() and interpreter exit, without -X dev: a user sees the count.
    r = run_plain("""
        import numpy as np, keel
        a = keel.VectorIndex("a.keel", 4)
        a.add_batch(np.ones((5, 4), np.float32))
        a.close()
        b = keel.VectorIndex("b.keel", 4)
        b.add_batch(np.ones((7, 4), np.float32))
        b.delete(0)
        """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "UnflushedWarning: close() dropped 5 adds not flushed to the " \
        "index at a.keel" in r.stderr, r.stderr
    assert "interpreter exit dropped 7 adds and 1 delete not flushed to " \
        "the index at b.keel" in r.stderr, r.stderr
    assert r.stderr.count("UnflushedWarning") == 2, r.stderr
    assert "help: call flush()" in r.stderr


def test_nothing_dropped_says_nothing(tmp_path):
    r = run_plain("""
        import numpy as np, keel
        a = keel.VectorIndex("a.keel", 4)
        a.add_batch(np.ones((5, 4), np.float32))
        a.flush()
        with keel.VectorIndex("b.keel", 4) as b:
            b.add([1, 2, 3, 4])
        """, tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_publish_says_unflushed_adds_are_not_published(path, monkeypatch):
    # Nothing listens on port 1: the publish itself fails, after the
    # warning that says what it would have left out.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    index = keel.VectorIndex(path, 2)
    index.add_batch(np.ones((3, 2), np.float32))
    with pytest.warns(keel.UnflushedWarning,
                      match="3 adds not flushed are not published"):
        with pytest.raises(keel.Error):
            index.publish("s3://bucket/prefix")
    index.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("error", keel.UnflushedWarning)
        with pytest.raises(keel.Error):     # flushed: no warning
            index.publish("s3://bucket/prefix")
    index.close()


# --- small rules ---------------------------------------------------------------

def test_messages_name_values_as_given(path):
    with keel.VectorIndex(path, 2) as index:
        index.add([1, 2])
        with pytest.raises(keel.InvalidArgumentError,
                           match="k is 18446744073709551616, but has to be "
                                 "at most 1,000,000"):
            index.search([1, 2], k=2**64)
        with pytest.raises(keel.InvalidArgumentError,
                           match="ef is 1099511627776, but has to be at "
                                 "most 100,000"):
            index.search([1, 2], ef=2**40)
        with pytest.raises(keel.InvalidArgumentError,
                           match="k is -18446744073709551616, but has to be "
                                 "at least 1"):
            index.search_batch([[1, 2]], k=-2**64)
        with pytest.raises(keel.InvalidArgumentError,
                           match="ef is 0, but has to be at least 1"):
            index.search([1, 2], ef=0)
        assert index.search([1, 2], ef=None)[0][0] == 0


def test_strerror_of_codes_that_are_not_keels():
    assert keel.strerror(0) == "not an error"
    assert keel.strerror(14) == "cancelled"
    for code in (2**40, -2**40, 2**80, 99, -1):
        assert keel.strerror(code) == "unknown error code"
    with pytest.raises(TypeError):
        keel.strerror("1")


def test_membership_is_that_of_dict_keys_and_closed_raises(path):
    index = keel.VectorIndex(path, 2)
    index.add_batch(np.ones((6, 2)))
    assert 5 in index and 5.0 in index and np.uint8(5) in index
    assert 5.5 not in index and 6 not in index and 6.0 not in index
    assert "x" not in index and -1 not in index and 2**70 not in index
    assert float("nan") not in index and -1.0 not in index
    index.flush()
    index.close()
    for x in (1, "x", -1, 5.0, None):
        with pytest.raises(keel.InvalidArgumentError, match="closed"):
            x in index


def test_index_io_error_carries_errno(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(keel.IndexIOError) as e:
        keel.VectorIndex(f / "x.keel", 4)
    assert e.value.errno == errno.ENOTDIR
    assert e.value.strerror == os.strerror(errno.ENOTDIR)
    assert keel.IndexIOError("no system text\nhelp: x").errno == errno.EIO


# --- fork ----------------------------------------------------------------------

def run_child(child, timeout=20):
    """Runs child() in a forked process; its exit status, or None if it was
    still running after timeout seconds (then it is killed)."""
    pid = os.fork()
    if pid == 0:                                      # pragma: no cover
        code = 1
        try:
            code = child()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_repr_of_a_handle_inherited_through_fork(path):
    index = keel.VectorIndex(path, 2)
    index.add([1, 2])
    index.flush()

    def child():
        text = repr(index)
        index.close()
        return 0 if "fork" in text and path in text else 3

    assert run_child(child) == 0
    assert "len=1" in repr(index)
    index.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_while_a_thread_searches_child_closes(path):
    v = vectors(2000, 16)
    index = keel.VectorIndex(path, 16)
    index.add_batch(v)
    index.flush()
    stop = threading.Event()

    def search():
        while not stop.is_set():
            index.search_batch(v[:50], k=10)

    thread = threading.Thread(target=search)
    thread.start()
    try:
        statuses = []
        for _ in range(5):
            time.sleep(0.01)
            statuses.append(run_child(lambda: (index.close(), 0)[1],
                                      timeout=5))
            if statuses[-1] is None:
                break                       # hung: once is enough
    finally:
        stop.set()
        thread.join()
        index.close()
    assert statuses == [0] * 5


# --- calls on other threads while a long call runs ------------------------
#
# A long add_batch or compact holds keel's write_lock while its cancel
# callback asks for the GIL, so every binding call that may wait on a keel
# lock must release the GIL. A regression hangs the interpreter with the GIL
# held (no Python-level timeout can fire), so these run in a child process
# with a C watchdog (faulthandler) and a timeout.

def run_script(script, timeout=90):
    out = subprocess.run([sys.executable, "-X", "dev", "-c",
                          textwrap.dedent(script)],
                         env=subprocess_env(), capture_output=True,
                         text=True, timeout=timeout)
    return out.returncode, out.stdout, out.stderr


OTHER_CALLS = """
    import faulthandler, os, sys, threading, time
    import numpy as np, keel
    # A deadlock never ends; 44,000 adds take 10-30 s on 2 busy cores.
    faulthandler.dump_traceback_later(120, exit=True)
    ix = keel.VectorIndex(%r, 32, threads=2)
    v = np.random.default_rng(0).random((50000, 32), dtype=np.float32)

    def get(i):
        try:
            ix.get(i)
        except KeyError:
            pass

    # Every call that may wait on a keel lock, each made while the long
    # call runs on another thread.
    CALLS = [ix.stats, ix.check, ix._pending, ix.__len__, ix.flush,
             lambda: 5 in ix, lambda: get(5), lambda: ix.search(v[5], k=1),
             lambda: ix.search_batch(v[:2], k=1), ix.warm, ix.refresh]

    def during(long_call):
        for call in CALLS:
            t = threading.Thread(target=long_call)
            t.start()
            time.sleep(0.1)
            call()
            t.join()

    %s
    ix.close()
    print("ok")
"""


def test_calls_on_another_thread_during_add_batch_do_not_deadlock(path):
    body = """
    batches = iter(range(0, 50000, 4000))
    during(lambda: ix.add_batch(v[next(batches):][:4000]))
    ix.flush()
    assert len(ix) == 4000 * len(CALLS)
    """
    rc, out, err = run_script(OTHER_CALLS % (path, body), timeout=150)
    assert rc == 0 and out == "ok\n", (rc, out, err)


def test_calls_on_another_thread_during_compact_do_not_deadlock(path):
    body = """
    ix.add_batch(v[:12000])
    ix.flush()
    for i in range(0, 12000, 3):
        ix.delete(i)
    ix.flush()
    CALLS[:] = CALLS[:5]
    during(ix.compact)
    assert ix.stats()["deleted"] == 0 and len(ix) == 8000
    """
    rc, out, err = run_script(OTHER_CALLS % (path, body), timeout=150)
    assert rc == 0 and out == "ok\n", (rc, out, err)


# --- a signal handler that uses the index its call is using ----------------

def test_a_signal_handler_using_the_index_of_its_call_raises(path):
    # The handler runs inside add_batch's cancel callback, on the thread
    # that holds the index's locks: using that index there would deadlock,
    # so it raises RuntimeError; raising from the handler cancels the batch.
    script = """
    import faulthandler, signal, sys
    import numpy as np, keel
    faulthandler.dump_traceback_later(30, exit=True)
    ix = keel.VectorIndex(%r, 32, threads=1)
    v = np.random.default_rng(0).random((200000, 32), dtype=np.float32)
    seen = []

    def status(sig, frame):
        seen.append(repr(ix))
        ix.stats()
    signal.signal(signal.SIGALRM, status)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        ix.add_batch(v)
        print("no error", seen)
    except RuntimeError as e:
        print("raised", len(ix), ix._pending(), seen)
        print(str(e))
    # Caught in the handler: the call goes on to its end.
    def caught(sig, frame):
        try:
            len(ix)
        except RuntimeError as e:
            seen.append(str(e))
    signal.signal(signal.SIGALRM, caught)
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    ix.add_batch(v[:20000])
    print("done", len(ix), len(seen), repr(seen[-1]))
    print(ix.stats()["count"])
    ix.flush()
    ix.close()
    """ % path
    rc, out, err = run_script(script)
    assert rc == 0, (rc, out, err)
    lines = out.splitlines()
    assert lines[0] == "raised 0 (0, 0) [\"<keel.VectorIndex %r inside " \
        "add_batch() on this thread>\"]" % path, out
    assert "stats() cannot use the index at %s" % path in lines[1], out
    assert "this thread is inside its add_batch()" in lines[1], out
    assert lines[2].startswith("help: ") and "signal handler" in lines[2]
    assert lines[3].startswith("done 20000 2 ") and "len()" in lines[3], out
    assert lines[4] == "20000"
