#!/usr/bin/python3
"""sqlite.py -- keel through SQL (build/keel_sqlite.so) against keel's Python
API on the same index file, and against sqlite-vec (a brute-force vec0
table; fetched from the npm registry into the output folder for this bench
only, never a dependency of keel), on GloVe-100 at k 10.

    /usr/bin/python3 bench/sqlite.py [--data test/data/glove-100-10k]
        [--ext build/keel_sqlite.so] [--out bench/out/sqlite]
        [--efs 16,32,64,128] [--rounds 5] [--no-vec]

Rows: QPS (one thread, queries one at a time, in the process's CPU time,
the best of --rounds passes over the query set with the engines taking
turns; SQL statements each in their own transaction, as autocommit runs
them, and all in one read transaction), recall@10 against the data's exact ground truth
(L2), insert time (one transaction), and bytes on disk (the database plus
the index file). keel's SQL and API rows search the same file with the same
ef, so their recall is equal by construction and their QPS ratio is the SQL
layer's cost. Writes report.md in --out.
"""

import argparse
import os
import sqlite3
import subprocess
import sys
import time

import numpy as np

from vecs import ROOT, read_vecs, recall

import keel  # noqa: E402  (vecs puts python/ on the path)


def connect(db, ext):
    conn = sqlite3.connect(db, isolation_level=None)
    conn.enable_load_extension(True)
    conn.load_extension(ext)
    return conn


def timed_passes(engines, queries, rounds):
    """engines: {name: fn(query) -> ids}. Runs rounds passes over the
    queries, the engines taking turns within each round (so that a load on
    the machine falls on all alike), each pass timed in the process's CPU
    time (searches run on the calling thread). Returns {name: (best QPS,
    the last pass's results)}."""
    best = {name: 0.0 for name in engines}
    results = {}
    for _ in range(rounds):
        for name, fn in engines.items():
            t0 = time.process_time()
            results[name] = [fn(q) for q in queries]
            dt = max(time.process_time() - t0, 1e-9)
            best[name] = max(best[name], len(queries) / dt)
    return {name: (best[name], results[name]) for name in engines}


def sqlite_vec_ext(out):
    """vec0.so from the npm package sqlite-vec-linux-x64 (bench only)."""
    pkg = os.path.join(out, "sqlite-vec")
    so = os.path.join(pkg, "package", "vec0.so")
    if os.path.exists(so):
        return so[:-3]
    os.makedirs(pkg, exist_ok=True)
    try:
        name = subprocess.run(["npm", "pack", "sqlite-vec-linux-x64"],
                              cwd=pkg, capture_output=True, text=True,
                              check=True, timeout=300).stdout.split()[-1]
        subprocess.run(["tar", "xzf", name], cwd=pkg, check=True)
    except (OSError, subprocess.SubprocessError) as e:
        print("sqlite-vec: not available (%s); its rows are left out" % e,
              file=sys.stderr)
        return None
    return so[:-3]


def filter_langs(n):
    """A language per row, 10% of them 'en' (seeded)."""
    rng = np.random.default_rng(7)
    return rng.choice(["en", "de", "fr", "es", "it"], size=n,
                      p=[0.1, 0.3, 0.2, 0.2, 0.2])


def make_docs(conn, langs):
    conn.execute("DROP TABLE IF EXISTS docs")
    conn.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, lang TEXT)")
    conn.execute("CREATE INDEX docs_lang ON docs(lang)")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO docs VALUES (?, ?)",
                     ((i, str(l)) for i, l in enumerate(langs)))
    conn.execute("COMMIT")


def size(*paths):
    return sum(os.path.getsize(p) for p in paths if os.path.exists(p))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "test", "data",
                                                   "glove-100-10k"))
    ap.add_argument("--ext", default=os.path.join(ROOT, "build",
                                                  "keel_sqlite.so"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out",
                                                  "sqlite"))
    ap.add_argument("--efs", default="16,32,64,128")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-vec", action="store_true")
    a = ap.parse_args()
    base = read_vecs(a.data + ".base.fvecs", np.float32)
    queries = read_vecs(a.data + ".query.fvecs", np.float32)
    gt = read_vecs(a.data + ".gt.l2.ivecs", np.int32)
    n, dim = base.shape
    os.makedirs(a.out, exist_ok=True)
    rows = []

    # keel through SQL: one transaction of n inserts (ids = row numbers).
    db = os.path.join(a.out, "keel.db")
    for f in (db, db + ".v.keel", db + ".v.keel.undo"):
        if os.path.exists(f):
            os.remove(f)
    conn = connect(db, a.ext)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=%d, metric=l2)" % dim)
    t0 = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                     ((i, base[i].tobytes()) for i in range(n)))
    conn.execute("COMMIT")
    sql_insert = time.perf_counter() - t0
    conn.execute("SELECT count(*) FROM v").fetchone()  # reader opened
    sql_bytes = size(db, db + ".v.keel")

    # keel's API: its own file, built by add_batch (for the insert time and
    # bytes), and a reader of the SQL table's file (for QPS at equal recall).
    api_path = os.path.join(a.out, "api.keel")
    for f in (api_path, api_path + ".undo"):
        if os.path.exists(f):
            os.remove(f)
    t0 = time.perf_counter()
    with keel.VectorIndex(api_path, dim) as w:
        w.add_batch(base, ids=np.arange(n, dtype=np.uint64))
    api_insert = time.perf_counter() - t0
    api_bytes = size(api_path)
    reader = keel.IndexReader(db + ".v.keel")

    # A second connection, its statements all in one read transaction:
    # SQLite takes and drops its file lock once, not around each statement.
    txn = connect(db, a.ext)
    txn.execute("BEGIN")
    for ef in [int(x) for x in a.efs.split(",")]:
        sql = ("SELECT rowid FROM v WHERE embedding MATCH ? AND k = 10 "
               "AND ef = %d" % ef)
        got = timed_passes({
            "keel SQL": lambda q: [r[0] for r in
                                   conn.execute(sql, (q.tobytes(),))],
            "keel SQL, one read txn": lambda q: [r[0] for r in
                                                 txn.execute(sql,
                                                             (q.tobytes(),))],
            "keel API": lambda q: reader.search(q, k=10, ef=ef)[0].tolist(),
        }, queries, a.rounds)
        assert [list(r) for r in got["keel API"][1]] == \
            [list(r) for r in got["keel SQL"][1]], \
            "the SQL and API searches of one file differ"
        for name, (qps, res) in got.items():
            api = name == "keel API"
            rows.append((name, ef, qps, recall(res, gt),
                         api_insert if api else sql_insert,
                         api_bytes if api else sql_bytes))
    txn.execute("COMMIT")
    txn.close()

    # Filtered: the nearest 10 of the 10% of rows whose docs.lang is 'en',
    # rowid IN (SELECT ...) as the search's allow-list, against an exact
    # filtered scan.
    langs = filter_langs(n)
    en = np.nonzero(langs == "en")[0]
    fgt = [en[np.argsort(np.linalg.norm(base[en] - q, axis=1),
                         kind="stable")[:10]] for q in queries]
    make_docs(conn, langs)
    conn.execute("BEGIN")
    for ef in [int(x) for x in a.efs.split(",")]:
        sql = ("SELECT rowid FROM v WHERE embedding MATCH ? AND k = 10 AND "
               "ef = %d AND rowid IN (SELECT id FROM docs WHERE lang = 'en')"
               % ef)
        got = timed_passes({"f": lambda q: [r[0] for r in conn.execute(
            sql, (q.tobytes(),))]}, queries, a.rounds)["f"]
        rows.append(("keel SQL filtered 10%, one read txn", ef, got[0],
                     recall(got[1], fgt), sql_insert, sql_bytes))
    conn.execute("COMMIT")
    reader.close()
    conn.close()

    vec = None if a.no_vec else sqlite_vec_ext(a.out)
    if vec:
        vdb = os.path.join(a.out, "vec.db")
        if os.path.exists(vdb):
            os.remove(vdb)
        c = connect(vdb, vec)
        c.execute("CREATE VIRTUAL TABLE v USING vec0(embedding float[%d])"
                  % dim)
        t0 = time.perf_counter()
        c.execute("BEGIN")
        c.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                      ((i, base[i].tobytes()) for i in range(n)))
        c.execute("COMMIT")
        vec_insert = time.perf_counter() - t0
        sql = "SELECT rowid FROM v WHERE embedding MATCH ? AND k = 10"
        c.execute("BEGIN")
        qps, res = timed_passes(
            {"vec": lambda q: [r[0] for r in c.execute(sql, (q.tobytes(),))]},
            queries, min(a.rounds, 2))["vec"]
        c.execute("COMMIT")
        version = c.execute("SELECT vec_version()").fetchone()[0]
        rows.append(("sqlite-vec %s, one read txn" % version, "-", qps,
                     recall(res, gt),
                     vec_insert, size(vdb)))
        make_docs(c, langs)
        c.execute("BEGIN")
        sql = ("SELECT rowid FROM v WHERE embedding MATCH ? AND k = 10 AND "
               "rowid IN (SELECT id FROM docs WHERE lang = 'en')")
        qps, res = timed_passes(
            {"vec": lambda q: [r[0] for r in c.execute(sql, (q.tobytes(),))]},
            queries, min(a.rounds, 2))["vec"]
        c.execute("COMMIT")
        c.close()
        rows.append(("sqlite-vec %s filtered 10%%, one read txn" % version,
                     "-", qps, recall(res, fgt), vec_insert, size(vdb)))

    lines = ["# keel through SQL, keel's API and sqlite-vec",
             "",
             "%s: %d vectors of %d dimensions, %d queries, k 10, L2; one "
             "thread, QPS in CPU time, best of %d passes." % (os.path.basename(a.data), n, dim,
                                              len(queries), a.rounds),
             "",
             "| engine | ef | QPS | recall@10 | insert s | bytes |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, ef, qps, rec, ins, b in rows:
        lines.append("| %s | %s | %.0f | %.3f | %.2f | %d |"
                     % (name, ef, qps, rec, ins, b))
    lines.append("")
    by_ef = {}
    for name, ef, qps, _, _, _ in rows:
        by_ef.setdefault(ef, {})[name] = qps
    for ef, d in by_ef.items():
        if "keel SQL" in d and "keel API" in d:
            lines.append("ef %s: SQL / API QPS = %.2f (autocommit), %.2f "
                         "(one read transaction)" %
                         (ef, d["keel SQL"] / d["keel API"],
                          d["keel SQL, one read txn"] / d["keel API"]))
    vec_rows = [r for r in rows if r[0].startswith("sqlite-vec")]
    if vec_rows:
        for name, ef, qps, rec, _, _ in rows:
            if name == "keel SQL, one read txn" and rec >= 0.95:
                lines.append("keel SQL at ef %s (recall %.3f) / sqlite-vec "
                             "QPS = %.1f" % (ef, rec, qps / vec_rows[0][2]))
                break
    report = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "report.md"), "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
