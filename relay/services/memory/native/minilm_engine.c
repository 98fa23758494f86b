/* relay's engine for all-MiniLM-L6-v2 with int8 weights (relay/services/memory/minilm.py).

   A shared library, loaded by the model's process with ctypes: token ids in, one unit
   vector a text out. The weights are the model file's own (int8, a float scale a column),
   handed over once by minilm_open and packed here for the kernel chosen at run time (no
   -march: the cached build runs on any x86-64, or any CPU for the plain kernel): AMX
   tiles (tdpbusd) where the CPU has them and Linux lets the process use them, else
   AVX-512 VNNI (vpdpbusd, 64 multiply-adds an instruction), else AVX-VNNI (vpdpbusd on
   ymm, 32: product_avxvnni), else AVX2 (vpmaddubsw and vpmaddwd, 32 multiply-adds a
   pair, on 7-bit activations: product_avx2), else plain
   loops compiled for the machine's baseline. The float work is compiled once for each
   (forward_*).

   Each product is dynamic quantization, as onnxruntime's DynamicQuantizeMatMul: the
   activations are rounded to uint8 (0 to 127 for AVX2) with a scale and zero point,
   here one a token (a row) instead of one a run, so that a text's embedding does not
   depend on the texts run beside it; int32 sums; then float32 again, times the two scales, plus the bias.
   Everything else is float32, a token row at a time, with no dispatch between steps:
   embeddings (word + position + first token type), LayerNorm; six layers of the query,
   key and value products as one, 12-head attention over the text's tokens (no padding:
   each text is attended alone), the output product, residual and LayerNorm, the
   intermediate product, GELU (erf), the output product, residual and LayerNorm (the
   feed-forward part FEED_ROWS tokens at a time); the mean of the tokens' states, unit
   length. Each state is rounded for the next product as soon as its LayerNorm has made
   it, each text's attention rows as soon as they are made, and each intermediate row
   (AMX) as soon as its GELU has, while it is in L1 (a second pass over rows gone cold
   took a seventh of the engine's time); with AVX-512, attention, softmax, LayerNorm
   and the rounding are written in 16-float vectors, attention four queries of a head
   at a time (attend_wide), LayerNorm and GELU finding the rounding's range as they
   write a row, and GELU made of cubics (gelu_wide) instead of erf.

   No libm: exp and erf are written here (for the fallback of a machine without it, and
   for the loops to vectorize), the square root is the compiler's builtin. */

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HAVE_VNNI_KERNEL 1
#else
#define HAVE_VNNI_KERNEL 0
#endif

#define HIDDEN 384
#define INTERMEDIATE 1536
#define HEADS 12
#define HEAD_SIZE (HIDDEN / HEADS)
#define EPSILON 1e-12f
#define BLOCK_ROWS 4   /* rows of activations the VNNI kernel multiplies at once */
#define GROUP 64       /* columns it makes at once: four registers of 16 int32 */
#define PADDED_ROWS 32 /* the AMX kernel's rows at once (two tiles of 16): activations are padded to it */
#define FEED_ROWS 64   /* tokens through the feed-forward part at a time */
#define QUERIES 4      /* queries of a head attend_wide takes at once */
#define AVX2_LEVELS 127.0f /* the AVX2 kernel's activations: 7 bits (product_avx2) */
#define AVX2_ROWS 4    /* the AVX2 kernel's rows of activations at once */
#define AVX2_GROUP 16  /* its columns at once (make_dense lays the weights out by them) */

enum { KERNEL_PORTABLE = 0, KERNEL_AVX2 = 1, KERNEL_AVXVNNI = 2, KERNEL_VNNI = 3, KERNEL_AMX = 4 };
static const char *const KERNELS[] = {"portable", "avx2", "avxvnni", "avx512vnni", "amx"};

typedef struct {
    int k, n;
    int8_t *weights; /* laid out for the kernel (make_dense); plain loops: k rows of n */
    float *scales;   /* n: the weight's scale, a column */
    float *bias;     /* n */
    int32_t *sums;   /* n: each column's sum, for the activations' zero point */
} Dense;

typedef struct {
    Dense qkv, attention_out, intermediate, output;
    float *norm1_weight, *norm1_bias, *norm2_weight, *norm2_bias;
} Layer;

typedef struct {
    int kernel, layers, vocabulary, positions;
    int8_t *words;        /* vocabulary rows of HIDDEN */
    float *word_scales;   /* vocabulary */
    float *position_rows; /* positions rows of HIDDEN, dequantized, first token type added */
    float *norm_weight, *norm_bias;
    Layer *layer;
} Engine;

/* ---- small float functions ------------------------------------------------------- */

#define INLINE static inline __attribute__((always_inline))

INLINE float exp_approx(float x) {
    /* e^x as 2^n * e^r, |r| <= ln2/2, r's exponential by its degree-6 series (relative
       error under 2e-7 where it matters: softmax and erf). Without branches, so that a
       loop of them is vectorized: n rounded by adding and taking away 1.5 * 2^23. */
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
    float r2 = r * r; /* the series in three parts at once (Estrin), not one long chain */
    float p = (1.0f + r) + r2 * (0.5f + r * (1.0f / 6)) + r2 * r2 * (1.0f / 24 + r * (1.0f / 120) + r2 * (1.0f / 720));
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

INLINE float erf_approx(float x) {
    /* Abramowitz and Stegun 7.1.28 (absolute error under 3e-7): 1 - 1 / p(|x|)^16, p of
       degree 6; no exp, one division; |x| capped at 10 (erf is 1 there, and p^16 stays
       finite). Its sign put back as a bit (no branch). */
    uint32_t bits, sign;
    memcpy(&bits, &x, sizeof bits);
    sign = bits & 0x80000000u;
    bits &= 0x7fffffffu;
    float a;
    memcpy(&a, &bits, sizeof a);
    a = a < 10.0f ? a : 10.0f;
    float p = 1.0f + a * (0.0705230784f + a * (0.0422820123f + a * (0.0092705272f +
                          a * (0.0001520143f + a * (0.0002765672f + a * 0.0000430638f)))));
    p *= p;
    p *= p;
    p *= p;
    p *= p;
    float e = 1.0f - 1.0f / p;
    memcpy(&bits, &e, sizeof bits);
    bits |= sign;
    memcpy(&e, &bits, sizeof e);
    return e;
}

/* GELU (erf) in place on `count` floats. */
INLINE void gelu(float *v, int count) {
#pragma omp simd
    for (int i = 0; i < count; i++) v[i] = 0.5f * v[i] * (1.0f + erf_approx(v[i] * 0.70710678118654752f));
}

#if HAVE_VNNI_KERNEL
/* GELU for the AVX-512 kernels, without erf: x * Phi(x) = x / 2 + |x| * q(|x|), q(a) =
   Phi(a) - 1/2 = erf(a / sqrt 2) / 2, made of 32 cubics, each on a sixth of [0, 16/3]
   (q is 1/2 to float32's precision beyond: 1/2 - 5e-8), fitted by least squares at
   Chebyshev nodes. Their coefficients are four pairs of registers, each cubic's picked
   by its interval's number (vpermt2ps: no gather, no table in memory); absolute error
   under 1e-6 of the erf form, and no division. */
static const float GELU_CUBICS[4][32] __attribute__((aligned(64))) = {
    {-2.23983001e-08f, 0.0661837608f, 0.13055855f, 0.191462338f, 0.247507319f, 0.297671497f, 0.341344625f, 0.378327399f, 0.408788741f, 0.43319279f, 0.452209651f, 0.466623515f, 0.477249891f, 0.484869897f, 0.490184695f, 0.493790358f, 0.496169657f, 0.497696757f, 0.498650134f, 0.499229014f, 0.499570936f, 0.499767363f, 0.499877125f, 0.499936789f, 0.49996832f, 0.499984533f, 0.499992669f, 0.499996603f, 0.49999848f, 0.499999315f, 0.499999702f, 0.499999881f},
    {0.0664910525f, 0.0655754581f, 0.0629005805f, 0.0586817041f, 0.053245753f, 0.0469895117f, 0.040332038f, 0.0336691588f, 0.0273367427f, 0.0215870515f, 0.0165795051f, 0.0123845749f, 0.00899749622f, 0.00635759532f, 0.00436912524f, 0.00292029162f, 0.00189840025f, 0.00120026991f, 0.000738073257f, 0.000441417098f, 0.00025676025f, 0.000145256359f, 7.99228728e-05f, 4.2769625e-05f, 2.22601502e-05f, 1.12680509e-05f, 5.5475025e-06f, 2.65628114e-06f, 1.23702466e-06f, 5.60286651e-07f, 2.46813983e-07f, 1.05744235e-07f},
    {-2.98958253e-06f, -0.000921266212f, -0.00176379492f, -0.00246551842f, -0.00297993282f, -0.00328396703f, -0.0033788092f, -0.00328690559f, -0.00304611074f, -0.00270242267f, -0.00230278983f, -0.00188920589f, -0.00149482279f, -0.00114225759f, -0.000843824935f, -0.000603130844f, -0.000417378091f, -0.000279796601f, -0.000181779673f, -0.000114499133f, -6.99442317e-05f, -4.14488932e-05f, -2.38334833e-05f, -1.33003859e-05f, -7.20477601e-06f, -3.78899699e-06f, -1.93479809e-06f, -9.5941823e-07f, -4.62049826e-07f, -2.16132889e-07f, -9.82070034e-08f, -4.33499139e-08f},
    {-0.000304235029f, -0.000279367698f, -0.000232989769f, -0.000171186242f, -0.000101662925f, -3.24173234e-05f, 2.95214249e-05f, 7.90344056e-05f, 0.000113388574f, 0.000132222674f, 0.000137131559f, 0.000131007924f, 0.000117319665f, 9.94739021e-05f, 8.03628282e-05f, 6.21236322e-05f, 4.60917545e-05f, 3.28941533e-05f, 2.26191387e-05f, 1.50060569e-05f, 9.61490696e-06f, 5.95497931e-06f, 3.56759483e-06f, 2.06863524e-06f, 1.1614992e-06f, 6.31774981e-07f, 3.33020409e-07f, 1.70168718e-07f, 8.43155021e-08f, 4.05189233e-08f, 1.88896117e-08f, 8.54445759e-09f},
};

/* GELU on `count` floats (a multiple of 16) in place; their lowest and highest values
   after it (0 between them: the rounding's range) into *lowest and *highest. */
__attribute__((target("avx512f,fma"))) static inline void gelu_wide(float *v, int count, float *lowest,
                                                                   float *highest) {
    const __m512 c0a = _mm512_load_ps(GELU_CUBICS[0]), c0b = _mm512_load_ps(GELU_CUBICS[0] + 16);
    const __m512 c1a = _mm512_load_ps(GELU_CUBICS[1]), c1b = _mm512_load_ps(GELU_CUBICS[1] + 16);
    const __m512 c2a = _mm512_load_ps(GELU_CUBICS[2]), c2b = _mm512_load_ps(GELU_CUBICS[2] + 16);
    const __m512 c3a = _mm512_load_ps(GELU_CUBICS[3]), c3b = _mm512_load_ps(GELU_CUBICS[3] + 16);
    const __m512 sixths = _mm512_set1_ps(6.0f), end = _mm512_set1_ps(32.0f), last = _mm512_set1_ps(31.0f);
    const __m512 half = _mm512_set1_ps(0.5f);
    __m512 low = _mm512_setzero_ps(), high = low;
    for (int i = 0; i < count; i += 16) {
        const __m512 x = _mm512_loadu_ps(v + i), a = _mm512_abs_ps(x);
        const __m512 s = _mm512_min_ps(_mm512_mul_ps(a, sixths), end);
        const __m512 f = _mm512_min_ps(_mm512_roundscale_ps(s, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC), last);
        const __m512 u = _mm512_sub_ps(s, f);
        const __m512i at = _mm512_cvttps_epi32(f);
        __m512 p = _mm512_permutex2var_ps(c3a, at, c3b);
        p = _mm512_fmadd_ps(p, u, _mm512_permutex2var_ps(c2a, at, c2b));
        p = _mm512_fmadd_ps(p, u, _mm512_permutex2var_ps(c1a, at, c1b));
        p = _mm512_fmadd_ps(p, u, _mm512_permutex2var_ps(c0a, at, c0b));
        const __m512 g = _mm512_fmadd_ps(a, p, _mm512_mul_ps(half, x));
        _mm512_storeu_ps(v + i, g);
        low = _mm512_min_ps(low, g);
        high = _mm512_max_ps(high, g);
    }
    *lowest = _mm512_reduce_min_ps(low);
    *highest = _mm512_reduce_max_ps(high);
}
#endif

INLINE void layer_norm(float *row, const float *weight, const float *bias) {
    float mean = 0, variance = 0;
#pragma omp simd reduction(+ : mean)
    for (int i = 0; i < HIDDEN; i++) mean += row[i];
    mean /= HIDDEN;
#pragma omp simd reduction(+ : variance)
    for (int i = 0; i < HIDDEN; i++) {
        float d = row[i] - mean;
        variance += d * d;
    }
    float inverse = 1.0f / __builtin_sqrtf(variance / HIDDEN + EPSILON);
    for (int i = 0; i < HIDDEN; i++) row[i] = (row[i] - mean) * inverse * weight[i] + bias[i];
}

/* ---- products ---------------------------------------------------------------------- */

/* A row of k floats to uint8 with its scale and zero point (0 is exactly representable). */
INLINE void quantize_row(const float *x, int k, float levels, uint8_t *out, float *scale, int32_t *zero) {
    float low = 0, high = 0;
#pragma omp simd reduction(min : low) reduction(max : high)
    for (int i = 0; i < k; i++) {
        low = x[i] < low ? x[i] : low;
        high = x[i] > high ? x[i] : high;
    }
    float step = (high - low) / levels;
    if (step == 0) {
        memset(out, 0, (size_t)k);
        *scale = 0;
        *zero = 0;
        return;
    }
    float inverse = 1.0f / step;
    const int32_t top = (int32_t)levels;
    int32_t point = (int32_t)(-low * inverse + 0.5f);
    point = point < 0 ? 0 : point > top ? top : point;
    for (int i = 0; i < k; i++) {
        float v = x[i] * inverse + (float)point + 0.5f; /* >= 0.5 - rounding error: truncation rounds */
        int32_t q = (int32_t)v;
        out[i] = (uint8_t)(q < 0 ? 0 : q > top ? top : q);
    }
    *scale = step;
    *zero = point;
}

/* Rows of activations rounded to uint8, with each row's scale and zero point. */
typedef struct {
    uint8_t *q;
    float *scales;
    int32_t *zeros;
} Quantized;

#if HAVE_VNNI_KERNEL
static void round_wide(const float *x, int k, uint8_t *out, float *scale, int32_t *zero, float lowest, float highest);

/* quantize_row for the AVX-512 kernels (8 bits), k a multiple of 16. */
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) static void quantize_wide(const float *x, int k, uint8_t *out,
                                                                                 float *scale, int32_t *zero) {
    __m512 low = _mm512_setzero_ps(), high = low;
    for (int i = 0; i < k; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        low = _mm512_min_ps(low, v);
        high = _mm512_max_ps(high, v);
    }
    round_wide(x, k, out, scale, zero, _mm512_reduce_min_ps(low), _mm512_reduce_max_ps(high));
}

/* x (k floats, a multiple of 16, from `lowest` to `highest`, 0 between them) to uint8 with
   its scale and zero point. */
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) static void round_wide(const float *x, int k, uint8_t *out,
                                                                              float *scale, int32_t *zero,
                                                                              float lowest, float highest) {
    const float step = (highest - lowest) / 255.0f;
    if (step == 0) {
        memset(out, 0, (size_t)k);
        *scale = 0;
        *zero = 0;
        return;
    }
    const float inverse = 1.0f / step;
    int32_t point = (int32_t)(-lowest * inverse + 0.5f);
    point = point < 0 ? 0 : point > 255 ? 255 : point;
    const __m512 by = _mm512_set1_ps(inverse), plus = _mm512_set1_ps((float)point + 0.5f);
    const __m512i none = _mm512_setzero_si512(), top = _mm512_set1_epi32(255);
    for (int i = 0; i < k; i += 16) {
        __m512i q = _mm512_cvttps_epi32(_mm512_fmadd_ps(_mm512_loadu_ps(x + i), by, plus));
        q = _mm512_min_epi32(_mm512_max_epi32(q, none), top);
        _mm_storeu_si128((__m128i *)(out + i), _mm512_cvtepi32_epi8(q));
    }
    *scale = step;
    *zero = point;
}
#endif

#if HAVE_VNNI_KERNEL
/* For the AVX-512 kernels: a state row plus `add` (when given: the residual), its
   LayerNorm, and the row rounded into `q`, `scale` and `zero` (when q is given) from the
   lowest and highest values found as the LayerNorm writes them: each pass over the row
   in whole vectors (the compiler left the variance's sum a chain of scalar multiply-adds,
   and the mean's sum went through the stack). */
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) static void norm_wide(float *r, const float *add,
                                                                             const float *weight, const float *bias,
                                                                             uint8_t *q, float *scale, int32_t *zero) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (int i = 0; i < HIDDEN; i += 32) {
        __m512 v0 = _mm512_loadu_ps(r + i), v1 = _mm512_loadu_ps(r + i + 16);
        if (add) {
            v0 = _mm512_add_ps(v0, _mm512_loadu_ps(add + i));
            v1 = _mm512_add_ps(v1, _mm512_loadu_ps(add + i + 16));
            _mm512_storeu_ps(r + i, v0);
            _mm512_storeu_ps(r + i + 16, v1);
        }
        s0 = _mm512_add_ps(s0, v0);
        s1 = _mm512_add_ps(s1, v1);
    }
    const __m512 mean = _mm512_set1_ps(_mm512_reduce_add_ps(_mm512_add_ps(s0, s1)) / HIDDEN);
    __m512 t0 = _mm512_setzero_ps(), t1 = t0;
    for (int i = 0; i < HIDDEN; i += 32) {
        const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(r + i), mean);
        const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(r + i + 16), mean);
        t0 = _mm512_fmadd_ps(d0, d0, t0);
        t1 = _mm512_fmadd_ps(d1, d1, t1);
    }
    const float variance = _mm512_reduce_add_ps(_mm512_add_ps(t0, t1)) / HIDDEN;
    const __m512 inverse = _mm512_set1_ps(1.0f / __builtin_sqrtf(variance + EPSILON));
    __m512 low = _mm512_setzero_ps(), high = low;
    for (int i = 0; i < HIDDEN; i += 16) {
        const __m512 d = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(r + i), mean), inverse);
        const __m512 v = _mm512_fmadd_ps(d, _mm512_loadu_ps(weight + i), _mm512_loadu_ps(bias + i));
        _mm512_storeu_ps(r + i, v);
        low = _mm512_min_ps(low, v);
        high = _mm512_max_ps(high, v);
    }
    if (q) round_wide(r, HIDDEN, q, scale, zero, _mm512_reduce_min_ps(low), _mm512_reduce_max_ps(high));
}
#endif

INLINE void product_portable(const Dense *d, const uint8_t *a, int rows, int32_t *out) {
    const int n = d->n, depth = d->k;
    const int8_t *restrict weights = d->weights;
    for (int m = 0; m < rows; m++) {
        int32_t *restrict sum = out + (size_t)m * n;
        memset(sum, 0, sizeof(int32_t) * (size_t)n);
        const uint8_t *restrict row = a + (size_t)m * depth;
        for (int k = 0; k < depth; k++) {
            const int32_t value = row[k];
            const int8_t *restrict w = weights + (size_t)k * n;
#pragma omp simd
            for (int j = 0; j < n; j++) sum[j] += value * w[j];
        }
    }
}

#if HAVE_VNNI_KERNEL
/* Four rows' sums of a group of 64 columns, back to floats: (sum - zero point * the
   column's sum) * the row's scale * the column's scale + the bias. */
#define VNNI_ROW(c0, c1, c2, c3, r)                                                            \
    if (m + r < rows) {                                                                        \
        const __m512i zero = _mm512_set1_epi32(zeros[m + r]);                                  \
        const __m512 scale = _mm512_set1_ps(row_scales[m + r]);                                \
        float *o = y + (size_t)(m + r) * n + column;                                           \
        __m512i cs[4] = {c0, c1, c2, c3};                                                      \
        for (int b = 0; b < 4; b++) {                                                          \
            __m512i sum = _mm512_sub_epi32(cs[b], _mm512_mullo_epi32(zero, _mm512_loadu_si512(d->sums + column + 16 * b))); \
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(scale, _mm512_loadu_ps(d->scales + column + 16 * b))); \
            _mm512_storeu_ps(o + 16 * b, _mm512_add_ps(f, _mm512_loadu_ps(d->bias + column + 16 * b))); \
        }                                                                                      \
        float lowest, highest;                                                                 \
        if (then_gelu) gelu_wide(o, GROUP, &lowest, &highest);                                 \
    }

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
static void product_vnni(const Dense *d, const uint8_t *a, int rows, const float *row_scales, const int32_t *zeros,
                         float *y, int then_gelu) {
    /* Weights packed by groups of 64 columns, then by 4 rows of k: for each 4 k, 4
       registers of 16 columns, each column's 4 bytes side by side (vpdpbusd's operand).
       The activations have rows rounded up to BLOCK_ROWS (zero rows: not written out). */
    int steps = d->k / 4, n = d->n;
    for (int g = 0; g < n / GROUP; g++) {
        const int8_t *group = d->weights + (size_t)g * steps * 4 * GROUP;
        const int column = g * GROUP;
        for (int m = 0; m < rows; m += BLOCK_ROWS) {
            __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00;
            __m512i c10 = c00, c11 = c00, c12 = c00, c13 = c00;
            __m512i c20 = c00, c21 = c00, c22 = c00, c23 = c00;
            __m512i c30 = c00, c31 = c00, c32 = c00, c33 = c00;
            const uint8_t *a0 = a + (size_t)m * d->k, *a1 = a0 + d->k, *a2 = a1 + d->k, *a3 = a2 + d->k;
            const int8_t *w = group;
            for (int s = 0; s < steps; s++, w += 4 * GROUP) {
                __m512i w0 = _mm512_loadu_si512(w), w1 = _mm512_loadu_si512(w + 64);
                __m512i w2 = _mm512_loadu_si512(w + 128), w3 = _mm512_loadu_si512(w + 192);
                int32_t v0, v1, v2, v3;
                memcpy(&v0, a0 + 4 * s, 4);
                memcpy(&v1, a1 + 4 * s, 4);
                memcpy(&v2, a2 + 4 * s, 4);
                memcpy(&v3, a3 + 4 * s, 4);
                __m512i b = _mm512_set1_epi32(v0);
                c00 = _mm512_dpbusd_epi32(c00, b, w0);
                c01 = _mm512_dpbusd_epi32(c01, b, w1);
                c02 = _mm512_dpbusd_epi32(c02, b, w2);
                c03 = _mm512_dpbusd_epi32(c03, b, w3);
                b = _mm512_set1_epi32(v1);
                c10 = _mm512_dpbusd_epi32(c10, b, w0);
                c11 = _mm512_dpbusd_epi32(c11, b, w1);
                c12 = _mm512_dpbusd_epi32(c12, b, w2);
                c13 = _mm512_dpbusd_epi32(c13, b, w3);
                b = _mm512_set1_epi32(v2);
                c20 = _mm512_dpbusd_epi32(c20, b, w0);
                c21 = _mm512_dpbusd_epi32(c21, b, w1);
                c22 = _mm512_dpbusd_epi32(c22, b, w2);
                c23 = _mm512_dpbusd_epi32(c23, b, w3);
                b = _mm512_set1_epi32(v3);
                c30 = _mm512_dpbusd_epi32(c30, b, w0);
                c31 = _mm512_dpbusd_epi32(c31, b, w1);
                c32 = _mm512_dpbusd_epi32(c32, b, w2);
                c33 = _mm512_dpbusd_epi32(c33, b, w3);
            }
            VNNI_ROW(c00, c01, c02, c03, 0)
            VNNI_ROW(c10, c11, c12, c13, 1)
            VNNI_ROW(c20, c21, c22, c23, 2)
            VNNI_ROW(c30, c31, c32, c33, 3)
        }
    }
}
#undef VNNI_ROW

/* The AVX2 kernel: vpmaddubsw (uint8 x int8, each pair of products summed to int16,
   saturating), then vpmaddwd by ones (pairs of those summed to int32), as onnxruntime's
   MLAS does. So that no int16 sum saturates, this kernel rounds the activations to 7
   bits, 0 to 127 (AVX2_LEVELS): a pair is at most 2 * 127 * 128 = 32512, every sum exact
   (within the bounds of spec/memory.md: cosine 0.996 at least of float32 products' on
   the test's texts, against 0.999 with 8 bits). Weights packed by groups of 16 columns,
   then by 4 rows of k: two registers of 8 columns, each column's 4 bytes side by side;
   AVX2_ROWS rows of activations by 16 columns in 8 accumulators (with the ones, the
   weights and the activations, the 16 ymm registers). */

#define AVX2_STEP(c0, c1, r)                                                                    \
    {                                                                                           \
        int32_t v;                                                                              \
        memcpy(&v, a##r + 4 * s, 4);                                                            \
        const __m256i b = _mm256_set1_epi32(v);                                                 \
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_maddubs_epi16(b, w0), ones));        \
        c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_maddubs_epi16(b, w1), ones));        \
    }

#define AVX2_ROW(c0, c1, r)                                                                     \
    if (m + r < rows) {                                                                         \
        const __m256i zero = _mm256_set1_epi32(zeros[m + r]);                                   \
        const __m256 scale = _mm256_set1_ps(row_scales[m + r]);                                 \
        float *o = y + (size_t)(m + r) * n + column;                                            \
        __m256i s0 = _mm256_sub_epi32(c0, _mm256_mullo_epi32(zero, sums0));                     \
        __m256i s1 = _mm256_sub_epi32(c1, _mm256_mullo_epi32(zero, sums1));                     \
        _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(scale, scales0), bias0)); \
        _mm256_storeu_ps(o + 8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(scale, scales1), bias1)); \
    }

__attribute__((target("avx2,fma")))
static void product_avx2(const Dense *d, const uint8_t *a, int rows, const float *row_scales, const int32_t *zeros,
                         float *y) {
    const int steps = d->k / 4, n = d->n;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int g = 0; g < n / AVX2_GROUP; g++) {
        const int8_t *group = d->weights + (size_t)g * steps * 4 * AVX2_GROUP;
        const int column = g * AVX2_GROUP;
        const __m256i sums0 = _mm256_loadu_si256((const __m256i *)(d->sums + column));
        const __m256i sums1 = _mm256_loadu_si256((const __m256i *)(d->sums + column + 8));
        const __m256 scales0 = _mm256_loadu_ps(d->scales + column), scales1 = _mm256_loadu_ps(d->scales + column + 8);
        const __m256 bias0 = _mm256_loadu_ps(d->bias + column), bias1 = _mm256_loadu_ps(d->bias + column + 8);
        for (int m = 0; m < rows; m += AVX2_ROWS) {
            __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00;
            __m256i c20 = c00, c21 = c00, c30 = c00, c31 = c00;
            const uint8_t *a0 = a + (size_t)m * d->k, *a1 = a0 + d->k, *a2 = a1 + d->k, *a3 = a2 + d->k;
            const int8_t *w = group;
            for (int s = 0; s < steps; s++, w += 4 * AVX2_GROUP) {
                const __m256i w0 = _mm256_load_si256((const __m256i *)w);
                const __m256i w1 = _mm256_load_si256((const __m256i *)(w + 32));
                AVX2_STEP(c00, c01, 0)
                AVX2_STEP(c10, c11, 1)
                AVX2_STEP(c20, c21, 2)
                AVX2_STEP(c30, c31, 3)
            }
            AVX2_ROW(c00, c01, 0)
            AVX2_ROW(c10, c11, 1)
            AVX2_ROW(c20, c21, 2)
            AVX2_ROW(c30, c31, 3)
        }
    }
}
#undef AVX2_STEP

/* The AVX-VNNI kernel (Alder Lake and later, and Xeons with AVX-512 too): the AVX2
   kernel's weights and blocks, each step one vpdpbusd on ymm (uint8 x int8, four
   products summed into int32: no int16 sum, so the activations keep 8 bits). */
#define AVXVNNI_STEP(c0, c1, r)                                                                 \
    {                                                                                           \
        int32_t v;                                                                              \
        memcpy(&v, a##r + 4 * s, 4);                                                            \
        const __m256i b = _mm256_set1_epi32(v);                                                 \
        c0 = _mm256_dpbusd_avx_epi32(c0, b, w0);                                                \
        c1 = _mm256_dpbusd_avx_epi32(c1, b, w1);                                                \
    }

__attribute__((target("avx2,fma,avxvnni")))
static void product_avxvnni(const Dense *d, const uint8_t *a, int rows, const float *row_scales, const int32_t *zeros,
                            float *y) {
    const int steps = d->k / 4, n = d->n;
    for (int g = 0; g < n / AVX2_GROUP; g++) {
        const int8_t *group = d->weights + (size_t)g * steps * 4 * AVX2_GROUP;
        const int column = g * AVX2_GROUP;
        const __m256i sums0 = _mm256_loadu_si256((const __m256i *)(d->sums + column));
        const __m256i sums1 = _mm256_loadu_si256((const __m256i *)(d->sums + column + 8));
        const __m256 scales0 = _mm256_loadu_ps(d->scales + column), scales1 = _mm256_loadu_ps(d->scales + column + 8);
        const __m256 bias0 = _mm256_loadu_ps(d->bias + column), bias1 = _mm256_loadu_ps(d->bias + column + 8);
        for (int m = 0; m < rows; m += AVX2_ROWS) {
            __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00;
            __m256i c20 = c00, c21 = c00, c30 = c00, c31 = c00;
            const uint8_t *a0 = a + (size_t)m * d->k, *a1 = a0 + d->k, *a2 = a1 + d->k, *a3 = a2 + d->k;
            const int8_t *w = group;
            for (int s = 0; s < steps; s++, w += 4 * AVX2_GROUP) {
                const __m256i w0 = _mm256_load_si256((const __m256i *)w);
                const __m256i w1 = _mm256_load_si256((const __m256i *)(w + 32));
                AVXVNNI_STEP(c00, c01, 0)
                AVXVNNI_STEP(c10, c11, 1)
                AVXVNNI_STEP(c20, c21, 2)
                AVXVNNI_STEP(c30, c31, 3)
            }
            AVX2_ROW(c00, c01, 0)
            AVX2_ROW(c10, c11, 1)
            AVX2_ROW(c20, c21, 2)
            AVX2_ROW(c30, c31, 3)
        }
    }
}
#undef AVXVNNI_STEP
#undef AVX2_ROW

/* The same products by AMX tiles: 32 rows by 32 columns at a time (four int32 tiles of
   16 by 16), 64 of k a step, each weight tile 1 KB in a row (make_dense). The rows are
   padded to PADDED_ROWS. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t columns[16]; /* bytes a row */
    uint8_t rows[16];
} TileConfig;

__attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-int8")))
static void product_amx(const Dense *d, const uint8_t *a, int rows, const float *row_scales, const int32_t *zeros,
                        float *y, int then_gelu, const Quantized *next) {
    TileConfig config = {.palette = 1};
    for (int t = 0; t < 8; t++) {
        config.columns[t] = 64;
        config.rows[t] = 16;
    }
    _tile_loadconfig(&config);
    const int k = d->k, n = d->n, steps = k / 64;
    int32_t sums[32][32] __attribute__((aligned(64)));
    /* 64 rows at a time (two blocks of 32), so that each column block's weight tiles,
       loaded from L2 for the first 32 rows, are in L1 for the next 32. */
    for (int first = 0; first < rows; first += 64) {
        for (int column = 0; column < n; column += 32) {
            /* Columns column..+15 and +16..+31: their tiles, one after another in k. */
            const int8_t *b0 = d->weights + (size_t)(column / 16) * steps * 1024;
            const int8_t *b1 = b0 + (size_t)steps * 1024;
            for (int m = first; m < rows && m < first + 64; m += 32) {
                const uint8_t *a0 = a + (size_t)m * k, *a1 = a0 + (size_t)16 * k;
                _tile_zero(0);
                _tile_zero(1);
                if (rows - m > 16) {
                    _tile_zero(2);
                    _tile_zero(3);
                    for (int s = 0; s < steps; s++) {
                        /* Each load just before the first product that needs it, so that
                           loads overlap products (tiles are not renamed: a load waits for
                           the last product reading its tile). */
                        _tile_loadd(4, a0 + 64 * s, k);
                        _tile_loadd(6, b0 + (size_t)s * 1024, 64);
                        _tile_dpbusd(0, 4, 6);
                        _tile_loadd(7, b1 + (size_t)s * 1024, 64);
                        _tile_dpbusd(1, 4, 7);
                        _tile_loadd(5, a1 + 64 * s, k);
                        _tile_dpbusd(2, 5, 6);
                        _tile_dpbusd(3, 5, 7);
                    }
                    _tile_stored(2, &sums[16][0], 128);
                    _tile_stored(3, &sums[16][16], 128);
                } else {
                    /* The last rows, 16 or fewer: their tile row only (a batch's rows,
                       padded to 32, were 5% padding on the bench's memories; to 16, 2.4%). */
                    for (int s = 0; s < steps; s++) {
                        _tile_loadd(4, a0 + 64 * s, k);
                        _tile_loadd(6, b0 + (size_t)s * 1024, 64);
                        _tile_dpbusd(0, 4, 6);
                        _tile_loadd(7, b1 + (size_t)s * 1024, 64);
                        _tile_dpbusd(1, 4, 7);
                    }
                }
                _tile_stored(0, &sums[0][0], 128);
                _tile_stored(1, &sums[0][16], 128);
                const __m512i columns0 = _mm512_loadu_si512(d->sums + column);
                const __m512i columns1 = _mm512_loadu_si512(d->sums + column + 16);
                const __m512 scales0 = _mm512_loadu_ps(d->scales + column), scales1 = _mm512_loadu_ps(d->scales + column + 16);
                const __m512 bias0 = _mm512_loadu_ps(d->bias + column), bias1 = _mm512_loadu_ps(d->bias + column + 16);
                for (int r = 0; r < 32 && m + r < rows; r++) {
                    const __m512i zero = _mm512_set1_epi32(zeros[m + r]);
                    const __m512 scale = _mm512_set1_ps(row_scales[m + r]);
                    float *o = y + (size_t)(m + r) * n + column;
                    __m512i c0 = _mm512_sub_epi32(_mm512_load_si512(&sums[r][0]), _mm512_mullo_epi32(zero, columns0));
                    __m512i c1 = _mm512_sub_epi32(_mm512_load_si512(&sums[r][16]), _mm512_mullo_epi32(zero, columns1));
                    _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_cvtepi32_ps(c0), _mm512_mul_ps(scale, scales0), bias0));
                    _mm512_storeu_ps(o + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(c1), _mm512_mul_ps(scale, scales1), bias1));
                }
            }
        }
        /* GELU on these 64 rows while they are in the cache: whole rows, so that many
           vectors are in flight; each row then rounded for the next product (`next`) while it is in L1 (the
           rounding's first pass over rows gone cold was a seventh of the engine). */
        for (int r = first; r < rows && r < first + 64; r++) {
            float *row = y + (size_t)r * n;
            if (then_gelu) {
                float lowest, highest; /* the rounding's range, found by GELU */
                gelu_wide(row, n, &lowest, &highest);
                if (next) round_wide(row, n, next->q + (size_t)r * n, &next->scales[r], &next->zeros[r], lowest, highest);
            } else if (next) {
                quantize_wide(row, n, next->q + (size_t)r * n, &next->scales[r], &next->zeros[r]);
            }
        }
    }
    _tile_release();
}
#endif

typedef struct {
    Quantized wide; /* padded rows of the widest k: the input of the product being made */
    Quantized x;    /* padded rows of HIDDEN: the states, rounded as each is made */
    int32_t *sums;  /* padded rows of the widest n */
} Scratch;

/* Row `row` of `into` from x (k floats), for the kernel in use. */
INLINE void quantize(const Engine *e, const float *x, int k, const Quantized *into, int row) {
#if HAVE_VNNI_KERNEL
    if (e->kernel >= KERNEL_VNNI) {
        quantize_wide(x, k, into->q + (size_t)row * k, &into->scales[row], &into->zeros[row]);
        return;
    }
#endif
    quantize_row(x, k, e->kernel == KERNEL_AVX2 ? AVX2_LEVELS : 255.0f, into->q + (size_t)row * k, &into->scales[row],
                 &into->zeros[row]);
}

/* Row r of the states plus `add` (when given), its LayerNorm, then rounded into row
   `row` of `into` (when given), for the kernel in use. */
INLINE void add_norm(const Engine *e, float *r, const float *add, const float *weight, const float *bias,
                     const Quantized *into, int row) {
#if HAVE_VNNI_KERNEL
    if (e->kernel >= KERNEL_VNNI) {
        if (into)
            norm_wide(r, add, weight, bias, into->q + (size_t)row * HIDDEN, &into->scales[row], &into->zeros[row]);
        else
            norm_wide(r, add, weight, bias, NULL, NULL, NULL);
        return;
    }
#endif
    if (add)
        for (int i = 0; i < HIDDEN; i++) r[i] += add[i];
    layer_norm(r, weight, bias);
    if (into) quantize(e, r, HIDDEN, into, row);
}

/* a (rows rounded, padded with whatever to PADDED_ROWS: rows beyond `rows` are multiplied
   but not written out) times d, into y (rows of d->n floats): int8 products, rescaled,
   the bias added, GELU when asked; y's rows rounded into `next` too, when given (the
   next product's input). */
INLINE void product(const Engine *e, const Dense *d, const Quantized *a, int rows, float *y, int32_t *sums,
                    int then_gelu, const Quantized *next) {
    const int n = d->n;
#if HAVE_VNNI_KERNEL
    if (e->kernel == KERNEL_AMX) {
        product_amx(d, a->q, rows, a->scales, a->zeros, y, then_gelu, next);
        return;
    }
    if (e->kernel == KERNEL_VNNI) {
        product_vnni(d, a->q, rows, a->scales, a->zeros, y, then_gelu);
    } else if (e->kernel == KERNEL_AVX2 || e->kernel == KERNEL_AVXVNNI) {
        if (e->kernel == KERNEL_AVX2)
            product_avx2(d, a->q, rows, a->scales, a->zeros, y);
        else
            product_avxvnni(d, a->q, rows, a->scales, a->zeros, y);
        if (then_gelu) gelu(y, rows * n);
    } else
#endif
    {
        product_portable(d, a->q, rows, sums);
        const int32_t *restrict columns = d->sums;
        const float *restrict scales = d->scales, *restrict bias = d->bias;
        for (int m = 0; m < rows; m++) {
            const int32_t *restrict sum = sums + (size_t)m * n;
            float *restrict out = y + (size_t)m * n;
            const float scale = a->scales[m];
            const int32_t zero = a->zeros[m];
#pragma omp simd
            for (int j = 0; j < n; j++) out[j] = (float)(sum[j] - zero * columns[j]) * scale * scales[j] + bias[j];
        }
        if (then_gelu) gelu(y, rows * n);
    }
    if (next)
        for (int m = 0; m < rows; m++) quantize(e, y + (size_t)m * n, n, next, m);
}

/* ---- the encoder ------------------------------------------------------------------- */

/* One text's attention: qkv rows of 3 * HIDDEN (query, key, value), into context rows.
   `keys`: room for a head's keys transposed (HEAD_SIZE rows of the length rounded up to
   LANES, zero beyond it), so that the scores are made LANES keys at a time in fixed-size
   loops the compiler turns into whole vectors (a text is about 20 tokens: a loop of its
   length left most of its work to the scalar remainder); two Half vectors of 8 floats,
   one ymm each (a 16-float vector compiled for AVX2 went through the stack). */
#define LANES 16
typedef float Half __attribute__((vector_size(LANES / 2 * sizeof(float))));
INLINE void attend(const float *qkv, int length, float *context, float *scores, float *keys) {
    const float scale = 0.17677669529663687f; /* 1 / sqrt(HEAD_SIZE) */
    const int padded = (length + LANES - 1) / LANES * LANES;
    for (int h = 0; h < HEADS; h++) {
        for (int t = 0; t < HEAD_SIZE; t++) {
            float *row = keys + (size_t)t * padded;
            for (int j = 0; j < length; j++) row[j] = qkv[(size_t)j * 3 * HIDDEN + HIDDEN + h * HEAD_SIZE + t] * scale;
            for (int j = length; j < padded; j++) row[j] = 0;
        }
        for (int i = 0; i < length; i++) {
            const float *q = qkv + (size_t)i * 3 * HIDDEN + h * HEAD_SIZE;
            for (int block = 0; block < padded; block += LANES) {
                Half low = {0}, high = {0};
                for (int t = 0; t < HEAD_SIZE; t++) {
                    Half k0, k1;
                    memcpy(&k0, keys + (size_t)t * padded + block, sizeof k0);
                    memcpy(&k1, keys + (size_t)t * padded + block + LANES / 2, sizeof k1);
                    low += q[t] * k0;
                    high += q[t] * k1;
                }
                memcpy(scores + block, &low, sizeof low);
                memcpy(scores + block + LANES / 2, &high, sizeof high);
                for (int l = 0; l < LANES; l++) scores[block + l] = block + l < length ? scores[block + l] : -1e30f;
            }
            float top = -3.4e38f;
#pragma omp simd reduction(max : top)
            for (int j = 0; j < padded; j++) top = scores[j] > top ? scores[j] : top;
            float total = 0;
#pragma omp simd reduction(+ : total)
            for (int j = 0; j < padded; j++) {
                scores[j] = j < length ? exp_approx(scores[j] - top) : 0.0f;
                total += scores[j];
            }
            float mixed[HEAD_SIZE] = {0};
            for (int j = 0; j < length; j++) {
                const float *v = qkv + (size_t)j * 3 * HIDDEN + 2 * HIDDEN + h * HEAD_SIZE;
                const float p = scores[j];
                for (int t = 0; t < HEAD_SIZE; t++) mixed[t] += p * v[t];
            }
            float inverse = 1.0f / total, *out = context + (size_t)i * HIDDEN + h * HEAD_SIZE;
            for (int t = 0; t < HEAD_SIZE; t++) out[t] = mixed[t] * inverse;
        }
    }
}

#if HAVE_VNNI_KERNEL
/* exp_approx on 16 floats: the same reduction and series, 2^n put on by vscalefps. */
__attribute__((target("avx512f,fma"))) static inline __m512 exp_wide(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    const __m512 r2 = _mm512_mul_ps(r, r), one = _mm512_set1_ps(1.0f);
    const __m512 low = _mm512_add_ps(one, r);
    const __m512 middle = _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 6), _mm512_set1_ps(0.5f));
    const __m512 high = _mm512_fmadd_ps(r2, _mm512_set1_ps(1.0f / 720),
                                        _mm512_fmadd_ps(r, _mm512_set1_ps(1.0f / 120), _mm512_set1_ps(1.0f / 24)));
    const __m512 p = _mm512_fmadd_ps(_mm512_mul_ps(r2, r2), high, _mm512_fmadd_ps(r2, middle, low));
    return _mm512_scalef_ps(p, n);
}

/* attend for the AVX-512 kernels: QUERIES queries of a head at once, each of the keys'
   vectors (16 keys) loaded once for all of them, their weighted values the same; the
   scores of a query in scores + its place * the padded length. */
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) static void attend_wide(const float *qkv, int length,
                                                                               float *context, float *scores,
                                                                               float *keys) {
    const float scale = 0.17677669529663687f; /* 1 / sqrt(HEAD_SIZE) */
    const int padded = (length + LANES - 1) / LANES * LANES, stride = 3 * HIDDEN;
    const __m512 hidden = _mm512_set1_ps(-1e30f);
    for (int h = 0; h < HEADS; h++) {
        for (int t = 0; t < HEAD_SIZE; t++) {
            float *row = keys + (size_t)t * padded;
            for (int j = 0; j < length; j++) row[j] = qkv[(size_t)j * stride + HIDDEN + h * HEAD_SIZE + t] * scale;
            for (int j = length; j < padded; j++) row[j] = 0;
        }
        for (int i = 0; i < length; i += QUERIES) {
            const int count = length - i < QUERIES ? length - i : QUERIES;
            const float *q[QUERIES];
            for (int r = 0; r < QUERIES; r++) /* a missing query repeats the last: made, not kept */
                q[r] = qkv + (size_t)(i + (r < count ? r : count - 1)) * stride + h * HEAD_SIZE;
            for (int block = 0; block < padded; block += LANES) {
                __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
                for (int t = 0; t < HEAD_SIZE; t++) {
                    const __m512 k = _mm512_loadu_ps(keys + (size_t)t * padded + block);
                    s0 = _mm512_fmadd_ps(_mm512_set1_ps(q[0][t]), k, s0);
                    s1 = _mm512_fmadd_ps(_mm512_set1_ps(q[1][t]), k, s1);
                    s2 = _mm512_fmadd_ps(_mm512_set1_ps(q[2][t]), k, s2);
                    s3 = _mm512_fmadd_ps(_mm512_set1_ps(q[3][t]), k, s3);
                }
                const int left = length - block;
                const __mmask16 valid = left >= LANES ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
                _mm512_storeu_ps(scores + block, _mm512_mask_blend_ps(valid, hidden, s0));
                _mm512_storeu_ps(scores + padded + block, _mm512_mask_blend_ps(valid, hidden, s1));
                _mm512_storeu_ps(scores + 2 * padded + block, _mm512_mask_blend_ps(valid, hidden, s2));
                _mm512_storeu_ps(scores + 3 * padded + block, _mm512_mask_blend_ps(valid, hidden, s3));
            }
            float inverse[QUERIES];
            for (int r = 0; r < count; r++) {
                float *row = scores + (size_t)r * padded;
                __m512 top = hidden;
                for (int block = 0; block < padded; block += LANES) top = _mm512_max_ps(top, _mm512_loadu_ps(row + block));
                const __m512 highest = _mm512_set1_ps(_mm512_reduce_max_ps(top));
                __m512 total = _mm512_setzero_ps();
                for (int block = 0; block < padded; block += LANES) {
                    const int left = length - block;
                    const __mmask16 valid = left >= LANES ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
                    const __m512 e = _mm512_maskz_mov_ps(valid, exp_wide(_mm512_sub_ps(_mm512_loadu_ps(row + block), highest)));
                    _mm512_storeu_ps(row + block, e);
                    total = _mm512_add_ps(total, e);
                }
                inverse[r] = 1.0f / _mm512_reduce_add_ps(total);
            }
            __m512 m00 = _mm512_setzero_ps(), m01 = m00, m10 = m00, m11 = m00, m20 = m00, m21 = m00, m30 = m00,
                   m31 = m00;
            for (int j = 0; j < length; j++) {
                const float *v = qkv + (size_t)j * stride + 2 * HIDDEN + h * HEAD_SIZE;
                const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
                __m512 p = _mm512_set1_ps(scores[j]);
                m00 = _mm512_fmadd_ps(p, v0, m00);
                m01 = _mm512_fmadd_ps(p, v1, m01);
                p = _mm512_set1_ps(scores[padded + j]);
                m10 = _mm512_fmadd_ps(p, v0, m10);
                m11 = _mm512_fmadd_ps(p, v1, m11);
                p = _mm512_set1_ps(scores[2 * padded + j]);
                m20 = _mm512_fmadd_ps(p, v0, m20);
                m21 = _mm512_fmadd_ps(p, v1, m21);
                p = _mm512_set1_ps(scores[3 * padded + j]);
                m30 = _mm512_fmadd_ps(p, v0, m30);
                m31 = _mm512_fmadd_ps(p, v1, m31);
            }
            const __m512 mixed[QUERIES][2] = {{m00, m01}, {m10, m11}, {m20, m21}, {m30, m31}};
            for (int r = 0; r < count; r++) {
                float *out = context + (size_t)(i + r) * HIDDEN + h * HEAD_SIZE;
                const __m512 by = _mm512_set1_ps(inverse[r]);
                _mm512_storeu_ps(out, _mm512_mul_ps(mixed[r][0], by));
                _mm512_storeu_ps(out + 16, _mm512_mul_ps(mixed[r][1], by));
            }
        }
    }
}

#endif

typedef struct {
    float *x;       /* rows of HIDDEN: the states */
    float *wide;    /* rows of INTERMEDIATE (or 3 * HIDDEN: query, key and value) */
    float *context; /* rows of HIDDEN */
    float *scores;  /* QUERIES rows of the longest text's length */
    float *keys;    /* HEAD_SIZE rows of the longest text's length */
    Scratch s;
} Work;

/* The model on `rows` tokens of `texts` texts (see minilm_embed); inlined into one
   function a kernel (forward_*), each compiled for its instruction set. */
INLINE void forward(const Engine *e, const int32_t *ids, const int32_t *lengths, int texts, int rows, Work *w,
                    float *out) {
    float *x = w->x, *wide = w->wide, *context = w->context;
    /* Embeddings. */
    for (int t = 0, row = 0; t < texts; t++) {
        for (int p = 0; p < lengths[t]; p++, row++) {
            int id = ids[row];
            const int8_t *word = e->words + (size_t)id * HIDDEN;
            float scale = e->word_scales[id];
            const float *position = e->position_rows + (size_t)p * HIDDEN;
            float *r = x + (size_t)row * HIDDEN;
            for (int i = 0; i < HIDDEN; i++) r[i] = (float)word[i] * scale + position[i];
            add_norm(e, r, NULL, e->norm_weight, e->norm_bias, &w->s.x, row);
        }
    }
    for (int l = 0; l < e->layers; l++) {
        const Layer *layer = &e->layer[l];
        product(e, &layer->qkv, &w->s.x, rows, wide, w->s.sums, 0, NULL); /* rows of 3 * HIDDEN */
        /* Each text's attention, its rows then rounded for the output product while they
           are in the cache (a pass over all rows after all texts found them gone cold). */
        for (int t = 0, row = 0; t < texts; row += lengths[t], t++) {
#if HAVE_VNNI_KERNEL
            if (e->kernel >= KERNEL_VNNI)
                attend_wide(wide + (size_t)row * 3 * HIDDEN, lengths[t], context + (size_t)row * HIDDEN, w->scores,
                            w->keys);
            else
#endif
                attend(wide + (size_t)row * 3 * HIDDEN, lengths[t], context + (size_t)row * HIDDEN, w->scores, w->keys);
            for (int m = row; m < row + lengths[t]; m++) quantize(e, context + (size_t)m * HIDDEN, HIDDEN, &w->s.wide, m);
        }
        product(e, &layer->attention_out, &w->s.wide, rows, wide, w->s.sums, 0, NULL);
        for (int m = 0; m < rows; m++) {
            float *r = x + (size_t)m * HIDDEN;
            add_norm(e, r, wide + (size_t)m * HIDDEN, layer->norm1_weight, layer->norm1_bias, &w->s.x, m);
        }
        /* The feed-forward part, FEED_ROWS tokens at a time: their intermediate rows
           (6 KB each) stay in the cache between the product, GELU and the next product. */
        for (int first = 0; first < rows; first += FEED_ROWS) {
            const int count = rows - first < FEED_ROWS ? rows - first : FEED_ROWS;
            const Quantized part = {w->s.x.q + (size_t)first * HIDDEN, w->s.x.scales + first, w->s.x.zeros + first};
            product(e, &layer->intermediate, &part, count, wide, w->s.sums, 1, &w->s.wide);
            product(e, &layer->output, &w->s.wide, count, context + (size_t)first * HIDDEN, w->s.sums, 0, NULL);
        }
        for (int m = 0; m < rows; m++) {
            float *r = x + (size_t)m * HIDDEN;
            /* Rounded for the next layer's input, when there is one. */
            add_norm(e, r, context + (size_t)m * HIDDEN, layer->norm2_weight, layer->norm2_bias,
                     l + 1 < e->layers ? &w->s.x : NULL, m);
        }
    }
    /* The mean of each text's token states, unit length. */
    for (int t = 0, row = 0; t < texts; row += lengths[t], t++) {
        float *o = out + (size_t)t * HIDDEN;
        memset(o, 0, sizeof(float) * HIDDEN);
        for (int p = 0; p < lengths[t]; p++) {
            const float *r = x + (size_t)(row + p) * HIDDEN;
            for (int i = 0; i < HIDDEN; i++) o[i] += r[i];
        }
        float norm = 0;
#pragma omp simd reduction(+ : norm)
        for (int i = 0; i < HIDDEN; i++) norm += o[i] * o[i];
        norm = __builtin_sqrtf(norm);
        float inverse = 1.0f / (norm > 1e-12f ? norm : 1e-12f);
        for (int i = 0; i < HIDDEN; i++) o[i] *= inverse;
    }
}

static void forward_portable(const Engine *e, const int32_t *ids, const int32_t *lengths, int texts, int rows,
                             Work *w, float *out) {
    forward(e, ids, lengths, texts, rows, w, out);
}

#if HAVE_VNNI_KERNEL
__attribute__((target("avx2,fma"))) static void forward_avx2(const Engine *e, const int32_t *ids,
                                                             const int32_t *lengths, int texts, int rows, Work *w,
                                                             float *out) {
    forward(e, ids, lengths, texts, rows, w, out);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma"))) static void forward_vnni(
    const Engine *e, const int32_t *ids, const int32_t *lengths, int texts, int rows, Work *w, float *out) {
    forward(e, ids, lengths, texts, rows, w, out);
}
#endif

/* Embed `texts` texts whose token ids are `ids`, `lengths[i]` each, one after another
   (each at most the model's positions), into `out`: texts rows of HIDDEN, unit length.
   0 when done; -1 when memory ran out; -2 for an id or length out of range. */
int minilm_embed(const Engine *e, const int32_t *ids, const int32_t *lengths, int texts, float *out) {
    int64_t total = 0;
    int longest = 0;
    for (int t = 0; t < texts; t++) {
        if (lengths[t] < 1 || lengths[t] > e->positions) return -2;
        total += lengths[t];
        longest = lengths[t] > longest ? lengths[t] : longest;
    }
    for (int64_t i = 0; i < total; i++)
        if (ids[i] < 0 || ids[i] >= e->vocabulary) return -2;
    if (total == 0) return 0;
    if (total > (1 << 20)) return -1; /* 1 GB of scratch memory: the caller sends less */
    int rows = (int)total, padded = (rows + PADDED_ROWS - 1) / PADDED_ROWS * PADDED_ROWS;
    Work w = {
        .x = malloc(sizeof(float) * (size_t)rows * HIDDEN),
        .wide = malloc(sizeof(float) * (size_t)rows * INTERMEDIATE),
        .context = malloc(sizeof(float) * (size_t)rows * HIDDEN),
        .scores = malloc(sizeof(float) * (size_t)(longest + LANES) * QUERIES),
        .keys = malloc(sizeof(float) * (size_t)(longest + LANES) * HEAD_SIZE),
        /* Rounded rows padded with zeros to PADDED_ROWS (the AMX kernel reads them). */
        .s =
            {
                .wide = {calloc((size_t)padded, INTERMEDIATE), malloc(sizeof(float) * (size_t)padded),
                         malloc(sizeof(int32_t) * (size_t)padded)},
                .x = {calloc((size_t)padded, HIDDEN), malloc(sizeof(float) * (size_t)padded),
                      malloc(sizeof(int32_t) * (size_t)padded)},
                .sums = malloc(sizeof(int32_t) * (size_t)padded * INTERMEDIATE),
            },
    };
    int status = 0;
    if (!w.x || !w.wide || !w.context || !w.scores || !w.keys || !w.s.wide.q || !w.s.wide.scales ||
        !w.s.wide.zeros || !w.s.x.q || !w.s.x.scales || !w.s.x.zeros || !w.s.sums) {
        status = -1;
    } else {
#if HAVE_VNNI_KERNEL
        if (e->kernel >= KERNEL_VNNI)
            forward_vnni(e, ids, lengths, texts, rows, &w, out);
        else if (e->kernel == KERNEL_AVX2 || e->kernel == KERNEL_AVXVNNI)
            forward_avx2(e, ids, lengths, texts, rows, &w, out);
        else
#endif
            forward_portable(e, ids, lengths, texts, rows, &w, out);
    }
    free(w.x);
    free(w.wide);
    free(w.context);
    free(w.scores);
    free(w.keys);
    free(w.s.wide.q);
    free(w.s.wide.scales);
    free(w.s.wide.zeros);
    free(w.s.x.q);
    free(w.s.x.scales);
    free(w.s.x.zeros);
    free(w.s.sums);
    return status;
}

/* ---- loading ----------------------------------------------------------------------- */

/* Whether the CPU has AMX's int8 tiles and the kernel lets this process use them (Linux
   asks each process to request their state first). */
static int amx_usable(void) {
#if HAVE_VNNI_KERNEL && defined(SYS_arch_prctl)
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
    if (!(edx & (1u << 24)) || !(edx & (1u << 25))) return 0; /* AMX-TILE, AMX-INT8 */
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}

/* Whether this CPU (and, for AMX, the operating system) runs `kernel`. */
static int kernel_runs(int kernel) {
#if HAVE_VNNI_KERNEL
    __builtin_cpu_init();
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const int avx512 = avx2 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl");
    switch (kernel) {
    case KERNEL_AMX: return avx512 && amx_usable();
    case KERNEL_VNNI: return avx512;
    case KERNEL_AVXVNNI: return avx2 && __builtin_cpu_supports("avxvnni");
    case KERNEL_AVX2: return avx2;
    default: break;
    }
#endif
    return kernel == KERNEL_PORTABLE;
}

/* The best kernel this CPU runs (the fastest first: AMX, AVX-512 VNNI, AVX-VNNI, AVX2). */
static int best_kernel(void) {
    for (int kernel = KERNEL_AMX; kernel > KERNEL_PORTABLE; kernel--)
        if (kernel_runs(kernel)) return kernel;
    return KERNEL_PORTABLE;
}

/* The kernel in use: "amx", "avx512vnni", "avxvnni", "avx2" or "portable". */
const char *minilm_kernel(const Engine *e) { return KERNELS[e->kernel]; }

static void *copy_of(const void *from, size_t size) {
    void *to = malloc(size ? size : 1);
    if (to) memcpy(to, from, size);
    return to;
}

/* Weights of one or more [k, n] products side by side (n = the sum of theirs), packed for
   the kernel; the scales, biases and column sums with them. */
static int make_dense(const Engine *e, Dense *d, int k, int parts, const int8_t *const *weights, const int *widths,
                      const float *const *scales, const float *const *biases) {
    int n = 0;
    for (int p = 0; p < parts; p++) n += widths[p];
    d->k = k;
    d->n = n;
    d->weights = aligned_alloc(64, (size_t)k * n);
    d->scales = malloc(sizeof(float) * n);
    d->bias = malloc(sizeof(float) * n);
    d->sums = calloc((size_t)n, sizeof(int32_t));
    if (!d->weights || !d->scales || !d->bias || !d->sums) return -1;
    for (int p = 0, column = 0; p < parts; column += widths[p], p++) {
        memcpy(d->scales + column, scales[p], sizeof(float) * widths[p]);
        memcpy(d->bias + column, biases[p], sizeof(float) * widths[p]);
        for (int r = 0; r < k; r++) {
            for (int c = 0; c < widths[p]; c++) {
                int8_t value = weights[p][(size_t)r * widths[p] + c];
                int j = column + c;
                d->sums[j] += value;
                size_t place;
                if (e->kernel == KERNEL_AMX) {
                    /* Tiles of 64 k by 16 columns, each 1 KB in a row: 16 rows of 4 k
                       by 16 columns, each column's 4 bytes side by side. */
                    int block = j / 16, lane = j % 16, step = r / 64, quad = r % 64 / 4;
                    place = (((size_t)block * (k / 64) + step) * 16 + quad) * 64 + lane * 4 + r % 4;
                } else if (e->kernel == KERNEL_VNNI) {
                    int group = j / GROUP, block = j % GROUP / 16, lane = j % 16;
                    place = (((size_t)group * (k / 4) + r / 4) * 4 + block) * 64 + lane * 4 + r % 4;
                } else if (e->kernel == KERNEL_AVX2 || e->kernel == KERNEL_AVXVNNI) {
                    int group = j / AVX2_GROUP, block = j % AVX2_GROUP / 8, lane = j % 8;
                    place = (((size_t)group * (k / 4) + r / 4) * 2 + block) * 32 + lane * 4 + r % 4;
                } else {
                    place = (size_t)r * n + j;
                }
                d->weights[place] = value;
            }
        }
    }
    return 0;
}

static void free_dense(Dense *d) {
    free(d->weights);
    free(d->scales);
    free(d->bias);
    free(d->sums);
}

void minilm_close(Engine *e) {
    if (!e) return;
    if (e->layer) {
        for (int l = 0; l < e->layers; l++) {
            Layer *layer = &e->layer[l];
            free_dense(&layer->qkv);
            free_dense(&layer->attention_out);
            free_dense(&layer->intermediate);
            free_dense(&layer->output);
            free(layer->norm1_weight);
            free(layer->norm1_bias);
            free(layer->norm2_weight);
            free(layer->norm2_bias);
        }
        free(e->layer);
    }
    free(e->words);
    free(e->word_scales);
    free(e->position_rows);
    free(e->norm_weight);
    free(e->norm_bias);
    free(e);
}

enum {
    PART_WORDS, PART_WORD_SCALES, PART_POSITIONS, PART_POSITION_SCALES, PART_TYPE, PART_NORM_WEIGHT,
    PART_NORM_BIAS, PART_LAYERS
};
/* A layer's parts, after PART_LAYERS: for each of query, key, value, attention output,
   intermediate and output: weight, scales, bias; then the two LayerNorms' weight and bias. */
#define LAYER_PARTS 22

/* The model from its tensors, in the order above: `parts` pointers, `sizes` their bytes
   (checked against the shapes: HIDDEN wide, INTERMEDIATE in the middle, `vocabulary`
   words and `positions` positions). `kernel`: the name of the kernel to use, when the
   CPU runs it ("portable" runs anywhere), or NULL for the best. NULL when a size is wrong (the reason in `error`) or memory ran out. */
Engine *minilm_open(const void *const *parts, const int64_t *sizes, int count, int vocabulary, int positions,
                    const char *kernel, char *error, int error_size) {
    Engine *e = calloc(1, sizeof(Engine));
    if (!e) return NULL;
    int layers = (count - PART_LAYERS) / LAYER_PARTS;
#define FAIL(...)                                                               \
    do {                                                                        \
        if (error_size > 0) snprintf(error, (size_t)error_size, __VA_ARGS__);   \
        minilm_close(e);                                                        \
        return NULL;                                                            \
    } while (0)
    if (count < PART_LAYERS + LAYER_PARTS || (count - PART_LAYERS) % LAYER_PARTS)
        FAIL("%d tensors: not the embeddings' 7 and %d a layer", count, LAYER_PARTS);
    e->kernel = best_kernel();
    if (kernel) {
        int asked = -1;
        for (int k = 0; k < (int)(sizeof KERNELS / sizeof *KERNELS); k++)
            if (!strcmp(kernel, KERNELS[k])) asked = k;
        if (asked < 0 || !kernel_runs(asked)) FAIL("no kernel %s on this machine (the best: %s)", kernel, KERNELS[e->kernel]);
        e->kernel = asked;
    }
    e->layers = layers;
    e->vocabulary = vocabulary;
    e->positions = positions;
    int64_t expected[PART_LAYERS] = {
        (int64_t)vocabulary * HIDDEN, 4 * (int64_t)vocabulary, (int64_t)positions * HIDDEN, 4 * (int64_t)positions,
        4 * HIDDEN, 4 * HIDDEN, 4 * HIDDEN};
    for (int p = 0; p < PART_LAYERS; p++)
        if (sizes[p] != expected[p]) FAIL("tensor %d: %lld bytes, not %lld", p, (long long)sizes[p], (long long)expected[p]);
    static const int shapes[6][2] = {{HIDDEN, HIDDEN}, {HIDDEN, HIDDEN}, {HIDDEN, HIDDEN},
                                     {HIDDEN, HIDDEN}, {HIDDEN, INTERMEDIATE}, {INTERMEDIATE, HIDDEN}};
    for (int l = 0; l < layers; l++) {
        const int64_t *size = sizes + PART_LAYERS + l * LAYER_PARTS;
        for (int d = 0; d < 6; d++) {
            int64_t k = shapes[d][0], n = shapes[d][1];
            if (size[3 * d] != k * n || size[3 * d + 1] != 4 * n || size[3 * d + 2] != 4 * n)
                FAIL("layer %d, product %d: sizes %lld, %lld, %lld for a [%lld, %lld] weight", l, d,
                     (long long)size[3 * d], (long long)size[3 * d + 1], (long long)size[3 * d + 2], (long long)k,
                     (long long)n);
        }
        for (int p = 18; p < LAYER_PARTS; p++)
            if (size[p] != 4 * HIDDEN) FAIL("layer %d, LayerNorm tensor %d: %lld bytes", l, p - 18, (long long)size[p]);
    }
    e->words = copy_of(parts[PART_WORDS], (size_t)sizes[PART_WORDS]);
    e->word_scales = copy_of(parts[PART_WORD_SCALES], (size_t)sizes[PART_WORD_SCALES]);
    e->norm_weight = copy_of(parts[PART_NORM_WEIGHT], 4 * HIDDEN);
    e->norm_bias = copy_of(parts[PART_NORM_BIAS], 4 * HIDDEN);
    e->position_rows = malloc(sizeof(float) * (size_t)positions * HIDDEN);
    e->layer = calloc((size_t)layers, sizeof(Layer));
    if (!e->words || !e->word_scales || !e->norm_weight || !e->norm_bias || !e->position_rows || !e->layer)
        FAIL("out of memory");
    const int8_t *position_q = parts[PART_POSITIONS];
    const float *position_scales = parts[PART_POSITION_SCALES], *type = parts[PART_TYPE];
    for (int p = 0; p < positions; p++)
        for (int i = 0; i < HIDDEN; i++)
            e->position_rows[(size_t)p * HIDDEN + i] =
                (float)position_q[(size_t)p * HIDDEN + i] * position_scales[p] + type[i];
    for (int l = 0; l < layers; l++) {
        const void *const *part = parts + PART_LAYERS + l * LAYER_PARTS;
        Layer *layer = &e->layer[l];
        const int8_t *qkv_weights[3] = {part[0], part[3], part[6]};
        const float *qkv_scales[3] = {part[1], part[4], part[7]}, *qkv_biases[3] = {part[2], part[5], part[8]};
        int widths[3] = {HIDDEN, HIDDEN, HIDDEN};
        int failed = make_dense(e, &layer->qkv, HIDDEN, 3, qkv_weights, widths, qkv_scales, qkv_biases);
        for (int d = 3; d < 6 && !failed; d++) {
            Dense *target = d == 3 ? &layer->attention_out : d == 4 ? &layer->intermediate : &layer->output;
            const int8_t *w[1] = {part[3 * d]};
            const float *sc[1] = {part[3 * d + 1]}, *b[1] = {part[3 * d + 2]};
            int width[1] = {shapes[d][1]};
            failed = make_dense(e, target, shapes[d][0], 1, w, width, sc, b);
        }
        layer->norm1_weight = copy_of(part[18], 4 * HIDDEN);
        layer->norm1_bias = copy_of(part[19], 4 * HIDDEN);
        layer->norm2_weight = copy_of(part[20], 4 * HIDDEN);
        layer->norm2_bias = copy_of(part[21], 4 * HIDDEN);
        if (failed || !layer->norm1_weight || !layer->norm1_bias || !layer->norm2_weight || !layer->norm2_bias)
            FAIL("out of memory");
    }
#undef FAIL
    return e;
}
