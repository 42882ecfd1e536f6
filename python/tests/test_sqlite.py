"""test_sqlite.py -- keel as a SQLite loadable extension (build/keel_sqlite.so,
doc/sqlite.md) through Python's sqlite3 module and the sqlite3 shell: the SQL
surface, filtered searches against an exact filtered scan on the GloVe
slice, transactions and savepoints, two connections, processes killed in
the middle of commits, and bad input.

The extension is found at $KEEL_SQLITE, else build/keel_sqlite.so (`make`).
"""

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import ROOT

import keel

EXT = os.environ.get("KEEL_SQLITE",
                     os.path.join(ROOT, "build", "keel_sqlite.so"))


def connect(db, **kw):
    if not os.path.exists(EXT):
        pytest.fail("%s is missing: build it with make" % EXT)
    conn = sqlite3.connect(db, isolation_level=None, **kw)
    conn.enable_load_extension(True)
    conn.load_extension(EXT)
    conn.enable_load_extension(False)
    return conn


def blob(v):
    return np.asarray(v, dtype=np.float32).tobytes()


def knn(conn, table, q, k, extra="", params=()):
    return conn.execute(
        "SELECT rowid, distance FROM %s WHERE embedding MATCH ? AND k = ? %s"
        % (table, extra), (blob(q), k) + tuple(params)).fetchall()


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "t.db")


# --- the SQL surface -------------------------------------------------------

def test_create_insert_search_update_delete(db):
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=3, metric=l2)")
    assert os.path.exists(db + ".v.keel")  # beside the database
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, ?)",
                 (blob([1, 0, 0]),))
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (2, '[0, 1, 0]')")
    conn.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                     [(3, blob([0, 0, 1])), (4, blob([1, 1, 0]))])
    rows = knn(conn, "v", [1, 0.1, 0], 2, "ORDER BY distance")
    assert [r[0] for r in rows] == [1, 4]
    assert rows[0][1] == pytest.approx(0.1, abs=1e-6)
    assert rows[1][1] == pytest.approx(np.hypot(0, 0.9), abs=1e-6)
    # JSON query, ef as a hidden column, the embedding back as a BLOB.
    rows = conn.execute("SELECT rowid, embedding FROM v WHERE embedding "
                        "MATCH '[0,0,0.9]' AND k = 1 AND ef = 5").fetchall()
    assert rows[0][0] == 3
    assert np.frombuffer(rows[0][1], np.float32).tolist() == [0, 0, 1]
    # Lookups and scans.
    assert conn.execute("SELECT count(*) FROM v").fetchone()[0] == 4
    assert conn.execute("SELECT rowid FROM v WHERE rowid = 2").fetchall() \
        == [(2,)]
    assert sorted(conn.execute("SELECT rowid FROM v WHERE rowid IN (4, 9, 1)")
                  .fetchall()) == [(1,), (4,)]
    # UPDATE of the vector and of the rowid; DELETE.
    conn.execute("UPDATE v SET embedding = '[5, 5, 5]' WHERE rowid = 2")
    assert knn(conn, "v", [5, 5, 5], 1) == [(2, 0.0)]
    conn.execute("UPDATE v SET rowid = 20 WHERE rowid = 2")
    assert knn(conn, "v", [5, 5, 5], 1) == [(20, 0.0)]
    assert conn.execute("SELECT rowid FROM v WHERE rowid = 2").fetchall() == []
    conn.execute("DELETE FROM v WHERE rowid = 1")
    assert [r[0] for r in knn(conn, "v", [1, 0, 0], 10)] == [4, 3, 20]
    # INSERT OR REPLACE replaces the vector.
    conn.execute("INSERT OR REPLACE INTO v(rowid, embedding) "
                 "VALUES (3, '[9, 9, 9]')")
    assert knn(conn, "v", [9, 9, 9], 1) == [(3, 0.0)]
    # INSERT OR IGNORE keeps the row; a plain INSERT is a constraint error.
    conn.execute("INSERT OR IGNORE INTO v(rowid, embedding) "
                 "VALUES (3, '[1, 1, 1]')")
    assert knn(conn, "v", [9, 9, 9], 1) == [(3, 0.0)]
    with pytest.raises(sqlite3.IntegrityError, match="already in use"):
        conn.execute("INSERT INTO v(rowid, embedding) VALUES (3, '[1,1,1]')")
    # Automatic rowids.
    cur = conn.execute("INSERT INTO v(embedding) VALUES ('[7, 7, 7]')")
    assert knn(conn, "v", [7, 7, 7], 1)[0][0] == cur.lastrowid
    # The table-valued function.
    assert conn.execute("SELECT id FROM keel_search('v', ?, 1)",
                        (blob([9, 9, 9]),)).fetchall() == [(3,)]
    assert conn.execute("SELECT id, distance FROM keel_search('v', ?, 2, 8)",
                        (blob([9, 9, 9]),)).fetchall()[0] == (3, 0.0)
    # Everything persists: a new connection reads the same.
    conn.close()
    conn = connect(db)
    assert knn(conn, "v", [7, 7, 7], 1)[0][1] == 0.0
    assert conn.execute("SELECT count(*) FROM v").fetchone()[0] == 4
    # DROP TABLE removes the file and the log.
    conn.execute("DROP TABLE v")
    assert not os.path.exists(db + ".v.keel")
    assert not os.path.exists(db + ".v.keel.undo")
    assert conn.execute("SELECT name FROM sqlite_master WHERE name "
                        "LIKE 'v%'").fetchall() == []


def test_options_path_memory_and_shell(db, tmp_path):
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE c USING keel(dim=4, metric=cosine, "
                 "codes=i8, M=8, ef_construction=64, ef_search=32, "
                 "path='c.keel')")
    assert os.path.exists(str(tmp_path / "c.keel"))
    conn.execute("INSERT INTO c(rowid, embedding) VALUES (1, '[1,0,0,0]'), "
                 "(2, '[0,1,0,0]')")
    assert knn(conn, "c", [2, 0.1, 0, 0], 1)[0][0] == 1
    conn.close()
    # The index of an in-memory database lives in memory.
    mem = connect(":memory:")
    mem.execute("CREATE VIRTUAL TABLE m USING keel(dim=2)")
    mem.execute("INSERT INTO m(rowid, embedding) VALUES (1, '[1,1]')")
    mem.execute("BEGIN")
    mem.execute("INSERT INTO m(rowid, embedding) VALUES (2, '[2,2]')")
    mem.execute("DELETE FROM m WHERE rowid = 1")
    assert knn(mem, "m", [1, 1], 5)[0][0] == 2
    mem.execute("ROLLBACK")
    assert knn(mem, "m", [1, 1], 5) == [(1, 0.0)]
    # The sqlite3 shell loads it too.
    if shutil.which("sqlite3") is None:
        pytest.fail("the sqlite3 shell is missing: sh tools/deps.sh")
    out = subprocess.run(
        ["sqlite3", db],
        input=".load %s\nSELECT rowid FROM c WHERE embedding MATCH "
              "'[0,1,0,0]' AND k = 1;\nSELECT id FROM keel_search('c', "
              "'[1,0,0,0]', 2);\n" % EXT[:-3],
        capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "1", "2"]


def test_filtered_search_recall_on_glove(db, glove):
    """rowid IN (SELECT ...) is keel's allow-list: the k nearest of the
    filtered rows, measured against an exact filtered scan."""
    base, queries = glove[0], glove[1][:50]
    conn = connect(db)
    conn.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, lang TEXT)")
    conn.execute("CREATE VIRTUAL TABLE docs_vec USING keel(dim=100, "
                 "metric=l2)")
    rng = np.random.default_rng(7)
    langs = rng.choice(["en", "de", "fr", "es", "it"], size=len(base),
                       p=[0.1, 0.3, 0.2, 0.2, 0.2])
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO docs(id, lang) VALUES (?, ?)",
                     ((i + 1, str(langs[i])) for i in range(len(base))))
    conn.executemany("INSERT INTO docs_vec(rowid, embedding) VALUES (?, ?)",
                     ((i + 1, base[i].tobytes()) for i in range(len(base))))
    conn.execute("COMMIT")
    en = np.nonzero(langs == "en")[0]
    hits = total = 0
    for q in queries:
        d = np.linalg.norm(base[en] - q, axis=1)
        truth = set((en[np.argsort(d, kind="stable")[:10]] + 1).tolist())
        rows = conn.execute(
            "SELECT d.id, v.distance FROM docs_vec v JOIN docs d "
            "ON d.id = v.rowid WHERE v.embedding MATCH ? AND v.k = 10 "
            "AND v.rowid IN (SELECT id FROM docs WHERE lang = 'en') "
            "ORDER BY v.distance", (q.tobytes(),)).fetchall()
        assert len(rows) == 10
        assert all(langs[r[0] - 1] == "en" for r in rows)
        assert [r[1] for r in rows] == sorted(r[1] for r in rows)
        hits += len(truth & {r[0] for r in rows})
        total += 10
    recall = hits / total
    print("filtered recall@10 (10%% of rows allowed): %.3f" % recall)
    assert recall >= 0.95, recall
    # Without a filter: recall against the slice's ground truth.
    gt = glove[2]
    hits = 0
    for i, q in enumerate(queries):
        got = {r[0] - 1 for r in knn(conn, "docs_vec", q, 10)}
        hits += len(got & set(gt[i][:10].tolist()))
    assert hits / (10 * len(queries)) >= 0.95
    # The join's plan runs the search once: the k-NN is the outer loop.
    plan = " ".join(r[-1] for r in conn.execute(
        "EXPLAIN QUERY PLAN SELECT d.id FROM docs_vec v JOIN docs d ON "
        "d.id = v.rowid WHERE v.embedding MATCH ? AND v.k = 10",
        (queries[0].tobytes(),)))
    assert plan.index("docs_vec") < plan.index("docs d") if "docs d" in plan \
        else plan.startswith("SCAN v")


def test_stats_check_compact(db):
    import json
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    conn.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                     [(i, blob([i, i])) for i in range(1, 11)])
    conn.execute("DELETE FROM v WHERE rowid <= 4")
    other = connect(db)
    assert ids(other) == list(range(5, 11))
    st = json.loads(conn.execute("SELECT keel_stats('v')").fetchone()[0])
    assert (st["count"], st["deleted"], st["dim"], st["metric"]) == \
        (6, 4, 2, "l2")
    assert st["path"] == db + ".v.keel" and st["log_rows"] == 4
    assert conn.execute("SELECT keel_check('v')").fetchone()[0] == "ok"
    conn.execute("BEGIN")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (20, '[0, 0]')")
    expect_error(conn, "SELECT keel_compact('v')", (), "COMMIT", "help:")
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT keel_compact('v')").fetchone()[0] == "ok"
    st = json.loads(conn.execute("SELECT keel_stats('v')").fetchone()[0])
    assert (st["count"], st["deleted"]) == (6, 0)
    # The other connection's reader follows the compacted file.
    assert knn(other, "v", [5, 5], 2) == [(5, 0.0), (6, pytest.approx(
        np.sqrt(2)))]
    expect_error(conn, "SELECT keel_stats('nope')", (), "no keel table",
                 "help:")
    # A connection that has not used the table yet finds it too.
    third = connect(db)
    assert third.execute("SELECT keel_check('v')").fetchone()[0] == "ok"
    # keel_stats is JSON whatever the table's name holds.
    conn.execute('CREATE VIRTUAL TABLE "q""t" USING keel(dim=2)')
    st = json.loads(conn.execute("SELECT keel_stats('q\"t')").fetchone()[0])
    assert st["path"] == db + '.q"t.keel'


# --- transactions ------------------------------------------------------------

def ids(conn, table="v"):
    return sorted(r[0] for r in conn.execute("SELECT rowid FROM %s" % table))


def test_rollback_and_savepoints(db):
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1,1]'), "
                 "(2, '[2,2]')")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (3, '[3,3]')")
    conn.execute("DELETE FROM v WHERE rowid = 1")
    assert ids(conn) == [2, 3]  # visible to this connection at once
    conn.execute("ROLLBACK")
    assert ids(conn) == [1, 2]
    assert knn(conn, "v", [1, 1], 1) == [(1, 0.0)]

    conn.execute("BEGIN")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (3, '[3,3]')")
    conn.execute("SAVEPOINT a")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (4, '[4,4]')")
    conn.execute("UPDATE v SET embedding = '[9,9]' WHERE rowid = 1")
    conn.execute("SAVEPOINT b")
    conn.execute("DELETE FROM v WHERE rowid = 2")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (5, '[5,5]')")
    assert ids(conn) == [1, 3, 4, 5]
    conn.execute("ROLLBACK TO b")
    assert ids(conn) == [1, 2, 3, 4]
    conn.execute("DELETE FROM v WHERE rowid = 4")
    conn.execute("ROLLBACK TO a")
    assert ids(conn) == [1, 2, 3]
    assert knn(conn, "v", [1, 1], 1) == [(1, 0.0)]  # the update undone
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (6, '[6,6]')")
    conn.execute("RELEASE a")
    conn.execute("COMMIT")
    conn.close()
    conn = connect(db)
    assert ids(conn) == [1, 2, 3, 6]
    assert knn(conn, "v", [6, 6], 1) == [(6, 0.0)]
    assert knn(conn, "v", [1, 1], 1) == [(1, 0.0)]
    # The log holds the last transaction's rows only.
    assert conn.execute("SELECT count(*) FROM v_keel_log").fetchone()[0] == 2



def test_rollback_to_the_savepoint_that_began_the_transaction(db):
    """SAVEPOINT outside BEGIN begins the transaction; SQLite 3.40 rolls its
    ROLLBACK TO back without calling the table's xRollbackTo. The table
    finds the cut in its change log: the rows are gone for this connection
    at once, and neither the commit nor another connection sees them."""
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1,1]')")
    conn.execute("SAVEPOINT s0")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (7, '[7,7]')")
    conn.execute("DELETE FROM v WHERE rowid = 1")
    conn.execute("ROLLBACK TO s0")
    assert ids(conn) == [1]  # a read, before any other write
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (8, '[8,8]')")
    conn.execute("SAVEPOINT s1")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (9, '[9,9]')")
    conn.execute("RELEASE s1")
    conn.execute("ROLLBACK TO s0")  # then a commit, with no write between
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (6, '[6,6]')")
    conn.execute("RELEASE s0")
    assert ids(conn) == [1, 6]
    other = connect(db)
    assert ids(other) == [1, 6]
    assert knn(other, "v", [7, 7], 1) == [(6, pytest.approx(np.hypot(1, 1)))]
    # A later write by the other connection agrees with the log as well.
    other.execute("INSERT INTO v(rowid, embedding) VALUES (2, '[2,2]')")
    assert ids(other) == [1, 2, 6] and ids(conn) == [1, 2, 6]


@pytest.mark.parametrize("where", ["file", "memory"])
def test_transactions_against_a_rowid_table(db, where):
    """Random writes, savepoints (some beginning the transaction), rollbacks
    and statements failing half way, done alike to the keel table and to an
    ordinary table: both hold the same rows after every statement, and a
    second connection sees the same after every commit."""
    rng = random.Random(1)
    if where == "memory":
        db = ":memory:"
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    conn.execute("CREATE TABLE m(id INTEGER PRIMARY KEY, vec BLOB NOT NULL)")
    conn.execute("CREATE TABLE src(id INTEGER, vec BLOB)")

    def run(sql, args=()):
        try:
            conn.execute(sql, args)
            return None
        except sqlite3.Error as e:
            return str(e)

    def both(vsql, msql, args=()):
        assert (run(vsql, args) is None) == (run(msql, args) is None)

    depth = 0
    for _ in range(250):
        r = rng.random()
        vid, vec = rng.randrange(10), blob([rng.randrange(4), rng.randrange(4)])
        if r < 0.08 and not conn.in_transaction:
            run("BEGIN")
        elif r < 0.14 and conn.in_transaction and depth == 0:
            run(rng.choice(["COMMIT", "ROLLBACK"]))
        elif r < 0.24:
            run("SAVEPOINT s%d" % depth)
            depth += 1
        elif r < 0.31 and depth:
            lvl = rng.randrange(depth)
            run("ROLLBACK TO s%d" % lvl)
            depth = lvl + 1
        elif r < 0.36 and depth:
            depth = rng.randrange(depth)
            run("RELEASE s%d" % depth)
        elif r < 0.55:
            both("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                 "INSERT INTO m VALUES (?, ?)", (vid, vec))
        elif r < 0.62:
            both("INSERT OR REPLACE INTO v(rowid, embedding) VALUES (?, ?)",
                 "INSERT OR REPLACE INTO m VALUES (?, ?)", (vid, vec))
        elif r < 0.70:
            both("DELETE FROM v WHERE rowid = ?", "DELETE FROM m WHERE id = ?",
                 (vid,))
        elif r < 0.76:
            both("UPDATE v SET embedding = ?1 WHERE rowid = ?2",
                 "UPDATE m SET vec = ?1 WHERE id = ?2", (vec, vid))
        elif r < 0.82:
            both("UPDATE v SET rowid = ?1 WHERE rowid = ?2",
                 "UPDATE m SET id = ?1 WHERE id = ?2",
                 (rng.randrange(10), vid))
        else:  # several rows, failing half way at a rowid in use
            run("DELETE FROM src")
            conn.executemany("INSERT INTO src VALUES (?, ?)", [
                (rng.randrange(10), blob([rng.randrange(4), 0]))
                for _ in range(rng.randrange(1, 4))])
            both("INSERT INTO v(rowid, embedding) SELECT id, vec FROM src "
                 "ORDER BY rowid",
                 "INSERT INTO m SELECT id, vec FROM src ORDER BY rowid")
        if not conn.in_transaction:
            depth = 0
        want = conn.execute("SELECT id, vec FROM m ORDER BY id").fetchall()
        assert conn.execute("SELECT rowid, embedding FROM v ORDER BY rowid"
                            ).fetchall() == want
        if not conn.in_transaction and where == "file":
            other = connect(db)
            assert other.execute("SELECT rowid, embedding FROM v ORDER BY "
                                 "rowid").fetchall() == want
            other.close()


def test_failed_write_leaves_no_log_row(db):
    """An UPDATE that moves a row and fails on its new vector (one write, so
    SQLite keeps no statement journal) inside a transaction leaves the log
    as the index: the row is not deleted by the next connection's
    recovery."""
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1,0]'), "
                 "(2, '[0,1]')")
    conn.execute("BEGIN")
    expect_error(conn, "UPDATE v SET rowid = 7, embedding = '[NaN, 0]' "
                 "WHERE rowid = 1", (), "NaN", "help:")
    conn.execute("COMMIT")
    assert conn.execute("SELECT count(*) FROM v_keel_log").fetchone()[0] == 0
    other = connect(db)
    other.execute("INSERT INTO v(rowid, embedding) VALUES (3, '[1,1]')")
    assert ids(other) == [1, 2, 3] and ids(conn) == [1, 2, 3]


def test_index_file_removed_under_a_connection(db):
    """A write after the index file was removed is refused (it would make
    a new, empty index and lose every committed row), with the reason."""
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1,0]')")
    os.remove(db + ".v.keel")
    expect_error(conn, "INSERT INTO v(rowid, embedding) VALUES (2, '[0,1]')",
                 (), "is missing", "help:")
    expect_error(conn, "SELECT keel_compact('v')", (), "is missing", "help:")
    assert not os.path.exists(db + ".v.keel")
    other = connect(db)
    expect_error(other, "SELECT rowid FROM v", (), "is missing", "help:")


def test_maintenance_names_the_table_sql_does(db, tmp_path):
    """keel_stats('v') means the table SQL's v means (main before an
    attached database's v); 'aux.v' names the attached one."""
    conn = connect(db)
    conn.execute("ATTACH ? AS aux", (str(tmp_path / "a.db"),))
    conn.execute("CREATE VIRTUAL TABLE aux.v USING keel(dim=3)")
    conn.execute("SELECT keel_stats('aux.v')")  # aux.v connected first
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")

    def dim(name):
        return conn.execute("SELECT json_extract(keel_stats(?), '$.dim')",
                            (name,)).fetchone()[0]
    assert (dim("v"), dim("main.v"), dim("aux.v"), dim("V")) == (2, 2, 3, 2)
    expect_error(conn, "SELECT keel_check('nope.v')", (), "no keel table",
                 "help:")


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_recovery_in_exclusive_locking_mode(db, tmp_path, journal):
    """A file left behind the database (a power-loss image: the index at
    its flush before the last transaction) is rolled forward by a read of a
    connection in locking_mode=EXCLUSIVE, which holds the database's lock
    (a second connection cannot read the log)."""
    conn = connect(db)
    conn.execute("PRAGMA journal_mode=%s" % journal)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    conn.execute("CREATE TABLE o(x)")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1,0]')")
    conn.close()
    shutil.copy(db + ".v.keel", str(tmp_path / "before.keel"))
    conn = connect(db)
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (2, '[0,1]')")
    conn.close()
    os.remove(db + ".v.keel")
    shutil.copy(str(tmp_path / "before.keel"), db + ".v.keel")
    conn = connect(db)
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")
    conn.execute("INSERT INTO o VALUES (1)")  # the lock is held from here
    assert ids(conn) == [1, 2]
    assert knn(conn, "v", [0, 1], 1) == [(2, 0.0)]


@pytest.mark.parametrize("ops", [["VACUUM"],
                                 ["BEGIN", "CREATE TABLE q(x)", "ROLLBACK"],
                                 ["PRAGMA writable_schema=RESET"]])
def test_memory_table_survives_a_schema_reload(ops):
    """SQLite connects a new table object when it reloads the schema; an
    in-memory table keeps its rows (they were lost: a new, empty index),
    and DROP TABLE then CREATE gives a new, empty one."""
    conn = connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1,0]')")
    for sql in ops:
        conn.execute(sql)
    assert ids(conn) == [1]
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (2, '[0,1]')")
    assert knn(conn, "v", [0, 1], 1) == [(2, 0.0)]
    conn.execute("DROP TABLE v")
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=3)")
    assert ids(conn) == []
    conn.close()

def test_statement_open_across_commit(db):
    """A scan begun in a write transaction (on the writer) goes on after
    the commit closes the writer, through the reader, page after page."""
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=2, M=4, "
                 "ef_construction=8)")
    conn.close()
    conn = connect(db)  # no reader opened yet
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                     ((i, blob([i, -i])) for i in range(1, 5001)))
    scan = conn.execute("SELECT rowid, embedding FROM v")
    first = scan.fetchone()
    conn.execute("COMMIT")
    rest = scan.fetchall()
    assert [first[0]] + [r[0] for r in rest] == list(range(1, 5001))
    assert all(np.frombuffer(r[1], np.float32).tolist() == [r[0], -r[0]]
               for r in rest)


def test_one_index_commit_per_transaction(db):
    """100,000 inserts in BEGIN ... COMMIT commit the index once."""
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=4, M=4, "
                 "ef_construction=8)")
    path = db + ".v.keel"
    reader = keel.VectorIndex(path, 4, read_only=True)
    before = reader.stats()["snapshot"]
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((100000, 4)).astype(np.float32)
    t0 = time.time()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO v(rowid, embedding) VALUES (?, ?)",
                     ((i + 1, vecs[i].tobytes()) for i in range(len(vecs))))
    assert reader.stats()["snapshot"] == before  # nothing committed yet
    conn.execute("COMMIT")
    took = time.time() - t0
    after = reader.stats()["snapshot"]
    assert after == before + 1, (before, after)
    assert len(reader) == 100000
    assert knn(conn, "v", vecs[777], 1) == [(778, 0.0)]
    print("100,000 inserts in one transaction: %.1f s" % took)
    reader.close()


def test_two_connections(db):
    a = connect(db)
    a.execute("CREATE VIRTUAL TABLE v USING keel(dim=2)")
    a.execute("INSERT INTO v(rowid, embedding) VALUES (1, '[1,1]')")
    b = connect(db, timeout=10)
    assert ids(b) == [1]
    a.execute("BEGIN")
    a.execute("INSERT INTO v(rowid, embedding) VALUES (2, '[2,2]')")
    assert ids(a) == [1, 2]
    assert ids(b) == [1]  # not before the commit
    assert knn(b, "v", [2, 2], 1) == [(1, pytest.approx(np.sqrt(2)))]
    a.execute("COMMIT")
    assert ids(b) == [1, 2]
    assert knn(b, "v", [2, 2], 1) == [(2, 0.0)]
    # The other connection writes in its turn (the index's writer lock
    # goes with each commit).
    b.execute("INSERT INTO v(rowid, embedding) VALUES (3, '[3,3]')")
    b.execute("BEGIN")
    b.execute("DELETE FROM v WHERE rowid = 1")
    b.execute("COMMIT")
    assert ids(a) == [2, 3]
    # A committed log row the file lacks (as a writer killed between
    # SQLite's commit and the index's leaves it) is recovered by the next
    # read of a connection already open.
    a.execute("INSERT INTO v_keel_log(txn, id, vec) VALUES (1, 77, ?)",
              (blob([7, 7]),))
    assert knn(b, "v", [7, 7], 1) == [(77, 0.0)]
    assert ids(a) == [2, 3, 77]
    # WAL: a reader goes on while a writer writes.
    a.execute("PRAGMA journal_mode=WAL")
    a.execute("BEGIN")
    a.execute("INSERT INTO v(rowid, embedding) VALUES (4, '[4,4]')")
    assert ids(b) == [2, 3, 77]
    a.execute("COMMIT")
    assert ids(b) == [2, 3, 4, 77]
    assert knn(b, "v", [4, 4], 1) == [(4, 0.0)]


# --- crashes -----------------------------------------------------------------

CHILD = textwrap.dedent("""
    import random, sqlite3, sys
    from array import array
    db, ext, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    conn.enable_load_extension(True)
    conn.load_extension(ext)
    rng = random.Random(seed)
    n = conn.execute("SELECT max(id) FROM docs").fetchone()[0] or 0
    print("ready", flush=True)
    while True:
        conn.execute("BEGIN")
        for _ in range(rng.randrange(1, 60)):
            op = rng.random()
            v = array("f", [rng.gauss(0, 1) for _ in range(8)])
            if op < 0.7 or n < 5:
                n += 1
                conn.execute("INSERT INTO docs(id, vec) VALUES (?, ?)",
                             (n, v.tobytes()))
                conn.execute("INSERT INTO docs_vec(rowid, embedding) "
                             "VALUES (?, ?)", (n, v.tobytes()))
            else:
                i = rng.randrange(1, n + 1)
                if op < 0.85:
                    conn.execute("DELETE FROM docs WHERE id = ?", (i,))
                    conn.execute("DELETE FROM docs_vec WHERE rowid = ?", (i,))
                elif conn.execute("SELECT 1 FROM docs WHERE id = ?",
                                  (i,)).fetchone():
                    conn.execute("UPDATE docs SET vec = ? WHERE id = ?",
                                 (v.tobytes(), i))
                    conn.execute("UPDATE docs_vec SET embedding = ? "
                                 "WHERE rowid = ?", (v.tobytes(), i))
        conn.execute("COMMIT")
""")


def agreement(db):
    """(ids in docs, ids in the keel file as found, vectors that differ):
    the file read directly (keel's reader), before any SQL touches it."""
    conn = sqlite3.connect(db)
    docs = dict(conn.execute("SELECT id, vec FROM docs"))
    conn.close()
    r = keel.VectorIndex(db + ".docs_vec.keel", 8, read_only=True)
    in_file = set(int(i) for i in r)
    differ = sum(1 for i in docs if i in in_file and
                 not np.array_equal(r.get(i),
                                    np.frombuffer(docs[i], np.float32)))
    r.close()
    return set(docs), in_file, differ


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_kill_during_commits_then_agree(db, journal):
    """A child writing docs and docs_vec in transactions is killed (-9) at
    random moments; after each kill the database and the index agree once
    the table is used again (recovery rolls the file forward). With
    SQLite's rollback journal and with its WAL."""
    conn = connect(db)
    conn.execute("PRAGMA journal_mode=%s" % journal)
    conn.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, vec BLOB)")
    conn.execute("CREATE VIRTUAL TABLE docs_vec USING keel(dim=8, M=8, "
                 "ef_construction=32)")
    conn.close()
    script = os.path.join(os.path.dirname(db), "child.py")
    with open(script, "w") as f:
        f.write(CHILD)
    rng = random.Random(12 if journal == "delete" else 5)
    rounds, behind = 12, 0
    for r in range(rounds):
        child = subprocess.Popen([sys.executable, script, db, EXT, str(r)],
                                 stdout=subprocess.PIPE)
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.05, 0.4))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        docs, in_file, differ = agreement(db)
        if docs != in_file or differ:
            behind += 1
            # The file is only ever behind: everything it lacks or holds
            # differently is in the committed log.
            c = sqlite3.connect(db)
            logged = {i for (i,) in c.execute("SELECT id FROM "
                                              "docs_vec_keel_log")}
            c.close()
            assert (docs ^ in_file) <= logged
        # Any use of the table recovers: a write (the next transaction's
        # first write) in odd rounds, a read in even ones.
        conn = connect(db)
        if r % 2:
            conn.execute("BEGIN")
            conn.execute("INSERT INTO docs_vec(rowid, embedding) "
                         "VALUES (-5, zeroblob(32))")
            conn.execute("DELETE FROM docs_vec WHERE rowid = -5")
            conn.execute("COMMIT")
        assert set(ids(conn, "docs_vec")) == docs
        conn.close()
        docs, in_file, differ = agreement(db)
        assert docs == in_file and differ == 0
        # Every committed vector is found by a search.
        conn = connect(db)
        for i, v in list(conn.execute("SELECT id, vec FROM docs"))[-20:]:
            assert knn(conn, "docs_vec", np.frombuffer(v, np.float32), 1)[0] \
                == (i, 0.0)
        conn.close()
    print("kill -9 rounds (%s): %d, index file behind the database after "
          "the kill: %d" % (journal, rounds, behind))


def test_power_loss_images(db, tmp_path):
    """The state a power loss can leave after SQLite's commit: the
    database with the transaction (its commit is synced before the index's
    begins), the index file at its previous flush (keel recovers a flush
    cut short to the one before, doc/format.md). From such images, built
    for inserts, updates, deletes and a rowid change, the next read or
    write of the table (in a fresh process's connection) rolls the file
    forward to the database."""
    conn = connect(db)
    conn.execute("CREATE TABLE docs(id INTEGER PRIMARY KEY, vec BLOB)")
    conn.execute("CREATE VIRTUAL TABLE docs_vec USING keel(dim=8)")
    rng = np.random.default_rng(3)
    vec = lambda: rng.standard_normal(8).astype(np.float32).tobytes()
    steps = [
        [("INSERT INTO docs VALUES (?, ?)", "INSERT INTO docs_vec(rowid, "
          "embedding) VALUES (?, ?)", i) for i in range(1, 30)],
        [("UPDATE docs SET vec = ?2 WHERE id = ?1", "UPDATE docs_vec SET "
          "embedding = ?2 WHERE rowid = ?1", i) for i in (3, 4, 5)],
        [("DELETE FROM docs WHERE id = ?1 AND ?2 IS NOT NULL", "DELETE FROM "
          "docs_vec WHERE rowid = ?1 AND ?2 IS NOT NULL", i) for i in (6, 7)],
        [("INSERT INTO docs VALUES (?, ?)", "INSERT INTO docs_vec(rowid, "
          "embedding) VALUES (?, ?)", 40),
         ("DELETE FROM docs WHERE id = ?1 AND ?2 IS NOT NULL", "DELETE FROM "
          "docs_vec WHERE rowid = ?1 AND ?2 IS NOT NULL", 1)],
    ]
    keel_file = db + ".docs_vec.keel"
    for n, step in enumerate(steps):
        before = tmp_path / ("before%d.keel" % n)
        shutil.copy(keel_file, before)  # the last flush (no writer open)
        conn.execute("BEGIN")
        for sql_docs, sql_vec, i in step:
            v = vec()
            conn.execute(sql_docs, (i, v))
            conn.execute(sql_vec, (i, v))
        conn.execute("COMMIT")
        for how in ("read", "write"):
            img = tmp_path / ("img%d%s" % (n, how))
            img.mkdir()
            shutil.copy(db, img / "t.db")
            shutil.copy(before, img / "t.db.docs_vec.keel")
            idb = str(img / "t.db")
            docs, in_file, differ = agreement(idb)
            assert docs != in_file or differ  # the image lags
            code = textwrap.dedent("""
                import sqlite3, sys
                c = sqlite3.connect(sys.argv[1], isolation_level=None)
                c.enable_load_extension(True)
                c.load_extension(sys.argv[2])
                if sys.argv[3] == "write":
                    c.execute("BEGIN")
                    c.execute("INSERT INTO docs_vec(rowid, embedding) "
                              "VALUES (-5, zeroblob(32))")
                    c.execute("DELETE FROM docs_vec WHERE rowid = -5")
                    c.execute("COMMIT")
                print(c.execute("SELECT count(*) FROM docs_vec").fetchone()[0])
            """)
            out = subprocess.run([sys.executable, "-c", code, idb, EXT, how],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            docs, in_file, differ = agreement(idb)
            assert docs == in_file and differ == 0, (n, how)
            assert int(out.stdout) == len(docs)


# --- bad input ---------------------------------------------------------------

def expect_error(conn, sql, params, *words):
    with pytest.raises(sqlite3.Error) as e:
        conn.execute(sql, params).fetchall()
    msg = str(e.value)
    for w in words:
        assert w in msg, msg
    return msg


def test_bad_input(db, tmp_path):
    conn = connect(db)
    conn.execute("CREATE VIRTUAL TABLE v USING keel(dim=3)")
    ins = "INSERT INTO v(rowid, embedding) VALUES (1, ?)"
    expect_error(conn, ins, (blob([1, 2]),), "8 bytes", "help:")
    expect_error(conn, ins, ("[1, 2]",), "2 numbers", "help:")
    expect_error(conn, ins, (blob([1, float("nan"), 2]),), "NaN", "help:")
    expect_error(conn, ins, ("[1, nan, 2]",), "NaN", "help:")
    expect_error(conn, ins, ("hello",), "not a JSON array", "help:")
    expect_error(conn, ins, (42,), "INTEGER", "help:")
    expect_error(conn, ins, (None,), "NULL", "help:")
    # (SQLite itself refuses a rowid that is not an integer.)
    expect_error(conn, "INSERT INTO v(rowid, embedding) VALUES ('x', ?)",
                 (blob([1, 2, 3]),), "datatype mismatch")
    conn.execute(ins, (blob([1, 2, 3]),))
    expect_error(conn, ins, (blob([1, 2, 3]),), "already in use", "help:")
    conn.execute("INSERT INTO v(rowid, embedding) VALUES (5, '[5, 5, 5]')")
    expect_error(conn, "UPDATE v SET rowid = 1 WHERE rowid = 5", (),
                 "already in use", "help:")
    q = "SELECT rowid FROM v WHERE embedding MATCH ? AND k = ?"
    expect_error(conn, q, (blob([1, 2]), 3), "MATCH query", "help:")
    expect_error(conn, q, (blob([1, 2, 3]), 0), "k = 0", "help:")
    expect_error(conn, q, (blob([1, 2, 3]), "ten"), "k is TEXT", "help:")
    expect_error(conn, "SELECT rowid FROM v WHERE embedding MATCH ?",
                 (blob([1, 2, 3]),), "needs k", "help:")
    # k or ef without a query select nothing: an error, not an empty result.
    expect_error(conn, "SELECT rowid FROM v WHERE k = 3", (),
                 "without a MATCH", "help:")
    expect_error(conn, "SELECT rowid FROM v WHERE ef = 3", (),
                 "without a MATCH", "help:")
    expect_error(conn, "SELECT id FROM keel_search('nope', '[1,2,3]', 1)",
                 (), "nope", "help:")
    # A rowid given as 5.0 or '5' finds row 5, as in a rowid table.
    for key in (5.0, "5", " 5 ", "5.0"):
        assert conn.execute("SELECT rowid FROM v WHERE rowid = ?",
                            (key,)).fetchall() == [(5,)], key
    assert conn.execute("SELECT rowid FROM v WHERE rowid = 5.5").fetchall() \
        == []
    for opts, word in [("metric=l2", "no dim"), ("dim=0", "dim=0"),
                       ("dim=3, metric=hamming", "metric=hamming"),
                       ("dim=3, colour=red", "colour"),
                       ("dim=3, codes=i2", "codes=i2"), ("dim", "key=value")]:
        expect_error(conn, "CREATE VIRTUAL TABLE w USING keel(%s)" % opts, (),
                     word, "help:")
    # A file already at the default path.
    with open(db + ".w.keel", "w") as f:
        f.write("not an index")
    expect_error(conn, "CREATE VIRTUAL TABLE w USING keel(dim=3)", (),
                 "already exists", "help:")
    os.remove(db + ".w.keel")
    # Renaming is refused (the file and log are named after the table).
    expect_error(conn, "ALTER TABLE v RENAME TO v2", (), "renamed", "help:")
    conn.close()

    # A read-only database: reads work, writes fail with SQLite's error.
    ro = connect("file:%s?mode=ro" % db, uri=True)
    assert knn(ro, "v", [1, 2, 3], 1) == [(1, 0.0)]
    expect_error(ro, ins.replace("(1,", "(2,"), (blob([1, 1, 1]),),
                 "readonly")
    ro.close()

    # A missing index file: every use says so; DROP TABLE still works.
    os.rename(db + ".v.keel", db + ".v.keel.away")
    conn = connect(db)
    expect_error(conn, q, (blob([1, 2, 3]), 1), "missing", "help:")
    expect_error(conn, ins.replace("(1,", "(2,"), (blob([1, 1, 1]),),
                 "missing", "help:")
    conn.execute("DROP TABLE v")
    conn.close()
