/* make_seeds.c -- writes the seed corpora of the fuzz targets.
**
** Not a fuzz target and not a test: a generator, run by hand (or by run.sh
** when a corpus directory is empty) to (re)create test/fuzz/corpus/:
**
**   fuzz_open/     small real index files (as sparse images, see
**                  fuzz_open.c): empty, one vector, deletes with
**                  an intent header in the older copy, cosine f16, inner
**                  product, a superseded file, a killed writer's file, a torn
**                  commit, blank and cut-short creations, a newer version;
**   fuzz_corrupt/  an edit list per base file and mode, and one per edit kind;
**   fuzz_vecfile/  .fvecs, .bvecs, .npy (versions 1-3; f4, f2, u1), .ivecs
**                  and id lists (text and .npy);
**   fuzz_ops/      operation sequences that reach every operation.
**
** What it hunts: nothing itself; it gives the fuzzers valid structure to
** start from, which random bytes would almost never produce (checksums).
**
**   make_seeds CORPUS_DIR
*/
#include "fuzz.h"
#include "keel.h"
#include "store/format.h"

#include <sys/stat.h>

static const char *root;

static void
out_file(const char *target, const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/seed-%s", root, target, name);
    fuzz_write_file(path, data, len);
}

static void
must(int rc, const char *what)
{
    if (rc != KEEL_OK)
        fuzz_fail("make_seeds: %s: rc %d: %s", what, rc, keel_errmsg());
}

static uint64_t rng = 7;

static void
add_n(keel_index *idx, uint32_t dim, size_t n)
{
    float v[16];
    for (size_t i = 0; i < n; i++) {
        for (uint32_t j = 0; j < dim; j++)
            v[j] = fuzz_randf(&rng);
        must(keel_add(idx, v, NULL), "add");
    }
}

/* --- fuzz_open ----------------------------------------------------------- */

static const char *scratch;

static keel_index *
fresh(uint32_t dim, keel_metric metric, keel_precision prec, uint32_t M)
{
    fuzz_remove(scratch);
    keel_options o = {.metric = metric, .precision = prec,
                      .max_connections = M, .threads = 1,
                      .ef_construction = 32};
    keel_index *idx;
    must(keel_open(scratch, dim, &o, &idx), "open");
    return idx;
}

/* Writes a file as fuzz_open's sparse image: "KEELSPR1", the length, then
** (offset, n, bytes) for each run of nonzero bytes (short gaps of zeros
** kept inside a run). */
static void
out_sparse(const char *name, const uint8_t *b, size_t len)
{
    size_t cap = 12 + len + len / 8 + 64, n = 0;
    uint8_t *o = malloc(cap);
    if (!o)
        fuzz_fail("out of memory");
    memcpy(o, "KEELSPR1", 8);
    keel__put32(o + 8, (uint32_t)len);
    n = 12;
    for (size_t i = 0; i < len;) {
        if (b[i] == 0) {
            i++;
            continue;
        }
        size_t end = i, zeros = 0;
        while (end < len && end - i < 65535 && zeros < 16) {
            zeros = b[end] ? 0 : zeros + 1;
            end++;
        }
        end -= zeros;
        keel__put32(o + n, (uint32_t)i);
        o[n + 4] = (uint8_t)(end - i);
        o[n + 5] = (uint8_t)((end - i) >> 8);
        memcpy(o + n + 6, b + i, end - i);
        n += 6 + (end - i);
        i = end;
    }
    out_file("fuzz_open", name, o, n);
    free(o);
}

static void
save_index(const char *name)
{
    size_t len;
    uint8_t *b = fuzz_read_file(scratch, &len);
    if (!b)
        fuzz_fail("make_seeds: no file at %s", scratch);
    out_sparse(name, b, len);
    free(b);
}

/* The copy holding the newest header (by sequence). */
static int
newest_copy(const uint8_t *b)
{
    return keel__get64(b + HO_SEQUENCE) >
                   keel__get64(b + KEEL_HDR_B_OFF + HO_SEQUENCE)
               ? 0 : 1;
}

static void
resum(uint8_t *copy)
{
    keel__put64(copy + HO_CHECKSUM,
                keel__header_checksum(copy, keel__get32(copy + HO_LENGTH)));
}

static void
open_seeds(void)
{
    keel_index *idx;

    idx = fresh(3, KEEL_L2, KEEL_F32, 2);
    keel_close(idx);
    save_index("empty");

    idx = fresh(3, KEEL_L2, KEEL_F32, 4);
    add_n(idx, 3, 1);
    must(keel_flush(idx), "flush");
    keel_close(idx);
    save_index("one");

    /* Deletes: the older copy holds the intent header of the last flush. */
    idx = fresh(3, KEEL_L2, KEEL_F32, 2);
    add_n(idx, 3, 14);
    must(keel_flush(idx), "flush");
    for (uint64_t id = 0; id < 14; id += 3)
        must(keel_delete(idx, id), "delete");
    add_n(idx, 3, 4);
    must(keel_flush(idx), "flush");
    keel_close(idx);
    save_index("deletes");
    size_t len;
    uint8_t *b = fuzz_read_file(scratch, &len);
    /* Torn commit: the newest copy zeroed, the intent header remains. */
    memset(b + newest_copy(b) * KEEL_PAGE_SLOT, 0, KEEL_PAGE_SLOT);
    out_sparse("torn-commit", b, len);
    free(b);
    b = fuzz_read_file(scratch, &len);
    /* Both copies the same: two valid headers with one sequence. */
    memcpy(b + (1 - newest_copy(b)) * KEEL_PAGE_SLOT,
           b + newest_copy(b) * KEEL_PAGE_SLOT, KEEL_PAGE_SLOT);
    out_sparse("same-sequence", b, len);
    free(b);
    b = fuzz_read_file(scratch, &len);
    /* A newer writer's file (readers go on), then a newer reader's. */
    uint8_t *c = b + newest_copy(b) * KEEL_PAGE_SLOT;
    keel__put32(c + HO_WRITE_VERSION, 2);
    resum(c);
    out_sparse("write-version-2", b, len);
    keel__put32(c + HO_READ_VERSION, 2);
    resum(c);
    out_sparse("read-version-2", b, len);
    free(b);

    idx = fresh(5, KEEL_COSINE, KEEL_F16, 3);
    add_n(idx, 5, 9);
    must(keel_flush(idx), "flush");
    must(keel_delete(idx, 4), "delete");
    must(keel_flush(idx), "flush");
    keel_close(idx);
    save_index("cosine-f16");

    /* Compaction: the old file, flagged superseded, kept by a hard link. */
    idx = fresh(2, KEEL_IP, KEEL_F32, 3);
    add_n(idx, 2, 12);
    must(keel_flush(idx), "flush");
    for (uint64_t id = 1; id < 12; id += 2)
        must(keel_delete(idx, id), "delete");
    char old[600];
    snprintf(old, sizeof old, "%s.old", scratch);
    unlink(old);
    if (link(scratch, old) != 0)
        fuzz_fail("make_seeds: link: %s", strerror(errno));
    must(keel_compact(idx), "compact");
    keel_close(idx);
    save_index("ip-compacted");
    b = fuzz_read_file(old, &len);
    out_sparse("superseded", b, len);
    free(b);
    unlink(old);

    /* A killed writer: unflushed adds past the commit, live page set. */
    idx = fresh(3, KEEL_L2, KEEL_F32, 2);
    add_n(idx, 3, 6);
    must(keel_flush(idx), "flush");
    add_n(idx, 3, 12);
    must(keel_delete(idx, 2), "delete");
    save_index("killed-writer");
    keel_close(idx);

    /* A creation cut short: blank header pages, or the magic alone. */
    b = calloc(1, KEEL_DATA_OFF);
    if (!b)
        fuzz_fail("out of memory");
    out_sparse("blank", b, KEEL_DATA_OFF);
    memcpy(b, KEEL_MAGIC, 8);
    out_file("fuzz_open", "magic-only", b, 8); /* the file as it is */
    out_sparse("magic-blank", b, KEEL_DATA_OFF);
    free(b);
    fuzz_remove(scratch);
}

/* --- fuzz_corrupt -------------------------------------------------------- */

static void
corrupt_seeds(void)
{
    char name[32];
    for (unsigned mode = 0; mode < 16; mode++) {
        uint8_t m = (uint8_t)mode;
        snprintf(name, sizeof name, "mode-%02u", mode);
        out_file("fuzz_corrupt", name, &m, 1);
    }
    /* One of each edit kind (op % 12), on base 0 and base 1. */
    static const uint8_t edits[][16] = {
        {0, 0x00, 0x10, 0x04, 0x00, 0x00, 0xAA},          /* byte */
        {1, 0x01, 0x40, 0x0C, 0x00, 0x00, 0x11},          /* u32 */
        {1, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00},          /* u64 */
        {0, 0x03, 0x00, 0x04, 0x00, 0x00, 0x40, 0x00, 0xFF}, /* fill */
        {0, 0x84, 0x00, 0x00, 0x05, 0x00},                /* truncate */
        {0, 0x05, 0x00, 0x00, 0x02, 0x00},                /* extend */
        {0, 0x06, 0x00, 0x0F, 0x17},                      /* header count */
        {1, 0x06, 0x01, 0x13, 0x1B},                      /* header epoch */
        {0, 0x07},                                        /* resum */
        {0, 0x08, 0x05, 0x00, 0x03, 0x02, 0x17},          /* neighbour */
        {1, 0x08, 0x07, 0x00, 0x01, 0x00, 0x1B},          /* mark */
        {0, 0x08, 0x0A, 0x00, 0x0A, 0x00, 0x13},          /* level byte */
        {0, 0x09, 0x03, 0x00, 0x00},                      /* id table */
        {1, 0x0A, 0x00, 0x00, 0x19},                      /* routing */
        {9, 0x0B, 0x20, 0x00, 0x01},                      /* undo */
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        size_t n = sizeof edits[i];
        while (n > 1 && edits[i][n - 1] == 0)
            n--;
        snprintf(name, sizeof name, "edit-%02zu", i);
        out_file("fuzz_corrupt", name, edits[i], n);
    }
}

/* --- fuzz_vecfile -------------------------------------------------------- */

static size_t
put_u32(uint8_t *p, uint32_t v)
{
    keel__put32(p, v);
    return 4;
}

static size_t
npy(uint8_t *out, int version, const char *descr, const char *shape,
    const void *data, size_t data_len)
{
    char dict[128];
    int n = snprintf(dict, sizeof dict,
                     "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, shape);
    size_t pre = version == 1 ? 10 : 12;
    size_t hlen = (size_t)n + 1;
    hlen += (64 - (pre + hlen) % 64) % 64; /* numpy pads to 64 */
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (uint8_t)version;
    out[7] = 0;
    if (version == 1) {
        out[8] = (uint8_t)hlen;
        out[9] = (uint8_t)(hlen >> 8);
    } else {
        keel__put32(out + 8, (uint32_t)hlen);
    }
    memset(out + pre, ' ', hlen);
    memcpy(out + pre, dict, (size_t)n);
    out[pre + hlen - 1] = '\n';
    if (data_len)
        memcpy(out + pre + hlen, data, data_len);
    return pre + hlen + data_len;
}

static void
vecfile_seeds(void)
{
    uint8_t b[4096];
    size_t n = 0;
    float f[12];
    for (int i = 0; i < 12; i++)
        f[i] = (float)i * 0.5f - 2.0f;

    for (int r = 0; r < 3; r++) { /* 3 rows of 4 floats */
        n += put_u32(b + n, 4);
        memcpy(b + n, f + 4 * r, 16);
        n += 16;
    }
    out_file("fuzz_vecfile", "3x4.fvecs", b, n);
    out_file("fuzz_vecfile", "3x4-cut.fvecs", b, n - 3);

    n = 0;
    for (int r = 0; r < 2; r++) {
        n += put_u32(b + n, 5);
        for (int j = 0; j < 5; j++)
            b[n++] = (uint8_t)(r * 50 + j * 7);
    }
    out_file("fuzz_vecfile", "2x5.bvecs", b, n);

    n = 0;
    for (int r = 0; r < 2; r++) {
        n += put_u32(b + n, 3);
        for (int j = 0; j < 3; j++)
            n += put_u32(b + n, (uint32_t)(r * 10 + j));
    }
    out_file("fuzz_vecfile", "2x3.ivecs", b, n);

    n = npy(b, 1, "<f4", "(3, 4)", f, sizeof f);
    out_file("fuzz_vecfile", "f4-v1.npy", b, n);
    uint16_t h[6] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x8000, 0x3555};
    n = npy(b, 2, "<f2", "(2, 3)", h, sizeof h);
    out_file("fuzz_vecfile", "f2-v2.npy", b, n);
    uint8_t u[6] = {0, 1, 2, 253, 254, 255};
    n = npy(b, 3, "|u1", "(3, 2)", u, sizeof u);
    out_file("fuzz_vecfile", "u1-v3.npy", b, n);
    n = npy(b, 1, "<f4", "(0, 7)", NULL, 0);
    out_file("fuzz_vecfile", "empty.npy", b, n);
    uint64_t ids[4] = {0, 5, 18446744073709551614ull, 42};
    n = npy(b, 1, "<u8", "(4,)", ids, sizeof ids);
    out_file("fuzz_vecfile", "ids-u8.npy", b, n);
    n = npy(b, 1, "<i8", "(4, 1)", ids, 3 * 8);
    out_file("fuzz_vecfile", "ids-i8-cut.npy", b, n);
    n = npy(b, 1, "[('a', '<f4'), ('b', '<f4')]", "(1,)", f, 8);
    out_file("fuzz_vecfile", "structured.npy", b, n);
    static const char text[] = "0\n17\n  42  \n\n18446744073709551614\r\n3";
    out_file("fuzz_vecfile", "ids.txt", text, sizeof text - 1);
}

/* --- fuzz_ops ------------------------------------------------------------ */

/* Op numbers as fuzz_ops.c decodes them. */
enum {
    O_ADD, O_ADD_WITH_ID, O_ADD_BATCH, O_DELETE, O_FLUSH, O_CRASH_REOPEN,
    O_COMPACT, O_SEARCH, O_FILTERED, O_READER, O_GET, O_DELETE_LIVE,
    O_READD_DELETED, O_SEARCH_BATCH, O_STAT, O_FILTER_FN
};

typedef struct seq {
    uint8_t b[4096];
    size_t n;
} seq;

static void
emit(seq *s, int count, ...)
{
    va_list ap;
    va_start(ap, count);
    for (int i = 0; i < count; i++)
        s->b[s->n++] = (uint8_t)va_arg(ap, int);
    va_end(ap);
}

static void
vec(seq *s)
{
    for (int j = 0; j < 4; j++)
        s->b[s->n++] = (uint8_t)(int8_t)(fuzz_randf(&rng) * 100);
}

static void
ops_seeds(void)
{
    char name[32];
    for (int cfg = 0; cfg < 8; cfg++) {
        seq s = {.n = 0};
        /* f16 (bit 0), inner product (bit 1), M and ef vary with cfg. */
        emit(&s, 1, cfg | (cfg << 3 & 0x30) | (cfg & 4 ? 0x0C : 0));
        for (int i = 0; i < 6; i++) {
            emit(&s, 1, O_ADD);
            vec(&s);
        }
        emit(&s, 2, O_ADD_WITH_ID, 3);
        vec(&s);
        emit(&s, 2, O_ADD_WITH_ID, 20);
        vec(&s);
        emit(&s, 3, O_ADD_BATCH, 5 + cfg, 0); /* automatic ids */
        for (int i = 0; i < 5 + cfg; i++)
            vec(&s);
        emit(&s, 1, O_FLUSH);
        emit(&s, 2, O_DELETE, 3);
        emit(&s, 2, O_DELETE_LIVE, 2);
        emit(&s, 2, O_SEARCH, 9);
        vec(&s);
        emit(&s, 4, O_FILTERED, 0x32, 4, 20);
        vec(&s);
        emit(&s, 1, O_STAT);
        if (cfg & 1) {
            emit(&s, 3, O_READER, 0, 5);
            emit(&s, 1, 4);
            vec(&s);
        }
        emit(&s, 1, O_CRASH_REOPEN | (cfg & 1) << 4);
        emit(&s, 2, O_GET, 3);
        emit(&s, 2, O_READD_DELETED, 0);
        vec(&s);
        /* Explicit ids: first one clashing (3 was re-added), then fresh
         * ones. Each item is its vector, then its id. */
        static const int clash[3] = {3, 20, 21}, fresh_ids[3] = {9, 10, 11};
        emit(&s, 3, O_ADD_BATCH, 3, 3);
        for (int i = 0; i < 3; i++) {
            vec(&s);
            emit(&s, 1, clash[i]);
        }
        emit(&s, 3, O_ADD_BATCH, 3, 3);
        for (int i = 0; i < 3; i++) {
            vec(&s);
            emit(&s, 1, fresh_ids[i]);
        }
        emit(&s, 1, O_FLUSH);
        emit(&s, 2, O_DELETE_LIVE, 1);
        emit(&s, 1, O_COMPACT);
        emit(&s, 2, O_SEARCH_BATCH, 4);
        vec(&s);
        vec(&s);
        emit(&s, 2, O_FILTER_FN, 6);
        vec(&s);
        if (cfg & 2) {
            emit(&s, 2, O_ADD_WITH_ID, 0xF9); /* UINT64_MAX - 1 */
            vec(&s);
            emit(&s, 1, O_ADD);
            vec(&s);
            emit(&s, 2, O_ADD_WITH_ID, 0xF8); /* UINT64_MAX */
            vec(&s);
        }
        emit(&s, 3, O_READER, 2, 7);
        emit(&s, 1, 10);
        vec(&s);
        snprintf(name, sizeof name, "cfg-%d", cfg);
        out_file("fuzz_ops", name, s.b, s.n);
    }
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    root = argv[1];
    mkdir(root, 0755);
    scratch = fuzz_path("seeds");
    keel__test_geometry(3, 1, 10, 1, 6);
    open_seeds();
    corrupt_seeds();
    vecfile_seeds();
    ops_seeds();
    printf("make_seeds: wrote the seed corpora under %s\n", root);
    return 0;
}

