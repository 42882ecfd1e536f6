/* dist_isa.h -- what the per-ISA kernel files give dist.c.
**
** Private to the distance module: dist.c picks among these tables, and the
** ISA files (dist_avx2.c, dist_avx512.c, dist_neon.c) define them. Each
** table keeps invariants (1) and (2) of dist.h within itself. Nothing here
** is declared unless the build compiles the matching file.
*/
#ifndef KEEL_DIST_ISA_H
#define KEEL_DIST_ISA_H

#include "hnsw/dist.h"

/* The scalar table's code_dot (dist.c), which tables without a kernel of
** their own share. */
int32_t keel__code_dot_scalar(const uint8_t *qu, const int8_t *c,
                              uint32_t dim);
int32_t keel__code4_dot_scalar(const uint8_t *qu, const int8_t *c,
                               uint32_t dim);

#if defined(__x86_64__)
extern const keel_kernels keel__kernels_avx2;
extern const keel_kernels keel__kernels_avx512;
/* The avx512 table with VNNI's byte dot products for traversal codes. */
extern const keel_kernels keel__kernels_avx512_vnni;
/* The avx2 table's code4_dot, which the avx512 tables share: no 512-bit
** form was written, as no AVX-512 machine was at hand to measure one. */
int32_t keel__code4_dot_avx2(const uint8_t *qu, const int8_t *c,
                             uint32_t dim);
/* Bulk conversions with F16C; the same bits as the scalar ones. Run only on
** a CPU with AVX and F16C. */
void keel__f32_to_f16_n_f16c(const float *src, uint16_t *dst, size_t n);
void keel__f16_to_f32_n_f16c(const uint16_t *src, float *dst, size_t n);
#endif

#if defined(__aarch64__)
extern const keel_kernels keel__kernels_neon;
#endif

#endif /* KEEL_DIST_ISA_H */
