/* The vpdpbusd ceiling of one core, for docs/BENCHMARKS.md: the W4A8 4 x 4
 * register tile's inner loop (4 packed rows unpacked by mask and shift, 4
 * activation rows, 32 vpdpbusd per 64 packed bytes) on L1-resident data, and
 * the same 16 accumulators fed by plain loads.
 *
 * Then the decode (M = 1) loops alone at SmolLM2's and MiniLM's shapes, the
 * weights hot in L2, beside a plain read of the same bytes (issue 21's L2
 * probe): W4A8 per channel as the AVX-512 VNNI tier's 16 x 1 tile runs it
 * (per 64 packed bytes: one load, mask, shift, mask, two vpdpbusd into a
 * low and a high accumulator; rows one after another, K read in whole
 * blocks of 128 on into the next row), and W8A8 (per 64 bytes: one load,
 * the sign moved onto the weights, one vpdpbusd). No frame, no scales, no
 * activation quantization: what a call at that shape could reach. Not part
 * of the build:
 *
 *   gcc -O3 -march=native tools/vnni_ceiling.c -o /tmp/vnni_ceiling && /tmp/vnni_ceiling
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((aligned(64))) static uint8_t W[4][2048];
__attribute__((aligned(64))) static int8_t X[4][4096];

static int8_t XD[4096 + 128] __attribute__((aligned(64)));
static volatile int decode_sink;

/* W4A8 per channel, M = 1: n rows of k / 2 packed bytes, ceil(k / 128)
 * blocks a row (the tail block reads on into the next row, as the tier's
 * padded reach does; the buffer has a block to spare after the last row). */
static void w4a8_decode(const uint8_t *w, int n, int k) {
    const __m512i mask = _mm512_set1_epi8(15);
    int blocks = (k + 127) / 128, stride = k / 2, out = 0;
    for (int r = 0; r < n; r++) {
        const uint8_t *p = w + (size_t)r * stride;
        __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
        for (int b = 0; b < blocks; b++) {
            __m512i v = _mm512_loadu_si512(p + 64 * b);
            lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v, mask), _mm512_load_si512(XD + 128 * b));
            hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(v, 4), mask),
                                     _mm512_load_si512(XD + 128 * b + 64));
        }
        out += _mm512_reduce_add_epi32(_mm512_add_epi32(lo, hi));
    }
    decode_sink = out;
}

/* W8A8, M = 1: n rows of k bytes, 64 a load (k a multiple of 64 here),
 * |x| against w with x's sign, as the tier's decode tile. */
static void w8a8_decode(const uint8_t *w, int n, int k) {
    int out = 0;
    for (int r = 0; r < n; r++) {
        const uint8_t *p = w + (size_t)r * k;
        __m512i acc = _mm512_setzero_si512();
        for (int c = 0; c < k; c += 64) {
            __m512i x = _mm512_load_si512(XD + c);
            __mmask64 neg = _mm512_movepi8_mask(x);
            __m512i v = _mm512_loadu_si512(p + c);
            acc = _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(x), _mm512_mask_sub_epi8(v, neg, _mm512_setzero_si512(), v));
        }
        out += _mm512_reduce_add_epi32(acc);
    }
    decode_sink = out;
}

/* A plain read of `bytes`, four accumulators (the probe's loop). */
static void read_only(const uint8_t *w, size_t bytes) {
    __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (size_t i = 0; i + 256 <= bytes; i += 256)
        for (int j = 0; j < 4; j++) a[j] = _mm512_add_epi32(a[j], _mm512_loadu_si512(w + i + 64 * j));
    decode_sink = _mm512_reduce_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a[0], a[1]), _mm512_add_epi32(a[2], a[3])));
}

/* The fastest of 7 runs of `calls` calls, in µs a call. */
#define BEST_US(call)                                            \
    ({                                                           \
        double best = 1e30;                                      \
        for (int run = 0; run < 7; run++) {                      \
            double t0 = now();                                   \
            for (int c = 0; c < calls; c++) call;                \
            double us = (now() - t0) / calls * 1e6;              \
            best = us < best ? us : best;                        \
        }                                                        \
        best;                                                    \
    })

static void decode_loops(void) {
    static const int shapes[][2] = {{192, 576}, {384, 384}, {576, 576}, {1536, 384}, {1536, 576}, {576, 1536}};
    for (int i = 0; i < 4096 + 128; i++) XD[i] = (int8_t)((i * 5) % 200 - 100);
    printf("decode loops, hot, one thread: µs a call (GB/s of weights; %% of a plain read of the same bytes)\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], k = shapes[s][1];
        size_t b4 = (size_t)n * k / 2, b8 = (size_t)n * k;
        uint8_t *w = aligned_alloc(64, b8 + 256);
        for (size_t i = 0; i < b8 + 256; i++) w[i] = (uint8_t)(i * 13 + 7);
        int calls = (int)(2e8 / b8) + 1;
        double r4 = BEST_US(read_only(w, b4)), d4 = BEST_US(w4a8_decode(w, n, k));
        double r8 = BEST_US(read_only(w, b8)), d8 = BEST_US(w8a8_decode(w, n, k));
        printf("%5d x %-5d W4A8 %6.2f us (%5.1f GB/s, %3.0f %% of the read's %5.1f)   W8A8 %6.2f us (%5.1f GB/s, %3.0f %% of %5.1f)\n",
               n, k, d4, b4 / d4 / 1e3, 100 * r4 / d4, b4 / r4 / 1e3, d8, b8 / d8 / 1e3, 100 * r8 / d8, b8 / r8 / 1e3);
        free(w);
    }
}

int main(void) {
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 2048; i++) W[r][i] = (uint8_t)(i * 7 + r);
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < 4096; i++) X[r][i] = (int8_t)((i * 3 + r) % 100 - 50);
    const __m512i mask = _mm512_set1_epi8(15);
    const long reps = 200000;
    int sink = 0;
    double t0 = now();
    for (long rep = 0; rep < reps; rep++) {
        __m512i acc[4][4];
        for (int i = 0; i < 4; i++)
            for (int r = 0; r < 4; r++) acc[i][r] = _mm512_setzero_si512();
        for (int blk = 0; blk < 32; blk++) {
            __m512i lo[4], hi[4];
            for (int r = 0; r < 4; r++) {
                __m512i b = _mm512_load_si512(&W[r][blk * 64]);
                lo[r] = _mm512_and_si512(b, mask);
                hi[r] = _mm512_and_si512(_mm512_srli_epi16(b, 4), mask);
            }
            for (int i = 0; i < 4; i++) {
                __m512i xe = _mm512_load_si512(&X[i][blk * 128]);
                __m512i xo = _mm512_load_si512(&X[i][blk * 128 + 64]);
                for (int r = 0; r < 4; r++)
                    acc[i][r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[i][r], lo[r], xe), hi[r], xo);
            }
        }
        for (int i = 0; i < 4; i++)
            for (int r = 0; r < 4; r++) sink += _mm512_reduce_add_epi32(acc[i][r]);
    }
    double t1 = now();
    double ns = (t1 - t0) / (reps * 32.0) * 1e9;
    printf("W4A8 4x4 tile, L1-resident: %.2f ns per 32 vpdpbusd = %.2f G vpdpbusd/s per core (%d)\n", ns, 32 / ns, sink);
    decode_loops();
    return 0;
}
