"""remote_report.py -- the tables of bench/remote.sh (doc/object_storage_bench.md).

    /usr/bin/python3 bench/remote_report.py OUT

Reads OUT/cold.jsonl, OUT/download.jsonl, OUT/cached.jsonl and OUT/meta.json
and prints markdown: the cold table (medians [min-max] over rounds of ms from
exec to the 1st, 10th and 100th result, ms per query after the 100th, and
what each query fetched), the cached QPS table, and the issue's target
checks. Standard library only (Debian's python3).
"""
import json
import os
import statistics
import sys


def lines(path):
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def med(v):
    v = [x for x in v if x is not None and x >= 0]
    return statistics.median(v) if v else None


def fmt(v, digits=0):
    v = [x for x in v if x is not None and x >= 0]
    if not v:
        return "-"
    f = "%%.%df" % digits
    m = statistics.median(v)
    if len(v) == 1:
        return f % m
    return (f + " [" + f + "-" + f + "]") % (m, min(v), max(v))


def row_name(r):
    if r.get("engine") == "hnswlib":
        return "download + hnswlib"
    lab = r.get("label", "")
    warm = lab.endswith("+warm")
    s = lab[:-5] if warm else lab
    if s == "policy":
        name = "keel, policy (default)"
    elif s == "1":
        name = "keel, serial fetches (max runs 1)"
    elif s.startswith("ahead"):
        name = "keel, policy, look-ahead %s" % s[5:]
    elif s.startswith("beam"):
        name = "keel, policy, beam %s" % s[4:]
    else:
        name = "keel, max runs %s" % s
    return name + (", warm" if warm else "")


def order_key(name):
    keys = ["policy", "serial", "max runs 4", "max runs 16", "download"]
    for i, k in enumerate(keys):
        if k in name:
            return (i, "warm" in name, name)
    return (len(keys), "warm" in name, name)


def delta(r, key, a, b):
    v = r.get(key + "_at")
    if not v or v[a] < 0 or v[b] < 0:
        return None
    return v[b] - v[a]


def per_query(r, key, a, b, nq):
    d = delta(r, key, a, b)
    return None if d is None or nq <= 0 else d / nq


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/out/remote"
    cold = lines(os.path.join(out, "cold.jsonl"))
    dls = lines(os.path.join(out, "download.jsonl"))
    cached = lines(os.path.join(out, "cached.jsonl"))
    meta = {}
    if os.path.exists(os.path.join(out, "meta.json")):
        meta = json.load(open(os.path.join(out, "meta.json")))
    groups = {}
    for r in cold:
        groups.setdefault(row_name(r), []).append(r)
    names = sorted(groups, key=order_key)
    mib = 1 << 20

    p = print
    p("## Cold: a fresh process per round, empty caches")
    p()
    p("GloVe-340k (100-d, L2, M 16, ef_construction 200), ef %s, k 10, one "
      "query per call; %s ms added to every request by the proxy; at most "
      "%s queries per process, none started after %s s. Medians [min-max] "
      "of %s rounds; ms from exec." % (meta.get("ef", "?"),
                                      meta.get("delay_ms", "?"),
                                      meta.get("nq", "?"),
                                      meta.get("max_s", "?"),
                                      meta.get("rounds", "?")))
    p()
    p("| setting | open | 1st | 10th | 100th | ms/query after 100th | queries "
      "(capped) | 1st query: ms | 1st query: GETs | 1st query: round trips | "
      "1st query: MiB | GETs/query, 1-100 | MiB/query, 1-100 |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        rs = groups[name]
        capped = sum(1 for r in rs if r.get("capped"))
        nqs = [r.get("queries", 0) for r in rs]
        q1own = [r["q1_ms"] - r["open_ms"] if r.get("q1_ms", -1) >= 0 else None
                 for r in rs]
        # Search GETs: warm's own are counted apart and left out here.
        g1 = [(delta(r, "gets", 0, 1) or 0) - (delta(r, "warm_gets", 0, 1) or 0)
              if delta(r, "gets", 0, 1) is not None else None for r in rs]
        # Fetches in a row (each one round trip or more): warm's left out.
        t1 = [delta(r, "rounds", 0, 1) for r in rs]
        b1 = [((delta(r, "get_bytes", 0, 1) or 0) -
               (delta(r, "warm_bytes", 0, 1) or 0)) / mib
              if delta(r, "get_bytes", 0, 1) is not None else None for r in rs]
        g100 = [((delta(r, "gets", 0, 3) or 0) -
                 (delta(r, "warm_gets", 0, 3) or 0)) / 100
                if delta(r, "gets", 0, 3) is not None else None for r in rs]
        b100 = [((delta(r, "get_bytes", 0, 3) or 0) -
                 (delta(r, "warm_bytes", 0, 3) or 0)) / 100 / mib
                if delta(r, "get_bytes", 0, 3) is not None else None
                for r in rs]
        p("| %s | %s | %s | %s | %s | %s | %s (%d) | %s | %s | %s | %s | %s | %s |" % (
            name, fmt([r["open_ms"] for r in rs]), fmt([r["q1_ms"] for r in rs]),
            fmt([r["q10_ms"] for r in rs]), fmt([r["q100_ms"] for r in rs]),
            fmt([r.get("after100_ms_per_q") for r in rs], 2),
            fmt(nqs), capped, fmt(q1own, 1 if rs[0].get("engine") == "hnswlib"
                                  else 0), fmt(g1), fmt(t1), fmt(b1, 1),
            fmt(g100, 1),
            fmt(b100, 2)))
    p()
    # Warm's own fetching, and the fault thread's share.
    wrows = [n for n in names if any(delta(r, "warm_gets", 0, 4) for r in
                                    groups[n])]
    if wrows:
        p("Warm's fetching (whole process; ms from exec to its end) and the "
          "fault thread's granules (unannounced reads, one GET each):")
        p()
        p("| setting | warm done | warm GETs | warm MiB | faults, whole "
          "process |")
        p("|---|---|---|---|---|")
        for name in names:
            rs = groups[name]
            if rs[0].get("engine") == "hnswlib":
                continue
            p("| %s | %s | %s | %s | %s |" % (
                name, fmt([r.get("warm_done_ms") for r in rs]),
                fmt([delta(r, "warm_gets", 0, 4) for r in rs]),
                fmt([(delta(r, "warm_bytes", 0, 4) or 0) / mib for r in rs]),
                fmt([delta(r, "faults", 0, 4) for r in rs])))
        p()
    if dls:
        p("The download (s3_object get: %s MiB ranges, %s in flight): %s ms "
          "to the whole file on disk (%s GETs of %.0f MiB)." % (
              meta.get("dl_range_mib", "?"), meta.get("dl_inflight", "?"),
              fmt([d["done_ms"] for d in dls]), dls[0].get("gets"),
              dls[0].get("bytes", 0) / mib))
        p()

    # Cached QPS.
    p("## Cached: the whole index in memory")
    p()
    qps = {}
    rec = {}
    for r in cached:
        lab = r.get("label")
        qps.setdefault(lab, []).append(r["qps"])
        rec.setdefault(lab, []).append(r["recall"])
    if qps:
        p("keel_bench sweep, ef %s, one search thread, %s rounds (a fresh "
          "process each, alternating); the URL reader waited for warm to "
          "finish first." % (meta.get("ef", "?"), meta.get("qps_rounds", "?")))
        p()
        p("| reader | QPS | recall@10 |")
        p("|---|---|---|")
        for lab, name in (("url", "by URL, cache holds the index"),
                          ("local", "the same index as a local file")):
            if lab in qps:
                p("| %s | %s | %s |" % (name, fmt(qps[lab]), fmt(rec[lab], 4)))
        p()

    # Targets.
    p("## Targets")
    p()

    def g(name, key):
        rs = groups.get(name)
        if not rs:
            return None
        if key == "q1own":
            return med([r["q1_ms"] - r["open_ms"] for r in rs
                        if r.get("q1_ms", -1) >= 0])
        return med([r.get(key) for r in rs])

    # met: True, False, or None for a figure shown for reference only.
    checks = []
    pol, ser = "keel, policy (default)", "keel, serial fetches (max runs 1)"
    dl = "download + hnswlib"
    for warm in ("", ", warm"):
        ref = " (for reference)" if warm else ""
        a, b = g(pol + warm, "q1own"), g(ser + warm, "q1own")
        if a is not None and b:
            checks.append(("cold top-10 (the 1st query's own ms), policy / "
                           "serial%s <= 0.25%s" % (warm, ref),
                           "%.0f / %.0f = %.2f" % (a, b, a / b),
                           None if warm else a / b <= 0.25))
        a, b = g(pol + warm, "q1_ms"), g(ser + warm, "q1_ms")
        if a is not None and b:
            checks.append(("1st result from exec, policy / serial%s <= "
                           "0.25%s" % (warm, ref),
                           "%.0f / %.0f = %.2f" % (a, b, a / b),
                           None if warm else a / b <= 0.25))
    d1 = g(dl, "q1_ms")
    if d1:
        for warm in ("", ", warm"):
            a = g(pol + warm, "q1_ms")
            if a is not None:
                checks.append(("keel 1st%s <= download 1st / 3" % warm,
                               "%.0f vs %.0f / 3 = %.0f" % (a, d1, d1 / 3),
                               a <= d1 / 3))
            a = g(pol + warm, "q100_ms")
            if a is not None:
                checks.append(("keel 100th%s < download 1st" % warm,
                               "%.0f vs %.0f" % (a, d1), a < d1))
    if "url" in qps and "local" in qps:
        u, l_ = med(qps["url"]), med(qps["local"])
        checks.append(("cached QPS, URL / local file >= 0.8",
                       "%.0f / %.0f = %.2f" % (u, l_, u / l_), u / l_ >= 0.8))
    p("| target | figures (medians) | met |")
    p("|---|---|---|")
    for what, figs, ok in checks:
        p("| %s | %s | %s |" % (what, figs, "-" if ok is None else
                                "yes" if ok else "**no**"))
    p()
    if meta:
        p("Run: %s s in all; index %.0f MiB (keel), %.0f MiB (hnswlib); %s "
          "cores, Linux %s." % (meta.get("seconds"),
                                meta.get("index_bytes", 0) / mib,
                                meta.get("hnsw_bytes", 0) / mib,
                                meta.get("nproc"), meta.get("kernel")))


if __name__ == "__main__":
    main()
