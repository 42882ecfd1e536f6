"""test_objstore.py -- VectorIndex.publish(url) and IndexReader("s3://...").

Needs an S3-compatible server: `make test-objstore` starts one and runs
this file with its AWS_* variables and KEEL_TEST_BUCKET; without them the
tests are skipped.
"""

import os
import signal
import threading
import time

import numpy as np
import pytest

import keel

BUCKET = os.environ.get("KEEL_TEST_BUCKET")
# The tests compare a URL's answers with the file's bit for bit: that holds
# for the walk of one expansion at a time (a cold walk's beam may answer
# otherwise, with recall not lower: doc/batch_reads.md). Read once, at the
# first cold search.
os.environ["KEEL_BATCH_READS_BEAM"] = "1"
pytestmark = pytest.mark.skipif(
    not BUCKET, reason="no object store: make test-objstore starts one")


def url(name):
    return "s3://%s/test-python/%d/%s" % (BUCKET, os.getpid(), name)


def test_a_published_index_searches_like_the_file(tmp_path):
    rng = np.random.default_rng(3)
    vecs = rng.standard_normal((2000, 24)).astype(np.float32)
    u = url("search")
    with keel.VectorIndex(str(tmp_path / "i.keel"), 24) as w:
        w.add_batch(vecs)
        w.flush()
        sent = w.publish(u)
        assert sent > 0
        os.environ["KEEL_CACHE_DIR"] = str(tmp_path / "cache")
        try:
            r = keel.IndexReader(u)
        finally:
            del os.environ["KEEL_CACHE_DIR"]
        with r:
            assert len(r) == 2000
            q = rng.standard_normal((20, 24)).astype(np.float32)
            for x in q:
                a_ids, a_d = w.search(x, 10)
                b_ids, b_d = r.search(x, 10)
                assert np.array_equal(a_ids, b_ids)
                assert np.array_equal(a_d.view(np.uint32), b_d.view(np.uint32))
            assert np.array_equal(r.get(7), w.get(7))
            r.check()
            with pytest.raises(keel.ReadOnlyError):
                r.add(vecs[0])
        assert os.listdir(tmp_path / "cache")


def test_a_url_with_no_index_is_not_found():
    # the same class from each call on a URL: no index there, not no id
    for call in (keel.IndexReader, keel.versions, keel.prune):
        with pytest.raises(keel.IndexNotFoundError,
                           match="no index is published"):
            call(url("nothing-here"))
        with pytest.raises(FileNotFoundError):
            call(url("nothing-here"))


def test_prune_keeps_the_newest_versions(tmp_path):
    rng = np.random.default_rng(5)
    vecs = rng.standard_normal((1500, 16)).astype(np.float32)
    u = url("prune")
    with keel.VectorIndex(str(tmp_path / "p.keel"), 16) as w:
        w.add_batch(vecs)
        w.flush()
        for i in range(3):
            w.publish(u)
            w.delete(i)
            w.flush()
        w.publish(u)
        assert keel.prune(u, keep=1) > 0
        assert keel.prune(u, keep=1) == 0
        with keel.IndexReader(u) as r:
            assert len(r) == len(w) == 1497
            ids_a, _ = r.search(vecs[10], 5)
            ids_b, _ = w.search(vecs[10], 5)
            assert np.array_equal(ids_a, ids_b)
    with pytest.raises(ValueError, match="keep"):
        keel.prune(u, keep=0)


def test_an_unchanged_publish_makes_no_version(tmp_path):
    rng = np.random.default_rng(6)
    u = url("unchanged")
    with keel.VectorIndex(str(tmp_path / "u.keel"), 8) as w:
        w.add_batch(rng.standard_normal((300, 8)).astype(np.float32))
        w.flush()
        first = w.publish(u)
        assert first > 0 and first.version == 1 and first.unchanged is False
        again = w.publish(u)
        assert again == 0 and again.version == 1 and again.unchanged is True
        assert "unchanged=True" in repr(again)
        assert [v["version"] for v in keel.versions(u)] == [1]
        w.delete(3)
        w.flush()
        changed = w.publish(u)
        assert changed > 0 and changed.version == 2 and not changed.unchanged


def test_versions_and_the_version_a_reader_serves(tmp_path):
    rng = np.random.default_rng(7)
    u = url("versions")
    with pytest.raises(keel.NotFoundError, match="no index is published"):
        keel.versions(u)
    with pytest.raises(keel.InvalidArgumentError, match="'notaurl'"):
        keel.versions("notaurl")
    with pytest.raises(TypeError, match="help:"):
        keel.versions(b"s3://x/y")
    with keel.VectorIndex(str(tmp_path / "v.keel"), 8) as w:
        for i in range(3):
            w.add_batch(rng.standard_normal((100, 8)).astype(np.float32))
            w.flush()
            w.publish(u)
        got = keel.versions(u)
        assert [v["version"] for v in got] == [1, 2, 3]
        assert [v["newest"] for v in got] == [False, False, True]
        assert [v["latest_hint"] for v in got] == [False, False, True]
        for v in got:
            assert v["manifest_bytes"] > 64
            age = time.time() - v["last_modified"].timestamp()
            assert -60 < age < 60 and v["last_modified"].tzinfo is not None
        with keel.IndexReader(u) as r:
            assert r.published_version == 3
            w.add_batch(rng.standard_normal((100, 8)).astype(np.float32))
            w.flush()
            w.publish(u)
            r.refresh()
            assert r.published_version == 4
        with keel.IndexReader(str(tmp_path / "v.keel")) as f:
            assert f.published_version is None
        keel.prune(u, keep=1)
        assert [(v["version"], v["newest"]) for v in keel.versions(u)] == \
            [(4, True)]


# --- the page cache's options ------------------------------------------------

def publish(tmp_path, name, n, dim, seed):
    """A flushed writer of n random vectors (closed by the caller), its
    vectors, and the URL it was published to."""
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    u = url(name)
    w = keel.VectorIndex(str(tmp_path / (name + ".keel")), dim, threads=2)
    w.add_batch(vecs)
    w.flush()
    w.publish(u)
    return w, vecs, u


def same_answers(w, r, queries, k=10):
    for x in queries:
        a_ids, a_d = w.search(x, k)
        b_ids, b_d = r.search(x, k)
        assert np.array_equal(a_ids, b_ids)
        assert np.array_equal(a_d.view(np.uint32), b_d.view(np.uint32))


def page_files(d):
    """The disk cache's page files in d (named by their hash)."""
    if not os.path.isdir(d):
        return []
    return [f for f in os.listdir(d)
            if len(f) == 32 and all(c in "0123456789abcdef" for c in f)]


def test_cache_dir_holds_the_pages_and_a_second_reader_gets_none(
        tmp_path, monkeypatch, slow_proxy):
    w, vecs, u = publish(tmp_path, "cachedir", 3000, 24, 11)
    env_dir, own = tmp_path / "env-cache", tmp_path / "own-cache"
    monkeypatch.setenv("KEEL_CACHE_DIR", str(env_dir))
    monkeypatch.setenv("AWS_ENDPOINT_URL", slow_proxy.url)
    q = np.random.default_rng(12).standard_normal((20, 24)).astype(np.float32)
    with w:
        with keel.IndexReader(u, cache_dir=own) as r:   # a PathLike
            same_answers(w, r, q)
            first = slow_proxy.pack_gets()
            assert first > 0
        # Closed: its disk writer, which works beside its fetches, wrote
        # every page it had queued.
        assert page_files(own)
        assert not page_files(env_dir)    # the option wins over the variable
        # A second reader with the same directory: every page from disk.
        with keel.IndexReader(u, keel.IndexOptions(cache_dir=str(own))) as r2:
            same_answers(w, r2, q)
            assert slow_proxy.pack_gets() == first
    assert not page_files(env_dir)


def test_cache_bytes_bounds_the_disk_cache(tmp_path, monkeypatch):
    w, vecs, u = publish(tmp_path, "cachebytes", 6000, 32, 13)
    d = tmp_path / "small-cache"
    monkeypatch.setenv("KEEL_CACHE_BYTES", "10G")
    page = 1 << 16
    q = np.random.default_rng(14).standard_normal((30, 32)).astype(np.float32)
    with w:
        assert w.stats()["file_bytes"] > 8 * page
        with keel.IndexReader(u, cache_dir=str(d),
                              cache_bytes=4 * page) as r:
            same_answers(w, r, q)
    # The disk cache's writer works beside the reader's fetches and may
    # still be writing and evicting until the reader closes, which writes
    # what it has queued: the directory is looked at after that.
    files = page_files(d)
    assert 0 < len(files) <= 4
    assert sum(os.path.getsize(d / f) for f in files) <= 4 * page


def test_a_small_memory_cache_gives_the_same_answers(tmp_path, monkeypatch):
    w, vecs, u = publish(tmp_path, "smallmem", 48000, 64, 15)
    monkeypatch.setenv("KEEL_MEMORY_CACHE_BYTES", "1G")
    least = 8 << 20                       # memory_cache_bytes is raised to it
    # Few queries: under a bound this far below the index each one
    # fetches much of it again (about 0.7 s here).
    q = np.random.default_rng(16).standard_normal((5, 64)).astype(np.float32)
    every = w.ids()
    assert every.size * 64 * 4 > least + (2 << 20)   # the vectors alone
    with w:
        # With the variable's 1 GiB, reading every vector keeps them all.
        with keel.IndexReader(u) as big:
            assert np.array_equal(big.get(every), w.get(every))
            assert big.stats()["allocated_bytes"] > least + (2 << 20)
        opts = keel.IndexOptions(memory_cache_bytes=1 << 20)
        with keel.IndexReader(u, opts) as r:
            assert r.options.memory_cache_bytes == 1 << 20
            assert np.array_equal(r.get(every), w.get(every))
            same_answers(w, r, q)
            ids, dists = r.search_batch(q, 10)
            for i, x in enumerate(q):
                assert np.array_equal(ids[i], w.search(x, 10)[0])
            # The option, not the variable: the image stays within it.
            assert r.stats()["allocated_bytes"] <= least + (1 << 20)


# --- Ctrl-C during a slow cold search ------------------------------------------

def interrupt_after(seconds, sent):
    """SIGINT to this (the main) thread after seconds; the time it went
    into sent[0]."""
    main = threading.get_ident()

    def send():
        time.sleep(seconds)
        sent.append(time.monotonic())
        signal.pthread_kill(main, signal.SIGINT)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


DELAY = 0.3          # seconds the proxy holds each request


@pytest.mark.parametrize("batch", [False, True])
def test_ctrl_c_stops_a_slow_cold_search(tmp_path, monkeypatch, slow_proxy,
                                         sigint_raises, batch):
    w, vecs, u = publish(tmp_path, "ctrlc%d" % batch, 20000, 32, 17)
    q = np.random.default_rng(18).standard_normal((64, 32)).astype(np.float32)
    monkeypatch.setenv("AWS_ENDPOINT_URL", slow_proxy.url)
    with w, keel.IndexReader(u, threads=2) as r:
        slow_proxy.delay = DELAY
        sent = []
        sender = interrupt_after(0.7, sent)
        t0 = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                if batch:
                    r.search_batch(q, 10)
                else:
                    r.search(q[0], 10)
            done = time.monotonic()
            sender.join()
        except KeyboardInterrupt:                 # pragma: no cover
            pytest.fail("SIGINT arrived outside the search")
        late = done - sent[0]
        print("search%s: KeyboardInterrupt %.0f ms after SIGINT (%.0f ms "
              "in all)" % ("_batch" if batch else "", late * 1000,
                          (done - t0) * 1000))
        # One poll slice (0.05 s) plus one request in flight, and room.
        assert late < 0.05 + DELAY + 0.35, late
        # The reader goes on, with the right answers.
        slow_proxy.delay = 0
        same_answers(w, r, q[:20])
        ids, dists = r.search_batch(q, 10)
        for i in range(0, 64, 7):
            a_ids, a_d = w.search(q[i], 10)
            assert np.array_equal(ids[i], a_ids)
            assert np.array_equal(dists[i], a_d)
        r.check()


def test_a_handler_cannot_use_the_reader_its_search_holds(
        tmp_path, monkeypatch, slow_proxy):
    w, vecs, u = publish(tmp_path, "handler", 20000, 32, 19)
    monkeypatch.setenv("AWS_ENDPOINT_URL", slow_proxy.url)
    seen = []
    with w, keel.IndexReader(u) as r:

        def handler(signum, frame):
            seen.append(r._busy)
            with pytest.raises(RuntimeError, match="inside its search()"):
                len(r)
            raise KeyboardInterrupt

        old = signal.signal(signal.SIGINT, handler)
        try:
            slow_proxy.delay = DELAY
            sent = []
            sender = interrupt_after(0.5, sent)
            with pytest.raises(KeyboardInterrupt):
                r.search(vecs[3], 10)
            sender.join()
        finally:
            signal.signal(signal.SIGINT, old)
        slow_proxy.delay = 0
        assert seen == ["search"]
        assert r._busy is None
        assert r.search(vecs[3], 1)[0][0] == 3


def test_a_replace_publish_leaves_readers_at_their_dimensions(tmp_path):
    # Another index over a prefix is refused unless replace=True; a reader
    # of the first keeps its version and its 4 dimensions after refresh().
    rng = np.random.default_rng(11)
    small = rng.standard_normal((300, 4)).astype(np.float32)
    big = rng.standard_normal((200, 64)).astype(np.float32)
    u = url("replace")
    with keel.VectorIndex(str(tmp_path / "a.keel"), 4) as a, \
            keel.VectorIndex(str(tmp_path / "b.keel"), 64) as b:
        a.add_batch(small)
        a.flush()
        a.publish(u)
        b.add_batch(big)
        b.flush()
        with keel.IndexReader(u) as r:
            assert r.dimensions == 4
            with pytest.raises(keel.DimensionMismatchError,
                               match="another index"):
                b.publish(u)
            assert b.publish(u, replace=True) > 0
            for _ in range(2):
                with pytest.raises(keel.DimensionMismatchError,
                                   match="another index"):
                    r.refresh()
                assert r.dimensions == 4
                assert len(r) == 300
                ids, dist = r.search(small[5], 3)
                assert ids[0] == 5 and dist[0] == 0
                assert np.array_equal(r.get(7), small[7])
        with keel.IndexReader(u) as r2:
            assert r2.dimensions == 64
            assert len(r2) == 200
            assert np.array_equal(r2.get(7), big[7])
