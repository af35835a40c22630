/* A decoder's whole one-token step in C: one call a token, where PyTorch makes some 150 calls and Python some 3,000.
 *
 * Decoding a few rows reads every weight once a token, and plm's products (native.c) read them near the memory
 * bandwidth; what is left of a PyTorch step is the work around them (norms, attention over the cache, the activation,
 * the residual stream) and the Python and dispatch that runs it: 1.7 ms a GPT-2 124M token, a fifth of an int8
 * token's time, measured on the speed page. This file runs the same step of a decoder-only stack of Transformer
 * blocks (pre-LN or post-LN, learned positions, a tied or separate output matrix) for a few rows: plm.cpu.native_step
 * describes a model's tensors to it, and reads and writes PyTorch's own key/value caches, so a step here and a step
 * of the model are interchangeable.
 *
 * The residual stream, norms, attention and activation are fp32, whatever the weights: bf16 weights multiply a bf16
 * rounding of their input (as PyTorch's bf16 products do) with fp32 sums, int8 ones an int16 rounding of it
 * (plm_int8_linear's). Each product splits its output rows among the threads, and reads each block of weights
 * once for all the input rows; attention splits the rows' heads.
 */
#include <stdlib.h>
#include <omp.h>

#include "native.h"

enum { WEIGHT_F32 = 0, WEIGHT_BF16 = 1, WEIGHT_INT8 = 2 };    /* a product's weight, an embedding table, a cache */
enum { GELU = 0, GELU_TANH = 1, RELU = 2, SILU = 3 };         /* the feed-forward activation */
#define ACTIVATION_CHUNK 512 /* inner values a thread activates at a time */

typedef struct { /* y = x W^T + b; W (out, in) row-major */
    const void *weight;     /* fp32, bf16 or int8 values */
    const uint16_t *scales; /* int8: (out,) bf16, a scale per row; else NULL */
    const float *bias;      /* (out,) or NULL */
    int64_t out, in;
    int32_t kind;
} plm_product;

typedef struct { /* one TransformerBlock: norms' (dim,) weights and biases in fp32 */
    const float *attention_norm_weight, *attention_norm_bias;
    plm_product in_proj; /* (3 dim, dim): W_Q, W_K, W_V stacked */
    plm_product out_proj;
    const float *feed_forward_norm_weight, *feed_forward_norm_bias;
    plm_product fc_in, fc_out;
    void *keys, *values; /* the cache: (rows, heads, max_length, head_dim), of kind cache_kind */
} plm_layer;

typedef struct {
    int64_t layers, dim, heads, ffn_dim, max_length;
    int32_t norm_first, activation, cache_kind, token_kind, position_kind;
    float norm_eps;
    const void *token_embedding;     /* (vocab, dim) */
    const uint16_t *token_scales;    /* int8 tables: (vocab,) bf16 */
    const void *position_embedding;  /* (positions, dim) */
    const float *final_norm_weight;  /* NULL: no final LayerNorm */
    const float *final_norm_bias;
    plm_product head;                /* the output matrix: (vocab, dim) */
    const plm_layer *layer;          /* (layers,) */
} plm_decoder;

/* exp(x) within 1 ulp (measured every 3e-4 over [-87, 88]), in arithmetic the compiler vectorises (libm's expf is a
 * call per element): Cephes' expf, x = n ln 2 + r with |r| <= ln 2 / 2, a degree-6 polynomial in r, times 2^n. */
static inline float fast_exp(float x) {
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f + n * 2.12194440e-4f; /* ln 2 in two parts, so that n ln 2 is exact */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return (p * r * r + r + 1.0f) * scale;
}

/* erf(x) within 3.2e-7 (measured every 1e-4 over [-6, 6]): Numerical Recipes' Chebyshev fit of erfc, on fast_exp. */
static inline float fast_erf(float x) {
    float z = fabsf(x), t = 1.0f / (1.0f + 0.5f * z);
    float poly = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f
                 + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f + t * 0.17087277f))))))));
    float erfc = t * fast_exp(-z * z + poly);
    return x >= 0 ? 1.0f - erfc : erfc - 1.0f;
}

static void activate(float *x, int64_t n, int activation) {
    switch (activation) {
    case GELU:
        for (int64_t i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + fast_erf(x[i] * 0.70710678118654752f));
        break;
    case GELU_TANH: /* 0.5 x (1 + tanh(u)), and 1 + tanh(u) = 2 / (1 + exp(-2u)) */
        for (int64_t i = 0; i < n; i++) {
            float u = 0.79788456080286536f * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
            x[i] = x[i] / (1.0f + fast_exp(-2.0f * u));
        }
        break;
    case RELU:
        for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    default: /* SILU */
        for (int64_t i = 0; i < n; i++) x[i] = x[i] / (1.0f + fast_exp(-x[i]));
    }
}

/* y = LayerNorm(x) over n values: (x - mean) / sqrt(var + eps) * weight + bias, the variance biased (PyTorch's). */
static void layer_norm(const float *x, float *y, int64_t n, const float *weight, const float *bias, float eps) {
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    float mean = (float)(sum / n);
    for (int64_t i = 0; i < n; i++) squares += (double)(x[i] - mean) * (x[i] - mean);
    float rstd = 1.0f / sqrtf((float)(squares / n) + eps);
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - mean) * rstd * weight[i] + bias[i];
}

/* One row of an embedding table of kind `kind`, as fp32, added to `into` (or written, when add is 0). */
static void embedding_row(const void *table, const uint16_t *scales, int kind, int64_t row, int64_t dim, float *into,
                          int add) {
    for (int64_t i = 0; i < dim; i++) {
        float value = kind == WEIGHT_F32    ? ((const float *)table)[row * dim + i]
                      : kind == WEIGHT_BF16 ? bf16_to_float(((const uint16_t *)table)[row * dim + i])
                                            : ((const int8_t *)table)[row * dim + i] * bf16_to_float(scales[row]);
        into[i] = add ? into[i] + value : value;
    }
}

/* The input rows of a product, (rows, in) each, rounded as its weight's kernel takes them. */
typedef struct {
    const float *f32;
    uint16_t *bf16;
    int16_t *int16;
    float *int16_scales; /* (rows,) */
    int64_t rows;
} product_input;

static void round_input(const plm_product *p, const float *x, product_input *input) {
    input->f32 = x;
    if (p->kind == WEIGHT_BF16)
        for (int64_t i = 0; i < input->rows * p->in; i++) input->bf16[i] = float_to_bf16(x[i]);
    else if (p->kind == WEIGHT_INT8)
        quantize_rows(x, input->rows, p->in, input->int16, input->int16_scales);
}

/* sums[r][k] = input row r0 + r times W's row o + k, for `rows` <= TILE input rows and `count` <= BLOCK weight rows:
 * a whole block of weights at once, or row by row. */
static void product_tile(const plm_product *p, const product_input *x, int64_t r0, int rows, int64_t o, int count,
                         float sums[TILE][BLOCK]) {
    int64_t in = p->in;
    if (p->kind == WEIGHT_F32) {
        const float *w = (const float *)p->weight + o * in, *input = x->f32 + r0 * in;
        if (count == BLOCK) f32_tile(w, input, in, rows, sums);
        else for (int r = 0; r < rows; r++)
            for (int k = 0; k < count; k++) sums[r][k] = f32_dot(w + k * in, input + r * in, 0, in);
    } else if (p->kind == WEIGHT_BF16) {
        const uint16_t *w = (const uint16_t *)p->weight + o * in, *input = x->bf16 + r0 * in;
        if (count == BLOCK) bf16_tile(w, input, in, rows, sums);
        else for (int r = 0; r < rows; r++)
            for (int k = 0; k < count; k++) sums[r][k] = bf16_dot(w + k * in, input + r * in, 0, in);
    } else {
        const int8_t *w = (const int8_t *)p->weight + o * in;
        const int16_t *input = x->int16 + r0 * in;
        double exact[TILE][BLOCK];
        if (count == BLOCK) int8_tile(w, input, in, rows, exact);
        else for (int r = 0; r < rows; r++)
            for (int k = 0; k < count; k++) exact[r][k] = (double)int8_dot(w + k * in, input + r * in, 0, in);
        for (int r = 0; r < rows; r++)
            for (int k = 0; k < count; k++)
                sums[r][k] = (float)(exact[r][k] * x->int16_scales[r0 + r] * bf16_to_float(p->scales[o + k]));
    }
}

/* y (rows, out) = x (rows, in) W^T + b, W's rows split among the threads of the enclosing parallel region: each
 * block of W is read from memory once, and from the cache for every TILE input rows. */
static void product(const plm_product *p, const product_input *x, float *y) {
    int64_t begin, end;
    thread_rows(p->out, omp_get_thread_num(), omp_get_num_threads(), &begin, &end);
    for (int64_t o = begin; o < end; o += BLOCK) {
        int count = end - o < BLOCK ? (int)(end - o) : BLOCK;
        for (int64_t r0 = 0; r0 < x->rows; r0 += TILE) {
            int rows = x->rows - r0 < TILE ? (int)(x->rows - r0) : TILE;
            float sums[TILE][BLOCK];
            product_tile(p, x, r0, rows, o, count, sums);
            for (int r = 0; r < rows; r++)
                for (int k = 0; k < count; k++)
                    y[(r0 + r) * p->out + o + k] = sums[r][k] + (p->bias ? p->bias[o + k] : 0.0f);
        }
    }
}

static inline float cache_value(const void *cache, int kind, int64_t index) {
    return kind == WEIGHT_F32 ? ((const float *)cache)[index] : bf16_to_float(((const uint16_t *)cache)[index]);
}

static inline void store_cache(void *cache, int kind, int64_t index, float value) {
    if (kind == WEIGHT_F32) ((float *)cache)[index] = value;
    else ((uint16_t *)cache)[index] = float_to_bf16(value);
}

/* out (rows, dim) = softmax(q K^T / sqrt(head_dim)) V for each row and head over the positions [0, slot] that
 * `valid` (rows, max_length) marks (all of them where it is NULL), the rows' heads split among the threads;
 * queries (rows, 3 dim), their first third; scores holds (rows * heads, max_length) floats. */
static void attend(const plm_decoder *d, const plm_layer *layer, const float *queries, int64_t rows, int64_t slot,
                   const uint8_t *valid, float *scores, float *out) {
    int64_t head_dim = d->dim / d->heads, length = slot + 1;
    float scale = 1.0f / sqrtf((float)head_dim);
#pragma omp for schedule(static)
    for (int64_t rh = 0; rh < rows * d->heads; rh++) {
        int64_t r = rh / d->heads, h = rh % d->heads, base = rh * d->max_length * head_dim;
        const float *q = queries + r * 3 * d->dim + h * head_dim;
        const uint8_t *row_valid = valid ? valid + r * d->max_length : NULL;
        float *score = scores + rh * d->max_length, *o = out + r * d->dim + h * head_dim, largest = -INFINITY;
        float total = 0.0f;
        for (int64_t t = 0; t < length; t++) {
            if (row_valid && !row_valid[t]) continue;
            float lanes[16] = {0}, sum = 0.0f;
            int64_t i = 0, at = base + t * head_dim;
            for (; i + 16 <= head_dim; i += 16)
                for (int l = 0; l < 16; l++) lanes[l] += q[i + l] * cache_value(layer->keys, d->cache_kind, at + i + l);
            for (int l = 0; l < 16; l++) sum += lanes[l];
            for (; i < head_dim; i++) sum += q[i] * cache_value(layer->keys, d->cache_kind, at + i);
            score[t] = sum * scale;
            largest = score[t] > largest ? score[t] : largest;
        }
        for (int64_t t = 0; t < length; t++) {
            score[t] = row_valid && !row_valid[t] ? 0.0f : fast_exp(score[t] - largest);
            total += score[t];
        }
        for (int64_t i = 0; i < head_dim; i++) o[i] = 0.0f;
        for (int64_t t = 0; t < length; t++) {
            float weight = score[t] / total;
            int64_t at = base + t * head_dim;
            if (weight != 0.0f)
                for (int64_t i = 0; i < head_dim; i++) o[i] += weight * cache_value(layer->values, d->cache_kind, at + i);
        }
    }
}

/* The scratch of a step, in one allocation: each buffer holds `rows` rows. */
typedef struct {
    float *x, *normed, *qkv, *attended, *inner, *scores, *int16_scales;
    uint16_t *bf16;
    int16_t *int16;
    void *memory;
} work;

static int allocate(const plm_decoder *d, int64_t rows, work *w) {
    int64_t widest = 3 * d->dim > d->ffn_dim ? 3 * d->dim : d->ffn_dim;
    int64_t floats = rows * (3 * d->dim + widest + d->ffn_dim + d->heads * d->max_length + 1);
    w->memory = malloc((size_t)floats * sizeof(float) + (size_t)(rows * widest) * (sizeof(uint16_t) + sizeof(int16_t)));
    if (w->memory == NULL) return 0;
    w->x = w->memory;
    w->normed = w->x + rows * d->dim;
    w->attended = w->normed + rows * d->dim;
    w->qkv = w->attended + rows * d->dim;
    w->inner = w->qkv + rows * widest;
    w->scores = w->inner + rows * d->ffn_dim;
    w->int16_scales = w->scores + rows * d->heads * d->max_length;
    w->bf16 = (uint16_t *)(w->int16_scales + rows);
    w->int16 = (int16_t *)(w->bf16 + rows * widest);
    return 1;
}

/* y = x W^T + b inside the parallel region: one thread rounds the input, all multiply. */
static void parallel_product(const plm_product *p, const float *x, product_input *input, float *y) {
#pragma omp single
    round_input(p, x, input);
    product(p, input, y); /* `single` ends in a barrier: every thread sees the rounded input */
#pragma omp barrier
}

static void residual(float *x, const float *add, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += add[i];
}

/* LayerNorm of each of `rows` rows of x (rows, dim) into y. */
static void layer_norms(const float *x, float *y, int64_t rows, int64_t dim, const float *weight, const float *bias,
                        float eps) {
    for (int64_t r = 0; r < rows; r++) layer_norm(x + r * dim, y + r * dim, dim, weight, bias, eps);
}

/* The step's activation (an index of plm.cpu.native_step.ACTIVATIONS) over n values in place: its own entry, so that
 * the tests hold fast_exp and fast_erf to their stated error over the whole range, beyond a model's activations. */
void plm_activate(float *x, int64_t n, int32_t activation) { activate(x, n, activation); }

/* The logits (rows, vocab) after each row's token tokens[r] at position positions[r], their keys and values stored
 * at `slot` of every layer's cache (slot: the tokens before them, padding included). valid (rows, max_length): 1 at
 * the positions a row attends to (its real tokens), or NULL for all. Returns 0 when there is no memory for the step's
 * scratch, 1 otherwise. */
int plm_decoder_step(const plm_decoder *d, const int64_t *tokens, const int64_t *positions, int64_t rows, int64_t slot,
                     const uint8_t *valid, float *logits, int threads) {
    work w;
    if (!allocate(d, rows, &w)) return 0;
    int64_t dim = d->dim, head_dim = d->dim / d->heads, stream = rows * dim;
    product_input input = {NULL, w.bf16, w.int16, w.int16_scales, rows};
    for (int64_t r = 0; r < rows; r++) {
        embedding_row(d->token_embedding, d->token_scales, d->token_kind, tokens[r], dim, w.x + r * dim, 0);
        embedding_row(d->position_embedding, NULL, d->position_kind, positions[r], dim, w.x + r * dim, 1);
    }
#pragma omp parallel num_threads(threads)
    for (int64_t l = 0; l < d->layers; l++) {
        const plm_layer *layer = d->layer + l;
        float *attention_input = w.x;
        if (d->norm_first) { /* pre-LN: x + Attention(LN(x)); post-LN: LN(x + Attention(x)) */
#pragma omp single
            layer_norms(w.x, w.normed, rows, dim, layer->attention_norm_weight, layer->attention_norm_bias,
                        d->norm_eps);
            attention_input = w.normed;
        }
        parallel_product(&layer->in_proj, attention_input, &input, w.qkv);
#pragma omp single
        for (int64_t r = 0; r < rows; r++) /* the new keys and values, (rows, heads, max_length, head_dim) */
            for (int64_t h = 0; h < d->heads; h++)
                for (int64_t i = 0; i < head_dim; i++) {
                    int64_t at = ((r * d->heads + h) * d->max_length + slot) * head_dim + i;
                    const float *qkv = w.qkv + r * 3 * dim + h * head_dim + i;
                    store_cache(layer->keys, d->cache_kind, at, qkv[dim]);
                    store_cache(layer->values, d->cache_kind, at, qkv[2 * dim]);
                }
        attend(d, layer, w.qkv, rows, slot, valid, w.scores, w.attended); /* `omp for`: its barrier ends it */
        parallel_product(&layer->out_proj, w.attended, &input, w.normed);
#pragma omp single
        {
            residual(w.x, w.normed, stream);
            if (d->norm_first)
                layer_norms(w.x, w.normed, rows, dim, layer->feed_forward_norm_weight, layer->feed_forward_norm_bias,
                            d->norm_eps);
            else
                layer_norms(w.x, w.x, rows, dim, layer->attention_norm_weight, layer->attention_norm_bias, d->norm_eps);
        }
        parallel_product(&layer->fc_in, d->norm_first ? w.normed : w.x, &input, w.inner);
#pragma omp for schedule(static) /* chunks of the rows' inner values among the threads; its barrier ends it */
        for (int64_t chunk = 0; chunk < (rows * d->ffn_dim + ACTIVATION_CHUNK - 1) / ACTIVATION_CHUNK; chunk++) {
            int64_t from = chunk * ACTIVATION_CHUNK, left = rows * d->ffn_dim - from;
            activate(w.inner + from, left < ACTIVATION_CHUNK ? left : ACTIVATION_CHUNK, d->activation);
        }
        parallel_product(&layer->fc_out, w.inner, &input, w.attended);
#pragma omp single
        {
            residual(w.x, w.attended, stream);
            if (!d->norm_first)
                layer_norms(w.x, w.x, rows, dim, layer->feed_forward_norm_weight, layer->feed_forward_norm_bias,
                            d->norm_eps);
        }
    }
    if (d->final_norm_weight != NULL)
        layer_norms(w.x, w.x, rows, dim, d->final_norm_weight, d->final_norm_bias, d->norm_eps);
#pragma omp parallel num_threads(threads)
    parallel_product(&d->head, w.x, &input, logits);
    free(w.memory);
    return 1;
}
