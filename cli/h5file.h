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
** floats, a bounded block of rows at a time. Returns VECFILE_OK or a
** VECFILE_E* code with err filled. A set whose declared shape is not all
** stored in the file (never written, cut short, chunks missing, kept in
** other files) is refused before anything is allocated for it. */
int h5file_load(const char *path, const char *set, vecfile *out, char *err,
                size_t errlen);

/* Reads the 2-D data set "neighbors" of path as int32 rows: the first cols
** columns of each row (all of them if cols is 0 or the set is narrower;
** *width says how many). Every value read must be an integer from -1 to
** INT32_MAX (whatever the stored type): one that is not (0.5, 2**40) is
** refused with its row and column, never truncated or clamped. */
int h5file_load_truth(const char *path, uint32_t cols, int32_t **rows,
                      size_t *n, uint32_t *width, char *err, size_t errlen);

/* The file attribute "distance" of path into out (outlen bytes); "" if the
** file has none. It must be one string, ASCII or UTF-8, fixed or variable
** length; an array of strings, a number or an unreadable string is an
** error. Bytes outside printable ASCII come out as '?', so the name can be
** printed safely. */
int h5file_distance(const char *path, char *out, size_t outlen, char *err,
                    size_t errlen);

/* A data set read a block of rows at a time (keel build's train), so
** memory stays bounded whatever the set's size. The ids are libhdf5's. */
typedef struct h5stream {
    int64_t file, ds;
    const char *path, *set; /* kept for messages, not copied */
    size_t n;               /* rows the set holds */
    size_t next;            /* the next row to read */
    uint32_t dim;
    int wide;               /* floats wider than float32: range-checked */
} h5stream;

/* Opens data set set of path and checks it as h5file_load does. */
int h5stream_open(const char *path, const char *set, h5stream *s, char *err,
                  size_t errlen);

/* Reads up to max rows into dst (max * s->dim floats); *n gets how many,
** 0 at the end. */
int h5stream_read(h5stream *s, float *dst, size_t max, size_t *n, char *err,
                  size_t errlen);

/* Closes what h5stream_open opened; a zeroed h5stream is a no-op. */
void h5stream_close(h5stream *s);

/* The rows of dim floats a block holds (8 MB of floats, at least 1). */
size_t h5file_block_rows(uint32_t dim);

#endif /* KEEL_H5FILE_H */
