/* cmd_build.c -- keel build: create or extend an index from a vector file.
**
** The whole file goes in as one keel_add_batch, so a build is all or
** nothing: a bad vector anywhere (NaN, a duplicate id) leaves the index as it
** was, and a build that is interrupted leaves the last flush intact.
*/
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "vecfile.h"

/* Positions in cmd_build's option table. */
enum { O_IDS, O_METRIC, O_PRECISION, O_M, O_EFC, O_THREADS, O_COUNT };

static int
parse_metric(const char *s, keel_metric *out)
{
    if (strcmp(s, "l2") == 0)
        *out = KEEL_L2;
    else if (strcmp(s, "cosine") == 0)
        *out = KEEL_COSINE;
    else if (strcmp(s, "ip") == 0)
        *out = KEEL_IP;
    else
        return cli_usage("build", "give --metric l2, cosine or ip",
                         "--metric '%s' is not a metric keel knows", s);
    return CLI_OK;
}

static int
parse_precision(const char *s, keel_precision *out)
{
    if (strcmp(s, "f32") == 0)
        *out = KEEL_F32;
    else if (strcmp(s, "f16") == 0)
        *out = KEEL_F16;
    else
        return cli_usage("build", "give --precision f32 or f16",
                         "--precision '%s' is not a precision keel knows", s);
    return CLI_OK;
}

/* Fills opt and given from the command line. */
static int
build_options(cli_opt *opts, keel_options *opt, unsigned *given)
{
    int rc;

    if (opts[O_METRIC].value != NULL) {
        rc = parse_metric(opts[O_METRIC].value, &opt->metric);
        if (rc != CLI_OK)
            return rc;
        *given |= CLI_GIVEN_METRIC;
    }
    if (opts[O_PRECISION].value != NULL) {
        rc = parse_precision(opts[O_PRECISION].value, &opt->precision);
        if (rc != CLI_OK)
            return rc;
        *given |= CLI_GIVEN_PRECISION;
    }
    if (opts[O_M].value != NULL) {
        rc = cli_u32("build", "-M", opts[O_M].value, 2, 32767,
                     &opt->max_connections);
        if (rc != CLI_OK)
            return rc;
        *given |= CLI_GIVEN_M;
    }
    if (opts[O_EFC].value != NULL) {
        rc = cli_u32("build", "--ef-construction", opts[O_EFC].value, 1,
                     UINT32_MAX, &opt->ef_construction);
        if (rc != CLI_OK)
            return rc;
    }
    if (opts[O_THREADS].value != NULL) {
        rc = cli_u32("build", "--threads", opts[O_THREADS].value, 0, 65536,
                     &opt->threads);
        if (rc != CLI_OK)
            return rc;
    }
    return CLI_OK;
}

static void
print_summary(keel_index *idx, size_t n, double seconds)
{
    keel_stats st;
    char count[32], rate[32], size[80], a[32], b[32];
    double per_s = seconds > 0 ? (double)n / seconds : 0;

    cli_commas(n, count, sizeof count);
    cli_commas((uint64_t)(per_s + 0.5), rate, sizeof rate);
    /* The length ls -l shows and what the disk holds (du). */
    if (keel_stat(idx, &st) == KEEL_OK)
        snprintf(size, sizeof size, "%s (%s on disk)",
                 cli_bytes(st.file_bytes, a, sizeof a),
                 cli_bytes(st.allocated_bytes, b, sizeof b));
    else
        snprintf(size, sizeof size, "of unknown size");
    printf("%s vectors in %.*f s (%s vectors/s), file %s\n", count,
           seconds < 10 ? 2 : 1, seconds, rate, size);
}

int
cmd_build(int argc, char **argv)
{
    static const char *const names[] = {"INDEX", "VECTORS"};
    cli_opt opts[O_COUNT] = {
        [O_IDS] = {"--ids", 1, NULL},
        [O_METRIC] = {"--metric", 1, NULL},
        [O_PRECISION] = {"--precision", 1, NULL},
        [O_M] = {"-M", 1, NULL},
        [O_EFC] = {"--ef-construction", 1, NULL},
        [O_THREADS] = {"--threads", 1, NULL},
    };
    keel_options opt;
    unsigned given = 0;
    vecfile vf = {0};
    uint64_t *ids = NULL;
    size_t n_ids = 0;
    keel_index *idx = NULL;
    cli_progress bar;
    char err[1024];
    double start, seconds;
    int npos, rc, krc;

    memset(&opt, 0, sizeof opt);
    rc = cli_parse("build", argc, argv, opts, O_COUNT, &npos);
    if (rc == CLI_OK)
        rc = cli_want("build", npos, argv, names, 2, 0);
    if (rc == CLI_OK)
        rc = build_options(opts, &opt, &given);
    if (rc != CLI_OK)
        return rc;
    const char *path = argv[0], *vectors = argv[1];

    /* Read every input before the index is opened, so a bad input file
    ** never creates an empty index. */
    if (vecfile_load(vectors, &vf, err, sizeof err) != VECFILE_OK)
        return cli_fail_msg(err);
    if (opts[O_IDS].value != NULL) {
        if (vecfile_load_ids(opts[O_IDS].value, &ids, &n_ids, err,
                             sizeof err) != VECFILE_OK) {
            vecfile_free(&vf);
            return cli_fail_msg(err);
        }
        if (n_ids != vf.n) {
            char a[32], b[32];
            rc = cli_usage("build",
                           "give --ids a file with one id per vector, in the "
                           "vectors' order",
                           "--ids %s holds %s ids but %s holds %s vectors",
                           opts[O_IDS].value, cli_commas(n_ids, a, sizeof a),
                           vectors, cli_commas(vf.n, b, sizeof b));
            goto out;
        }
    }

    rc = cli_open_writer(path, vf.dim, &opt, given, 1, &idx);
    if (rc != CLI_OK)
        goto out;

    start = cli_now();
    if (vf.n > 0) {
        cli_progress_begin(&bar, idx, "linking");
        krc = keel_add_batch(idx, vf.data, vf.n, ids, NULL);
        cli_progress_end(&bar, idx);
        if (krc != KEEL_OK) {
            rc = cli_keel_error(krc);
            goto out;
        }
    }
    krc = keel_flush(idx);
    if (krc != KEEL_OK) {
        rc = cli_keel_error(krc);
        goto out;
    }
    seconds = cli_now() - start;
    print_summary(idx, vf.n, seconds);

out:
    if (idx != NULL) {
        int crc = keel_close(idx);
        if (crc != KEEL_OK && rc == CLI_OK)
            rc = cli_keel_error(crc);
    }
    free(ids);
    vecfile_free(&vf);
    return rc;
}
