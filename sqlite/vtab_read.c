/* vtab_read.c -- queries on a keel table: xBestIndex's plans, cursors,
** xFilter (the vectors a query gives are read by vtab_value.c).
**
** Plans (idxNum bits; xFilter's arguments come in this order):
**
**   PLAN_KNN    embedding MATCH ?  (the query)       k nearest, by distance
**   PLAN_K      k = ?              (or a LIMIT, when SQLite offers one:
**                                  3.41 and later hand it to a table
**                                  queried alone; 3.40 does not)
**   PLAN_EF     ef = ?             the search's candidate list
**   PLAN_EQ     rowid = ?          an allow-list of one / a lookup
**   PLAN_IN     rowid IN (...)     all values at once (sqlite3_vtab_in): the
**                                  allow-list of a k-NN search, so that the
**                                  k nearest OF THE LIST come back (exact
**                                  filtered results, not a post-filter)
**   none of these                  every live row, by keel_ids pages
**
** A k-NN plan with rowid = ? from a join's other table (one search per outer
** row) costs more than the k-NN first, so that SQLite runs the search once
** and looks the other table up by rowid, the usual shape of a vector join.
** A filter on the other table reaches the search as
** rowid IN (SELECT rowid FROM docs WHERE ...) (doc/sqlite.md).
*/
#include "vtab.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    PLAN_KNN = 1,
    PLAN_K = 2,
    PLAN_EF = 4,
    PLAN_EQ = 8,
    PLAN_IN = 16
};

#define SCAN_PAGE 4096

typedef struct kv_cursor {
    sqlite3_vtab_cursor base;
    keel_result *rows;  /* this cursor's rows (distance used by k-NN) */
    size_t n, i, cap;
    int knn;            /* rows carry distances */
    int scan;           /* rows are a page of keel_ids; more may follow */
    int scan_more;      /* the last page was full */
    float *query;       /* dim floats, 64-byte aligned in query_mem */
    void *query_mem;
} kv_cursor;

/* --- plans -------------------------------------------------------------- */

int
kv_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
    int match = -1, k = -1, ef = -1, eq = -1, in = -1, limit = -1;
    int match_seen = 0, k_seen = 0, ef_seen = 0;
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (c->op == SQLITE_INDEX_CONSTRAINT_MATCH &&
            c->iColumn == KV_COL_EMBEDDING) {
            match_seen = 1;
            if (c->usable)
                match = i;
        } else if (c->op == SQLITE_INDEX_CONSTRAINT_EQ &&
                   c->iColumn == KV_COL_K) {
            k_seen = 1;
            if (c->usable)
                k = i;
        } else if (c->op == SQLITE_INDEX_CONSTRAINT_EQ &&
                   c->iColumn == KV_COL_EF) {
            ef_seen = 1;
            if (c->usable)
                ef = i;
            else
                return SQLITE_CONSTRAINT;
        } else if (c->op == SQLITE_INDEX_CONSTRAINT_EQ && c->iColumn < 0 &&
                   c->usable) {
            if (sqlite3_vtab_in(info, i, -1)) {
                if (in < 0)
                    in = i;
            } else if (eq < 0)
                eq = i;
        } else if (c->op == SQLITE_INDEX_CONSTRAINT_LIMIT && c->usable) {
            limit = i;
        }
    }
    if (!match_seen && (k_seen || ef_seen)) {
        /* Without a query, k and ef select nothing: say so, rather than
         * return no rows (the hidden columns read as NULL). */
        kv_table *t = (kv_table *)vt;
        return kv_error(t, "%s: %s is given without a MATCH query\nhelp: "
                        "search with WHERE embedding MATCH :query AND k = 10",
                        t->name, k_seen ? "k" : "ef");
    }
    if (match_seen && match < 0)
        return SQLITE_CONSTRAINT; /* the query comes from a later table */
    if (match >= 0 && k < 0) {
        if (k_seen)
            return SQLITE_CONSTRAINT;
        if (limit < 0) {
            /* Maybe offered with a LIMIT in another call; if SQLite ends up
             * here, xFilter says what is missing. */
            info->idxNum = PLAN_KNN;
            info->aConstraintUsage[match].argvIndex = 1;
            info->estimatedCost = 1e300;
            return SQLITE_OK;
        }
        k = limit; /* ORDER BY distance LIMIT n: n nearest */
    }

    int plan = 0, argv = 0;
    double cost;
    if (match >= 0) {
        plan |= PLAN_KNN | PLAN_K;
        info->aConstraintUsage[match].argvIndex = ++argv;
        info->aConstraintUsage[match].omit = 1;
        info->aConstraintUsage[k].argvIndex = ++argv;
        info->aConstraintUsage[k].omit = 1;
        if (ef >= 0) {
            plan |= PLAN_EF;
            info->aConstraintUsage[ef].argvIndex = ++argv;
            info->aConstraintUsage[ef].omit = 1;
        }
        cost = 1000;
        info->estimatedRows = 10;
        if (info->nOrderBy == 1 && info->aOrderBy[0].iColumn == KV_COL_DISTANCE
            && !info->aOrderBy[0].desc)
            info->orderByConsumed = 1;
    } else {
        cost = 1e7; /* a scan of every row */
        info->estimatedRows = 1000000;
    }
    if (in >= 0) {
        plan |= PLAN_IN;
        sqlite3_vtab_in(info, in, 1);
        info->aConstraintUsage[in].argvIndex = ++argv;
        info->aConstraintUsage[in].omit = 1;
        cost = match >= 0 ? 500 : 100;
        info->estimatedRows = match >= 0 ? 10 : 100;
    } else if (eq >= 0) {
        plan |= PLAN_EQ;
        info->aConstraintUsage[eq].argvIndex = ++argv;
        info->aConstraintUsage[eq].omit = 1;
        /* One search per outer row of a join costs more than one search
         * first (see the banner); a lookup by rowid alone is cheap. */
        cost = match >= 0 ? 1e6 : 1;
        info->estimatedRows = 1;
        if (match < 0)
            info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
    }
    info->idxNum = plan;
    info->estimatedCost = cost;
    return SQLITE_OK;
}

/* --- cursors ------------------------------------------------------------ */

int
kv_open_cursor(sqlite3_vtab *vt, sqlite3_vtab_cursor **out)
{
    kv_table *t = (kv_table *)vt;
    kv_cursor *c = sqlite3_malloc(sizeof *c);
    if (!c)
        return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    /* Aligned to a cache line: every distance of the search loads the
     * query, and 8-byte aligned loads straddle lines (measured: 20 to 50 us
     * more per GloVe search at ef 16 to 128). */
    c->query_mem = sqlite3_malloc64((sqlite3_uint64)t->dim * sizeof(float) +
                                    64);
    if (!c->query_mem) {
        sqlite3_free(c);
        return SQLITE_NOMEM;
    }
    c->query = (float *)(((uintptr_t)c->query_mem + 63) & ~(uintptr_t)63);
    *out = &c->base;
    return SQLITE_OK;
}

int
kv_close_cursor(sqlite3_vtab_cursor *cur)
{
    kv_cursor *c = (kv_cursor *)cur;
    sqlite3_free(c->rows);
    sqlite3_free(c->query_mem);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int
rows_reserve(kv_cursor *c, size_t n)
{
    if (n <= c->cap)
        return SQLITE_OK;
    size_t cap = c->cap ? c->cap : 16;
    while (cap < n)
        cap *= 2;
    keel_result *r = sqlite3_realloc64(c->rows, cap * sizeof *r);
    if (!r)
        return SQLITE_NOMEM;
    c->rows = r;
    c->cap = cap;
    return SQLITE_OK;
}

/* An integer argument (k, ef) in [1, hi]. */
static int
int_arg(kv_table *t, sqlite3_value *v, const char *name, long long hi,
        long long *out)
{
    if (sqlite3_value_type(v) != SQLITE_INTEGER)
        return kv_error(t, "%s: %s is %s, not a whole number\nhelp: write "
                        "%s = 10 (a whole number from 1 to %lld)", t->name,
                        name, kv_type_name(sqlite3_value_type(v)), name, hi);
    long long x = sqlite3_value_int64(v);
    if (x < 1 || x > hi)
        return kv_error(t, "%s: %s = %lld is out of range\nhelp: a whole "
                        "number from 1 to %lld", t->name, name, x, hi);
    *out = x;
    return SQLITE_OK;
}

/* The rowid a value names, as a rowid table compares it: an INTEGER, a
** REAL with a whole value, or TEXT holding one of those. 0: none. */
static int
rowid_value(sqlite3_value *x, sqlite3_int64 *id)
{
    int type = sqlite3_value_type(x);
    double d;
    if (type == SQLITE_INTEGER) {
        *id = sqlite3_value_int64(x);
        return 1;
    }
    if (type == SQLITE_TEXT) {
        const char *s = (const char *)sqlite3_value_text(x);
        char *end;
        if (!s)
            return 0;
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
            s++;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end != s && errno == 0) {
            while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
                end++;
            if (!*end) {
                *id = v;
                return 1;
            }
        }
        d = strtod(s, &end);
        if (end == s)
            return 0;
        while (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')
            end++;
        if (*end)
            return 0;
    } else if (type == SQLITE_FLOAT)
        d = sqlite3_value_double(x);
    else
        return 0;
    /* A whole number within int64 (2^63 itself is out). */
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) ||
        d != (double)(sqlite3_int64)d)
        return 0;
    *id = (sqlite3_int64)d;
    return 1;
}

/* The rowids of rowid = ? (one) or rowid IN (...) (all at once) into *ids
** (sqlite3_malloc'd) and *n. Values that are not integers match nothing. */
static int
rowid_list(sqlite3_value *v, int in, uint64_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    size_t cap = 0;
    sqlite3_value *x = v;
    int rc = in ? sqlite3_vtab_in_first(v, &x) : SQLITE_OK;
    while (rc == SQLITE_OK && x) {
        sqlite3_int64 id;
        if (rowid_value(x, &id)) {
            if (kv_grow(ids, &cap, *n, sizeof **ids)) {
                sqlite3_free(*ids);
                *ids = NULL;
                return SQLITE_NOMEM;
            }
            (*ids)[(*n)++] = (uint64_t)id;
        }
        if (!in)
            break;
        rc = sqlite3_vtab_in_next(v, &x);
    }
    if (rc == SQLITE_DONE)
        rc = SQLITE_OK;
    if (rc) {
        sqlite3_free(*ids);
        *ids = NULL;
    }
    return rc;
}

/* The next page of live ids after the last row (a scan). */
static int
scan_page(kv_cursor *c, kv_table *t, keel_index *h, uint64_t after)
{
    int rc = rows_reserve(c, SCAN_PAGE);
    if (rc)
        return rc;
    uint64_t ids[256];
    size_t got = 0;
    c->n = c->i = 0;
    /* keel_ids fills a plain id array: read it in slices into rows. */
    while (got < SCAN_PAGE) {
        size_t want = SCAN_PAGE - got < 256 ? SCAN_PAGE - got : 256, n;
        int krc = keel_ids(h, after, ids, want, &n);
        if (krc)
            return kv_keel_error(t, krc, "listing the ids");
        for (size_t j = 0; j < n; j++) {
            c->rows[c->n].id = ids[j];
            c->rows[c->n].distance = NAN;
            c->n++;
        }
        got += n;
        if (n < want) {
            c->scan_more = 0;
            return SQLITE_OK;
        }
        after = ids[n - 1];
    }
    c->scan_more = 1;
    return SQLITE_OK;
}

int
kv_filter(sqlite3_vtab_cursor *cur, int plan, const char *plan_str, int argc,
          sqlite3_value **argv)
{
    (void)plan_str;
    kv_cursor *c = (kv_cursor *)cur;
    kv_table *t = (kv_table *)cur->pVtab;
    c->n = c->i = 0;
    c->knn = c->scan = c->scan_more = 0;
    keel_index *h;
    int rc = kv_read_handle(t, &h);
    if (rc)
        return rc;
    int a = 0;
    uint64_t *ids = NULL;
    size_t nids = 0;
    long long k = 0, ef = 0;
    if ((plan & PLAN_KNN) && !(plan & PLAN_K))
        return kv_error(t, "a MATCH on %s.embedding needs k, how many "
                        "nearest to return\nhelp: add AND k = 10", t->name);
    if (plan & PLAN_KNN) {
        if ((rc = kv_value_vector(t, argv[a++], "the MATCH query", c->query)))
            return rc;
        if ((rc = int_arg(t, argv[a++], "k", 1000000, &k)))
            return rc;
    }
    if ((plan & PLAN_EF) && (rc = int_arg(t, argv[a++], "ef", 1000000, &ef)))
        return rc;
    if (plan & (PLAN_EQ | PLAN_IN)) {
        if (a >= argc)
            return SQLITE_ERROR;
        if ((rc = rowid_list(argv[a++], !!(plan & PLAN_IN), &ids, &nids)))
            return rc;
    }

    if (plan & PLAN_KNN) {
        keel_search_params p = {0};
        p.ef = (uint32_t)ef;
        if (plan & (PLAN_EQ | PLAN_IN)) {
            /* A non-NULL pointer with n 0 matches nothing. */
            p.allowed = ids ? ids : (const uint64_t *)c->query;
            p.n_allowed = nids;
        }
        if ((rc = rows_reserve(c, (size_t)k)) == SQLITE_OK) {
            int krc = keel_search(h, c->query, (size_t)k, &p, c->rows, &c->n);
            if (krc)
                rc = kv_keel_error(t, krc, "searching");
        }
        c->knn = 1;
    } else if (plan & (PLAN_EQ | PLAN_IN)) {
        /* Lookups: the live ones, in the list's order. */
        if ((rc = rows_reserve(c, nids ? nids : 1)) == SQLITE_OK) {
            for (size_t j = 0; j < nids; j++) {
                int krc = keel_get(h, ids[j], t->tmp);
                if (krc == KEEL_ENOTFOUND)
                    continue;
                if (krc) {
                    rc = kv_keel_error(t, krc, "reading a vector");
                    break;
                }
                c->rows[c->n].id = ids[j];
                c->rows[c->n].distance = NAN;
                c->n++;
            }
        }
    } else {
        c->scan = 1;
        rc = scan_page(c, t, h, KEEL_IDS_FIRST);
    }
    sqlite3_free(ids);
    return rc;
}

int
kv_next(sqlite3_vtab_cursor *cur)
{
    kv_cursor *c = (kv_cursor *)cur;
    c->i++;
    if (c->i >= c->n && c->scan && c->scan_more) {
        /* The handle of now: a commit may have closed the writer. */
        kv_table *t = (kv_table *)cur->pVtab;
        keel_index *h;
        int rc = kv_read_handle(t, &h);
        if (rc)
            return rc;
        return scan_page(c, t, h, c->rows[c->n - 1].id);
    }
    return SQLITE_OK;
}

int
kv_eof(sqlite3_vtab_cursor *cur)
{
    kv_cursor *c = (kv_cursor *)cur;
    return c->i >= c->n;
}

int
kv_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col)
{
    kv_cursor *c = (kv_cursor *)cur;
    kv_table *t = (kv_table *)cur->pVtab;
    const keel_result *r = &c->rows[c->i];
    if (col == KV_COL_DISTANCE) {
        if (c->knn)
            sqlite3_result_double(ctx, r->distance);
        return SQLITE_OK;
    }
    if (col != KV_COL_EMBEDDING)
        return SQLITE_OK;
    keel_index *h;
    int rc = kv_read_handle(t, &h);
    if (rc)
        return rc;
    if (keel_get(h, r->id, t->tmp))
        return SQLITE_OK; /* gone since: NULL */
    sqlite3_result_blob(ctx, t->tmp, (int)(t->dim * sizeof(float)),
                        SQLITE_TRANSIENT);
    return SQLITE_OK;
}

int
kv_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *rowid)
{
    kv_cursor *c = (kv_cursor *)cur;
    *rowid = (sqlite3_int64)c->rows[c->i].id;
    return SQLITE_OK;
}

/* --- the read handle ---------------------------------------------------- */

int
kv_read_handle(kv_table *t, keel_index **out)
{
    if (t->broken)
        return kv_error(t, "%s", t->broken);
    if (t->writer) {
        *out = t->writer;
        return kv_log_check(t);
    }
    if (!t->reader) {
        keel_options o = {0};
        o.ef_search = t->opt.ef_search;
        int krc = keel_open_reader(t->path, &o, &t->reader);
        if (krc)
            return kv_keel_error(t, krc, "opening the index");
        if (keel_dim(t->reader) != t->dim) {
            uint32_t d = keel_dim(t->reader);
            keel_close(t->reader);
            t->reader = NULL;
            return kv_error(t, "%s: the index file %s holds vectors of %u "
                            "dimensions, but the table says dim=%u\nhelp: "
                            "the file belongs to another table; put this "
                            "table's file back", t->name, t->path, d, t->dim);
        }
    }
    int rc = kv_reader_check(t);
    if (rc)
        return rc;
    *out = t->reader;
    return SQLITE_OK;
}
