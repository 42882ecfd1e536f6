/* cmd_build.c -- keel build: create an index from a vector file, or add to
** one with --append.
**
** A build is all or nothing: nothing is flushed until every vector is in,
** so a bad vector anywhere (NaN, a duplicate id) leaves an existing index as
** it was, and a build that created the file removes it when it fails. A
** file goes in as one keel_add_batch; standard input and an HDF5 file's
** train set are read and added a bounded chunk at a time (standard input's
** rows checked as they arrive, so input that is not .fvecs fails at its
** first row), so memory stays bounded. A vector the library refuses is
** named by its row in the whole input, not in the chunk. Ctrl-C and
** SIGTERM are failures too (interrupt.c): linking is cancelled, a file this
** build created is removed, and the user is told what was kept.
*/
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "h5file.h"
#include "vecfile.h"

/* Positions in cmd_build's option table. */
enum {
    O_IDS,
    O_METRIC,
    O_PRECISION,
    O_CODES,
    O_M,
    O_EFC,
    O_THREADS,
    O_APPEND,
    O_JSON,
    O_COUNT
};

/* Bytes of vectors standard input is read and added in at a time. */
#define STREAM_CHUNK_BYTES ((size_t)8 << 20)

/* The metric names keel takes, with the other names Python also takes
** (ann-benchmarks' euclidean and angular among them). */
static const struct {
    const char *name;
    keel_metric metric;
} metric_names[] = {
    {"l2", KEEL_L2},         {"euclidean", KEEL_L2},  {"euclid", KEEL_L2},
    {"cosine", KEEL_COSINE}, {"cos", KEEL_COSINE},    {"angular", KEEL_COSINE},
    {"ip", KEEL_IP},         {"dot", KEEL_IP},        {"inner_product", KEEL_IP},
};

/* Returns 0 and sets *out if s names a metric. */
static int
metric_of(const char *s, keel_metric *out)
{
    for (size_t i = 0; i < sizeof metric_names / sizeof metric_names[0]; i++)
        if (strcmp(s, metric_names[i].name) == 0) {
            *out = metric_names[i].metric;
            return 0;
        }
    return -1;
}

static int
parse_metric(const char *s, keel_metric *out)
{
    if (metric_of(s, out) != 0)
        return cli_usage("build", "give --metric l2 (or euclidean), cosine "
                         "(or angular) or ip (or dot)",
                         "--metric '%s' is not a metric keel knows", s);
    return CLI_OK;
}

/* A new index built from an ann-benchmarks file without --metric takes the
** file's "distance" attribute. */
static int
metric_from_hdf5(const char *path, keel_options *opt, unsigned *given)
{
    char name[64], err[1024];

    if (h5file_distance(path, name, sizeof name, err, sizeof err) !=
        VECFILE_OK)
        return cli_fail_msg(err);
    if (name[0] == '\0')
        return CLI_OK;
    if (metric_of(name, &opt->metric) != 0)
        return cli_fail("give --metric l2, cosine or ip to build it anyway",
                        "%s says its distance is '%s', which keel does not "
                        "compute", path, name);
    *given |= CLI_GIVEN_METRIC;
    return CLI_OK;
}

/* --append of an ann-benchmarks file without --metric: the file's
** "distance" attribute must be the index's metric (or absent), as an
** explicit --metric must; its vectors are meant for that distance. */
static int
append_metric_matches(const char *path, const char *vectors)
{
    char name[64], err[1024];
    keel_options file = {0};
    unsigned given = 0;
    keel_index *probe = NULL;
    keel_stats st;

    int rc = metric_from_hdf5(vectors, &file, &given);
    if (rc != CLI_OK || !(given & CLI_GIVEN_METRIC))
        return rc;
    if (keel_open_reader(path, NULL, &probe) != KEEL_OK)
        return CLI_OK; /* the writer's open says what is wrong */
    int krc = keel_stat(probe, &st);
    keel_close(probe);
    if (krc != KEEL_OK || st.metric == file.metric)
        return CLI_OK;
    if (h5file_distance(vectors, name, sizeof name, err, sizeof err) !=
        VECFILE_OK)
        name[0] = '\0';
    char help[160];
    snprintf(help, sizeof help, "give --metric %s to add them to this index "
             "anyway, or build them into a new index",
             cli_metric_name(st.metric));
    return cli_fail(help, "%s says its distance is '%s' (%s), but %s was "
                    "built with metric %s", vectors, name,
                    cli_metric_name(file.metric), path,
                    cli_metric_name(st.metric));
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

static int
parse_codes(const char *s, keel_codes *out)
{
    if (strcmp(s, "none") == 0)
        *out = KEEL_CODES_NONE;
    else if (strcmp(s, "i8") == 0)
        *out = KEEL_CODES_I8;
    else if (strcmp(s, "i4") == 0)
        *out = KEEL_CODES_I4;
    else
        return cli_usage("build", "give --codes none, i8 or i4",
                         "--codes '%s' is not a kind of traversal codes keel "
                         "knows", s);
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
    if (opts[O_CODES].value != NULL) {
        rc = parse_codes(opts[O_CODES].value, &opt->codes);
        if (rc != CLI_OK)
            return rc;
        *given |= CLI_GIVEN_CODES;
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
                     100000, &opt->ef_construction); /* the library's cap */
        if (rc != CLI_OK)
            return rc;
    }
    if (opts[O_THREADS].value != NULL) {
        rc = cli_u32("build", "--threads", opts[O_THREADS].value, 0, 4096,
                     &opt->threads); /* the library's cap */
        if (rc != CLI_OK)
            return rc;
    }
    return CLI_OK;
}

static void
print_summary(keel_index *idx, const char *path, size_t n, double seconds,
              int existed, uint64_t before, int json)
{
    keel_stats st;
    char count[32], rate[32], size[80], a[32], b[32];
    double per_s = seconds > 0 ? (double)n / seconds : 0;

    if (json) {
        memset(&st, 0, sizeof st);
        keel_stat(idx, &st);
        fputs("{\"index\": ", stdout);
        cli_json_string(stdout, path);
        printf(", \"added\": %zu, \"count_before\": %llu, \"count\": %llu, "
               "\"dimensions\": %u, \"metric\": \"%s\", \"seconds\": %.3f, "
               "\"vectors_per_second\": %.0f, \"file_bytes\": %llu, "
               "\"allocated_bytes\": %llu}\n",
               n, (unsigned long long)(existed ? before : 0),
               (unsigned long long)keel_count(idx), keel_dim(idx),
               cli_metric_name(st.metric), seconds, per_s,
               (unsigned long long)st.file_bytes,
               (unsigned long long)st.allocated_bytes);
        return;
    }
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
    if (existed)
        printf("%s held %s vectors before, %s after\n", path,
               cli_commas(before, a, sizeof a),
               cli_commas(keel_count(idx), b, sizeof b));
}

/* What the build reads: a whole file, or a stream a chunk at a time
** (standard input, and an HDF5 file's train set, whose size the file only
** declares). */
struct input {
    const char *name; /* as the user gave it ("-" reads as "standard input") */
    const char *shown; /* what messages call it */
    int streaming;
    int hdf5;         /* streaming from h5 */
    vecfile vf;       /* the whole file; or the stream's current chunk */
    vecstream vs;
    h5stream h5;
    size_t cap;       /* rows vf.data holds when streaming */
    int done;         /* the stream has ended */
};

static void
input_free(struct input *in)
{
    if (in->streaming) {
        vecstream_close(&in->vs);
        h5stream_close(&in->h5);
        free(in->vf.data);
        in->vf.data = NULL;
    } else {
        vecfile_free(&in->vf);
    }
}

/* Reads the whole file, or opens the stream and reads its first chunk, so
** a bad input fails before the index is touched. */
static int
input_open(struct input *in, const char *name)
{
    char err[1024];

    in->name = name;
    in->hdf5 = h5file_is(name);
    in->streaming = in->hdf5 || strcmp(name, "-") == 0;
    in->shown = strcmp(name, "-") == 0 ? "standard input" : name;
    if (!in->streaming) {
        if (vecfile_load(name, &in->vf, err, sizeof err) != VECFILE_OK)
            return cli_fail_msg(err);
        in->done = 1;
        return CLI_OK;
    }
    if (in->hdf5) {
        if (h5stream_open(name, "train", &in->h5, err, sizeof err) !=
            VECFILE_OK)
            return cli_fail_msg(err);
        in->vf.dim = in->h5.dim;
        in->cap = h5file_block_rows(in->h5.dim);
        if (in->cap > in->h5.n)
            in->cap = in->h5.n > 0 ? in->h5.n : 1;
    } else {
        if (vecstream_open(name, &in->vs, err, sizeof err) != VECFILE_OK)
            return cli_fail_msg(err);
        size_t row = (size_t)in->vs.dim * sizeof(float);
        in->cap = STREAM_CHUNK_BYTES / row > 0 ? STREAM_CHUNK_BYTES / row : 1;
        in->vf.dim = in->vs.dim;
    }
    in->vf.data = malloc(in->cap * in->vf.dim * sizeof(float));
    if (in->vf.data == NULL)
        return cli_fail("free memory and retry",
                        "out of memory for %zu rows of %s", in->cap,
                        in->shown);
    return CLI_OK;
}

/* Streaming: reads the next chunk into in->vf (n 0 at the end). */
static int
input_next(struct input *in)
{
    char err[1024];
    int vrc;

    in->vf.n = 0;
    if (!in->streaming || in->done)
        return CLI_OK;
    vrc = in->hdf5 ? h5stream_read(&in->h5, in->vf.data, in->cap, &in->vf.n,
                                   err, sizeof err)
                   : vecstream_read(&in->vs, in->vf.data, in->cap, &in->vf.n,
                                    err, sizeof err);
    if (vrc != VECFILE_OK)
        return cli_fail_msg(err);
    if (in->vf.n < in->cap || (in->hdf5 && in->h5.next == in->h5.n))
        in->done = 1;
    return CLI_OK;
}

/* Adds every vector of the input (the first chunk is in in->vf already).
** *total gets how many went in. msg_wait and msg_keel are what an interrupt
** says while standard input is read and while keel links (cmd_build). A
** signal makes it return CLI_FAIL with nothing printed. */
static int
add_all(keel_index *idx, struct input *in, const uint64_t *ids, size_t n_ids,
        const char *ids_path, const char *msg_wait, const char *msg_keel,
        size_t *total)
{
    cli_progress bar;
    char a[32], b[32];

    *total = 0;
    for (;;) {
        size_t n = in->vf.n;
        if (ids != NULL && n > n_ids - *total)
            return cli_usage("build",
                             "give --ids a file with one id per vector, in "
                             "the vectors' order",
                             "--ids %s holds %s ids but %s holds more vectors",
                             ids_path, cli_commas(n_ids, a, sizeof a),
                             in->shown);
        if (n > 0) {
            cli_progress_begin(&bar, idx, "linking");
            int krc = keel_add_batch(idx, in->vf.data, n,
                                     ids ? ids + *total : NULL, NULL);
            cli_progress_end(&bar, idx);
            if (krc == KEEL_ECANCELED && cli_interrupted())
                return CLI_FAIL; /* cmd_build says what was kept */
            if (krc != KEEL_OK)
                return cli_keel_error_at(krc, *total, in->shown);
            *total += n;
        }
        if (in->done)
            break;
        if (cli_interrupted())
            return CLI_FAIL;
        /* Waiting for input (a pipe, or an HDF5 file's next block): only
        ** the handler can end the wait. */
        cli_interrupt_phase(CLI_PHASE_WAIT, NULL, 0, "%s", msg_wait);
        int rc = input_next(in);
        cli_interrupt_phase(CLI_PHASE_KEEL, NULL, 0, "%s", msg_keel);
        if (rc != CLI_OK)
            return rc;
    }
    if (ids != NULL && *total != n_ids)
        return cli_usage("build",
                         "give --ids a file with one id per vector, in the "
                         "vectors' order",
                         "--ids %s holds %s ids but %s holds %s vectors",
                         ids_path, cli_commas(n_ids, a, sizeof a),
                         in->shown, cli_commas(*total, b, sizeof b));
    return CLI_OK;
}

/* Looks at what is at path before anything is read: *existed is set if
** there is a file, *count to its live vectors if it is an index (else
** UINT64_MAX). A path that cannot be an index fails here. */
static int
probe_index(const char *path, int *existed, uint64_t *count)
{
    struct stat sb;
    keel_index *probe = NULL;

    *count = UINT64_MAX;
    *existed = stat(path, &sb) == 0;
    if (!*existed)
        return CLI_OK;
    int krc = keel_open_reader(path, NULL, &probe);
    if (krc == KEEL_OK) {
        *count = keel_count(probe);
        keel_close(probe);
        return CLI_OK;
    }
    /* A file that is not an index (yet) goes on to the writer, which
    ** finishes a creation cut short and refuses anything else unchanged. */
    if (krc == KEEL_ENOTINDEX && S_ISREG(sb.st_mode))
        return CLI_OK;
    return cli_open_error(krc);
}

/* Bytes the file system holds for path (du), 0 if it cannot tell. */
static uint64_t
allocated_bytes(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 ? (uint64_t)sb.st_blocks * 512u : 0;
}

/* After SIGINT or SIGTERM (interrupt.c): says what was kept, removes a file
** this build created and returns 128 + the signal's number. flushed says
** whether the build's flush completed; held is what the file held before. */
static int
interrupted(const char *path, int existed, uint64_t before, int flushed,
            uint64_t count, uint64_t held)
{
    char a[32], b[32];
    int sig = cli_interrupted();

    if (flushed) {
        fprintf(stderr, "keel build: interrupted after the build was flushed; "
                "%s holds %s vectors: everything was kept\n", path,
                cli_commas(count, a, sizeof a));
    } else if (!existed) {
        if (unlink(path) != 0 && errno != ENOENT)
            fprintf(stderr, "keel build: interrupted; could not remove %s, "
                    "which this build created: %s\n", path, strerror(errno));
        else
            fprintf(stderr, "keel build: interrupted; removed %s, which this "
                    "build created: nothing was kept\n", path);
    } else {
        uint64_t now = allocated_bytes(path);
        fprintf(stderr, "keel build: interrupted; nothing was added: %s holds "
                "its %s vectors as before\n", path,
                cli_commas(before, a, sizeof a));
        if (now > held)
            fprintf(stderr, "help: the file holds %s more than before, the "
                    "space the dropped vectors took; the next 'keel build "
                    "--append' reuses it, and 'keel compact %s' gives it back "
                    "now\n", cli_bytes(now - held, b, sizeof b), path);
    }
    return 128 + sig;
}

int
cmd_build(int argc, char **argv)
{
    static const char *const names[] = {"INDEX", "VECTORS"};
    cli_opt opts[O_COUNT] = {
        [O_IDS] = {"--ids", 1, NULL},
        [O_METRIC] = {"--metric", 1, NULL},
        [O_PRECISION] = {"--precision", 1, NULL},
        [O_CODES] = {"--codes", 1, NULL},
        [O_M] = {"-M", 1, NULL},
        [O_EFC] = {"--ef-construction", 1, NULL},
        [O_THREADS] = {"--threads", 1, NULL},
        [O_APPEND] = {"--append", 0, NULL},
        [O_JSON] = {"--json", 0, NULL},
    };
    keel_options opt;
    unsigned given = 0;
    struct input in;
    uint64_t *ids = NULL, before = 0, held = 0;
    size_t n_ids = 0, total = 0;
    keel_index *idx = NULL;
    char err[1024], a[32], b[32], msg_wait[1024], msg_keel[1024];
    double start, seconds;
    int npos, rc, krc, existed = 0, opened = 0, flushed = 0;

    memset(&opt, 0, sizeof opt);
    memset(&in, 0, sizeof in);
    rc = cli_parse("build", argc, argv, opts, O_COUNT, &npos);
    if (rc == CLI_OK)
        rc = cli_want("build", npos, argv, names, 2, 0);
    if (rc == CLI_OK)
        rc = build_options(opts, &opt, &given);
    if (rc != CLI_OK)
        return rc;
    const char *path = argv[0], *vectors = argv[1];
    int append = opts[O_APPEND].value != NULL;
    const char *from[] = {"VECTORS", "--ids"};
    const char *inputs[] = {vectors, opts[O_IDS].value};
    rc = cli_one_stdin("build", from, inputs, 2);
    if (rc != CLI_OK)
        return rc;

    /* Until the index is opened nothing is written: an interrupt ends the
    ** command at once. */
    cli_interrupt_phase(CLI_PHASE_WAIT, NULL, 0,
                        "keel build: interrupted before anything was "
                        "written; %s is as it was\n", path);
    cli_interrupt_install();
    rc = probe_index(path, &existed, &before);
    if (rc != CLI_OK)
        return rc;
    if (before != UINT64_MAX && !append)
        return cli_fail("give --append to add these vectors to it, or build "
                        "into a new path",
                        "%s already holds an index of %s vectors; keel build "
                        "adds to an existing index only with --append",
                        path, cli_commas(before, a, sizeof a));
    held = existed ? allocated_bytes(path) : 0;

    /* Read the input (or a stream's first chunk) before the index is
    ** opened, so a bad input never creates an empty index. */
    rc = input_open(&in, vectors);
    if (rc != CLI_OK)
        goto out;
    if (opts[O_IDS].value != NULL) {
        if (vecfile_load_ids(opts[O_IDS].value, &ids, &n_ids, err,
                             sizeof err) != VECFILE_OK) {
            rc = cli_fail_msg(err);
            goto out;
        }
        size_t rows = in.hdf5 ? in.h5.n : in.vf.n;
        if ((!in.streaming || in.hdf5) && n_ids != rows) {
            rc = cli_usage("build",
                           "give --ids a file with one id per vector, in the "
                           "vectors' order",
                           "--ids %s holds %s ids but %s holds %s vectors",
                           opts[O_IDS].value, cli_commas(n_ids, a, sizeof a),
                           vectors, cli_commas(rows, b, sizeof b));
            goto out;
        }
    }
    if (in.streaming && (rc = input_next(&in)) != CLI_OK)
        goto out;
    if (before == UINT64_MAX && !(given & CLI_GIVEN_METRIC) &&
        h5file_is(vectors) && (rc = metric_from_hdf5(vectors, &opt, &given)))
        goto out;
    if (before != UINT64_MAX && !(given & CLI_GIVEN_METRIC) &&
        h5file_is(vectors) && (rc = append_metric_matches(path, vectors)))
        goto out;

    /* From here an interrupt while keel works is taken up by the command
    ** (the cancel callback stops linking); one while standard input is
    ** awaited, or a second one, ends it in the handler. Either way a file
    ** this build created goes. */
    if (!existed)
        snprintf(msg_wait, sizeof msg_wait, "keel build: interrupted; removed "
                 "%s, which this build created: nothing was kept\n", path);
    else
        snprintf(msg_wait, sizeof msg_wait, "keel build: interrupted; nothing "
                 "was added: %s holds its %s vectors as before\n", path,
                 cli_commas(before == UINT64_MAX ? 0 : before, a, sizeof a));
    snprintf(msg_keel, sizeof msg_keel, "%s", msg_wait);
    cli_interrupt_phase(CLI_PHASE_KEEL, path, !existed, "%s", msg_keel);
    rc = cli_open_writer(path, in.vf.dim, &opt, given, 1, &idx);
    if (rc != CLI_OK)
        goto out;
    opened = 1;
    before = keel_count(idx);
    keel_set_cancel(idx, cli_interrupt_cancel, NULL);
    if (cli_interrupted())
        goto out;

    start = cli_now();
    rc = add_all(idx, &in, ids, n_ids, opts[O_IDS].value, msg_wait, msg_keel,
                 &total);
    if (rc != CLI_OK || cli_interrupted())
        goto out;
    /* A second signal while the flush runs ends the command before it can
    ** say which state the file is in. */
    if (existed)
        cli_interrupt_phase(CLI_PHASE_KEEL, path, 0, "keel build: interrupted "
                            "while flushing; %s holds either its %s vectors "
                            "as before or all %s: 'keel info %s' says which\n",
                            path, cli_commas(before, a, sizeof a),
                            cli_commas(before + total, b, sizeof b), path);
    krc = keel_flush(idx);
    if (krc != KEEL_OK) {
        rc = cli_keel_error(krc);
        goto out;
    }
    flushed = 1;
    seconds = cli_now() - start;
    print_summary(idx, path, total, seconds, existed, before,
                  opts[O_JSON].value != NULL);

out:
    if (idx != NULL) {
        uint64_t count = keel_count(idx);
        int crc = keel_close(idx);
        if (crc != KEEL_OK && rc == CLI_OK)
            rc = cli_keel_error(crc);
        if (cli_interrupted() && (rc == CLI_OK || rc == CLI_FAIL)) {
            free(ids);
            input_free(&in);
            return interrupted(path, existed, before, flushed, count, held);
        }
    }
    /* Nothing was flushed; a file this build created goes, so a failed
    ** build leaves the path as it found it. */
    if (rc != CLI_OK && opened && !existed && unlink(path) != 0 &&
        errno != ENOENT)
        fprintf(stderr, "keel: could not remove %s, which this failed build "
                "created: %s\n", path, strerror(errno));
    free(ids);
    input_free(&in);
    return rc;
}
