/* mkhdf5.c -- writes ann-benchmarks .hdf5 files for the CLI tests, with
** the HDF5 C API: good ones from .fvecs and .ivecs files, and small hostile
** ones, each with one defect the reader must refuse.
**
**   mkhdf5 [--ascii] OUT.hdf5 DISTANCE TRAIN.fvecs TEST.fvecs NEIGHBORS.ivecs
**   mkhdf5 --hostile KIND OUT.hdf5
**
** As ann-benchmarks writes them (through h5py): data sets train and test
** (float32 here; test is stored as float64, which the reader converts),
** neighbors (int32), distances (float32, zeros: keel does not read them)
** and the file attribute distance, a Python str, which h5py stores as a
** variable-length UTF-8 string ("euclidean", "angular", "jaccard").
** --ascii stores it as a variable-length ASCII string instead, as other
** writers do.
**
** --hostile writes a small valid file (train 64 x 8, test 4 x 8, neighbors
** 4 x 10, distance "euclidean") with one change, KIND:
**   distance-fixed-array  distance: 64 fixed-length strings of 10 bytes
**   distance-vlen-array   distance: 4,000 variable-length strings
**   distance-vlen-pair    distance: 2 variable-length strings
**   distance-fixed-utf8   distance: fixed-length UTF-8 "angular", padded
**   distance-escape       distance: a string holding a terminal escape
**   distance-number       distance: an int
**   train-unwritten       train declared 10,000,000 x 32, nothing written
**   train-chunk-missing   train chunked 8 rows a chunk, half the chunks
**                         written
**   train-external        train a link to /train of another file
**   train-filter-missing  train compressed with filter 32000 (h5py's lzf),
**                         which the reader's libhdf5 lacks (written here
**                         through a pass-through stand-in)
**   train-chunk-huge      train deflated in one chunk of 2,200,000 x 8
**                         floats (70 MB, which libhdf5 decodes whole)
**   train-rank3           train a 4 x 4 x 4 array
**   train-f64-overflow    train big-endian float64, 1e300 at row 7,
**                         column 3 (beyond a float)
**   neighbors-float       neighbors stored as float32, one 0.5
**   neighbors-int64       neighbors stored as int64, one 2**40
**   neighbors-wide        neighbors 4 x 67,108,864 (zeros, deflated in
**                         4 MB chunks: 1 MB of file, 1 GB of values)
*/
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads an .fvecs or .ivecs file (4-byte elements) into *rows x *width. */
static void *
read_vecs(const char *path, size_t *rows, uint32_t *width)
{
    FILE *f = fopen(path, "rb");
    int32_t d;
    char *data = NULL;
    size_t n = 0, cap = 0;

    if (f == NULL) {
        perror(path);
        exit(1);
    }
    while (fread(&d, 4, 1, f) == 1) {
        if (n + 1 > cap) { /* doubling: a sanitizer's realloc always copies */
            cap = cap ? cap * 2 : 64;
            data = realloc(data, cap * (size_t)d * 4);
        }
        if (data == NULL || fread(data + n * (size_t)d * 4, 4, (size_t)d, f) !=
                                (size_t)d) {
            fprintf(stderr, "%s: short row %zu\n", path, n);
            exit(1);
        }
        *width = (uint32_t)d;
        n++;
    }
    fclose(f);
    *rows = n;
    return data;
}

static void
write_set(hid_t file, const char *name, hid_t file_type, hid_t mem_type,
          size_t rows, uint32_t width, const void *data)
{
    hsize_t dims[2] = {rows, width};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t ds = H5Dcreate2(file, name, file_type, space, H5P_DEFAULT,
                          H5P_DEFAULT, H5P_DEFAULT);
    if (ds < 0 || H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                           data) < 0) {
        fprintf(stderr, "cannot write data set %s\n", name);
        exit(1);
    }
    H5Dclose(ds);
    H5Sclose(space);
}

/* Writes the file attribute distance: n strings (1: a scalar), variable
** length when size is 0, else fixed-length of size bytes, in cset. */
static void
write_distance(hid_t file, const char *const *values, hsize_t n, size_t size,
               H5T_cset_t cset)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, size ? size : H5T_VARIABLE);
    H5Tset_cset(type, cset);
    if (size)
        H5Tset_strpad(type, H5T_STR_NULLPAD);
    hid_t space = n == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n,
                                                                    NULL);
    hid_t attr = H5Acreate2(file, "distance", type, space, H5P_DEFAULT,
                            H5P_DEFAULT);
    herr_t w = -1;
    if (attr >= 0 && size == 0) {
        w = H5Awrite(attr, type, values);
    } else if (attr >= 0) {
        char *buf = calloc(n, size);
        for (hsize_t i = 0; buf != NULL && i < n; i++)
            strncpy(buf + i * size, values[i], size);
        w = buf ? H5Awrite(attr, type, buf) : -1;
        free(buf);
    }
    if (w < 0) {
        fprintf(stderr, "cannot write the distance attribute\n");
        exit(1);
    }
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
}

/* A data set of rows x width declared with type, but nothing written. */
static hid_t
declare_set(hid_t file, const char *name, hid_t type, hsize_t rows,
            hsize_t width, hid_t dcpl)
{
    hsize_t dims[2] = {rows, width};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t ds = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl,
                          H5P_DEFAULT);
    H5Sclose(space);
    if (ds < 0) {
        fprintf(stderr, "cannot declare data set %s\n", name);
        exit(1);
    }
    return ds;
}

/* The stand-in for a filter the reader's libhdf5 does not have. */
static size_t
pass_through(unsigned flags, size_t nvals, const unsigned vals[],
             size_t nbytes, size_t *buf_size, void **buf)
{
    (void)flags;
    (void)nvals;
    (void)vals;
    (void)buf_size;
    (void)buf;
    return nbytes;
}

/* train (NT x D of data) chunked by chunk, growable in rows, through
** filter: 32000 (a stand-in lzf) or deflate. */
static void
filtered_train(hid_t file, hsize_t rows, hsize_t cols, const hsize_t *chunk,
               int lzf, const float *data)
{
    hsize_t dims[2] = {rows, cols}, maxdims[2] = {H5S_UNLIMITED, cols};
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    if (lzf) {
        H5Z_class2_t cls = {H5Z_CLASS_T_VERS, (H5Z_filter_t)32000, 1, 1,
                            "lzf", NULL, NULL, pass_through};
        H5Zregister(&cls);
        H5Pset_filter(dcpl, 32000, H5Z_FLAG_MANDATORY, 0, NULL);
    } else {
        H5Pset_deflate(dcpl, 1);
    }
    hid_t space = H5Screate_simple(2, dims, maxdims);
    hid_t ds = H5Dcreate2(file, "train", H5T_IEEE_F32LE, space, H5P_DEFAULT,
                          dcpl, H5P_DEFAULT);
    if (ds < 0 || H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL,
                           H5P_DEFAULT, data) < 0) {
        fprintf(stderr, "cannot write a filtered train\n");
        exit(1);
    }
    H5Dclose(ds);
    H5Sclose(space);
    H5Pclose(dcpl);
}

static int
hostile(const char *kind, const char *out)
{
    enum { NT = 64, NQ = 4, D = 8, W = 10 };
    static float train[NT * D], test[NQ * D];
    static int32_t gt[NQ * W];
    static float zeros[NQ * W];
    uint32_t x = 12345;

    for (size_t i = 0; i < NT * D; i++) {
        x = x * 1103515245u + 12345u;
        train[i] = (float)(x >> 16 & 0x7fff) / 32768.0f;
    }
    for (size_t i = 0; i < NQ * D; i++)
        test[i] = train[i + D * 3] + 0.01f;
    for (size_t i = 0; i < NQ * W; i++)
        gt[i] = (int32_t)(i % W);
    hid_t file = H5Fcreate(out, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) {
        fprintf(stderr, "cannot create %s\n", out);
        return 1;
    }
    if (strcmp(kind, "train-unwritten") == 0) {
        H5Dclose(declare_set(file, "train", H5T_IEEE_F32LE, 10000000, 32,
                             H5P_DEFAULT));
    } else if (strcmp(kind, "train-external") == 0) {
        H5Lcreate_external("other.hdf5", "/train", file, "train", H5P_DEFAULT,
                           H5P_DEFAULT);
    } else if (strcmp(kind, "train-chunk-missing") == 0) {
        hsize_t chunk[2] = {8, D}, start[2] = {0, 0}, count[2] = {NT / 2, D};
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 2, chunk);
        hid_t ds = declare_set(file, "train", H5T_IEEE_F32LE, NT, D, dcpl);
        hid_t fspace = H5Dget_space(ds);
        hid_t mspace = H5Screate_simple(2, count, NULL);
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL);
        if (H5Dwrite(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT,
                     train) < 0) {
            fprintf(stderr, "cannot write half of train\n");
            return 1;
        }
        H5Sclose(mspace);
        H5Sclose(fspace);
        H5Dclose(ds);
        H5Pclose(dcpl);
    } else if (strcmp(kind, "train-filter-missing") == 0) {
        hsize_t chunk[2] = {16, D};
        filtered_train(file, NT, D, chunk, 1, train);
    } else if (strcmp(kind, "train-chunk-huge") == 0) {
        hsize_t chunk[2] = {2200000, D};
        filtered_train(file, NT, D, chunk, 0, train);
    } else if (strcmp(kind, "train-f64-overflow") == 0) {
        static double wide[NT * D];
        for (size_t i = 0; i < NT * D; i++)
            wide[i] = train[i];
        wide[7 * D + 3] = 1e300;
        write_set(file, "train", H5T_IEEE_F64BE, H5T_NATIVE_DOUBLE, NT, D,
                  wide);
    } else if (strcmp(kind, "train-rank3") == 0) {
        hsize_t dims[3] = {4, 4, 4};
        hid_t space = H5Screate_simple(3, dims, NULL);
        hid_t ds = H5Dcreate2(file, "train", H5T_IEEE_F32LE, space,
                              H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, train);
        H5Dclose(ds);
        H5Sclose(space);
    } else {
        write_set(file, "train", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, NT, D,
                  train);
    }
    write_set(file, "test", H5T_IEEE_F64LE, H5T_NATIVE_FLOAT, NQ, D, test);
    if (strcmp(kind, "neighbors-float") == 0) {
        float g[NQ * W];
        for (size_t i = 0; i < NQ * W; i++)
            g[i] = (float)gt[i];
        g[W + 3] = 0.5f;
        write_set(file, "neighbors", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, NQ, W,
                  g);
    } else if (strcmp(kind, "neighbors-int64") == 0) {
        int64_t g[NQ * W];
        for (size_t i = 0; i < NQ * W; i++)
            g[i] = gt[i];
        g[2 * W + 1] = (int64_t)1 << 40;
        write_set(file, "neighbors", H5T_STD_I64LE, H5T_NATIVE_INT64, NQ, W,
                  g);
    } else if (strcmp(kind, "neighbors-wide") == 0) {
        /* Every chunk allocated at once, each the deflated fill (zeros). */
        hsize_t chunk[2] = {1, (hsize_t)1 << 20};
        int32_t fill = 0;
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 2, chunk);
        H5Pset_fill_value(dcpl, H5T_NATIVE_INT32, &fill);
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
        H5Pset_deflate(dcpl, 9);
        H5Dclose(declare_set(file, "neighbors", H5T_STD_I32LE, NQ,
                             (hsize_t)1 << 26, dcpl));
        H5Pclose(dcpl);
    } else {
        write_set(file, "neighbors", H5T_STD_I32LE, H5T_NATIVE_INT32, NQ, W,
                  gt);
    }
    write_set(file, "distances", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, NQ, W,
              zeros);

    static const char *many[4000];
    for (size_t i = 0; i < 4000; i++)
        many[i] = "euclidean";
    if (strcmp(kind, "distance-fixed-array") == 0) {
        write_distance(file, many, 64, 10, H5T_CSET_ASCII);
    } else if (strcmp(kind, "distance-vlen-array") == 0) {
        write_distance(file, many, 4000, 0, H5T_CSET_UTF8);
    } else if (strcmp(kind, "distance-vlen-pair") == 0) {
        write_distance(file, many, 2, 0, H5T_CSET_UTF8);
    } else if (strcmp(kind, "distance-fixed-utf8") == 0) {
        const char *v[] = {"angular"};
        write_distance(file, v, 1, 16, H5T_CSET_UTF8);
    } else if (strcmp(kind, "distance-escape") == 0) {
        const char *v[] = {"\033[31mred\033[0m"};
        write_distance(file, v, 1, 0, H5T_CSET_UTF8);
    } else if (strcmp(kind, "distance-number") == 0) {
        int v = 2;
        hid_t space = H5Screate(H5S_SCALAR);
        hid_t attr = H5Acreate2(file, "distance", H5T_STD_I32LE, space,
                                H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(attr, H5T_NATIVE_INT, &v);
        H5Aclose(attr);
        H5Sclose(space);
    } else {
        const char *v[] = {"euclidean"};
        write_distance(file, v, 1, 0, H5T_CSET_UTF8);
        if (strncmp(kind, "train-", 6) != 0 &&
            strncmp(kind, "neighbors-", 10) != 0) {
            fprintf(stderr, "mkhdf5: unknown kind '%s'\n", kind);
            return 2;
        }
    }
    H5Fclose(file);
    return 0;
}

int
main(int argc, char **argv)
{
    size_t nt, nq, ng;
    uint32_t dt, dq, wg;
    H5T_cset_t cset = H5T_CSET_UTF8;

    if (argc == 4 && strcmp(argv[1], "--hostile") == 0)
        return hostile(argv[2], argv[3]);
    if (argc == 7 && strcmp(argv[1], "--ascii") == 0) {
        cset = H5T_CSET_ASCII;
        argc--;
        argv++;
    }
    if (argc != 6) {
        fprintf(stderr, "usage: mkhdf5 [--ascii] OUT.hdf5 DISTANCE "
                "TRAIN.fvecs TEST.fvecs NEIGHBORS.ivecs\n"
                "       mkhdf5 --hostile KIND OUT.hdf5\n");
        return 2;
    }
    float *train = read_vecs(argv[3], &nt, &dt);
    float *test = read_vecs(argv[4], &nq, &dq);
    int32_t *gt = read_vecs(argv[5], &ng, &wg);
    float *zeros = calloc(ng * wg + 1, sizeof *zeros);

    hid_t file = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0 || zeros == NULL) {
        fprintf(stderr, "cannot create %s\n", argv[1]);
        return 1;
    }
    write_set(file, "train", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, nt, dt, train);
    write_set(file, "test", H5T_IEEE_F64LE, H5T_NATIVE_FLOAT, nq, dq, test);
    write_set(file, "neighbors", H5T_STD_I32LE, H5T_NATIVE_INT32, ng, wg, gt);
    write_set(file, "distances", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, ng, wg,
              zeros);

    /* h5py writes a str attribute as a variable-length UTF-8 string. */
    const char *value[] = {argv[2]};
    write_distance(file, value, 1, 0, cset);
    H5Fclose(file);
    free(train);
    free(test);
    free(gt);
    free(zeros);
    return 0;
}
