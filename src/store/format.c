/* format.c -- encoding, decoding and validation of header copies, and the
** geometry of segments and heap chunks.
**
** This is where bytes read from a file become trusted numbers: every field a
** later module relies on (sizes, counts, offsets, slot numbers) is checked
** against the format's limits and against the others here, so the store can
** map regions and index slots without further checks on the header.
*/
#include "store/format.h"

#include <stdio.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

int keel__mutant;

static struct {
    uint32_t seg_base, seg_doublings, heap_base, heap_doublings, idtab_log2;
} test_geo;

void
keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                    uint32_t heap_base, uint32_t heap_doublings,
                    uint32_t idtab_log2)
{
    test_geo.seg_base = seg_base;
    test_geo.seg_doublings = seg_doublings;
    test_geo.heap_base = heap_base;
    test_geo.heap_doublings = heap_doublings;
    test_geo.idtab_log2 = idtab_log2;
}

uint32_t
keel__initial_idtab_log2(void)
{
    return test_geo.idtab_log2 ? test_geo.idtab_log2 : 12;
}

uint32_t
keel__code_row_bytes(uint32_t dim, int codes)
{
    if (codes == KEEL_CODES_I4)
        return (uint32_t)KEEL_ALIGN_UP(16u + (dim + 31u) / 32u * 16u, 64u);
    return codes ? (uint32_t)KEEL_ALIGN_UP(16u + dim, 64u) : 0;
}

static uint64_t
slot_bytes(uint32_t dim, uint32_t M0, int precision, int codes)
{
    return KEEL_SLOT_HDR_BYTES + (uint64_t)dim * (precision ? 2 : 4) + 8 +
           4ull * M0 + keel__code_row_bytes(dim, codes);
}

/* The smallest heap chunk must hold the largest entry: 15 upper lists. */
static uint32_t
min_heap_base(uint32_t M)
{
    return keel__log2_ceil64(4ull * M * (KEEL_MAX_LEVELS - 1));
}

void
keel__header_new(keel_header *h, uint32_t dim, uint32_t M, int metric,
                 int precision, int codes)
{
    memset(h, 0, sizeof *h);
    h->read_version = codes == KEEL_CODES_I4 ? KEEL_FORMAT_CODES_I4 : 1;
    h->write_version = codes == KEEL_CODES_I4 ? KEEL_FORMAT_CODES_I4
                       : codes                ? KEEL_FORMAT_CODES
                                              : 1;
    h->codes = (uint8_t)codes;
    h->dim = dim;
    h->M = M;
    h->M0 = 2 * M;
    h->metric = (uint8_t)metric;
    h->precision = (uint8_t)precision;
    h->max_levels = KEEL_MAX_LEVELS;
    h->entry = KEEL_EMPTY;
    h->file_end = KEEL_DATA_OFF;

    uint64_t sb = slot_bytes(dim, h->M0, precision, codes);
    if (test_geo.seg_base) {
        h->seg_base_log2 = (uint8_t)test_geo.seg_base;
        h->seg_doublings = (uint8_t)test_geo.seg_doublings;
    } else {
        /* Segments double from 1,024 slots while they fit in 32 MiB. */
        uint32_t base = 10, k = 0;
        while (k < 22 &&
               sb << (base + k + 1) <= ((uint64_t)1 << KEEL_NEW_SEG_LOG2))
            k++;
        h->seg_base_log2 = (uint8_t)base;
        h->seg_doublings = (uint8_t)k;
    }
    uint32_t hb = KEEL_MAX(min_heap_base(M), 10);
    if (test_geo.heap_base) {
        h->heap_base_log2 = (uint8_t)KEEL_MAX(hb, test_geo.heap_base);
        h->heap_doublings = (uint8_t)test_geo.heap_doublings;
    } else {
        h->heap_base_log2 = (uint8_t)KEEL_MAX(hb, 16);
        h->heap_doublings = (uint8_t)(KEEL_MAX_REGION_LOG2 > h->heap_base_log2
                                          ? KEEL_MAX_REGION_LOG2 - h->heap_base_log2
                                          : 0);
    }
}

void
keel__geometry_init(keel_geometry *g, const keel_header *h)
{
    g->dim = h->dim;
    g->M = h->M;
    g->M0 = h->M0;
    g->vec_bytes = h->dim * (h->precision ? 2u : 4u);
    g->rec_bytes = 8u + 4u * h->M0;
    g->code_bytes = keel__code_row_bytes(h->dim, h->codes);
    g->codes = h->codes;
    g->seg_base_log2 = h->seg_base_log2;
    g->seg_doublings = h->seg_doublings;
    g->heap_base_log2 = h->heap_base_log2;
    g->heap_doublings = h->heap_doublings;
    g->seg_boundary = ((uint64_t)1 << g->seg_base_log2) *
                      (((uint64_t)1 << g->seg_doublings) - 1);
}

uint64_t
keel__seg_slots(const keel_geometry *g, uint32_t k)
{
    return (uint64_t)1 << (g->seg_base_log2 + KEEL_MIN(k, g->seg_doublings));
}

uint64_t
keel__seg_first_slot(const keel_geometry *g, uint32_t k)
{
    if (k <= g->seg_doublings)
        return ((uint64_t)1 << g->seg_base_log2) * (((uint64_t)1 << k) - 1);
    return g->seg_boundary + ((uint64_t)(k - g->seg_doublings)
                              << (g->seg_base_log2 + g->seg_doublings));
}

uint64_t
keel__slots_in_segments(const keel_geometry *g, uint32_t n)
{
    return keel__seg_first_slot(g, n);
}

void
keel__commit_marks(const keel_geometry *g, const keel_header *h, uint64_t off,
                   uint8_t *buf, size_t n)
{
    uint64_t end = off + n;
    for (uint32_t k = 0; k < h->segments; k++) {
        uint64_t first = keel__seg_first_slot(g, k);
        if (h->count <= first)
            break;
        uint64_t slots = KEEL_MIN(keel__seg_slots(g, k), h->count - first);
        uint64_t a = h->seg_off[k], b = a + slots * KEEL_SLOT_HDR_BYTES;
        /* the first slot header at or after off, and its mark */
        uint64_t lo = a >= off ? a
                               : a + (off - a + KEEL_SLOT_HDR_BYTES - 1) /
                                         KEEL_SLOT_HDR_BYTES *
                                         KEEL_SLOT_HDR_BYTES;
        uint64_t hi = KEEL_MIN(b, end);
        for (uint64_t at = lo + 8; at + 8 <= hi; at += KEEL_SLOT_HDR_BYTES)
            if (keel__get64(buf + (at - off)) > h->epoch)
                keel__put64(buf + (at - off), 0);
    }
}

void
keel__seg_layout(const keel_geometry *g, uint32_t k, keel_seg_layout *out)
{
    uint64_t n = keel__seg_slots(g, k);
    out->slots = n;
    out->vec_off = KEEL_ALIGN_UP(n * KEEL_SLOT_HDR_BYTES, 64);
    out->rec_off = KEEL_ALIGN_UP(out->vec_off + n * g->vec_bytes, 64);
    uint64_t end = out->rec_off + n * g->rec_bytes;
    out->code_off = 0;
    if (g->code_bytes) {
        out->code_off = KEEL_ALIGN_UP(end, 64);
        end = out->code_off + n * g->code_bytes;
    }
    out->bytes = KEEL_ALIGN_UP(end, KEEL_REGION_ALIGN);
}

uint64_t
keel__heap_chunk_bytes(const keel_geometry *g, uint32_t c)
{
    return (uint64_t)1 << (g->heap_base_log2 + KEEL_MIN(c, g->heap_doublings));
}

uint64_t
keel__header_checksum(const uint8_t *buf, uint32_t length)
{
    /* The checksum field counts as zero: hash around it. */
    XXH3_state_t st;
    static const uint8_t zero[8];
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, buf, HO_CHECKSUM);
    XXH3_64bits_update(&st, zero, 8);
    XXH3_64bits_update(&st, buf + HO_CHECKSUM + 8,
                       length - (HO_CHECKSUM + 8));
    return XXH3_64bits_digest(&st);
}

int
keel__identity_present(const uint8_t identity[KEEL_IDENTITY_BYTES])
{
    for (uint32_t i = 0; i < KEEL_IDENTITY_BYTES; i++)
        if (identity[i])
            return 1;
    return 0;
}

int
keel__header_same_index(const keel_header *a, const keel_header *b)
{
    return a->dim == b->dim && a->M == b->M && a->metric == b->metric &&
           a->precision == b->precision && a->codes == b->codes &&
           memcmp(a->identity, b->identity, KEEL_IDENTITY_BYTES) == 0;
}

void
keel__identity_hex(const uint8_t identity[KEEL_IDENTITY_BYTES], char out[33])
{
    if (!keel__identity_present(identity)) {
        memcpy(out, "none", 5);
        return;
    }
    for (uint32_t i = 0; i < KEEL_IDENTITY_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", identity[i]);
}

/* Bytes of the tables; the identity, when present, follows them. */
static uint32_t
tables_end(const keel_header *h)
{
    return KEEL_HDR_FIXED + 8u * (h->segments + h->heap_chunks);
}

void
keel__header_encode(keel_header *h, uint8_t *buf)
{
    memset(buf, 0, KEEL_PAGE_SLOT);
    int has_identity = keel__identity_present(h->identity);
    h->length = tables_end(h) + (has_identity ? KEEL_IDENTITY_BYTES : 0u);
    memcpy(buf + HO_MAGIC, KEEL_MAGIC, 8);
    keel__put32(buf + HO_READ_VERSION, h->read_version);
    keel__put32(buf + HO_WRITE_VERSION, h->write_version);
    keel__put64(buf + HO_SEQUENCE, h->sequence);
    keel__put32(buf + HO_LENGTH, h->length);
    keel__put32(buf + HO_DIM, h->dim);
    keel__put32(buf + HO_M, h->M);
    keel__put32(buf + HO_M0, h->M0);
    buf[HO_METRIC] = h->metric;
    buf[HO_PRECISION] = h->precision;
    buf[HO_MAX_LEVELS] = h->max_levels;
    buf[HO_FLAGS] = h->flags;
    buf[HO_SEG_BASE] = h->seg_base_log2;
    buf[HO_SEG_DOUBLINGS] = h->seg_doublings;
    buf[HO_HEAP_BASE] = h->heap_base_log2;
    buf[HO_HEAP_DOUBLINGS] = h->heap_doublings;
    keel__put64(buf + HO_COUNT, h->count);
    keel__put32(buf + HO_ENTRY, h->entry);
    keel__put32(buf + HO_MAX_LEVEL, h->max_level);
    keel__put64(buf + HO_EPOCH, h->epoch);
    keel__put64(buf + HO_PENDING, h->pending_epoch);
    keel__put64(buf + HO_DELETED, h->deleted);
    keel__put64(buf + HO_NEXT_ID, h->next_id);
    keel__put64(buf + HO_FILE_END, h->file_end);
    keel__put64(buf + HO_HEAP_USED, h->heap_used);
    keel__put64(buf + HO_IDTAB_OFF, h->idtab_offset);
    buf[HO_IDTAB_LOG2] = (uint8_t)h->idtab_log2;
    buf[HO_CODES] = h->codes;
    keel__put32(buf + HO_SEGMENTS, h->segments);
    keel__put32(buf + HO_HEAP_CHUNKS, h->heap_chunks);
    uint8_t *t = buf + HO_TABLES;
    for (uint32_t i = 0; i < h->segments; i++, t += 8)
        keel__put64(t, h->seg_off[i]);
    for (uint32_t i = 0; i < h->heap_chunks; i++, t += 8)
        keel__put64(t, h->heap_off[i]);
    if (has_identity)
        memcpy(t, h->identity, KEEL_IDENTITY_BYTES);
    keel__put64(buf + HO_CHECKSUM, keel__header_checksum(buf, h->length));
}

#define BAD(...)                                                            \
    do {                                                                    \
        if (why)                                                            \
            snprintf(why, why_len, __VA_ARGS__);                            \
        return KEEL_ECORRUPT;                                               \
    } while (0)

/* A region [off, off+len) must be aligned, past the fixed pages and inside
** the committed file end. */
static int
region_ok(uint64_t off, uint64_t len, uint64_t file_end)
{
    return off % KEEL_REGION_ALIGN == 0 && off >= KEEL_DATA_OFF &&
           off <= file_end && len <= file_end - off;
}

static int
check_geometry(const keel_header *h, char *why, size_t why_len)
{
    if (h->dim < 1 || h->dim > KEEL_MAX_DIM)
        BAD("dimensions %u outside 1..4096", h->dim);
    if (h->M < 2 || h->M > KEEL_MAX_M || h->M0 != 2 * h->M)
        BAD("M %u / M0 %u impossible", h->M, h->M0);
    if (h->metric > 2 || h->precision > 1)
        BAD("metric %u or precision %u unknown", h->metric, h->precision);
    /* Codes need a writer that keeps them (write_version 3, 4 for 4-bit
     * ones), and 4-bit ones a reader that knows them (read_version 4). */
    unsigned need = h->codes == KEEL_CODES_I4 ? KEEL_FORMAT_CODES_I4
                                              : KEEL_FORMAT_CODES;
    if (h->codes > KEEL_CODES_I4 || (h->codes && h->write_version < need))
        BAD("traversal codes %u with write version %u", h->codes,
            h->write_version);
    if (h->codes == KEEL_CODES_I4 && h->read_version < KEEL_FORMAT_CODES_I4)
        BAD("traversal codes %u with read version %u", h->codes,
            h->read_version);
    if (h->max_levels != KEEL_MAX_LEVELS)
        BAD("max levels %u is not 16", h->max_levels);
    if (h->flags & ~KEEL_FLAG_SUPERSEDED)
        BAD("unknown flags 0x%x", h->flags);
    if (h->seg_base_log2 < 2 || h->seg_base_log2 > 20 ||
        h->seg_base_log2 + h->seg_doublings > 30)
        BAD("segment geometry %u/%u impossible", h->seg_base_log2,
            h->seg_doublings);
    if (h->heap_base_log2 < min_heap_base(h->M) || h->heap_base_log2 < 6 ||
        h->heap_base_log2 + h->heap_doublings > 30)
        BAD("heap geometry %u/%u impossible", h->heap_base_log2,
            h->heap_doublings);
    return KEEL_OK;
}

int
keel__header_decode(const uint8_t *buf, uint64_t file_len, keel_header *h,
                    char *why, size_t why_len)
{
    if (memcmp(buf + HO_MAGIC, KEEL_MAGIC, 8) != 0) {
        if (why)
            snprintf(why, why_len, "no keel magic");
        return KEEL_ENOTINDEX;
    }
    h->read_version = keel__get32(buf + HO_READ_VERSION);
    h->write_version = keel__get32(buf + HO_WRITE_VERSION);
    if (h->read_version > KEEL_FORMAT_VERSION) {
        if (why)
            snprintf(why, why_len, "read version %u", h->read_version);
        return KEEL_EVERSION;
    }
    h->checksum_ok = 0;
    h->length = keel__get32(buf + HO_LENGTH);
    if (h->length < KEEL_HDR_FIXED || h->length > KEEL_PAGE_SLOT)
        BAD("header length %u", h->length);
    if (keel__header_checksum(buf, h->length) !=
            keel__get64(buf + HO_CHECKSUM) &&
        keel__mutant != KEEL_MUT_NO_CHECKSUM)
        BAD("header checksum does not match");
    h->checksum_ok = 1;
    h->sequence = keel__get64(buf + HO_SEQUENCE);
    h->dim = keel__get32(buf + HO_DIM);
    h->M = keel__get32(buf + HO_M);
    h->M0 = keel__get32(buf + HO_M0);
    h->metric = buf[HO_METRIC];
    h->precision = buf[HO_PRECISION];
    h->max_levels = buf[HO_MAX_LEVELS];
    h->flags = buf[HO_FLAGS];
    h->seg_base_log2 = buf[HO_SEG_BASE];
    h->seg_doublings = buf[HO_SEG_DOUBLINGS];
    h->heap_base_log2 = buf[HO_HEAP_BASE];
    h->heap_doublings = buf[HO_HEAP_DOUBLINGS];
    h->count = keel__get64(buf + HO_COUNT);
    h->entry = keel__get32(buf + HO_ENTRY);
    h->max_level = keel__get32(buf + HO_MAX_LEVEL);
    h->epoch = keel__get64(buf + HO_EPOCH);
    h->pending_epoch = keel__get64(buf + HO_PENDING);
    h->deleted = keel__get64(buf + HO_DELETED);
    h->next_id = keel__get64(buf + HO_NEXT_ID);
    h->file_end = keel__get64(buf + HO_FILE_END);
    h->heap_used = keel__get64(buf + HO_HEAP_USED);
    h->idtab_offset = keel__get64(buf + HO_IDTAB_OFF);
    h->idtab_log2 = buf[HO_IDTAB_LOG2];
    h->codes = buf[HO_CODES];
    h->segments = keel__get32(buf + HO_SEGMENTS);
    h->heap_chunks = keel__get32(buf + HO_HEAP_CHUNKS);

    int rc = check_geometry(h, why, why_len);
    if (rc)
        return rc;
    if (h->segments > KEEL_MAX_SEGMENTS || h->heap_chunks > KEEL_MAX_HEAP_CHUNKS)
        BAD("%u segments / %u heap chunks exceed the tables", h->segments,
            h->heap_chunks);
    /* The length is the tables' end, or that plus the identity. */
    if (h->length != tables_end(h) &&
        h->length != tables_end(h) + KEEL_IDENTITY_BYTES)
        BAD("header length %u does not fit its tables", h->length);
    memset(h->identity, 0, KEEL_IDENTITY_BYTES);
    if (h->length > tables_end(h))
        memcpy(h->identity, buf + tables_end(h), KEEL_IDENTITY_BYTES);
    if (h->file_end < KEEL_DATA_OFF || h->file_end > file_len)
        BAD("committed end %llu beyond the file's %llu bytes",
            (unsigned long long)h->file_end, (unsigned long long)file_len);

    keel_geometry g;
    keel__geometry_init(&g, h);
    const uint8_t *t = buf + HO_TABLES;
    for (uint32_t i = 0; i < h->segments; i++, t += 8) {
        keel_seg_layout L;
        keel__seg_layout(&g, i, &L);
        h->seg_off[i] = keel__get64(t);
        if (!region_ok(h->seg_off[i], L.bytes, h->file_end))
            BAD("segment %u at %llu outside the file", i,
                (unsigned long long)h->seg_off[i]);
    }
    for (uint32_t i = 0; i < h->heap_chunks; i++, t += 8) {
        h->heap_off[i] = keel__get64(t);
        if (!region_ok(h->heap_off[i], keel__heap_chunk_bytes(&g, i),
                       h->file_end))
            BAD("heap chunk %u at %llu outside the file", i,
                (unsigned long long)h->heap_off[i]);
    }
    if (h->count > keel__slots_in_segments(&g, h->segments) ||
        h->count > KEEL_MAX_SLOTS)
        BAD("%llu vectors do not fit %u segments",
            (unsigned long long)h->count, h->segments);
    if (h->count == 0 ? h->entry != KEEL_EMPTY : h->entry >= h->count)
        BAD("entry point %u with %llu vectors", h->entry,
            (unsigned long long)h->count);
    if (h->max_level >= KEEL_MAX_LEVELS || (h->count == 0 && h->max_level))
        BAD("top layer %u", h->max_level);
    /* Codes are coded about a centre at the start of heap chunk 0, placed
     * by the first add (doc/format.md 3). */
    if (h->codes && h->count &&
        (h->heap_chunks == 0 ||
         (h->heap_used >> 32 == 0 && (h->heap_used & 0xFFFFFFFFu) < 4ull * h->dim)))
        BAD("traversal codes of %llu vectors without their centre",
            (unsigned long long)h->count);
    if (h->deleted > h->count)
        BAD("%llu deleted of %llu", (unsigned long long)h->deleted,
            (unsigned long long)h->count);
    if (h->pending_epoch && h->pending_epoch != h->epoch + 1)
        BAD("pending epoch %llu after epoch %llu",
            (unsigned long long)h->pending_epoch,
            (unsigned long long)h->epoch);
    uint32_t chunk = (uint32_t)(h->heap_used >> 32);
    uint64_t used = h->heap_used & 0xFFFFFFFFu;
    if (h->heap_used != 0 &&
        (chunk >= h->heap_chunks || used > keel__heap_chunk_bytes(&g, chunk)))
        BAD("heap position %u:%llu outside %u chunks", chunk,
            (unsigned long long)used, h->heap_chunks);
    if (h->idtab_offset) {
        if (h->idtab_log2 < 4 || h->idtab_log2 > 33)
            BAD("id table of 2^%u entries", h->idtab_log2);
        uint64_t bytes = KEEL_ALIGN_UP(4ull << h->idtab_log2, KEEL_REGION_ALIGN);
        if (!region_ok(h->idtab_offset, bytes, h->file_end))
            BAD("id table at %llu outside the file",
                (unsigned long long)h->idtab_offset);
        if (h->count > (1ull << h->idtab_log2) / 2)
            BAD("id table of 2^%u entries for %llu vectors", h->idtab_log2,
                (unsigned long long)h->count);
    } else if (h->count) {
        BAD("%llu vectors without an id table", (unsigned long long)h->count);
    }
    return KEEL_OK;
}
