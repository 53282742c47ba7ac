//! The integer micro-kernels of both aarch64 tiers, generated from one body
//! over the tier's 16-byte dot primitive `$dot16(acc, a, b)` (`acc += Σ a·b`
//! in four i32 lanes, exact): `smull`/`sadalp` for NEON, `sdot` for NEON SDOT.
//! The frame (`qlinear_kernels_core::frame`) owns the loops, tails and
//! output expressions; these compute `WR` weight rows × `XR` activation rows
//! over whole blocks, each weight load serving the `XR` rows and each
//! activation load the `WR` rows.
//!
//! Q4 bytes unpack with a mask and a shift: the frame splits the activations
//! even/odd per 32-column block (`Layout::EvenOdd`), so the low nibbles meet
//! the even columns and the high nibbles the odd ones with no zip.

use std::arch::aarch64::{int32x4_t, uint8x16_t};

/// Defines `$name(p, after)`: `ld1 {$r0-$r3}, [p], #64`, the 64 bytes at
/// `*p` in four registers and `*p` advanced past them, in one instruction.
/// The registers are named (an `ld1` of four takes consecutive ones, which
/// `asm!` cannot allocate), so each loader has its own four and the three
/// can be live at once without moves. `after` is not read: taking it as an
/// operand keeps the load after the instructions that compute it (the
/// previous row's dots), so the compiler neither hoists several rows'
/// loads together nor moves the named registers out of the way.
macro_rules! ld1x4 {
    ($($name:ident: $r0:tt, $r1:tt, $r2:tt, $r3:tt;)+) => {$(
        /// See [`ld1x4!`].
        ///
        /// # Safety
        /// The 64 bytes at `*p` are readable.
        #[inline(always)]
        pub(crate) unsafe fn $name(p: &mut *const u8, after: int32x4_t) -> [uint8x16_t; 4] {
            let (a, b, c, d);
            // SAFETY: the caller's bound; the asm reads only those bytes and
            // writes only the named registers and the pointer.
            unsafe {
                std::arch::asm!(
                    concat!("ld1 {{", $r0, ".16b, ", $r1, ".16b, ", $r2, ".16b, ", $r3, ".16b}}, [{p}], #64 // after {after:v}"),
                    p = inout(reg) *p,
                    after = in(vreg) after,
                    out($r0) a, out($r1) b, out($r2) c, out($r3) d,
                    options(nostack, readonly, preserves_flags)
                );
            }
            [a, b, c, d]
        }
    )+};
}

ld1x4! {
    ld1x4_w: "v16", "v17", "v18", "v19";
    ld1x4_a: "v24", "v25", "v26", "v27";
    ld1x4_b: "v28", "v29", "v30", "v31";
}

macro_rules! int_kernels {
    ($feature:literal, $dot16:ident) => {
        use qlinear_kernels_core::{dot_i8_i8 as tail_i8, dot_i8_q4_biased as tail_biased};

        /// 16 bytes of `v` at `at`, unchecked in release builds: the hot
        /// loops check their rows' lengths once, not every load (the
        /// per-load checks were a third of the SDOT W4A8 loop's instructions).
        ///
        /// # Safety
        /// `T` is one byte and `at + 16 <= v.len()`.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn load16<T: Copy>(v: &[T], at: usize) -> int8x16_t {
            debug_assert!(std::mem::size_of::<T>() == 1 && at + 16 <= v.len());
            // SAFETY: the caller guarantees 16 one-byte elements from `at` inside `v`.
            unsafe { vld1q_s8(v.as_ptr().add(at).cast()) }
        }

        /// The 32 biased nibbles of 16 packed bytes at byte `b`: the low
        /// nibbles are the block's 16 even columns, the high its 16 odd
        /// ones — the order of the family's `EvenOdd` activation layout, so
        /// a mask and a shift are the whole unpack.
        ///
        /// # Safety
        /// `b + 16 <= p.len()`.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn nibbles(p: &[u8], b: usize) -> (int8x16_t, int8x16_t) {
            // SAFETY: the caller's bound.
            let v = vreinterpretq_u8_s8(unsafe { load16(p, b) });
            (
                vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))),
                vreinterpretq_s8_u8(vshrq_n_u8::<4>(v)),
            )
        }

        /// One 32-column block of the W4A8 tile at column `c`.
        ///
        /// # Safety
        /// `x` holds `XR` rows and `w` `WR` rows, every `x` row with at
        /// least `c + 32` columns and every `w` row at least `c / 2 + 16` bytes.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn q4_block<const WR: usize, const XR: usize>(
            a: &mut [[int32x4_t; WR]; XR],
            x: &[&[i8]],
            w: &[&[u8]],
            c: usize,
        ) {
            // SAFETY: the loads stay inside the rows by the caller's bounds (see `# Safety`).
            let nib: [(int8x16_t, int8x16_t); WR] = std::array::from_fn(|q| unsafe { nibbles(w[q], c / 2) });
            for i in 0..XR {
                // SAFETY: the caller's bounds.
                let (even, odd) = unsafe { (load16(x[i], c), load16(x[i], c + 16)) };
                for q in 0..WR {
                    a[i][q] = $dot16($dot16(a[i][q], nib[q].0, even), nib[q].1, odd);
                }
            }
        }

        /// W8A8 micro-kernel: `Σ x·w` of `WR` × `XR` rows over whole blocks of 16.
        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) fn tile_i8<const WR: usize, const XR: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
            let k = x.first().map_or(0, |r| r.len());
            assert!(x.len() == XR && w.len() == WR && acc.len() == WR * XR && k.is_multiple_of(16));
            assert!(x.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() == k));
            let mut a = [[vdupq_n_s32(0); WR]; XR];
            let mut c = 0;
            while c < k {
                // c + 16 <= k (k is a multiple of 16), and every row holds k codes (asserted above).
                // SAFETY: so each 16-byte load at c lies inside its row.
                let wv: [int8x16_t; WR] = std::array::from_fn(|q| unsafe { load16(w[q], c) });
                for i in 0..XR {
                    // SAFETY: as above.
                    let xv = unsafe { load16(x[i], c) };
                    for q in 0..WR {
                        a[i][q] = $dot16(a[i][q], xv, wv[q]);
                    }
                }
                c += 16;
            }
            for i in 0..XR {
                for q in 0..WR {
                    acc[i * WR + q] = vaddvq_s32(a[i][q]);
                }
            }
        }

        /// W4A8 batch micro-kernel (frame tile `4·QUADS` × 4): [`tile_q4`]'s
        /// 4 × 4 tile over each 4 weight rows in turn
        /// (`qlinear_kernels_core::frame::quads_in_turn`), so that the
        /// frame's work per tile call is paid once per `4·QUADS` rows, as on
        /// the x86 and WebAssembly tiers.
        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) fn tile_q4_quads<const QUADS: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
            qlinear_kernels_core::frame::quads_in_turn::<QUADS>(x, w, acc, |x, w, acc| tile_q4::<4, 4>(x, w, acc));
        }

        /// W4A8 micro-kernel: `Σ x·b` (biased, uncorrected) of `WR` × `XR`
        /// rows over whole blocks of 32 columns (16 packed bytes), the
        /// activations split even/odd per block; two blocks per step.
        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) fn tile_q4<const WR: usize, const XR: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
            let k = x.first().map_or(0, |r| r.len());
            assert!(x.len() == XR && w.len() == WR && acc.len() == WR * XR && k.is_multiple_of(32));
            assert!(x.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() == k / 2));
            let mut a = [[vdupq_n_s32(0); WR]; XR];
            // M = 1: four blocks (128 columns) per step through moving
            // pointers, each row's 64 packed bytes and the activations'
            // 128 codes `ld1` of 4 registers with post-index (`ld1x4`):
            // the loop is 6 loads, 32 masks and shifts, 32 dots and the
            // count, 72 instructions for 512 products (LLVM splits the
            // intrinsic `vld1q_u8_x4` into `ldp` pairs, without post-index)
            let mut wp: [*const u8; WR] = std::array::from_fn(|q| w[q].as_ptr());
            let mut xp: *const u8 = x[0].as_ptr().cast();
            let mask = vdupq_n_u8(0x0F);
            let steps = if XR == 1 { k / 128 } else { 0 };
            // (batch tiles keep 32-column blocks: 16 accumulators, 8 nibble
            // and 2 activation registers fit the 32; more columns would spill)
            for _ in 0..steps {
                // Each step reads 64 bytes at each w pointer and 128 at the x
                // pointer, then advances them: after s steps they are 64s and
                // 128s bytes into rows of k / 2 and k (asserted above), and
                // s < k / 128 before the step.
                // SAFETY: so every byte read lies inside its row.
                unsafe {
                    let xa = $crate::int::ld1x4_a(&mut xp, a[0][WR - 1]);
                    let xb = $crate::int::ld1x4_b(&mut xp, a[0][WR - 1]);
                    for q in 0..WR {
                        let b = $crate::int::ld1x4_w(&mut wp[q], if q == 0 { a[0][WR - 1] } else { a[0][q - 1] });
                        let mut t = a[0][q];
                        for (j, xv) in [xa[0], xa[1], xa[2], xa[3], xb[0], xb[1], xb[2], xb[3]]
                            .chunks(2)
                            .enumerate()
                        {
                            let lo = vreinterpretq_s8_u8(vandq_u8(b[j], mask));
                            let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(b[j]));
                            t = $dot16(
                                $dot16(t, lo, vreinterpretq_s8_u8(xv[0])),
                                hi,
                                vreinterpretq_s8_u8(xv[1]),
                            );
                        }
                        a[0][q] = t;
                    }
                }
            }
            let mut c = steps * 128;
            while c < k {
                // SAFETY: c + 32 <= k (k is a multiple of 32), rows asserted above.
                unsafe { q4_block(&mut a, x, w, c) };
                c += 32;
            }
            for i in 0..XR {
                for q in 0..WR {
                    acc[i * WR + q] = vaddvq_s32(a[i][q]);
                }
            }
        }

        /// W4A8-grouped micro-kernel for groups of a multiple of 32: per
        /// group the exact `acc_g` of each of the `WR` × `XR` outputs, then
        /// `sum += (acc_g − 8·Σx_g) as f32 * s_g` in increasing g from +0.
        /// Covers the groups inside the whole blocks; other sizes cover none.
        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) fn tile_grouped<const WR: usize, const XR: usize>(
            x: &[&[i8]],
            sums: &[&[i32]],
            w: &[&[u8]],
            s: &[f32],
            g: usize,
            out: &mut [f32],
        ) -> usize {
            let kb = x.first().map_or(0, |r| r.len());
            assert!(x.len() == XR && sums.len() == XR && w.len() == WR && out.len() == WR * XR);
            out.fill(0.0);
            if g == 0 || !g.is_multiple_of(32) {
                return 0;
            }
            let groups = kb / g;
            assert!(x.iter().all(|r| r.len() == kb) && w.iter().all(|r| r.len() == kb / 2));
            let all = s.len() / WR;
            assert!(sums.iter().all(|r| r.len() == all) && s.len() == WR * all && groups <= all);
            let mut sum = [[0f32; WR]; XR];
            for gi in 0..groups {
                let mut a = [[vdupq_n_s32(0); WR]; XR];
                let mut c = gi * g;
                while c < (gi + 1) * g {
                    // SAFETY: c + 32 <= (gi + 1)·g <= kb; rows asserted above.
                    unsafe { q4_block(&mut a, x, w, c) };
                    c += 32;
                }
                for i in 0..XR {
                    for q in 0..WR {
                        let acc = vaddvq_s32(a[i][q]) - 8 * sums[i][gi];
                        sum[i][q] += acc as f32 * s[q * all + gi];
                    }
                }
            }
            for i in 0..XR {
                for q in 0..WR {
                    out[i * WR + q] = sum[i][q];
                }
            }
            groups
        }

        /// `Σ a·b` of two equal-length int8 rows.
        #[target_feature(enable = $feature)]
        pub(crate) fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
            assert_eq!(a.len(), b.len());
            let kb = a.len() / 16 * 16;
            let mut acc = [0];
            tile_i8::<1, 1>(&[&a[..kb]], &[&b[..kb]], &mut acc);
            acc[0] + tail_i8(&a[kb..], &b[kb..])
        }

        /// `Σ x·q` of a row against a packed biased Q4 row.
        #[target_feature(enable = $feature)]
        pub(crate) fn dot_i8_q4(x: &[i8], p: &[u8]) -> i32 {
            assert_eq!(p.len(), x.len().div_ceil(2));
            let kb = x.len() / 32 * 32;
            let split = qlinear_kernels_core::frame::layout::split_even_odd_i8(&x[..kb], 32);
            let mut acc = [0];
            tile_q4::<1, 1>(&[&split], &[&p[..kb / 2]], &mut acc);
            acc[0] + tail_biased(&x[kb..], &p[kb / 2..]) - 8 * x.iter().map(|&v| i32::from(v)).sum::<i32>()
        }
    };
}

/// The integer families of an aarch64 tier on the frame: its registered
/// micro-kernels (`entry::…`) and their tiles — 4 weight rows per pass for
/// M = 1 sharing each activation load (W8A8 16, its 16 accumulators and a
/// weight and an activation register fitting the 32), 4 × 4 for batches
/// (16 accumulators, 4 + 8 operand registers of the 32), single rows for
/// what is left over.
macro_rules! int_families {
    () => {
        use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileGroupedQ4, TileI8I8, TileI8Q4};

        const INT_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(4, 4), Tile::new(1, 4)];

        /// W8A8's kernels in its tiles' order, with `tile16` its 16 × 1
        /// decode tile (the tier's, or a mutant's).
        pub(crate) const fn w8a8_kernels(tile16: TileI8I8) -> [TileI8I8; 5] {
            [
                entry::w8a8_1x1,
                entry::w8a8_4x1,
                tile16,
                entry::w8a8_4x4,
                entry::w8a8_1x4,
            ]
        }

        /// W8A8 decodes in 16 × 1 tiles (the frame's work a tile paid per
        /// 16 weight rows, each activation load serving 16).
        pub(crate) const W8A8: Family<TileI8I8> = Family {
            shapes: Shapes {
                tiles: &[
                    Tile::ONE,
                    Tile::new(4, 1),
                    Tile::new(16, 1),
                    Tile::new(4, 4),
                    Tile::new(1, 4),
                ],
                chunk: 0,
            },
            kernels: &w8a8_kernels(entry::w8a8_16x1),
            block: 16,
            layout: Layout::Natural,
            scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
        };
        /// W4A8 also batches 16 weight rows a tile call (the 4 × 4 tile in turn).
        pub(crate) const W4A8: Family<TileI8Q4> = Family {
            shapes: Shapes {
                tiles: &[
                    Tile::ONE,
                    Tile::new(4, 1),
                    Tile::new(4, 4),
                    Tile::new(16, 4),
                    Tile::new(1, 4),
                ],
                chunk: 64,
            },
            kernels: &[
                entry::w4a8_1x1,
                entry::w4a8_4x1,
                entry::w4a8_4x4,
                entry::w4a8_16x4,
                entry::w4a8_1x4,
            ],
            block: 32,
            layout: Layout::EvenOdd,
            scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
        };
        pub(crate) const W4A8_GROUPED: Family<TileGroupedQ4> = Family {
            shapes: Shapes {
                tiles: INT_TILES,
                chunk: 16,
            },
            kernels: &[
                entry::grouped_1x1,
                entry::grouped_4x1,
                entry::grouped_4x4,
                entry::grouped_1x4,
            ],
            block: 32,
            layout: Layout::EvenOdd,
            scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
        };
    };
}

/// The safe entries of the integer micro-kernels (see `int_families!`).
macro_rules! int_entries {
    () => {
        qlinear_kernels_core::safe_entries! {
            dot_i8_i8 => int::dot_i8_i8: dot_i8,
            dot_i8_q4 => int::dot_i8_q4: dot_q4,
            w8a8_1x1 => int::tile_i8::<1, 1>: tile_i8,
            w8a8_4x1 => int::tile_i8::<4, 1>: tile_i8,
            w8a8_16x1 => int::tile_i8::<16, 1>: tile_i8,
            w8a8_4x4 => int::tile_i8::<4, 4>: tile_i8,
            w8a8_1x4 => int::tile_i8::<1, 4>: tile_i8,
            w4a8_1x1 => int::tile_q4::<1, 1>: tile_q4,
            w4a8_4x1 => int::tile_q4::<4, 1>: tile_q4,
            w4a8_4x4 => int::tile_q4::<4, 4>: tile_q4,
            w4a8_16x4 => int::tile_q4_quads::<4>: tile_q4,
            w4a8_1x4 => int::tile_q4::<1, 4>: tile_q4,
            grouped_1x1 => int::tile_grouped::<1, 1>: tile_grouped,
            grouped_4x1 => int::tile_grouped::<4, 1>: tile_grouped,
            grouped_4x4 => int::tile_grouped::<4, 4>: tile_grouped,
            grouped_1x4 => int::tile_grouped::<1, 4>: tile_grouped,
        }
    };
}

/// Test code of the tiers' mutants: the W4A8 16 × 4 batch tile of tier
/// module `$tier` (its 4 × 4 tile over each 4 weight rows in turn) done
/// wrong, each quad's sums stored as the 4 × 4 tile lays them out (a block
/// of 16 at `16·p`, instead of at the quad's columns of the 16-wide rows),
/// and the tier's own 16 × 4 tile on the same harness: `mod $wrong` and
/// `mod $right`, each with a `TABLE` whose W4A8 runs on the frame. The
/// caller runs them only where the tier's features are detected.
#[cfg(test)]
macro_rules! quads_mutant_tables {
    ($tier:ident, $wrong:ident, $right:ident) => {
        fn quads_as_4x4(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
            for (p, block) in acc.chunks_exact_mut(16).enumerate() {
                // SAFETY: the tests run these tables only after detecting
                // the tier's features.
                unsafe { crate::$tier::int::tile_q4::<4, 4>(x, &w[4 * p..4 * p + 4], block) }
            }
        }

        fn quads_right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
            // SAFETY: as above.
            unsafe { crate::$tier::int::tile_q4_quads::<4>(x, w, acc) }
        }

        /// The tier's 1 × 1 and 1 × 4 tiles, for the rows the 16 × 4 tile
        /// leaves.
        fn single(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
            // SAFETY: as above.
            unsafe {
                match x.len() {
                    1 => crate::$tier::int::tile_q4::<1, 1>(x, w, acc),
                    _ => crate::$tier::int::tile_q4::<1, 4>(x, w, acc),
                }
            }
        }

        qlinear_kernels_core::w4a8_on_frame! {
            tiles: &[Tile::ONE, Tile::new(16, 4), Tile::new(1, 4)],
            chunk: 64,
            block: 32,
            layout: EvenOdd;
            $wrong => &[single as TileI8Q4, quads_as_4x4, single],
            $right => &[single as TileI8Q4, quads_right, single],
        }
    };
}

/// Test code of the tiers' mutants: a tier's W8A8 16 × 1 decode tile
/// (`$tile`, its entry) done wrong, its last 4 rows' sums copied from the 4
/// before (an accumulator register reused), and done right, each in the
/// tier's W8A8 family (`$family`, whose kernels `$kernels(tile16)` lists
/// with the given 16 × 1 tile): `mod $wrong` and `mod $right`, each with a
/// `TABLE` whose W8A8 runs on the frame. The caller runs them only where
/// the tier's features are detected.
#[cfg(test)]
macro_rules! w8a8_16x1_mutant_tables {
    ($family:path, $kernels:path, $tile:path, $wrong:ident, $right:ident) => {
        fn w8a8_16x1_reused(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
            $tile(x, w, acc);
            acc.copy_within(8..12, 12);
        }
        w8a8_16x1_mutant_tables!(@table $family, $kernels, super::w8a8_16x1_reused, $wrong);
        w8a8_16x1_mutant_tables!(@table $family, $kernels, $tile, $right);
    };
    (@table $family:path, $kernels:path, $tile:path, $module:ident) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            use qlinear_kernels_core::abi::tile::{Family, TileI8I8};
            const W8A8: Family<TileI8I8> = Family {
                kernels: &{
                    const K: [TileI8I8; 5] = $kernels($tile);
                    K
                },
                ..$family
            };
            qlinear_kernels_core::frame_gemms! { w8a8: W8A8; ..qlinear_kernels_core::GemmShapes::SINGLE }
            pub(crate) static TABLE: qlinear_kernels_core::KernelTable = qlinear_kernels_core::KernelTable {
                name: stringify!($module),
                gemm_w8a8,
                shapes: SHAPES,
                ..qlinear_kernels_core::SCALAR
            };
        }
    };
}
