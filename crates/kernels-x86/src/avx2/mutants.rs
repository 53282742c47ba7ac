//! Deliberately wrong AVX2 kernels — the plausible mistakes of a `maddubs`
//! implementation — must fail the selftest's proof function.

use std::arch::x86_64::*;

use qlinear_kernels_core::abi::tile::{Shapes, Tile};
use qlinear_kernels_core::proof::mutants::{evenodd64_dot, first_failure};
use qlinear_kernels_core::proof::{default_census, prove_kernel_table};
use qlinear_kernels_core::KernelFamily;
use qlinear_kernels_core::{dot_i8_q4_biased, ActivationsQ8, GemmShapes, KernelTable, OutputTile, SCALAR};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};

/// Keeps the i16 pair sums in a saturating i16 accumulator instead of widening
/// to i32 every block.
#[target_feature(enable = "avx2")]
fn saturating_i16_accumulator(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = _mm256_setzero_si256();
    let mut c = 0;
    while c + 32 <= a.len() {
        // SAFETY: c + 32 <= a.len() = b.len() (asserted by the caller).
        unsafe {
            let x = _mm256_loadu_si256(a.as_ptr().add(c).cast());
            let w = _mm256_loadu_si256(b.as_ptr().add(c).cast());
            acc = _mm256_adds_epi16(acc, _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(w, x)));
        }
        c += 32;
    }
    let wide = _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
    let mut lanes = [0i32; 8];
    // SAFETY: a 32-byte store into a local [i32; 8].
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), wide) };
    lanes.iter().sum::<i32>() + (SCALAR.dot_i8_i8)(&a[c..], &b[c..])
}

/// Feeds the signed activation to `maddubs`'s unsigned operand (no sign trick).
#[target_feature(enable = "avx2")]
fn no_sign_trick(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = _mm256_setzero_si256();
    let mut c = 0;
    while c + 32 <= a.len() {
        // SAFETY: c + 32 <= a.len() = b.len() (asserted by the caller).
        unsafe {
            let x = _mm256_loadu_si256(a.as_ptr().add(c).cast());
            let w = _mm256_loadu_si256(b.as_ptr().add(c).cast());
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), _mm256_set1_epi16(1));
            acc = _mm256_add_epi32(acc, p);
        }
        c += 32;
    }
    let mut lanes = [0i32; 8];
    // SAFETY: a 32-byte store into a local [i32; 8].
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
    lanes.iter().sum::<i32>() + (SCALAR.dot_i8_i8)(&a[c..], &b[c..])
}

fn call_saturating(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    // SAFETY: the test runs this only after detecting AVX2.
    unsafe { saturating_i16_accumulator(a, b) }
}

fn call_no_sign(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    // SAFETY: the test runs this only after detecting AVX2.
    unsafe { no_sign_trick(a, b) }
}

#[test]
fn saturating_and_unsigned_avx2_variants_fail_the_proof() {
    if !is_x86_feature_detected!("avx2") {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    let m = first_failure(
        &KernelTable {
            dot_i8_i8: call_saturating,
            ..SCALAR
        },
        KernelFamily::DotI8I8,
    )
    .expect("a saturating i16 accumulator must fail");
    assert_eq!(m.k, 64, "two full blocks of ±127 overflow i16 first: {m}");
    let m = first_failure(
        &KernelTable {
            dot_i8_i8: call_no_sign,
            ..SCALAR
        },
        KernelFamily::DotI8I8,
    )
    .expect("maddubs without the sign trick must fail");
    assert_eq!(m.k, 32, "{m}");
}

#[test]
fn the_real_x86_tables_pass() {
    // both VNNI tables, whichever this CPU's vendor is handed
    let vnni =
        crate::avx512vnni::detected().then_some([&crate::avx512vnni::TABLE, &crate::avx512vnni::TABLE_SINGLE_PANELS]);
    let tables = [crate::avx2_table()]
        .into_iter()
        .flatten()
        .chain(vnni.into_iter().flatten());
    for table in tables {
        let proofs = prove_kernel_table(table, &default_census());
        assert!(
            proofs.iter().all(|p| p.mismatch.is_none()),
            "{}: {proofs:?}",
            table.name
        );
    }
}

/// W4A8 per channel with a 4-row batch tile done wrong: every row of a tile
/// is corrected by the first row's `−8·Σx` (a hoisted load). Rows past the
/// tiles are right, so only a proof whose random rows reach a tile can fail
/// it. On the frame the correction is the frame's, so a micro-kernel can no
/// longer make this mistake; a GEMM written outside the frame still can.
fn tile_shares_first_correction(
    x: &ActivationsQ8<'_>,
    w: &QuantizedMatrixQ4,
    rows: std::ops::Range<usize>,
    y: &mut OutputTile<'_>,
) {
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("per-channel scales")
    };
    let tiled = x.m / 4 * 4;
    for (j, r) in rows.enumerate() {
        for i in 0..x.m {
            let from = if i < tiled { i / 4 * 4 } else { i };
            let acc = dot_i8_q4_biased(x.row(i), w.row_packed(r)) - 8 * x.row_sums(from)[0];
            y.set(i, j, acc as f32 * (x.scales[i] * s[r]));
        }
    }
}

const BATCH_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(2, 4), Tile::new(1, 4)];

#[test]
fn a_shared_correction_in_the_batch_tile_fails_the_proof() {
    first_failure(
        &KernelTable {
            gemm_w4a8: tile_shares_first_correction,
            shapes: GemmShapes {
                w4a8: Shapes {
                    tiles: BATCH_TILES,
                    chunk: 64,
                },
                ..GemmShapes::SINGLE
            },
            ..SCALAR
        },
        KernelFamily::W4A8,
    )
    .expect("one row's correction applied to the tile must fail");
}

/// W4A16 with AVX2's in-lane unpack (each lane shifts its own nibble out of
/// the broadcast 4 bytes, then `0x4B00_0000 | n` less `2^23 + 8`) done
/// wrong: the shifts take each byte's high nibble as the earlier column,
/// the classic nibble-order slip. Activations in column order, as the real
/// tier lays them out.
#[target_feature(enable = "avx2")]
fn w4a16_high_nibble_first(x: &[f32], w: &[u8], k: usize) -> f32 {
    let shifts = _mm256_setr_epi32(4, 0, 12, 8, 20, 16, 28, 24);
    let mut acc = _mm256_setzero_ps();
    for c in 0..k.div_ceil(8) {
        let mut word = [0x88u8; 4];
        let bytes = &w[c * 4..w.len().min(c * 4 + 4)];
        word[..bytes.len()].copy_from_slice(bytes);
        let n = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(i32::from_le_bytes(word)), shifts),
            _mm256_set1_epi32(0x0F),
        );
        let codes = _mm256_sub_ps(
            _mm256_castsi256_ps(_mm256_or_si256(n, _mm256_set1_epi32(0x4B00_0000))),
            _mm256_set1_ps(8_388_616.0),
        );
        let chunk = &x[c * 8..c * 8 + 8];
        // SAFETY: `chunk` holds exactly 8 floats.
        let xv = unsafe { _mm256_loadu_ps(chunk.as_ptr()) };
        acc = _mm256_add_ps(acc, _mm256_mul_ps(xv, codes));
    }
    let mut lanes = [0f32; 8];
    // SAFETY: a 32-byte store into a local [f32; 8].
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    qlinear_kernels_core::lane_tree(lanes)
}

fn tile_w4a16_high_nibble_first(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    assert!(
        std::arch::is_x86_feature_detected!("avx2"),
        "the test checks for AVX2 first"
    );
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            // SAFETY: AVX2 is present (asserted above).
            out[i * w.len() + q] = unsafe { w4a16_high_nibble_first(xr, wr, k) };
        }
    }
}

mod w4a16_mutant {
    use super::*;
    use qlinear_kernels_core::abi::tile::{Family, Layout, TileF32Q4};
    pub(crate) const W4A16: Family<TileF32Q4> = Family {
        shapes: Shapes {
            tiles: &[Tile::ONE],
            chunk: 1,
        },
        kernels: &[tile_w4a16_high_nibble_first],
        block: 8,
        layout: Layout::Chunked,
        scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
    };
    qlinear_kernels_core::frame_gemms! { w4a16: W4A16; ..GemmShapes::SINGLE }
}

#[test]
fn a_nibble_order_slip_in_the_w4a16_unpack_fails_the_proof() {
    if !std::arch::is_x86_feature_detected!("avx2") {
        eprintln!("no AVX2: the mutant cannot run here");
        return;
    }
    first_failure(
        &KernelTable {
            gemm_w4a16: w4a16_mutant::gemm_w4a16,
            shapes: w4a16_mutant::SHAPES,
            ..SCALAR
        },
        KernelFamily::W4A16,
    )
    .expect("codes unpacked high nibble first must fail");
}

/// The 8 lane trees of a W4A16 grouped batch tile done the common `hsum`
/// way: the two 128-bit halves added first, then two `hadd`s, which forms
/// `((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7))` instead of the spec's tree.
#[target_feature(enable = "avx2")]
fn trees_halves_first(lanes: &[[f32; 8]]) -> Vec<f32> {
    lanes
        .iter()
        .map(|l| {
            // SAFETY: `l` holds exactly 8 floats.
            let v = unsafe { _mm256_loadu_ps(l.as_ptr()) };
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let h = _mm_hadd_ps(h, h);
            _mm_cvtss_f32(_mm_hadd_ps(h, h))
        })
        .collect()
}

fn tile_w4a16_grouped_halves_first(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) {
    assert!(
        std::arch::is_x86_feature_detected!("avx2"),
        "the test checks for AVX2 first"
    );
    // SAFETY: AVX2 is present (asserted above).
    w4a16_grouped_with(x, w, s, g, out, |l| unsafe { trees_halves_first(l) }, |j, wr, _| j % wr)
}

/// The AVX2 tile's running sums with each output's scale read from the
/// transposed lane (output `t · wr + q` scaled by row `j / xr` instead of
/// `j % wr`): right on single rows and square tiles, wrong on 2 × 4.
fn tile_w4a16_grouped_scales_transposed(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) {
    let spec = |l: &[[f32; 8]]| l.iter().map(|l| qlinear_kernels_core::lane_tree(*l)).collect();
    w4a16_grouped_with(x, w, s, g, out, spec, |j, _, xr| j / xr)
}

/// W4A16 grouped over any tile: the spec's lanes in plain Rust, the trees by
/// `trees`, output `j`'s scale from weight row `row(j, wr, xr)`.
fn w4a16_grouped_with(
    x: &[&[f32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
    trees: impl Fn(&[[f32; 8]]) -> Vec<f32>,
    row: impl Fn(usize, usize, usize) -> usize,
) {
    let groups = s.len() / w.len();
    let per_group = g.div_ceil(8) * 8;
    out.fill(0.0);
    for gi in 0..groups {
        let mut lanes = vec![[0f32; 8]; x.len() * w.len()];
        for (i, xr) in x.iter().enumerate() {
            for (q, wr) in w.iter().enumerate() {
                for c in 0..g {
                    let col = gi * g + c;
                    let nibble = (wr[col / 2] >> (4 * (col % 2))) & 0x0F;
                    let code = f32::from(nibble) - 8.0;
                    let l = &mut lanes[i * w.len() + q][c % 8];
                    *l += xr[gi * per_group + c] * code;
                }
            }
        }
        for (j, t) in trees(&lanes).iter().enumerate() {
            out[j] += s[row(j, w.len(), x.len()) * groups + gi] * t;
        }
    }
}

/// A W4A16 grouped table on the frame whose every tile is `$tile`, over the
/// batch tiles (so the proof's rows reach the 2 × 4 tile), as the test `$test`
/// that expects the proof to fail with `$why`.
macro_rules! grouped_w4a16_mutant {
    ($module:ident, $tile:ident, $test:ident, $why:literal) => {
        mod $module {
            use super::*;
            use qlinear_kernels_core::abi::tile::{Family, Layout, TileF32Q4Grouped};
            pub(crate) const W4A16_GROUPED: Family<TileF32Q4Grouped> = Family {
                shapes: Shapes {
                    tiles: BATCH_TILES,
                    chunk: 16,
                },
                kernels: &{
                    const K: [TileF32Q4Grouped; 4] = [$tile; 4];
                    K
                },
                block: 8,
                layout: Layout::Chunked,
                scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
            };
            qlinear_kernels_core::frame_gemms! { w4a16_grouped: W4A16_GROUPED; ..GemmShapes::SINGLE }
        }

        #[test]
        fn $test() {
            if !std::arch::is_x86_feature_detected!("avx2") {
                eprintln!("no AVX2: the mutant cannot run here");
                return;
            }
            first_failure(
                &KernelTable {
                    gemm_w4a16_grouped: $module::gemm_w4a16_grouped,
                    shapes: $module::SHAPES,
                    ..SCALAR
                },
                KernelFamily::W4A16Grouped,
            )
            .expect($why);
        }
    };
}

grouped_w4a16_mutant!(
    halves_first,
    tile_w4a16_grouped_halves_first,
    a_halves_first_tree_in_the_w4a16_grouped_tile_fails_the_proof,
    "a tree in another order must fail"
);
grouped_w4a16_mutant!(
    scales_transposed,
    tile_w4a16_grouped_scales_transposed,
    transposed_scales_in_the_w4a16_grouped_tile_fail_the_proof,
    "scales read from the transposed lane must fail"
);

/// The W4A8 16 × 4 batch tile (pairs of weight rows through the 2 × 4
/// tile, in turn) in plain Rust, storing each pair's 2 × 4 sums as the 2 × 4
/// tile lays them out (`slip`: a block of 8 at `8p`) instead of at the
/// pair's columns of the 16-wide rows.
fn w4a8_pairs(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32], slip: bool) {
    let wr = w.len();
    for (i, x) in x.iter().enumerate() {
        for (r, w) in w.iter().enumerate() {
            let sum = (0..x.len() / 64).map(|blk| evenodd64_dot(x, w, blk, 0..32)).sum();
            // pair r / 2, its row r % 2
            let at = if slip && wr > 2 {
                8 * (r / 2) + 2 * i + r % 2
            } else {
                i * wr + r
            };
            acc[at] = sum;
        }
    }
}

fn w4a8_pairs_stored_as_2x4(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_pairs(x, w, acc, true)
}

fn w4a8_pairs_right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_pairs(x, w, acc, false)
}

const PAIR_TILES: &[Tile] = &[Tile::ONE, Tile::new(16, 4), Tile::new(1, 4)];

qlinear_kernels_core::w4a8_on_frame! {
    tiles: PAIR_TILES,
    chunk: 64,
    block: 64,
    layout: EvenOdd;
    pairs_slipped => &[w4a8_pairs_right as TileI8Q4, w4a8_pairs_stored_as_2x4, w4a8_pairs_right],
    pairs_right => &[w4a8_pairs_right as TileI8Q4; 3],
}

#[test]
fn a_w4a8_pairs_tile_storing_each_pair_as_a_2x4_tile_fails_the_proof() {
    first_failure(&pairs_slipped::TABLE, KernelFamily::W4A8)
        .expect("each pair's sums stored as a 2 x 4 block must fail");
    // and the harness is right: the same tile storing at the pair's columns passes
    let right = first_failure(&pairs_right::TABLE, KernelFamily::W4A8);
    assert!(right.is_none(), "{right:?}");
}

/// The 16-row float decode tiles (`float::rows_in_turn`) done wrong, on the
/// tier's own 4 × 1 tiles: W8A16 storing every 4 rows' partials at the
/// first 4 outputs (the other 12 keep what the frame's buffer held), and
/// W4A16 grouped handing every 4 rows the first 4 rows' group scales. The
/// same tiles done right beside them.
mod float_16x1 {
    use super::*;
    use qlinear_kernels_core::abi::tile::{Family, Layout, TileF32Q4Grouped, TileF32Q8};

    fn w8a16_first_outputs(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
        for p in 0..4 {
            crate::avx2::entry::w8a16_4x1(x, &w[4 * p..4 * p + 4], k, &mut out[..4]);
        }
    }

    fn w4a16g_first_scales(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) {
        let groups = s.len() / 16;
        for p in 0..4 {
            let out = &mut out[4 * p..4 * p + 4];
            crate::avx2::entry::w4a16g_4x1(x, &w[4 * p..4 * p + 4], &s[..4 * groups], g, out);
        }
    }

    const TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(16, 1)];

    macro_rules! float_tables {
        ($($module:ident: $w8a16:path, $w4a16g:path;)+) => {$(
            pub(super) mod $module {
                use super::*;
                const W8A16: Family<TileF32Q8> = Family {
                    shapes: Shapes { tiles: TILES, chunk: 16 },
                    kernels: &[crate::avx2::entry::w8a16_1x1, crate::avx2::entry::w8a16_4x1, $w8a16],
                    block: 8,
                    layout: Layout::Chunked,
                    scales_to_f32: crate::avx2::entry::scales_to_f32,
                };
                const W4A16_GROUPED: Family<TileF32Q4Grouped> = Family {
                    shapes: Shapes { tiles: TILES, chunk: 16 },
                    kernels: &[crate::avx2::entry::w4a16g_1x1, crate::avx2::entry::w4a16g_4x1, $w4a16g],
                    block: 8,
                    layout: Layout::Chunked,
                    scales_to_f32: crate::avx2::entry::scales_to_f32,
                };
                qlinear_kernels_core::frame_gemms! {
                    w8a16: W8A16, w4a16_grouped: W4A16_GROUPED; ..GemmShapes::SINGLE
                }
                pub(crate) static TABLE: KernelTable = KernelTable {
                    gemm_w8a16,
                    gemm_w4a16_grouped,
                    shapes: SHAPES,
                    ..SCALAR
                };
            }
        )+};
    }

    float_tables! {
        slipped: w8a16_first_outputs, w4a16g_first_scales;
        right: crate::avx2::entry::w8a16_16x1, crate::avx2::entry::w4a16g_16x1;
    }
}

#[test]
fn the_16_row_float_decode_tiles_fail_the_proof_on_their_slips() {
    if !is_x86_feature_detected!("avx2") {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    use qlinear_kernels_core::proof::mutants::failing;
    assert_eq!(
        failing(&float_16x1::slipped::TABLE),
        vec![KernelFamily::W8A16, KernelFamily::W4A16Grouped]
    );
    assert_eq!(failing(&float_16x1::right::TABLE), vec![]);
}

/// The quantizer's slips (`proof::mutants::assert_quantizer_slips_fail`:
/// this tier's plan, shared with AVX-512's) fail the proof, and the same
/// plan done right passes.
#[test]
fn the_quantizer_fails_the_proof_on_its_slips() {
    qlinear_kernels_core::proof::mutants::assert_quantizer_slips_fail();
}

/// The group sums' slips on this tier's plan (four groups of 32 reduced
/// together; other groups in loads of 32, the codes after them one by one)
/// fail the proof.
#[test]
fn the_group_sums_fail_the_proof_on_their_slips() {
    qlinear_kernels_core::proof::mutants::assert_group_sums_slips_fail::<4, 32>();
}
