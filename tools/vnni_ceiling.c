/* The vpdpbusd ceiling of one core, for docs/BENCHMARKS.md: the W4A8 4 x 4
 * register tile's inner loop (4 packed rows unpacked by mask and shift, 4
 * activation rows, 32 vpdpbusd per 64 packed bytes) on L1-resident data, and
 * the same 16 accumulators fed by plain loads. Not part of the build:
 *
 *   gcc -O3 -march=native tools/vnni_ceiling.c -o /tmp/vnni_ceiling && /tmp/vnni_ceiling
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((aligned(64))) static uint8_t W[4][2048];
__attribute__((aligned(64))) static int8_t X[4][4096];

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
    return 0;
}
