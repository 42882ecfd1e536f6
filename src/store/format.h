/* format.h -- the on-disk format as C: constants, the decoded header, and the
** geometry that turns a slot number into places in the file.
**
** doc/format.md is the normative description; this file mirrors it and
** format.c encodes, decodes and validates header copies. Nothing here does
** I/O. Everything read from a file passes through keel__header_decode, which
** refuses what the format does not allow, before any other module sees it.
*/
#ifndef KEEL_FORMAT_H
#define KEEL_FORMAT_H

#include "base/internal.h"

#define KEEL_MAGIC            "KEELVIX\0"
/* The newest format this build reads and writes. Files without traversal
** codes are written as version 1 (any keel reads and writes them); files
** with int8 codes carry write_version 3, so a writer that does not know
** codes (and would leave them stale) refuses them, while its readers, which
** never look at the codes array, read them; 4-bit codes need version 4
** (below). */
#define KEEL_FORMAT_VERSION   4u
#define KEEL_FORMAT_CODES     3u
/* Files with 4-bit codes carry read and write version 4: a keel that does
** not know them refuses them as newer instead of reading them as damaged. */
#define KEEL_FORMAT_CODES_I4  4u

#define KEEL_HDR_A_OFF        0u
#define KEEL_HDR_B_OFF        65536u
#define KEEL_LIVE_OFF         131072u
#define KEEL_DATA_OFF         196608u
#define KEEL_PAGE_SLOT        65536u   /* bytes per header copy / live page */
#define KEEL_REGION_ALIGN     65536u

#define KEEL_HDR_FIXED        144u
#define KEEL_IDENTITY_BYTES   16u      /* after the tables, when present */
#define KEEL_MAX_SEGMENTS     6144u
#define KEEL_MAX_HEAP_CHUNKS  1024u
#define KEEL_MAX_LEVELS       16u
#define KEEL_MAX_DIM          4096u
#define KEEL_MAX_M            32767u
#define KEEL_EMPTY            0xFFFFFFFFu   /* empty neighbour / table entry */
#define KEEL_MAX_SLOTS        0xFFFFFFFEull /* slots are u32; EMPTY reserved */
#define KEEL_SLOT_HDR_BYTES   16u
#define KEEL_MAX_REGION_LOG2  28u           /* 256 MiB segments and chunks */
/* A new file's segments hold at most 32 MiB: the unused end of the last one
** is the most a file is longer than what it holds (doc/format.md 1). */
#define KEEL_NEW_SEG_LOG2     25u

/* Header field offsets (doc/format.md section 2). */
enum {
    HO_MAGIC = 0, HO_READ_VERSION = 8, HO_WRITE_VERSION = 12, HO_CHECKSUM = 16,
    HO_SEQUENCE = 24, HO_LENGTH = 32, HO_DIM = 36, HO_M = 40, HO_M0 = 44,
    HO_METRIC = 48, HO_PRECISION = 49, HO_MAX_LEVELS = 50, HO_FLAGS = 51,
    HO_SEG_BASE = 52, HO_SEG_DOUBLINGS = 53, HO_HEAP_BASE = 54,
    HO_HEAP_DOUBLINGS = 55, HO_COUNT = 56, HO_ENTRY = 64, HO_MAX_LEVEL = 68,
    HO_EPOCH = 72, HO_PENDING = 80, HO_DELETED = 88, HO_NEXT_ID = 96,
    HO_FILE_END = 104, HO_HEAP_USED = 112, HO_IDTAB_OFF = 120,
    HO_IDTAB_LOG2 = 128, HO_CODES = 129, HO_SEGMENTS = 132, HO_HEAP_CHUNKS = 136,
    HO_TABLES = 144
};

/* Live page field offsets (doc/format.md section 7). */
enum {
    LO_ROUTING = 0, LO_GENERATION = 8, LO_SEGMENTS = 16, LO_HEAP_CHUNKS = 20,
    LO_SEG_TABLE = 64,
    LO_HEAP_TABLE = 64 + 8 * KEEL_MAX_SEGMENTS,
    LO_UNDO_TAG = LO_HEAP_TABLE + 8 * KEEL_MAX_HEAP_CHUNKS, /* 57408 */
    LO_UNDO_PATH_LEN = LO_UNDO_TAG + 8,
    LO_UNDO_PATH = LO_UNDO_TAG + 16
};
/* Bytes the live page holds for the undo log's path. */
#define KEEL_UNDO_PATH_MAX (KEEL_PAGE_SLOT - LO_UNDO_PATH)

#define KEEL_FLAG_SUPERSEDED 1u

/* A decoded header copy. Only the first `segments` / `heap_chunks` entries
** of the tables are meaningful. */
typedef struct keel_header {
    uint32_t read_version, write_version;
    int checksum_ok;         /* decode: the checksum matched */
    uint64_t sequence;
    uint32_t length;
    uint32_t dim, M, M0;
    uint8_t metric, precision, max_levels, flags;
    uint8_t seg_base_log2, seg_doublings, heap_base_log2, heap_doublings;
    uint8_t codes;           /* KEEL_CODES_NONE, _I8 or _I4 */
    uint64_t count;          /* N */
    uint32_t entry;          /* KEEL_EMPTY when count == 0 */
    uint32_t max_level;
    uint64_t epoch;          /* E */
    uint64_t pending_epoch;  /* nonzero: intent header */
    uint64_t deleted;
    uint64_t next_id;
    uint64_t file_end;
    uint64_t heap_used;      /* chunk << 32 | offset */
    uint64_t idtab_offset;
    uint32_t idtab_log2;
    uint32_t segments, heap_chunks;
    /* Which index this is: random at creation, carried by compaction to the
     * file that replaces it. All zero in files written before it existed
     * (their headers end with the tables). */
    uint8_t identity[KEEL_IDENTITY_BYTES];
    uint64_t seg_off[KEEL_MAX_SEGMENTS];
    uint64_t heap_off[KEEL_MAX_HEAP_CHUNKS];
} keel_header;

/* Sizes derived from a header's fixed fields; computed once per file. */
typedef struct keel_geometry {
    uint32_t dim, M, M0;
    uint32_t vec_bytes;      /* dim * 4 or dim * 2 */
    uint32_t rec_bytes;      /* 8 + 4 * M0 */
    uint32_t code_bytes;     /* a traversal code row; 0 without codes */
    uint32_t codes;          /* KEEL_CODES_NONE, _I8 or _I4 */
    uint32_t seg_base_log2, seg_doublings;
    uint32_t heap_base_log2, heap_doublings;
    uint64_t seg_boundary;   /* B: slots in the doubling segments */
} keel_geometry;

/* The layout of one segment of n slots. */
typedef struct keel_seg_layout {
    uint64_t slots;
    uint64_t vec_off, rec_off; /* offsets of the vector and record arrays */
    uint64_t code_off;         /* of the code rows (0: the file has none) */
    uint64_t bytes;            /* region size, a multiple of 64 KiB */
} keel_seg_layout;

void keel__geometry_init(keel_geometry *g, const keel_header *h);
uint64_t keel__seg_slots(const keel_geometry *g, uint32_t k);
void keel__seg_layout(const keel_geometry *g, uint32_t k, keel_seg_layout *out);
uint64_t keel__heap_chunk_bytes(const keel_geometry *g, uint32_t c);
/* First slot of segment k. */
uint64_t keel__seg_first_slot(const keel_geometry *g, uint32_t k);
/* Slots held by segments 0..n-1. */
uint64_t keel__slots_in_segments(const keel_geometry *g, uint32_t n);
/* The copy of commit h in buf, n bytes of the file at off: zeroes the
** deleted epochs above h->epoch in the slot headers of h's slots that the
** range holds (deletes made after the commit, not flushed: the commit
** holds those slots as present). keel_backup and keel_publish copy a
** commit through it, so both hold the commit's bytes and not the file's. */
void keel__commit_marks(const keel_geometry *g, const keel_header *h,
                        uint64_t off, uint8_t *buf, size_t n);

/* Slot -> (segment, index); the hot-path version lives in store.h. */
static inline uint32_t
keel__slot_segment(const keel_geometry *g, uint64_t s, uint64_t *index)
{
    uint32_t b = g->seg_base_log2;
    if (s < g->seg_boundary) {
        uint32_t k = keel__log2_floor64((s >> b) + 1);
        *index = s - (((uint64_t)1 << b) * (((uint64_t)1 << k) - 1));
        return k;
    }
    uint64_t rest = s - g->seg_boundary;
    uint32_t shift = b + g->seg_doublings;
    *index = rest & (((uint64_t)1 << shift) - 1);
    return g->seg_doublings + (uint32_t)(rest >> shift);
}

/* The geometry a new file gets for these parameters. Tests may shrink it
** with keel__test_geometry so short workloads cross region boundaries. */
void keel__header_new(keel_header *h, uint32_t dim, uint32_t M, int metric,
                      int precision, int codes);
/* Bytes of one traversal code row of the given codes (doc/format.md 3): 16
** bytes of scale, then dim signed bytes (I8) or 16 bytes per 32 dimensions
** (I4), rounded up to 64; 0 for KEEL_CODES_NONE. */
uint32_t keel__code_row_bytes(uint32_t dim, int codes);
/* Test seam: segments of 2^seg_base slots doubling seg_doublings times, heap
** chunks of 2^heap_base bytes doubling heap_doublings times, id tables of
** 2^idtab_log2 entries at first. All zero restores the defaults. Applies to
** files created afterwards, in this process. */
void keel__test_geometry(uint32_t seg_base, uint32_t seg_doublings,
                         uint32_t heap_base, uint32_t heap_doublings,
                         uint32_t idtab_log2);
uint32_t keel__initial_idtab_log2(void);

/* Test-only switch: a broken variant of the commit protocol, so the
** durability tests can show they catch each one (test/test_powerloss.c).
** 0 in every real use. */
enum keel_mutant {
    KEEL_MUT_NONE = 0,
    KEEL_MUT_NO_SYNC_BEFORE_HEADER,  /* breaks commit.c invariant (1) */
    KEEL_MUT_HEADER_OVER_NEWEST,     /* breaks (2) */
    KEEL_MUT_NO_INTENT,              /* breaks (5) */
    KEEL_MUT_RECOVERY_KEEPS_MARKS,   /* breaks (6) */
    KEEL_MUT_NO_CHECKSUM,            /* header copies trusted unchecked */
    KEEL_MUT_NO_UNDO,                /* undo.c saves nothing */
    KEEL_MUT_COUNT
};
extern int keel__mutant;

/* Whether a header carries an identity (not all zero). */
int keel__identity_present(const uint8_t identity[KEEL_IDENTITY_BYTES]);
/* Whether two commits are of one index: the same identity, dimensions,
** M, metric, precision and codes (what a reader that follows the index
** keeps). */
int keel__header_same_index(const keel_header *a, const keel_header *b);
/* The identity as 32 hex digits ("none" if absent), for messages. */
void keel__identity_hex(const uint8_t identity[KEEL_IDENTITY_BYTES],
                        char out[33]);

/* Encodes h into buf (KEEL_PAGE_SLOT bytes, zero past the header), setting
** h->length and the checksum; the identity follows the tables when h has
** one. */
void keel__header_encode(keel_header *h, uint8_t *buf);

/* Decodes and validates the copy in buf (KEEL_PAGE_SLOT bytes) against a file
** of file_len bytes. Returns KEEL_OK; KEEL_ENOTINDEX (no magic);
** KEEL_EVERSION (read version too new); KEEL_ECORRUPT (bad checksum or an
** impossible field). Records no message unless why is non-NULL, in which case
** it receives a short reason. */
int keel__header_decode(const uint8_t *buf, uint64_t file_len, keel_header *h,
                        char *why, size_t why_len);

/* The checksum of a header copy's covered bytes (field zeroed). */
uint64_t keel__header_checksum(const uint8_t *buf, uint32_t length);

#endif /* KEEL_FORMAT_H */
