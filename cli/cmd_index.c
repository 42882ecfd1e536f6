/* cmd_index.c -- the small commands on one index: info, check, delete, get
** and compact.
**
** info, check and get open a reader, which takes no lock and never writes,
** so they are safe on an index another process is writing. delete and
** compact need the writer.
*/
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const index_only[] = {"INDEX"};

/* --- info ---------------------------------------------------------------- */

/* The published version a reader of a URL serves, and the newest one
** listed there (0: the listing could not say). */
typedef struct published {
    int is_url;
    uint64_t version, newest;
} published;

static void
print_info_text(const char *path, const keel_stats *st, const published *pv)
{
    char a[32], b[32], n[32];

    /* Counts and byte totals with thousands separators, as every command's
    ** human output; ids and snapshot numbers as they are typed. */
    printf("%-16s %s\n", "path:", path);
    printf("%-16s %s\n", "dimensions:", cli_commas(st->dim, n, sizeof n));
    printf("%-16s %s\n", "metric:", cli_metric_name(st->metric));
    printf("%-16s %s\n", "precision:", cli_precision_name(st->precision));
    printf("%-16s %s\n", "codes:", cli_codes_name(st->codes));
    printf("%-16s %u\n", "M:", st->max_connections);
    printf("%-16s %s\n", "live vectors:", cli_commas(st->count, n, sizeof n));
    printf("%-16s %s\n", "deleted:", cli_commas(st->deleted, n, sizeof n));
    printf("%-16s %s\n", "slots:", cli_commas(st->slots, n, sizeof n));
    printf("%-16s %llu\n", "next id:", (unsigned long long)st->next_id);
    printf("%-16s %u\n", "max level:", st->max_level);
    printf("%-16s %s\n", "segments:", cli_commas(st->segments, n, sizeof n));
    printf("%-16s %s\n", "heap chunks:",
           cli_commas(st->heap_chunks, n, sizeof n));
    if (strncmp(path, "s3://", 5) == 0) {
        /* A published index: no file here, but its image and what this
        ** reader has fetched of it into memory. */
        printf("%-16s %s (%s, the published file's length)\n",
               "file bytes:", cli_commas(st->file_bytes, n, sizeof n),
               cli_bytes(st->file_bytes, a, sizeof a));
        printf("%-16s %s (%s of its pages fetched into memory)\n",
               "allocated bytes:",
               cli_commas(st->allocated_bytes, n, sizeof n),
               cli_bytes(st->allocated_bytes, b, sizeof b));
    } else {
        printf("%-16s %s (%s, the length ls -l shows)\n", "file bytes:",
               cli_commas(st->file_bytes, n, sizeof n),
               cli_bytes(st->file_bytes, a, sizeof a));
        printf("%-16s %s (%s on disk, as du shows)\n", "allocated bytes:",
               cli_commas(st->allocated_bytes, n, sizeof n),
               cli_bytes(st->allocated_bytes, b, sizeof b));
    }
    printf("%-16s %llu\n", "snapshot:", (unsigned long long)st->snapshot);
    if (pv->is_url && pv->newest)
        printf("%-16s %llu (the newest at the URL: %llu%s)\n", "version:",
               (unsigned long long)pv->version,
               (unsigned long long)pv->newest,
               pv->newest > pv->version ? "; keel versions lists them" : "");
    else if (pv->is_url)
        printf("%-16s %llu\n", "version:", (unsigned long long)pv->version);
}

/* Keys are the keys of Python's stats() (keel_stats' field names, with
** dimensions for dim), so scripts in either language read the same names. */
static void
print_info_json(const char *path, const keel_stats *st, const published *pv)
{
    fputs("{\"path\": ", stdout);
    cli_json_string(stdout, path);
    printf(", \"dimensions\": %u, \"metric\": \"%s\", \"precision\": \"%s\", "
           "\"codes\": \"%s\", \"max_connections\": %u, \"count\": %llu, "
           "\"deleted\": %llu, \"slots\": %llu, \"next_id\": %llu, "
           "\"max_level\": %u, \"segments\": %u, \"heap_chunks\": %u, "
           "\"file_bytes\": %llu, \"allocated_bytes\": %llu, "
           "\"snapshot\": %llu",
           st->dim, cli_metric_name(st->metric),
           cli_precision_name(st->precision), cli_codes_name(st->codes),
           st->max_connections,
           (unsigned long long)st->count, (unsigned long long)st->deleted,
           (unsigned long long)st->slots, (unsigned long long)st->next_id,
           st->max_level, st->segments, st->heap_chunks,
           (unsigned long long)st->file_bytes,
           (unsigned long long)st->allocated_bytes,
           (unsigned long long)st->snapshot);
    if (pv->is_url) {
        printf(", \"version\": %llu, \"newest_version\": ",
               (unsigned long long)pv->version);
        if (pv->newest)
            printf("%llu", (unsigned long long)pv->newest);
        else
            fputs("null", stdout);
    }
    fputs("}\n", stdout);
}

int
cmd_info(int argc, char **argv)
{
    cli_opt opts[] = {{"--json", 0, NULL}};
    keel_index *idx = NULL;
    keel_stats st;
    int npos, rc;

    rc = cli_parse("info", argc, argv, opts, 1, &npos);
    if (rc == CLI_OK)
        rc = cli_want("info", npos, argv, index_only, 1, 0);
    if (rc == CLI_OK)
        rc = cli_open_reader(argv[0], NULL, &idx);
    if (rc != CLI_OK)
        return rc;
    int krc = keel_stat(idx, &st);
    published pv = {strncmp(argv[0], "s3://", 5) == 0, 0, 0};
    if (krc == KEEL_OK && pv.is_url)
        krc = keel_published_version(idx, &pv.version);
    /* the newest is one listing more; what it cannot say is left out */
    if (krc == KEEL_OK && pv.is_url &&
        cli_newest_version(argv[0], &pv.newest) != KEEL_OK)
        pv.newest = 0;
    if (krc != KEEL_OK)
        rc = cli_keel_error(krc);
    else if (opts[0].value != NULL)
        print_info_json(argv[0], &st, &pv);
    else
        print_info_text(argv[0], &st, &pv);
    return cli_close_index(idx, rc);
}

/* --- check --------------------------------------------------------------- */

int
cmd_check(int argc, char **argv)
{
    cli_opt opts[] = {{"--json", 0, NULL}};
    keel_index *idx = NULL;
    keel_stats st;
    char live[32], del[32], size[32];
    int npos, rc;

    rc = cli_parse("check", argc, argv, opts, 1, &npos);
    if (rc == CLI_OK)
        rc = cli_want("check", npos, argv, index_only, 1, 0);
    if (rc == CLI_OK)
        rc = cli_open_reader(argv[0], NULL, &idx);
    if (rc != CLI_OK)
        return rc;
    int krc = keel_check(idx);
    if (krc == KEEL_OK)
        krc = keel_stat(idx, &st);
    if (krc != KEEL_OK)
        return cli_close_index(idx, cli_keel_error(krc));
    if (opts[0].value != NULL) {
        fputs("{\"index\": ", stdout);
        cli_json_string(stdout, argv[0]);
        printf(", \"ok\": true, \"count\": %llu, \"deleted\": %llu, "
               "\"dimensions\": %u, \"metric\": \"%s\", \"snapshot\": %llu, "
               "\"file_bytes\": %llu}\n",
               (unsigned long long)st.count, (unsigned long long)st.deleted,
               st.dim, cli_metric_name(st.metric),
               (unsigned long long)st.snapshot,
               (unsigned long long)st.file_bytes);
        return cli_close_index(idx, CLI_OK);
    }
    printf("ok: %s: %s live vectors, %s deleted, %u dimensions, %s, "
           "snapshot %llu, %s\n",
           argv[0], cli_commas(st.count, live, sizeof live),
           cli_commas(st.deleted, del, sizeof del), st.dim,
           cli_metric_name(st.metric), (unsigned long long)st.snapshot,
           cli_bytes(st.file_bytes, size, sizeof size));
    return cli_close_index(idx, CLI_OK);
}

/* --- delete -------------------------------------------------------------- */

/* The largest id: keel reserves UINT64_MAX. */
#define MAX_ID (UINT64_MAX - 1)

int
cmd_delete(int argc, char **argv)
{
    static const char *const names[] = {"INDEX", "ID"};
    cli_opt opts[] = {{"--json", 0, NULL}};
    keel_options opt;
    keel_index *idx = NULL;
    uint64_t *ids;
    char n[32];
    int npos, rc;

    rc = cli_parse("delete", argc, argv, opts, 1, &npos);
    if (rc == CLI_OK)
        rc = cli_want("delete", npos, argv, names, 2, 1);
    if (rc != CLI_OK)
        return rc;
    size_t nids = (size_t)npos - 1;
    /* Every id is checked before the index is opened: a typo in the last
    ** one must not leave the first ones half done. */
    ids = malloc(nids * sizeof *ids);
    if (ids == NULL)
        return cli_fail("delete fewer ids at a time",
                        "out of memory for %zu ids", nids);
    for (size_t i = 0; i < nids; i++) {
        rc = cli_u64("delete", "id", argv[i + 1], 0, MAX_ID, &ids[i]);
        if (rc != CLI_OK) {
            free(ids);
            return rc;
        }
    }
    rc = cli_repeated_id("delete", ids, nids);
    if (rc != CLI_OK) {
        free(ids);
        return rc;
    }

    memset(&opt, 0, sizeof opt);
    rc = cli_open_writer(argv[0], 0, &opt, 0, 0, &idx);
    if (rc != CLI_OK) {
        free(ids);
        return rc;
    }
    /* On any failure the handle is closed without a flush, which drops the
    ** deletes already made: all or nothing. */
    int krc = keel_delete_batch(idx, ids, nids);
    if (krc == KEEL_OK)
        krc = keel_flush(idx);
    if (krc != KEEL_OK) {
        rc = cli_keel_error(krc);
    } else if (opts[0].value != NULL) {
        fputs("{\"index\": ", stdout);
        cli_json_string(stdout, argv[0]);
        printf(", \"deleted\": %zu, \"count\": %llu}\n", nids,
               (unsigned long long)keel_count(idx));
    } else {
        printf("deleted %s %s from %s\n", cli_commas(nids, n, sizeof n),
               nids == 1 ? "vector" : "vectors", argv[0]);
    }
    free(ids);
    return cli_close_index(idx, rc);
}

/* --- get ----------------------------------------------------------------- */

int
cmd_get(int argc, char **argv)
{
    static const char *const names[] = {"INDEX", "ID"};
    cli_opt opts[] = {{"--json", 0, NULL}};
    keel_index *idx = NULL;
    uint64_t *ids;
    float *vecs = NULL;
    int npos, rc;

    rc = cli_parse("get", argc, argv, opts, 1, &npos);
    if (rc == CLI_OK)
        rc = cli_want("get", npos, argv, names, 2, 1);
    if (rc != CLI_OK)
        return rc;
    size_t nids = (size_t)npos - 1;
    ids = malloc(nids * sizeof *ids);
    if (ids == NULL)
        return cli_fail("read fewer ids at a time", "out of memory for %zu "
                        "ids", nids);
    for (size_t i = 0; i < nids && rc == CLI_OK; i++)
        rc = cli_u64("get", "id", argv[i + 1], 0, MAX_ID, &ids[i]);
    if (rc == CLI_OK)
        rc = cli_open_reader(argv[0], NULL, &idx);
    if (rc != CLI_OK) {
        free(ids);
        return rc;
    }
    uint32_t dim = keel_dim(idx);
    if (nids <= SIZE_MAX / sizeof *vecs / (dim ? dim : 1))
        vecs = malloc(nids * (dim ? dim : 1) * sizeof *vecs);
    if (vecs == NULL) {
        free(ids);
        return cli_close_index(idx, cli_fail("read fewer ids at a time",
                                         "out of memory for %zu vectors of "
                                         "%u floats", nids, dim));
    }
    /* All or nothing: a missing id prints nothing but the error. */
    int krc = keel_get_batch(idx, ids, nids, vecs, NULL);
    if (krc != KEEL_OK) {
        rc = cli_keel_error(krc);
    } else if (opts[0].value != NULL) {
        fputs("{\"index\": ", stdout);
        cli_json_string(stdout, argv[0]);
        printf(", \"dimensions\": %u, \"vectors\": [", dim);
        for (size_t r = 0; r < nids; r++) {
            printf("%s{\"id\": %llu, \"vector\": [", r ? ", " : "",
                   (unsigned long long)ids[r]);
            for (uint32_t i = 0; i < dim; i++)
                printf("%s%.9g", i ? ", " : "", (double)vecs[r * dim + i]);
            fputs("]}", stdout);
        }
        fputs("]}\n", stdout);
    } else {
        for (size_t r = 0; r < nids; r++) {
            for (uint32_t i = 0; i < dim; i++)
                printf("%s%.9g", i ? " " : "", (double)vecs[r * dim + i]);
            putchar('\n');
        }
    }
    free(vecs);
    free(ids);
    return cli_close_index(idx, rc);
}

/* --- compact ------------------------------------------------------------- */

int
cmd_compact(int argc, char **argv)
{
    keel_options opt;
    keel_index *idx = NULL;
    keel_stats before, after;
    cli_progress bar;
    cli_opt opts[] = {{"--json", 0, NULL}};
    char a[32], b[32], c[32], d[32];
    int npos, rc, krc;

    rc = cli_parse("compact", argc, argv, opts, 1, &npos);
    if (rc == CLI_OK)
        rc = cli_want("compact", npos, argv, index_only, 1, 0);
    if (rc != CLI_OK)
        return rc;
    memset(&opt, 0, sizeof opt);
    rc = cli_open_writer(argv[0], 0, &opt, 0, 0, &idx);
    if (rc != CLI_OK)
        return rc;
    krc = keel_stat(idx, &before);
    if (krc == KEEL_OK) {
        double start = cli_now();
        cli_progress_begin(&bar, idx, "compacting");
        krc = keel_compact(idx);
        cli_progress_end(&bar, idx);
        if (krc == KEEL_OK)
            krc = keel_stat(idx, &after);
        uint64_t removed = before.deleted > after.deleted
                               ? before.deleted - after.deleted : 0;
        if (krc == KEEL_OK && opts[0].value != NULL) {
            fputs("{\"index\": ", stdout);
            cli_json_string(stdout, argv[0]);
            printf(", \"seconds\": %.3f, \"file_bytes_before\": %llu, "
                   "\"file_bytes\": %llu, \"count\": %llu, \"removed\": "
                   "%llu}\n", cli_now() - start,
                   (unsigned long long)before.file_bytes,
                   (unsigned long long)after.file_bytes,
                   (unsigned long long)after.count,
                   (unsigned long long)removed);
        } else if (krc == KEEL_OK) {
            printf("compacted %s in %.2f s: %s -> %s, %s live vectors, "
                   "%s deleted removed\n",
                   argv[0], cli_now() - start,
                   cli_bytes(before.file_bytes, a, sizeof a),
                   cli_bytes(after.file_bytes, b, sizeof b),
                   cli_commas(after.count, c, sizeof c),
                   cli_commas(removed, d, sizeof d));
        }
    }
    if (krc != KEEL_OK)
        rc = cli_keel_error(krc);
    return cli_close_index(idx, rc);
}
