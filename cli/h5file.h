/* h5file.h -- ann-benchmarks' HDF5 files for the keel CLI.
**
** An ann-benchmarks file (https://github.com/erikbern/ann-benchmarks) holds
** the data sets "train" (the base vectors), "test" (the queries),
** "neighbors" (the exact neighbours of each query, as 0-based rows of
** train) and "distances", and a file attribute "distance" naming the metric
** ("euclidean", "angular", ...). Only the CLI reads them, through Debian's
** libhdf5; libkeel does not link it. Messages follow vecfile.h: what was
** wrong with which value, then "\nhelp: ...".
*/
#ifndef KEEL_H5FILE_H
#define KEEL_H5FILE_H

#include <stddef.h>
#include <stdint.h>

#include "vecfile.h"

/* Nonzero if path names an HDF5 file by its extension (.hdf5, .h5). */
int h5file_is(const char *path);

/* Reads the 2-D data set set (any integer or float type) of path as
** floats. Returns VECFILE_OK or a VECFILE_E* code with err filled. */
int h5file_load(const char *path, const char *set, vecfile *out, char *err,
                size_t errlen);

/* Reads the 2-D integer data set "neighbors" of path as int32 rows. */
int h5file_load_truth(const char *path, int32_t **rows, size_t *n,
                      uint32_t *width, char *err, size_t errlen);

/* The file attribute "distance" of path into out (outlen bytes); "" if the
** file has none. */
int h5file_distance(const char *path, char *out, size_t outlen, char *err,
                    size_t errlen);

#endif /* KEEL_H5FILE_H */
