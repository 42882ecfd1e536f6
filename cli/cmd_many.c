/* cmd_many.c -- keel ids (every live id) and keel backup (a copy of the
** last flush), and the check for repeated ids that delete shares.
**
** Both commands open the index as a reader: they never write it, and they
** run while its writer writes.
*/
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Ids per keel_ids call: each call reads every slot, so large pages. */
#define IDS_PAGE (1u << 20)

typedef struct {
    uint64_t id;
    size_t at;
} id_at;

static int
id_at_order(const void *a, const void *b)
{
    const id_at *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

int
cli_repeated_id(const char *cmd, const uint64_t *ids, size_t n)
{
    if (n < 2)
        return CLI_OK;
    id_at *s = malloc(n * sizeof *s);
    if (s == NULL)
        return cli_fail("give fewer ids at a time", "out of memory for %zu "
                        "ids", n);
    for (size_t i = 0; i < n; i++)
        s[i] = (id_at){ids[i], i};
    qsort(s, n, sizeof *s, id_at_order);
    size_t first = SIZE_MAX, second = SIZE_MAX;
    for (size_t i = 1; i < n; i++)
        if (s[i].id == s[i - 1].id && s[i].at < second) {
            first = s[i - 1].at;
            second = s[i].at;
        }
    free(s);
    if (second == SIZE_MAX)
        return CLI_OK;
    return cli_usage(cmd, "give each id once; nothing was changed",
                     "id %llu is given twice (ID arguments %zu and %zu of %zu)",
                     (unsigned long long)ids[first], first + 1, second + 1, n);
}

/* --- ids ----------------------------------------------------------------- */

int
cmd_ids(int argc, char **argv)
{
    static const char *const names[] = {"INDEX"};
    cli_opt opts[] = {{"--json", 0, NULL}};
    keel_index *idx = NULL;
    int npos, rc;

    rc = cli_parse("ids", argc, argv, opts, 1, &npos);
    if (rc == CLI_OK)
        rc = cli_want("ids", npos, argv, names, 1, 0);
    if (rc == CLI_OK)
        rc = cli_open_reader(argv[0], NULL, &idx);
    if (rc != CLI_OK)
        return rc;
    int json = opts[0].value != NULL;
    uint64_t *page = malloc(IDS_PAGE * sizeof *page);
    if (page == NULL) {
        keel_close(idx);
        return cli_fail("free some memory and try again",
                        "out of memory for a page of %u ids", IDS_PAGE);
    }
    /* The first page before anything is printed: an error prints only
    ** itself. Later pages are later snapshots (keel_ids in keel.h). */
    uint64_t after = KEEL_IDS_FIRST, total = 0;
    size_t n;
    int krc = keel_ids(idx, after, page, IDS_PAGE, &n);
    if (krc == KEEL_OK && json) {
        fputs("{\"index\": ", stdout);
        cli_json_string(stdout, argv[0]);
        fputs(", \"ids\": [", stdout);
    }
    while (krc == KEEL_OK) {
        for (size_t i = 0; i < n; i++)
            printf(json ? "%s%llu" : "%.0s%llu\n",
                   total + i ? ", " : "", (unsigned long long)page[i]);
        total += n;
        if (n < IDS_PAGE)
            break;
        after = page[n - 1];
        krc = keel_ids(idx, after, page, IDS_PAGE, &n);
    }
    if (json && total + (krc == KEEL_OK))
        printf("], \"count\": %llu}\n", (unsigned long long)total);
    free(page);
    if (krc != KEEL_OK)
        rc = cli_keel_error(krc);
    int crc = keel_close(idx);
    if (crc != KEEL_OK && rc == CLI_OK)
        rc = cli_keel_error(crc);
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = cli_fail("check the output's file system", "writing the ids "
                      "failed");
    return rc;
}

/* --- backup -------------------------------------------------------------- */

int
cmd_backup(int argc, char **argv)
{
    static const char *const names[] = {"INDEX", "DEST"};
    cli_opt opts[] = {{"--json", 0, NULL}};
    keel_index *idx = NULL, *copy = NULL;
    keel_stats st;
    char a[32], b[32];
    int npos, rc;

    rc = cli_parse("backup", argc, argv, opts, 1, &npos);
    if (rc == CLI_OK)
        rc = cli_want("backup", npos, argv, names, 2, 0);
    if (rc == CLI_OK)
        rc = cli_open_reader(argv[0], NULL, &idx);
    if (rc != CLI_OK)
        return rc;
    double start = cli_now();
    int krc = keel_backup(idx, argv[1]);
    double secs = cli_now() - start;
    keel_close(idx);
    /* What the copy holds, read from the copy itself. */
    if (krc == KEEL_OK)
        krc = keel_open_reader(argv[1], NULL, &copy);
    if (krc == KEEL_OK)
        krc = keel_stat(copy, &st);
    keel_close(copy);
    if (krc != KEEL_OK)
        return cli_keel_error(krc);
    if (opts[0].value != NULL) {
        fputs("{\"index\": ", stdout);
        cli_json_string(stdout, argv[0]);
        fputs(", \"dest\": ", stdout);
        cli_json_string(stdout, argv[1]);
        printf(", \"count\": %llu, \"snapshot\": %llu, \"file_bytes\": %llu, "
               "\"allocated_bytes\": %llu, \"seconds\": %.3f}\n",
               (unsigned long long)st.count, (unsigned long long)st.snapshot,
               (unsigned long long)st.file_bytes,
               (unsigned long long)st.allocated_bytes, secs);
    } else {
        printf("backed up %s to %s in %.2f s: %s live vectors (snapshot "
               "%llu), %s on disk\n", argv[0], argv[1], secs,
               cli_commas(st.count, a, sizeof a),
               (unsigned long long)st.snapshot,
               cli_bytes(st.allocated_bytes, b, sizeof b));
    }
    return CLI_OK;
}
