/* admin.c -- maintenance of keel tables from SQL: keel_stats, keel_check
** and keel_compact, scalar functions of a table's name.
**
**   SELECT keel_stats('docs_vec');    a JSON object: count, deleted, dim,
**                                     metric, file_bytes, log_rows, ...
**   SELECT keel_check('docs_vec');    'ok', or keel_check's error
**   SELECT keel_compact('docs_vec');  rewrites the index file without its
**                                     deleted vectors; readers follow
**
** The functions find the table's connected instance through a registry of
** the keel tables connected in the process (by connection, schema, name),
** connecting it first if this connection has not used it yet.
*/
#include "vtab.h"

#include <string.h>

/* The connected keel tables. Guarded by registry_mutex (SQLite's static
** application mutex, so it exists before any table). */
static kv_table *registry;

static sqlite3_mutex *
registry_mutex(void)
{
    return sqlite3_mutex_alloc(SQLITE_MUTEX_STATIC_APP1);
}

void
kv_registry_add(kv_table *t)
{
    sqlite3_mutex_enter(registry_mutex());
    t->next = registry;
    registry = t;
    sqlite3_mutex_leave(registry_mutex());
}

void
kv_registry_remove(kv_table *t)
{
    sqlite3_mutex_enter(registry_mutex());
    for (kv_table **p = &registry; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    sqlite3_mutex_leave(registry_mutex());
}

static kv_table *
registry_find(sqlite3 *db, const char *schema, const char *name)
{
    kv_table *found = NULL;
    sqlite3_mutex_enter(registry_mutex());
    for (kv_table *t = registry; t && !found; t = t->next)
        if (t->db == db && !sqlite3_stricmp(t->schema, schema) &&
            !sqlite3_stricmp(t->name, name))
            found = t;
    sqlite3_mutex_leave(registry_mutex());
    return found;
}

/* Whether database schema of db holds a table named name. */
static int
schema_has(sqlite3 *db, const char *schema, const char *name)
{
    if (!schema)
        return 0;
    char *sql = sqlite3_mprintf("SELECT 1 FROM \"%w\".sqlite_schema WHERE "
                                "type = 'table' AND name = ?1 COLLATE NOCASE",
                                schema);
    sqlite3_stmt *st = NULL;
    int has = 0;
    if (sql && sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        has = sqlite3_step(st) == SQLITE_ROW;
    }
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return has;
}

/* The keel table named by the function's first argument, connected. Sets
** the function's error and returns NULL if there is none. */
static kv_table *
table_arg(sqlite3_context *ctx, sqlite3_value *arg, const char *fn)
{
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    const char *name = (const char *)sqlite3_value_text(arg);
    if (!name || sqlite3_value_type(arg) != SQLITE_TEXT) {
        char *m = sqlite3_mprintf("%s takes a keel table's name\nhelp: "
                                  "SELECT %s('docs_vec')", fn, fn);
        sqlite3_result_error(ctx, m ? m : "out of memory", -1);
        sqlite3_free(m);
        return NULL;
    }
    /* The schema the name means in SQL: "aux.docs_vec", or the first of
     * temp, main and the attached databases that has the table, the order
     * in which SQLite resolves a name without one. */
    char *schema = NULL, *table = NULL;
    const char *dot = strchr(name, '.');
    if (dot && schema_has(db, (schema = sqlite3_mprintf("%.*s",
                                        (int)(dot - name), name)), dot + 1))
        table = sqlite3_mprintf("%s", dot + 1);
    else {
        sqlite3_free(schema);
        schema = NULL;
        sqlite3_stmt *dbs = NULL;
        if (sqlite3_prepare_v2(db, "SELECT name FROM pragma_database_list "
                               "ORDER BY seq <> 1, seq", -1, &dbs,
                               NULL) == SQLITE_OK)
            while (!schema && sqlite3_step(dbs) == SQLITE_ROW) {
                const char *s = (const char *)sqlite3_column_text(dbs, 0);
                if (s && schema_has(db, s, name))
                    schema = sqlite3_mprintf("%s", s);
            }
        sqlite3_finalize(dbs);
        table = sqlite3_mprintf("%s", name);
    }
    kv_table *t = NULL;
    if (schema && table && !(t = registry_find(db, schema, table))) {
        /* Not used by this connection yet: preparing a read connects it. */
        char *sql = sqlite3_mprintf("SELECT rowid FROM \"%w\".\"%w\" LIMIT 0",
                                    schema, table);
        sqlite3_stmt *st = NULL;
        if (sql)
            sqlite3_prepare_v2(db, sql, -1, &st, NULL);
        sqlite3_free(sql);
        t = registry_find(db, schema, table);
        sqlite3_finalize(st);
    }
    sqlite3_free(schema);
    sqlite3_free(table);
    if (!t) {
        char *m = sqlite3_mprintf("%s: no keel table named %s\nhelp: name a "
                                  "table made with CREATE VIRTUAL TABLE ... "
                                  "USING keel(...)", fn, name);
        sqlite3_result_error(ctx, m ? m : "out of memory", -1);
        sqlite3_free(m);
    }
    return t;
}

/* Passes the table's error (set by kv_* calls) to the function's result. */
static void
table_error(sqlite3_context *ctx, kv_table *t, int rc)
{
    sqlite3_result_error(ctx, t->base.zErrMsg ? t->base.zErrMsg
                                              : sqlite3_errstr(rc), -1);
    sqlite3_result_error_code(ctx, rc);
    sqlite3_free(t->base.zErrMsg);
    t->base.zErrMsg = NULL;
}

/* The table fn names in value, with the handle its reads go through (after
** the index is made to agree with the committed log); NULL with the
** function's error set. */
static kv_table *
table_to_read(sqlite3_context *ctx, sqlite3_value *value, const char *fn,
              keel_index **h)
{
    kv_table *t = table_arg(ctx, value, fn);
    if (!t)
        return NULL;
    int rc = kv_read_handle(t, h);
    if (rc) {
        table_error(ctx, t, rc);
        return NULL;
    }
    return t;
}

static const char *
metric_name(keel_metric m)
{
    return m == KEEL_COSINE ? "cosine" : m == KEEL_IP ? "ip" : "l2";
}

static void
fn_stats(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    keel_index *h;
    kv_table *t = table_to_read(ctx, argv[0], "keel_stats", &h);
    if (!t)
        return;
    keel_stats s;
    int krc = keel_stat(h, &s);
    if (krc) {
        table_error(ctx, t, kv_keel_error(t, krc, "keel_stats"));
        return;
    }
    sqlite3_int64 log_rows = 0;
    if (t->path) {
        char *sql = sqlite3_mprintf("SELECT count(*) FROM \"%w\".\"%w\"",
                                    t->schema, t->log);
        sqlite3_stmt *st = NULL;
        if (sql && sqlite3_prepare_v2(t->db, sql, -1, &st, NULL) == SQLITE_OK
            && sqlite3_step(st) == SQLITE_ROW)
            log_rows = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        sqlite3_free(sql);
    }
    /* The path as a JSON string: quotes and backslashes escaped. */
    const char *path = t->path ? t->path : ":memory:";
    char *esc = sqlite3_malloc64(2 * strlen(path) + 1);
    if (!esc) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    char *e = esc;
    for (const char *c = path; *c; c++) {
        if (*c == '"' || *c == '\\')
            *e++ = '\\';
        *e++ = (unsigned char)*c < 0x20 ? '?' : *c;
    }
    *e = 0;
    char *json = sqlite3_mprintf(
        "{\"path\":\"%s\",\"dim\":%u,\"metric\":\"%s\",\"precision\":\"%s\","
        "\"codes\":\"%s\",\"M\":%u,\"count\":%llu,\"deleted\":%llu,"
        "\"next_id\":%llu,\"max_level\":%u,\"file_bytes\":%llu,"
        "\"allocated_bytes\":%llu,\"snapshot\":%llu,\"log_rows\":%lld}",
        esc, s.dim, metric_name(s.metric),
        s.precision == KEEL_F16 ? "f16" : "f32",
        s.codes == KEEL_CODES_I8 ? "i8" : s.codes == KEEL_CODES_I4 ? "i4"
                                                                : "none",
        s.max_connections, (unsigned long long)s.count,
        (unsigned long long)s.deleted, (unsigned long long)s.next_id,
        s.max_level, (unsigned long long)s.file_bytes,
        (unsigned long long)s.allocated_bytes,
        (unsigned long long)s.snapshot, (long long)log_rows);
    sqlite3_free(esc);
    if (!json) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    sqlite3_result_text(ctx, json, -1, sqlite3_free);
}

static void
fn_check(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    keel_index *h;
    kv_table *t = table_to_read(ctx, argv[0], "keel_check", &h);
    if (!t)
        return;
    int krc = keel_check(h);
    if (krc) {
        table_error(ctx, t, kv_keel_error(t, krc, "keel_check"));
        return;
    }
    sqlite3_result_text(ctx, "ok", -1, SQLITE_STATIC);
}

static void
fn_compact(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    kv_table *t = table_arg(ctx, argv[0], "keel_compact");
    if (!t)
        return;
    if (t->broken) {
        kv_error(t, "%s", t->broken);
        table_error(ctx, t, SQLITE_ERROR);
        return;
    }
    if (t->in_txn && (t->path ? t->writer != NULL : t->nundo > 0)) {
        kv_error(t, "keel_compact: %s has changes in this connection's open "
                 "transaction\nhelp: COMMIT or ROLLBACK first (compaction "
                 "commits the index)", t->name);
        table_error(ctx, t, SQLITE_ERROR);
        return;
    }
    keel_index *w = t->writer;
    int krc = KEEL_OK;
    if (!w && kv_check_file(t)) {
        table_error(ctx, t, SQLITE_ERROR);
        return;
    }
    if (!w) {
        /* Waits, as a write does, for another connection's commit. */
        for (int waited = 0;; waited += 2) {
            krc = keel_open(t->path, t->dim, &t->opt, &w);
            if (krc != KEEL_ELOCKED || waited >= 10000)
                break;
            sqlite3_sleep(2);
        }
        if (krc) {
            table_error(ctx, t, kv_keel_error(t, krc, "keel_compact"));
            return;
        }
    }
    krc = keel_compact(w);
    if (w != t->writer)
        keel_close(w);
    if (krc) {
        table_error(ctx, t, kv_keel_error(t, krc, "keel_compact"));
        return;
    }
    sqlite3_result_text(ctx, "ok", -1, SQLITE_STATIC);
}

int
kv_admin_register(sqlite3 *db)
{
    int rc = sqlite3_create_function(db, "keel_stats", 1, SQLITE_UTF8, NULL,
                                     fn_stats, NULL, NULL);
    if (!rc)
        rc = sqlite3_create_function(db, "keel_check", 1, SQLITE_UTF8, NULL,
                                     fn_check, NULL, NULL);
    if (!rc)
        rc = sqlite3_create_function(db, "keel_compact", 1, SQLITE_UTF8,
                                     NULL, fn_compact, NULL, NULL);
    return rc;
}
