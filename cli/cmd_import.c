/* cmd_import.c -- keel import-hnswlib: reads an index saved by hnswlib's
** save_index (hnswalg.h, saveIndex) into a new keel index with the same
** labels (as ids) and vectors; keel links its own graph.
**
** hnswlib's file, little-endian, as hnswlib 0.4 to 0.8 write it:
**
**   offset  size  field
**        0     8  offsetLevel0_          0
**        8     8  max_elements_          capacity
**       16     8  cur_element_count      elements that follow (n)
**       24     8  size_data_per_element_ per = label_offset_ + 8
**       32     8  label_offset_          offset_data_ + 4 * dim
**       40     8  offsetData_            4 + 4 * maxM0_
**       48     4  maxlevel_              (int)
**       52     4  enterpoint_node_       (uint32)
**       56     8  maxM_
**       64     8  maxM0_
**       72     8  M_
**       80     8  mult_                  (double)
**       88     8  ef_construction_
**       96  n*per elements: level-0 links (uint16 count, a byte whose bit 0
**                marks the element deleted, a byte, maxM0_ uint32 links),
**                then the vector (dim float32), then the label (uint64)
**   then, per element: uint32 size (a multiple of 4 + 4 * maxM_) and the
**   upper levels' links; the file ends there.
**
** Elements marked deleted are left out (keel.hnswlib.convert keeps them,
** marked, in the .hnswlib file beside the index). The file does not record
** its space: --metric says it (default l2).
*/
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define HEADER_BYTES 96

enum { O_METRIC, O_THREADS, O_JSON, O_COUNT };

static const char *const fmt_help =
    "give a file written by hnswlib's Index.save_index (hnswlib 0.4 to 0.8)";

struct hnsw_file {
    unsigned char *raw;
    size_t len;
    uint64_t max_elements, n, per, label_offset, offset_data;
    uint64_t max_m, max_m0, m, ef_construction;
    uint32_t dim;
};

static uint64_t
get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t
get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static int
read_all(const char *path, struct hnsw_file *f)
{
    /* A device or pipe (/dev/zero) would be read until memory runs out:
    ** hnswlib's save_index writes a regular file. */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return cli_fail("give the path of an hnswlib index file (not a "
                        "device, pipe or directory)",
                        "%s is not a regular file", path);
    FILE *in = fopen(path, "rb");
    if (in == NULL)
        return cli_fail("give the path of an hnswlib index file",
                        "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (buf == NULL) {
            fclose(in);
            return cli_fail("free memory, or import on a larger machine",
                            "out of memory reading %s", path);
        }
        len += fread(buf + len, 1, cap - len, in);
        if (len < cap)
            break;
        unsigned char *more = cap > SIZE_MAX / 2 ? NULL
                                                 : realloc(buf, cap * 2);
        if (more == NULL)
            free(buf);
        buf = more;
        cap *= 2;
    }
    int bad = ferror(in);
    fclose(in);
    if (bad) {
        free(buf);
        return cli_fail("check the file and the disk", "cannot read %s",
                        path);
    }
    f->raw = buf;
    f->len = len;
    return CLI_OK;
}

/* Checks the header and walks the link lists to the file's end. */
static int
parse(const char *path, struct hnsw_file *f)
{
    const unsigned char *r = f->raw;
    if (f->len < HEADER_BYTES)
        return cli_fail(fmt_help, "%s is %zu bytes, shorter than hnswlib's "
                        "%d-byte header", path, f->len, HEADER_BYTES);
    uint64_t level0 = get_u64(r);
    f->max_elements = get_u64(r + 8);
    f->n = get_u64(r + 16);
    f->per = get_u64(r + 24);
    f->label_offset = get_u64(r + 32);
    f->offset_data = get_u64(r + 40);
    f->max_m = get_u64(r + 56);
    f->max_m0 = get_u64(r + 64);
    f->m = get_u64(r + 72);
    f->ef_construction = get_u64(r + 88);
    const char *field = NULL;
    uint64_t value = 0;
    uint64_t dim4 = f->label_offset - f->offset_data;
    if (level0 != 0)
        field = "offsetLevel0_", value = level0;
    else if (f->max_m0 > 65535 || f->offset_data != 4 + 4 * f->max_m0)
        field = "offsetData_", value = f->offset_data;
    else if (f->label_offset <= f->offset_data || dim4 % 4 != 0 ||
             dim4 / 4 > 4096)
        field = "label_offset_", value = f->label_offset;
    else if (f->per != f->label_offset + 8)
        field = "size_data_per_element_", value = f->per;
    else if (f->n > f->max_elements ||
             f->n > (f->len - HEADER_BYTES) / f->per)
        field = "cur_element_count", value = f->n;
    else if (f->max_m == 0 || f->max_m > 65535)
        field = "maxM_", value = f->max_m;
    if (field != NULL)
        return cli_fail(fmt_help, "%s is not an hnswlib index: its %s (%llu) "
                        "does not fit the format", path, field,
                        (unsigned long long)value);
    f->dim = (uint32_t)(dim4 / 4);
    size_t at = HEADER_BYTES + (size_t)(f->n * f->per);
    uint64_t unit = 4 + 4 * f->max_m;
    for (uint64_t i = 0; i < f->n; i++) {
        if (f->len - at < 4)
            return cli_fail(fmt_help, "%s is cut short in element %llu's "
                            "link lists", path, (unsigned long long)i);
        uint32_t size = get_u32(r + at);
        if (size % unit != 0 || f->len - at - 4 < size)
            return cli_fail(fmt_help, "%s: element %llu's link lists are %u "
                            "bytes, not a multiple of %llu within the file",
                            path, (unsigned long long)i, size,
                            (unsigned long long)unit);
        at += 4 + size;
    }
    if (at != f->len)
        return cli_fail(fmt_help, "%s is %zu bytes, but hnswlib's format "
                        "ends at byte %zu", path, f->len, at);
    return CLI_OK;
}

static int
parse_metric(const char *s, keel_metric *out)
{
    static const struct {
        const char *name;
        keel_metric metric;
    } names[] = {{"l2", KEEL_L2},       {"euclidean", KEEL_L2},
                 {"ip", KEEL_IP},       {"dot", KEEL_IP},
                 {"cosine", KEEL_COSINE}, {"angular", KEEL_COSINE}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].metric;
            return CLI_OK;
        }
    return cli_usage("import-hnswlib",
                     "give --metric l2, ip or cosine: the space the hnswlib "
                     "index was made with",
                     "--metric %s is not a metric", s);
}

static void
print_summary(const char *from, const char *to, const struct hnsw_file *f,
              uint64_t live, const keel_options *opt, double seconds,
              int json)
{
    char a[32], b[32];
    uint64_t deleted = f->n - live;
    if (json) {
        printf("{\"hnswlib_file\": ");
        cli_json_string(stdout, from);
        printf(", \"index\": ");
        cli_json_string(stdout, to);
        printf(", \"vectors\": %llu, \"skipped_deleted\": %llu, "
               "\"dimensions\": %u, \"metric\": \"%s\", \"M\": %u, "
               "\"ef_construction\": %u, \"seconds\": %.3f}\n",
               (unsigned long long)live, (unsigned long long)deleted, f->dim,
               cli_metric_name(opt->metric), opt->max_connections,
               opt->ef_construction, seconds);
        return;
    }
    printf("imported %s vectors of %u dimensions from %s into %s "
           "(metric %s, M %u, ef_construction %u) in %.2f s\n",
           cli_commas(live, a, sizeof a), f->dim, from, to,
           cli_metric_name(opt->metric), opt->max_connections,
           opt->ef_construction, seconds);
    if (deleted)
        printf("left out %s elements marked deleted\n",
               cli_commas(deleted, b, sizeof b));
}

int
cmd_import(int argc, char **argv)
{
    static const char *const names[] = {"HNSWLIB_FILE", "KEEL_FILE"};
    cli_opt opts[O_COUNT] = {
        [O_METRIC] = {"--metric", 1, NULL},
        [O_THREADS] = {"--threads", 1, NULL},
        [O_JSON] = {"--json", 0, NULL},
    };
    struct hnsw_file f;
    keel_options opt;
    keel_index *idx = NULL;
    float *vecs = NULL;
    uint64_t *ids = NULL, live = 0;
    struct stat sb;
    int npos, rc, created = 0;

    memset(&f, 0, sizeof f);
    memset(&opt, 0, sizeof opt);
    rc = cli_parse("import-hnswlib", argc, argv, opts, O_COUNT, &npos);
    if (rc == CLI_OK)
        rc = cli_want("import-hnswlib", npos, argv, names, 2, 0);
    if (rc == CLI_OK && opts[O_METRIC].value != NULL)
        rc = parse_metric(opts[O_METRIC].value, &opt.metric);
    if (rc == CLI_OK && opts[O_THREADS].value != NULL)
        rc = cli_u32("import-hnswlib", "--threads", opts[O_THREADS].value, 0,
                     4096, &opt.threads);
    if (rc != CLI_OK)
        return rc;
    const char *from = argv[0], *to = argv[1];
    if (stat(to, &sb) == 0)
        return cli_fail("give a new path for the keel index (import never "
                        "writes into an existing file)",
                        "%s already exists", to);
    rc = read_all(from, &f);
    if (rc == CLI_OK)
        rc = parse(from, &f);
    if (rc != CLI_OK)
        goto out;

    size_t n = (size_t)f.n;
    vecs = malloc(n ? n * f.dim * sizeof *vecs : 1);
    ids = malloc(n ? n * sizeof *ids : 1);
    if (vecs == NULL || ids == NULL) {
        rc = cli_fail("free memory, or import on a larger machine",
                      "out of memory for %zu vectors of %u dimensions", n,
                      f.dim);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *e = f.raw + HEADER_BYTES + i * f.per;
        if (e[2] & 1)
            continue; /* marked deleted */
        memcpy(vecs + live * f.dim, e + f.offset_data, f.dim * sizeof *vecs);
        ids[live++] = get_u64(e + f.label_offset);
    }
    opt.max_connections = f.m < 2 ? 2 : f.m > 32767 ? 32767 : (uint32_t)f.m;
    opt.ef_construction = f.ef_construction == 0 ? 200
                          : f.ef_construction > 100000
                              ? 100000 : (uint32_t)f.ef_construction;
    double start = cli_now();
    int krc = keel_open(to, f.dim, &opt, &idx);
    if (krc != KEEL_OK) {
        rc = cli_open_error(krc);
        goto out;
    }
    created = 1;
    cli_progress bar;
    cli_progress_begin(&bar, idx, "linking");
    krc = live ? keel_add_batch(idx, vecs, (size_t)live, ids, NULL) : KEEL_OK;
    cli_progress_end(&bar, idx);
    if (krc == KEEL_OK)
        krc = keel_flush(idx);
    if (krc != KEEL_OK) {
        rc = cli_keel_error(krc);
        goto out;
    }
    print_summary(from, to, &f, live, &opt, cli_now() - start,
                  opts[O_JSON].value != NULL);

out:
    if (idx != NULL) {
        int crc = keel_close(idx);
        if (crc != KEEL_OK && rc == CLI_OK)
            rc = cli_keel_error(crc);
    }
    /* A failed import leaves no half-made index behind. */
    if (rc != CLI_OK && created && unlink(to) != 0 && errno != ENOENT)
        fprintf(stderr, "keel: could not remove %s, which this failed "
                "import created: %s\n", to, strerror(errno));
    free(vecs);
    free(ids);
    free(f.raw);
    return rc;
}
