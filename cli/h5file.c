/* h5file.c -- reads ann-benchmarks' HDF5 files (h5file.h) with libhdf5.
**
** The file is untrusted: whatever a user downloads. Before a data set is
** read its declared shape is checked against what the file stores, so a
** small file cannot make keel allocate what it only declares:
**   - the type is an integer or a float (libhdf5 converts it to the type
**     asked for);
**   - the set and its storage are in this file (no links to other files,
**     no external storage, no virtual sets);
**   - every byte or chunk the shape declares was written: a contiguous set
**     has its whole extent allocated and inside the file, a chunked set has
**     every chunk the shape covers, and without filters those chunks fit in
**     the file too. A compressed set may hold more than the file's size;
**     it is read a bounded block of rows at a time (H5FILE_BLOCK_BYTES), so
**     memory grows only with rows that were really decoded; its filters
**     must be ones this libhdf5 decodes, and its chunks at most
**     H5FILE_MAX_CHUNK_BYTES (libhdf5 decodes a chunk whole).
** The attribute "distance" is read whatever its string type (ASCII or
** UTF-8, fixed or variable length, as h5py writes a Python str) and must be
** one string: an array of them is refused before anything is read, so its
** element count never meets a one-element buffer.
** libhdf5's own error printing is turned off: failures become one message
** in keel's style naming the file and the data set.
*/
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "h5file.h"

/* Rows are read in blocks of about this many bytes of floats. */
#define H5FILE_BLOCK_BYTES ((size_t)8 << 20)

/* libhdf5 decodes a compressed chunk whole to read any row of it: larger
** chunks are refused, so reading a row never costs more than this. */
#define H5FILE_MAX_CHUNK_BYTES ((unsigned long long)64 << 20)

_Static_assert(sizeof(hid_t) <= sizeof(int64_t), "hid_t fits h5stream's ids");

static int
h5_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
h5_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int
h5file_is(const char *path)
{
    const char *dot = strrchr(path, '.');

    return dot != NULL && strchr(dot, '/') == NULL &&
           (strcasecmp(dot, ".hdf5") == 0 || strcasecmp(dot, ".h5") == 0);
}

static hid_t
h5_open(const char *path, char *err, size_t errlen, int *rc)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        *rc = h5_fail(err, errlen, VECFILE_EIO,
                      "cannot open %s: no such file or no permission\n"
                      "help: give the path of an ann-benchmarks .hdf5 file",
                      path);
        return -1;
    }
    fclose(f);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0)
        *rc = h5_fail(err, errlen, VECFILE_EFORMAT,
                      "%s is not an HDF5 file\nhelp: give an ann-benchmarks "
                      ".hdf5 file, or name the file by its format (.fvecs, "
                      ".bvecs, .npy)", path);
    return file;
}

static void printable(const char *s, size_t len, char *out, size_t outlen);

/* The size of path on disk (0 if unknown). */
static unsigned long long
file_bytes(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 && sb.st_size > 0
        ? (unsigned long long)sb.st_size : 0;
}

/* Checks that every value data set ds declares (n x cols of esize bytes)
** is stored in the file: see the banner. */
static int
h5_stored(hid_t ds, const char *path, const char *set, hsize_t n,
          hsize_t cols, size_t esize, char *err, size_t errlen)
{
    hid_t dcpl = H5Dget_create_plist(ds);
    if (dcpl < 0)
        return h5_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: data set '%s' has no readable layout\nhelp: give "
                       "an ann-benchmarks file", path, set);
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int external = H5Pget_external_count(dcpl);
    int filters = H5Pget_nfilters(dcpl);
    hsize_t chunk[2] = {0, 0};
    int chunk_rank = layout == H5D_CHUNKED ? H5Pget_chunk(dcpl, 2, chunk) : 0;
    /* The first filter libhdf5 here cannot decode (h5py's lzf, blosc). */
    H5Z_filter_t missing = H5Z_FILTER_NONE;
    char fname[64] = "";
    for (int i = 0; i < filters && missing == H5Z_FILTER_NONE; i++) {
        unsigned flags = 0, config = 0;
        size_t nvals = 0;
        char raw[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &nvals,
                                         NULL, sizeof raw, raw, &config);
        if (id < 0 || H5Zfilter_avail(id) <= 0) {
            missing = id < 0 ? (H5Z_filter_t)-1 : id;
            printable(raw, sizeof raw, fname, sizeof fname);
        }
    }
    H5Pclose(dcpl);

    if (missing != H5Z_FILTER_NONE)
        return h5_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: data set '%s' is compressed with filter %d (%s), "
                       "which this libhdf5 cannot decode\nhelp: write the "
                       "file again uncompressed or with gzip (h5py: "
                       "compression='gzip')", path, set, (int)missing,
                       fname[0] ? fname : "unnamed");

    if (n == 0 || cols == 0)
        return VECFILE_OK;
    /* Declared bytes; n <= SIZE_MAX / cols / 4 was checked, esize <= 16. */
    unsigned long long need = (unsigned long long)n * cols * esize;
    unsigned long long have = H5Dget_storage_size(ds);
    unsigned long long size = file_bytes(path);
    if (external != 0 || layout == H5D_VIRTUAL)
        return h5_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: data set '%s' keeps its values in other files "
                       "(%s), which keel does not read\nhelp: give an "
                       "ann-benchmarks file, which holds its data sets "
                       "itself", path, set,
                       layout == H5D_VIRTUAL ? "a virtual data set"
                                             : "external storage");
    if (have == 0)
        return h5_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: data set '%s' is declared as %llu x %llu but "
                       "none of it was written\nhelp: the file is incomplete;"
                       " download or write it again",
                       path, set, (unsigned long long)n,
                       (unsigned long long)cols);
    int cut_short = 0; /* the file cannot hold the set's bytes */
    if (layout == H5D_CONTIGUOUS) {
        haddr_t at = H5Dget_offset(ds);
        cut_short = at == HADDR_UNDEF || have < need ||
                    (size > 0 && (at > size || need > size - at));
    } else if (layout == H5D_CHUNKED) {
        hsize_t written = 0;
        hid_t space = H5Dget_space(ds); /* libhdf5 1.10 refuses H5S_ALL */
        herr_t counted = space < 0 ? -1
                                   : H5Dget_num_chunks(ds, space, &written);
        if (space >= 0)
            H5Sclose(space);
        if (chunk_rank != 2 || chunk[0] == 0 || chunk[1] == 0 || counted < 0)
            return h5_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: data set '%s' has chunks keel cannot count"
                           "\nhelp: give an ann-benchmarks file", path, set);
        /* chunk[0] * chunk[1] < 2**32: libhdf5 refuses larger chunks. */
        unsigned long long chunk_bytes =
            (unsigned long long)chunk[0] * chunk[1] * esize;
        if (filters > 0 && chunk_bytes > H5FILE_MAX_CHUNK_BYTES)
            return h5_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: data set '%s' is compressed in chunks of "
                           "%llu x %llu values (%llu bytes); keel decodes at "
                           "most %llu bytes a chunk\nhelp: write the file "
                           "again with smaller chunks (h5py chooses them "
                           "with chunks=True) or uncompressed",
                           path, set, (unsigned long long)chunk[0],
                           (unsigned long long)chunk[1], chunk_bytes,
                           H5FILE_MAX_CHUNK_BYTES);
        unsigned long long want = (unsigned long long)((n + chunk[0] - 1) /
                                                       chunk[0]) *
                                  ((cols + chunk[1] - 1) / chunk[1]);
        if (written < want)
            return h5_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: data set '%s' is declared as %llu x %llu, "
                           "but only %llu of its %llu chunks were written"
                           "\nhelp: the file is incomplete; download or "
                           "write it again",
                           path, set, (unsigned long long)n,
                           (unsigned long long)cols,
                           (unsigned long long)written, want);
        cut_short = filters == 0 && size > 0 && (have < need || have > size);
    } else if (layout != H5D_COMPACT || have < need) {
        return h5_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: data set '%s' has a storage layout keel does not "
                       "read, or holds less than its shape\nhelp: give an "
                       "ann-benchmarks file", path, set);
    }
    if (cut_short)
        return h5_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: data set '%s' is declared as %llu x %llu "
                       "(%llu bytes), but the file (%llu bytes) does not "
                       "hold them\nhelp: the file is cut short or "
                       "damaged; download or write it again",
                       path, set, (unsigned long long)n,
                       (unsigned long long)cols, need, size);
    return VECFILE_OK;
}

/* Opens data set set of file and checks that it is 2-D numbers with rows of
** 1..max columns, all of them stored; *n and *cols get its shape. */
static hid_t
h5_set(hid_t file, const char *path, const char *set, uint32_t max,
       size_t *n, uint32_t *cols, char *err, size_t errlen)
{
    if (H5Lexists(file, set, H5P_DEFAULT) <= 0) {
        h5_fail(err, errlen, VECFILE_EFORMAT,
                "%s has no data set '%s'\nhelp: give an ann-benchmarks file, "
                "which holds train, test, neighbors and distances", path, set);
        return -1;
    }
    H5L_info_t link;
    if (H5Lget_info(file, set, &link, H5P_DEFAULT) < 0 ||
        link.type != H5L_TYPE_HARD) {
        h5_fail(err, errlen, VECFILE_EFORMAT,
                "%s: '%s' is a link to %s, not a data set of the file\n"
                "help: give an ann-benchmarks file, which holds its data "
                "sets itself", path, set,
                link.type == H5L_TYPE_EXTERNAL ? "another file" : "elsewhere");
        return -1;
    }
    hid_t ds = H5Dopen2(file, set, H5P_DEFAULT);
    hid_t space = ds < 0 ? -1 : H5Dget_space(ds);
    hid_t type = ds < 0 ? -1 : H5Dget_type(ds);
    H5T_class_t cls = type < 0 ? H5T_NO_CLASS : H5Tget_class(type);
    size_t esize = type < 0 ? 0 : H5Tget_size(type);
    hsize_t dims[H5S_MAX_RANK] = {0};
    int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    if (rank > 0 && H5Sget_simple_extent_dims(space, dims, NULL) < 0)
        rank = -1;
    if (space >= 0)
        H5Sclose(space);
    if (type >= 0)
        H5Tclose(type);
    if (ds < 0 || ((cls != H5T_INTEGER && cls != H5T_FLOAT) ||
                   esize < 1 || esize > 16)) {
        if (ds >= 0)
            H5Dclose(ds);
        h5_fail(err, errlen, VECFILE_EFORMAT,
                "%s: data set '%s' does not hold numbers\nhelp: give an "
                "ann-benchmarks file (float or integer data sets)", path, set);
        return -1;
    }
    if (rank != 2 || dims[1] < 1 || dims[1] > max ||
        dims[0] > SIZE_MAX / dims[1] / sizeof(double)) {
        char shape[96] = "";
        size_t o = 0;
        for (int i = 0; i < rank && o < sizeof shape; i++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%llu",
                                  i ? " x " : "", (unsigned long long)dims[i]);
        H5Dclose(ds);
        h5_fail(err, errlen, VECFILE_EFORMAT,
                "%s: data set '%s' is not a 2-D array of rows of 1..%u "
                "values (rank %d, shape %s)\nhelp: give an "
                "ann-benchmarks file", path, set, max, rank,
                rank > 0 ? shape : "none");
        return -1;
    }
    if (h5_stored(ds, path, set, dims[0], dims[1], esize, err, errlen) !=
        VECFILE_OK) {
        H5Dclose(ds);
        return -1;
    }
    *n = (size_t)dims[0];
    *cols = (uint32_t)dims[1];
    return ds;
}

/* Reads columns 0..cols-1 of rows [first, first + rows) of ds as mem_type
** into dst. */
static int
h5_read_rows(hid_t ds, hid_t mem_type, size_t first, size_t rows,
             uint32_t cols, void *dst)
{
    hsize_t start[2] = {first, 0}, count[2] = {rows, cols};
    hid_t fspace = H5Dget_space(ds);
    hid_t mspace = H5Screate_simple(2, count, NULL);
    int ok = fspace >= 0 && mspace >= 0 &&
             H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count,
                                 NULL) >= 0 &&
             H5Dread(ds, mem_type, mspace, fspace, H5P_DEFAULT, dst) >= 0;
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    return ok ? 0 : -1;
}

int
h5stream_open(const char *path, const char *set, h5stream *s, char *err,
              size_t errlen)
{
    int rc = VECFILE_EFORMAT;
    hid_t file = h5_open(path, err, errlen, &rc);
    size_t n;
    uint32_t dim;

    if (file < 0)
        return rc;
    hid_t ds = h5_set(file, path, set, VECFILE_MAX_DIM, &n, &dim, err,
                      errlen);
    if (ds < 0) {
        H5Fclose(file);
        return VECFILE_EFORMAT;
    }
    memset(s, 0, sizeof *s);
    hid_t type = H5Dget_type(ds);
    s->wide = type >= 0 && H5Tget_class(type) == H5T_FLOAT &&
              H5Tget_size(type) > sizeof(float);
    if (type >= 0)
        H5Tclose(type);
    s->file = file;
    s->ds = ds;
    s->path = path;
    s->set = set;
    s->n = n;
    s->dim = dim;
    return VECFILE_OK;
}

/* Reads rows of a set of doubles (or wider) into dst as floats: a finite
** value beyond float's range is refused by value, where a conversion to
** float would make it an infinity the file does not hold. */
static int
h5_read_wide(h5stream *s, float *dst, size_t rows, char *err, size_t errlen)
{
    size_t chunk = h5file_block_rows(s->dim);
    double *tmp = malloc(chunk * s->dim * sizeof *tmp);

    if (tmp == NULL)
        return h5_fail(err, errlen, VECFILE_ENOMEM, "%s: no memory to read "
                       "data set '%s'\nhelp: free memory", s->path, s->set);
    for (size_t r = 0; r < rows; r += chunk) {
        size_t m = rows - r < chunk ? rows - r : chunk;
        if (h5_read_rows((hid_t)s->ds, H5T_NATIVE_DOUBLE, s->next + r, m,
                         s->dim, tmp) != 0) {
            free(tmp);
            return -1;
        }
        for (size_t i = 0; i < m * s->dim; i++) {
            double v = tmp[i];
            if (isfinite(v) && fabs(v) > FLT_MAX) {
                free(tmp);
                return h5_fail(err, errlen, VECFILE_EFORMAT,
                               "vector %zu of %s has %.17g at component "
                               "%zu, beyond a float's range (3.4e38), which "
                               "keel stores\nhelp: scale the vectors (and "
                               "queries) down, which scales every distance "
                               "alike, or drop the vector",
                               s->next + r + i / s->dim, s->path, v,
                               i % s->dim);
            }
            dst[r * s->dim + i] = (float)v;
        }
    }
    free(tmp);
    return VECFILE_OK;
}

int
h5stream_read(h5stream *s, float *dst, size_t max, size_t *n, char *err,
              size_t errlen)
{
    size_t rows = s->n - s->next < max ? s->n - s->next : max;

    if (rows > 0 && s->wide) {
        int rc = h5_read_wide(s, dst, rows, err, errlen);
        if (rc > 0)
            return rc; /* refused, with its message */
        if (rc < 0)
            return h5_fail(err, errlen, VECFILE_EFORMAT,
                           "%s: data set '%s' cannot be read as numbers at "
                           "rows %zu..%zu\nhelp: the file is damaged; "
                           "download or write it again", s->path, s->set,
                           s->next, s->next + rows - 1);
    } else if (rows > 0 && h5_read_rows((hid_t)s->ds, H5T_NATIVE_FLOAT,
                                        s->next, rows, s->dim, dst) != 0)
        return h5_fail(err, errlen, VECFILE_EFORMAT,
                       "%s: data set '%s' cannot be read as numbers at rows "
                       "%zu..%zu\nhelp: the file is damaged, or its data set "
                       "is not float or integer numbers; download or write it"
                       " again", s->path, s->set, s->next, s->next + rows - 1);
    s->next += rows;
    *n = rows;
    return VECFILE_OK;
}

void
h5stream_close(h5stream *s)
{
    if (s == NULL || s->file == 0)
        return;
    H5Dclose((hid_t)s->ds);
    H5Fclose((hid_t)s->file);
    memset(s, 0, sizeof *s);
}

size_t
h5file_block_rows(uint32_t dim)
{
    size_t rows = H5FILE_BLOCK_BYTES / ((size_t)dim * sizeof(float));
    return rows > 0 ? rows : 1;
}

int
h5file_load(const char *path, const char *set, vecfile *out, char *err,
            size_t errlen)
{
    h5stream s;
    int rc = h5stream_open(path, set, &s, err, errlen);
    float *data = NULL;
    size_t have = 0, cap = 0, block;

    if (rc != VECFILE_OK)
        return rc;
    block = h5file_block_rows(s.dim);
    /* Grows with the rows read, so a set that declares more than it
    ** decodes to fails before it costs its declared size. */
    while (have < s.n) {
        size_t want = s.n - have < block ? s.n - have : block, got = 0;
        if (have + want > cap) {
            size_t ncap = cap * 2 > have + want ? cap * 2 : have + want;
            if (ncap > s.n)
                ncap = s.n;
            float *nd = realloc(data, ncap * s.dim * sizeof *data);
            if (nd == NULL) {
                rc = h5_fail(err, errlen, VECFILE_ENOMEM,
                             "%s: no memory for %zu vectors of %u floats\n"
                             "help: free memory", path, ncap, s.dim);
                break;
            }
            data = nd;
            cap = ncap;
        }
        rc = h5stream_read(&s, data + have * s.dim, want, &got, err, errlen);
        if (rc != VECFILE_OK)
            break;
        have += got;
    }
    if (rc == VECFILE_OK) {
        out->data = data;
        out->n = s.n;
        out->dim = s.dim;
        data = NULL;
    }
    free(data);
    h5stream_close(&s);
    return rc;
}

int
h5file_load_truth(const char *path, uint32_t cols, int32_t **rows, size_t *n,
                  uint32_t *width, char *err, size_t errlen)
{
    size_t nr;
    uint32_t w;
    int rc = VECFILE_EFORMAT;
    hid_t file = h5_open(path, err, errlen, &rc);
    int32_t *data = NULL;
    double *block = NULL;

    if (file < 0)
        return rc;
    hid_t ds = h5_set(file, path, "neighbors", INT32_MAX, &nr, &w, err,
                      errlen);
    if (ds < 0) {
        H5Fclose(file);
        return VECFILE_EFORMAT;
    }
    /* Only the first cols columns are read (a search measures recall@k):
    ** a wide set costs its rows x cols, never its declared width. */
    if (cols > 0 && cols < w)
        w = cols;
    /* Read as doubles (exact for every int32 and every float), so a value
    ** that is no row number is refused rather than truncated or clamped. */
    size_t brows = H5FILE_BLOCK_BYTES / ((size_t)w * sizeof(double));
    if (brows == 0)
        brows = 1;
    if (brows > nr)
        brows = nr;
    data = malloc(nr * w * sizeof *data + 1);
    block = malloc(brows * w * sizeof *block + 1);
    if (data == NULL || block == NULL) {
        rc = h5_fail(err, errlen, VECFILE_ENOMEM,
                     "%s: no memory for %zu rows of %u neighbours\nhelp: "
                     "free memory", path, nr, w);
        goto out;
    }
    rc = VECFILE_OK;
    for (size_t r = 0; r < nr && rc == VECFILE_OK; r += brows) {
        size_t m = nr - r < brows ? nr - r : brows;
        if (h5_read_rows(ds, H5T_NATIVE_DOUBLE, r, m, w, block) != 0) {
            rc = h5_fail(err, errlen, VECFILE_EFORMAT,
                         "%s: data set 'neighbors' cannot be read as numbers "
                         "at rows %zu..%zu\nhelp: the file is damaged; "
                         "download or write it again", path, r, r + m - 1);
            break;
        }
        for (size_t i = 0; i < m * w; i++) {
            double v = block[i];
            if (!(v >= -1.0 && v <= (double)INT32_MAX) || v != floor(v)) {
                rc = h5_fail(err, errlen, VECFILE_EFORMAT,
                             "%s: data set 'neighbors' holds %.17g at row "
                             "%zu, column %zu, which is no row number of "
                             "'train' (0..2,147,483,647, or -1 for none)\nhelp: give an "
                             "ann-benchmarks file, whose neighbors are the "
                             "integer rows of train", path, v, r + i / w,
                             i % w);
                break;
            }
            data[r * w + i] = (int32_t)v;
        }
    }
    if (rc == VECFILE_OK) {
        *rows = data;
        *n = nr;
        *width = w;
        data = NULL;
    }
out:
    free(block);
    free(data);
    H5Dclose(ds);
    H5Fclose(file);
    return rc;
}

/* Copies s (len bytes) to out for printing: bytes outside printable ASCII
** (terminal escapes among them) become '?', trailing spaces go. */
static void
printable(const char *s, size_t len, char *out, size_t outlen)
{
    size_t o = 0;

    for (size_t i = 0; i < len && s[i] != '\0' && o + 1 < outlen; i++) {
        unsigned char c = (unsigned char)s[i];
        out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    while (o > 0 && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
}

/* Reads the one string attr holds, of file type type, into out. */
static int
read_string(hid_t attr, hid_t type, const char *path, char *out,
            size_t outlen, char *err, size_t errlen)
{
    hid_t mem = H5Tcopy(H5T_C_S1);
    H5T_cset_t cset = H5Tget_cset(type);
    int ok = 0;

    /* libhdf5 converts no string between ASCII and UTF-8, so memory takes
    ** the file's character set. */
    if (mem >= 0 && cset >= 0 && H5Tset_cset(mem, cset) >= 0) {
        if (H5Tis_variable_str(type) > 0) {
            char *s = NULL;
            if (H5Tset_size(mem, H5T_VARIABLE) >= 0 &&
                H5Aread(attr, mem, &s) >= 0 && s != NULL) {
                printable(s, strlen(s), out, outlen);
                ok = 1;
            }
            if (s != NULL)
                H5free_memory(s);
        } else {
            size_t sz = H5Tget_size(type);
            char *s = sz > 0 && sz <= 4096 ? calloc(sz + 1, 1) : NULL;
            if (s != NULL && H5Tset_size(mem, sz + 1) >= 0 &&
                H5Tset_strpad(mem, H5T_STR_NULLTERM) >= 0 &&
                H5Aread(attr, mem, s) >= 0) {
                printable(s, sz, out, outlen);
                ok = 1;
            }
            free(s);
        }
    }
    if (mem >= 0)
        H5Tclose(mem);
    return ok ? VECFILE_OK
              : h5_fail(err, errlen, VECFILE_EFORMAT,
                        "%s: the attribute 'distance' cannot be read as a "
                        "string\nhelp: give --metric", path);
}

int
h5file_distance(const char *path, char *out, size_t outlen, char *err,
                size_t errlen)
{
    int rc = VECFILE_EFORMAT;
    hid_t file = h5_open(path, err, errlen, &rc);

    if (file < 0)
        return rc;
    out[0] = '\0';
    rc = VECFILE_OK;
    if (H5Aexists(file, "distance") > 0) {
        hid_t attr = H5Aopen(file, "distance", H5P_DEFAULT);
        hid_t type = attr < 0 ? -1 : H5Aget_type(attr);
        hid_t space = attr < 0 ? -1 : H5Aget_space(attr);
        hssize_t count = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
        if (type < 0 || H5Tget_class(type) != H5T_STRING)
            rc = h5_fail(err, errlen, VECFILE_EFORMAT,
                         "%s: the attribute 'distance' is not a string\n"
                         "help: give --metric", path);
        else if (count != 1)
            rc = h5_fail(err, errlen, VECFILE_EFORMAT,
                         "%s: the attribute 'distance' holds %lld strings; "
                         "ann-benchmarks writes one, the metric's name\n"
                         "help: give --metric", path, (long long)count);
        else
            rc = read_string(attr, type, path, out, outlen, err, errlen);
        if (space >= 0)
            H5Sclose(space);
        if (type >= 0)
            H5Tclose(type);
        if (attr >= 0)
            H5Aclose(attr);
    }
    H5Fclose(file);
    return rc;
}
