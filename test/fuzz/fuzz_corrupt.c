/* fuzz_corrupt.c -- fuzz target: a valid small index with corrupted bytes.
**
** Hunts what fuzz_open hunts (crashes, out-of-bounds access, undefined
** behaviour, leaks, hangs, leaked descriptors, a refused file changed), but
** starts from real index files built once in-process, so the header
** checksums hold and the damage lands in the structures behind them: slot
** headers, vectors, level-0 records, heap entries, the id table, the live
** page, header fields (with the checksum recomputed) and the undo log.
**
** Base files (dim 8, 16-slot segments doubling twice, 1 KiB heap chunks,
** 64-entry first id table; 250-300 vectors, so many segments and several
** heap chunks and id tables):
**   0  L2 f32 M 4: two flushes, the second with deletes (the older header
**      copy is then an intent header);
**   1  base 0 plus unflushed adds and deletes, as a killed writer leaves it
**      (live page past the commit), with that writer's undo log;
**   2  base 1 with the newest header copy zeroed: a torn commit, so the
**      writer must recover the intent header;
**   3  cosine f16 M 16, built like base 0.
**
** Input: byte 0 picks the base (bits 0-1), compaction (bit 2), whether the
** undo log is written too (bit 3); then up to 64 edits, each an op byte and
** its operands (see apply_edit). A value operand starts with a byte below
** 0x40 naming an interesting value (counts, epochs, offsets, EMPTY, inf) or
** says how many raw bytes follow.
*/
#include "exercise.h"
#include "store/format.h"

#include <xxhash.h>

#define NBASE      4
#define MAX_GROW   (4u << 20)  /* an edit may extend the file this much */
#define MAX_EDITS  64

typedef struct base {
    uint8_t *bytes;
    size_t len;
    uint8_t *undo;            /* the writer's undo log (base 1, 2) or NULL */
    size_t undo_len;
    keel_header *h;           /* the newest valid header copy */
    keel_geometry g;
    uint32_t hlen;            /* that copy's length */
} base;

static base bases[NBASE];

static uint64_t rng_state = 1;

static void
must(int rc, const char *what)
{
    if (rc != KEEL_OK)
        fuzz_fail("building the base file: %s: rc %d\n%s", what, rc,
                  keel_errmsg());
}

static void
add_random(keel_index *idx, size_t n, const uint64_t *ids)
{
    float *v = malloc(n * 8 * sizeof *v);
    if (!v)
        fuzz_fail("out of memory");
    for (size_t i = 0; i < n * 8; i++)
        v[i] = fuzz_randf(&rng_state);
    must(keel_add_batch(idx, v, n, ids, NULL), "add_batch");
    free(v);
}

/* Decodes the newest valid header copy of b. */
static void
decode_newest(base *b)
{
    keel_header *h = malloc(sizeof *h);
    b->h = malloc(sizeof *b->h);
    if (!h || !b->h)
        fuzz_fail("out of memory");
    int best = -1;
    for (int c = 0; c < 2; c++) {
        if (b->len < (size_t)(c + 1) * KEEL_PAGE_SLOT ||
            keel__header_decode(b->bytes + c * KEEL_PAGE_SLOT, b->len, h, NULL,
                                0) != KEEL_OK)
            continue;
        if (best < 0 || h->sequence > b->h->sequence) {
            *b->h = *h;
            best = c;
        }
    }
    free(h);
    if (best < 0)
        fuzz_fail("base file has no valid header");
    keel__geometry_init(&b->g, b->h);
    b->hlen = b->h->length;
}

/* Builds the base files: 0, 1 and 2 from one writer's life, 3 from
** another. */
static void
build_bases(void)
{
    const char *path = fuzz_path("corrupt-base");
    char undo_path[600];
    snprintf(undo_path, sizeof undo_path, "%s.undo", path);
    keel__test_geometry(4, 2, 10, 1, 6);

    for (int variant = 0; variant < 2; variant++) {
        fuzz_remove(path);
        keel_options o = {.max_connections = variant ? 16 : 4,
                          .metric = variant ? KEEL_COSINE : KEEL_L2,
                          .precision = variant ? KEEL_F16 : KEEL_F32,
                          .ef_construction = 40, .threads = 1};
        keel_index *idx;
        rng_state = 1 + (uint64_t)variant;
        must(keel_open(path, 8, &o, &idx), "open");
        add_random(idx, 200, NULL);
        uint64_t ids[10];
        for (int i = 0; i < 10; i++)
            ids[i] = 1000 + (uint64_t)i;
        add_random(idx, 10, ids);
        must(keel_flush(idx), "flush");
        for (uint64_t id = 0; id < 200; id += 6)
            must(keel_delete(idx, id), "delete");
        must(keel_delete(idx, 1003), "delete");
        add_random(idx, variant ? 50 : 90, NULL);
        must(keel_flush(idx), "flush");
        base *b = &bases[variant ? 3 : 0];
        b->bytes = fuzz_read_file(path, &b->len);
        if (!variant) {
            /* A killed writer: adds and deletes past the commit. */
            add_random(idx, 30, NULL);
            for (uint64_t id = 1; id < 200; id += 24) /* not yet deleted */
                must(keel_delete(idx, id), "delete");
            base *k = &bases[1];
            k->bytes = fuzz_read_file(path, &k->len);
            k->undo = fuzz_read_file(undo_path, &k->undo_len);
        }
        keel_close(idx);
    }
    fuzz_remove(path);

    decode_newest(&bases[0]);
    decode_newest(&bases[1]);
    decode_newest(&bases[3]);
    /* A torn commit: the newest copy is gone, the intent header remains. */
    base *t = &bases[2];
    t->len = bases[1].len;
    t->bytes = malloc(t->len);
    if (!t->bytes)
        fuzz_fail("out of memory");
    memcpy(t->bytes, bases[1].bytes, t->len);
    int newest = keel__get64(t->bytes + HO_SEQUENCE) >
                 keel__get64(t->bytes + KEEL_HDR_B_OFF + HO_SEQUENCE) ? 0 : 1;
    memset(t->bytes + newest * KEEL_PAGE_SLOT, 0, KEEL_PAGE_SLOT);
    if (bases[1].undo) {
        t->undo_len = bases[1].undo_len;
        t->undo = malloc(t->undo_len ? t->undo_len : 1);
        if (!t->undo)
            fuzz_fail("out of memory");
        memcpy(t->undo, bases[1].undo, t->undo_len);
    }
    decode_newest(t);
    if (!t->h->pending_epoch)
        fuzz_fail("base 2 does not start from an intent header");
}

/* The image being edited. */
typedef struct image {
    uint8_t *p;
    size_t len, cap;
    const base *b;
} image;

/* A value operand: an interesting value for this file, or raw bytes. */
static uint64_t
pick_value(fuzz_in *in, const base *b, size_t len)
{
    uint8_t m = fuzz_u8(in);
    const keel_header *h = b->h;
    const uint64_t table[] = {
        0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 0xFF, 0x100, 0xFFFF, 0x10000,
        0x7FFFFFFF, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu, 1ull << 32,
        1ull << 63, UINT64_MAX, UINT64_MAX - 1,
        h->count - 1, h->count, h->count + 1, h->count + 40,
        h->epoch, h->epoch + 1, h->epoch + 2, h->next_id - 1, h->next_id,
        h->file_end, h->file_end + KEEL_REGION_ALIGN, len, KEEL_DATA_OFF,
        KEEL_LIVE_OFF, h->heap_used, h->heap_used + 64, h->entry,
        h->max_level + 1, 0x7F800000u /* inf */, 0x7FC00000u /* NaN */,
        0x3F800000u /* 1.0f */, 0x7C00 /* f16 inf */, 0x7E00 /* f16 NaN */,
        h->segments, h->segments + 1, h->heap_chunks, h->heap_chunks + 1,
        h->idtab_log2 + 1, h->deleted + 1, h->M, h->M0, KEEL_MAX_SEGMENTS,
        KEEL_MAX_HEAP_CHUNKS, 0x0F0F0F0F0F0F0F0Full, 0xFFull << 16 | 15,
        (uint64_t)(h->heap_chunks) << 48 | 1, 0x0101010101010101ull,
        h->sequence + 1, h->sequence + 2, 4096, 4097, 32768};
    const size_t ntable = sizeof table / sizeof table[0];
    if (m < 0x40)
        return table[m % ntable];
    if (m < 0x80)
        return fuzz_u8(in);
    if (m < 0xA0)
        return fuzz_u16(in);
    if (m < 0xD0)
        return fuzz_u32(in);
    return fuzz_u64(in);
}

/* Stores the low `width` bytes of v at off, if they fit. */
static void
put(image *im, uint64_t off, uint32_t width, uint64_t v)
{
    if (off > im->len || width > im->len - off)
        return;
    for (uint32_t i = 0; i < width; i++)
        im->p[off + i] = (uint8_t)(v >> (8 * i));
}

static uint64_t
get64_at(const image *im, uint64_t off)
{
    if (off > im->len || 8 > im->len - off)
        return 0;
    return keel__get64(im->p + off);
}

/* Recomputes the checksum of header copy c over its length field. */
static void
rechecksum(image *im, int c)
{
    uint64_t at = (uint64_t)c * KEEL_PAGE_SLOT;
    if (at + HO_TABLES > im->len)
        return;
    uint32_t length = keel__get32(im->p + at + HO_LENGTH);
    if (length < KEEL_HDR_FIXED || length > KEEL_PAGE_SLOT ||
        at + length > im->len)
        return;
    keel__put64(im->p + at + HO_CHECKSUM,
                keel__header_checksum(im->p + at, length));
}

/* Where segment k starts: the header's table, or past the commit the live
** page's (regions a killed writer added). 0 if unknown. */
static uint64_t
seg_offset(const image *im, uint32_t k)
{
    const keel_header *h = im->b->h;
    if (k < h->segments)
        return h->seg_off[k];
    if (k >= KEEL_MAX_SEGMENTS)
        return 0;
    return get64_at(im, KEEL_LIVE_OFF + LO_SEG_TABLE + 8ull * k);
}

static uint64_t
chunk_offset(const image *im, uint32_t c)
{
    const keel_header *h = im->b->h;
    if (c < h->heap_chunks)
        return h->heap_off[c];
    if (c >= KEEL_MAX_HEAP_CHUNKS)
        return 0;
    return get64_at(im, KEEL_LIVE_OFF + LO_HEAP_TABLE + 8ull * c);
}

/* An edit of one field of one slot: id, mark, record head, level-0
** neighbour, vector component or upper-layer neighbour. */
static void
edit_slot(image *im, fuzz_in *in)
{
    const base *b = im->b;
    const keel_geometry *g = &b->g;
    uint64_t s = fuzz_u16(in) % (b->h->count + 48), i;
    uint8_t field = fuzz_u8(in);
    uint32_t j = fuzz_u8(in);
    uint64_t v = pick_value(in, b, im->len);
    uint32_t k = keel__slot_segment(g, s, &i);
    uint64_t seg = seg_offset(im, k);
    if (!seg)
        return;
    keel_seg_layout L;
    keel__seg_layout(g, k, &L);
    uint64_t rec = seg + L.rec_off + i * g->rec_bytes;
    switch (field % 6) {
    case 0:
        put(im, seg + i * KEEL_SLOT_HDR_BYTES, 8, v);
        break;
    case 1:
        put(im, seg + i * KEEL_SLOT_HDR_BYTES + 8, 8, v);
        break;
    case 2:
        put(im, rec, (field & 8) ? 1 : 8, v); /* the level alone, or all */
        break;
    case 3:
        put(im, rec + 8 + 4ull * (j % g->M0), 4, v);
        break;
    case 4: {
        uint32_t es = g->vec_bytes / g->dim;
        put(im, seg + L.vec_off + i * g->vec_bytes + es * (j % g->dim), es, v);
        break;
    }
    default: {
        uint64_t head = get64_at(im, rec), ref = head >> 16;
        uint32_t level = (uint32_t)(head & 0xFF);
        uint64_t chunk = chunk_offset(im, (uint32_t)(ref >> 32));
        if (!level || !chunk)
            return;
        put(im, chunk + (ref & 0xFFFFFFFFu) +
                    4ull * (j % (g->M * KEEL_MIN(level, 15u))), 4, v);
        break;
    }
    }
}

/* Header field offsets with their widths, for field edits. */
static const struct {
    uint16_t off;
    uint8_t width;
} hdr_fields[] = {
    {HO_READ_VERSION, 4}, {HO_WRITE_VERSION, 4}, {HO_SEQUENCE, 8},
    {HO_LENGTH, 4}, {HO_DIM, 4}, {HO_M, 4}, {HO_M0, 4}, {HO_METRIC, 1},
    {HO_PRECISION, 1}, {HO_MAX_LEVELS, 1}, {HO_FLAGS, 1}, {HO_SEG_BASE, 1},
    {HO_SEG_DOUBLINGS, 1}, {HO_HEAP_BASE, 1}, {HO_HEAP_DOUBLINGS, 1},
    {HO_COUNT, 8}, {HO_ENTRY, 4}, {HO_MAX_LEVEL, 4}, {HO_EPOCH, 8},
    {HO_PENDING, 8}, {HO_DELETED, 8}, {HO_NEXT_ID, 8}, {HO_FILE_END, 8},
    {HO_HEAP_USED, 8}, {HO_IDTAB_OFF, 8}, {HO_IDTAB_LOG2, 1},
    {HO_SEGMENTS, 4}, {HO_HEAP_CHUNKS, 4}, {129, 1}, {140, 4},
};

/* One edit of a header copy, then its checksum made to match. */
static void
edit_header(image *im, fuzz_in *in)
{
    uint8_t sel = fuzz_u8(in);
    int c = sel & 1;
    uint8_t which = fuzz_u8(in);
    uint64_t off;
    uint32_t width;
    const size_t nf = sizeof hdr_fields / sizeof hdr_fields[0];
    if (which < 0xC0) {
        off = hdr_fields[which % nf].off;
        width = hdr_fields[which % nf].width;
    } else if (which < 0xF0) {
        /* A region offset in the tables. */
        uint32_t n = im->b->h->segments + im->b->h->heap_chunks;
        off = HO_TABLES + 8ull * (fuzz_u8(in) % (n + 1));
        width = 8;
    } else {
        off = fuzz_u16(in) % im->b->hlen;
        width = 1u << (which & 3);
    }
    uint64_t v = pick_value(in, im->b, im->len);
    if (sel & 2) /* nudge the present value instead */
        v += get64_at(im, (uint64_t)c * KEEL_PAGE_SLOT + off);
    put(im, (uint64_t)c * KEEL_PAGE_SLOT + off, width, v);
    if (!(sel & 4))
        rechecksum(im, c);
}

/* Live page fields: routing count, generation, region counts and tables. */
static void
edit_live(image *im, fuzz_in *in)
{
    uint8_t which = fuzz_u8(in);
    uint32_t j = fuzz_u8(in);
    uint64_t v = pick_value(in, im->b, im->len);
    static const struct {
        uint32_t off, width, step;
    } fields[6] = {
        {LO_ROUTING, 8, 0},     {LO_GENERATION, 8, 0}, {LO_SEGMENTS, 4, 0},
        {LO_HEAP_CHUNKS, 4, 0}, {LO_SEG_TABLE, 8, 8},  {LO_HEAP_TABLE, 8, 8},
    };
    const uint32_t f = which % 6;
    put(im, KEEL_LIVE_OFF + fields[f].off + (uint64_t)fields[f].step * (j % 16),
        fields[f].width, v);
}

/* The undo log, as recovery will read it. */
typedef struct undo_img {
    uint8_t *p;
    size_t len;
} undo_img;

/* Recomputes every entry's checksum, so edits inside entries get applied. */
static void
undo_rechecksum(undo_img *u)
{
    if (u->len < 32)
        return;
    uint64_t ident = keel__get64(u->p + 16);
    for (size_t off = 32; off + 16 <= u->len;) {
        uint64_t bytes = 16 + 4ull * keel__get32(u->p + off + 4);
        if (bytes > u->len - off)
            break;
        keel__put64(u->p + off + bytes - 8,
                    XXH3_64bits_withSeed(u->p + off, bytes - 8, ident));
        off += bytes;
    }
}

static void
apply_edit(image *im, undo_img *u, fuzz_in *in)
{
    uint8_t op = fuzz_u8(in);
    switch (op % 12) {
    case 0: /* a byte anywhere */
        if (im->len)
            put(im, fuzz_u32(in) % im->len, 1, fuzz_u8(in));
        break;
    case 1: /* an aligned 32-bit word anywhere */
        if (im->len) {
            uint64_t off = (fuzz_u32(in) % im->len) & ~3ull;
            put(im, off, 4, pick_value(in, im->b, im->len));
        }
        break;
    case 2: /* an aligned 64-bit word anywhere */
        if (im->len) {
            uint64_t off = (fuzz_u32(in) % im->len) & ~7ull;
            put(im, off, 8, pick_value(in, im->b, im->len));
        }
        break;
    case 3: { /* fill a range */
        if (!im->len)
            break;
        uint64_t off = fuzz_u32(in) % im->len;
        uint64_t n = (uint64_t)fuzz_u16(in) * 4; /* not inside KEEL_MIN */
        n = KEEL_MIN(n, im->len - off);
        memset(im->p + off, fuzz_u8(in), (size_t)n);
        break;
    }
    case 4: { /* truncate, often at a region boundary */
        uint32_t x = fuzz_u32(in);
        size_t to = (size_t)(x % (im->len + 1));
        if (op & 0x80)
            to &= ~(size_t)(KEEL_REGION_ALIGN - 1);
        im->len = to;
        break;
    }
    case 5: { /* extend with zeros */
        size_t add = fuzz_u32(in) % (2u << 20);
        size_t to = KEEL_MIN(im->len + add, im->cap);
        memset(im->p + im->len, 0, to - im->len);
        im->len = to;
        break;
    }
    case 6:
        edit_header(im, in);
        break;
    case 7: /* a header copy's checksum made to match its bytes */
        rechecksum(im, op >> 7);
        break;
    case 8:
        edit_slot(im, in);
        break;
    case 9: { /* an id table entry */
        const keel_header *h = im->b->h;
        uint32_t j = fuzz_u16(in);
        uint64_t v = pick_value(in, im->b, im->len);
        if (h->idtab_offset)
            put(im, h->idtab_offset + 4ull * (j % (1u << h->idtab_log2)), 4, v);
        break;
    }
    case 10:
        edit_live(im, in);
        break;
    default: { /* the undo log: a word, then every checksum fixed */
        uint32_t off = fuzz_u16(in);
        uint64_t v = pick_value(in, im->b, im->len);
        if (u->len >= 4) {
            uint64_t at = (off % u->len) & ~3ull;
            for (uint32_t i = 0; i < 4 && at + i < u->len; i++)
                u->p[at + i] = (uint8_t)(v >> (8 * i));
        }
        if (!(op & 0x80))
            undo_rechecksum(u);
        break;
    }
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    static image im;
    if (!ready) {
        build_bases();
        size_t most = 0;
        for (int i = 0; i < NBASE; i++)
            most = KEEL_MAX(most, bases[i].len);
        im.cap = most + MAX_GROW;
        im.p = malloc(im.cap);
        if (!im.p)
            fuzz_fail("out of memory");
        ready = 1;
    }
    fuzz_in in = {data, size, 0};
    uint8_t mode = fuzz_u8(&in);
    const base *b = &bases[mode % NBASE];
    im.b = b;
    im.len = b->len;
    memcpy(im.p, b->bytes, b->len);
    undo_img u = {NULL, 0};
    if ((mode & 8) && b->undo) {
        u.len = b->undo_len;
        u.p = malloc(u.len ? u.len : 1);
        if (!u.p)
            fuzz_fail("out of memory");
        memcpy(u.p, b->undo, u.len);
    }
    for (int e = 0; e < MAX_EDITS && fuzz_more(&in); e++)
        apply_edit(&im, &u, &in);

    ex_run(fuzz_path("corrupt"), im.p, im.len, u.p, u.len,
           (mode & 4) ? EX_COMPACT : 0);
    free(u.p);
    return 0;
}
