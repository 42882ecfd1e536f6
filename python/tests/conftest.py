"""conftest.py -- shared fixtures for the keel Python tests.

Run from the repository root after `make python`:
    /usr/bin/python3 -m pytest -q python/tests
The in-place build in python/ is imported ahead of any installed keel.
"""

import os
import signal
import socket
import sys
import threading
import urllib.parse

import numpy as np
import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(PYTHON_DIR)
DATA = os.path.join(ROOT, "test", "data")
sys.path.insert(0, PYTHON_DIR)

import keel  # noqa: E402


def read_vecs(path, dtype):
    """Rows of an .fvecs / .ivecs file (int32 length, then the values)."""
    raw = np.fromfile(path, dtype=np.int32)
    dim = int(raw[0])
    return raw.reshape(-1, dim + 1)[:, 1:].copy().view(dtype)


@pytest.fixture(scope="session")
def glove():
    """The GloVe 10k slice: (base, queries, gt_l2, gt_cos)."""
    name = os.path.join(DATA, "glove-100-10k")
    if not os.path.exists(name + ".base.fvecs"):
        pytest.skip("test/data/glove-100-10k.* is missing")
    return (read_vecs(name + ".base.fvecs", np.float32),
            read_vecs(name + ".query.fvecs", np.float32),
            read_vecs(name + ".gt.l2.ivecs", np.int32),
            read_vecs(name + ".gt.cos.ivecs", np.int32))


@pytest.fixture(scope="session")
def glove_index(tmp_path_factory, glove):
    """A flushed L2 writer holding the GloVe base vectors (ids 0..9999)."""
    path = tmp_path_factory.mktemp("glove") / "glove.keel"
    index = keel.VectorIndex(path, 100)
    index.add_batch(glove[0])
    index.flush()
    yield index
    index.close()


@pytest.fixture
def path(tmp_path):
    """A path for a new index."""
    return str(tmp_path / "test.keel")


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def subprocess_env():
    """Environment for child interpreters that import this keel."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    return env


class SlowProxy:
    """A forwarding proxy in front of the tests' S3 server that holds each
    request `delay` seconds before passing it on, as a distant server
    would, and notes every request (method, path, whether ranged).

    Enough for readers of published indexes, whose requests are GETs and
    HEADs: heads without bodies, so each request ends at its blank line.
    Every connection has its own threads, so requests on several
    connections are held at the same time (a latency, not a queue).
    """

    def __init__(self, upstream):
        u = urllib.parse.urlsplit(upstream)
        self._upstream = (u.hostname, u.port or 80)
        self.delay = 0.0
        self.requests = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._socks = set()
        self._threads = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.url = "http://127.0.0.1:%d" % self._listener.getsockname()[1]
        self._start(self._accept)

    def _start(self, target, *args):
        t = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(t)
        t.start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                server = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks.update((client, server))
            self._start(self._to_server, client, server)

    def _cut(self, *socks):
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _to_client(self, server, client):
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        self._cut(client, server)

    def _to_server(self, client, server):
        back = threading.Thread(target=self._to_client,
                                args=(server, client), daemon=True)
        back.start()
        buf = b""
        try:
            while not self._stop.is_set():
                data = client.recv(65536)
                if not data:
                    break
                buf += data
                while True:
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    head, buf = buf[:end + 4], buf[end + 4:]
                    line = head.split(b"\r\n", 1)[0].split()
                    with self._lock:
                        self.requests.append(
                            (line[0].decode(), line[1].decode(),
                             b"\r\nrange:" in head.lower()))
                    if self.delay and self._stop.wait(self.delay):
                        break
                    server.sendall(head)
        except OSError:
            pass
        self._cut(client, server)
        back.join()
        with self._lock:
            self._socks.difference_update((client, server))
        client.close()
        server.close()

    def pack_gets(self):
        """Ranged GETs of pack objects so far (page fetches)."""
        with self._lock:
            return sum(1 for m, path, ranged in self.requests
                       if m == "GET" and "/pack/" in path and ranged)

    def stop(self):
        self._stop.set()
        self._listener.close()
        with self._lock:
            socks = list(self._socks)
        self._cut(*socks)
        while True:
            with self._lock:
                threads = [t for t in self._threads if t.is_alive()]
            if not threads:
                break
            for t in threads:
                t.join()


@pytest.fixture
def slow_proxy():
    """A SlowProxy in front of AWS_ENDPOINT_URL (make test-objstore's
    gateway); skipped without one."""
    upstream = os.environ.get("AWS_ENDPOINT_URL")
    if not upstream or not os.environ.get("KEEL_TEST_BUCKET"):
        pytest.skip("no object store: make test-objstore starts one")
    proxy = SlowProxy(upstream)
    yield proxy
    proxy.stop()


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt for the test (pytest's own handler
    may be in place), whatever handler was there before."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
