/* What plm's C files share: the bf16 conversions, and the row kernels of native.c that native_step.c calls.
 *
 * The kernels multiply BLOCK weight rows at a time by up to TILE input rows; plm's exported functions (plm_*) split an
 * output's rows among threads and call them. Nothing here is exported from the library (hidden visibility).
 */
#ifndef PLM_NATIVE_H
#define PLM_NATIVE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define PLM_INTERNAL __attribute__((visibility("hidden")))
#define BLOCK 4 /* weight rows multiplied together */
#define TILE 4  /* input rows multiplied together by one pass over a block of weight rows (the *_tile kernels) */

static inline float bf16_to_float(uint16_t bits) {
    uint32_t word = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &word, sizeof value);
    return value;
}

static inline uint16_t float_to_bf16(float value) { /* round to nearest even, as PyTorch rounds */
    uint32_t word;
    memcpy(&word, &value, sizeof word);
    if (isnan(value)) return 0x7fc0;
    return (uint16_t)((word + 0x7fff + ((word >> 16) & 1)) >> 16);
}

/* The rows [*begin, *end) of `out` that thread `thread` of `threads` takes: whole blocks, in order. */
PLM_INTERNAL void thread_rows(int64_t out, int thread, int threads, int64_t *begin, int64_t *end);

/* One row's sum over x[from:in] W[from:in] (int8: [from:to], exact), for tails after the vector loops and rows past
 * the last whole block of BLOCK weight rows: fp32 weights; bf16 weights and input with fp32 sums; int8 weights and
 * int16 input (quantize_rows). */
PLM_INTERNAL float f32_dot(const float *w, const float *x, int64_t from, int64_t in);
PLM_INTERNAL float bf16_dot(const uint16_t *w, const uint16_t *x, int64_t from, int64_t in);
PLM_INTERNAL int64_t int8_dot(const int8_t *w, const int16_t *x, int64_t from, int64_t to);

/* The sums of the BLOCK weight rows at w by up to TILE input rows x (rows, in) at once: sums[r][k] = x[r] W[k]^T.
 * Each chunk of a weight row is loaded (and for int8, widened) once for all the rows. */
PLM_INTERNAL void f32_tile(const float *w, const float *x, int64_t in, int rows, float sums[][BLOCK]);
PLM_INTERNAL void bf16_tile(const uint16_t *w, const uint16_t *x, int64_t in, int rows, float sums[][BLOCK]);
PLM_INTERNAL void int8_tile(const int8_t *w, const int16_t *x, int64_t in, int rows, double sums[][BLOCK]);

/* Each row of x (rows, in) as int16 values and a scale, max |x_r| / 32767 (NaN for a row that is not finite). */
PLM_INTERNAL void quantize_rows(const float *x, int64_t rows, int64_t in, int16_t *values, float *scales);

#endif
