/* plm's one-token products on the CPU: y = x W^T (+ b) for a few rows x, reading each weight once.
 *
 * Decoding a token multiplies one row by every weight matrix of a model, so its speed is the speed at
 * which the weights stream from memory. PyTorch's kernels read bf16 and int8 weights at well under the
 * bandwidth (the speed page of the docs has the figures); these read them with the CPU's dot-product
 * instructions where the compiler offers them (AVX512-BF16's vdpbf16ps, AVX512-VNNI's vpdpwssd), and in
 * plain C that the compiler vectorises elsewhere. plm.cpu.native builds this file at first use with the
 * machine's C compiler (-O3 -march=native -fopenmp) and times it against PyTorch's kernels per shape;
 * where it loses, or cannot be built, PyTorch's kernels are used.
 *
 * Layout: W is (out, in), row-major, as nn.Linear keeps it; x is (rows, in); y is (rows, out). Each thread
 * takes a contiguous range of W's rows, BLOCK rows at a time, so each chunk of x is loaded once for BLOCK
 * weight rows; with several rows of x, a block of W is read from memory once and from the cache again.
 * The OpenMP runtime is the one PyTorch loaded (same soname), so these threads are PyTorch's.
 */
#include <stdlib.h>
#include <omp.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "native.h"

/* Bytes ahead of each row's loads that the vector loops ask the cache for: the hardware prefetcher alone
 * left GPT-2's int8 products at 16 GB/s, and 2 KiB ahead took them to 20 (bf16: 20 to 22) on the 2-core Xeon. */
#define PREFETCH_BYTES 2048
/* int8: inputs summed in int32 before a flush to fp32. A vpdpwssd lane adds two products of at most
 * 32767 * 128 a step, 8.39e6; CHUNK / 32 = 128 steps make at most 1.07e9 < 2^31: no overflow. */
#define CHUNK 4096
#define INT16_MAX_Q 32767.0f

int plm_native_abi(void) { return 3; } /* plm.cpu.native checks it against the Python side's */

/* Which instructions this build multiplies with, for plm's reports: "bf16: ...; int8: ...". */
const char *plm_native_paths(void) {
#if defined(__AVX512BF16__)
#define BF16_PATH "AVX512-BF16"
#else
#define BF16_PATH "C"
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define INT8_PATH "AVX512-VNNI"
#else
#define INT8_PATH "C"
#endif
    return "bf16: " BF16_PATH "; int8: " INT8_PATH;
}

void thread_rows(int64_t out, int thread, int threads, int64_t *begin, int64_t *end) {
    int64_t blocks = (out + BLOCK - 1) / BLOCK;
    *begin = blocks * thread / threads * BLOCK;
    *end = blocks * (thread + 1) / threads * BLOCK;
    if (*begin > out) *begin = out;
    if (*end > out) *end = out;
}

/* ---- fp32 weights and input (the decoding step's; PyTorch's MKL products serve plm.cpu.linear) ---- */

float f32_dot(const float *w, const float *x, int64_t from, int64_t in) {
    float lanes[16] = {0}; /* sixteen partial sums, so that the compiler vectorises without reassociating */
    int64_t i = from;
    for (; i + 16 <= in; i += 16)
        for (int l = 0; l < 16; l++) lanes[l] += w[i + l] * x[i + l];
    float sum = 0;
    for (int l = 0; l < 16; l++) sum += lanes[l];
    for (; i < in; i++) sum += w[i] * x[i];
    return sum;
}

#if defined(__AVX512F__)
/* f32_tile for a number of rows the compiler knows, so that the TILE x BLOCK sums stay in registers. */
static inline __attribute__((always_inline)) void f32_tile_of(const float *w, const float *x, int64_t in, const int rows,
                                                              float sums[][BLOCK]) {
    __m512 acc[TILE][BLOCK];
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < BLOCK; k++) acc[r][k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
        __m512 chunk[TILE];
        for (int r = 0; r < rows; r++) chunk[r] = _mm512_loadu_ps(x + r * in + i);
        for (int k = 0; k < BLOCK; k++) _mm_prefetch((const char *)(w + k * in + i) + PREFETCH_BYTES, _MM_HINT_T0);
        for (int k = 0; k < BLOCK; k++) {
            __m512 weights = _mm512_loadu_ps(w + k * in + i);
            for (int r = 0; r < rows; r++) acc[r][k] = _mm512_fmadd_ps(weights, chunk[r], acc[r][k]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < BLOCK; k++)
            sums[r][k] = _mm512_reduce_add_ps(acc[r][k]) + f32_dot(w + k * in, x + r * in, i, in);
}
#endif

#if !defined(__AVX512F__)
/* The plain-C f32 kernel of one input row: sums[k] = x W[k]^T for the BLOCK rows at w. */
static void f32_row_block(const float *w, const float *x, int64_t in, float sums[BLOCK]) {
    int64_t i = 0;
    float lanes[BLOCK][16] = {{0}};
    for (; i + 16 <= in; i += 16)
        for (int k = 0; k < BLOCK; k++)
            for (int l = 0; l < 16; l++) lanes[k][l] += w[k * in + i + l] * x[i + l];
    for (int k = 0; k < BLOCK; k++) {
        float sum = 0;
        for (int l = 0; l < 16; l++) sum += lanes[k][l];
        sums[k] = sum + f32_dot(w + k * in, x, i, in);
    }
}
#endif

void f32_tile(const float *w, const float *x, int64_t in, int rows, float sums[][BLOCK]) {
#if defined(__AVX512F__)
    switch (rows) {
    case 1: f32_tile_of(w, x, in, 1, sums); break;
    case 2: f32_tile_of(w, x, in, 2, sums); break;
    case 3: f32_tile_of(w, x, in, 3, sums); break;
    default: f32_tile_of(w, x, in, TILE, sums);
    }
#else
    for (int r = 0; r < rows; r++) f32_row_block(w, x + r * in, in, sums[r]);
#endif
}

/* ---- bf16 weights, bf16 input and output, fp32 sums ---- */

/* The sum over x[from:in] W[o, from:in] in fp32, one row: the tail after the vector loop, and rows past the
 * last whole block. Sixteen partial sums, so that the compiler vectorises it without reassociating. */
float bf16_dot(const uint16_t *w, const uint16_t *x, int64_t from, int64_t in) {
    float lanes[16] = {0};
    int64_t i = from;
    for (; i + 16 <= in; i += 16)
        for (int l = 0; l < 16; l++) lanes[l] += bf16_to_float(w[i + l]) * bf16_to_float(x[i + l]);
    float sum = 0;
    for (int l = 0; l < 16; l++) sum += lanes[l];
    for (; i < in; i++) sum += bf16_to_float(w[i]) * bf16_to_float(x[i]);
    return sum;
}

#if defined(__AVX512BF16__)
/* bf16_tile for a number of rows the compiler knows, so that the TILE x BLOCK sums stay in registers. */
static inline __attribute__((always_inline)) void bf16_tile_of(const uint16_t *w, const uint16_t *x, int64_t in,
                                                               const int rows, float sums[][BLOCK]) {
    __m512 acc[TILE][BLOCK];
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < BLOCK; k++) acc[r][k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
        __m512bh chunk[TILE];
        for (int r = 0; r < rows; r++) chunk[r] = (__m512bh)_mm512_loadu_si512(x + r * in + i);
        for (int k = 0; k < BLOCK; k++) _mm_prefetch((const char *)(w + k * in + i) + PREFETCH_BYTES, _MM_HINT_T0);
        for (int k = 0; k < BLOCK; k++) {
            __m512bh weights = (__m512bh)_mm512_loadu_si512(w + k * in + i);
            for (int r = 0; r < rows; r++) acc[r][k] = _mm512_dpbf16_ps(acc[r][k], weights, chunk[r]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < BLOCK; k++)
            sums[r][k] = _mm512_reduce_add_ps(acc[r][k]) + bf16_dot(w + k * in, x + r * in, i, in);
}
#endif

#if !defined(__AVX512BF16__)
/* The plain-C bf16 kernel of one input row: sums[k] = x W[k]^T for the BLOCK rows at w. */
static void bf16_row_block(const uint16_t *w, const uint16_t *x, int64_t in, float sums[BLOCK]) {
    int64_t i = 0;
    float lanes[BLOCK][16] = {{0}};
    for (; i + 16 <= in; i += 16)
        for (int k = 0; k < BLOCK; k++)
            for (int l = 0; l < 16; l++) lanes[k][l] += bf16_to_float(w[k * in + i + l]) * bf16_to_float(x[i + l]);
    for (int k = 0; k < BLOCK; k++) {
        float sum = 0;
        for (int l = 0; l < 16; l++) sum += lanes[k][l];
        sums[k] = sum + bf16_dot(w + k * in, x, i, in);
    }
}
#endif

void bf16_tile(const uint16_t *w, const uint16_t *x, int64_t in, int rows, float sums[][BLOCK]) {
#if defined(__AVX512BF16__)
    switch (rows) {
    case 1: bf16_tile_of(w, x, in, 1, sums); break;
    case 2: bf16_tile_of(w, x, in, 2, sums); break;
    case 3: bf16_tile_of(w, x, in, 3, sums); break;
    default: bf16_tile_of(w, x, in, TILE, sums);
    }
#else
    for (int r = 0; r < rows; r++) bf16_row_block(w, x + r * in, in, sums[r]);
#endif
}

static void bf16_rows(const uint16_t *x, int64_t rows, const uint16_t *w, const uint16_t *bias, uint16_t *y,
                      int64_t out, int64_t in, int64_t begin, int64_t end) {
    int64_t o = begin;
    for (; o + BLOCK <= end; o += BLOCK)
        for (int64_t r0 = 0; r0 < rows; r0 += TILE) {
            int tile = rows - r0 < TILE ? (int)(rows - r0) : TILE;
            float sums[TILE][BLOCK];
            bf16_tile(w + o * in, x + r0 * in, in, tile, sums);
            for (int r = 0; r < tile; r++)
                for (int k = 0; k < BLOCK; k++)
                    y[(r0 + r) * out + o + k] = float_to_bf16(sums[r][k] + (bias ? bf16_to_float(bias[o + k]) : 0.0f));
        }
    for (; o < end; o++)
        for (int64_t r = 0; r < rows; r++)
            y[r * out + o] = float_to_bf16(bf16_dot(w + o * in, x + r * in, 0, in) + (bias ? bf16_to_float(bias[o]) : 0.0f));
}

/* y (rows, out) = x (rows, in) W^T (+ bias), all bf16 (bias may be NULL). */
void plm_bf16_linear(const uint16_t *x, int64_t rows, const uint16_t *w, const uint16_t *bias, uint16_t *y,
                     int64_t out, int64_t in, int threads) {
#pragma omp parallel num_threads(threads)
    {
        int64_t begin, end;
        thread_rows(out, omp_get_thread_num(), omp_get_num_threads(), &begin, &end);
        bf16_rows(x, rows, w, bias, y, out, in, begin, end);
    }
}

/* ---- int8 weights with a bf16 scale per row, fp32 input and output ---- */

/* The sum over x[from:to] W[o, from:to] in exact integers: the tail after the vector loop. */
int64_t int8_dot(const int8_t *w, const int16_t *x, int64_t from, int64_t to) {
    int64_t sum = 0;
    for (int64_t i = from; i < to; i++) sum += (int32_t)w[i] * x[i];
    return sum;
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
static inline int64_t lanes_sum(__m512i lanes) { /* exact: the 16 int32 lanes widened to int64 first */
    __m512i low = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(lanes));
    __m512i high = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(lanes, 1));
    return _mm512_reduce_add_epi64(_mm512_add_epi64(low, high));
}
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
/* int8_tile for a number of rows the compiler knows, so that the TILE x BLOCK sums stay in registers. */
static inline __attribute__((always_inline)) void int8_tile_of(const int8_t *w, const int16_t *x, int64_t in,
                                                               const int rows, double sums[][BLOCK]) {
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < BLOCK; k++) sums[r][k] = 0;
    for (int64_t start = 0; start < in; start += CHUNK) {
        int64_t stop = start + CHUNK < in ? start + CHUNK : in, i = start;
        __m512i acc[TILE][BLOCK];
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < BLOCK; k++) acc[r][k] = _mm512_setzero_si512();
        for (; i + 32 <= stop; i += 32) {
            __m512i chunk[TILE];
            for (int r = 0; r < rows; r++) chunk[r] = _mm512_loadu_si512(x + r * in + i);
            for (int k = 0; k < BLOCK; k++) _mm_prefetch((const char *)(w + k * in + i) + PREFETCH_BYTES, _MM_HINT_T0);
            for (int k = 0; k < BLOCK; k++) {
                __m512i widened = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w + k * in + i)));
                for (int r = 0; r < rows; r++) acc[r][k] = _mm512_dpwssd_epi32(acc[r][k], widened, chunk[r]);
            }
        }
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < BLOCK; k++)
                sums[r][k] += (double)(lanes_sum(acc[r][k]) + int8_dot(w + k * in, x + r * in, i, stop));
    }
}
#endif

#if !(defined(__AVX512VNNI__) && defined(__AVX512BW__))
/* The plain-C int8 kernel of one input row: sums[k] = x W[k]^T for the BLOCK rows at w. */
static void int8_row_block(const int8_t *w, const int16_t *x, int64_t in, double sums[BLOCK]) {
    for (int k = 0; k < BLOCK; k++) sums[k] = 0;
    for (int64_t start = 0; start < in; start += CHUNK) {
        int64_t stop = start + CHUNK < in ? start + CHUNK : in, i = start;
        int32_t lanes[BLOCK][32] = {{0}};
        for (; i + 32 <= stop; i += 32)
            for (int k = 0; k < BLOCK; k++)
                for (int l = 0; l < 32; l++) lanes[k][l] += (int32_t)w[k * in + i + l] * x[i + l];
        for (int k = 0; k < BLOCK; k++) {
            int64_t sum = 0;
            for (int l = 0; l < 32; l++) sum += lanes[k][l];
            sums[k] += (double)(sum + int8_dot(w + k * in, x, i, stop));
        }
    }
}
#endif

void int8_tile(const int8_t *w, const int16_t *x, int64_t in, int rows, double sums[][BLOCK]) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    switch (rows) {
    case 1: int8_tile_of(w, x, in, 1, sums); break;
    case 2: int8_tile_of(w, x, in, 2, sums); break;
    case 3: int8_tile_of(w, x, in, 3, sums); break;
    default: int8_tile_of(w, x, in, TILE, sums);
    }
#else
    for (int r = 0; r < rows; r++) int8_row_block(w, x + r * in, in, sums[r]);
#endif
}

/* Each row of x as int16 values and a scale (max |x_r| / 32767); a row with a NaN or an infinity gets a NaN
 * scale, so that its products are NaN as fp32's would be. */
void quantize_rows(const float *x, int64_t rows, int64_t in, int16_t *values, float *scales) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * in;
        float largest = 0.0f;
        int finite = 1;
        for (int64_t i = 0; i < in; i++) {
            float magnitude = fabsf(row[i]);
            finite &= isfinite(magnitude) != 0;
            largest = magnitude > largest ? magnitude : largest;
        }
        float scale = largest / INT16_MAX_Q;
        scales[r] = finite ? scale : NAN;
        float inverse = scale > 0.0f && finite ? 1.0f / scale : 0.0f;
        for (int64_t i = 0; i < in; i++) {
            long value = lrintf(row[i] * inverse);
            values[r * in + i] = (int16_t)(value > 32767 ? 32767 : value < -32767 ? -32767 : value);
        }
    }
}

static void int8_rows(const int16_t *x, const float *x_scales, int64_t rows, const int8_t *w, const uint16_t *scales,
                      const float *bias, float *y, int64_t out, int64_t in, int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; o += BLOCK) {
        int count = end - o < BLOCK ? (int)(end - o) : BLOCK;
        for (int64_t r0 = 0; r0 < rows; r0 += TILE) {
            int tile = rows - r0 < TILE ? (int)(rows - r0) : TILE;
            double sums[TILE][BLOCK];
            if (count == BLOCK)
                int8_tile(w + o * in, x + r0 * in, in, tile, sums);
            else
                for (int r = 0; r < tile; r++)
                    for (int k = 0; k < count; k++)
                        sums[r][k] = (double)int8_dot(w + (o + k) * in, x + (r0 + r) * in, 0, in);
            for (int r = 0; r < tile; r++)
                for (int k = 0; k < count; k++)
                    y[(r0 + r) * out + o + k] = (float)(sums[r][k] * x_scales[r0 + r] * bf16_to_float(scales[o + k]))
                                                + (bias ? bias[o + k] : 0.0f);
        }
    }
}

/* y (rows, out) = x (rows, in) (W * scales)^T (+ bias): W int8 (out, in), scales bf16 (out), x, bias and y fp32
 * (bias may be NULL). Each row of x is rounded to int16 with its own scale (an error of at most max |x_r| / 65534
 * an element, finer than bf16's for all but the smallest elements) and the products summed exactly in integers.
 * Returns 0 when there is no memory for the rounded rows, 1 otherwise. */
int plm_int8_linear(const float *x, int64_t rows, const int8_t *w, const uint16_t *scales, const float *bias,
                    float *y, int64_t out, int64_t in, int threads) {
    int16_t *values = malloc((size_t)(rows * in) * sizeof *values);
    float *x_scales = malloc((size_t)rows * sizeof *x_scales);
    int ok = values != NULL && x_scales != NULL;
    if (ok) {
        quantize_rows(x, rows, in, values, x_scales);
#pragma omp parallel num_threads(threads)
        {
            int64_t begin, end;
            thread_rows(out, omp_get_thread_num(), omp_get_num_threads(), &begin, &end);
            int8_rows(values, x_scales, rows, w, scales, bias, y, out, in, begin, end);
        }
    }
    free(values);
    free(x_scales);
    return ok;
}
