/* keel.c -- the keel command-line tool: main, help, and what every command
** shares (option parsing, numbers, messages, formatting, opening an index,
** the progress bar).
**
** The contract (commands, options, output, exit statuses 0/1/2) is fixed in
** the product brief, section 5, and documented in doc/keel.1. Every message
** follows the library's style: the first line says what was wrong with which
** value, a second line starting "help: " says what to do instead.
*/
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* the overview's line */
    const char *help;    /* keel help NAME */
};

static const struct command commands[] = {
    {"build", cmd_build, "create an index from vectors, or add to one",
     "usage: keel build INDEX VECTORS [options]\n"
     "\n"
     "Creates INDEX (with --append, adds to an existing one), adds every\n"
     "vector of VECTORS all or nothing, and flushes; a failed build leaves\n"
     "the path as it was. So does Ctrl-C (or SIGTERM): the build says\n"
     "\"interrupted\" and what was kept, and exits 130 (143). VECTORS is\n"
     "a .fvecs, .bvecs or .npy file (2-D float32, float64, float16 or\n"
     "uint8), an ann-benchmarks .hdf5 file (its train set; its distance\n"
     "attribute gives a new index's metric, and --append refuses it if\n"
     "it is not the index's, unless --metric says), or - for .fvecs on\n"
     "standard input, read and checked as it arrives.\n"
     "Without --ids a new index numbers the vectors 0, 1, 2, ... in file\n"
     "order.\n"
     "\n"
     "options:\n"
     "  --append               add to INDEX if it exists (else refused)\n"
     "  --ids FILE             one id per vector: a text file with one\n"
     "                         decimal id per line, or a .npy of uint64\n"
     "  --metric l2|cosine|ip  distance of a new index (default l2);\n"
     "                         euclidean, angular and dot name them too\n"
     "  --precision f32|f16    storage of a new index (default f32)\n"
     "  --codes none|i8|i4     traversal codes of a new index (default\n"
     "                         none): i8 searches faster at equal recall\n"
     "                         for 16 + dimensions more bytes per vector,\n"
     "                         rounded up to 64; i4 reads about half\n"
     "                         (for long vectors)\n"
     "  -M N                   links per node of a new index, 2..32767\n"
     "                         (default 16)\n"
     "  --ef-construction N    search width while linking (default 200)\n"
     "  --threads N            linking threads (default 0: every core)\n"
     "  --json                 print the summary as one JSON object\n"},
    {"search", cmd_search, "run queries, report speed and recall",
     "usage: keel search INDEX QUERIES -k K [options]\n"
     "       keel search INDEX QUERIES --radius R [--max N] [options]\n"
     "       keel search INDEX --id ID -k K [options]\n"
     "       keel search INDEX --vector '[X, Y, ...]' -k K [options]\n"
     "\n"
     "Searches the K nearest neighbours of every query in QUERIES (same\n"
     "formats as build; an .hdf5 file gives its test set) and prints the\n"
     "number of queries, queries per second, mean, p50 and p99 latency in\n"
     "milliseconds, and recall@K with --truth.\n"
     "\n"
     "options:\n"
     "  -k K                   neighbours per query, 1..1000000 (required\n"
     "                         without --radius)\n"
     "  --ef N                 search width, 1..100,000 (default 64)\n"
     "  --reader               open as a reader (the default; kept for\n"
     "                         scripts)\n"
     "  --warm                 read the index into memory in the background\n"
     "  --huge-pages           ask for huge pages for the committed vectors\n"
     "  --threads N            search on N threads (default 1; 0: every core)\n"
     "  --allowed FILE         search only these ids (same format as --ids)\n"
     "  --truth GT.ivecs       exact neighbours (0-based rows of the base\n"
     "                         file, which are the ids 'keel build' gives),\n"
     "                         or an ann-benchmarks .hdf5 (its neighbors)\n"
     "  --truth exact          with --allowed: recall against the exact\n"
     "                         answer among the allowed ids (brute force)\n"
     "  --radius R             instead of -k: every vector within distance R\n"
     "                         (as --out reports it), nearest first; like\n"
     "                         -k, approximate\n"
     "  --max N                with --radius: at most the N nearest per\n"
     "                         query, 1..1000000 (default 1000); the summary\n"
     "                         counts the queries that reached it\n"
     "  --out FILE.tsv         write query, rank, id, distance per result\n"
     "                         (- for standard output)\n"
     "  --once                 run the queries once (by default they run\n"
     "                         twice: a first pass, then the steady state)\n"
     "  --id ID                instead of QUERIES: the neighbours of the\n"
     "                         stored vector of ID (itself first), printed\n"
     "                         as --out - prints them\n"
     "  --vector '[X, ...]'    instead of QUERIES: the neighbours of this\n"
     "                         vector (commas or spaces, brackets optional)\n"
     "  --json                 print the summary as one JSON object\n"},
    {"info", cmd_info, "print an index's facts",
     "usage: keel info INDEX [--json]\n"
     "\n"
     "Prints dimensions, metric, precision, codes, M, counts, file sizes and\n"
     "the snapshot in use, as aligned \"key: value\" lines or one JSON\n"
     "object (whose keys are Python's stats() keys). Opens the index\n"
     "read-only. INDEX may be an s3:// URL (keel publish): then it also\n"
     "prints the published version it opened and the newest one listed\n"
     "there (JSON \"version\" and \"newest_version\").\n"},
    {"check", cmd_check, "verify an index's integrity",
     "usage: keel check INDEX [--json]\n"
     "\n"
     "Verifies every structure of the index's last commit. Prints \"ok: ...\"\n"
     "and exits 0, or prints the first problem and exits 4 (corrupt), 3 (no\n"
     "index) or 1. Read-only. INDEX may be an s3:// URL.\n"
     "\n"
     "options:\n"
     "  --json                 print the result as one JSON object\n"},
    {"publish", cmd_publish, "publish an index to S3-compatible storage",
     "usage: keel publish INDEX s3://BUCKET/PREFIX [--replace] [--json]\n"
     "\n"
     "Publishes INDEX's last flush as the next version at the URL: only the\n"
     "pages that changed since the version before are sent. If the newest\n"
     "version holds that flush already, nothing is sent and no version is\n"
     "made (\"no change: version N ...\"; JSON \"unchanged\": true). The\n"
     "endpoint and\n"
     "keys come from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,\n"
     "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION. search, info\n"
     "and check take the URL in place of INDEX (KEEL_CACHE_DIR: a disk\n"
     "cache of its pages). A URL that holds another index (other identity,\n"
     "dimensions, metric, precision or codes) is refused, unless --replace:\n"
     "readers of the old index then keep their version. Another process may\n"
     "be writing INDEX meanwhile: its last flush is published, from a\n"
     "snapshot, as a backup reads one. doc/objstore-guide.md walks through\n"
     "it.\n"
     "\n"
     "options:\n"
     "  --replace              publish over another index at the URL\n"
     "  --json                 print the result as one JSON object\n"},
    {"prune", cmd_prune, "remove old published versions",
     "usage: keel prune s3://BUCKET/PREFIX [--keep N] [--json]\n"
     "\n"
     "Removes the versions published at the URL but the newest N (default\n"
     "2), the objects only they name, and objects of interrupted publishes\n"
     "older than the newest version by an hour. Readers of kept versions are\n"
     "untouched; a publisher running meanwhile is safe. Nothing published\n"
     "at the URL exits 3, as info does.\n"
     "\n"
     "options:\n"
     "  --keep N               versions to keep, at least 1 (default 2)\n"
     "  --json                 print the result as one JSON object\n"},
    {"versions", cmd_versions, "list the versions published at a URL",
     "usage: keel versions s3://BUCKET/PREFIX [--json]\n"
     "\n"
     "Lists the versions published at the URL, oldest first: each one's\n"
     "number, the size of its manifest and when the store wrote it (UTC),\n"
     "and which is the newest (what readers open) and which the `latest`\n"
     "hint names. One listing and one GET; nothing is changed. Nothing\n"
     "published at the URL exits 3, as info does.\n"
     "\n"
     "options:\n"
     "  --json                 print {\"url\", \"count\", \"newest\",\n"
     "                         \"latest_hint\", \"versions\": [{\"version\",\n"
     "                         \"manifest_bytes\", \"last_modified\",\n"
     "                         \"newest\", \"latest_hint\"}, ...]}\n"},
    {"delete", cmd_delete, "delete vectors by id",
     "usage: keel delete INDEX ID... [--json]\n"
     "\n"
     "Deletes every ID, then flushes once, all or nothing: if an ID is\n"
     "repeated (exit status 2) or has no live vector (exit status 1),\n"
     "nothing is deleted.\n"
     "\n"
     "options:\n"
     "  --json                 print the result as one JSON object\n"},
    {"get", cmd_get, "print stored vectors",
     "usage: keel get INDEX ID... [--json]\n"
     "\n"
     "Prints the stored vector of each ID on its own line, space-separated,\n"
     "in the order the ids are given (an id may repeat). If any ID has no\n"
     "live vector, nothing is printed and the exit status is 1. Cosine\n"
     "indexes store vectors normalized; f16 indexes print the rounded\n"
     "values. Opens the index read-only.\n"
     "\n"
     "options:\n"
     "  --json                 print {\"index\", \"dimensions\", \"vectors\":\n"
     "                         [{\"id\", \"vector\"}, ...]}\n"},
    {"ids", cmd_ids, "print every live id",
     "usage: keel ids INDEX [--json]\n"
     "\n"
     "Prints the id of every live vector of the last flush, one a line, in\n"
     "increasing order; with --json, one object {\"index\", \"count\",\n"
     "\"ids\": [...]}. Opens the index read-only.\n"
     "\n"
     "options:\n"
     "  --json                 print one JSON object\n"},
    {"backup", cmd_backup, "copy an index's last flush, while it is written",
     "usage: keel backup INDEX DEST [--json]\n"
     "\n"
     "Writes a copy of INDEX's last flush to DEST: a file that opens as an\n"
     "index with exactly that flush's ids, vectors and graph. A writer may go\n"
     "on writing INDEX meanwhile (if it flushes during the copy, the copy\n"
     "starts again from the new flush). Only written regions are copied.\n"
     "The copy goes to a temporary file beside DEST, is synced, then\n"
     "renamed over DEST: DEST holds its old content or the whole copy, even\n"
     "after a crash. An existing DEST is replaced. Opens INDEX read-only.\n"
     "To restore, stop the writer and rename the copy over INDEX.\n"
     "\n"
     "options:\n"
     "  --json                 print the summary as one JSON object\n"},
    {"import-hnswlib", cmd_import, "make an index from an hnswlib index file",
     "usage: keel import-hnswlib HNSWLIB_FILE KEEL_FILE [options]\n"
     "\n"
     "Reads an index saved by hnswlib's save_index (hnswlib 0.4 to 0.8)\n"
     "into a new keel index at KEEL_FILE with the same labels (as ids) and\n"
     "vectors, its M and ef_construction; keel links its own graph.\n"
     "Elements marked deleted are left out. hnswlib's file does not say\n"
     "its space: give --metric for ip or cosine. KEEL_FILE must not exist;\n"
     "a failed import leaves nothing there.\n"
     "\n"
     "options:\n"
     "  --metric l2|ip|cosine  the hnswlib index's space (default l2)\n"
     "  --threads N            linking threads (default 0: every core)\n"
     "  --json                 print the summary as one JSON object\n"},
    {"compact", cmd_compact, "rewrite an index without its deleted vectors",
     "usage: keel compact INDEX [--json]\n"
     "\n"
     "Rewrites the live vectors into a new file with a new graph and swaps it\n"
     "in atomically; prints the file size before and after.\n"
     "\n"
     "options:\n"
     "  --json                 print the result as one JSON object\n"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const struct command *
find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

int
cli_help(FILE *f, const char *cmd)
{
    if (cmd == NULL) {
        fputs("usage: keel COMMAND [ARGS...]\n"
              "\n"
              "keel keeps vectors, their ids and an HNSW graph in one file.\n"
              "\n"
              "commands:\n",
              f);
        for (size_t i = 0; i < N_COMMANDS; i++)
            fprintf(f, "  %-14s  %s\n", commands[i].name, commands[i].summary);
        fputs("\n"
              "Run 'keel help COMMAND' (or 'keel COMMAND --help') for a\n"
              "command's options; 'man keel' for the details (before 'make\n"
              "install': 'man ./doc/keel.1' in the source tree). Every command\n"
              "takes --json: one JSON object on standard output, also for an\n"
              "error (whose message stays on standard error too).\n"
              "\n"
              "exit status:\n"
              "  0  success\n"
              "  1  keel or a file refused (a message and a help line)\n"
              "  2  usage error: the command line was wrong\n"
              "  3  no index at INDEX\n"
              "  4  INDEX is corrupt ('keel check' says where)\n"
              "  5  INDEX is locked: another process is writing it\n"
              "  130, 143  keel build was interrupted (SIGINT, SIGTERM)\n",
              f);
        return 0;
    }
    const struct command *c = find_command(cmd);
    if (c == NULL)
        return 1;
    fputs(c->help, f);
    return 0;
}

/* --- messages ------------------------------------------------------------ */

/* Set when the command line holds --json: errors then also go to standard
** output as one JSON object, so a script that reads it gets an answer. */
static int json_errors;

void
cli_json_errors(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return;
        if (strcmp(argv[i], "--json") == 0)
            json_errors = 1;
    }
}

/* Prints "keel[ CMD]: " + text to standard error (text is "what\nhelp:
** ..."), and with --json {"error", "help", "exit_status"} to standard
** output. Returns status. */
static int
report(const char *cmd, const char *text, int status)
{
    size_t n = strlen(text);

    fflush(stdout);
    fprintf(stderr, "keel%s%s: %s%s", cmd ? " " : "", cmd ? cmd : "", text,
            n && text[n - 1] == '\n' ? "" : "\n");
    if (!json_errors)
        return status;
    const char *h = strstr(text, "\nhelp: ");
    size_t wl = h ? (size_t)(h - text) : n;
    char what[2048], help[2048];
    snprintf(what, sizeof what, "%.*s", (int)wl, text);
    snprintf(help, sizeof help, "%s", h ? h + 7 : "");
    for (char *e = help + strlen(help); e > help && e[-1] == '\n'; )
        *--e = '\0';
    fputs("{\"error\": ", stdout);
    cli_json_string(stdout, what);
    fputs(", \"help\": ", stdout);
    cli_json_string(stdout, help);
    printf(", \"exit_status\": %d}\n", status);
    fflush(stdout);
    return status;
}

int
cli_usage(const char *cmd, const char *help, const char *fmt, ...)
{
    char text[4096], hl[1024];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (help != NULL)
        snprintf(hl, sizeof hl, "%s", help);
    else if (cmd != NULL)
        snprintf(hl, sizeof hl, "run 'keel help %s' for its usage", cmd);
    else
        snprintf(hl, sizeof hl, "run 'keel --help' for the commands");
    if (n >= 0 && (size_t)n < sizeof text)
        snprintf(text + n, sizeof text - (size_t)n, "\nhelp: %s\n", hl);
    return report(cmd, text, CLI_USAGE);
}

int
cli_fail(const char *help, const char *fmt, ...)
{
    char text[4096];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof text)
        snprintf(text + n, sizeof text - (size_t)n, "\nhelp: %s\n", help);
    return report(NULL, text, CLI_FAIL);
}

int
cli_fail_msg(const char *msg)
{
    return report(NULL, msg, CLI_FAIL);
}

/* Library phrases that speak of the C API, and what the CLI says instead:
** the library words its messages for every caller ("open the index as a
** reader"); here they become the options and commands a user types. */
static const char *const speak_table[][2] = {
    {"close the other writer, or open a reader to search while it writes",
     "wait for the other writer to finish (or stop it); keel search, info, "
     "get, ids, check and backup read the index meanwhile"},
    {"open the index as a reader to search it",
     "search it with keel search --reader (info, get, ids, check and backup "
     "only read, too)"},
    {"open it as a reader to search it",
     "search it with keel search --reader"},
    {"with max_connections (M) ", "with -M "},
    {"M never changes once an index is made: use ",
     "M never changes once an index is made: give -M "},
    {"or leave it unset to take the file's", "or leave -M out"},
    {"help: use metric ", "help: give --metric "},
    {"help: use precision ", "help: give --precision "},
    {"help: use codes ", "help: give --codes "},
    {"or KEEL_FILE_OPTIONS to take the file's own", "or leave --codes out"},
    {"help: use the index's ", "help: give vectors of the index's "},
    {"(made by keel backup, keel_backup or backup())", "(made by keel backup)"},
    {"opening it as a writer creates the index, a reader needs an existing "
     "one", "keel build creates an index; the other commands need an "
     "existing one"},
    {"or publish an index there with keel_publish",
     "or publish an index there with keel publish INDEX URL"},
    {"open it with keel_open_reader; to change it, open the local file as a "
     "writer and keel_publish it again",
     "search it with keel search URL (info and check take it too); to "
     "change it, change the local file and keel publish it again"},
    {"(keel publish --replace; keel_publish_options.replace)",
     "(keel publish --replace)"},
    {"ef is ", "--ef "},
    {"ef_search is ", "--ef "},
    {"ef_construction is ", "--ef-construction "},
};

const char *
cli_speak(const char *msg, char *out, size_t len)
{
    size_t o = 0;
    const char *p = msg;

    if (len == 0)
        return out;
    while (*p && o + 1 < len) {
        size_t i, n = sizeof speak_table / sizeof speak_table[0];
        for (i = 0; i < n; i++) {
            size_t fl = strlen(speak_table[i][0]);
            if (strncmp(p, speak_table[i][0], fl) == 0)
                break;
        }
        if (i < n) {
            const char *to = speak_table[i][1];
            size_t tl = strlen(to);
            if (tl > len - 1 - o)
                tl = len - 1 - o;
            memcpy(out + o, to, tl);
            o += tl;
            p += strlen(speak_table[i][0]);
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    return out;
}

/* keel's message for rc, in the CLI's terms, with the exit status. */
static int
keel_error(int rc, int status)
{
    const char *msg = keel_errmsg();
    char spoken[2048], text[2048];

    if (msg == NULL || *msg == '\0') {
        snprintf(text, sizeof text, "%s (code %d)\nhelp: this is a bug in "
                 "keel: it failed without a message; please report it",
                 keel_strerror(rc), rc);
        return report(NULL, text, status);
    }
    return report(NULL, cli_speak(msg, spoken, sizeof spoken), status);
}

int
cli_keel_error(int rc)
{
    return keel_error(rc, rc == KEEL_ECORRUPT ? CLI_CORRUPT
                          : rc == KEEL_ELOCKED ? CLI_LOCKED
                                               : CLI_FAIL);
}

int
cli_close_index(keel_index *idx, int rc)
{
    int krc = keel_close(idx);

    if (krc != KEEL_OK && rc == CLI_OK)
        return cli_keel_error(krc);
    return rc;
}

int
cli_one_stdin(const char *cmd, const char *const *names,
              const char *const *given, size_t n)
{
    size_t first = n;

    for (size_t i = 0; i < n; i++) {
        if (given[i] == NULL || strcmp(given[i], "-") != 0)
            continue;
        if (first == n) {
            first = i;
            continue;
        }
        return cli_usage(cmd, "give one of them as a file: standard input "
                         "is one stream and feeds one input",
                         "%s and %s are both '-', standard input",
                         names[first], names[i]);
    }
    return CLI_OK;
}

int
cli_keel_error_at(int rc, size_t first, const char *input)
{
    static const char tail[] = " of the batch";
    const char *msg = keel_errmsg();
    char moved[2048];

    if (msg == NULL || *msg == '\0')
        return cli_keel_error(rc);
    /* "<word> N of the batch": the library counts from the batch's start. */
    const char *at = strstr(msg, tail);
    const char *num = at;
    while (num > msg && num[-1] >= '0' && num[-1] <= '9')
        num--;
    if (at == NULL || num == at || at - num > 20)
        return cli_keel_error(rc);
    unsigned long long n = strtoull(num, NULL, 10);
    snprintf(moved, sizeof moved, "%.*s%llu of %s%s", (int)(num - msg), msg,
             n + (unsigned long long)first, input, at + sizeof tail - 1);
    char spoken[2048];
    int status = rc == KEEL_ECORRUPT ? CLI_CORRUPT
               : rc == KEEL_ELOCKED  ? CLI_LOCKED
                                     : CLI_FAIL;
    cli_fail_msg(cli_speak(moved, spoken, sizeof spoken));
    return status;
}

int
cli_open_error(int rc)
{
    return keel_error(rc, rc == KEEL_ENOTFOUND ? CLI_MISSING
                          : rc == KEEL_ECORRUPT ? CLI_CORRUPT
                          : rc == KEEL_ELOCKED  ? CLI_LOCKED
                                                : CLI_FAIL);
}

/* --- parsing ------------------------------------------------------------- */

static cli_opt *
find_opt(cli_opt *opts, size_t nopts, const char *name, size_t len)
{
    for (size_t i = 0; i < nopts; i++)
        if (strlen(opts[i].name) == len && memcmp(opts[i].name, name, len) == 0)
            return &opts[i];
    return NULL;
}

/* An option name folded for comparison: lower case, no '-' or '_'. */
static void
fold_name(const char *s, size_t len, char *out, size_t outlen)
{
    size_t o = 0;

    for (size_t i = 0; i < len && o + 1 < outlen; i++)
        if (s[i] != '-' && s[i] != '_')
            out[o++] = (char)tolower((unsigned char)s[i]);
    out[o] = '\0';
}

/* Levenshtein distance of two short strings, capped at 9. */
static unsigned
edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned row[64];

    if (la >= 63 || lb >= 63)
        return 9;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] > 9 ? 9 : row[lb];
}

/* The names other tools give keel's options (hnswlib, FAISS,
** ann-benchmarks), folded as fold_name does. */
static const char *const opt_aliases[][2] = {
    {"efsearch", "--ef"},       {"efs", "--ef"},
    {"efc", "--ef-construction"}, {"m", "-M"},
    {"maxconnections", "-M"},   {"topk", "-k"},
    {"space", "--metric"},      {"distance", "--metric"},
    {"numthreads", "--threads"}, {"nthreads", "--threads"},
    {"dtype", "--precision"},   {"groundtruth", "--truth"},
    {"gt", "--truth"},          {"neighbors", "--truth"},
};

/* The option of opts that the unknown name a[0..len) most likely meant: an
** alias, the same name in other case or punctuation, or one within two
** edits; NULL if none is close. */
static const char *
nearest_opt(const cli_opt *opts, size_t nopts, const char *a, size_t len)
{
    char want[64], have[64];
    const char *best = NULL;
    unsigned best_d = 3;

    fold_name(a, len, want, sizeof want);
    if (want[0] == '\0')
        return NULL;
    for (size_t i = 0; i < sizeof opt_aliases / sizeof opt_aliases[0]; i++)
        if (strcmp(want, opt_aliases[i][0]) == 0)
            for (size_t j = 0; j < nopts; j++)
                if (strcmp(opts[j].name, opt_aliases[i][1]) == 0)
                    return opts[j].name;
    for (size_t j = 0; j < nopts; j++) {
        fold_name(opts[j].name, strlen(opts[j].name), have, sizeof have);
        unsigned d = edit_distance(want, have);
        /* One-letter options only by alias or case: "-x" is one edit from
        ** anything short. */
        if (strlen(have) < 3 && d > 0)
            continue;
        if (d < best_d) {
            best_d = d;
            best = opts[j].name;
        }
    }
    return best;
}

int
cli_parse(const char *cmd, int argc, char **argv, cli_opt *opts,
          size_t nopts, int *npos)
{
    int n = 0, only_positionals = 0;

    for (int i = 0; i < argc; i++) {
        char *a = argv[i];

        /* "-" is stdin and "-1" a (bad) number: both are positionals, so
        ** that the number parser can say what is wrong with them. */
        if (only_positionals || a[0] != '-' || a[1] == '\0' ||
            isdigit((unsigned char)a[1])) {
            argv[n++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_positionals = 1;
            continue;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli_help(stdout, cmd);
            return CLI_HELP;
        }

        const char *inline_val = NULL;
        size_t len;
        if (a[1] == '-') {
            const char *eq = strchr(a, '=');
            len = eq ? (size_t)(eq - a) : strlen(a);
            if (eq)
                inline_val = eq + 1;
        } else {
            len = 2; /* -x, -xVALUE or -x=VALUE */
            if (a[2] != '\0')
                inline_val = a + 2 + (a[2] == '=');
        }
        cli_opt *o = find_opt(opts, nopts, a, len);
        if (o == NULL) {
            char help[160];
            const char *near = nearest_opt(opts, nopts, a, len);
            if (near != NULL)
                snprintf(help, sizeof help, "did you mean %s? ('keel help %s' "
                         "lists the options)", near, cmd);
            return cli_usage(cmd, near ? help : NULL,
                             "unknown option '%.*s'", (int)len, a);
        }
        if (!o->takes_value) {
            if (inline_val != NULL)
                return cli_usage(cmd, NULL,
                                 "option %s takes no value, got '%s'",
                                 o->name, inline_val);
            o->value = "";
        } else if (inline_val != NULL) {
            o->value = inline_val;
        } else if (i + 1 < argc) {
            o->value = argv[++i];
        } else {
            return cli_usage(cmd, NULL, "option %s needs a value", o->name);
        }
    }
    *npos = n;
    return CLI_OK;
}

int
cli_want(const char *cmd, int npos, char **pos, const char *const *names,
         int nnames, int variadic)
{
    if (npos < nnames)
        return cli_usage(cmd, NULL, "missing %s", names[npos]);
    if (npos > nnames && !variadic)
        return cli_usage(cmd, NULL, "unexpected argument '%s'", pos[nnames]);
    return CLI_OK;
}

int
cli_u64(const char *cmd, const char *what, const char *s, uint64_t min,
        uint64_t max, uint64_t *out)
{
    char help[160], lo[32], hi[32];
    uint64_t v = 0;
    const char *p;

    cli_commas(min, lo, sizeof lo);
    cli_commas(max, hi, sizeof hi);
    snprintf(help, sizeof help,
             "give %s as a whole number from %s to %s, in decimal digits",
             what, lo, hi);
    if (*s == '\0')
        return cli_usage(cmd, help, "%s is empty", what);
    if (*s == '-' && s[1] != '\0')
        return cli_usage(cmd, help, "%s '%s' is negative", what, s);
    for (p = s; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return cli_usage(cmd, help, "%s '%s' is not a whole number",
                             what, s);
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return cli_usage(cmd, help, "%s '%s' is too large", what, s);
        v = v * 10 + d;
    }
    if (v < min || v > max)
        return cli_usage(cmd, help, "%s '%s' is out of range %s..%s", what,
                         s, lo, hi);
    *out = v;
    return CLI_OK;
}

int
cli_u32(const char *cmd, const char *what, const char *s, uint32_t min,
        uint32_t max, uint32_t *out)
{
    uint64_t v;
    int rc = cli_u64(cmd, what, s, min, max, &v);

    if (rc == CLI_OK)
        *out = (uint32_t)v;
    return rc;
}

/* --- formatting ---------------------------------------------------------- */

double
cli_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *
cli_commas(uint64_t v, char *buf, size_t len)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    size_t o = 0;

    for (int i = 0; i < n && o + 1 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0 && o + 2 < len)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

const char *
cli_bytes(uint64_t v, char *buf, size_t len)
{
    static const char *const units[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
    double x = (double)v;
    int u = -1;

    if (v < 1000) {
        snprintf(buf, len, "%llu B", (unsigned long long)v);
        return buf;
    }
    /* Round before choosing the unit, so 999,999 bytes reads "1.0 MB". */
    while (u < 5 && x >= 999.95) {
        x /= 1000.0;
        u++;
    }
    snprintf(buf, len, "%.1f %s", x, units[u]);
    return buf;
}

void
cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

const char *
cli_metric_name(keel_metric m)
{
    switch (m) {
    case KEEL_L2:
        return "l2";
    case KEEL_COSINE:
        return "cosine";
    case KEEL_IP:
        return "ip";
    }
    return "unknown";
}

const char *
cli_precision_name(keel_precision p)
{
    switch (p) {
    case KEEL_F32:
        return "f32";
    case KEEL_F16:
        return "f16";
    }
    return "unknown";
}

const char *
cli_codes_name(keel_codes c)
{
    switch (c) {
    case KEEL_CODES_NONE:
        return "none";
    case KEEL_CODES_I8:
        return "i8";
    case KEEL_CODES_I4:
        return "i4";
    }
    return "unknown";
}

/* --- opening ------------------------------------------------------------- */

/* ":memory:" names an index in memory to the library, which lives as long
** as one program: nothing a command could build, search or keep. */
static int
memory_refused(const char *path)
{
    return cli_fail("give the path of an index file; a file named :memory: "
                    "is ./:memory:",
                    "%s names an index in memory, which lives only inside "
                    "the program that opens it (C, Python), not across keel "
                    "commands", path);
}

int
cli_open_reader(const char *path, const keel_options *opt, keel_index **out)
{
    if (strcmp(path, KEEL_MEMORY) == 0)
        return memory_refused(path);
    int rc = keel_open_reader(path, opt, out);

    return rc == KEEL_OK ? CLI_OK : cli_open_error(rc);
}

int
cli_open_writer(const char *path, uint32_t dim, keel_options *opt,
                unsigned given, int create, keel_index **out)
{
    keel_index *probe = NULL;
    keel_stats st;
    int rc;

    if (strcmp(path, KEEL_MEMORY) == 0)
        return memory_refused(path);
    /* A reader looks first. It tells us the file's fixed options, and since
    ** it never writes, a path that holds something else (a text file, a
    ** typo) is refused before a writer could touch it. */
    rc = keel_open_reader(path, NULL, &probe);
    if (rc == KEEL_OK) {
        rc = keel_stat(probe, &st);
        if (rc != KEEL_OK) {
            int status = cli_open_error(rc);
            keel_close(probe);
            return status;
        }
        keel_close(probe);
        if (!(given & CLI_GIVEN_METRIC))
            opt->metric = st.metric;
        if (!(given & CLI_GIVEN_PRECISION))
            opt->precision = st.precision;
        if (!(given & CLI_GIVEN_M))
            opt->max_connections = st.max_connections;
        if (!(given & CLI_GIVEN_CODES))
            opt->codes = st.codes;
        if (!create)
            dim = 0;
    } else if (!(create && (rc == KEEL_ENOTFOUND || rc == KEEL_ENOTINDEX))) {
        return cli_open_error(rc);
    }
    /* With create, a file that is not an index goes on to the writer too:
    ** one whose creation was cut short is only finished by a writer, and
    ** keel leaves any other file byte-identical when it refuses it. */
    rc = keel_open(path, dim, opt, out);
    return rc == KEEL_OK ? CLI_OK : cli_open_error(rc);
}

/* --- progress ------------------------------------------------------------ */

static void
format_duration(double s, char *buf, size_t len)
{
    unsigned long t = s < 0 ? 0 : (unsigned long)(s + 0.5);

    if (t >= 3600)
        snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
}

static void
progress_draw(uint64_t done, uint64_t total, void *arg)
{
    enum { BAR = 24 };
    cli_progress *p = arg;
    double elapsed = cli_now() - p->start;
    double frac = total ? (double)done / (double)total : 1.0;
    double rate = elapsed > 0 ? (double)done / elapsed : 0;
    char bar[BAR + 1], d[32], t[32], r[32], eta[32], line[256];
    int filled = (int)(frac * BAR), n;

    if (frac > 1.0)
        frac = 1.0, filled = BAR;
    for (int i = 0; i < BAR; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[BAR] = '\0';
    if (rate > 0 && done <= total)
        format_duration((double)(total - done) / rate, eta, sizeof eta);
    else
        snprintf(eta, sizeof eta, "-:--");
    n = snprintf(line, sizeof line, "%s [%s] %s/%s %5.1f%% %s/s ETA %s",
                 p->label, bar, cli_commas(done, d, sizeof d),
                 cli_commas(total, t, sizeof t), 100.0 * frac,
                 cli_commas((uint64_t)rate, r, sizeof r), eta);
    if (n < 0)
        return;
    if (n >= (int)sizeof line)
        n = (int)sizeof line - 1;
    /* Pad over a longer previous line instead of relying on terminal escape
    ** sequences. */
    fprintf(stderr, "\r%s%*s", line, p->width > n ? p->width - n : 0, "");
    fflush(stderr);
    if (n > p->width)
        p->width = n;
}

void
cli_progress_begin(cli_progress *p, keel_index *idx, const char *label)
{
    p->label = label;
    p->start = cli_now();
    p->width = 0;
    if (isatty(STDERR_FILENO))
        keel_set_progress(idx, progress_draw, p);
}

void
cli_progress_end(cli_progress *p, keel_index *idx)
{
    keel_set_progress(idx, NULL, NULL);
    if (p->width > 0) {
        fprintf(stderr, "\r%*s\r", p->width, "");
        fflush(stderr);
        p->width = 0;
    }
}

/* --- main ---------------------------------------------------------------- */

static int
print_version(void)
{
    int v = keel_libversion_number();

    printf("keel %s (library %d.%d.%d)\n", KEEL_VERSION, v / 1000000,
           v / 1000 % 1000, v % 1000);
    return CLI_OK;
}

static void
command_list_help(char *buf, size_t len)
{
    size_t o = 0;

    o += (size_t)snprintf(buf, len, "the commands are");
    for (size_t i = 0; i < N_COMMANDS && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s %s", i ? "," : "",
                              commands[i].name);
    if (o < len)
        snprintf(buf + o, len - o, "; run 'keel --help' for more");
}

static int
dispatch(int argc, char **argv)
{
    char help[256];
    const struct command *c;
    const char *name;

    command_list_help(help, sizeof help);
    cli_json_errors(argc - 1, argv + 1);
    if (argc < 2)
        return cli_usage(NULL, help, "no command given");
    name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 ||
        (strcmp(name, "help") == 0 && argc == 2)) {
        cli_help(stdout, NULL);
        return CLI_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0 ||
        strcmp(name, "version") == 0) {
        if (argc > 2)
            return cli_usage(NULL, "run 'keel --version' alone",
                             "unexpected argument '%s'", argv[2]);
        return print_version();
    }
    if (strcmp(name, "help") == 0) {
        if (argc > 3)
            return cli_usage("help", "run 'keel help COMMAND' with one command",
                             "unexpected argument '%s'", argv[3]);
        if (cli_help(stdout, argv[2]) != 0)
            return cli_usage("help", help, "unknown command '%s'", argv[2]);
        return CLI_OK;
    }
    if (name[0] == '-')
        return cli_usage(NULL, help, "unknown option '%s' before the command",
                         name);
    c = find_command(name);
    if (c == NULL)
        return cli_usage(NULL, help, "unknown command '%s'", name);
    int rc = c->run(argc - 2, argv + 2);
    return rc == CLI_HELP ? CLI_OK : rc;
}

int
main(int argc, char **argv)
{
    int rc = dispatch(argc, argv);

    /* A full disk or closed pipe on stdout must not pass for success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int e = errno;
        if (rc == CLI_OK)
            rc = cli_fail("check the disk or pipe that standard output goes to",
                          "cannot write standard output: %s", strerror(e));
    }
    return rc;
}
