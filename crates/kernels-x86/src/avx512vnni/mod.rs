//! The AVX-512 VNNI tier: integer kernels on `vpdpbusd` (u8 × i8 quads summed
//! straight into i32 lanes, no i16 step); W4A16 with four rows' spec lanes per
//! 512-bit register and a `vpermps` nibble lookup; grouped W4A8 (groups of a
//! multiple of 32) with four rows' sub-blocks per register. W8A16 and the
//! activation quantizer are the AVX2 ones.

use std::arch::x86_64::*;

use qlinear_kernels_scalar::frame::{Shapes, Tile};
use qlinear_kernels_scalar::{GemmShapes, KernelTable};

use crate::avx2;

mod float;
mod q4;
mod q4_grouped;
mod q8;

pub(crate) fn detected() -> bool {
    avx2::detected()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// SAFETY (for every entry): reachable only through `TABLE`, which
/// `crate::avx512vnni_table` returns only when `detected()` confirmed AVX-512
/// F/BW/VL/VNNI, AVX2 and F16C; the kernels assert what they rely on.
mod entry {
    use super::*;
    qlinear_kernels_scalar::safe_entries! {
        dot_i8_i8 => q8::dot_i8_i8: dot_i8,
        dot_i8_q4 => q4::dot_i8_q4: dot_q4,
        gemm_w8a8 => q8::gemm_w8a8: q8q8,
        gemm_w4a8 => q4::gemm_w4a8: q8q4,
        gemm_w4a8_grouped => q4_grouped::gemm_w4a8_grouped: q8q4,
        gemm_w4a16 => float::gemm_w4a16: f32q4,
        gemm_w4a16_grouped => float::gemm_w4a16_grouped: f32q4,
    }
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "avx512-vnni",
    dot_i8_i8: entry::dot_i8_i8,
    dot_i8_q4: entry::dot_i8_q4,
    gemm_w8a8: entry::gemm_w8a8,
    gemm_w4a8: entry::gemm_w4a8,
    gemm_w4a8_grouped: entry::gemm_w4a8_grouped,
    gemm_w4a16: entry::gemm_w4a16,
    gemm_w4a16_grouped: entry::gemm_w4a16_grouped,
    shapes: GemmShapes {
        w8a8: QUADS,
        w4a8: QUADS,
        w4a8_grouped: QUADS,
        w4a16: QUADS,
        w4a16_grouped: QUADS,
        ..avx2::TABLE.shapes
    },
    ..avx2::TABLE
};

/// The tiles of this tier's own sweeps: 4 weight rows × 4 activation rows
/// for batches, 4 × 1 for M = 1 and leftover activation rows, and (W8A8, W4A8)
/// single leftover weight rows; the quad kernels repeat the last weight row
/// instead.
const QUADS: Shapes = Shapes {
    tiles: &[Tile::ONE, Tile::new(4, 1), Tile::new(4, 4), Tile::new(1, 4)],
    chunk: 0,
};

/// Sum of the 16 i32 lanes.
#[inline]
#[target_feature(enable = "avx512f")]
fn hsum_epi32(v: __m512i) -> i32 {
    _mm512_reduce_add_epi32(v)
}

/// Which cache lines of the next block a sweep prefetches, when a block of
/// weight rows is swept `passes` times (once per activation tile): sweep
/// `phase` takes lines `phase`, `phase + passes`, … — one turn per line, counted
/// rather than computed (a division per line would cost more than the hint).
struct SweepPrefetch {
    turn: usize,
    phase: usize,
    passes: usize,
}

impl SweepPrefetch {
    fn new((phase, passes): (usize, usize)) -> Self {
        SweepPrefetch { turn: 0, phase, passes }
    }

    /// Starts the count `lines` lines in (a sweep over a later chunk of K).
    fn skip(&mut self, lines: usize) {
        self.turn = (self.turn + lines) % self.passes;
    }

    /// Advances one line; true when that line is this sweep's to prefetch.
    #[inline]
    fn take(&mut self) -> bool {
        let mine = self.turn == self.phase;
        self.turn += 1;
        if self.turn == self.passes {
            self.turn = 0;
        }
        mine
    }
}

/// Activation rows copied so that each starts on a 64-byte boundary: a batch
/// tile's 64-byte activation loads then never straddle two cache lines (worth
/// about 15 % on the W4A8 tile here).
struct AlignedRows {
    buf: Vec<__m512i>,
    stride: usize,
    len: usize,
}

impl AlignedRows {
    /// `m` rows of `len` bytes, row `i` written by `fill(i, row)`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn new(m: usize, len: usize, mut fill: impl FnMut(usize, &mut [i8])) -> Self {
        let stride = len.div_ceil(64) * 64;
        let mut buf = vec![_mm512_setzero_si512(); m * stride / 64];
        // SAFETY: `buf` owns m · stride initialized bytes (64 per element),
        // and i8 has neither alignment needs nor invalid bit patterns.
        let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<i8>(), m * stride) };
        for i in 0..m {
            fill(i, &mut bytes[i * stride..i * stride + len]);
        }
        AlignedRows { buf, stride, len }
    }

    fn row(&self, i: usize) -> &[i8] {
        assert!(i * self.stride + self.len <= self.buf.len() * 64);
        // SAFETY: the assert keeps the view inside `buf`'s initialized bytes.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<i8>().add(i * self.stride), self.len) }
    }
}
