#!/usr/bin/python3
"""faiss_bench.py -- FAISS's side of the benchmark (bench/run.sh drives it).

FAISS 1.7.3 from Debian's python3-faiss, through its public Python API, with
the subcommands and JSON of bench/keel_bench.c:

  faiss_bench.py build INDEX BASE.fvecs [--metric l2|cosine]
                 [--precision f32|f16] [-M 16] [--efc 200] [--threads T]
  faiss_bench.py sweep INDEX QUERIES.fvecs GT.ivecs [--metric l2|cosine]
                 [--ef LIST] [--rounds R] [--min-time S] [--k 10]
  faiss_bench.py cold INDEX QUERIES.fvecs [--metric l2|cosine] [--ef 64]

build: IndexHNSWFlat(d, M) (f16: IndexHNSWSQ(d, QT_fp16, M), trained on the
  base), hnsw.efConstruction = efc, omp_set_num_threads(T), add, then
  write_index and an fsync. Cosine: base and queries normalized
  (faiss.normalize_L2) and METRIC_INNER_PRODUCT.
sweep: read_index, omp_set_num_threads(1); one query per search() call
  (engine "faiss": this includes the Python call, a few microseconds per
  query), and the whole query set in one call (engine "faiss-batch": the
  loop runs inside FAISS, one thread, so no per-query Python cost). Queries
  are normalized for cosine before timing. Recall, passes and QPS follow
  bench/bench_common.h; distance computations come from
  faiss.cvar.hnsw_stats.n3 (FAISS 1.7.3 counts level 0 there; ndis stays 0).
cold: times from KEEL_BENCH_T0 (set by bench/evict just before exec); they
  include starting Python and importing numpy and faiss, which the JSON also
  gives apart (ready_ms: imports done and queries read).

Run it with Debian's /usr/bin/python3, which has python3-faiss.
"""
import os
import time

T_MAIN = time.clock_gettime_ns(time.CLOCK_MONOTONIC)

import argparse  # noqa: E402  (after the clock: cold start counts imports)
import json  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import faiss  # noqa: E402

DEFAULT_EFS = "16,24,32,48,64,96,128,192,256,384,512"


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def t0_ns():
    s = os.environ.get("KEEL_BENCH_T0", "")
    return int(s) if s else T_MAIN


def load_vecs(path, dtype):
    """An .fvecs / .ivecs file as an (n, width) C-contiguous array."""
    raw = np.fromfile(path, dtype="<i4")
    if raw.size == 0:
        sys.exit("faiss_bench: %s is empty" % path)
    w = int(raw[0])
    if w <= 0 or raw.size % (w + 1):
        sys.exit("faiss_bench: %s is not an .fvecs/.ivecs file" % path)
    rows = raw.reshape(-1, w + 1)
    if (rows[:, 0] != w).any():
        sys.exit("faiss_bench: %s has rows of different widths" % path)
    return np.ascontiguousarray(rows[:, 1:]).view(dtype)


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return -1


def proc_io(field):
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def cpu_s():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def resident(path):
    """(pages of the file in the page cache, pages of the file)."""
    import mmap
    size = os.path.getsize(path)
    page = os.sysconf("SC_PAGE_SIZE")
    total = (size + page - 1) // page
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                              ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_char_p]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED,
                             fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return -1, total
            vec = ctypes.create_string_buffer(total)
            rc = libc.mincore(addr, size, vec)
            libc.munmap(addr, size)
            if rc != 0:
                return -1, total
            return sum(b & 1 for b in vec.raw), total
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        return -1, total


def metric_of(name):
    return faiss.METRIC_INNER_PRODUCT if name == "cosine" else faiss.METRIC_L2


def cmd_build(a):
    x = load_vecs(a.base, "<f4")
    n, d = x.shape
    if os.path.exists(a.index):
        os.unlink(a.index)
    faiss.omp_set_num_threads(a.threads)
    reset_peak()
    base_kb = status_kb("VmRSS:")
    wb0, wc0 = proc_io("write_bytes:"), proc_io("wchar:")
    load0 = loadavg()
    cpu0 = cpu_s()
    t0 = now_ns()
    if a.metric == "cosine":
        faiss.normalize_L2(x)
    if a.precision == "f16":
        index = faiss.IndexHNSWSQ(d, faiss.ScalarQuantizer.QT_fp16, a.M,
                                  metric_of(a.metric))
    else:
        index = faiss.IndexHNSWFlat(d, a.M, metric_of(a.metric))
    index.hnsw.efConstruction = a.efc
    if a.precision == "f16":
        index.train(x)
    index.add(x)
    t1 = now_ns()
    faiss.write_index(index, a.index)
    fd = os.open(a.index, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    t2 = now_ns()
    cpu = cpu_s() - cpu0
    st = os.stat(a.index)
    print(json.dumps({
        "engine": "faiss", "label": a.label, "kind": "build", "n": n,
        "dim": d, "metric": a.metric, "precision": a.precision, "M": a.M,
        "efc": a.efc, "threads": a.threads, "add_s": (t1 - t0) / 1e9,
        "save_s": (t2 - t1) / 1e9, "build_s": (t2 - t0) / 1e9, "cpu_s": cpu,
        "base_rss_kb": base_kb, "peak_rss_kb": status_kb("VmHWM:"),
        "file_bytes": st.st_size, "alloc_bytes": st.st_blocks * 512,
        "write_bytes": proc_io("write_bytes:") - wb0,
        "wchar": proc_io("wchar:") - wc0,
        "max_level": int(index.hnsw.max_level), "load": load0,
        "load_end": loadavg()}), flush=True)


def recall(ids, gt, gtd, k):
    """(with ties, strict) recall@k of an (nq, k) array of result ids."""
    nq = ids.shape[0]
    eq = ids[:, :, None] == gt[:nq, None, :]
    strict = eq[:, :, :k].any(axis=2).sum()
    if gtd is None:
        return strict / (nq * k), strict / (nq * k)
    tie = gtd[:nq] <= gtd[:nq, k - 1:k]
    ties = (eq & tie[:, None, :]).any(axis=2).sum()
    return ties / (nq * k), strict / (nq * k)


def load_gt(path):
    gt = load_vecs(path, "<i4")
    gtd = None
    if path.endswith(".ivecs"):
        dp = path[:-len(".ivecs")] + ".dist.fvecs"
        if os.path.exists(dp):
            gtd = load_vecs(dp, "<f4")
    return gt, gtd


def cmd_sweep(a):
    q = load_vecs(a.queries, "<f4")
    nq = q.shape[0]
    gt, gtd = load_gt(a.gt)
    if a.metric == "cosine":
        faiss.normalize_L2(q)
    efs = [int(e) for e in a.ef.split(",")]
    faiss.omp_set_num_threads(1)
    index = faiss.read_index(a.index)
    hnsw = index.hnsw
    rows = [q[i:i + 1] for i in range(nq)]
    ids = np.empty((nq, a.k), dtype=np.int64)
    k = a.k
    hnsw.efSearch = max([e for e in efs if e <= 256] or efs[:1])
    for r in rows:
        index.search(r, k)
    for rnd in range(a.rounds):
        for ef in efs:
            hnsw.efSearch = ef
            # One query per call.
            load = loadavg()
            ndis0 = faiss.cvar.hnsw_stats.n3  # n3: level-0 distances
            passes = 0
            t0 = t = now_ns()
            while True:
                if passes == 0:
                    for i, r in enumerate(rows):
                        ids[i] = index.search(r, k)[1][0]
                    ndist = (faiss.cvar.hnsw_stats.n3 - ndis0) / nq
                else:
                    for r in rows:
                        index.search(r, k)
                passes += 1
                t = now_ns()
                if t - t0 >= a.min_time * 1e9:
                    break
            rec, strict = recall(ids, gt, gtd, k)
            emit(a, "faiss", rnd, ef, nq, passes, t - t0, rec, strict, ndist,
                 load)
            # The whole set in one call.
            load = loadavg()
            passes = 0
            t0 = t = now_ns()
            while True:
                bids = index.search(q, k)[1]
                passes += 1
                t = now_ns()
                if t - t0 >= a.min_time * 1e9:
                    break
            rec, strict = recall(bids, gt, gtd, k)
            emit(a, "faiss-batch", rnd, ef, nq, passes, t - t0, rec, strict,
                 ndist, load)


def emit(a, engine, rnd, ef, nq, passes, ns, rec, strict, ndist, load):
    secs = ns / 1e9
    print(json.dumps({
        "engine": engine, "label": a.label, "kind": "sweep", "round": rnd,
        "ef": ef, "k": a.k, "queries": nq, "passes": passes,
        "seconds": secs, "qps": nq * passes / secs, "recall": float(rec),
        "recall_strict": float(strict), "ndist": float(ndist),
        "load": load}), flush=True)


def cmd_cold(a):
    t0 = t0_ns()
    main_ms = (T_MAIN - t0) / 1e6
    q = load_vecs(a.queries, "<f4")
    if a.metric == "cosine":
        faiss.normalize_L2(q)
    faiss.omp_set_num_threads(1)
    ready_ms = (now_ns() - t0) / 1e6
    index = faiss.read_index(a.index)
    open_ms = (now_ns() - t0) / 1e6
    index.hnsw.efSearch = int(a.ef.split(",")[0])
    marks = {1: "q1_ms", 10: "q10_ms", 100: "q100_ms", 1000: "q1000_ms"}
    out = {v: -1.0 for v in marks.values()}
    for i in range(min(len(q), 1000)):
        index.search(q[i:i + 1], a.k)
        if i + 1 in marks:
            out[marks[i + 1]] = (now_ns() - t0) / 1e6
    res, total = resident(a.index)
    rec = {"engine": "faiss", "label": a.label, "kind": "cold",
           "ef": index.hnsw.efSearch, "main_ms": main_ms,
           "ready_ms": ready_ms, "open_ms": open_ms}
    rec.update(out)
    rec.update({"resident_pages": res, "file_pages": total,
                "rss_kb": status_kb("VmRSS:"),
                "peak_rss_kb": resource.getrusage(
                    resource.RUSAGE_SELF).ru_maxrss,
                "load": loadavg()})
    print(json.dumps(rec), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cmd", choices=["build", "sweep", "cold"])
    p.add_argument("index")
    p.add_argument("files", nargs="+")
    p.add_argument("--metric", default="l2", choices=["l2", "cosine"])
    p.add_argument("--precision", default="f32", choices=["f32", "f16"])
    p.add_argument("-M", type=int, default=16)
    p.add_argument("--efc", type=int, default=200)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--ef", default=None)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--label", default="")
    a = p.parse_args()
    if a.cmd == "build":
        if len(a.files) != 1:
            p.error("build takes INDEX BASE.fvecs")
        a.base = a.files[0]
        cmd_build(a)
    elif a.cmd == "sweep":
        if len(a.files) != 2:
            p.error("sweep takes INDEX QUERIES.fvecs GT.ivecs")
        a.queries, a.gt = a.files
        a.ef = a.ef or DEFAULT_EFS
        cmd_sweep(a)
    else:
        if len(a.files) != 1:
            p.error("cold takes INDEX QUERIES.fvecs")
        a.queries = a.files[0]
        a.ef = a.ef or "64"
        cmd_cold(a)


if __name__ == "__main__":
    main()
