//! `smmla` micro-kernels. A tile of `WR <= 2·WP` weight rows × `XR <= 2·XP`
//! activation rows keeps two banks of `WP × XP` accumulators (added at the
//! end, see [`sum_banks`]), each the 2 × 2 block
//! `[w_a·x_b, w_a·x_b', w_a'·x_b, w_a'·x_b']` of a weight-row pair and an
//! activation-row pair. An odd weight row is paired with itself and an odd
//! activation row with its successor (or zeros); the extra lanes are dropped.
//! Integer sums: exact, in any order.

use std::arch::aarch64::*;
use std::arch::asm;

/// `acc += A·Bᵀ` for `A` the 2 × 8 rows of `a` and `B` those of `b`: lane
/// `2i + j` gains `Σ a[8i..8i+8] · b[8j..8j+8]`, 8 exact products each.
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn mmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: `smmla` only reads the two vector registers and updates `acc`;
    // FEAT_I8MM is enabled for this function and detected before dispatch.
    unsafe {
        asm!("smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b,
             options(pure, nomem, nostack));
    }
    acc
}

/// 16 bytes of `v` at `at`, unchecked in release builds (the tiles check
/// their rows' lengths once).
///
/// # Safety
/// `T` is one byte and `at + 16 <= v.len()`.
#[inline]
#[target_feature(enable = "neon,i8mm")]
unsafe fn load16<T: Copy>(v: &[T], at: usize) -> int8x16_t {
    debug_assert!(std::mem::size_of::<T>() == 1 && at + 16 <= v.len());
    // SAFETY: the caller guarantees 16 one-byte elements from `at` inside `v`.
    unsafe { vld1q_s8(v.as_ptr().add(at).cast()) }
}

/// The two accumulator banks added. Each block keeps two banks so that
/// consecutive `smmla`s on it are independent: one chain of 2 (W8A8) or 4
/// (W4A8) dependent `smmla`s per step held the loop at their latency on
/// Neoverse V1 (llvm-mca: 6.07 and 12.09 cycles per step).
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn sum_banks<const WP: usize, const XP: usize>(
    a: [[int32x4_t; XP]; WP],
    b: [[int32x4_t; XP]; WP],
) -> [[int32x4_t; XP]; WP] {
    std::array::from_fn(|p| std::array::from_fn(|j| vaddq_s32(a[p][j], b[p][j])))
}

/// Lane `2·(q % 2) + i % 2` of block `[q / 2][i / 2]`: output (i, q).
#[inline]
#[target_feature(enable = "neon,i8mm")]
fn write<const WP: usize, const XP: usize>(a: &[[int32x4_t; XP]; WP], wr: usize, xr: usize, acc: &mut [i32]) {
    for p in 0..WP {
        for j in 0..XP {
            let mut lanes = [0i32; 4];
            // SAFETY: a 16-byte store into a local 4-lane array.
            unsafe { vst1q_s32(lanes.as_mut_ptr(), a[p][j]) };
            for (l, &v) in lanes.iter().enumerate() {
                let (q, i) = (2 * p + l / 2, 2 * j + l % 2);
                if q < wr && i < xr {
                    acc[i * wr + q] = v;
                }
            }
        }
    }
}

/// W8A8 micro-kernel: `Σ x·w` over whole blocks of 16 columns. `x[d]` is
/// the `Pairs8` row pair starting at activation row d (`2·k` bytes); the
/// tile uses pairs 0, 2, 4, ….
#[inline]
#[target_feature(enable = "neon,i8mm")]
pub(crate) fn tile_w8a8<const WP: usize, const XP: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    let (wr, xr) = (w.len(), x.len());
    assert!(wr >= 1 && wr <= 2 * WP && xr >= 1 && xr <= 2 * XP && acc.len() == wr * xr);
    let k = w[0].len();
    assert!(k.is_multiple_of(16) && w.iter().all(|r| r.len() == k) && x.iter().all(|r| r.len() == 2 * k));
    let pair = |p: usize| (w[2 * p], w[(2 * p + 1).min(wr - 1)]);
    let (mut a, mut b) = ([[vdupq_n_s32(0); XP]; WP], [[vdupq_n_s32(0); XP]; WP]);
    let mut c = 0;
    while c < k {
        let wz: [(int8x16_t, int8x16_t); WP] = std::array::from_fn(|p| {
            let (w0, w1) = pair(p.min((wr - 1) / 2));
            // SAFETY: c + 16 <= k and every w row holds k codes (asserted above).
            let (v0, v1) = unsafe { (vreinterpretq_s64_s8(load16(w0, c)), vreinterpretq_s64_s8(load16(w1, c))) };
            (
                vreinterpretq_s8_s64(vzip1q_s64(v0, v1)),
                vreinterpretq_s8_s64(vzip2q_s64(v0, v1)),
            )
        });
        for j in 0..XP {
            let xp = x[(2 * j).min(xr - 1)];
            // SAFETY: 2c + 32 <= 2k, the pair row's length (asserted above).
            let (xl, xh) = unsafe { (load16(xp, 2 * c), load16(xp, 2 * c + 16)) };
            for p in 0..WP {
                a[p][j] = mmla(a[p][j], wz[p].0, xl);
                b[p][j] = mmla(b[p][j], wz[p].1, xh);
            }
        }
        c += 16;
    }
    write(&sum_banks(a, b), wr, xr, acc);
}

/// W4A8 micro-kernel: `Σ x·b` (biased, uncorrected) over whole blocks of 32
/// columns, activations in `Layout::Pairs8EvenOdd`. Zipping two rows' 16
/// packed bytes 8 at a time gives each 16 columns' bytes of both rows; the
/// mask is then the 2 × 8 operand of their even columns and the shift that
/// of their odd ones, in the layout's order: per 32 columns and row pair, 2
/// zips, 2 masks and 2 shifts.
#[inline]
#[target_feature(enable = "neon,i8mm")]
pub(crate) fn tile_w4a8<const WP: usize, const XP: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    let (wr, xr) = (w.len(), x.len());
    assert!(wr >= 1 && wr <= 2 * WP && xr >= 1 && xr <= 2 * XP && acc.len() == wr * xr);
    let k = 2 * w[0].len();
    assert!(k.is_multiple_of(32) && w.iter().all(|r| 2 * r.len() == k) && x.iter().all(|r| r.len() == 2 * k));
    let mask = vdupq_n_u8(0x0F);
    let (mut a, mut b) = ([[vdupq_n_s32(0); XP]; WP], [[vdupq_n_s32(0); XP]; WP]);
    let mut c = 0;
    while c < k {
        let wz: [[int8x16_t; 4]; WP] = std::array::from_fn(|p| {
            let p = p.min((wr - 1) / 2);
            let (w0, w1) = (w[2 * p], w[(2 * p + 1).min(wr - 1)]);
            // SAFETY: c / 2 + 16 <= k / 2, every packed row's length (asserted above).
            let (b0, b1) = unsafe {
                (
                    vreinterpretq_u64_s8(load16(w0, c / 2)),
                    vreinterpretq_u64_s8(load16(w1, c / 2)),
                )
            };
            let mut out = [vdupq_n_s8(0); 4];
            for (h, t) in [vzip1q_u64(b0, b1), vzip2q_u64(b0, b1)].into_iter().enumerate() {
                let t = vreinterpretq_u8_u64(t);
                out[2 * h] = vreinterpretq_s8_u8(vandq_u8(t, mask));
                out[2 * h + 1] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(t));
            }
            out
        });
        for j in 0..XP {
            let xp = x[(2 * j).min(xr - 1)];
            for s in 0..4 {
                // SAFETY: 2c + 64 <= 2k, the pair row's length (asserted above).
                let xv = unsafe { load16(xp, 2 * c + 16 * s) };
                for p in 0..WP {
                    // even operands into one bank, odd into the other
                    if s % 2 == 0 {
                        a[p][j] = mmla(a[p][j], wz[p][s], xv);
                    } else {
                        b[p][j] = mmla(b[p][j], wz[p][s], xv);
                    }
                }
            }
        }
        c += 32;
    }
    write(&sum_banks(a, b), wr, xr, acc);
}
