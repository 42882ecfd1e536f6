"""test_process.py -- readers next to a writer in another process, and the
rule that a handle opened before fork() may only be closed in the child."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import keel
from conftest import subprocess_env

WRITER = textwrap.dedent("""
    import sys, numpy as np, keel
    path, rounds, step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = np.random.default_rng(1)
    with keel.VectorIndex(path, 16) as index:
        for r in range(rounds):
            index.add_batch(rng.standard_normal((step, 16)).astype("f4"))
            index.flush()
            print(len(index), flush=True)
            if sys.stdin.readline().strip() != "next":
                break
    print("done", flush=True)
""")


def test_reader_follows_a_writer_in_another_process(path):
    rounds, step = 5, 200
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, path, str(rounds), str(step)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=subprocess_env())
    reader = None
    try:
        seen = []
        for r in range(rounds):
            committed = int(child.stdout.readline())
            if reader is None:
                reader = keel.IndexReader(path)
            # The writer still holds the file; a second writer is refused.
            with pytest.raises(keel.IndexLockedError,
                               match="by process %d" % child.pid):
                keel.VectorIndex(path, 16)      # names the writer's process
            reader.refresh()
            assert len(reader) == committed == (r + 1) * step
            ids, _ = reader.search_batch(np.zeros((2, 16)), k=committed + 5)
            assert (ids[:, :committed] < committed).all()
            assert (ids[:, committed:] == 2**64 - 1).all()
            seen.append(len(reader))
            child.stdin.write("next\n")
            child.stdin.flush()
        assert child.stdout.readline().strip() == "done"
        assert seen == sorted(seen)
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0
        child.stdout.close()
        if reader is not None:
            reader.close()


FREE_WRITER = textwrap.dedent("""
    import sys, numpy as np, keel
    rng = np.random.default_rng(2)
    with keel.VectorIndex(sys.argv[1], 8) as index:
        index.add_batch(rng.standard_normal((10, 8)).astype("f4"))
        index.flush()
        print("ready", flush=True)
        for _ in range(150):
            index.add_batch(rng.standard_normal((20, 8)).astype("f4"))
            index.flush()
""")


def test_searches_while_another_process_writes(path):
    child = subprocess.Popen([sys.executable, "-c", FREE_WRITER, path],
                             stdout=subprocess.PIPE, text=True,
                             env=subprocess_env())
    try:
        assert child.stdout.readline().strip() == "ready"
        last = 0
        with keel.IndexReader(path) as reader:
            while child.poll() is None:
                ids, dist = reader.search(np.zeros(8), k=5)
                assert len(ids) == 5 and (np.diff(dist) >= 0).all()
                reader.refresh()
                n = len(reader)
                assert n >= last and (n - 10) % 20 == 0
                last = n
            reader.refresh()
            assert len(reader) == 10 + 150 * 20
    finally:
        assert child.wait(timeout=120) == 0
        child.stdout.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_child_after_fork_may_only_close(path):
    index = keel.VectorIndex(path, 2)
    index.add([1, 2])
    index.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                              # the child
        code = 1
        try:
            try:
                index.search([1, 2])
            except keel.InvalidArgumentError as e:
                if "fork()" in str(e):
                    index.close()
                    code = 0 if index.closed else 1
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    result = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert result == b"\x00"
    # The parent's handle is untouched.
    assert index.search([1, 2], k=1)[0][0] == 0
    index.close()
