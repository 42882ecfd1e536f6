/* dist.h -- distance kernels and half-precision conversion.
**
** A leaf module: pure functions, no state but the kernel table chosen once
** per process from the CPU's features. Every kernel takes the query as f32
** and a stored vector as f32 or IEEE binary16 (f16), and returns a sum:
** the squared Euclidean distance or the dot product. Callers turn those into
** the metric's distance.
**
** Invariants:
**   (1) For one kernel table, the f16 kernel widens each stored half to f32
**       and then adds exactly the same products in exactly the same order as
**       the f32 kernel, so a vector whose components are representable in
**       half gets bit-identical results from both precisions.
**   (2) The grouped kernels (x4) give each of their four vectors the same
**       bits as the single kernel would: grouping only shares query loads.
**   (3) The table never changes once chosen, so distances computed by the
**       graph walk and by an exact scan of the same pair are identical.
**   (4) code_dot and code4_dot are integer arithmetic without overflow
**       (dim <= 4096 terms of at most 255 x 128): every table returns the
**       same value.
** dim is 1..4096; there is no alignment requirement on either pointer.
*/
#ifndef KEEL_DIST_H
#define KEEL_DIST_H

#include <stddef.h>
#include <stdint.h>

/* One distance sum between query q (f32) and a stored vector v. */
typedef float (*keel_dist_fn)(const float *q, const void *v, uint32_t dim);
/* The same for four stored vectors at once: out[i] = fn(q, v[i], dim). */
typedef void (*keel_dist4_fn)(const float *q, const void *const v[4],
                              uint32_t dim, float out[4]);

/* The integer dot product of a query's unsigned bytes and a code row's
** signed bytes (traversal codes, hnsw/codes.h): exact, so every table gives
** the same value. */
typedef int32_t (*keel_code_dot_fn)(const uint8_t *qu, const int8_t *c,
                                    uint32_t dim);
/* code4_dot has the same type: c points at 4-bit codes packed as codes.h
** describes (16 bytes per 32 dimensions, nibbles 0..15 taken unsigned), and
** the sum runs over whole blocks of 32, so qu holds zeros past dim up to
** the next multiple of 32. */

typedef struct keel_kernels {
    keel_dist_fn l2sq[2];   /* [KEEL_F32], [KEEL_F16]: sum of (q-v)^2 */
    keel_dist_fn dot[2];    /* [KEEL_F32], [KEEL_F16]: sum of q*v */
    keel_dist4_fn l2sq4[2];
    keel_dist4_fn dot4[2];
    keel_code_dot_fn code_dot;
    keel_code_dot_fn code4_dot;
    const char *name;       /* "avx512", "avx2", "neon" or "scalar" */
} keel_kernels;

/* The best table this CPU runs, chosen on first call (thread-safe). The
** environment variable KEEL_KERNELS=scalar|avx2|avx512 forces a table (for
** tests and benchmarks) when the CPU has it. */
const keel_kernels *keel__kernels(void);

/* Every table compiled into this build that this CPU can run, best first;
** *n gets the count. Tests compare each with the scalar one. */
const keel_kernels *const *keel__kernels_all(size_t *n);

/* Whether searches should prefetch neighbour vectors into L1 rather than L2
** on this CPU (chosen once; KEEL_PREFETCH=l1|l2 overrides, for benchmarks). */
int keel__prefetch_into_l1(void);

/* IEEE 754 binary16 <-> binary32. f32 -> f16 rounds to nearest, ties to even;
** values whose magnitude rounds above 65504 become infinity (callers refuse
** those first with keel__f16_overflows). NaN stays NaN. */
uint16_t keel__f32_to_f16(float x);
float keel__f16_to_f32(uint16_t h);
void keel__f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void keel__f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
/* 1 if x is finite but rounds to infinity in half precision (|x| >= 65520). */
int keel__f16_overflows(float x);

#endif /* KEEL_DIST_H */
