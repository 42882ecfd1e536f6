/* fuzz_open.c -- fuzz target: a file of arbitrary bytes opened as an index.
**
** Hunts crashes, out-of-bounds access, undefined behaviour, leaks, hangs and
** leaked descriptors in everything that reads an index file: header
** validation, snapshots, the live page, searches, gets, keel_check, writer
** recovery, adds, deletes, flushes and compaction on whatever the headers
** let through. Also checks that a writer that refuses the file leaves it
** byte-identical (see exercise.h).
**
** The input is the file. Index files are mostly zeros (every region starts
** on a 64 KiB boundary), so an input may also be a sparse image of one:
**   "KEELSPR1", u32 file length, then records of u32 offset, u16 n and n
**   bytes, laid over zeros (clipped to the length; at most 8 MiB).
** Any input that does not start with that magic is the file itself. The
** seeds (make_seeds.c) are sparse images of real small indexes, so the
** corpus stays small and mutations land on bytes that matter; random bytes
** rarely pass the header checksum, and fuzz_corrupt reaches deeper still
** with structured edits of a known-good file.
*/
#include "exercise.h"

#define SPARSE_MAGIC "KEELSPR1"
#define SPARSE_MAX   (8u << 20)

/* The file a sparse image describes (malloc'ed), or NULL if the input is
** not one. */
static uint8_t *
expand(const uint8_t *data, size_t size, size_t *len)
{
    if (size < 12 || memcmp(data, SPARSE_MAGIC, 8) != 0)
        return NULL;
    fuzz_in in = {data, size, 8};
    size_t n = fuzz_u32(&in);
    if (n > SPARSE_MAX)
        n = SPARSE_MAX;
    uint8_t *file = calloc(1, n ? n : 1);
    if (!file)
        fuzz_fail("out of memory");
    while (fuzz_more(&in)) {
        uint64_t off = fuzz_u32(&in);
        size_t cnt = fuzz_u16(&in);
        if (cnt > in.n - in.at)
            cnt = in.n - in.at;
        if (off < n)
            memcpy(file + off, in.p + in.at, KEEL_MIN(cnt, n - (size_t)off));
        in.at += cnt;
    }
    *len = n;
    return file;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        /* Files this target creates (a blank file made an index, a
         * compaction) get small regions too. */
        keel__test_geometry(2, 2, 10, 1, 4);
        ready = 1;
    }
    size_t len = size;
    uint8_t *file = expand(data, size, &len);
    ex_run(fuzz_path("open"), file ? file : data, len, NULL, 0,
           EX_COMPACT | EX_CREATE);
    free(file);
    return 0;
}
