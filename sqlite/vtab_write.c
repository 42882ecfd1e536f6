/* vtab_write.c -- writes to a keel table in SQLite's transactions: xUpdate,
** xBegin/xSync/xCommit/xRollback, savepoints, the change log and recovery.
**
** DURABILITY (doc/sqlite.md has the whole argument). SQLite and the index
** file commit separately; the database is the log that orders them:
**
**   (1) Every write to a file-backed table also inserts a row into the
**       shadow table NAME_keel_log (txn, id, vector or NULL for a delete)
**       in the same SQLite transaction, so SQLite's commit is the commit
**       point of the change.
**   (2) The index file is flushed (keel_flush) only in xCommit, which SQLite
**       calls after its own commit is durable; and at recovery, only with
**       changes of committed log rows. So the file is never ahead of the
**       database: at most the log's last transaction behind it.
**   (3) A write transaction starts (first xUpdate, under SQLite's write
**       lock, on the newest database state) by taking the index's writer,
**       making the file agree with every logged row (recovery), flushing,
**       and only then deleting the log's rows. So the log always holds
**       every row on which the file and the database may disagree.
**   (4) Recovery is idempotent: for each logged id, the last logged state
**       is compared with the file's (keel_get) and written only where it
**       differs, so running it twice, or over rows already applied, is
**       harmless.
**   (5) Readers (other connections, or this one between write
**       transactions) check the log against the file before a read, and
**       when they differ and no writer holds the index, recover through a
**       private connection that reads the newest log.
**
** ROLLBACK. Uncommitted changes live only in the writer handle: ROLLBACK
** closes it (keel drops unflushed changes); ROLLBACK TO a savepoint undoes
** the writes made since, newest first, from the undo list (an add undone by
** a delete, a delete by adding the old vector back). An index in memory
** has no file to reopen and rolls back through the undo list alone.
** SQLite 3.40 calls no xRollbackTo for a ROLLBACK TO the savepoint
** that began the transaction; the transaction's log rows (lrows) show the
** cut: kv_log_check, before each write, read through the writer and
** commit, undoes the writes whose log rows SQLite rolled back. An index in
** memory keeps a log for this alone (rows without vectors, emptied by each
** transaction's first write).
*/
#include "vtab.h"

#include <math.h>
#include <string.h>

/* How long a write waits for another connection's commit to release the
** index's writer lock (SQLite's lock has already been granted, so the
** other connection is only finishing its xCommit). */
#define WRITER_WAIT_MS 10000

/* --- the undo list ------------------------------------------------------ */

void
kv_undo_clear(kv_table *t)
{
    for (size_t i = 0; i < t->nundo; i++)
        sqlite3_free(t->undo[i].old);
    t->nundo = 0;
    t->nlrows = 0;
}

/* Records a write of id; old is its vector before (NULL: none). */
static int
undo_push(kv_table *t, uint64_t id, const float *old)
{
    if (kv_grow(&t->undo, &t->capundo, t->nundo, sizeof *t->undo))
        return SQLITE_NOMEM;
    float *copy = NULL;
    if (old) {
        copy = sqlite3_malloc64((sqlite3_uint64)t->dim * sizeof(float));
        if (!copy)
            return SQLITE_NOMEM;
        memcpy(copy, old, t->dim * sizeof(float));
    }
    t->undo[t->nundo].id = id;
    t->undo[t->nundo].old = copy;
    t->nundo++;
    return SQLITE_OK;
}

/* Undoes the writes after the first mark entries, newest first. */
static int
undo_to(kv_table *t, size_t mark)
{
    int rc = SQLITE_OK;
    while (t->nundo > mark) {
        kv_undo *u = &t->undo[--t->nundo];
        int krc = keel_delete(t->writer, u->id);
        if (krc == KEEL_ENOTFOUND)
            krc = KEEL_OK;
        if (!krc && u->old)
            krc = keel_add_with_id(t->writer, u->id, u->old);
        if (krc && !rc)
            rc = kv_keel_error(t, krc, "rolling back");
        sqlite3_free(u->old);
        u->old = NULL;
    }
    /* The log rows of undone writes go with them (SQLite rolls them back,
     * or kv_update deletes them). */
    while (t->nlrows && t->lrows[t->nlrows - 1].nundo > mark)
        t->nlrows--;
    return rc;
}

/* --- the change log ----------------------------------------------------- */

static int
prepare(kv_table *t, sqlite3 *db, const char *schema, const char *sql_fmt,
        sqlite3_stmt **out)
{
    /* The format names the log as %w.%w, once or twice. */
    char *sql = sqlite3_mprintf(sql_fmt, schema, t->log, schema, t->log);
    if (!sql)
        return SQLITE_NOMEM;
    int rc = sqlite3_prepare_v2(db, sql, -1, out, NULL);
    sqlite3_free(sql);
    if (rc)
        kv_error(t, "%s: reading its change log: %s", t->name,
                 sqlite3_errmsg(db));
    return rc;
}

static int
log_row(kv_table *t, uint64_t id, const float *vec)
{
    int rc;
    if (!t->log_insert &&
        (rc = prepare(t, t->db, t->schema,
                      "INSERT INTO \"%w\".\"%w\"(txn, id, vec) "
                      "VALUES (?1, ?2, ?3)", &t->log_insert)))
        return rc;
    sqlite3_bind_int64(t->log_insert, 1, t->txn);
    sqlite3_bind_int64(t->log_insert, 2, (sqlite3_int64)id);
    if (vec)
        sqlite3_bind_blob(t->log_insert, 3, vec,
                          (int)(t->dim * sizeof(float)), SQLITE_STATIC);
    else
        sqlite3_bind_null(t->log_insert, 3);
    rc = sqlite3_step(t->log_insert);
    sqlite3_reset(t->log_insert);
    if (rc != SQLITE_DONE)
        return kv_error(t, "%s: writing its change log: %s", t->name,
                        sqlite3_errmsg(t->db));
    /* (xUpdate's caller sets the connection's last rowid after this.) */
    t->last_seq = sqlite3_last_insert_rowid(t->db);
    if (t->logged++ == 0)
        t->first_seq = t->last_seq;
    if (kv_grow(&t->lrows, &t->caplrows, t->nlrows, sizeof *t->lrows))
        return SQLITE_NOMEM;
    t->lrows[t->nlrows].seq = t->last_seq;
    t->lrows[t->nlrows].nundo = t->nundo;
    t->nlrows++;
    return SQLITE_OK;
}

/* Whether the log still holds this transaction's row seq. */
static int
log_has(kv_table *t, int64_t seq, int *has)
{
    int rc;
    if (!t->log_has &&
        (rc = prepare(t, t->db, t->schema,
                      "SELECT 1 FROM \"%w\".\"%w\" WHERE seq = ?1 AND "
                      "txn = ?2", &t->log_has)))
        return rc;
    sqlite3_bind_int64(t->log_has, 1, seq);
    sqlite3_bind_int64(t->log_has, 2, t->txn);
    rc = sqlite3_step(t->log_has);
    *has = rc == SQLITE_ROW;
    sqlite3_reset(t->log_has);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return kv_error(t, "%s: reading its change log: %s", t->name,
                        sqlite3_errmsg(t->db));
    return SQLITE_OK;
}

int
kv_log_check(kv_table *t)
{
    if (!t->writer || !t->nlrows)
        return SQLITE_OK;
    /* Rollbacks cut the log's rows from the end, so the rows still there
     * are the first n; the last one is almost always there (one lookup). */
    size_t n = t->nlrows;
    while (n) {
        int has, rc = log_has(t, t->lrows[n - 1].seq, &has);
        if (rc)
            return rc;
        if (has)
            break;
        n--;
    }
    if (n == t->nlrows)
        return SQLITE_OK;
    return undo_to(t, n ? t->lrows[n - 1].nundo : 0);
}

/* The log's smallest and largest seq (0 and 0: empty): two lookups of the
** rowid b-tree's ends, whatever the log holds, so every read can ask. */
static int
log_state(kv_table *t, int64_t *min, int64_t *max)
{
    int rc;
    if (!t->log_state &&
        (rc = prepare(t, t->db, t->schema,
                      "SELECT (SELECT min(seq) FROM \"%w\".\"%w\"), "
                      "(SELECT max(seq) FROM \"%w\".\"%w\")",
                      &t->log_state)))
        return rc;
    rc = sqlite3_step(t->log_state);
    if (rc == SQLITE_ROW) {
        *min = sqlite3_column_int64(t->log_state, 0);
        *max = sqlite3_column_int64(t->log_state, 1);
        rc = SQLITE_OK;
    } else
        kv_error(t, "%s: reading its change log: %s", t->name,
                 sqlite3_errmsg(t->db));
    sqlite3_reset(t->log_state);
    return rc;
}

/* Whether the stored vector (keel_get: normalized under cosine, rounded in
** an f16 file) is the logged one. */
static int
same_vector(const kv_table *t, const float *stored, const float *logged)
{
    double scale = 1.0;
    if (t->opt.metric == KEEL_COSINE) {
        double s = 0;
        for (uint32_t i = 0; i < t->dim; i++)
            s += (double)logged[i] * logged[i];
        scale = s > 0 ? 1.0 / sqrt(s) : 1.0;
    }
    double tol = t->opt.precision == KEEL_F16 ? 2e-3 : 1e-5;
    for (uint32_t i = 0; i < t->dim; i++) {
        double want = logged[i] * scale;
        if (fabs(stored[i] - want) > tol * (1.0 + fabs(want)))
            return 0;
    }
    return 1;
}

/* Compares the index h with the last logged state of every id in the log of
** db.schema; with apply, writes the differences through h (a writer) and
** flushes. *differ receives how many ids differed. */
static int
reconcile(kv_table *t, sqlite3 *db, const char *schema, keel_index *h,
          int apply, int64_t *differ)
{
    sqlite3_stmt *q;
    *differ = 0;
    int rc = prepare(t, db, schema,
                     "SELECT id, vec FROM \"%w\".\"%w\" ORDER BY id, seq", &q);
    if (rc)
        return rc;
    size_t bytes = t->dim * sizeof(float);
    int have = 0, has_vec = 0;
    uint64_t id = 0;
    for (;;) {
        int step = sqlite3_step(q);
        if (step != SQLITE_ROW && step != SQLITE_DONE) {
            rc = kv_error(t, "%s: reading its change log: %s", t->name,
                          sqlite3_errmsg(db));
            break;
        }
        uint64_t next = step == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(q, 0)
                                           : 0;
        if (have && (step == SQLITE_DONE || next != id)) {
            /* id's last logged state is in t->in (has_vec) or deleted. */
            int krc = keel_get(h, id, t->tmp);
            if (krc && krc != KEEL_ENOTFOUND) {
                rc = kv_keel_error(t, krc, "recovering the index");
                break;
            }
            int live = krc == KEEL_OK;
            if (has_vec ? !live || !same_vector(t, t->tmp, t->in) : live) {
                ++*differ;
                if (apply) {
                    krc = KEEL_OK;
                    if (live)
                        krc = keel_delete(h, id);
                    if (!krc && has_vec)
                        krc = keel_add_with_id(h, id, t->in);
                    if (krc) {
                        rc = kv_keel_error(t, krc, "recovering the index");
                        break;
                    }
                }
            }
        }
        if (step == SQLITE_DONE)
            break;
        id = next;
        have = 1;
        has_vec = sqlite3_column_type(q, 1) == SQLITE_BLOB &&
                  (size_t)sqlite3_column_bytes(q, 1) == bytes;
        if (has_vec)
            memcpy(t->in, sqlite3_column_blob(q, 1), bytes);
    }
    sqlite3_finalize(q);
    if (!rc && apply && *differ) {
        int krc = keel_flush(h);
        if (krc)
            rc = kv_keel_error(t, krc, "committing the recovered index");
    }
    return rc;
}

/* keel_open of the index as its writer, waiting up to wait_ms while another
** connection holds it. */
static int
open_writer(kv_table *t, int wait_ms, keel_index **out)
{
    for (int waited = 0;; waited += 2) {
        int krc = keel_open(t->path, t->dim, &t->opt, out);
        if (krc != KEEL_ELOCKED || waited >= wait_ms)
            return krc;
        sqlite3_sleep(2);
    }
}

/* The first write of a transaction: the writer, the file recovered to the
** log (invariant (3)), the log emptied, a new transaction number. */
static int
begin_writes(kv_table *t)
{
    if (t->broken)
        return kv_error(t, "%s", t->broken);
    if (t->writer && !t->path && !t->mem_txn) {
        /* In memory: the transaction's first write empties the log. */
        char *sql = sqlite3_mprintf("DELETE FROM \"%w\".\"%w\"", t->schema,
                                    t->log);
        int rc = sql ? sqlite3_exec(t->db, sql, NULL, NULL, NULL)
                     : SQLITE_NOMEM;
        sqlite3_free(sql);
        if (rc)
            return kv_error(t, "%s: emptying its change log: %s", t->name,
                            sqlite3_errmsg(t->db));
        sqlite3_int64 txn;
        sqlite3_randomness(sizeof txn, &txn);
        t->txn = (txn & INT64_MAX) ? (txn & INT64_MAX) : 1;
        t->logged = 0;
        t->nlrows = 0;
        t->mem_txn = 1;
        return SQLITE_OK;
    }
    if (t->writer)
        return kv_log_check(t);
    int rc = kv_check_file(t);
    if (rc)
        return rc;
    int krc = open_writer(t, WRITER_WAIT_MS, &t->writer);
    if (krc)
        return kv_keel_error(t, krc, "opening the index for writing");
    int64_t min, max, differ;
    rc = log_state(t, &min, &max);
    int known = t->ok_valid && t->ok_min == min && t->ok_max == max;
    if (!rc && max && !known)
        rc = reconcile(t, t->db, t->schema, t->writer, 1, &differ);
    if (!rc && max) {
        char *sql = sqlite3_mprintf("DELETE FROM \"%w\".\"%w\"", t->schema,
                                    t->log);
        rc = sql ? sqlite3_exec(t->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
        sqlite3_free(sql);
        if (rc)
            kv_error(t, "%s: emptying its change log: %s", t->name,
                     sqlite3_errmsg(t->db));
    }
    if (rc) {
        keel_close(t->writer);
        t->writer = NULL;
        return rc;
    }
    sqlite3_int64 txn;
    sqlite3_randomness(sizeof txn, &txn);
    t->txn = (txn & INT64_MAX) ? (txn & INT64_MAX) : 1;
    t->logged = 0;
    t->nlrows = 0;
    t->ok_valid = 0;
    return SQLITE_OK;
}

/* Whether the connection holds its database's lock for good (PRAGMA
** locking_mode=EXCLUSIVE). */
static int
exclusive_lock(kv_table *t)
{
    char *sql = sqlite3_mprintf("PRAGMA \"%w\".locking_mode", t->schema);
    sqlite3_stmt *st = NULL;
    int excl = 0;
    if (sql && sqlite3_prepare_v2(t->db, sql, -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        const char *m = (const char *)sqlite3_column_text(st, 0);
        excl = m && !sqlite3_stricmp(m, "exclusive");
    }
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return excl;
}

int
kv_reader_check(kv_table *t)
{
    if (!t->path)
        return SQLITE_OK;
    /* No commit since the last check (the pager's data version moves with
     * every commit, this connection's or another's): no statement at all. */
    unsigned dv = 0;
    if (t->ok_valid &&
        sqlite3_file_control(t->db, t->schema, SQLITE_FCNTL_DATA_VERSION,
                             &dv) == SQLITE_OK && dv == t->ok_data_version)
        return SQLITE_OK;
    int64_t min, max, differ;
    int rc = log_state(t, &min, &max);
    if (rc)
        return rc;
    if (max == 0 || (t->ok_valid && t->ok_min == min && t->ok_max == max)) {
        t->ok_min = min;
        t->ok_max = max;
        t->ok_valid = 1;
        t->ok_data_version = dv;
        return SQLITE_OK;
    }
    if ((rc = reconcile(t, t->db, t->schema, t->reader, 0, &differ)))
        return rc;
    if (differ) {
        /* A writer died between SQLite's commit and the index's (or is
         * between them now: then it holds the index and we read as is). */
        keel_index *w = NULL;
        if ((rc = kv_check_file(t)))
            return rc;
        int krc = open_writer(t, 0, &w);
        if (krc == KEEL_ELOCKED)
            return SQLITE_OK;
        if (krc)
            return kv_keel_error(t, krc, "opening the index to recover it");
        sqlite3 *fresh = NULL;
        if (exclusive_lock(t))
            /* This connection keeps the database's lock (locking_mode=
             * EXCLUSIVE): no other can commit, so its own view is the
             * newest, and another connection could not read at all. */
            rc = reconcile(t, t->db, t->schema, w, 1, &differ);
        else if ((rc = sqlite3_open_v2(sqlite3_db_filename(t->db, t->schema),
                                       &fresh, SQLITE_OPEN_READONLY, NULL)))
            kv_error(t, "%s: opening the database to recover the index: %s",
                     t->name, fresh ? sqlite3_errmsg(fresh) : "no memory");
        else
            rc = reconcile(t, fresh, "main", w, 1, &differ);
        sqlite3_close(fresh);
        keel_close(w);
        if (rc)
            return rc;
        keel_refresh(t->reader);
    }
    t->ok_min = min;
    t->ok_max = max;
    t->ok_valid = 1;
    t->ok_data_version = dv;
    return SQLITE_OK;
}

/* --- xUpdate ------------------------------------------------------------ */

/* Deletes id (live), recording its vector for rollback. */
static int
write_delete(kv_table *t, uint64_t id)
{
    int krc = keel_get(t->writer, id, t->tmp);
    if (krc == KEEL_ENOTFOUND)
        return SQLITE_OK; /* nothing to delete */
    if (krc)
        return kv_keel_error(t, krc, "deleting");
    int rc = undo_push(t, id, t->tmp);
    if (rc)
        return rc;
    if ((krc = keel_delete(t->writer, id))) {
        t->nundo--;
        sqlite3_free(t->undo[t->nundo].old);
        return kv_keel_error(t, krc, "deleting");
    }
    return SQLITE_OK;
}

/* Adds t->in under id (or the next automatic id with *id = UINT64_MAX). */
static int
write_add(kv_table *t, uint64_t *id)
{
    int rc = undo_push(t, 0, NULL);
    if (rc)
        return rc;
    int krc = *id == UINT64_MAX ? keel_add(t->writer, t->in, id)
                                : keel_add_with_id(t->writer, *id, t->in);
    if (krc) {
        t->nundo--;
        return kv_keel_error(t, krc, "inserting");
    }
    t->undo[t->nundo - 1].id = *id;
    return SQLITE_OK;
}

int
kv_update(sqlite3_vtab *vt, int argc, sqlite3_value **argv,
          sqlite3_int64 *rowid)
{
    kv_table *t = (kv_table *)vt;
    int rc = begin_writes(t);
    if (rc)
        return rc;
    int logged = 1; /* in memory too, without the vectors (kv_log_check) */
    const float *logvec = t->path ? t->in : NULL;
    size_t mark = t->nundo, lmark = t->nlrows;
    if (argc == 1) { /* DELETE */
        uint64_t id = (uint64_t)sqlite3_value_int64(argv[0]);
        if ((rc = write_delete(t, id)))
            return rc;
        if (logged && t->nundo > mark && (rc = log_row(t, id, NULL)))
            goto undo;
        return SQLITE_OK;
    }

    if ((rc = kv_value_vector(t, argv[2 + KV_COL_EMBEDDING], "embedding",
                              t->in)))
        return rc;
    int type = sqlite3_value_type(argv[1]);
    if (type != SQLITE_NULL && type != SQLITE_INTEGER)
        return kv_error(t, "%s: rowid is %s, not an integer\nhelp: give an "
                        "integer rowid (such as the document's rowid), or "
                        "none for the next one", t->name,
                        sqlite3_value_type(argv[1]) == SQLITE_TEXT ? "TEXT"
                                                                   : "a REAL");
    uint64_t id = type == SQLITE_NULL ? UINT64_MAX
                                      : (uint64_t)sqlite3_value_int64(argv[1]);
    if (type == SQLITE_INTEGER && id == UINT64_MAX)
        return kv_error(t, "%s: rowid -1 is reserved by keel\nhelp: use "
                        "another rowid", t->name);

    int insert = sqlite3_value_type(argv[0]) == SQLITE_NULL;
    uint64_t old = insert ? 0 : (uint64_t)sqlite3_value_int64(argv[0]);
    if (!insert && id == UINT64_MAX)
        id = old;
    if (id != UINT64_MAX && (insert || id != old) &&
        keel_get(t->writer, id, t->tmp) == KEEL_OK) {
        /* The rowid is taken: the statement's ON CONFLICT decides. */
        int on = sqlite3_vtab_on_conflict(t->db);
        if (on == SQLITE_IGNORE)
            return SQLITE_OK;
        if (on != SQLITE_REPLACE) {
            kv_error(t, "%s: rowid %lld is already in use\nhelp: UPDATE "
                     "its embedding, INSERT OR REPLACE to replace it, or "
                     "choose another rowid", t->name, (long long)id);
            return SQLITE_CONSTRAINT;
        }
        if ((rc = write_delete(t, id)))
            goto undo;
    }
    if (!insert) { /* UPDATE: the old row goes, the new one comes */
        if ((rc = write_delete(t, old)))
            goto undo;
        if (logged && id != old && (rc = log_row(t, old, NULL)))
            goto undo;
    }
    if ((rc = write_add(t, &id)))
        goto undo;
    if (logged && (rc = log_row(t, id, logvec)))
        goto undo;
    *rowid = (sqlite3_int64)id;
    return SQLITE_OK;
undo:
    /* Keep the statement's keel writes and log rows together: undo the
     * keel side of this row (its log rows go with SQLite's statement). */
    {
        char *msg = t->base.zErrMsg;
        t->base.zErrMsg = NULL;
        /* Without a statement journal (a statement of one write) SQLite
         * keeps the log rows already written: delete them, or the log
         * would say what the index does not hold. */
        if (t->nlrows > lmark) {
            char *sql = sqlite3_mprintf(
                "DELETE FROM \"%w\".\"%w\" WHERE seq >= %lld AND txn = %lld",
                t->schema, t->log, (long long)t->lrows[lmark].seq,
                (long long)t->txn);
            int drc = sql ? sqlite3_exec(t->db, sql, NULL, NULL, NULL)
                          : SQLITE_NOMEM;
            sqlite3_free(sql);
            if (drc && !rc)
                rc = drc;
        }
        undo_to(t, mark);
        sqlite3_free(t->base.zErrMsg);
        t->base.zErrMsg = msg;
    }
    return rc;
}

/* --- transactions ------------------------------------------------------- */

int
kv_begin(sqlite3_vtab *vt)
{
    kv_table *t = (kv_table *)vt;
    kv_undo_clear(t);
    memset(t->marks, 0, sizeof t->marks);
    t->in_txn = 1;
    t->mem_txn = 0;
    return SQLITE_OK;
}

int
kv_sync(sqlite3_vtab *vt)
{
    /* The index commits after SQLite (invariant (2)); here, before SQLite's
     * commit, the writer is only made to agree with the log. */
    return kv_log_check((kv_table *)vt);
}

int
kv_commit(sqlite3_vtab *vt)
{
    kv_table *t = (kv_table *)vt;
    t->in_txn = 0;
    kv_undo_clear(t);
    if (!t->path || !t->writer)
        return SQLITE_OK;
    /* SQLite has committed: the log holds this transaction's rows, and the
     * file follows. A failed flush leaves them for recovery. */
    int krc = keel_flush(t->writer);
    keel_close(t->writer);
    t->writer = NULL;
    if (krc) {
        t->ok_valid = 0;
        return kv_keel_error(t, krc, "committing the index");
    }
    /* The log holds this transaction's rows alone (begin_writes emptied
     * it), and the file has them. */
    t->ok_min = t->logged ? t->first_seq : 0;
    t->ok_max = t->logged ? t->last_seq : 0;
    t->ok_valid = 1;
    return SQLITE_OK;
}

int
kv_rollback(sqlite3_vtab *vt)
{
    kv_table *t = (kv_table *)vt;
    int rc = SQLITE_OK;
    t->in_txn = 0;
    if (t->path) {
        /* Unflushed changes die with the handle. */
        keel_close(t->writer);
        t->writer = NULL;
        kv_undo_clear(t);
    } else
        rc = undo_to(t, 0);
    return rc;
}

int
kv_savepoint(sqlite3_vtab *vt, int level)
{
    kv_table *t = (kv_table *)vt;
    if (level < 0 || level >= KV_MAX_SAVEPOINTS)
        return kv_error(t, "%s: savepoints nest %d deep, and a keel table "
                        "keeps track of %d\nhelp: release savepoints before "
                        "opening more", t->name, level + 1, KV_MAX_SAVEPOINTS);
    for (int i = level; i < KV_MAX_SAVEPOINTS; i++)
        t->marks[i] = t->nundo;
    return SQLITE_OK;
}

int
kv_release(sqlite3_vtab *vt, int level)
{
    (void)vt;
    (void)level;
    return SQLITE_OK;
}

int
kv_rollback_to(sqlite3_vtab *vt, int level)
{
    kv_table *t = (kv_table *)vt;
    if (level < 0 || level >= KV_MAX_SAVEPOINTS)
        return SQLITE_OK; /* never opened (kv_savepoint refused it) */
    size_t mark = t->marks[level];
    if (mark >= t->nundo || !t->writer)
        return SQLITE_OK;
    return undo_to(t, mark);
}
