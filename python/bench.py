"""bench.py -- per-call overhead of the keel binding, and search_batch QPS
against a Python loop of single searches on the GloVe 10k slice.

    /usr/bin/python3 python/bench.py            (after make python)

Per-call overhead: a 1-vector search (k=1) on a tiny index in a Python loop,
minus what keel itself spends per query (the same query searched by one
search_batch call, divided by the batch size).
"""

import os
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import keel  # noqa: E402

DATA = os.path.join(os.path.dirname(HERE), "test", "data", "glove-100-10k")


def read_fvecs(path):
    raw = np.fromfile(path, dtype=np.int32)
    return raw.reshape(-1, raw[0] + 1)[:, 1:].copy().view(np.float32)


def best(fn, repeat=5):
    """The fastest of repeat runs of fn(), in seconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def overhead(tmp):
    print("== per-call overhead (tiny index: 1 vector of 8 floats, k=1) ==")
    n = 200_000
    with keel.VectorIndex(os.path.join(tmp, "tiny.keel"), 8) as ix:
        ix.add(np.ones(8, np.float32))
        q = np.ones(8, np.float32)
        q64 = np.ones(8)
        ql = [1.0] * 8
        qs = np.tile(q, (n, 1))
        search = ix.search

        def loop(query):
            def run():
                for _ in range(n):
                    search(query)
            return run

        def loop_len():
            for _ in range(n):
                len(ix)

        def empty_loop():
            for _ in range(n):
                pass

        t_empty = best(empty_loop) / n
        t_f32 = best(loop(q)) / n - t_empty
        t_f64 = best(loop(q64)) / n - t_empty
        t_list = best(loop(ql), 3) / n - t_empty
        t_len = best(loop_len) / n - t_empty
        t_batch = best(lambda: ix.search_batch(qs, k=1)) / n
        print("search(float32 query) %.2f us/call" % (t_f32 * 1e6))
        print("search(float64 query) %.2f us/call (converted)"
              % (t_f64 * 1e6))
        print("search(list query)    %.2f us/call (converted)"
              % (t_list * 1e6))
        print("len(index)            %.2f us/call" % (t_len * 1e6))
        print("keel per query (search_batch of %d) %.2f us" % (n,
                                                              t_batch * 1e6))
        print("=> binding overhead per search call: %.2f us"
              % ((t_f32 - t_batch) * 1e6))


def glove_qps(tmp):
    print("== GloVe 10k (100 dims, L2, M 16, ef 64, k 10) ==")
    base = read_fvecs(DATA + ".base.fvecs")
    queries = read_fvecs(DATA + ".query.fvecs")
    queries = np.tile(queries, (20, 1))          # 2000 queries
    n = len(queries)
    with keel.VectorIndex(os.path.join(tmp, "glove.keel"), 100) as ix:
        t = time.perf_counter()
        ix.add_batch(base)
        ix.flush()
        print("add_batch 10k: %.2f s" % (time.perf_counter() - t))

        def loop():
            for q in queries:
                ix.search(q, k=10)

        def batch():
            ix.search_batch(queries, k=10)

        def threaded(nthreads):
            parts = np.array_split(queries, nthreads)

            def run():
                ts = [threading.Thread(target=lambda p=p: [ix.search(q, k=10)
                                                          for q in p])
                      for p in parts]
                for th in ts:
                    th.start()
                for th in ts:
                    th.join()
            return run

        def threaded_batch(nthreads):
            parts = np.array_split(queries, nthreads)

            def run():
                ts = [threading.Thread(target=ix.search_batch, args=(p, 10))
                      for p in parts]
                for th in ts:
                    th.start()
                for th in ts:
                    th.join()
            return run

        t_loop = best(loop)
        t_batch = best(batch)
        t_thr = best(threaded(2))
        t_thr_b = best(threaded_batch(2))
        print("loop of search():          %7.0f QPS (%.1f us/query)"
              % (n / t_loop, t_loop / n * 1e6))
        print("search_batch():            %7.0f QPS (%.1f us/query)"
              % (n / t_batch, t_batch / n * 1e6))
        print("search() in 2 threads:     %7.0f QPS" % (n / t_thr))
        print("search_batch() in 2 threads: %5.0f QPS" % (n / t_thr_b))
        print("=> search_batch / loop: %.2fx" % (t_loop / t_batch))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        overhead(tmp)
        if os.path.exists(DATA + ".base.fvecs"):
            glove_qps(tmp)


if __name__ == "__main__":
    main()
