/* h5file.c -- reads ann-benchmarks' HDF5 files (h5file.h) with libhdf5.
**
** Each call opens the file read-only, reads one data set or attribute whole
** (libhdf5 converts the stored type to the one asked for), and closes it.
** libhdf5's own error printing is turned off: failures become one message
** in keel's style naming the file and the data set.
*/
#define _POSIX_C_SOURCE 200809L

#include <hdf5.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "h5file.h"

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
h5_open(const char *path, char *err, size_t errlen)
{
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return h5_fail(err, errlen, VECFILE_EIO,
                       "cannot open %s: no such file or no permission\n"
                       "help: give the path of an ann-benchmarks .hdf5 file",
                       path), -1;
    fclose(f);
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0)
        h5_fail(err, errlen, VECFILE_EFORMAT,
                "%s is not an HDF5 file\nhelp: give an ann-benchmarks .hdf5 "
                "file, or name the file by its format (.fvecs, .bvecs, .npy)",
                path);
    return file;
}

/* Opens data set set of file and checks that it is 2-D with rows of 1..max
** columns; *n and *cols get its shape. */
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
    hid_t ds = H5Dopen2(file, set, H5P_DEFAULT);
    hid_t space = ds < 0 ? -1 : H5Dget_space(ds);
    hsize_t dims[2] = {0, 0};
    int rank = space < 0 ? -1 : H5Sget_simple_extent_ndims(space);
    if (rank == 2)
        H5Sget_simple_extent_dims(space, dims, NULL);
    if (space >= 0)
        H5Sclose(space);
    if (rank != 2 || dims[1] < 1 || dims[1] > max ||
        dims[0] > SIZE_MAX / dims[1] / sizeof(float)) {
        if (ds >= 0)
            H5Dclose(ds);
        h5_fail(err, errlen, VECFILE_EFORMAT,
                "%s: data set '%s' is not a 2-D array of rows of 1..%u "
                "values (rank %d, shape %llu x %llu)\nhelp: give an "
                "ann-benchmarks file", path, set, max, rank,
                (unsigned long long)dims[0], (unsigned long long)dims[1]);
        return -1;
    }
    *n = (size_t)dims[0];
    *cols = (uint32_t)dims[1];
    return ds;
}

int
h5file_load(const char *path, const char *set, vecfile *out, char *err,
            size_t errlen)
{
    size_t n;
    uint32_t dim;
    int rc = VECFILE_EFORMAT;
    hid_t file = h5_open(path, err, errlen);

    if (file < 0)
        return err && strstr(err, "cannot open") ? VECFILE_EIO
                                                 : VECFILE_EFORMAT;
    hid_t ds = h5_set(file, path, set, VECFILE_MAX_DIM, &n, &dim, err,
                      errlen);
    if (ds < 0)
        goto out;
    float *data = malloc(n * dim * sizeof *data + 1);
    if (data == NULL) {
        rc = h5_fail(err, errlen, VECFILE_ENOMEM,
                     "%s: no memory for %zu vectors of %u floats\nhelp: free "
                     "memory", path, n, dim);
    } else if (n > 0 && H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                                H5P_DEFAULT, data) < 0) {
        free(data);
        rc = h5_fail(err, errlen, VECFILE_EFORMAT,
                     "%s: data set '%s' cannot be read as numbers\nhelp: give "
                     "an ann-benchmarks file (float or integer data sets)",
                     path, set);
    } else {
        out->data = n > 0 ? data : (free(data), NULL);
        out->n = n;
        out->dim = dim;
        rc = VECFILE_OK;
    }
    H5Dclose(ds);
out:
    H5Fclose(file);
    return rc;
}

int
h5file_load_truth(const char *path, int32_t **rows, size_t *n,
                  uint32_t *width, char *err, size_t errlen)
{
    size_t nr;
    uint32_t w;
    int rc = VECFILE_EFORMAT;
    hid_t file = h5_open(path, err, errlen);

    if (file < 0)
        return VECFILE_EFORMAT;
    hid_t ds = h5_set(file, path, "neighbors", INT32_MAX, &nr, &w, err,
                      errlen);
    if (ds < 0)
        goto out;
    int32_t *data = malloc(nr * w * sizeof *data + 1);
    if (data == NULL) {
        rc = h5_fail(err, errlen, VECFILE_ENOMEM,
                     "%s: no memory for %zu rows of %u neighbours\nhelp: "
                     "free memory", path, nr, w);
    } else if (nr > 0 && H5Dread(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL,
                                 H5P_DEFAULT, data) < 0) {
        free(data);
        rc = h5_fail(err, errlen, VECFILE_EFORMAT,
                     "%s: data set 'neighbors' cannot be read as integers\n"
                     "help: give an ann-benchmarks file", path);
    } else {
        *rows = data;
        *n = nr;
        *width = w;
        rc = VECFILE_OK;
    }
    H5Dclose(ds);
out:
    H5Fclose(file);
    return rc;
}

int
h5file_distance(const char *path, char *out, size_t outlen, char *err,
                size_t errlen)
{
    int rc = VECFILE_OK;
    hid_t file = h5_open(path, err, errlen);

    if (file < 0)
        return VECFILE_EFORMAT;
    out[0] = '\0';
    if (H5Aexists(file, "distance") > 0) {
        hid_t attr = H5Aopen(file, "distance", H5P_DEFAULT);
        hid_t type = attr < 0 ? -1 : H5Aget_type(attr);
        if (type >= 0 && H5Tget_class(type) == H5T_STRING) {
            if (H5Tis_variable_str(type) > 0) {
                char *s = NULL;
                hid_t mem = H5Tcopy(H5T_C_S1);
                H5Tset_size(mem, H5T_VARIABLE);
                if (H5Aread(attr, mem, &s) >= 0 && s != NULL) {
                    snprintf(out, outlen, "%s", s);
                    H5free_memory(s);
                }
                H5Tclose(mem);
            } else {
                size_t sz = H5Tget_size(type);
                char *s = calloc(sz + 1, 1);
                hid_t mem = H5Tcopy(H5T_C_S1);
                H5Tset_size(mem, sz + 1);
                if (s != NULL && H5Aread(attr, mem, s) >= 0)
                    snprintf(out, outlen, "%s", s);
                free(s);
                H5Tclose(mem);
            }
        } else {
            rc = h5_fail(err, errlen, VECFILE_EFORMAT,
                         "%s: the attribute 'distance' is not a string\n"
                         "help: give --metric", path);
        }
        if (type >= 0)
            H5Tclose(type);
        if (attr >= 0)
            H5Aclose(attr);
    }
    H5Fclose(file);
    return rc;
}
