/* mkhdf5.c -- writes a small ann-benchmarks .hdf5 file for the CLI tests,
** from .fvecs and .ivecs files, with the HDF5 C API.
**
**   mkhdf5 OUT.hdf5 DISTANCE TRAIN.fvecs TEST.fvecs NEIGHBORS.ivecs
**
** As ann-benchmarks writes them: data sets train and test (float32 here;
** test is stored as float64, which the reader converts), neighbors (int32),
** distances (float32, zeros: keel does not read them) and the file
** attribute distance (a string such as "euclidean" or "angular").
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
    size_t n = 0;

    if (f == NULL) {
        perror(path);
        exit(1);
    }
    while (fread(&d, 4, 1, f) == 1) {
        data = realloc(data, (n + 1) * (size_t)d * 4);
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

int
main(int argc, char **argv)
{
    size_t nt, nq, ng;
    uint32_t dt, dq, wg;

    if (argc != 6) {
        fprintf(stderr, "usage: mkhdf5 OUT.hdf5 DISTANCE TRAIN.fvecs "
                "TEST.fvecs NEIGHBORS.ivecs\n");
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

    /* h5py writes a str attribute as a variable-length string. */
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t attr = H5Acreate2(file, "distance", type, space, H5P_DEFAULT,
                            H5P_DEFAULT);
    const char *value = argv[2];
    if (attr < 0 || H5Awrite(attr, type, &value) < 0) {
        fprintf(stderr, "cannot write the distance attribute\n");
        return 1;
    }
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    H5Fclose(file);
    free(train);
    free(test);
    free(gt);
    free(zeros);
    return 0;
}
