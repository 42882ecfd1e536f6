/* cmd_publish.c -- the commands on published indexes: publish, prune and
** versions, and the newest version at a URL (keel info of a URL).
**
** Each drives the public calls of keel.h that work on object storage
** (keel_publish, keel_prune, keel_list_versions); a URL with nothing
** published exits 3, as keel info does for a missing index.
*/
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* --- publish --------------------------------------------------------------- */

int
cmd_publish(int argc, char **argv)
{
    static const char *const names[] = {"INDEX", "URL"};
    cli_opt opts[] = {{"--replace", 0, NULL}, {"--json", 0, NULL}};
    keel_index *idx = NULL;
    char sent[32];
    int npos, rc;

    rc = cli_parse("publish", argc, argv, opts, 2, &npos);
    if (rc == CLI_OK)
        rc = cli_want("publish", npos, argv, names, 2, 0);
    if (rc != CLI_OK)
        return rc;
    /* A reader: it publishes the last flush from a snapshot, whether or
     * not another process is writing the index (keel_publish). */
    rc = cli_open_reader(argv[0], NULL, &idx);
    if (rc != CLI_OK)
        return rc;
    uint64_t up = 0, version = 0;
    int unchanged = 0;
    keel_publish_options po = {.uploaded = &up,
                               .replace = opts[0].value != NULL,
                               .version = &version, .unchanged = &unchanged};
    double start = cli_now();
    int krc = keel_publish(idx, argv[1], &po);
    if (krc != KEEL_OK) {
        rc = cli_keel_error(krc);
    } else if (opts[1].value != NULL) {
        fputs("{\"index\": ", stdout);
        cli_json_string(stdout, argv[0]);
        fputs(", \"url\": ", stdout);
        cli_json_string(stdout, argv[1]);
        printf(", \"version\": %llu, \"unchanged\": %s, \"seconds\": %.3f, "
               "\"uploaded_bytes\": %llu}\n", (unsigned long long)version,
               unchanged ? "true" : "false", cli_now() - start,
               (unsigned long long)up);
    } else if (unchanged) {
        /* keel_publish made no version: the newest holds this flush */
        printf("no change: version %llu already holds this index's last "
               "flush\n", (unsigned long long)version);
    } else {
        printf("published %s to %s as version %llu in %.2f s: %s sent\n",
               argv[0], argv[1], (unsigned long long)version,
               cli_now() - start, cli_bytes(up, sent, sizeof sent));
    }
    return cli_close_index(idx, rc);
}

/* --- prune ----------------------------------------------------------------- */

int
cmd_prune(int argc, char **argv)
{
    static const char *const names[] = {"URL"};
    cli_opt opts[] = {{"--keep", 1, NULL}, {"--json", 0, NULL}};
    int npos, rc = cli_parse("prune", argc, argv, opts, 2, &npos);
    if (rc == CLI_OK)
        rc = cli_want("prune", npos, argv, names, 1, 0);
    if (rc != CLI_OK)
        return rc;
    uint64_t keep = 2;
    if (opts[0].value &&
        (rc = cli_u64("prune", "--keep", opts[0].value, 1, UINT32_MAX,
                      &keep)) != CLI_OK)
        return rc;
    uint64_t removed = 0;
    keel_prune_options po = {.removed = &removed};
    double start = cli_now();
    int krc = keel_prune(argv[0], (uint32_t)keep, &po);
    if (krc != KEEL_OK)
        return cli_open_error(krc); /* nothing published: 3, as info */
    if (opts[1].value) {
        fputs("{\"url\": ", stdout);
        cli_json_string(stdout, argv[0]);
        printf(", \"kept\": %llu, \"removed\": %llu, \"seconds\": %.3f}\n",
               (unsigned long long)keep, (unsigned long long)removed,
               cli_now() - start);
    } else {
        char kept[48];
        if (keep == 1)
            snprintf(kept, sizeof kept, "the newest version");
        else
            snprintf(kept, sizeof kept, "the newest %llu versions",
                     (unsigned long long)keep);
        printf("pruned %s in %.2f s: kept %s, removed %llu object%s\n",
               argv[0], cli_now() - start, kept, (unsigned long long)removed,
               removed == 1 ? "" : "s");
    }
    return CLI_OK;
}

/* --- versions -------------------------------------------------------------- */

/* The versions as listed: kept until the listing is whole. */
typedef struct vlist {
    keel_version *v;
    size_t n, cap;
} vlist;

static int
keep_version(const keel_version *v, void *arg)
{
    vlist *l = arg;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        keel_version *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv)
            return KEEL_ENOMEM;
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = *v;
    return KEEL_OK;
}

int
cli_newest_version(const char *url, uint64_t *newest)
{
    vlist l = {0};
    int rc = keel_list_versions(url, keep_version, &l);
    *newest = rc == KEEL_OK && l.n ? l.v[l.n - 1].version : 0;
    free(l.v);
    return rc;
}

/* "2026-12-04 13:40:01.123" (UTC; iso: "2026-12-04T13:40:01.123Z"), or
** "-" when the store gave no time. */
static const char *
when(int64_t ms, int iso, char *buf, size_t len)
{
    struct tm tm;
    time_t t = (time_t)(ms / 1000);
    if (ms < 0 || !gmtime_r(&t, &tm)) {
        snprintf(buf, len, "-");
        return buf;
    }
    char day[32];
    strftime(day, sizeof day, iso ? "%Y-%m-%dT%H:%M:%S" : "%Y-%m-%d %H:%M:%S",
             &tm);
    snprintf(buf, len, "%s.%03d%s", day, (int)(ms % 1000), iso ? "Z" : "");
    return buf;
}

static void
print_versions_json(const char *url, const vlist *l)
{
    const keel_version *hinted = NULL;
    char t[48];
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].hinted)
            hinted = &l->v[i];
    fputs("{\"url\": ", stdout);
    cli_json_string(stdout, url);
    printf(", \"count\": %zu, \"newest\": %llu, \"latest_hint\": ", l->n,
           (unsigned long long)l->v[l->n - 1].version);
    if (hinted)
        printf("%llu", (unsigned long long)hinted->version);
    else
        fputs("null", stdout);
    fputs(", \"versions\": [", stdout);
    for (size_t i = 0; i < l->n; i++) {
        const keel_version *v = &l->v[i];
        printf("%s{\"version\": %llu, \"manifest_bytes\": %llu, "
               "\"last_modified\": ", i ? ", " : "",
               (unsigned long long)v->version,
               (unsigned long long)v->manifest_bytes);
        if (v->modified_ms >= 0)
            printf("\"%s\"", when(v->modified_ms, 1, t, sizeof t));
        else
            fputs("null", stdout);
        printf(", \"newest\": %s, \"latest_hint\": %s}",
               v->newest ? "true" : "false", v->hinted ? "true" : "false");
    }
    fputs("]}\n", stdout);
}

static void
print_versions_text(const char *url, const vlist *l)
{
    char b[32], t[48];
    int any_hint = 0;
    printf("%s: %zu version%s\n", url, l->n, l->n == 1 ? "" : "s");
    printf("%10s  %14s  %s\n", "version", "manifest bytes",
           "modified (UTC)");
    for (size_t i = 0; i < l->n; i++) {
        const keel_version *v = &l->v[i];
        any_hint |= v->hinted;
        printf("%10llu  %14s  %s%s%s%s\n", (unsigned long long)v->version,
               cli_commas(v->manifest_bytes, b, sizeof b),
               when(v->modified_ms, 0, t, sizeof t),
               v->newest || v->hinted ? "  " : "",
               v->newest ? "newest (readers open it)" : "",
               v->hinted ? (v->newest ? ", latest hint" : "latest hint") : "");
    }
    if (!any_hint)
        printf("the latest hint names none of them (readers and publishers "
               "list the versions instead; the next publish writes it)\n");
}

int
cmd_versions(int argc, char **argv)
{
    static const char *const names[] = {"URL"};
    cli_opt opts[] = {{"--json", 0, NULL}};
    int npos, rc = cli_parse("versions", argc, argv, opts, 1, &npos);
    if (rc == CLI_OK)
        rc = cli_want("versions", npos, argv, names, 1, 0);
    if (rc != CLI_OK)
        return rc;
    vlist l = {0};
    int krc = keel_list_versions(argv[0], keep_version, &l);
    if (krc != KEEL_OK) {
        free(l.v);
        return cli_open_error(krc); /* nothing published: 3, as info */
    }
    if (opts[0].value)
        print_versions_json(argv[0], &l);
    else
        print_versions_text(argv[0], &l);
    free(l.v);
    return CLI_OK;
}
