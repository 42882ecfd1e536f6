/* npy.h -- NumPy's .npy files for the CLI's readers (vecfile.c).
**
** npy_layout checks an .npy file of vectors (a 2-D C-order array of '<f4',
** '<f8', '<f2' or '|u1' / '<u1') and says where its rows are, for
** vecfile.c to convert; npy_parse_ids reads an id array ('<u8' or '<i8',
** 1-D or n x 1, no negative values). Errors follow vecfile.h: a VECFILE_E*
** code and "what\nhelp: ..." in err.
*/
#ifndef KEEL_NPY_H
#define KEEL_NPY_H

#include <stddef.h>
#include <stdint.h>

struct layout;

/* Checks the .npy file of vectors in buf (len bytes) and fills l. */
int npy_layout(const unsigned char *buf, size_t len, const char *name,
               struct layout *l, char *err, size_t errlen);

/* Reads the .npy id array in buf into *ids (malloc'ed, NULL when *n is 0). */
int npy_parse_ids(const unsigned char *buf, size_t len, const char *name,
                  uint64_t **ids, size_t *n, char *err, size_t errlen);

#endif /* KEEL_NPY_H */
