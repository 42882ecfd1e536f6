/* keel_sqlite.c -- keel as a SQLite loadable extension: the entry point, the
** keel module's table life and the keel_search table-valued function.
**
**   CREATE VIRTUAL TABLE docs_vec USING keel(dim=384, metric=cosine
**       [, path='docs.keel'] [, codes=i8] [, precision=f16] [, M=16]
**       [, ef_construction=200] [, ef_search=64]);
**
** The index file sits beside the database: by default the database's path,
** a dot, the table's name and ".keel" (docs.db.docs_vec.keel); path= names
** another (relative paths from the database's folder). A table in an
** in-memory or temporary database keeps its index in memory. Beside the
** index, a file-backed table has one shadow table, NAME_keel_log, the
** change log that makes the index's commits follow SQLite's (vtab_write.c).
**
** Files are touched only through SQLite's VFS (existence, deletion) and
** keel's calls: this extension makes no system call of its own.
**
** The rest of the SQL surface is doc/sqlite.md.
*/
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "vtab.h"

/* --- in-memory indexes across reconnects ----------------------------------- */

/* An in-memory table's index must outlive its table object: when SQLite
** reloads the schema (VACUUM, a rolled-back schema change) it connects a
** new object for the same table before it disconnects the old one. The
** connection's module data holds each in-memory index once, shared by the
** objects of its table (refs); the last disconnect, or DROP TABLE, closes
** it. Objects find their entry by serial, never by a pointer that may
** have been freed. */
typedef struct kv_mem {
    char *schema, *name;
    keel_index *index;
    int refs;
    sqlite3_uint64 serial;
    struct kv_mem *next;
} kv_mem;

struct kv_conn {
    kv_mem *mems;
    sqlite3_uint64 serials;
};

static void
mem_unlink(kv_conn *c, kv_mem *m)
{
    for (kv_mem **p = &c->mems; *p; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            break;
        }
    keel_close(m->index);
    sqlite3_free(m->schema);
    sqlite3_free(m->name);
    sqlite3_free(m);
}

static void
conn_free(void *p)
{
    kv_conn *c = p;
    while (c && c->mems)
        mem_unlink(c, c->mems);
    sqlite3_free(c);
}

static kv_mem *
mem_find(kv_conn *c, const char *schema, const char *name,
         sqlite3_uint64 serial)
{
    for (kv_mem *m = c ? c->mems : NULL; m; m = m->next)
        if (serial ? m->serial == serial
                   : !sqlite3_stricmp(m->schema, schema) &&
                         !sqlite3_stricmp(m->name, name))
            return m;
    return NULL;
}

/* The table's in-memory index: the one its earlier object holds (connect),
** or a new one (create). */
static int
mem_attach(kv_table *t, int create)
{
    kv_conn *c = t->conn;
    kv_mem *m = mem_find(c, t->schema, t->name, 0);
    if (m && create)
        mem_unlink(c, m); /* a dropped table's, left behind */
    else if (m) {
        m->refs++;
        t->writer = m->index;
        t->mem_serial = m->serial;
        return KEEL_OK;
    }
    int krc = keel_open(KEEL_MEMORY, t->dim, &t->opt, &t->writer);
    if (krc || !c)
        return krc;
    if (!(m = sqlite3_malloc(sizeof *m)))
        return KEEL_ENOMEM;
    m->schema = sqlite3_mprintf("%s", t->schema);
    m->name = sqlite3_mprintf("%s", t->name);
    if (!m->schema || !m->name) {
        sqlite3_free(m->schema);
        sqlite3_free(m->name);
        sqlite3_free(m);
        return KEEL_ENOMEM;
    }
    m->index = t->writer;
    m->refs = 1;
    m->serial = ++c->serials;
    m->next = c->mems;
    c->mems = m;
    t->mem_serial = m->serial;
    return KEEL_OK;
}

/* An object of an in-memory table lets go of its index (closed by the last
** one, or with destroy). */
static void
mem_detach(kv_table *t, int destroy)
{
    kv_mem *m = t->mem_serial ? mem_find(t->conn, NULL, NULL, t->mem_serial)
                              : NULL;
    if (t->mem_serial)
        t->writer = NULL; /* the entry's, or already closed */
    if (m && (destroy || --m->refs == 0))
        mem_unlink(t->conn, m);
}

/* --- options ------------------------------------------------------------ */

/* A copy of an argument's value without its quotes ('x', "x"), trimmed. */
static char *
arg_value(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\n')) {
        s++;
        n--;
    }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n'))
        n--;
    if (n >= 2 && (s[0] == '\'' || s[0] == '"') && s[n - 1] == s[0]) {
        s++;
        n -= 2;
    }
    return sqlite3_mprintf("%.*s", (int)n, s);
}

/* A whole number in [lo, hi] from text, or -1. */
static long long
arg_number(const char *v, long long lo, long long hi)
{
    if (!*v)
        return -1;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end || x < lo || x > hi)
        return -1;
    return x;
}

/* Reads key=value arguments into t (dim, opt) and *path (NULL: the default).
** On failure sets *err (sqlite3_malloc'd) and returns SQLITE_ERROR. */
static int
parse_args(kv_table *t, int argc, const char *const *argv, char **path,
           char **err)
{
    int have_dim = 0;
    *path = NULL;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        if (!eq) {
            *err = sqlite3_mprintf(
                "keel table %s: argument \"%s\" is not key=value\nhelp: write "
                "options as dim=384, metric=cosine, path='x.keel', codes=i8, "
                "precision=f16, M=16, ef_construction=200, ef_search=64",
                t->name, a);
            return SQLITE_ERROR;
        }
        char *key = arg_value(a, (size_t)(eq - a));
        char *val = arg_value(eq + 1, strlen(eq + 1));
        if (!key || !val) {
            sqlite3_free(key);
            sqlite3_free(val);
            return SQLITE_NOMEM;
        }
        const char *bad = NULL, *help = NULL;
        long long x;
        if (!sqlite3_stricmp(key, "dim")) {
            if ((x = arg_number(val, 1, 4096)) < 0) {
                bad = "dim";
                help = "a whole number of dimensions from 1 to 4096";
            } else {
                t->dim = (uint32_t)x;
                have_dim = 1;
            }
        } else if (!sqlite3_stricmp(key, "metric")) {
            if (!sqlite3_stricmp(val, "l2"))
                t->opt.metric = KEEL_L2;
            else if (!sqlite3_stricmp(val, "cosine"))
                t->opt.metric = KEEL_COSINE;
            else if (!sqlite3_stricmp(val, "ip"))
                t->opt.metric = KEEL_IP;
            else {
                bad = "metric";
                help = "metric=l2, metric=cosine or metric=ip";
            }
        } else if (!sqlite3_stricmp(key, "codes")) {
            if (!sqlite3_stricmp(val, "none"))
                t->opt.codes = KEEL_CODES_NONE;
            else if (!sqlite3_stricmp(val, "i8"))
                t->opt.codes = KEEL_CODES_I8;
            else if (!sqlite3_stricmp(val, "i4"))
                t->opt.codes = KEEL_CODES_I4;
            else {
                bad = "codes";
                help = "codes=none, codes=i8 or codes=i4";
            }
        } else if (!sqlite3_stricmp(key, "precision")) {
            if (!sqlite3_stricmp(val, "f32"))
                t->opt.precision = KEEL_F32;
            else if (!sqlite3_stricmp(val, "f16"))
                t->opt.precision = KEEL_F16;
            else {
                bad = "precision";
                help = "precision=f32 or precision=f16";
            }
        } else if (!sqlite3_stricmp(key, "M")) {
            if ((x = arg_number(val, 2, 32767)) < 0) {
                bad = "M";
                help = "M from 2 to 32767 (16 is the default)";
            } else
                t->opt.max_connections = (uint32_t)x;
        } else if (!sqlite3_stricmp(key, "ef_construction")) {
            if ((x = arg_number(val, 1, 100000)) < 0) {
                bad = "ef_construction";
                help = "ef_construction from 1 to 100000 (200 is the default)";
            } else
                t->opt.ef_construction = (uint32_t)x;
        } else if (!sqlite3_stricmp(key, "ef_search")) {
            if ((x = arg_number(val, 1, 100000)) < 0) {
                bad = "ef_search";
                help = "ef_search from 1 to 100000 (64 is the default)";
            } else
                t->opt.ef_search = (uint32_t)x;
        } else if (!sqlite3_stricmp(key, "path")) {
            if (!*val) {
                bad = "path";
                help = "path='docs.keel', or leave path out for the default";
            } else {
                sqlite3_free(*path);
                *path = val;
                val = NULL;
            }
        } else {
            *err = sqlite3_mprintf(
                "keel table %s: unknown option \"%s\"\nhelp: the options are "
                "dim, metric, path, codes, precision, M, ef_construction and "
                "ef_search", t->name, key);
            sqlite3_free(key);
            sqlite3_free(val);
            return SQLITE_ERROR;
        }
        if (bad)
            *err = sqlite3_mprintf("keel table %s: %s=%s is not valid\n"
                                   "help: %s", t->name, bad, val, help);
        sqlite3_free(key);
        sqlite3_free(val);
        if (bad)
            return SQLITE_ERROR;
    }
    if (!have_dim) {
        *err = sqlite3_mprintf("keel table %s has no dim\nhelp: give the "
                               "vectors' length, as in USING keel(dim=384, "
                               "metric=cosine)", t->name);
        return SQLITE_ERROR;
    }
    return SQLITE_OK;
}

/* Sets t->path: NULL for a database in memory (or a temporary one), else
** the path option resolved against the database's folder, or the default
** beside the database. */
static int
resolve_path(kv_table *t, const char *opt_path, char **err)
{
    const char *dbfile = sqlite3_db_filename(t->db, t->schema);
    if (!dbfile || !*dbfile) {
        if (opt_path) {
            *err = sqlite3_mprintf(
                "keel table %s: path='%s' given in a database in memory\n"
                "help: leave path out (the index lives in memory with the "
                "database), or create the table in a database file",
                t->name, opt_path);
            return SQLITE_ERROR;
        }
        t->path = NULL;
        return SQLITE_OK;
    }
    if (!opt_path)
        t->path = sqlite3_mprintf("%s.%s.keel", dbfile, t->name);
    else if (opt_path[0] == '/')
        t->path = sqlite3_mprintf("%s", opt_path);
    else {
        const char *slash = strrchr(dbfile, '/');
        int dirlen = slash ? (int)(slash - dbfile) + 1 : 0;
        t->path = sqlite3_mprintf("%.*s%s", dirlen, dbfile, opt_path);
    }
    return t->path ? SQLITE_OK : SQLITE_NOMEM;
}

static void
table_free(kv_table *t)
{
    if (!t)
        return;
    if (t->registered)
        kv_registry_remove(t);
    mem_detach(t, 0);
    kv_undo_clear(t);
    sqlite3_free(t->undo);
    sqlite3_free(t->lrows);
    keel_close(t->writer);
    keel_close(t->reader);
    sqlite3_finalize(t->log_insert);
    sqlite3_finalize(t->log_state);
    sqlite3_finalize(t->log_has);
    sqlite3_free(t->schema);
    sqlite3_free(t->name);
    sqlite3_free(t->path);
    sqlite3_free(t->log);
    sqlite3_free(t->broken);
    sqlite3_free(t->tmp);
    sqlite3_free(t->in);
    sqlite3_free(t->base.zErrMsg);
    sqlite3_free(t);
}

/* xCreate (create = 1) and xConnect. */
static int
table_init(sqlite3 *db, kv_conn *conn, int argc, const char *const *argv,
           sqlite3_vtab **out, char **err, int create)
{
    kv_table *t = sqlite3_malloc(sizeof *t);
    if (!t)
        return SQLITE_NOMEM;
    memset(t, 0, sizeof *t);
    t->db = db;
    t->conn = conn;
    t->schema = sqlite3_mprintf("%s", argv[1]);
    t->name = sqlite3_mprintf("%s", argv[2]);
    t->log = sqlite3_mprintf("%s_keel_log", argv[2]);
    char *opt_path = NULL;
    int rc = SQLITE_NOMEM;
    if (!t->schema || !t->name || !t->log)
        goto fail;
    if ((rc = parse_args(t, argc, argv, &opt_path, err)) ||
        (rc = resolve_path(t, opt_path, err)))
        goto fail;
    rc = SQLITE_NOMEM;
    if (!(t->tmp = sqlite3_malloc64((sqlite3_uint64)t->dim * sizeof(float))) ||
        !(t->in = sqlite3_malloc64((sqlite3_uint64)t->dim * sizeof(float))))
        goto fail;

    if (!t->path) {
        /* In memory: the writer is the index, for the database's life. */
        int krc = mem_attach(t, create);
        if (krc) {
            *err = sqlite3_mprintf("keel table %s: %s", t->name,
                                   keel_errmsg());
            rc = SQLITE_ERROR;
            goto fail;
        }
    } else if (create) {
        if (kv_file_exists(t)) {
            *err = sqlite3_mprintf(
                "keel table %s: the index file %s already exists\nhelp: remove "
                "it if it belongs to no table, or give this table another "
                "file with path='...'", t->name, t->path);
            rc = SQLITE_ERROR;
            goto fail;
        }
        keel_index *w = NULL;
        int krc = keel_open(t->path, t->dim, &t->opt, &w);
        if (!krc)
            krc = keel_flush(w);
        keel_close(w);
        if (krc) {
            *err = sqlite3_mprintf("keel table %s: creating %s: %s", t->name,
                                   t->path, keel_errmsg());
            rc = SQLITE_ERROR;
            goto fail;
        }
    } else if (!kv_file_exists(t)) {
        /* Connect anyway, so that DROP TABLE works; every use says why. */
        t->broken = kv_missing_message(t);
    }

    if (create) {
        /* The change log (an in-memory table's holds no vectors: it only
         * tells which writes SQLite rolled back, kv_log_check). */
        char *sql = sqlite3_mprintf(
            "CREATE TABLE \"%w\".\"%w\"(seq INTEGER PRIMARY KEY AUTOINCREMENT, "
            "txn INTEGER NOT NULL, id INTEGER NOT NULL, vec BLOB)",
            t->schema, t->log);
        rc = sql ? sqlite3_exec(db, sql, NULL, NULL, err) : SQLITE_NOMEM;
        sqlite3_free(sql);
        if (rc)
            goto fail;
    }

    rc = sqlite3_declare_vtab(db, "CREATE TABLE x(embedding, distance HIDDEN, "
                                  "k HIDDEN, ef HIDDEN)");
    if (rc)
        goto fail;
    /* INSERT OR IGNORE / OR REPLACE on a rowid in use (kv_update). */
    sqlite3_vtab_config(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1);
    sqlite3_free(opt_path);
    kv_registry_add(t);
    t->registered = 1;
    *out = &t->base;
    return SQLITE_OK;
fail:
    sqlite3_free(opt_path);
    table_free(t);
    return rc;
}

static int
kv_create(sqlite3 *db, void *aux, int argc, const char *const *argv,
          sqlite3_vtab **out, char **err)
{
    return table_init(db, aux, argc, argv, out, err, 1);
}

static int
kv_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
           sqlite3_vtab **out, char **err)
{
    return table_init(db, aux, argc, argv, out, err, 0);
}

static int
kv_disconnect(sqlite3_vtab *vt)
{
    table_free((kv_table *)vt);
    return SQLITE_OK;
}

/* DROP TABLE: the log table and the index file go with it. */
static int
kv_destroy(sqlite3_vtab *vt)
{
    kv_table *t = (kv_table *)vt;
    mem_detach(t, 1);
    t->mem_serial = 0;
    keel_close(t->writer);
    keel_close(t->reader);
    t->writer = t->reader = NULL;
    sqlite3_finalize(t->log_insert);
    sqlite3_finalize(t->log_state);
    sqlite3_finalize(t->log_has);
    t->log_insert = t->log_state = t->log_has = NULL;
    char *sql = sqlite3_mprintf("DROP TABLE IF EXISTS \"%w\".\"%w\"",
                                t->schema, t->log);
    int rc = sql ? sqlite3_exec(t->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
    sqlite3_free(sql);
    if (rc)
        return rc;
    if (t->path) {
        /* The file, and keel's undo log beside it (doc/format.md). */
        sqlite3_vfs *vfs = kv_table_vfs(t);
        char *undo = sqlite3_mprintf("%s.undo", t->path);
        int res = 0;
        if (vfs && kv_file_exists(t))
            vfs->xDelete(vfs, t->path, 1);
        if (vfs && undo &&
            !vfs->xAccess(vfs, undo, SQLITE_ACCESS_EXISTS, &res) && res)
            vfs->xDelete(vfs, undo, 1);
        sqlite3_free(undo);
    }
    table_free(t);
    return SQLITE_OK;
}

static int
kv_rename(sqlite3_vtab *vt, const char *to)
{
    kv_table *t = (kv_table *)vt;
    return kv_error(t, "keel table %s cannot be renamed to %s: its index file "
                    "and change log are named after it\nhelp: create a keel "
                    "table under the new name and copy the rows over "
                    "(INSERT INTO new(rowid, embedding) SELECT rowid, "
                    "embedding FROM %s)", t->name, to, t->name);
}

static int
kv_shadow_name(const char *suffix)
{
    return !sqlite3_stricmp(suffix, "keel_log");
}

static sqlite3_module keel_module = {
    .iVersion = 3,
    .xCreate = kv_create,
    .xConnect = kv_connect,
    .xBestIndex = kv_best_index,
    .xDisconnect = kv_disconnect,
    .xDestroy = kv_destroy,
    .xOpen = kv_open_cursor,
    .xClose = kv_close_cursor,
    .xFilter = kv_filter,
    .xNext = kv_next,
    .xEof = kv_eof,
    .xColumn = kv_column,
    .xRowid = kv_rowid,
    .xUpdate = kv_update,
    .xBegin = kv_begin,
    .xSync = kv_sync,
    .xCommit = kv_commit,
    .xRollback = kv_rollback,
    .xRename = kv_rename,
    .xSavepoint = kv_savepoint,
    .xRelease = kv_release,
    .xRollbackTo = kv_rollback_to,
    .xShadowName = kv_shadow_name,
};

/* --- keel_search('table', query, k [, ef]) ------------------------------ */

/* An eponymous table-valued function: runs the table's k-NN query through
** SQL (so it takes the table's own read path and transaction state) and
** returns (id, distance) rows. */
enum { KS_ID, KS_DISTANCE, KS_TABLE, KS_QUERY, KS_K, KS_EF };

typedef struct {
    sqlite3_vtab base;
    sqlite3 *db;
} ks_table;

typedef struct {
    sqlite3_vtab_cursor base;
    sqlite3_stmt *stmt;
    int eof;
} ks_cursor;

static int
ks_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
           sqlite3_vtab **out, char **err)
{
    (void)aux;
    (void)argc;
    (void)argv;
    (void)err;
    int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(id, distance, "
                                      "tbl HIDDEN, query HIDDEN, k HIDDEN, "
                                      "ef HIDDEN)");
    if (rc)
        return rc;
    ks_table *t = sqlite3_malloc(sizeof *t);
    if (!t)
        return SQLITE_NOMEM;
    memset(t, 0, sizeof *t);
    t->db = db;
    *out = &t->base;
    return SQLITE_OK;
}

static int
ks_disconnect(sqlite3_vtab *vt)
{
    sqlite3_free(vt);
    return SQLITE_OK;
}

static int
ks_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
    int at[6] = {-1, -1, -1, -1, -1, -1};
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->iColumn < KS_TABLE || c->op != SQLITE_INDEX_CONSTRAINT_EQ)
            continue;
        if (!c->usable)
            return SQLITE_CONSTRAINT;
        at[c->iColumn] = i;
    }
    if (at[KS_TABLE] < 0 || at[KS_QUERY] < 0 || at[KS_K] < 0) {
        sqlite3_free(vt->zErrMsg);
        vt->zErrMsg = sqlite3_mprintf(
            "keel_search needs a table, a query and k\nhelp: SELECT id, "
            "distance FROM keel_search('docs_vec', :query, 10)");
        return SQLITE_ERROR;
    }
    int n = 0;
    for (int c = KS_TABLE; c <= KS_EF; c++)
        if (at[c] >= 0) {
            info->aConstraintUsage[at[c]].argvIndex = ++n;
            info->aConstraintUsage[at[c]].omit = 1;
        }
    info->idxNum = at[KS_EF] >= 0;
    info->estimatedCost = 10;
    info->estimatedRows = 10;
    if (info->nOrderBy == 1 && info->aOrderBy[0].iColumn == KS_DISTANCE &&
        !info->aOrderBy[0].desc)
        info->orderByConsumed = 1;
    return SQLITE_OK;
}

static int
ks_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out)
{
    (void)vt;
    ks_cursor *c = sqlite3_malloc(sizeof *c);
    if (!c)
        return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    c->eof = 1;
    *out = &c->base;
    return SQLITE_OK;
}

static int
ks_close(sqlite3_vtab_cursor *cur)
{
    ks_cursor *c = (ks_cursor *)cur;
    sqlite3_finalize(c->stmt);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int
ks_step(ks_cursor *c)
{
    int rc = sqlite3_step(c->stmt);
    if (rc == SQLITE_ROW) {
        c->eof = 0;
        return SQLITE_OK;
    }
    c->eof = 1;
    if (rc == SQLITE_DONE)
        return SQLITE_OK;
    ks_table *t = (ks_table *)c->base.pVtab;
    sqlite3_free(t->base.zErrMsg);
    t->base.zErrMsg = sqlite3_mprintf("%s", sqlite3_errmsg(t->db));
    return rc;
}

static int
ks_filter(sqlite3_vtab_cursor *cur, int plan, const char *plan_str, int argc,
          sqlite3_value **argv)
{
    (void)plan_str;
    ks_cursor *c = (ks_cursor *)cur;
    ks_table *t = (ks_table *)cur->pVtab;
    sqlite3_finalize(c->stmt);
    c->stmt = NULL;
    c->eof = 1;
    if (argc < 3)
        return SQLITE_ERROR;
    const char *name = (const char *)sqlite3_value_text(argv[0]);
    if (!name || sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        sqlite3_free(t->base.zErrMsg);
        t->base.zErrMsg = sqlite3_mprintf(
            "keel_search's first argument is not a table's name\nhelp: "
            "keel_search('docs_vec', :query, 10)");
        return SQLITE_ERROR;
    }
    char *sql = sqlite3_mprintf(
        "SELECT rowid, distance FROM \"%w\" WHERE embedding MATCH ?1 AND "
        "k = ?2%s ORDER BY distance", name, plan ? " AND ef = ?3" : "");
    if (!sql)
        return SQLITE_NOMEM;
    int rc = sqlite3_prepare_v2(t->db, sql, -1, &c->stmt, NULL);
    sqlite3_free(sql);
    if (rc) {
        sqlite3_free(t->base.zErrMsg);
        t->base.zErrMsg = sqlite3_mprintf(
            "keel_search('%s'): %s\nhelp: name a keel table, as in "
            "keel_search('docs_vec', :query, 10)", name,
            sqlite3_errmsg(t->db));
        return rc;
    }
    for (int i = 1; i < argc && i <= 3; i++)
        sqlite3_bind_value(c->stmt, i, argv[i]);
    return ks_step(c);
}

static int
ks_next(sqlite3_vtab_cursor *cur)
{
    return ks_step((ks_cursor *)cur);
}

static int
ks_eof(sqlite3_vtab_cursor *cur)
{
    return ((ks_cursor *)cur)->eof;
}

static int
ks_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    ks_cursor *c = (ks_cursor *)cur;
    if (col == KS_ID || col == KS_DISTANCE)
        sqlite3_result_value(ctx, sqlite3_column_value(c->stmt, col));
    return SQLITE_OK;
}

static int
ks_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid)
{
    *rowid = sqlite3_column_int64(((ks_cursor *)cur)->stmt, 0);
    return SQLITE_OK;
}

static sqlite3_module keel_search_module = {
    .iVersion = 0,
    .xCreate = NULL, /* eponymous only */
    .xConnect = ks_connect,
    .xBestIndex = ks_best_index,
    .xDisconnect = ks_disconnect,
    .xDestroy = ks_disconnect,
    .xOpen = ks_open,
    .xClose = ks_close,
    .xFilter = ks_filter,
    .xNext = ks_next,
    .xEof = ks_eof,
    .xColumn = ks_column,
    .xRowid = ks_rowid,
};

/* --- entry point -------------------------------------------------------- */

int sqlite3_keelsqlite_init(sqlite3 *db, char **err,
                            const sqlite3_api_routines *api);
int sqlite3_extension_init(sqlite3 *db, char **err,
                           const sqlite3_api_routines *api);

/* load_extension('keel_sqlite') finds this by the file's name. */
int
sqlite3_keelsqlite_init(sqlite3 *db, char **err,
                        const sqlite3_api_routines *api)
{
    SQLITE_EXTENSION_INIT2(api);
    if (sqlite3_libversion_number() < 3038000) {
        *err = sqlite3_mprintf(
            "keel_sqlite needs SQLite 3.38 or newer (this is %s)\nhelp: "
            "upgrade SQLite; keel pushes IN lists down with "
            "sqlite3_vtab_in, new in 3.38", sqlite3_libversion());
        return SQLITE_ERROR;
    }
    kv_conn *conn = sqlite3_malloc(sizeof *conn);
    if (!conn)
        return SQLITE_NOMEM;
    memset(conn, 0, sizeof *conn);
    int rc = sqlite3_create_module_v2(db, "keel", &keel_module, conn,
                                      conn_free);
    if (!rc)
        rc = sqlite3_create_module_v2(db, "keel_search", &keel_search_module,
                                      NULL, NULL);
    if (!rc)
        rc = kv_admin_register(db);
    return rc;
}

int
sqlite3_extension_init(sqlite3 *db, char **err,
                       const sqlite3_api_routines *api)
{
    return sqlite3_keelsqlite_init(db, err, api);
}
