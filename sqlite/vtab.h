/* vtab.h -- what the files of the keel SQLite extension share.
**
** The extension (build/keel_sqlite.so) sits above keel's public API: it uses
** only include/keel.h and SQLite's loadable-extension header, never keel's
** internals. Its files, one job each:
**
**   vtab_value.c   what the others share: messages, the index file
**                  through SQLite's VFS, the vectors a query or an insert
**                  gives (BLOB or JSON); it calls none of them
**   keel_sqlite.c  the entry point, the keel module's table life (options,
**                  create, connect, destroy, shadow names) and the
**                  keel_search table-valued function
**   vtab_read.c    queries: xBestIndex's plans, cursors, xFilter
**   vtab_write.c   xUpdate, SQLite's transactions and savepoints, the
**                  change log and the recovery that makes the index file
**                  agree with the database (doc/sqlite.md, "Durability")
**   admin.c        keel_stats, keel_check and keel_compact from SQL
**
** A table's handles: a writer (keel_open) only during a write transaction
** of its connection (always, for an index in memory), and a reader
** (keel_open_reader) for the connection's reads between them. The writer's
** lock is released at every commit and rollback, so that other connections
** to the database can write in their turn, as SQLite's own lock allows.
*/
#ifndef KEEL_SQLITE_VTAB_H
#define KEEL_SQLITE_VTAB_H

#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT3

#include <stddef.h>
#include <stdint.h>

#include "keel.h"

/* The declared columns of a keel table, in order (rowid is the id). */
enum {
    KV_COL_EMBEDDING = 0, /* the vector, a float32 BLOB */
    KV_COL_DISTANCE = 1,  /* HIDDEN: distance to the MATCH query */
    KV_COL_K = 2,         /* HIDDEN: how many nearest (k = 10) */
    KV_COL_EF = 3         /* HIDDEN: the search's candidate list */
};

/* Most savepoint levels tracked; deeper ones roll back to this depth's. */
#define KV_MAX_SAVEPOINTS 64

/* One write of the transaction, for ROLLBACK TO: the id, and its vector
** before the write (NULL: the id had no live vector, so undoing deletes it). */
typedef struct kv_undo {
    uint64_t id;
    float *old; /* dim floats, owned; NULL for an add */
} kv_undo;

/* One change-log row of the transaction: its seq, and the undo list's
** length right after it was written (a statement's last log row follows
** all of its undo entries). The rows kept here are always the transaction's
** rows that the log still holds, in order. */
typedef struct kv_logged {
    int64_t seq;
    size_t nundo;
} kv_logged;

typedef struct kv_conn kv_conn; /* the connection's module data */

typedef struct kv_table kv_table;
struct kv_table {
    sqlite3_vtab base;
    sqlite3 *db;
    kv_conn *conn;
    sqlite3_uint64 mem_serial; /* an in-memory table's index entry, or 0 */
    char *schema;        /* the database's name ("main") */
    char *name;          /* the table's name */
    char *path;          /* the index file; NULL for an index in memory */
    char *log;           /* the change log's table name, NAME_keel_log */
    char *broken;        /* why the index cannot be used, or NULL */
    uint32_t dim;
    keel_options opt;    /* metric, precision, M, codes, ef_* */
    keel_index *writer;  /* during a write transaction; memory: always */
    keel_index *reader;  /* between them (files only), opened when needed */
    int in_txn;          /* between xBegin and xCommit/xRollback */
    int mem_txn;         /* in memory: this transaction emptied the log */
    int64_t txn;         /* this write transaction's number in the log */
    int64_t logged;      /* log rows written by this transaction */
    int64_t first_seq, last_seq; /* their seq range (when logged > 0) */
    /* The log, by its rows' seq range (seq is AUTOINCREMENT, never reused,
     * so the range names the log's content), as last known to agree with
     * the index file: after this handle's commit, or a check. */
    int64_t ok_min, ok_max;
    int ok_valid;
    unsigned ok_data_version; /* the pager's data version at that check */
    kv_undo *undo;       /* this transaction's writes, in order */
    size_t nundo, capundo;
    size_t marks[KV_MAX_SAVEPOINTS]; /* nundo at each savepoint */
    kv_logged *lrows;    /* this transaction's log rows (files only) */
    size_t nlrows, caplrows;
    float *tmp;          /* dim floats of scratch (reads, recovery) */
    float *in;           /* dim floats: the vector being written */
    sqlite3_stmt *log_insert; /* INSERT INTO log(txn, id, vec) */
    sqlite3_stmt *log_state;  /* the log's seq range */
    sqlite3_stmt *log_has;    /* whether a seq of this transaction is there */
    kv_table *next;           /* the registry of connected tables (admin.c) */
    int registered;           /* in the registry */
};

/* vtab_value.c: messages, the index file through the VFS, vectors. */

/* Sets the table's error message (printf-style) and returns SQLITE_ERROR. */
int kv_error(kv_table *t, const char *fmt, ...);

/* Makes room for element n of the sqlite3_malloc'd array whose pointer is at
** arrayp (room for *cap elements of size bytes), doubling (64 at first).
** SQLITE_OK, or SQLITE_NOMEM with the array as it was. */
int kv_grow(void *arrayp, size_t *cap, size_t n, size_t size);

/* keel's failure rc as an SQLite error: keel's message (with its help line)
** prefixed by what was being done. Returns the SQLite code. */
int kv_keel_error(kv_table *t, int rc, const char *doing);

/* The vector a value gives: a float32 BLOB of dim * 4 bytes, or a JSON
** array of dim numbers. out holds dim floats. Sets the table's error and
** returns SQLITE_ERROR for anything else, naming what it got. */
int kv_value_vector(kv_table *t, sqlite3_value *v, const char *what,
                    float *out);

/* Whether the index file is there (files only). If it is gone, marks the
** table broken (every use says why) and returns SQLITE_ERROR. */
int kv_check_file(kv_table *t);

/* The VFS of the table's database (files are checked and removed through
** it, so that the extension makes no system call of its own), and whether
** the table's index file exists through it. */
sqlite3_vfs *kv_table_vfs(kv_table *t);
int kv_file_exists(kv_table *t);

/* The message of a table whose index file is missing (sqlite3_malloc'd),
** and the name of an SQLite value type as a message says it ("a BLOB"). */
char *kv_missing_message(kv_table *t);
const char *kv_type_name(int type);

/* vtab_read.c: */

/* The handle reads go through: the writer during a write transaction (the
** connection sees its own changes), else the reader, opened if needed, after
** making sure the index file agrees with the committed log. */
int kv_read_handle(kv_table *t, keel_index **out);

/* vtab_write.c: the module's write and transaction methods. */
int kv_update(sqlite3_vtab *vt, int argc, sqlite3_value **argv,
              sqlite3_int64 *rowid);
int kv_begin(sqlite3_vtab *vt);
int kv_sync(sqlite3_vtab *vt);
int kv_commit(sqlite3_vtab *vt);
int kv_rollback(sqlite3_vtab *vt);
int kv_savepoint(sqlite3_vtab *vt, int level);
int kv_release(sqlite3_vtab *vt, int level);
int kv_rollback_to(sqlite3_vtab *vt, int level);


/* During a write transaction: makes the writer agree with the log rows the
** transaction still holds. A ROLLBACK TO the savepoint that began the
** transaction (SAVEPOINT outside BEGIN) rolls the log back but, in SQLite
** 3.40, calls no xRollbackTo; this finds the cut and undoes the
** writes after it. */
int kv_log_check(kv_table *t);

/* Before a read through the reader: checks that the index file agrees with
** the committed change log, and if not (a writer died between SQLite's
** commit and the index's), brings the file forward. Returns an SQLite
** code. */
int kv_reader_check(kv_table *t);

/* Frees the undo list (after a commit or rollback). */
void kv_undo_clear(kv_table *t);

/* admin.c: keel_stats, keel_check, keel_compact, and the registry of
** connected tables they find tables in. */
int kv_admin_register(sqlite3 *db);
void kv_registry_add(kv_table *t);
void kv_registry_remove(kv_table *t);

/* vtab_read.c: the module's query methods. */
int kv_best_index(sqlite3_vtab *vt, sqlite3_index_info *info);
int kv_open_cursor(sqlite3_vtab *vt, sqlite3_vtab_cursor **out);
int kv_close_cursor(sqlite3_vtab_cursor *cur);
int kv_filter(sqlite3_vtab_cursor *cur, int plan, const char *plan_str,
              int argc, sqlite3_value **argv);
int kv_next(sqlite3_vtab_cursor *cur);
int kv_eof(sqlite3_vtab_cursor *cur);
int kv_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col);
int kv_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid);

#endif /* KEEL_SQLITE_VTAB_H */
