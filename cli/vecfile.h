/* vecfile.h -- readers for the vector files the keel CLI and tools take in.
**
** Owns the parsing of .fvecs, .bvecs and .npy vector files, .ivecs ground
** truth and id lists. Everything here reads untrusted bytes: every length,
** count and shape in a file is checked against the bytes that are really
** there (with overflow checks) before anything is read, so a parser never
** reads past its buffer whatever the input. The *_parse functions work on a
** memory buffer, which is what fuzz targets call; the *_load functions read
** a whole file and parse it.
**
** Formats:
**   .fvecs  per row: int32 dim, then dim float32; little-endian. Every row
**           has the same dim, 1..4096.
**   .bvecs  per row: int32 dim, then dim uint8.
**   .npy    NumPy format 1.0, 2.0 or 3.0; a 2-D C-order array of '<f4',
**           '<f8' (rounded to float32, as numpy's astype does), '<f2'
**           (converted exactly) or '|u1' / '<u1'.
**   .ivecs  per row: int32 width, then width int32; every row the same width.
**   ids     text, one decimal id per line (blank lines and spaces are
**           ignored), or an .npy 1-D array (or n x 1) of '<u8' or '<i8' with
**           no negative values. Told apart by content, not name.
** Non-finite floats are passed through unchanged: the library refuses them
** and names their positions.
**
** Errors: every function returns VECFILE_OK (0) or a positive VECFILE_E*
** code and writes a message into err (errlen bytes, always terminated when
** errlen > 0; err may be NULL). The message is keel's style: a first line
** saying what was wrong with which value (file, row or line, byte offset,
** the values), then "\nhelp: " and what to do instead. Output parameters
** are written only on success. Rows are counted from 0 (as ids and ground
** truth count them), lines of text from 1 (as editors count them).
*/
#ifndef KEEL_VECFILE_H
#define KEEL_VECFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define VECFILE_OK      0
#define VECFILE_EFORMAT 1 /* the bytes are not a valid file of the format */
#define VECFILE_EIO     2 /* the file could not be opened or read */
#define VECFILE_ENOMEM  3 /* out of memory */

#define VECFILE_MAX_DIM 4096 /* the largest dimension keel takes */

enum vecfile_format {
    VECFILE_UNKNOWN = 0,
    VECFILE_FVECS,
    VECFILE_BVECS,
    VECFILE_NPY
};

/* n vectors of dim floats, back to back. data is malloc'ed (NULL when n is
** 0, which only an .npy of shape (0, dim) gives); free with vecfile_free. */
typedef struct vecfile {
    float *data;
    size_t n;
    uint32_t dim;
} vecfile;

/* The format a path names by its extension (any case): .fvecs, .bvecs,
** .npy; "-" is .fvecs on standard input. VECFILE_UNKNOWN otherwise. */
enum vecfile_format vecfile_format_of(const char *path);

/* Reads a whole vector file, chosen by vecfile_format_of(path). */
int vecfile_load(const char *path, vecfile *out, char *err, size_t errlen);

/* Parses len bytes at buf as a file of format fmt. name is what messages
** call the input (NULL: "input"). buf is not kept. */
int vecfile_parse(const void *buf, size_t len, enum vecfile_format fmt,
                  const char *name, vecfile *out, char *err, size_t errlen);

/* Frees v->data and zeroes v. NULL is a no-op. */
void vecfile_free(vecfile *v);

/* An .fvecs stream read a bounded chunk at a time, for inputs whose size is
** not known in advance (standard input, a pipe). Each row's dimension is
** checked as it arrives, so a stream that is not .fvecs fails at its first
** row, after 4 bytes, however long it is. */
typedef struct vecstream {
    FILE *f;
    int own;          /* f was opened here */
    const char *name; /* what messages call the input */
    uint32_t dim;     /* from row 0 */
    size_t rows;      /* rows returned so far */
    int first;        /* row 0's dimension was read but its data not yet */
} vecstream;

/* Opens path ("-": standard input) and reads row 0's dimension. */
int vecstream_open(const char *path, vecstream *s, char *err, size_t errlen);

/* Reads up to max rows into dst (max * s->dim floats); *n gets how many (0
** at the end of the stream, after at least one row). A row of another
** dimension or one cut short is an error naming its row and byte offset. */
int vecstream_read(vecstream *s, float *dst, size_t max, size_t *n, char *err,
                   size_t errlen);

/* Closes what vecstream_open opened. NULL is a no-op. */
void vecstream_close(vecstream *s);

/* Ground truth: n rows of width int32 each, back to back in *rows
** (malloc'ed; the caller frees it). Values are not checked: they are ids.
** As for every *_load here, path "-" reads standard input. */
int vecfile_load_ivecs(const char *path, int32_t **rows, size_t *n,
                       uint32_t *width, char *err, size_t errlen);
int vecfile_parse_ivecs(const void *buf, size_t len, const char *name,
                        int32_t **rows, size_t *n, uint32_t *width,
                        char *err, size_t errlen);

/* An id list (text or .npy, see above): *n ids in *ids (malloc'ed, NULL
** when *n is 0; the caller frees it). UINT64_MAX is refused, as keel
** reserves it. Duplicates are not checked here: the library does. */
int vecfile_load_ids(const char *path, uint64_t **ids, size_t *n, char *err,
                     size_t errlen);
int vecfile_parse_ids(const void *buf, size_t len, const char *name,
                      uint64_t **ids, size_t *n, char *err, size_t errlen);

#endif /* KEEL_VECFILE_H */
